package agent

import (
	"syscall"

	"github.com/hpcdap/hpcdap/cdti"
	"github.com/hpcdap/hpcdap/target"
)

// handleEvent applies one back-end event to the CNK state, then moves the process on.
func (p *proc) handleEvent(ev target.Event) {
	p.evSeen++
	var back uint64 // a breakpoint whose out-of-line instruction the thread had not run
	if th := p.threads[ev.Tid]; th != nil && th.ool.slot != 0 {
		back = p.leaveSlot(th, &ev)
	}
	if p.capture != 0 && ev.Tid == p.capture && ev.Kind != target.EventExit {
		// An injected system call or step the caller is waiting for.
		if th := p.threads[ev.Tid]; th != nil {
			th.stopped, th.interrupting = true, false
			th.pc = ev.PC
		}
		e := ev
		p.captured = &e
		if ev.Kind != target.EventThreadExit {
			return
		}
	}
	if so := p.stepOver; so != nil && ev.Tid == so.tid && ev.Kind != target.EventNewThread {
		p.finishStepOver(ev)
		p.advance()
		return
	}
	switch ev.Kind {
	case target.EventSignal:
		th := p.thread(ev.Tid)
		p.onSignal(th, ev)
	case target.EventStopped:
		th := p.thread(ev.Tid)
		th.stopped, th.interrupting = true, false
		th.pc = ev.PC
		if th.toolStep {
			// Interrupted before its step completed: step again when it next runs, a range
			// step with the steps it took off its budget (rangeStepInterrupted).
			th.toolStep, th.stepReq = false, true
			p.rangeStepInterrupted(th, ev)
		}
	case target.EventNewThread:
		th := p.thread(ev.Tid)
		th.stopped, th.pc = true, ev.PC
		p.propagateWatch(th)
	case target.EventThreadExit:
		p.threadGone(ev.Tid)
	case target.EventExec:
		p.onExec(ev)
	case target.EventFork:
		p.releaseChild(ev.Child)
	case target.EventExit:
		p.onExit(ev.Status)
		return
	}
	if th := p.threads[ev.Tid]; back != 0 && th != nil {
		p.stillAtBreak(th, back)
	}
	p.advance()
}

// thread returns the record of tid, creating it for a thread the agent has not seen (its
// creation event may come after its first stop is reported elsewhere).
func (p *proc) thread(tid int) *pthread {
	th := p.threads[tid]
	if th == nil {
		th = &pthread{tid: tid, stopped: true}
		p.threads[tid] = th
	}
	return th
}

