package amd64

import "golang.org/x/arch/x86/x86asm"

// Breakpoint facts: int3 is one byte, and the processor reports the trap with rip after it.
const (
	TrapByte    = 0xCC
	PCAfterTrap = 1
	// WatchSlots is the number of hardware watchpoints: the debug address registers DR0–DR3.
	WatchSlots = 4
	// MaxInstLen is the longest x86 instruction in bytes.
	MaxInstLen = 15
)

// endbr reports whether code starts with endbr64 (f3 0f 1e fa) or endbr32 (f3 0f 1e fb), the
// indirect-branch landing pads of CET-enabled code, and which.
func endbr(code []byte) (string, bool) {
	if len(code) < 4 || code[0] != 0xf3 || code[1] != 0x0f || code[2] != 0x1e {
		return "", false
	}
	switch code[3] {
	case 0xfa:
		return "endbr64", true
	case 0xfb:
		return "endbr32", true
	}
	return "", false
}

// vzero reports whether code starts with vzeroupper or vzeroall (VEX.0F 77, in its 2-byte c5
// or its 3-byte c4 form, no operands), which, and its length.
func vzero(code []byte) (name string, length int, ok bool) {
	var lpp byte // the VEX byte with L (bit 2) and pp (bits 1-0)
	switch {
	case len(code) >= 3 && code[0] == 0xc5 && code[2] == 0x77:
		lpp, length = code[1], 3
	case len(code) >= 4 && code[0] == 0xc4 && code[1]&0x1f == 1 && code[3] == 0x77:
		lpp, length = code[2], 4
	default:
		return "", 0, false
	}
	if lpp&3 != 0 {
		return "", 0, false
	}
	if lpp&4 != 0 {
		return "vzeroall", length, true
	}
	return "vzeroupper", length, true
}

// Decode decodes the 64-bit mode instruction at the start of code. endbr64 and endbr32, which
// the decoder of golang.org/x/arch reads as a lone rep prefix, decode as 4-byte no-ops, and so
// do vzeroupper and vzeroall (3 or 4 bytes), which it reads with a ModRM byte they do not have
// (a byte too many: the instruction after them, often a call or a return, would be lost).
func Decode(code []byte) (x86asm.Inst, error) {
	if _, ok := endbr(code); ok {
		return x86asm.Inst{Op: x86asm.NOP, Opcode: 0xf30f1e00 | uint32(code[3]), Len: 4, Mode: 64}, nil
	}
	if _, n, ok := vzero(code); ok {
		return x86asm.Inst{Op: x86asm.NOP, Opcode: 0x0f770000, Len: n, Mode: 64}, nil
	}
	return x86asm.Decode(code, 64)
}

// DecodeCall reports whether the instruction at the start of code is a call (near or far)
// and its length.
func DecodeCall(code []byte) (call bool, length int, err error) {
	inst, err := Decode(code)
	if err != nil {
		return false, 0, err
	}
	return inst.Op == x86asm.CALL || inst.Op == x86asm.LCALL, inst.Len, nil
}

// FallsThrough reports whether the instruction inst, decoded from the start of code, always
// goes on to the instruction after it: not a jump, call, return or loop, not a system call,
// interrupt or trap (int3 and int1 included, a breakpoint's or the program's own), not an
// instruction that stops the processor or the program (hlt, ud), not a transaction's begin,
// end or abort, not a move to ss (which holds off debug exceptions, a hardware breakpoint's
// among them, until the instruction after the next), and not one the decoder does not know.
func FallsThrough(inst x86asm.Inst, code []byte) bool {
	if len(code) == 0 || code[0] == TrapByte {
		return false
	}
	if inst.Op == x86asm.MOV && inst.Args[0] == x86asm.SS {
		return false
	}
	switch inst.Op {
	case 0, x86asm.ICEBP, x86asm.JMP, x86asm.LJMP, x86asm.CALL, x86asm.LCALL, x86asm.RET, x86asm.LRET,
		x86asm.IRET, x86asm.IRETD, x86asm.IRETQ, x86asm.LOOP, x86asm.LOOPE, x86asm.LOOPNE,
		x86asm.JCXZ, x86asm.JECXZ, x86asm.JRCXZ, x86asm.SYSCALL, x86asm.SYSENTER, x86asm.SYSEXIT,
		x86asm.SYSRET, x86asm.INT, x86asm.INTO, x86asm.UD0, x86asm.UD1, x86asm.UD2, x86asm.HLT,
		x86asm.XBEGIN, x86asm.XABORT, x86asm.XEND:
		return false
	}
	for _, a := range inst.Args {
		if _, ok := a.(x86asm.Rel); ok {
			return false // a conditional jump
		}
	}
	return true
}

