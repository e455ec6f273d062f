//go:build linux && amd64

package ptrace

import (
	"fmt"

	"github.com/hpcdap/hpcdap/procimage"
	"github.com/hpcdap/hpcdap/target"
	"golang.org/x/sys/unix"
)

type tstate int

const (
	tsNew       tstate = iota // traced, but its clone event or first stop is still outstanding; unknown to the agent
	tsRunning                 // executing
	tsListening               // in a job-control stop under PTRACE_LISTEN: to the agent, running
	tsStopped                 // in a ptrace stop the agent knows about
)

// stopKind says which kind of ptrace stop a thread is in. It decides how the thread can be
// resumed: only a signal-delivery stop can deliver a signal by PTRACE_CONT's data argument, and
// only a group stop can be resumed with PTRACE_LISTEN.
type stopKind int

const (
	stopInterrupt stopKind = iota // PTRACE_EVENT_STOP with SIGTRAP: PTRACE_INTERRUPT, a new thread, the end of a group stop
	stopGroup                     // PTRACE_EVENT_STOP with a stop signal: the thread takes part in a group stop
	stopEvent                     // PTRACE_EVENT_CLONE, PTRACE_EVENT_EXEC
	stopSignal                    // signal-delivery stop
)

// thread is one traced thread. All fields are owned by the tracer's thread.
type thread struct {
	tid   int
	p     *process
	state tstate
	kind  stopKind

	sig    int             // stopSignal: the signal delivered on resume unless replaced
	ourSig bool            // sig was raised by the back end itself (Spawn's SIGCONT) and is never delivered
	trap   target.TrapKind // cause of the SIGTRAP stop the thread is in
	stopPC uint64          // PC reported with the stop (0 if not read)

	wantStop  bool // Interrupt was asked and its stop has not been reported yet
	fetchSig  int  // a signal Kill sent during a job-control stop, for this thread to dequeue: continue, do not listen
	step      bool // the thread was last resumed with PTRACE_SINGLESTEP
	injectSig int  // queued with tgkill on resume from a stop that cannot carry a signal

	parent        int  // tsNew: the thread that created it
	cloneSeen     bool // tsNew: the parent's PTRACE_EVENT_CLONE was seen
	firstStopSeen bool // tsNew: the thread's own first stop was seen
	orphan        bool // killed by another thread's exec: its exit report is swallowed
	holding       int  // the new thread whose first stop it waits for in its clone event's stop (releaseCreator)

	// walk is a StepRange under way: the next step trap may step on (rangestep.go). It
	// outlives the stops the tracer carries on from unreported (a clone event, a stale
	// interrupt, a group stop), so that its steps are counted across them; the event that
	// ends it reports them (takeWalk), and every resume replaces it.
	walk *rangeWalk
	// runTrapPending: a walk's run ended with its breakpoint armed and not seen to fire, whose
	// trap may come at the next signal stop (staleRunTrap). ranDR: a run ever armed a debug
	// register (a detach clears DR7 then, whatever the watchpoints).
	runTrapPending, ranDR bool

	regs   [gregsSize]byte // general registers, valid while regsOK
	regsOK bool
	watch  watchState
}

// setStopped records a ptrace stop of a known thread (a walk under way stays: see walk).
func (th *thread) setStopped(kind stopKind) {
	if th.state != tsNew {
		th.state = tsStopped
	}
	th.kind = kind
	th.sig = 0
	th.ourSig = false
	th.trap = target.TrapNone
	th.stopPC = 0
	th.regsOK = false
}

// loadRegs fills the register cache.
func (th *thread) loadRegs() error {
	if th.regsOK {
		return nil
	}
	if err := getRegs(th.tid, target.RegsGeneral, th.regs[:]); err != nil {
		return err
	}
	th.regsOK = true
	return nil
}

// pc is the thread's program counter, or 0 if it cannot be read.
func (th *thread) pc() uint64 {
	if th.loadRegs() != nil {
		return 0
	}
	return regsPC(th.regs[:])
}