// onSignal decides what a signal-delivery stop means: a tool's trap, a signal for the
// controlling tool, or a signal the program receives as if nobody watched.
func (p *proc) onSignal(th *pthread, ev target.Event) {
	th.stopped, th.interrupting = true, false
	th.pc = ev.PC
	th.atBreak = false
	wasToolStep := th.toolStep
	th.toolStep = false
	rng := th.rng // a range step goes on only from a step that completed in its range
	th.rng = nil
	sig := ev.Signal
	n := notif{tid: th.tid, sig: sig, reason: cdti.SignalGeneric, inst: ev.PC}
	toolTrap := false // caused by the tools: never delivered to the program
	if sig == int(syscall.SIGTRAP) {
		switch ev.Trap {
		case target.TrapBreakpoint:
			addr := ev.PC - p.info.Arch.PCAfterBreak
			if p.fastTrap(addr) {
				th.sig = sig // the program's own handler takes it; no tool hears of it
				return
			}
			if b := p.bps[addr]; b != nil && !b.lifted {
				// The PC stays past the trap until the hit is decided: a hit that does not
				// stop may pass the breakpoint in the same request that resumes the thread.
				moveBack := func() {
					if err := p.movePCBack(th.tid, ev.PC, addr); err != nil {
						p.a.logf("agent: rank %d: tid %d: move pc back to breakpoint %#x: %v", p.rank, th.tid, addr, err)
					}
				}
				th.pc, th.atBreak, th.brk = addr, true, addr
				if addr == p.startBP && p.startBP != 0 {
					moveBack()
					p.reachedEntry(th)
					return
				}
				if b.internalOnly() {
					moveBack()
					th.sig = 0
					if wasToolStep {
						p.stepMetTrap(th, rng, addr, ev.Steps)
					}
					return // an internal trap nobody asked to hear about: stepped over
				}
				n.reason, n.inst = cdti.SignalBreakpoint, addr
				if c := p.conds[addr]; c != nil {
					stop, failed := p.decide(th, b, c, ev.Regs)
					if !stop {
						th.sig = 0
						if !wasToolStep && p.passAtTrap(th, b, ev.Regs) {
							return
						}
						moveBack()
						if wasToolStep {
							p.stepMetTrap(th, rng, addr, ev.Steps)
						}
						return // decided here: stepped over like an internal trap
					}
					if failed {
						n.reason = cdti.SignalConditionError
					}
				}
				moveBack()
				toolTrap = true
			} else if p.trapRemoved(addr) {
				// A breakpoint that was removed after this thread hit it: execute the
				// original instruction as if the trap had never been there.
				if err := p.tp.SetPC(th.tid, addr); err == nil {
					th.pc = addr
				}
				th.sig = 0
				if wasToolStep {
					p.stepMetTrap(th, rng, addr, ev.Steps)
				}
				return
			}
		case target.TrapStep:
			if !wasToolStep {
				th.sig = 0 // a stale step trap (the step was superseded): nothing to report
				return
			}
			n.reason = cdti.SignalStepComplete
			if n.inst == 0 { // a back end that does not read the pc after a plain step (rsp)
				n.inst = p.threadPC(th)
			}
			if rng != nil && p.holder != nil && len(p.pending) == 0 && p.inflight == nil && p.stepOn(th, rng, n.inst, ev.Steps) {
				th.sig = 0
				return
			}
			toolTrap = true
		case target.TrapWatch:
			ws, kind, ok := p.watchHit(th, ev)
			if !ok {
				th.sig = 0
				return
			}
			n.reason, n.data = kind, ws.addr
			n.inst = p.watchInstruction(th, ev, ws)
			toolTrap = true
		}
	}
	switch {
	case toolTrap || sig == int(syscall.SIGSTOP):
		// Tool-caused traps continue with no signal; so does SIGSTOP, which tools send to stop a
		// process (delivering it would put the process in a job-control stop).
		th.sig = 0
	default:
		th.sig = sig
	}
	if p.holder != nil && (p.ctl.notifySet.Has(sig) || (wasToolStep && n.reason == cdti.SignalStepComplete)) {
		p.pending = append(p.pending, n)
		return
	}
	if wasToolStep {
		// The tool that stepped has released control: the step is over, the thread resumes.
		return
	}
	// Nobody to tell: a signal is delivered as if untraced; a tool trap is invisible (a
	// breakpoint hit is stepped over by advance).
}

// trapRemoved reports whether addr holds no trap instruction now: a breakpoint hit whose
// breakpoint was removed while the thread was on its way to the agent.
func (p *proc) trapRemoved(addr uint64) bool {
	if p.isPower() {
		return p.powerTrapGone(addr)
	}
	trap := p.info.Arch.BreakInstr
	if len(trap) == 0 {
		return false
	}
	cur := make([]byte, len(trap))
	if n, err := p.tp.ReadMemory(addr, cur); err != nil || n != len(cur) {
		return false
	}
	return string(cur) != string(trap)
}

// onExec handles a new program image: breakpoints and watchpoints went with the old one.
func (p *proc) onExec(ev target.Event) {
	p.info = p.tp.Info()
	p.mach = machineFor(p.info)
	p.snapMu.Lock()
	p.snap.Executable = p.info.Exe
	p.snapMu.Unlock()
	for tid := range p.threads {
		if tid != ev.Tid {
			p.threadGone(tid)
		}
	}
	clear(p.bps)
	clear(p.conds)
	p.scratch, p.scratchOff, p.scratchTries, p.shstk = nil, false, 0, 0 // the pages went with the old image
	p.startBP, p.startSig = 0, 0
	p.propWatch = nil
	p.biases, p.biasesAt, p.links = nil, 0, linkCache{}
	th := p.thread(ev.Tid)
	*th = pthread{tid: ev.Tid, stopped: true, pc: ev.PC, held: th.held, holder: th.holder}
	p.leader = ev.Tid
	if p.holder != nil && p.ctl.notifySet.Has(int(syscall.SIGTRAP)) {
		p.pending = append(p.pending, notif{tid: th.tid, sig: int(syscall.SIGTRAP), reason: cdti.SignalGeneric, inst: ev.PC})
	}
}

