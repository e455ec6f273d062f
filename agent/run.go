package agent

import (
	"encoding/binary"
	"errors"

	"github.com/hpcdap/hpcdap/cdti"
	"github.com/hpcdap/hpcdap/procimage"
	"github.com/hpcdap/hpcdap/target"
)

// advance moves the process toward what its CNK state asks for. It is called after every event
// and every request, and is idempotent:
//
//   - a notification pending or in flight: every thread stops (those running are interrupted),
//     then the oldest notification is sent;
//   - a tool step requested: that thread steps, over a lifted trap if one is planted at its PC
//     (the other threads are stopped first);
//   - otherwise, in a started, unsuspended process, every stopped thread that is not held runs,
//     each thread standing on a breakpoint it hit first passing it: by emulating the original
//     instruction, carrying out its branch or running it out of line (passOver), all without
//     stopping any other thread, or else by executing it alone under the lifted trap
//     (stepOver).
//
// Nothing moves while a step over, an injected call or the mapping of a scratch page is under
// way, nor between an Update or Control and the writing of its ack (the CNK performs its
// deferred actions after the ack).
func (p *proc) advance() {
	if p.tp == nil || p.exited || p.stepOver != nil || p.capture != 0 || p.acks > 0 || p.mapping {
		return
	}
	if len(p.pending) > 0 || p.inflight != nil {
		if p.stopRunning(nil) {
			return
		}
		p.suspended = true
		p.sendNext()
		return
	}
	if !p.started {
		return
	}
	for _, tid := range p.sortedTids() {
		th := p.threads[tid]
		if !th.stepReq || !th.stopped || th.held || p.pins[tid] > 0 {
			continue
		}
		if b := p.bps[p.threadPC(th)]; b != nil && !b.lifted {
			if p.stopRunning(th) {
				return
			}
			p.beginStepOver(th, b, true)
			return
		}
		p.startToolStep(th)
	}
	if p.suspended {
		return
	}
	for _, tid := range p.sortedTids() {
		th := p.threads[tid]
		if !p.runnable(th) || !th.atBreak {
			continue
		}
		b := p.bps[th.brk]
		if b == nil || b.lifted || p.threadPC(th) != th.brk {
			th.atBreak = false
			continue
		}
		switch p.passInPlace(th, b) {
		case passEmulated, passBranched, passOutOfLine:
			continue
		case passNeedPage:
			if p.stopRunning(th) {
				return
			}
			// Every thread is stopped: the mapping's injected call is safe.
			p.mapScratch(th, b.addr)
			p.advance()
			return
		}
		if p.stopRunning(th) {
			return
		}
		p.passes.stepped++
		p.beginStepOver(th, b, false)
		return
	}
	for _, tid := range p.sortedTids() {
		if th := p.threads[tid]; p.runnable(th) {
			p.resume(th)
		}
	}
}

// runnable reports whether th is stopped and nothing keeps it so.
func (p *proc) runnable(th *pthread) bool {
	return th.stopped && !th.held && !th.stepReq && p.pins[th.tid] == 0
}

// stopRunning interrupts every running thread but except, and reports whether any is still
// running (the caller then waits for their stops, which call advance again).
func (p *proc) stopRunning(except *pthread) bool {
	waiting, _ := p.interruptRunning(except)
	return waiting
}

// interruptRunning is stopRunning that also returns the first error of an interrupt that
// failed (each is logged), so that a caller can tell a back end that cannot interrupt.
func (p *proc) interruptRunning(except *pthread) (waiting bool, first error) {
	for _, th := range p.threads {
		if th == except || th.stopped {
			continue
		}
		waiting = true
		if !th.interrupting {
			if err := p.tp.Interrupt(th.tid); err != nil {
				p.a.logf("agent: rank %d: interrupt tid %d: %v", p.rank, th.tid, err)
				if first == nil {
					first = err
				}
				continue
			}
			th.interrupting = true
		}
	}
	return waiting, first
}

