package agent

import (
	"debug/elf"
	"encoding/binary"

	"github.com/hpcdap/hpcdap/amd64"
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

var le = binary.LittleEndian

func (m *machine) pc(regs []byte) uint64 { return amd64.Reg(regs, amd64.OffRIP) }
func (m *machine) sp(regs []byte) uint64 { return amd64.Reg(regs, amd64.OffRSP) }
func (m *machine) fp(regs []byte) uint64 { return amd64.Reg(regs, amd64.OffRBP) }

func (m *machine) syscallCode() []byte { return amd64.SyscallInsn }
func (m *machine) stepsSyscall() bool  { return true }

func (m *machine) syscallRegs(regs []byte, pc uint64, nr uint64, args ...uint64) []byte {
	out := append([]byte(nil), regs...)
	for i, a := range args {
		amd64.SetReg(out, amd64.SyscallArgOffsets[i], a)
	}
	amd64.SetReg(out, amd64.OffRAX, nr)
	amd64.SetPC(out, pc) // orig_rax = -1: not inside a system call, no restart on resume
	return out
}

func (m *machine) syscallResult(regs []byte) int64 { return int64(amd64.Reg(regs, amd64.OffRAX)) }

// accessInstruction finds the instruction that made a data access to [lo, hi) and stopped at
// pc, the address after it (x86 reports data watchpoints after the access). x86 code cannot be
// decoded backward unambiguously, so every start address from pc-15 to pc-1 is tried: a
// candidate must decode to an instruction that ends exactly at pc and has a memory operand
// whose effective address, computed from the registers after the access, falls in the watched
// range. The longest such candidate wins. Instructions whose operand registers the access
// itself changed (push, rep movs, ...) are not found; the caller then reports pc.
func (m *machine) accessInstruction(mem memReader, regs []byte, pc, lo, hi uint64) (uint64, bool) {
	const maxLen = amd64.MaxInstLen
	if pc < maxLen {
		return 0, false
	}
	buf := make([]byte, maxLen)
	if n, err := mem.ReadMemory(pc-maxLen, buf); err != nil || n != maxLen {
		return 0, false
	}
	for n := maxLen; n >= 1; n-- {
		inst, err := amd64.Decode(buf[maxLen-n:])
		if err != nil || inst.Len != n {
			continue
		}
		for _, arg := range inst.Args {
			mem, ok := arg.(x86asm.Mem)
			if !ok {
				continue
			}
			ea, ok := amd64.EffectiveAddress(inst, mem, regs, pc)
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

// syscallState says what a stopped thread was doing: blocked in a futex (FutexWait), in another
// system call (Sleep), or running user code (Run). A thread stopped inside a blocking call has
// the call number in orig_rax and a restart code in rax.
func (m *machine) syscallState(regs []byte) cdti.ThreadState {
	nr := int64(amd64.Reg(regs, amd64.OffOrigRAX))
	if nr < 0 || !amd64.IsRestartCode(int64(amd64.Reg(regs, amd64.OffRAX))) {
		return cdti.ThreadRun
	}
	if nr == amd64.SysFutex {
		return cdti.ThreadFutexWait
	}
	return cdti.ThreadSleep
}

// pushRegs maps the register operand of push r64 (0x50+r, with REX.B for r8-r15) to its
// user_regs_struct offset.
var pushRegs = [16]int{amd64.OffRAX, amd64.OffRCX, amd64.OffRDX, amd64.OffRBX, amd64.OffRSP,
	amd64.OffRBP, amd64.OffRSI, amd64.OffRDI, amd64.OffR8, amd64.OffR9, amd64.OffR10, amd64.OffR11,
	amd64.OffR12, amd64.OffR13, amd64.OffR14, amd64.OffR15}

// emulation is the effect of one emulated instruction: new registers and the bytes it stores
// (a push, a store to a frame slot) or the slot it loads a register from.
type emulation struct {
	regs      []byte
	store     uint64 // address of the bytes stored (any: 0 too, which must fault)
	value     [8]byte
	storeSize int // bytes of value stored (0: none)
	// A load: loadSize bytes (0: none) at load go into the register at loadReg,
	// zero-extended (a 32-bit load clears the upper half, as the processor does).
	load     uint64
	loadSize int
	loadReg  int
}

// emulate computes the effect of the instruction code (at the PC in regs) for the few
// instructions that begin functions (push of a 64-bit register, mov %rsp,%rbp, endbr64, nop)
// and the moves between a register and a frame slot that begin the lines of unoptimized code
// (see frameMove). They change no flags and touch no memory but one stack or frame slot, so
// continuing from a breakpoint planted on one of them needs no single step (see
// proc.emulateOver). ok is false for any other instruction.
func (m *machine) emulate(code, regs []byte) (e emulation, ok bool) {
	out := append([]byte(nil), regs...)
	pc := amd64.Reg(regs, amd64.OffRIP)
	n := 0
	switch {
	case len(code) >= 1 && code[0] >= 0x50 && code[0] <= 0x57:
		n = 1
		e.store, e.storeSize = m.push(out, pushRegs[code[0]-0x50], &e.value), 8
	case len(code) >= 2 && code[0] == 0x41 && code[1] >= 0x50 && code[1] <= 0x57:
		n = 2
		e.store, e.storeSize = m.push(out, pushRegs[8+code[1]-0x50], &e.value), 8
	case len(code) >= 3 && code[0] == 0x48 && code[1] == 0x89 && code[2] == 0xe5:
		n = 3
		amd64.SetReg(out, amd64.OffRBP, amd64.Reg(regs, amd64.OffRSP))
	case len(code) >= 4 && code[0] == 0xf3 && code[1] == 0x0f && code[2] == 0x1e && code[3] == 0xfa:
		n = 4 // endbr64: a no-op for a process that is already past the check
	case len(code) >= 1 && code[0] == 0x90:
		n = 1
	default:
		k, ok := m.frameMove(code, regs, &e)
		if !ok {
			return emulation{}, false
		}
		n = k
	}
	amd64.SetReg(out, amd64.OffRIP, pc+uint64(n))
	e.regs = out
	return e, true
}

// push applies a push of the register at off to regs: the value (read before rsp moves, as
// push %rsp does) goes to the new stack pointer, returned.
func (m *machine) push(regs []byte, off int, value *[8]byte) uint64 {
	v := amd64.Reg(regs, off)
	sp := amd64.Reg(regs, amd64.OffRSP) - 8
	amd64.SetReg(regs, amd64.OffRSP, sp)
	le.PutUint64(value[:], v)
	return sp
}

// frameMove decodes a move between a register and a frame slot, mov r32/r64 to or from
// disp8/disp32(%rbp) (89 or 8b, REX.W for 64 bits, REX.R for r8-r15): the loads and stores of
// locals and arguments that unoptimized code begins its lines with. It fills e with the
// access and returns the instruction's length.
func (m *machine) frameMove(code, regs []byte, e *emulation) (int, bool) {
	i, size, hi := 0, 4, 0
	if len(code) > 0 && code[0]&0xf0 == 0x40 {
		rex := code[0]
		if rex&0x3 != 0 { // REX.X or REX.B: another base or an index
			return 0, false
		}
		if rex&0x8 != 0 {
			size = 8
		}
		if rex&0x4 != 0 {
			hi = 8
		}
		i = 1
	}
	if len(code) < i+3 || (code[i] != 0x89 && code[i] != 0x8b) {
		return 0, false
	}
	modrm := code[i+1]
	mod, reg, rm := modrm>>6, int(modrm>>3&7)+hi, modrm&7
	if rm != 5 || (mod != 1 && mod != 2) { // (%rbp)+disp only
		return 0, false
	}
	var disp int64
	n := i + 2
	if mod == 1 {
		disp = int64(int8(code[n]))
		n++
	} else {
		if len(code) < n+4 {
			return 0, false
		}
		disp = int64(int32(le.Uint32(code[n:])))
		n += 4
	}
	addr := amd64.Reg(regs, amd64.OffRBP) + uint64(disp)
	if code[i] == 0x89 {
		e.store, e.storeSize = addr, size
		le.PutUint64(e.value[:], amd64.Reg(regs, pushRegs[reg]))
	} else {
		e.load, e.loadSize, e.loadReg = addr, size, pushRegs[reg]
	}
	return n, true
}