// resume restarts a stopped thread. Only a signal-delivery stop can deliver a signal through
// PTRACE_CONT; from any other stop the kernel ignores it, so the signal is queued with tgkill
// and, when it comes back as a signal-delivery stop, delivered without a report. A thread in a
// group stop is resumed with PTRACE_LISTEN: like an untraced process it stays stopped until
// SIGCONT, so job control keeps working under the debugger.
func (th *thread) resume(sig int, step bool) error {
	if th.holding != 0 {
		th.holding, th.wantStop = 0, false // a stop asked during the hold is superseded
	}
	req := unix.PTRACE_CONT
	if step {
		req = unix.PTRACE_SINGLESTEP
	}
	data := 0
	switch {
	case th.kind == stopSignal && sig == 0 && isStopSignal(th.sig) && !th.ourSig && th.p.jobStopped:
		// A stop signal that reached a process already in a job-control stop: suppressing it
		// would let this thread run while the others stay stopped. Delivering it instead
		// rejoins the group stop, which is what the signal does to an untraced stopped process.
		data = th.sig
	case th.kind == stopSignal:
		data = sig
	case th.kind == stopGroup && !step && !th.fetching():
		if err := th.inject(sig); err != nil {
			return err
		}
		if err := ptraceRaw(unix.PTRACE_LISTEN, th.tid, 0, 0); err != nil {
			return err
		}
		th.state = tsListening
		th.step = false
		th.regsOK = false
		return nil
	default:
		if err := th.inject(sig); err != nil {
			return err
		}
	}
	if err := ptraceRaw(req, th.tid, 0, uintptr(data)); err != nil {
		return err
	}
	th.state = tsRunning
	th.step = step
	th.regsOK = false
	return nil
}

func (th *thread) inject(sig int) error {
	if sig == 0 {
		return nil
	}
	if err := unix.Tgkill(th.p.pid, th.tid, unix.Signal(sig)); err != nil {
		return err
	}
	th.injectSig = sig
	return nil
}

// Registers returns a register set: RegsGeneral is the kernel's user_regs_struct and RegsFloat
// its user_fpregs_struct, as little-endian bytes.
func (p *process) Registers(tid int, set target.RegSet) ([]byte, error) {
	var out []byte
	err := p.t.call(func() error {
		th, err := p.stopped("registers", tid)
		if err != nil {
			return err
		}
		if set == target.RegsGeneral {
			if err := th.loadRegs(); err != nil {
				return p.fail("registers", tid, err)
			}
			out = append([]byte(nil), th.regs[:]...)
			return nil
		}
		n, ok := regSetSize(set)
		if !ok {
			return wrapErr("registers", p.obj(tid), target.ErrUnsupported, fmt.Errorf("register set %d", set))
		}
		out = make([]byte, n)
		if err := getRegs(tid, set, out); err != nil {
			return p.fail("registers", tid, err)
		}
		return nil
	})
	return out, err
}

// SetRegisters replaces a register set; regs must have the set's exact size.
func (p *process) SetRegisters(tid int, set target.RegSet, regs []byte) error {
	n, ok := regSetSize(set)
	if !ok {
		return wrapErr("set registers", p.obj(tid), target.ErrUnsupported, fmt.Errorf("register set %d", set))
	}
	if len(regs) != n {
		return wrapErr("set registers", p.obj(tid), nil, fmt.Errorf("register set %d is %d bytes, got %d: %w", set, n, len(regs), unix.EINVAL))
	}
	buf := append([]byte(nil), regs...)
	return p.t.call(func() error {
		th, err := p.stopped("set registers", tid)
		if err != nil {
			return err
		}
		th.regsOK = false
		if err := setRegs(tid, set, buf); err != nil {
			return p.fail("set registers", tid, err)
		}
		return nil
	})
}

// PC reads a thread's program counter.
func (p *process) PC(tid int) (uint64, error) {
	var pc uint64
	err := p.t.call(func() error {
		th, err := p.stopped("pc", tid)
		if err != nil {
			return err
		}
		if err := th.loadRegs(); err != nil {
			return p.fail("pc", tid, err)
		}
		pc = regsPC(th.regs[:])
		return nil
	})
	return pc, err
}

// SetPC moves a thread's program counter. Like gdb, it also cancels the restart of a system
// call the thread was interrupted in, which would otherwise move the new PC back.
func (p *process) SetPC(tid int, pc uint64) error {
	return p.t.call(func() error {
		th, err := p.stopped("set pc", tid)
		if err != nil {
			return err
		}
		if err := th.setPC(pc); err != nil {
			return p.fail("set pc", tid, err)
		}
		return nil
	})
}