// threadGone forgets an exited thread.
func (p *proc) threadGone(tid int) {
	delete(p.threads, tid)
	p.dropSlots(tid)
	delete(p.pins, tid)
	kept := p.pending[:0]
	for _, n := range p.pending {
		if n.tid == tid && n.reason == cdti.SignalInterrupt {
			// A stop the tool asked for names any thread: another one takes it.
			if other := p.sortedTids(); len(other) > 0 {
				n.tid = other[0]
				kept = append(kept, n)
			}
			continue
		}
		if n.tid != tid {
			kept = append(kept, n)
		}
	}
	p.pending = kept
	if p.inflight != nil && p.inflight.tid == tid {
		p.inflight.gone = true
	}
	if p.capture == tid {
		p.captured = &target.Event{Kind: target.EventThreadExit, Tid: tid}
	}
}

// onExit records the end of the process and tells every attached tool.
func (p *proc) onExit(status int) {
	p.exited = true
	if p.quietDone != nil {
		close(p.quietDone)
		p.quietFor, p.quietDone = nil, nil
	}
	p.status = status
	p.pending, p.inflight = nil, nil
	p.holder = nil
	p.stepOver, p.capture = nil, 0
	p.threads = make(map[int]*pthread)
	clear(p.bps)
	p.scratch = nil
	for _, t := range p.tools {
		t.tc.send(&cdti.Notify{
			Header: cdti.Header{Rank: p.rank, JobID: p.a.jobID, ToolID: t.id},
			Kind:   cdti.NotifyTypeTermination, Exit: cdti.ExitStatus(status),
		})
	}
}

// sendNext sends the oldest pending notification once the process is fully stopped and no
// notification is in flight.
func (p *proc) sendNext() {
	if p.inflight != nil || len(p.pending) == 0 || p.holder == nil || !p.allStopped() {
		return
	}
	n := p.pending[0]
	p.pending = p.pending[1:]
	if n.inst == 0 { // a stop the agent made (StopProcess, SIGSTOP by interrupt)
		if th := p.threads[n.tid]; th != nil {
			n.inst = p.threadPC(th) // where the thread stands now that every thread is stopped
		}
	}
	p.notifySeq++
	if p.notifySeq == 0 {
		p.notifySeq = 1 // 0 is an unnumbered notification
	}
	n.seq = p.notifySeq
	p.inflight = &n
	p.holder.defaultTid = n.tid
	if n.quiet && p.quietFor == p.holder {
		p.inflight.unsent = true // a collective reports it (quiet.go)
		if p.quietDone != nil {
			close(p.quietDone)
			p.quietDone = nil
		}
		return
	}
	p.notifyInflight(false)
}

// notifyInflight sends the holder the notification in flight, numbered (SequenceID) so that
// the tool drops a repeat of it, marked as one (see stopProcess).
func (p *proc) notifyInflight(repeat bool) {
	n := p.inflight
	n.unsent = false
	p.holder.tc.send(&cdti.Notify{
		Header: cdti.Header{Rank: p.rank, JobID: p.a.jobID, ToolID: p.holder.id, SequenceID: n.seq},
		Kind:   cdti.NotifyTypeSignal,
		Repeat: repeat,
		Signal: cdti.NotifySignal{Signal: uint32(n.sig), ThreadID: uint32(n.tid), InstAddress: n.inst,
			DataAddress: n.data, Reason: n.reason},
	})
}

// notifyControl tells tool to about another tool (Conflict: the requester; Available: the
// releaser).
func (p *proc) notifyControl(to, other *tool, reason cdti.NotifyControlReason) {
	to.tc.send(&cdti.Notify{
		Header:  cdti.Header{Rank: p.rank, JobID: p.a.jobID, ToolID: to.id},
		Kind:    cdti.NotifyTypeControl,
		Control: cdti.NotifyControl{ToolID: other.id, Tag: other.tag, Priority: other.priority, Reason: reason},
	})
}
