//go:build linux && amd64

package ptrace

import (
	"strconv"

	"github.com/hpcdap/hpcdap/procimage"
	"github.com/hpcdap/hpcdap/target"
	"golang.org/x/sys/unix"
)

// dispatch handles one wait status. Runs on the tracer's thread.
func (t *Tracer) dispatch(tid int, ws unix.WaitStatus) {
	th := t.threads[tid]
	if th == nil {
		t.unknown(tid, ws)
		return
	}
	switch {
	case ws.Exited() || ws.Signaled():
		t.gone(th, ws)
	case ws.Stopped():
		t.stopped(th, ws)
	}
}

// unknown handles a status of a tid the tracer has no record of: the first stop of a thread
// whose parent's clone event has not been reaped yet, a process created by clone without
// CLONE_THREAD (auto-attached by PTRACE_O_TRACECLONE; it is let go), or the exit of a child
// spawned earlier and since detached (reaping it leaves no zombie behind).
func (t *Tracer) unknown(tid int, ws unix.WaitStatus) {
	if !ws.Stopped() {
		return
	}
	st, err := procimage.ReadStatus(tid)
	if err != nil {
		return // gone already; its exit status follows
	}
	p := t.procs[st.Tgid]
	if p == nil && st.Tgid == tid {
		// The first stop of a followed process's child, ahead of its parent's fork event.
		if parent := t.procs[st.PPid]; parent != nil && parent.follow && st.TracerPid == t.tid {
			p = t.heldChild(tid, parent)
		}
	}
	if p == nil {
		ptraceRaw(unix.PTRACE_DETACH, tid, 0, 0)
		return
	}
	th := p.addThread(tid, tsNew)
	t.stopped(th, ws)
}

func (t *Tracer) stopped(th *thread, ws unix.WaitStatus) {
	sig := int(ws.StopSignal())
	switch waitEvent(ws) {
	case 0:
		t.signalStop(th, sig)
	case unix.PTRACE_EVENT_STOP:
		t.trapStop(th, sig)
	case unix.PTRACE_EVENT_CLONE:
		th.setStopped(stopEvent)
		if msg, err := eventMsg(th.tid); err == nil {
			t.cloned(th, int(msg))
		}
		if th.holding == 0 {
			t.unasked(th)
		}
	case unix.PTRACE_EVENT_EXEC:
		t.execed(th)
	case unix.PTRACE_EVENT_FORK, unix.PTRACE_EVENT_VFORK:
		th.setStopped(stopEvent)
		if msg, err := eventMsg(th.tid); err == nil && th.p.follow {
			t.forked(th, int(msg))
		}
		t.unasked(th)
	default:
		th.setStopped(stopEvent)
		t.unasked(th)
	}
}

// signalStop handles a signal-delivery stop.
func (t *Tracer) signalStop(th *thread, sig int) {
	p := th.p
	si, err := getSiginfo(th.tid)
	if err != nil {
		// Killed while stopping: the exit status follows.
		th.setStopped(stopSignal)
		th.sig = sig
		return
	}
	if th.injectSig != 0 && si.Signo == th.injectSig && si.Code == siTkill && si.Pid == t.self {
		// The signal a resume queued with tgkill: deliver it now, as asked, without a report.
		th.injectSig = 0
		th.setStopped(stopSignal)
		th.sig = sig
		if p.phase == phaseDetaching {
			return // stays stopped; Detach delivers it
		}
		if th.resume(sig, th.step) == nil && th.wantStop {
			// This stop consumed the pending interrupt; ask again.
			ptraceRaw(unix.PTRACE_INTERRUPT, th.tid, 0, 0)
		}
		return
	}
	if sig == int(unix.SIGCONT) {
		p.jobStopped = false
	}
	isNew := th.state == tsNew
	interrupted := th.wantStop
	// A StepRange goes on only from its own step trap. A run's breakpoint stays armed while
	// the walk goes on with another run (walkOn); it is disarmed as soon as the walk ends here,
	// while the thread is still stopped.
	walk := th.walk
	th.walk = nil
	staleTrap := th.runTrapPending // this is the first signal since a run ended unseen
	th.runTrapPending = false
	th.fetchSig = 0
	th.setStopped(stopSignal)
	th.sig = sig
	th.wantStop = false
	ev := target.Event{Kind: target.EventSignal, Tid: th.tid, Signal: sig, Code: si.Code}
	if si.Code > 0 {
		ev.Addr = si.Addr
	}
	if sig == int(unix.SIGTRAP) {
		var addr uint64
		ev.Trap, ev.Slot, addr = th.classifyTrap(si)
		if ev.Trap == target.TrapWatch {
			ev.Addr = addr
		} else if walk != nil && ev.Trap == target.TrapOther && walk.endsRun(si.Code, th.pc()) {
			ev.Trap = target.TrapStep // the breakpoint that ends a walk's run: its last step
			walk.run.fired = true
		} else if ev.Trap == target.TrapOther && si.Code == trapHwbkp && staleTrap && !isNew {
			t.staleRunTrap(th, walk, interrupted)
			return
		}
		th.trap = ev.Trap
	}
	if isNew {
		th.firstStopSeen = true
		t.announce(th)
	}
	if p.phase == phaseDetaching {
		if walk != nil {
			th.disarmRun(walk)
		}
		th.stopPC = th.pc() // Detach decides what becomes of th.sig, by where the trap left it
		return
	}
	ev.PC = th.pc()
	th.stopPC = ev.PC
	if walk != nil {
		ran := len(walk.run.lens) > 0
		if at, planted := walk.ranTo(ev.PC, ev.Trap == target.TrapBreakpoint); planted && th.setPC(at) == nil {
			// A trap planted in the run since it began: the walk ends before it.
			ev.Trap, ev.PC, th.trap, th.stopPC = target.TrapStep, at, target.TrapStep, at
		} else if !ran && (ev.Trap == target.TrapStep || ev.Trap == target.TrapWatch && th.step) {
			walk.steps++ // a single step completed (a watchpoint's trap comes after its store)
		}
		if ev.Trap == target.TrapStep && !interrupted {
			on, at := th.walkOn(walk, ev.PC)
			if on {
				return
			}
			ev.PC, th.stopPC = at, at
		}
		th.disarmRun(walk)
		ev.Steps = walk.steps
	}
	if ev.Trap == target.TrapBreakpoint && th.regsOK {
		ev.Regs = append([]byte(nil), th.regs[:]...)
		if t.hooked(th, &ev) {
			return
		}
	}
	p.push(ev)
}

