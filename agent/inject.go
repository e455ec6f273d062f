package agent

import (
	"syscall"

	"github.com/hpcdap/hpcdap/amd64"
	"github.com/hpcdap/hpcdap/cdti"
	"github.com/hpcdap/hpcdap/target"
)

// syscallABI is how a machine's thread makes one system call for the agent.
type syscallABI interface {
	// syscallCode is the code written at the thread's PC: the system call instruction, and
	// where the call cannot be single-stepped alone, a trap after it.
	syscallCode() []byte
	// stepsSyscall reports whether the call is single-stepped (else the thread is resumed
	// and stops at the trap after it).
	stepsSyscall() bool
	pc(regs []byte) uint64
	// syscallRegs returns regs set up to execute system call nr with args at pc.
	syscallRegs(regs []byte, pc uint64, nr uint64, args ...uint64) []byte
	// syscallResult is the system call's return value (negative: -errno).
	syscallResult(regs []byte) int64
}

// syscallABI returns the process's way of making system calls, or nil where the agent has none.
func (p *proc) syscallABI() syscallABI {
	switch {
	case p.mach != nil:
		return p.mach
	case p.isPower():
		return powerSyscalls{p.order()}
	}
	return nil
}

// injectSyscall runs one system call in thread th, as AllocateMemory, FreeMemory and
// InstallTrapHandler need: with the thread stopped, it saves its registers and the bytes at its
// PC, writes the system call's code there, sets the call's registers, runs the thread over it,
// reads the result and restores the bytes and the registers. Every other thread stays as it
// was (the agent does not run them meanwhile). A signal that arrives first is kept for the
// thread and the call retried.
func (p *proc) injectSyscall(th *pthread, nr uint64, args ...uint64) (int64, cdti.CmdReturnCode) {
	abi := p.syscallABI()
	if abi == nil {
		return 0, cdti.CmdInval
	}
	var result int64
	code := p.pause([]int{th.tid}, func() cdti.CmdReturnCode {
		regs, err := p.tp.Registers(th.tid, target.RegsGeneral)
		if err != nil {
			return cdti.CmdTIDinval
		}
		pc := abi.pc(regs)
		code := abi.syscallCode()
		saved := make([]byte, len(code))
		if n, err := p.tp.ReadMemory(pc, saved); err != nil || n != len(saved) {
			return cdti.CmdMemUnavail
		}
		if n, err := p.tp.WriteMemory(pc, code); err != nil || n != len(code) {
			p.tp.WriteMemory(pc, saved)
			return cdti.CmdMemUnavail
		}
		restore := func() {
			if _, err := p.tp.WriteMemory(pc, saved); err != nil {
				p.a.logf("agent: rank %d: tid %d: restore code at %#x after injected call: %v", p.rank, th.tid, pc, err)
			}
			if err := p.tp.SetRegisters(th.tid, target.RegsGeneral, regs); err != nil {
				p.a.logf("agent: rank %d: tid %d: restore registers after injected call: %v", p.rank, th.tid, err)
			}
			th.pc = 0
		}
		for attempt := 0; attempt < 4; attempt++ {
			call := abi.syscallRegs(regs, pc, nr, args...)
			if err := p.tp.SetRegisters(th.tid, target.RegsGeneral, call); err != nil {
				restore()
				return cdti.CmdMemUnavail
			}
			p.capture, p.captured = th.tid, nil
			run := p.tp.Resume
			if abi.stepsSyscall() {
				run = p.tp.Step
			}
			if err := run(th.tid, 0); err != nil {
				p.capture = 0
				restore()
				return cdti.CmdMemUnavail
			}
			th.stopped = false
			err := p.pump(func() bool { return p.captured != nil })
			p.capture = 0
			ev := p.captured
			p.captured = nil
			if err != nil || ev == nil || ev.Kind == target.EventThreadExit || p.exited {
				if !p.exited && p.threads[th.tid] != nil {
					restore()
				}
				return cdti.CmdProcessExiting
			}
			after, err := p.tp.Registers(th.tid, target.RegsGeneral)
			if err != nil {
				restore()
				return cdti.CmdMemUnavail
			}
			if abi.pc(after) == pc && ev.Kind == target.EventSignal && ev.Trap != target.TrapStep {
				// A signal stopped the thread before the instruction ran: keep it for the
				// thread (delivered when it next runs) and try again. A SIGSTOP is a tool's
				// stop, as onSignal takes it: told to the tool in control, never delivered
				// (delivered, it would hold the process in a job-control stop no tool hears of:
				// a launcher stopped by an attach as it reached a breakpoint whose first pass
				// maps the scratch page stayed so).
				switch {
				case ev.Signal == int(syscall.SIGSTOP):
					p.pendToolStop(th, pc)
				case ev.Signal != int(syscall.SIGTRAP) && th.sig == 0:
					th.sig = ev.Signal
				}
				continue
			}
			result = abi.syscallResult(after)
			restore()
			return cdti.CmdSuccess
		}
		restore()
		return cdti.CmdMemUnavail
	})
	return result, code
}

// pendToolStop queues the notification of a SIGSTOP that stopped th at pc while the agent ran
// it for itself, for the tool in control if it asked to hear of SIGSTOP (onSignal's rule).
func (p *proc) pendToolStop(th *pthread, pc uint64) {
	if p.holder != nil && p.ctl.notifySet.Has(int(syscall.SIGSTOP)) {
		p.pending = append(p.pending, notif{tid: th.tid, sig: int(syscall.SIGSTOP), reason: cdti.SignalGeneric, inst: pc})
	}
}

// Arguments of the injected mmap: private anonymous memory the tool can write code into.
const (
	protRWX    = syscall.PROT_READ | syscall.PROT_WRITE | syscall.PROT_EXEC
	mapPrivAnn = syscall.MAP_PRIVATE | syscall.MAP_ANONYMOUS
)

// allocateMemory answers AllocateMemory: size bytes (rounded up to pages) of private,
// readable, writable and executable memory, mapped by the process itself.
func (p *proc) allocateMemory(th *pthread, size uint64) (uint64, cdti.CmdReturnCode) {
	if size == 0 || size > 1<<46 {
		return 0, cdti.CmdParmErr
	}
	page := uint64(p.info.PageSize)
	if page == 0 {
		page = 4096
	}
	size = (size + page - 1) &^ (page - 1)
	r, code := p.injectSyscall(th, amd64.SysMmap, 0, size, protRWX, mapPrivAnn, ^uint64(0), 0)
	if code != cdti.CmdSuccess {
		return 0, code
	}
	if r < 0 && r > -4096 {
		return 0, cdti.CmdMemUnavail
	}
	return uint64(r), cdti.CmdSuccess
}

// freeMemory answers FreeMemory with munmap in the process.
func (p *proc) freeMemory(th *pthread, addr, size uint64) cdti.CmdReturnCode {
	if size == 0 || addr == 0 {
		return cdti.CmdParmErr
	}
	r, code := p.injectSyscall(th, amd64.SysMunmap, addr, size)
	if code != cdti.CmdSuccess {
		return code
	}
	if r != 0 {
		return cdti.CmdParmErr
	}
	return cdti.CmdSuccess
}