// CallTarget returns the address a direct call (call rel32) at the start of code, which
// lies at pc, calls; ok is false for any other instruction, indirect calls included.
func CallTarget(code []byte, pc uint64) (target uint64, ok bool) {
	inst, err := Decode(code)
	if err != nil || inst.Op != x86asm.CALL {
		return 0, false
	}
	rel, isRel := inst.Args[0].(x86asm.Rel)
	if !isRel {
		return 0, false
	}
	return pc + uint64(inst.Len) + uint64(int64(rel)), true
}

// Disassemble decodes the instruction at the start of code, which sits at pc, and prints it
// in GNU syntax; sym names addresses (it may be nil).
func Disassemble(code []byte, pc uint64, sym func(uint64) (string, uint64)) (text string, length int, err error) {
	if name, ok := endbr(code); ok {
		return name, 4, nil
	}
	if name, n, ok := vzero(code); ok {
		return name, n, nil
	}
	inst, err := Decode(code)
	if err != nil {
		return "", 0, err
	}
	return x86asm.GNUSyntax(inst, pc, sym), inst.Len, nil
}

// gprOffset maps a 64-bit register named by the decoder to its user_regs_struct offset.
var gprOffset = map[x86asm.Reg]int{
	x86asm.RAX: OffRAX, x86asm.RCX: OffRCX, x86asm.RDX: OffRDX, x86asm.RBX: OffRBX,
	x86asm.RSP: OffRSP, x86asm.RBP: OffRBP, x86asm.RSI: OffRSI, x86asm.RDI: OffRDI,
	x86asm.R8: OffR8, x86asm.R9: OffR9, x86asm.R10: OffR10, x86asm.R11: OffR11,
	x86asm.R12: OffR12, x86asm.R13: OffR13, x86asm.R14: OffR14, x86asm.R15: OffR15,
}

// EffectiveAddress computes the address of m, a memory operand of inst, from a
// user_regs_struct; next is the address of the instruction after inst (the value of rip in a
// rip-relative operand). ok is false when the operand uses a register that is not a 64-bit
// general register.
func EffectiveAddress(inst x86asm.Inst, m x86asm.Mem, regs []byte, next uint64) (uint64, bool) {
	var ea uint64
	switch m.Segment {
	case 0, x86asm.DS, x86asm.SS, x86asm.ES, x86asm.CS:
	case x86asm.FS:
		ea = Reg(regs, OffFSBase)
	case x86asm.GS:
		ea = Reg(regs, OffGSBase)
	default:
		return 0, false
	}
	switch {
	case m.Base == x86asm.RIP:
		ea += next
	case m.Base != 0:
		off, ok := gprOffset[m.Base]
		if !ok {
			return 0, false
		}
		ea += Reg(regs, off)
	}
	if m.Index != 0 {
		off, ok := gprOffset[m.Index]
		if !ok {
			return 0, false
		}
		ea += Reg(regs, off) * uint64(m.Scale)
	}
	return ea + uint64(displacement(inst, m)), true
}

// displacement returns m's displacement as the processor adds it. The decoder of
// golang.org/x/arch zero-extends a 32-bit displacement, which 64-bit mode sign-extends
// (-0x200(%rbp) would otherwise lie 4 GiB above rbp); only the moffs forms of mov (opcodes
// a0–a3) carry a full 64-bit address.
func displacement(inst x86asm.Inst, m x86asm.Mem) int64 {
	if op := inst.Opcode >> 24; op >= 0xa0 && op <= 0xa3 {
		return m.Disp
	}
	return int64(int32(m.Disp))
}

// memOperand returns the first memory operand of inst.
func memOperand(inst x86asm.Inst) (x86asm.Mem, bool) {
	for _, a := range inst.Args {
		if m, ok := a.(x86asm.Mem); ok {
			return m, true
		}
	}
	return x86asm.Mem{}, false
}

// Linux x86-64 system calls the debugger injects or recognises.
const (
	SysMmap   = 9
	SysMunmap = 11
	SysFutex  = 202
)

// SyscallInsn is the syscall instruction.
var SyscallInsn = []byte{0x0f, 0x05}

// IsRestartCode reports whether rax holds a value the kernel leaves in a system call that a
// stop interrupted until it restarts it (-EINTR, -ERESTARTSYS, -ERESTARTNOINTR,
// -ERESTARTNOHAND, -ERESTART_RESTARTBLOCK).
func IsRestartCode(rax int64) bool {
	switch rax {
	case -4, -512, -513, -514, -516:
		return true
	}
	return false
}

// AccessAddress returns the address the instruction at the start of code, which lies at pc,
// accesses through its first memory operand, computed from the registers in regs, a
// user_regs_struct that holds the state before the instruction runs (a faulting instruction).
func AccessAddress(code []byte, pc uint64, regs []byte) (uint64, bool) {
	if len(regs) < UserRegsSize {
		return 0, false
	}
	inst, err := Decode(code)
	if err != nil {
		return 0, false
	}
	m, ok := memOperand(inst)
	if !ok {
		return 0, false
	}
	return EffectiveAddress(inst, m, regs, pc+uint64(inst.Len))
}