// setPC sets the program counter of the stopped thread th.
func (th *thread) setPC(pc uint64) error {
	if err := th.loadRegs(); err != nil {
		return err
	}
	regs := th.regs
	setRegsPC(regs[:], pc)
	th.regsOK = false
	if err := setRegs(th.tid, target.RegsGeneral, regs[:]); err != nil {
		return err
	}
	return nil
}

// Resume lets a stopped thread run, delivering sig (0 for none).
func (p *process) Resume(tid int, sig int) error {
	return p.restart("resume", tid, sig, false, nil)
}

// ResumeWithRegisters replaces a stopped thread's general registers and lets it run,
// delivering sig, in one request to the tracer's thread (target.RegsResumer).
func (p *process) ResumeWithRegisters(tid int, regs []byte, sig int) error {
	if len(regs) != gregsSize {
		return wrapErr("resume", p.obj(tid), nil, fmt.Errorf("%d bytes of registers, want %d: %w", len(regs), gregsSize, unix.EINVAL))
	}
	if sig < 0 || sig > 64 {
		return wrapErr("resume", p.obj(tid), nil, fmt.Errorf("signal %d: %w", sig, unix.EINVAL))
	}
	buf := append([]byte(nil), regs...)
	return p.t.call(func() error {
		th, err := p.stopped("resume", tid)
		if err != nil {
			return err
		}
		th.regsOK = false
		if err := setRegs(tid, target.RegsGeneral, buf); err != nil {
			return p.fail("set registers", tid, err)
		}
		th.takeWalk() // none is left on a stopped thread, but its breakpoint must not outlive it
		if err := th.resume(sig, false); err != nil {
			return p.fail("resume", tid, err)
		}
		return nil
	})
}

// Step executes one instruction of a stopped thread, delivering sig first.
func (p *process) Step(tid int, sig int) error {
	return p.restart("step", tid, sig, true, nil)
}

// restart resumes (or, with step, single-steps) a stopped thread, delivering sig first; walk,
// when not nil, is the StepRange the step begins (rangestep.go).
func (p *process) restart(op string, tid, sig int, step bool, walk *rangeWalk) error {
	if sig < 0 || sig > 64 {
		return wrapErr(op, p.obj(tid), nil, fmt.Errorf("signal %d: %w", sig, unix.EINVAL))
	}
	return p.t.call(func() error {
		th, err := p.stopped(op, tid)
		if err != nil {
			return err
		}
		th.takeWalk() // none is left on a stopped thread, but its breakpoint must not outlive it
		if err := th.resume(sig, step); err != nil {
			return p.fail(op, tid, err)
		}
		th.walk = walk
		return nil
	})
}

// Interrupt stops a running thread with PTRACE_INTERRUPT; EventStopped follows unless another
// stop (a signal, a breakpoint) is reported first, which then satisfies the request.
func (p *process) Interrupt(tid int) error {
	return p.t.call(func() error {
		th, err := p.thread("interrupt", tid)
		if err != nil {
			return err
		}
		if th.holding != 0 {
			th.wantStop = true // reported once the hold ends (releaseCreator)
			return nil
		}
		if th.state == tsStopped || th.wantStop {
			return nil
		}
		if err := ptraceRaw(unix.PTRACE_INTERRUPT, tid, 0, 0); err != nil {
			return p.fail("interrupt", tid, err)
		}
		th.wantStop = true
		return nil
	})
}

// Kill sends sig to one thread (tgkill) or, with tid 0, to the process (kill). It does not
// need the thread to be stopped; a traced thread reports the signal as EventSignal. That holds
// in a job-control stop too: a thread kept there with PTRACE_LISTEN is not woken by a new
// signal (only SIGCONT and SIGKILL wake it), so Kill wakes one listening thread that does not
// block sig to dequeue and report it. Resuming from that report without a signal puts the
// process back into its job-control stop (see thread.resume), as the signal would have left an
// untraced stopped process.
func (p *process) Kill(tid int, sig int) error {
	return p.t.call(func() error {
		var err error
		if tid == 0 {
			if err = p.usable(); err != nil {
				return wrapErr("kill", fmt.Sprintf("pid %d signal %d", p.pid, sig), nil, err)
			}
			err = unix.Kill(p.pid, unix.Signal(sig))
		} else {
			if _, err = p.thread("kill", tid); err != nil {
				return err
			}
			err = unix.Tgkill(p.pid, tid, unix.Signal(sig))
		}
		if err != nil {
			return wrapErr("kill", fmt.Sprintf("pid %d tid %d signal %d", p.pid, tid, sig), errClass(err, p.exited(), false), err)
		}
		if sig == int(unix.SIGCONT) {
			// SIGCONT ends a job-control stop when it is sent, not when it is delivered. (A
			// stop signal dequeued before a SIGCONT, from whoever, is dropped by the kernel
			// if it is delivered afterwards, so the resume rule cannot re-stop the process.)
			p.jobStopped = false
		}
		p.wakeForSignal(tid, sig)
		return nil
	})
}

