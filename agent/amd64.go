package agent

import (
	"debug/elf"
	"encoding/binary"

	"github.com/hpcdap/hpcdap/cdti"
	"github.com/hpcdap/hpcdap/target"
	"golang.org/x/arch/x86/x86asm"
)

// machine holds what the agent must know about a target's instruction set for the commands
// that go beyond the back end's mechanism: injected system calls (AllocateMemory, FreeMemory),
// frame-pointer stack walks (GetThreadData, GetTraceback) and finding the instruction behind a
// watchpoint hit. Only x86_64 is described; on other machines those commands answer CmdInval.
type machine struct{}

// machineFor returns the description of info's machine, or nil.
func machineFor(info target.Info) *machine {
	if info.Machine == elf.EM_X86_64 && info.PtrSize == 8 {
		return &machine{}
	}
	return nil
}

// Offsets in the x86_64 user_regs_struct (RegsGeneral).
const (
	x86R15    = 0
	x86R14    = 8
	x86R13    = 16
	x86R12    = 24
	x86RBP    = 32
	x86RBX    = 40
	x86R11    = 48
	x86R10    = 56
	x86R9     = 64
	x86R8     = 72
	x86RAX    = 80
	x86RCX    = 88
	x86RDX    = 96
	x86RSI    = 104
	x86RDI    = 112
	x86OrigAX = 120
	x86RIP    = 128
	x86RSP    = 152
	x86FSBase = 168
	x86GSBase = 176
	x86Regs   = 216
)

var le = binary.LittleEndian

func reg(regs []byte, off int) uint64 {
	if off+8 > len(regs) {
		return 0
	}
	return le.Uint64(regs[off:])
}

func setReg(regs []byte, off int, v uint64) {
	if off+8 <= len(regs) {
		le.PutUint64(regs[off:], v)
	}
}

func (m *machine) pc(regs []byte) uint64 { return reg(regs, x86RIP) }
func (m *machine) sp(regs []byte) uint64 { return reg(regs, x86RSP) }
func (m *machine) fp(regs []byte) uint64 { return reg(regs, x86RBP) }

// System calls for AllocateMemory and FreeMemory.
const (
	x86SysMmap   = 9
	x86SysMunmap = 11
)

// syscallInsn is the x86_64 syscall instruction.
var syscallInsn = []byte{0x0f, 0x05}

// syscallRegs returns regs set up to execute system call nr with args at pc.
func (m *machine) syscallRegs(regs []byte, pc uint64, nr uint64, args ...uint64) []byte {
	out := append([]byte(nil), regs...)
	argOffs := []int{x86RDI, x86RSI, x86RDX, x86R10, x86R8, x86R9}
	for i, a := range args {
		setReg(out, argOffs[i], a)
	}
	setReg(out, x86RAX, nr)
	setReg(out, x86OrigAX, ^uint64(0)) // not inside a system call: no restart on resume
	setReg(out, x86RIP, pc)
	return out
}

// syscallResult is the system call's return value (negative: -errno).
func (m *machine) syscallResult(regs []byte) int64 { return int64(reg(regs, x86RAX)) }

// regOffset maps a 64-bit register named by the disassembler to its user_regs_struct offset.
var regOffset = map[x86asm.Reg]int{
	x86asm.RAX: x86RAX, x86asm.RCX: x86RCX, x86asm.RDX: x86RDX, x86asm.RBX: x86RBX,
	x86asm.RSP: x86RSP, x86asm.RBP: x86RBP, x86asm.RSI: x86RSI, x86asm.RDI: x86RDI,
	x86asm.R8: x86R8, x86asm.R9: x86R9, x86asm.R10: x86R10, x86asm.R11: x86R11,
	x86asm.R12: x86R12, x86asm.R13: x86R13, x86asm.R14: x86R14, x86asm.R15: x86R15,
}

// accessInstruction finds the instruction that made a data access to [lo, hi) and stopped at
// pc, the address after it (x86 reports data watchpoints after the access). x86 code cannot be
// decoded backward unambiguously, so every start address from pc-15 to pc-1 is tried: a
// candidate must decode to an instruction that ends exactly at pc and has a memory operand
// whose effective address, computed from the registers after the access, falls in the watched
// range. The longest such candidate wins. Instructions whose operand registers the access
// itself changed (push, rep movs, ...) are not found; the caller then reports pc.
func (m *machine) accessInstruction(mem memReader, regs []byte, pc, lo, hi uint64) (uint64, bool) {
	const maxLen = 15
	if pc < maxLen {
		return 0, false
	}
	buf := make([]byte, maxLen)
	if n, err := mem.ReadMemory(pc-maxLen, buf); err != nil || n != maxLen {
		return 0, false
	}
	for n := maxLen; n >= 1; n-- {
		inst, err := x86asm.Decode(buf[maxLen-n:], 64)
		if err != nil || inst.Len != n {
			continue
		}
		for _, arg := range inst.Args {
			mem, ok := arg.(x86asm.Mem)
			if !ok {
				continue
			}
			ea, ok := effectiveAddress(mem, regs, pc)
			if !ok {
				continue
			}
			size := uint64(max(inst.MemBytes, 1))
			if ea < hi && lo < ea+size {
				return pc - uint64(n), true
			}
		}
	}
	return 0, false
}

