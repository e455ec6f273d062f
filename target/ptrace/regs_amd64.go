//go:build linux

package ptrace

import (
	"debug/elf"
	"encoding/binary"
	"unsafe"

	"github.com/hpcdap/hpcdap/amd64"
	"github.com/hpcdap/hpcdap/arch"
	"github.com/hpcdap/hpcdap/target"
	"golang.org/x/sys/unix"
)

// x86_64 register sets are exchanged as the kernel's structures, laid out in package amd64:
// RegsGeneral is struct user_regs_struct and RegsFloat is struct user_fpregs_struct (the
// 512-byte FXSAVE area).
const (
	gregsSize  = amd64.UserRegsSize
	fpregsSize = amd64.FPRegsSize
)

const archMachine = elf.EM_X86_64

// archFacts: int3 is one byte and leaves the PC after itself; DR0-DR3 are four watchpoints.
var archFacts = func() target.Arch {
	a, _ := arch.For(archMachine, binary.LittleEndian)
	return target.Arch{BreakInstr: a.Trap(), PCAfterBreak: a.PCAfterTrap, WatchSlots: amd64.WatchSlots}
}()

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

func regsPC(b []byte) uint64 { return amd64.Reg(b, amd64.OffRIP) }

// setRegsPC sets rip and, as gdb does, orig_rax = -1 (amd64.SetPC).
func setRegsPC(b []byte, pc uint64) { amd64.SetPC(b, pc) }