// resume lets a stopped thread run, delivering its continuation signal.
func (p *proc) resume(th *pthread) {
	sig := th.sig
	if err := p.tp.Resume(th.tid, sig); err != nil {
		if !errors.Is(err, target.ErrNoThread) && !errors.Is(err, target.ErrExited) {
			p.a.logf("agent: rank %d: resume tid %d: %v", p.rank, th.tid, err)
		}
		return
	}
	th.sig = 0
	th.stopped, th.atBreak = false, false
	th.pc = 0
}

// startToolStep single-steps th for a tool (no trap at its PC), through its StepRange's range
// where the back end steps through ranges itself (rangestep.go).
func (p *proc) startToolStep(th *pthread) {
	th.stepReq = false
	sig := th.sig
	if err := p.toolStep(th, sig); err != nil {
		p.a.logf("agent: rank %d: step tid %d: %v", p.rank, th.tid, err)
		return
	}
	th.sig = 0
	th.toolStep = true
	th.stopped, th.atBreak = false, false
	th.pc = 0
}

// threadPC returns th's program counter, reading it if the last stop did not report it.
func (p *proc) threadPC(th *pthread) uint64 {
	if th.pc == 0 && th.stopped {
		if pc, err := p.tp.PC(th.tid); err == nil {
			th.pc = pc
		}
	}
	return th.pc
}

// stepOverOp is a thread executing the original instruction of a planted breakpoint alone:
// the trap is lifted (the original bytes are back in memory) for the duration of one step,
// with every other thread stopped so that none runs through the address unseen.
type stepOverOp struct {
	tid  int
	addr uint64
	tool bool // a tool's StepThread: report StepComplete when done
}

func (p *proc) beginStepOver(th *pthread, b *breakpoint, tool bool) {
	if err := p.liftTrap(b); err != nil {
		p.a.logf("agent: rank %d: lift breakpoint %#x: %v", p.rank, b.addr, err)
		return
	}
	sig := th.sig
	th.stepReq = false
	if err := p.tp.Step(th.tid, sig); err != nil {
		p.a.logf("agent: rank %d: step tid %d over %#x: %v", p.rank, th.tid, b.addr, err)
		p.plantTrap(b)
		return
	}
	th.sig = 0
	th.stopped, th.atBreak, th.pc = false, false, 0
	p.stepOver = &stepOverOp{tid: th.tid, addr: b.addr, tool: tool}
}

// finishStepOver puts the trap back and handles the stepping thread's event.
func (p *proc) finishStepOver(ev target.Event) {
	so := p.stepOver
	p.stepOver = nil
	if b := p.bps[so.addr]; b != nil && b.lifted && !p.exited {
		if err := p.plantTrap(b); err != nil {
			p.a.logf("agent: rank %d: re-insert breakpoint %#x: %v", p.rank, so.addr, err)
		}
	}
	th := p.threads[so.tid]
	switch {
	case ev.Kind == target.EventSignal && ev.Trap == target.TrapStep && th != nil:
		th.stopped, th.interrupting, th.pc = true, false, ev.PC
		if so.tool {
			th.toolStep = true
			p.onSignal(th, ev)
		}
	case ev.Kind == target.EventSignal && th != nil:
		// Something else happened during the step (a watchpoint, a signal): that is the news.
		if so.tool {
			th.toolStep = true
		}
		p.onSignal(th, ev)
		p.stillAtBreak(th, so.addr)
	case ev.Kind == target.EventStopped && th != nil:
		th.stopped, th.interrupting, th.pc = true, false, ev.PC
		p.stillAtBreak(th, so.addr)
	case ev.Kind == target.EventThreadExit:
		p.threadGone(ev.Tid)
	case ev.Kind == target.EventExec:
		p.onExec(ev)
	case ev.Kind == target.EventExit:
		p.onExit(ev.Status)
	}
}

