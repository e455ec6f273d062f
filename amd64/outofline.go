package amd64

import (
	"encoding/binary"
	"errors"
	"fmt"

	"golang.org/x/arch/x86/x86asm"
)

// JumpAbsLen is the length of the absolute jump OutOfLine ends its code with: jmp *0(%rip)
// followed by the 8-byte destination, which reaches any address from anywhere.
const JumpAbsLen = 14

// OutOfLineMax is the longest code OutOfLine returns: the longest instruction and the jump
// back.
const OutOfLineMax = MaxInstLen + JumpAbsLen

// ErrNotRelocatable says that an instruction cannot run at another address with the same
// effect: a relative branch or call, an instruction that uses the address of the next one
// implicitly (syscall saves it in rcx), traps and instructions the decoder does not know.
// A caller executes it in place instead (or emulates it, as EmulateBranch does branches).
var ErrNotRelocatable = errors.New("amd64: instruction cannot run out of line")

// ErrOutOfReach says that an instruction's RIP-relative operand cannot reach its address from
// the place asked for: it can run out of line only closer to its own address.
var ErrOutOfReach = errors.New("amd64: RIP-relative operand out of reach")

// OutOfLine returns code that, placed at to, does what the instruction at the start of code
// does at from, then jumps to the instruction after it at from: the instruction itself,
// its RIP-relative displacement (if any) adjusted to reach the same address from to, and an
// absolute jump back. n is the instruction's length. A RIP-relative operand that cannot reach
// its address from to (more than ±2 GiB away) is ErrOutOfReach; every instruction listed at
// ErrNotRelocatable is that error.
func OutOfLine(code []byte, from, to uint64) (out []byte, n int, err error) {
	inst, err := Decode(code)
	if err != nil {
		return nil, 0, fmt.Errorf("%w: %v", ErrNotRelocatable, err)
	}
	if !relocatable(inst, code) {
		return nil, 0, fmt.Errorf("%w: %v", ErrNotRelocatable, inst.Op)
	}
	n = inst.Len
	out = make([]byte, n, n+JumpAbsLen)
	copy(out, code[:n])
	if inst.PCRel != 0 {
		if inst.PCRel != 4 || inst.PCRelOff+4 > n {
			return nil, 0, fmt.Errorf("%w: %d-byte displacement", ErrNotRelocatable, inst.PCRel)
		}
		disp := int64(int32(binary.LittleEndian.Uint32(out[inst.PCRelOff:])))
		abs := from + uint64(n) + uint64(disp)
		nd := int64(abs - (to + uint64(n)))
		if nd != int64(int32(nd)) {
			return nil, 0, fmt.Errorf("%w: %#x from %#x", ErrOutOfReach, abs, to)
		}
		binary.LittleEndian.PutUint32(out[inst.PCRelOff:], uint32(int32(nd)))
	}
	return AppendJumpAbs(out, from+uint64(n)), n, nil
}

// AppendJumpAbs appends an absolute jump to dest (jmp *0(%rip); .quad dest) to code.
func AppendJumpAbs(code []byte, dest uint64) []byte {
	code = append(code, 0xff, 0x25, 0, 0, 0, 0)
	return binary.LittleEndian.AppendUint64(code, dest)
}

// relocatable reports whether inst may run at another address: no relative branch or call,
// no instruction that saves or traps at the next address, and every RIP-relative operand one
// the decoder located (PCRel), so that it can be adjusted.
func relocatable(inst x86asm.Inst, code []byte) bool {
	switch inst.Op {
	case 0, x86asm.CALL, x86asm.LCALL, x86asm.LJMP, x86asm.LRET, x86asm.IRET, x86asm.IRETD, x86asm.IRETQ,
		x86asm.SYSCALL, x86asm.SYSENTER, x86asm.SYSEXIT, x86asm.SYSRET, x86asm.INT, x86asm.INTO,
		x86asm.UD0, x86asm.UD1, x86asm.UD2, x86asm.HLT, x86asm.XBEGIN, x86asm.XABORT, x86asm.XEND:
		return false
	}
	if code[0] == TrapByte {
		return false // int3: a trap of the program's own
	}
	for _, a := range inst.Args {
		switch a := a.(type) {
		case x86asm.Rel:
			return false // jmp, jcc, loop, jrcxz: relative to the instruction's own address
		case x86asm.Mem:
			if a.Base == x86asm.RIP && inst.PCRel == 0 {
				return false
			}
		}
	}
	return true
}

// Branch is a relative branch or a call, which EmulateBranch carries out on the registers
// instead of running it out of line.
type Branch struct {
	Len    int         // the instruction's length
	Call   bool        // a call: the address of the next instruction is pushed
	Cond   int         // a conditional jump's condition code (the low nibble of 7x); -1: always
	Target uint64      // the destination of a relative branch
	Mem    *x86asm.Mem // an indirect call through memory (the destination is read there)
	Reg    int         // an indirect call through a register: its user_regs_struct offset (-1: none)
	inst   x86asm.Inst
}

