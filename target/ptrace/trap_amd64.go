//go:build linux

package ptrace

import "github.com/hpcdap/hpcdap/target"

// classifyTrap says why a SIGTRAP stop happened. On x86: int3 reports SI_KERNEL; a data
// watchpoint TRAP_HWBKPT (DR6 names the slot; si_addr is the PC, so the data address comes
// from the slot); a single step TRAP_TRACE, except a step over a syscall instruction
// (TRAP_BRKPT) and a step into a signal handler (a ptrace notification with si_code SIGTRAP). A
// step whose instruction also hits a watchpoint reports TRAP_TRACE with the DR6 slot bit set:
// that is reported as the watchpoint.
func (th *thread) classifyTrap(si siginfo) (target.TrapKind, int, uint64) {
	switch si.Code {
	case siKernel:
		return target.TrapBreakpoint, 0, 0
	case trapHwbkp:
		if th.watch.dr7 == 0 {
			return target.TrapOther, 0, 0 // no watchpoint: a walk's run ends (rangestep.go)
		}
		if slot, ok := th.takeDR6(); ok {
			return target.TrapWatch, slot, th.watch.addr[slot]
		}
		return target.TrapOther, 0, 0
	case trapTrace:
		if th.watch.dr7 != 0 {
			if slot, ok := th.takeDR6(); ok {
				return target.TrapWatch, slot, th.watch.addr[slot]
			}
		}
		return target.TrapStep, 0, 0
	case trapBrkpt, trapUnk:
		if th.step {
			return target.TrapStep, 0, 0
		}
		return target.TrapOther, 0, 0
	}
	if si.Code <= 0 {
		return target.TrapNone, 0, 0
	}
	return target.TrapOther, 0, 0
}