// trapStop handles PTRACE_EVENT_STOP: an interrupt, a new thread's first stop, a group stop, or
// the notification that a group stop ended.
func (t *Tracer) trapStop(th *thread, sig int) {
	group := isStopSignal(sig)
	// The kernel reports the stop signal exactly while a group stop is in effect.
	th.p.jobStopped = group
	kind := stopInterrupt
	if group {
		kind = stopGroup
	}
	th.setStopped(kind)
	if th.state == tsNew {
		th.firstStopSeen = true
		t.announce(th)
		return
	}
	t.unasked(th)
}

// unasked decides what becomes of a stop the agent may not have asked for.
func (t *Tracer) unasked(th *thread) {
	p := th.p
	switch {
	case th.state == tsNew:
	case p.phase != phaseLive:
		// Attach and Detach want every thread stopped (and no run's breakpoint left armed).
		th.wantStop = false
		th.takeWalk()
	case th.wantStop:
		th.wantStop = false
		th.stopPC = th.pc()
		ev := target.Event{Kind: target.EventStopped, Tid: th.tid, PC: th.stopPC}
		if w := th.takeWalk(); w != nil {
			w.ranTo(th.stopPC, false)
			ev.Steps = w.steps // an interrupted StepRange: the steps it took
		}
		p.push(ev)
	case th.kind == stopGroup && th.fetching():
		// Woken by Kill from a job-control stop: run on to dequeue the signal, which
		// reports a signal-delivery stop (resume continues rather than listens).
		th.takeWalk()
		th.resume(0, false)
	case th.kind == stopGroup:
		// A job-control stop: stay stopped the way an untraced thread would, until SIGCONT.
		if ptraceRaw(unix.PTRACE_LISTEN, th.tid, 0, 0) == nil {
			th.state = tsListening
		}
	default:
		// A clone event, a stale interrupt, the end of a group stop: carry on as before (a
		// walk under way goes on).
		th.resume(0, th.step)
	}
}

// cloned handles the parent's side of thread creation.
func (t *Tracer) cloned(parent *thread, tid int) {
	p := parent.p
	if th := t.threads[tid]; th != nil && th.p != p {
		// A new process (not a thread) whose first stop came first: a followed child.
		if p.follow {
			t.forked(parent, tid)
		}
		return
	}
	if th := t.threads[tid]; th != nil {
		th.parent = parent.tid
		th.cloneSeen = true
		t.announce(th)
		return
	}
	if st, err := procimage.ReadStatus(tid); err == nil && st.Tgid != p.pid {
		if p.follow {
			t.forked(parent, tid) // followed: held like a fork child
		}
		return // a new process, not a thread: let go when its first stop arrives (unknown)
	}
	th := p.addThread(tid, tsNew)
	th.parent = parent.tid
	th.cloneSeen = true
	if p.phase == phaseLive {
		parent.holding = tid
	}
}

// releaseCreator ends the hold of th's creator (thread.holding): th's first stop was seen, or
// th is gone. The creator then carries on as after any stop nobody asked for.
//
// A thread that created another stays in its clone event's stop until the new thread's own
// first stop is seen: until then the new thread runs in the kernel, on its way to that stop,
// unknown to the agent. Were the creator let go at once, an agent that stops every thread it
// knows of could report the process stopped with the new thread missing from its threads
// (and still running). Held, the creator is reported stopped (Interrupt) only after the new
// thread is announced. The first stop comes within a scheduling delay.
func (t *Tracer) releaseCreator(th *thread) {
	parent := t.threads[th.parent]
	if parent == nil || parent.holding != th.tid {
		return
	}
	parent.holding = 0
	t.unasked(parent)
}

