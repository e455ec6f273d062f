package symbols

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"testing"

	"github.com/hpcdap/hpcdap/amd64"
)

// TestDeriveSharesWideRegisters: a caller's Regs shares its callee's wide registers until
// either changes one; a change on one side is not seen on the other.
func TestDeriveSharesWideRegisters(t *testing.T) {
	a, err := ArchFor(elf.EM_X86_64, binary.LittleEndian)
	if err != nil {
		t.Fatal(err)
	}
	x0, x1 := amd64.DwarfXMM0, amd64.DwarfXMM0+1
	callee := NewRegs(a)
	callee.SetBytes(x0, bytes.Repeat([]byte{1}, 16))
	callee.SetBytes(x1, bytes.Repeat([]byte{2}, 16))
	callee.Set(amd64.DwarfRSP, 0x1000)
	caller := callee.derive()
	caller.Set(amd64.DwarfRSP, 0x1010)
	if b, _ := caller.Bytes(x1); !bytes.Equal(b, bytes.Repeat([]byte{2}, 16)) {
		t.Fatalf("caller xmm1 = %x, want the callee's", b)
	}
	caller.SetBytes(x0, bytes.Repeat([]byte{9}, 16))
	callee.Clear(x1)
	if b, _ := callee.Bytes(x0); !bytes.Equal(b, bytes.Repeat([]byte{1}, 16)) {
		t.Errorf("callee xmm0 = %x after the caller's change, want 01…", b)
	}
	if b, ok := caller.Bytes(x1); !ok || !bytes.Equal(b, bytes.Repeat([]byte{2}, 16)) {
		t.Errorf("caller xmm1 = %x, %v after the callee's clear, want 02…", b, ok)
	}
	if _, ok := callee.Bytes(x1); ok {
		t.Error("callee xmm1 still known after Clear")
	}
	if sp, _ := callee.SP(); sp != 0x1000 {
		t.Errorf("callee sp = %#x, want 0x1000", sp)
	}
	caller.Set(x0, 7) // an 8-byte value replaces the wide contents
	if b, _ := caller.Bytes(x0); len(b) != 8 || b[0] != 7 {
		t.Errorf("caller xmm0 = %x after Set, want 8 bytes of 7", b)
	}
	if b, _ := callee.Bytes(x0); len(b) != 16 {
		t.Errorf("callee xmm0 = %x after the caller's Set, want its 16 bytes", b)
	}
}