// effectiveAddress computes a memory operand's address from the registers (pc is the address
// of the next instruction, the value of RIP in a RIP-relative operand).
func effectiveAddress(m x86asm.Mem, regs []byte, pc uint64) (uint64, bool) {
	var ea uint64
	switch m.Segment {
	case 0, x86asm.DS, x86asm.SS, x86asm.ES, x86asm.CS:
	case x86asm.FS:
		ea = reg(regs, x86FSBase)
	case x86asm.GS:
		ea = reg(regs, x86GSBase)
	default:
		return 0, false
	}
	switch {
	case m.Base == x86asm.RIP:
		ea += pc
	case m.Base != 0:
		off, ok := regOffset[m.Base]
		if !ok {
			return 0, false
		}
		ea += reg(regs, off)
	}
	if m.Index != 0 {
		off, ok := regOffset[m.Index]
		if !ok {
			return 0, false
		}
		ea += reg(regs, off) * uint64(m.Scale)
	}
	return ea + uint64(m.Disp), true
}

// Return values a system call interrupted by a stop leaves in rax until it is restarted.
var restartCodes = map[int64]bool{-4: true, -512: true, -513: true, -514: true, -516: true}

// x86SysFutex is the futex system call.
const x86SysFutex = 202

// syscallState says what a stopped thread was doing: blocked in a futex (FutexWait), in another
// system call (Sleep), or running user code (Run). A thread stopped inside a blocking call has
// the call number in orig_rax and a restart code in rax.
func (m *machine) syscallState(regs []byte) cdti.ThreadState {
	nr := int64(reg(regs, x86OrigAX))
	if nr < 0 || !restartCodes[int64(reg(regs, x86RAX))] {
		return cdti.ThreadRun
	}
	if nr == x86SysFutex {
		return cdti.ThreadFutexWait
	}
	return cdti.ThreadSleep
}

// pushRegs maps the register operand of push r64 (0x50+r, with REX.B for r8-r15) to its
// user_regs_struct offset.
var pushRegs = [16]int{x86RAX, x86RCX, x86RDX, x86RBX, x86RSP, x86RBP, x86RSI, x86RDI,
	x86R8, x86R9, x86R10, x86R11, x86R12, x86R13, x86R14, x86R15}

// emulation is the effect of one emulated instruction: new registers and, for a push, 8 bytes
// to store at the new stack pointer.
type emulation struct {
	regs  []byte
	store uint64 // address of the 8 bytes pushed (0: none)
	value [8]byte
}

// emulate computes the effect of the instruction code (at the PC in regs) for the few
// instructions that begin functions: push of a 64-bit register, mov %rsp,%rbp, endbr64 and
// nop. They change no flags and touch no memory but the stack slot of a push, so continuing
// from a breakpoint planted on one of them needs no single step (see proc.emulateOver).
// ok is false for any other instruction.
func (m *machine) emulate(code, regs []byte) (e emulation, ok bool) {
	out := append([]byte(nil), regs...)
	pc := reg(regs, x86RIP)
	n := 0
	switch {
	case len(code) >= 1 && code[0] >= 0x50 && code[0] <= 0x57:
		n = 1
		e.store = m.push(out, pushRegs[code[0]-0x50], &e.value)
	case len(code) >= 2 && code[0] == 0x41 && code[1] >= 0x50 && code[1] <= 0x57:
		n = 2
		e.store = m.push(out, pushRegs[8+code[1]-0x50], &e.value)
	case len(code) >= 3 && code[0] == 0x48 && code[1] == 0x89 && code[2] == 0xe5:
		n = 3
		setReg(out, x86RBP, reg(regs, x86RSP))
	case len(code) >= 4 && code[0] == 0xf3 && code[1] == 0x0f && code[2] == 0x1e && code[3] == 0xfa:
		n = 4 // endbr64: a no-op for a process that is already past the check
	case len(code) >= 1 && code[0] == 0x90:
		n = 1
	default:
		return emulation{}, false
	}
	setReg(out, x86RIP, pc+uint64(n))
	e.regs = out
	return e, true
}

// push applies a push of the register at off to regs: the value (read before rsp moves, as
// push %rsp does) goes to the new stack pointer, returned.
func (m *machine) push(regs []byte, off int, value *[8]byte) uint64 {
	v := reg(regs, off)
	sp := reg(regs, x86RSP) - 8
	setReg(regs, x86RSP, sp)
	le.PutUint64(value[:], v)
	return sp
}