// announce makes a new thread known to the agent once both its parent's clone event and its own
// first stop have been seen. While attaching or detaching the parent does not matter and no
// event is sent: Attach reports every thread through Threads, Detach lets them all go.
func (t *Tracer) announce(th *thread) {
	p := th.p
	if th.state != tsNew || !th.firstStopSeen || (!th.cloneSeen && p.phase == phaseLive) {
		return
	}
	th.state = tsStopped
	if p.phase != phaseLive {
		t.releaseCreator(th)
		return
	}
	th.stopPC = th.pc()
	p.push(target.Event{Kind: target.EventNewThread, Tid: th.tid, Parent: th.parent, PC: th.stopPC})
	t.releaseCreator(th)
}

// execed handles PTRACE_EVENT_EXEC, always reported with the leader's tid. The thread that
// called execve took over the leader's tid (PTRACE_GETEVENTMSG gives its former one); every
// other thread is gone. The new image has no watchpoints and a new address space.
func (t *Tracer) execed(th *thread) {
	p := th.p
	former, _ := eventMsg(th.tid)
	for tid, o := range p.threads {
		if o == th {
			continue
		}
		delete(p.threads, tid)
		if tid == int(former) {
			delete(t.threads, tid) // its tid vanished; the kernel reports nothing more for it
		} else {
			o.orphan = true // its exit report is still to be reaped
		}
		if o.state != tsNew && p.phase == phaseLive {
			p.push(target.Event{Kind: target.EventThreadExit, Tid: tid})
		}
	}
	th.setStopped(stopEvent)
	th.state = tsStopped
	th.wantStop = false
	th.holding = 0 // the thread it waited for is gone with the exec
	th.step = false
	th.walk = nil
	th.runTrapPending = false // the kernel drops ptrace's breakpoints at an exec
	th.injectSig = 0
	th.watch = watchState{}
	p.openMem()
	p.refreshInfo()
	if p.phase == phaseLive {
		th.stopPC = th.pc()
		p.push(target.Event{Kind: target.EventExec, Tid: th.tid, PC: th.stopPC})
	}
}

// gone handles a thread's exit. The leader's exit is the process's: the kernel reports it only
// once every other thread has been reaped.
func (t *Tracer) gone(th *thread, ws unix.WaitStatus) {
	p := th.p
	delete(t.threads, th.tid)
	if th.orphan {
		return
	}
	delete(p.threads, th.tid)
	if th.tid == p.pid {
		p.push(target.Event{Kind: target.EventExit, Tid: p.pid, Status: int(ws)})
		t.forget(p, target.ErrExited)
		if r := p.pendingReq; r != nil {
			p.pendingReq = nil
			op := "detach"
			if p.phase == phaseAttaching {
				op = "attach"
			}
			r.finish(wrapErr(op, "pid "+strconv.Itoa(p.pid), target.ErrExited, nil))
		}
		return
	}
	if th.state != tsNew && p.phase == phaseLive {
		p.push(target.Event{Kind: target.EventThreadExit, Tid: th.tid})
	}
	if th.state == tsNew {
		t.releaseCreator(th) // killed on its way to its first stop
	}
}

// forget drops a process from the tracer: it exited, or it was detached.
func (t *Tracer) forget(p *process, why error) {
	for tid, th := range p.threads {
		if t.threads[tid] == th {
			delete(t.threads, tid)
		}
	}
	for tid, th := range t.threads {
		if th.p == p && th.orphan {
			delete(t.threads, tid)
		}
	}
	p.threads = map[int]*thread{}
	delete(t.procs, p.pid)
	delete(t.busy, p)
	p.gone.Store(&why)
	p.events.end()
	p.closeMem()
}

// staleRunTrap handles the trap of a hardware breakpoint that no watchpoint and no run under
// way explains: the breakpoint of a walk's run, hit just as an interrupt stopped the thread,
// whose signal the kernel delivers after the interrupt's stop was reported and the walk ended,
// when the thread is next resumed. Nothing ran since: the thread is resumed as it was (its
// walk, if one began, goes on; an interrupt asked meanwhile is asked again, as this stop
// consumed it), and at a detach it leaves no signal behind.
func (t *Tracer) staleRunTrap(th *thread, walk *rangeWalk, interrupted bool) {
	th.trap = target.TrapStep // delivers nothing at a detach (detachSignal)
	if th.p.phase != phaseLive {
		return
	}
	if th.resume(0, th.step) != nil {
		return
	}
	th.walk = walk
	if interrupted && ptraceRaw(unix.PTRACE_INTERRUPT, th.tid, 0, 0) == nil {
		th.wantStop = true
	}
}
