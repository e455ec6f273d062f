// Package dwbuf decodes the primitive encodings that DWARF sections, call frame information
// and location expressions share: fixed-size integers in the target's byte order, LEB128
// numbers, NUL-terminated strings, and addresses and section offsets of either width.
//
// A Buf keeps the first failure: after a read runs past the end, Err is set, the offset moves
// to the end (so loops of the form "while Off < len(Data)" terminate) and every later read
// returns zero. A decoder can read a whole record and check Err once.
package dwbuf

import (
	"encoding/binary"
	"errors"
)

// ErrTruncated is the error a Buf records when a read needs more bytes than remain.
var ErrTruncated = errors.New("data truncated")

// Buf is a read position in a byte slice.
type Buf struct {
	Data  []byte
	Off   int
	Order binary.ByteOrder
	Err   error // the first failure, or nil
}

// New returns a Buf reading data from off in byte order order.
func New(data []byte, off int, order binary.ByteOrder) *Buf {
	return &Buf{Data: data, Off: off, Order: order}
}

// Need reports whether n more bytes can be read, recording ErrTruncated if not.
func (b *Buf) Need(n int) bool {
	if b.Err != nil {
		return false
	}
	if n < 0 || b.Off < 0 || b.Off+n > len(b.Data) || b.Off+n < b.Off {
		b.fail()
		return false
	}
	return true
}

func (b *Buf) fail() {
	if b.Err == nil {
		b.Err = ErrTruncated
	}
	b.Off = len(b.Data)
}

// U8 reads one byte.
func (b *Buf) U8() byte {
	if !b.Need(1) {
		return 0
	}
	v := b.Data[b.Off]
	b.Off++
	return v
}

// U16 reads a 2-byte integer.
func (b *Buf) U16() uint16 {
	if !b.Need(2) {
		return 0
	}
	v := b.Order.Uint16(b.Data[b.Off:])
	b.Off += 2
	return v
}

// U32 reads a 4-byte integer.
func (b *Buf) U32() uint32 {
	if !b.Need(4) {
		return 0
	}
	v := b.Order.Uint32(b.Data[b.Off:])
	b.Off += 4
	return v
}

// U64 reads an 8-byte integer.
func (b *Buf) U64() uint64 {
	if !b.Need(8) {
		return 0
	}
	v := b.Order.Uint64(b.Data[b.Off:])
	b.Off += 8
	return v
}

// Addr reads an address of size bytes (4 or 8).
func (b *Buf) Addr(size int) uint64 {
	if size == 4 {
		return uint64(b.U32())
	}
	return b.U64()
}

// Offset reads a section offset: 8 bytes in the 64-bit DWARF format, else 4.
func (b *Buf) Offset(is64 bool) uint64 {
	if is64 {
		return b.U64()
	}
	return uint64(b.U32())
}

// Bytes returns the next n bytes (a sub-slice of Data, not a copy).
func (b *Buf) Bytes(n uint64) []byte {
	if n > uint64(len(b.Data)) || !b.Need(int(n)) {
		b.fail()
		return nil
	}
	v := b.Data[b.Off : b.Off+int(n)]
	b.Off += int(n)
	return v
}

// Skip moves past n bytes.
func (b *Buf) Skip(n int) {
	if b.Need(n) {
		b.Off += n
	}
}

// Uleb reads an unsigned LEB128 number; bits beyond 64 are dropped.
func (b *Buf) Uleb() uint64 {
	var v uint64
	var shift uint
	for {
		if !b.Need(1) {
			return 0
		}
		c := b.Data[b.Off]
		b.Off++
		if shift < 64 {
			v |= uint64(c&0x7f) << shift
		}
		shift += 7
		if c&0x80 == 0 {
			return v
		}
	}
}

// Sleb reads a signed LEB128 number; bits beyond 64 are dropped.
func (b *Buf) Sleb() int64 {
	var v int64
	var shift uint
	for {
		if !b.Need(1) {
			return 0
		}
		c := b.Data[b.Off]
		b.Off++
		if shift < 64 {
			v |= int64(c&0x7f) << shift
		}
		shift += 7
		if c&0x80 == 0 {
			if shift < 64 && c&0x40 != 0 {
				v |= -1 << shift
			}
			return v
		}
	}
}

// CString reads a NUL-terminated string (without the NUL).
func (b *Buf) CString() string {
	start := b.Off
	for {
		if !b.Need(1) {
			return ""
		}
		c := b.Data[b.Off]
		b.Off++
		if c == 0 {
			return string(b.Data[start : b.Off-1])
		}
	}
}