// DecodeBranch decodes the instruction at the start of code, which lies at pc, as a Branch:
// jmp and jcc with an 8- or 32-bit displacement, and near calls (relative, through a
// register, or through memory). ok is false for any other instruction (loop and jrcxz, far
// branches, 16-bit operand sizes included).
func DecodeBranch(code []byte, pc uint64) (Branch, bool) {
	inst, err := Decode(code)
	if err != nil || inst.DataSize == 16 {
		return Branch{}, false
	}
	b := Branch{Len: inst.Len, Cond: -1, Reg: -1, inst: inst}
	next := pc + uint64(inst.Len)
	switch inst.Op {
	case x86asm.JMP:
		rel, ok := inst.Args[0].(x86asm.Rel)
		if !ok {
			return Branch{}, false // indirect: it runs out of line as it is
		}
		b.Target = next + uint64(int64(rel))
		return b, true
	case x86asm.CALL:
		b.Call = true
		switch a := inst.Args[0].(type) {
		case x86asm.Rel:
			b.Target = next + uint64(int64(a))
		case x86asm.Reg:
			off, ok := gprOffset[a]
			if !ok {
				return Branch{}, false
			}
			b.Reg = off
		case x86asm.Mem:
			if inst.MemBytes != 8 {
				return Branch{}, false
			}
			b.Mem = &a
		default:
			return Branch{}, false
		}
		return b, true
	}
	cc, ok := condCode(code, inst)
	if !ok {
		return Branch{}, false
	}
	rel, isRel := inst.Args[0].(x86asm.Rel)
	if !isRel {
		return Branch{}, false
	}
	b.Cond = cc
	b.Target = next + uint64(int64(rel))
	return b, true
}

// condCode returns the condition code of a jcc (70+cc rel8 or 0f 80+cc rel32, after any
// prefixes).
func condCode(code []byte, inst x86asm.Inst) (int, bool) {
	switch inst.Op {
	case x86asm.JA, x86asm.JAE, x86asm.JB, x86asm.JBE, x86asm.JE, x86asm.JG, x86asm.JGE, x86asm.JL, x86asm.JLE,
		x86asm.JNE, x86asm.JNO, x86asm.JNP, x86asm.JNS, x86asm.JO, x86asm.JP, x86asm.JS:
	default:
		return 0, false
	}
	op := inst.PCRelOff - 1 // the opcode byte precedes the displacement
	if inst.PCRel == 4 {
		if op < 1 || code[op-1] != 0x0f || code[op]&0xf0 != 0x80 {
			return 0, false
		}
	} else if op < 0 || code[op]&0xf0 != 0x70 {
		return 0, false
	}
	return int(code[op] & 0x0f), true
}

// Flags of rflags that conditions test.
const (
	flagCF = 1 << 0
	flagPF = 1 << 2
	flagZF = 1 << 6
	flagSF = 1 << 7
	flagOF = 1 << 11
)

// CondHolds evaluates condition code cc (0 o, 1 no, 2 b, 3 ae, 4 e, 5 ne, 6 be, 7 a, 8 s,
// 9 ns, a p, b np, c l, d ge, e le, f g) on rflags.
func CondHolds(cc int, rflags uint64) bool {
	f := func(bit uint64) bool { return rflags&bit != 0 }
	var v bool
	switch cc >> 1 {
	case 0:
		v = f(flagOF)
	case 1:
		v = f(flagCF)
	case 2:
		v = f(flagZF)
	case 3:
		v = f(flagCF) || f(flagZF)
	case 4:
		v = f(flagSF)
	case 5:
		v = f(flagPF)
	case 6:
		v = f(flagSF) != f(flagOF)
	case 7:
		v = f(flagZF) || f(flagSF) != f(flagOF)
	}
	return v != (cc&1 == 1)
}

// Dest returns where the branch goes from the registers in regs (a user_regs_struct, with
// rip at the branch) and, for a call through memory, the address of the memory word that
// holds the destination (load is then true and the destination is read there).
func (b Branch) Dest(regs []byte) (dest uint64, load bool, ok bool) {
	pc := Reg(regs, OffRIP)
	next := pc + uint64(b.Len)
	switch {
	case b.Mem != nil:
		ea, ok := EffectiveAddress(b.inst, *b.Mem, regs, next)
		return ea, true, ok
	case b.Reg >= 0:
		return Reg(regs, b.Reg), false, true
	case b.Cond >= 0 && !CondHolds(b.Cond, Reg(regs, OffEFLAGS)):
		return next, false, true
	}
	return b.Target, false, true
}
