package dwbuf

import (
	"encoding/binary"
	"errors"
	"testing"
)

// The LEB128 examples of the DWARF 5 specification, §7.6 (tables 7.7 and 7.8).
func TestLEB128SpecExamples(t *testing.T) {
	unsigned := []struct {
		v   uint64
		enc []byte
	}{{2, []byte{2}}, {127, []byte{127}}, {128, []byte{0x80, 1}}, {129, []byte{0x81, 1}},
		{130, []byte{0x82, 1}}, {12857, []byte{0xb9, 100}}}
	for _, c := range unsigned {
		b := New(c.enc, 0, binary.LittleEndian)
		if got := b.Uleb(); got != c.v || b.Err != nil || b.Off != len(c.enc) {
			t.Errorf("Uleb(% x) = %d, off %d, err %v; want %d", c.enc, got, b.Off, b.Err, c.v)
		}
	}
	signed := []struct {
		v   int64
		enc []byte
	}{{2, []byte{2}}, {-2, []byte{0x7e}}, {127, []byte{0xff, 0}}, {-127, []byte{0x81, 0x7f}},
		{128, []byte{0x80, 1}}, {-128, []byte{0x80, 0x7f}}, {129, []byte{0x81, 1}}, {-129, []byte{0xff, 0x7e}}}
	for _, c := range signed {
		b := New(c.enc, 0, binary.LittleEndian)
		if got := b.Sleb(); got != c.v || b.Err != nil || b.Off != len(c.enc) {
			t.Errorf("Sleb(% x) = %d, off %d, err %v; want %d", c.enc, got, b.Off, b.Err, c.v)
		}
	}
}

func TestByteOrders(t *testing.T) {
	data := []byte{1, 2, 3, 4, 5, 6, 7, 8, 'h', 'i', 0}
	le, be := New(data, 0, binary.LittleEndian), New(data, 0, binary.BigEndian)
	if le.U16() != 0x0201 || be.U16() != 0x0102 || le.U16() != 0x0403 || be.U16() != 0x0304 {
		t.Fatal("U16 byte order")
	}
	le.Off, be.Off = 0, 0
	if le.Addr(8) != 0x0807060504030201 || be.Addr(4) != 0x01020304 || be.Offset(false) != 0x05060708 {
		t.Fatal("Addr/Offset widths")
	}
	if s := be.CString(); s != "hi" || be.Off != len(data) || be.Err != nil {
		t.Fatalf("CString = %q, off %d, err %v", s, be.Off, be.Err)
	}
}

// A read past the end records ErrTruncated once, moves to the end and makes later reads zero.
func TestTruncationSticks(t *testing.T) {
	b := New([]byte{0x80, 0x80}, 0, binary.LittleEndian)
	if v := b.Uleb(); v != 0 || !errors.Is(b.Err, ErrTruncated) || b.Off != 2 {
		t.Fatalf("unterminated LEB128: %d, off %d, err %v", v, b.Off, b.Err)
	}
	b = New([]byte{1, 2, 3}, 1, binary.BigEndian)
	if v := b.U32(); v != 0 || b.Err == nil || b.Off != 3 {
		t.Fatalf("short U32: %d, off %d, err %v", v, b.Off, b.Err)
	}
	b.Off = 0
	if b.U8() != 0 || b.Bytes(1) != nil || b.CString() != "" {
		t.Fatal("reads after a failure must return zero values")
	}
	b = New([]byte{1, 2, 3}, 0, binary.BigEndian)
	if b.Bytes(1<<63) != nil || b.Err == nil || b.Off != 3 {
		t.Fatalf("huge Bytes: off %d, err %v", b.Off, b.Err)
	}
	b = New([]byte{1, 2, 3}, 0, binary.BigEndian)
	if b.Skip(-1); b.Err == nil {
		t.Fatal("negative Skip accepted")
	}
}

// FuzzBuf runs a program of reads (chosen by the input's first bytes) over the rest of the
// input: no read may panic or leave the offset outside the data.
func FuzzBuf(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, []byte{0x80, 0x01, 'a', 0, 1, 2, 3, 4, 5, 6, 7, 8})
	f.Add([]byte{7, 8, 9, 5}, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f})
	f.Fuzz(func(t *testing.T, ops, data []byte) {
		for _, order := range []binary.ByteOrder{binary.LittleEndian, binary.BigEndian} {
			b := New(data, 0, order)
			for _, op := range ops {
				switch op % 11 {
				case 0:
					b.U8()
				case 1:
					b.U16()
				case 2:
					b.U32()
				case 3:
					b.U64()
				case 4:
					b.Addr(int(op/11%2*4 + 4))
				case 5:
					b.Offset(op&0x80 != 0)
				case 6:
					if v := b.Bytes(uint64(op / 11)); v != nil && len(v) != int(op/11) {
						t.Fatalf("Bytes(%d) returned %d bytes", op/11, len(v))
					}
				case 7:
					b.Uleb()
				case 8:
					b.Sleb()
				case 9:
					b.CString()
				case 10:
					b.Skip(int(op/11) - 5)
				}
				if b.Off < 0 || b.Off > len(data) {
					t.Fatalf("offset %d outside [0, %d]", b.Off, len(data))
				}
				if b.Err != nil && b.Off != len(data) {
					t.Fatalf("after a failure the offset is %d, not the end %d", b.Off, len(data))
				}
			}
		}
	})
}