// wakeForSignal makes a thread in a job-control stop dequeue sig, just sent to thread tid (0:
// to the process), and report it: a thread listening (PTRACE_LISTEN) is interrupted, and at
// that stop, or at the resume of a thread the agent holds in the group stop, it is continued
// rather than listened. A process-directed signal is left to a running thread if there is
// one, since the kernel gives it to such a thread. Runs on the tracer's thread.
func (p *process) wakeForSignal(tid, sig int) {
	if sig <= 0 || sig == int(unix.SIGCONT) || sig == int(unix.SIGKILL) || p.phase != phaseLive {
		return
	}
	inGroupStop := func(th *thread) bool {
		return th.state == tsListening || (th.state == tsStopped && th.kind == stopGroup)
	}
	var th *thread
	if tid != 0 {
		th = p.threads[tid]
		if th == nil || !inGroupStop(th) || blocks(th.tid, sig) {
			return
		}
	} else {
		var tids []int
		for ttid, o := range p.threads {
			if o.state == tsRunning {
				return
			}
			if inGroupStop(o) {
				tids = append(tids, ttid)
			}
		}
		sortLeaderFirst(p.pid, tids)
		for _, ttid := range tids {
			if !blocks(ttid, sig) {
				th = p.threads[ttid]
				break
			}
		}
		if th == nil {
			return // every thread blocks it: it waits, as it would untraced
		}
	}
	if th.state == tsListening && ptraceRaw(unix.PTRACE_INTERRUPT, th.tid, 0, 0) != nil {
		return
	}
	th.fetchSig = sig
}

// fetching reports whether the thread is to dequeue the signal Kill sent in a job-control stop
// (see wakeForSignal): the signal is still pending for it or its process. Once it is not (the
// thread has taken it, or another has), the thread keeps the job-control stop again.
func (th *thread) fetching() bool {
	if th.fetchSig == 0 {
		return false
	}
	st, err := procimage.ReadStatus(th.tid)
	if err == nil && (st.SigPnd|st.ShdPnd)&(1<<(th.fetchSig-1)) != 0 {
		return true
	}
	th.fetchSig = 0
	return false
}

// blocks reports whether thread tid blocks sig (an unreadable status counts as blocking).
func blocks(tid, sig int) bool {
	st, err := procimage.ReadStatus(tid)
	return err != nil || st.SigBlk&(1<<(sig-1)) != 0
}

// SetWatchpoint programs a hardware watchpoint slot of a stopped thread.
func (p *process) SetWatchpoint(tid, slot int, addr uint64, size int, kind target.WatchKind) error {
	return p.t.call(func() error {
		th, err := p.stopped("set watchpoint", tid)
		if err != nil {
			return err
		}
		if err := th.setWatch(slot, addr, size, kind); err != nil {
			obj := fmt.Sprintf("%s slot %d at %#x", p.obj(tid), slot, addr)
			return wrapErr("set watchpoint", obj, errClass(err, p.exited(), false), err)
		}
		return nil
	})
}

// ClearWatchpoint disarms a slot of a stopped thread.
func (p *process) ClearWatchpoint(tid, slot int) error {
	return p.t.call(func() error {
		th, err := p.stopped("clear watchpoint", tid)
		if err != nil {
			return err
		}
		if err := th.clearWatch(slot); err != nil {
			return wrapErr("clear watchpoint", fmt.Sprintf("%s slot %d", p.obj(tid), slot), errClass(err, p.exited(), false), err)
		}
		return nil
	})
}
