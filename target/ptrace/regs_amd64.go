//go:build linux

package ptrace

import (
	"debug/elf"
	"encoding/binary"
	"unsafe"

	"github.com/hpcdap/hpcdap/target"
	"golang.org/x/sys/unix"
)

// x86_64 register sets, exchanged as the kernel's structures (<sys/user.h>):
// RegsGeneral is struct user_regs_struct (27 64-bit words: r15 r14 r13 r12 rbp rbx r11 r10 r9
// r8 rax rcx rdx rsi rdi orig_rax rip cs eflags rsp ss fs_base gs_base ds es fs gs) and
// RegsFloat is struct user_fpregs_struct (the 512-byte FXSAVE area).
const (
	gregsSize  = 27 * 8
	fpregsSize = 512
	offOrigAX  = 15 * 8
	offPC      = 16 * 8
)

const archMachine = elf.EM_X86_64

// archFacts: int3 is one byte and leaves the PC after itself; DR0-DR3 are four watchpoints.
var archFacts = target.Arch{BreakInstr: []byte{0xCC}, PCAfterBreak: 1, WatchSlots: 4}

func regSetSize(set target.RegSet) (int, bool) {
	switch set {
	case target.RegsGeneral:
		return gregsSize, true
	case target.RegsFloat:
		return fpregsSize, true
	}
	return 0, false
}

// getRegs reads a register set into b, which has the set's size.
func getRegs(tid int, set target.RegSet, b []byte) error {
	req := unix.PTRACE_GETREGS
	if set == target.RegsFloat {
		req = unix.PTRACE_GETFPREGS
	}
	return ptracePtr(req, tid, 0, unsafe.Pointer(&b[0]))
}

func setRegs(tid int, set target.RegSet, b []byte) error {
	req := unix.PTRACE_SETREGS
	if set == target.RegsFloat {
		req = unix.PTRACE_SETFPREGS
	}
	return ptracePtr(req, tid, 0, unsafe.Pointer(&b[0]))
}

func regsPC(b []byte) uint64 { return binary.LittleEndian.Uint64(b[offPC:]) }

// setRegsPC sets rip and, as gdb does, orig_rax = -1: the kernel then does not restart an
// interrupted system call, which would move rip back by the size of the syscall instruction.
func setRegsPC(b []byte, pc uint64) {
	binary.LittleEndian.PutUint64(b[offPC:], pc)
	binary.LittleEndian.PutUint64(b[offOrigAX:], ^uint64(0))
}