// stillAtBreak marks a thread whose step over the breakpoint at addr was cut short before the
// instruction ran (an interrupt, a signal): it still stands on the breakpoint, and steps over
// it when it runs again instead of hitting it a second time.
func (p *proc) stillAtBreak(th *pthread, addr uint64) {
	if th.stopped && p.bps[addr] != nil && p.threadPC(th) == addr {
		th.atBreak, th.brk = true, addr
	}
}

// start starts a process that was loaded but not started: sig (if nonzero) is delivered at the
// first instruction of ld.so (DynamicNotifyDLoader) or at the program's entry point
// (DynamicNotifyStart), which the process reaches through an internal breakpoint.
func (p *proc) start(sig int, mode cdti.DynamicNotifyMode) {
	if p.started || p.tp == nil {
		return
	}
	p.started = true
	if sig == 0 {
		return
	}
	leader := p.threads[p.leader]
	if leader == nil {
		return
	}
	if mode == cdti.DynamicNotifyStart {
		if entry := p.entryPoint(); entry != 0 && entry != p.threadPC(leader) {
			if err := p.setBreakpoint(entry, 0); err == nil {
				p.startBP, p.startSig = entry, sig
				return
			}
		}
	}
	p.deliverStartSignal(leader, sig)
}

// reachedEntry handles the internal breakpoint at the program's entry point.
func (p *proc) reachedEntry(th *pthread) {
	sig := p.startSig
	addr := p.startBP
	p.startBP, p.startSig = 0, 0
	p.resetBreakpoint(addr, 0)
	th.atBreak = false
	p.deliverStartSignal(th, sig)
}

// deliverStartSignal makes th stop as if sig had just arrived (the signal of Control, saved
// while the process was not started).
func (p *proc) deliverStartSignal(th *pthread, sig int) {
	p.onSignal(th, target.Event{Kind: target.EventSignal, Tid: th.tid, Signal: sig, PC: p.threadPC(th)})
}

// entryPoint is AT_ENTRY from the auxiliary vector (0 if unknown).
func (p *proc) entryPoint() uint64 {
	entry := procimage.AuxvFromWords(p.auxWords()).Entry()
	if entry != 0 && p.isPower() {
		return p.powerEntry(entry)
	}
	return entry
}

// auxWords decodes the auxiliary vector into words.
func (p *proc) auxWords() []uint64 {
	b, err := p.tp.Auxv()
	if err != nil {
		return nil
	}
	ps := p.info.PtrSize
	if ps != 4 && ps != 8 {
		ps = 8
	}
	order := p.info.ByteOrder
	if order == nil {
		order = binary.LittleEndian
	}
	var words []uint64
	for i := 0; i+ps <= len(b); i += ps {
		if ps == 8 {
			words = append(words, order.Uint64(b[i:]))
		} else {
			words = append(words, uint64(order.Uint32(b[i:])))
		}
	}
	return words
}

// pause keeps tids stopped for fn: running ones are interrupted and waited for. Events that
// arrive meanwhile are handled as usual; the threads stay pinned until fn returns.
func (p *proc) pause(tids []int, fn func() cdti.CmdReturnCode) cdti.CmdReturnCode {
	for _, tid := range tids {
		p.pins[tid]++
	}
	defer func() {
		for _, tid := range tids {
			if p.pins[tid]--; p.pins[tid] <= 0 {
				delete(p.pins, tid)
			}
		}
		p.advance()
	}()
	for _, tid := range tids {
		if th := p.threads[tid]; th != nil && !th.stopped && !th.interrupting {
			if err := p.tp.Interrupt(tid); err == nil {
				th.interrupting = true
			}
		}
	}
	err := p.pump(func() bool {
		for _, tid := range tids {
			if th := p.threads[tid]; th != nil && !th.stopped {
				return false
			}
		}
		return true
	})
	switch {
	case err == nil:
	case p.exited:
		return cdti.CmdProcessExiting
	case errors.Is(err, errTimeout):
		return cdti.CmdTimeout
	default:
		return cdti.CmdProcessExiting
	}
	return fn()
}
