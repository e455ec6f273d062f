package amd64

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"golang.org/x/arch/x86/x86asm"
)

// TestOutOfLineRelocates: a RIP-relative operand reaches the same address from the copy, an
// immediate after the displacement stays as it was, and the copy ends with a jump back to
// the instruction after the original.
func TestOutOfLineRelocates(t *testing.T) {
	const from, to = 0x401000, 0x3ff040
	for _, c := range []struct {
		name string
		code []byte
	}{
		{"mov 0x2000(%rip),%rax", []byte{0x48, 0x8b, 0x05, 0x00, 0x20, 0x00, 0x00}},
		{"addq $3,-0x10(%rip)", []byte{0x48, 0x83, 0x05, 0xf0, 0xff, 0xff, 0xff, 0x03}},
		{"lock addq $1,0x100(%rip)", []byte{0xf0, 0x48, 0x83, 0x05, 0x00, 0x01, 0x00, 0x00, 0x01}},
		{"movsd 0x30(%rip),%xmm1", []byte{0xf2, 0x0f, 0x10, 0x0d, 0x30, 0x00, 0x00, 0x00}},
		{"pop %rax", []byte{0x58}},
		{"ret", []byte{0xc3}},
		{"jmp *%rax", []byte{0xff, 0xe0}},
	} {
		code := append(append([]byte(nil), c.code...), 0x90, 0x90, 0x90)
		out, n, err := OutOfLine(code, from, to)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if n != len(c.code) || len(out) != n+JumpAbsLen {
			t.Errorf("%s: length %d, code of %d bytes", c.name, n, len(out))
			continue
		}
		orig, _ := Decode(code)
		moved, err := Decode(out)
		if err != nil || moved.Op != orig.Op || moved.Len != n {
			t.Errorf("%s: the copy decodes as %v (%v)", c.name, moved, err)
			continue
		}
		if m, ok := memOperand(orig); ok && m.Base == x86asm.RIP {
			mm, _ := memOperand(moved)
			a1, _ := EffectiveAddress(orig, m, nil, from+uint64(n))
			a2, _ := EffectiveAddress(moved, mm, nil, to+uint64(n))
			if a1 != a2 {
				t.Errorf("%s: the copy accesses %#x, the original %#x", c.name, a2, a1)
			}
			if !bytes.Equal(out[orig.PCRelOff+4:n], code[orig.PCRelOff+4:n]) {
				t.Errorf("%s: the bytes after the displacement changed: % x", c.name, out[:n])
			}
		} else if !bytes.Equal(out[:n], c.code) {
			t.Errorf("%s: copied as % x", c.name, out[:n])
		}
		back := out[n:]
		if !bytes.Equal(back[:6], []byte{0xff, 0x25, 0, 0, 0, 0}) || binary.LittleEndian.Uint64(back[6:]) != from+uint64(n) {
			t.Errorf("%s: jump back % x, want to %#x", c.name, back, from+uint64(n))
		}
	}
}

// TestOutOfLineRefuses: what cannot run elsewhere with the same effect is refused, and an
// operand beyond ±2 GiB of the copy is out of reach.
func TestOutOfLineRefuses(t *testing.T) {
	for _, c := range []struct {
		name string
		code []byte
	}{
		{"syscall", []byte{0x0f, 0x05}},
		{"call rel32", []byte{0xe8, 0, 0, 0, 0}},
		{"call *%rax", []byte{0xff, 0xd0}},
		{"jne rel8", []byte{0x75, 0x10}},
		{"jmp rel32", []byte{0xe9, 0, 1, 0, 0}},
		{"loop", []byte{0xe2, 0xfe}},
		{"jrcxz", []byte{0xe3, 0x02}},
		{"int3", []byte{0xcc}},
		{"int $0x80", []byte{0xcd, 0x80}},
		{"ud2", []byte{0x0f, 0x0b}},
		{"ud0", []byte{0x0f, 0xff, 0xc0}},
		{"undecodable", []byte{0x0f, 0x04}},
	} {
		code := append(append([]byte(nil), c.code...), make([]byte, 15)...)
		if _, _, err := OutOfLine(code, 0x401000, 0x3ff000); !errors.Is(err, ErrNotRelocatable) {
			t.Errorf("%s: %v, want ErrNotRelocatable", c.name, err)
		}
	}
	load := []byte{0x48, 0x8b, 0x05, 0x00, 0x00, 0x00, 0x00}
	if _, _, err := OutOfLine(load, 0x401000, 0x7f0000000000); !errors.Is(err, ErrOutOfReach) {
		t.Errorf("a load 127 TiB away: %v, want ErrOutOfReach", err)
	}
}

// TestDecodeBranch: the destination of each branch from the registers.
func TestDecodeBranch(t *testing.T) {
	const pc = 0x401000
	regs := make([]byte, UserRegsSize)
	SetReg(regs, OffRIP, pc)
	SetReg(regs, OffRBX, 0x405000)
	SetReg(regs, OffRSP, 0x7ff000)
	for _, c := range []struct {
		name  string
		code  []byte
		flags uint64
		dest  uint64
		call  bool
		load  bool
	}{
		{"jmp rel8", []byte{0xeb, 0x10}, 0, pc + 2 + 0x10, false, false},
		{"jmp rel32 back", []byte{0xe9, 0xfb, 0xff, 0xff, 0xff}, 0, pc, false, false},
		{"jne taken", []byte{0x75, 0x10}, 0, pc + 2 + 0x10, false, false},
		{"jne not taken", []byte{0x75, 0x10}, flagZF, pc + 2, false, false},
		{"jl rel32 taken", []byte{0x0f, 0x8c, 0x00, 0x01, 0x00, 0x00}, flagSF, pc + 6 + 0x100, false, false},
		{"jl rel32 not taken", []byte{0x0f, 0x8c, 0x00, 0x01, 0x00, 0x00}, flagSF | flagOF, pc + 6, false, false},
		{"jbe taken (CF)", []byte{0x76, 0x01}, flagCF, pc + 3, false, false},
		{"call rel32", []byte{0xe8, 0x00, 0x10, 0x00, 0x00}, 0, pc + 5 + 0x1000, true, false},
		{"call *%rbx", []byte{0xff, 0xd3}, 0, 0x405000, true, false},
		{"call *0x20(%rip)", []byte{0xff, 0x15, 0x20, 0x00, 0x00, 0x00}, 0, pc + 6 + 0x20, true, true},
		{"call *8(%rsp)", []byte{0xff, 0x54, 0x24, 0x08}, 0, 0x7ff008, true, true},
	} {
		b, ok := DecodeBranch(c.code, pc)
		if !ok {
			t.Errorf("%s: not a branch", c.name)
			continue
		}
		SetReg(regs, OffEFLAGS, c.flags)
		dest, load, ok := b.Dest(regs)
		if !ok || dest != c.dest || load != c.load || b.Call != c.call || b.Len != len(c.code) {
			t.Errorf("%s: dest %#x load %v call %v len %d, want %#x %v %v %d", c.name, dest, load, b.Call, b.Len,
				c.dest, c.load, c.call, len(c.code))
		}
	}
	for _, c := range [][]byte{{0xe2, 0xfe}, {0xff, 0xe0}, {0xc3}, {0x66, 0xe9, 0x00, 0x00}, {0x0f, 0x05}} {
		if _, ok := DecodeBranch(c, pc); ok {
			t.Errorf("% x decoded as a branch to carry out", c)
		}
	}
}
