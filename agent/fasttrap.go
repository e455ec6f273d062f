package agent

import (
	"encoding/binary"
	"syscall"

	"github.com/hpcdap/hpcdap/cdti"
	"github.com/hpcdap/hpcdap/ppc64"
	"github.com/hpcdap/hpcdap/target"
)

// Power fast traps (ppc64.md §2.4). A tool installs a SIGTRAP handler in the program
// (InstallTrapHandler), enables fast breakpoints (SetPreferences) and plants the fast-trap word
// `twi 14,r31,0x8000|n`: a thread that reaches it runs the program's handler, and the tool hears
// nothing. The handler decides what follows, normally by moving the interrupted IAR past the
// trap in its context.

// powerSyscalls makes system calls on 64-bit PowerPC: `sc`, then a trap to stop at. A
// single-step is not used, since an emulator may run the instruction after `sc` within the
// same step.
type powerSyscalls struct{ order binary.ByteOrder }

func (s powerSyscalls) syscallCode() []byte {
	b := ppc64.PutWord(s.order, ppc64.SyscallWord)
	return append(b, ppc64.PutWord(s.order, ppc64.TrapWordLinux)...)
}

func (powerSyscalls) stepsSyscall() bool { return false }

func (s powerSyscalls) regs(b []byte) ppc64.PtRegs {
	var r ppc64.PtRegs
	if err := r.Unmarshal(b, s.order); err != nil {
		return ppc64.PtRegs{} // a PC of 0: the call fails when its code cannot be written there
	}
	return r
}

func (s powerSyscalls) pc(b []byte) uint64 { return s.regs(b).NIP }

func (s powerSyscalls) syscallRegs(b []byte, pc uint64, nr uint64, args ...uint64) []byte {
	r := s.regs(b)
	r.GPR[0] = nr
	copy(r.GPR[3:9], args)
	r.NIP = pc
	return r.Marshal(s.order)
}

func (s powerSyscalls) syscallResult(b []byte) int64 {
	r := s.regs(b)
	return ppc64.SyscallResult(r.GPR[3], r.CCR)
}

// installTrapHandler answers InstallTrapHandler: the CNK checks the 16 bytes at handler (under
// ELFv1 a function descriptor: code address and TOC) and installs it for SIGTRAP with
// SA_SIGINFO. handler 0 is RemoveTrapHandler: SIGTRAP gets its default action back.
func (p *proc) installTrapHandler(th *pthread, handler uint64) cdti.Result {
	tid := uint32(th.tid)
	if handler != ppc64.SigDfl && !p.mapped(handler, 16) {
		return fail(cdti.CmdAddrErr, tid)
	}
	var r int64
	code := p.pause([]int{th.tid}, func() cdti.CmdReturnCode {
		regs, err := p.tp.Registers(th.tid, target.RegsGeneral)
		if err != nil {
			return cdti.CmdTIDinval
		}
		// The kernel's struct sigaction, on the thread's stack below what its code may use.
		at := (powerSyscalls{p.order()}.regs(regs).GPR[1] - ppc64.ProtectedZone - ppc64.SigactionSize) &^ 15
		act := make([]byte, ppc64.SigactionSize)
		p.order().PutUint64(act[0:], handler)
		if handler != ppc64.SigDfl {
			p.order().PutUint64(act[8:], ppc64.SASiginfo)
		}
		saved := make([]byte, len(act))
		if n, err := p.tp.ReadMemory(at, saved); err != nil || n != len(saved) {
			return cdti.CmdMemUnavail
		}
		if n, err := p.tp.WriteMemory(at, act); err != nil || n != len(act) {
			p.tp.WriteMemory(at, saved)
			return cdti.CmdMemUnavail
		}
		var code cdti.CmdReturnCode
		r, code = p.injectSyscall(th, ppc64.SysRtSigaction, uint64(syscall.SIGTRAP), at, 0, 8)
		if _, err := p.tp.WriteMemory(at, saved); err != nil {
			p.a.logf("agent: rank %d: tid %d: restore the stack at %#x after rt_sigaction: %v", p.rank, th.tid, at, err)
		}
		return code
	})
	switch {
	case code != cdti.CmdSuccess:
		return fail(code, tid)
	case r < 0:
		p.a.logf("agent: rank %d: rt_sigaction(SIGTRAP, %#x): errno %d", p.rank, handler, -r)
		return fail(cdti.CmdAddrErr, tid)
	case handler == ppc64.SigDfl:
		return ok(&cdti.RemoveTrapHandlerAck{ThreadID: tid})
	}
	return ok(&cdti.InstallTrapHandlerAck{ThreadID: tid})
}

// fastTrap reports whether a SIGTRAP breakpoint stop at addr belongs to the program: fast
// breakpoints are enabled and the word at addr is a fast trap (Tool_IsNotifyRequired's first
// rule). The signal is then delivered to the program and no tool hears of it.
func (p *proc) fastTrap(addr uint64) bool {
	if !p.isPower() || p.prefs.breakMode != cdti.FastBreakEnable {
		return false
	}
	w := make([]byte, 4)
	if b := p.bps[addr]; b != nil && !b.lifted && len(b.trap) == 4 {
		w = b.trap // planted here: no need to read it back
	} else if n, err := p.tp.ReadMemory(addr, w); err != nil || n != 4 {
		return false
	}
	return ppc64.IsFastTrap(p.order().Uint32(w))
}
