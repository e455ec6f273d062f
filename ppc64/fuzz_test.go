package ppc64

import (
	"encoding/binary"
	"testing"
)

// FuzzTrap checks the trap decoder and the CNK classification on arbitrary words: a decoded
// trap re-encodes to the same word, IsTrap agrees with DecodeTrap, a fast trap is a trap, and
// Unconditional implies Traps for any register values.
func FuzzTrap(f *testing.F) {
	for _, w := range []uint32{TrapWordLinux, TrapWordCNK, TrapWordTWI, TrapWordTD, TrapWordTDI, TrapWordNever,
		FastTrapBase, FastTrapBase | 77, 0x7fe00009, 0x7c821009, 0x60000000, 0x7c0802a6, 0x4e800020} {
		f.Add(w, uint64(0), uint64(0))
	}
	f.Add(uint32(0x0ddf8005), uint64(0xffffffff), uint64(1))
	f.Fuzz(func(t *testing.T, w uint32, ra, rb uint64) {
		tr, ok := DecodeTrap(w)
		if ok != IsTrap(w) {
			t.Fatalf("%#08x: DecodeTrap %v, IsTrap %v", w, ok, IsTrap(w))
		}
		c := Classify(w)
		if (c != NotTrap) != ok || (c == FastTrap) != IsFastTrap(w) {
			t.Fatalf("%#08x: class %v", w, c)
		}
		if !ok {
			return
		}
		back, err := tr.Encode()
		if err != nil || back != w {
			t.Fatalf("%#08x: decoded %+v re-encodes to %#08x, %v", w, tr, back, err)
		}
		if tr.Unconditional() && !tr.Traps(ra, rb) {
			t.Fatalf("%#08x (%v): unconditional, yet no trap for %#x, %#x", w, tr, ra, rb)
		}
		if tr.RA == tr.RB && tr.Op.Form() == XForm && tr.TO&TOEqual != 0 && !tr.Traps(ra, ra) {
			t.Fatalf("%#08x: equal registers with TO selecting equality did not trap", w)
		}
		_ = tr.String()
	})
}

// FuzzDecode checks that the disassembler gives text or an error, never a panic, for any
// bytes in either byte order, and that branch facts are consistent.
func FuzzDecode(f *testing.F) {
	for _, w := range []uint32{0x7c0802a6, 0xf8010010, 0x4e800020, 0x4e800421, 0x4bfffd55, 0x48000001,
		0x429f0005, 0x40820010, TrapWordCNK, FastTrapBase, 0x04000000, 0x38600000, 0x60000000, 0} {
		b := make([]byte, 8)
		binary.BigEndian.PutUint32(b, w)
		f.Add(b, false)
		b = make([]byte, 8)
		binary.LittleEndian.PutUint32(b, w)
		f.Add(b, true)
	}
	f.Fuzz(func(t *testing.T, b []byte, le bool) {
		var order binary.ByteOrder = binary.BigEndian
		if le {
			order = binary.LittleEndian
		}
		in, err := Decode(b, 0x10000000, order)
		if err != nil {
			if len(b) >= 8 {
				t.Fatalf("% x: %v", b, err)
			}
			return
		}
		if in.Text == "" || (in.Len != 4 && in.Len != 8) {
			t.Fatalf("% x: %+v", b, in)
		}
		if in.IsCall() && !in.Links() {
			t.Fatalf("% x: a call that does not link", b)
		}
		if _, ok := in.Target(); ok != (in.Branch() == BranchDirect) {
			t.Fatalf("% x: target %v for branch kind %v", b, ok, in.Branch())
		}
		_ = Disassemble(b, 0, order)
	})
}
