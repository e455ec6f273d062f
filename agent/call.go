package agent

import (
	"errors"
	"syscall"
	"time"

	"github.com/hpcdap/hpcdap/cdti"
	"github.com/hpcdap/hpcdap/target"
)

// defaultCallTimeout bounds a CallFunction that names no timeout.
const defaultCallTimeout = 10 * time.Second

// callFunction answers CallFunction: it runs a function in the stopped thread th alone and
// puts the thread back as it was. The process stays suspended as the tool left it: no
// notification is sent for what happens inside the call, and the other threads do not move
// (events of threads that were running are handled as usual, their notifications queued).
func (p *proc) callFunction(th *pthread, c *cdti.CallFunction) cdti.Result {
	tid := uint32(th.tid)
	abi := p.callABIFor()
	if abi == nil {
		return fail(cdti.CmdInval, tid)
	}
	for _, a := range c.Args {
		if a.Kind < cdti.CallInt || a.Kind > cdti.CallData {
			return fail(cdti.CmdParmErr, tid)
		}
	}
	if c.Return > cdti.CallFloat64 || c.Entry == 0 || len(c.Args) > cdti.MaxCallArgs || len(c.Data) > cdti.MaxCallData ||
		c.TimeoutMS > cdti.MaxCallTimeoutMS {
		return fail(cdti.CmdParmErr, tid)
	}
	if !p.started || p.startBP != 0 || p.stepOver != nil || !th.stopped {
		// Not at a point where the program can run code: before its entry, or a thread that
		// is running or on its way over a breakpoint.
		return fail(cdti.CmdParmErr, tid)
	}
	ret := p.entryPoint()
	if ret == 0 {
		return fail(cdti.CmdMemUnavail, tid)
	}
	timeout := defaultCallTimeout
	if c.TimeoutMS != 0 {
		timeout = time.Duration(c.TimeoutMS) * time.Millisecond
	}
	ack := &cdti.CallFunctionAck{ThreadID: tid}
	code := p.pause([]int{th.tid}, func() cdti.CmdReturnCode {
		return p.runCall(th, abi, c, ret, timeout, ack)
	})
	if code != cdti.CmdSuccess {
		return fail(code, tid)
	}
	return ok(ack)
}

// savedThread is what a call changes in a thread and puts back.
type savedThread struct {
	gp, fp  []byte
	sig     int
	atBreak bool
	brk     uint64
	pc      uint64
}

// runCall sets th up for the call, runs it to the return trap at ret (stepping over other
// breakpoints), and restores the thread whatever happened.
func (p *proc) runCall(th *pthread, abi callABI, c *cdti.CallFunction, ret uint64, timeout time.Duration,
	ack *cdti.CallFunctionAck) cdti.CmdReturnCode {
	tid := th.tid
	gp, err := p.tp.Registers(tid, target.RegsGeneral)
	if err != nil {
		return cdti.CmdTIDinval
	}
	fp, err := p.tp.Registers(tid, target.RegsFloat)
	if err != nil {
		return cdti.CmdTIDinval
	}
	saved := savedThread{gp: gp, fp: fp, sig: th.sig, atBreak: th.atBreak, brk: th.brk, pc: th.pc}
	setup, valid := abi.setup(gp, fp, c, ret)
	if !valid {
		return cdti.CmdParmErr
	}
	for _, w := range setup.writes {
		if n, err := p.tp.WriteMemory(w.addr, w.data); err != nil || n != len(w.data) {
			return cdti.CmdMemUnavail
		}
	}
	owned := p.bps[ret] != nil && p.bps[ret].owners[internalOwner]
	if err := p.setBreakpoint(ret, internalOwner); err != nil {
		p.a.logf("agent: rank %d: tid %d: plant the return trap of a call at %#x: %v", p.rank, tid, ret, err)
		return cdti.CmdBrkptFail
	}
	defer func() {
		if !owned && !p.exited {
			p.resetBreakpoint(ret, internalOwner)
		}
	}()
	restore := func() {
		if p.exited || p.threads[tid] == nil {
			return
		}
		if err := p.tp.SetRegisters(tid, target.RegsFloat, saved.fp); err != nil {
			p.a.logf("agent: rank %d: tid %d: restore float registers after a call: %v", p.rank, tid, err)
		}
		if err := p.tp.SetRegisters(tid, target.RegsGeneral, saved.gp); err != nil {
			p.a.logf("agent: rank %d: tid %d: restore registers after a call: %v", p.rank, tid, err)
		}
		th.sig, th.atBreak, th.brk, th.pc = saved.sig, saved.atBreak, saved.brk, saved.pc
	}
	if err := p.tp.SetRegisters(tid, target.RegsFloat, setup.fp); err != nil {
		restore()
		return cdti.CmdParmErr
	}
	if err := p.tp.SetRegisters(tid, target.RegsGeneral, setup.gp); err != nil {
		restore()
		return cdti.CmdParmErr
	}
	th.sig, th.atBreak, th.pc = 0, false, c.Entry
	deadline := time.Now().Add(timeout)
	step := false // the next run is a single step over a lifted breakpoint
	var lifted *breakpoint
	for {
		ev, code := p.runCaptured(th, step, deadline)
		if lifted != nil {
			if err := p.plantTrap(lifted); err != nil {
				p.a.logf("agent: rank %d: re-insert breakpoint %#x after a call's step: %v", p.rank, lifted.addr, err)
			}
			lifted = nil
		}
		step = false
		if code != cdti.CmdSuccess {
			if code == cdti.CmdTimeout && ev == nil {
				// The thread could not be stopped: it runs on with the call's registers.
				p.a.logf("agent: rank %d: tid %d: a call ran past its timeout and could not be interrupted", p.rank, tid)
				return code
			}
			restore()
			return code
		}
		switch {
		case ev.Kind == target.EventThreadExit:
			ack.Outcome = cdti.CallThreadExited
			return cdti.CmdSuccess
		case ev.Kind == target.EventStopped:
			if time.Now().Before(deadline) && !p.isEnding() {
				continue // an interrupt that was not ours: run on
			}
			ack.Outcome, ack.PC = cdti.CallTimedOut, p.threadPC(th)
			restore()
			return cdti.CmdSuccess
		case ev.Kind != target.EventSignal:
			restore()
			return cdti.CmdParmErr
		}
		if ev.Signal == int(syscall.SIGTRAP) {
			switch ev.Trap {
			case target.TrapBreakpoint:
				addr := ev.PC - p.info.Arch.PCAfterBreak
				if addr == ret {
					if err := p.movePCBack(tid, ev.PC, addr); err != nil {
						p.a.logf("agent: rank %d: tid %d: %v", p.rank, tid, err)
					}
					rgp, err1 := p.tp.Registers(tid, target.RegsGeneral)
					rfp, err2 := p.tp.Registers(tid, target.RegsFloat)
					restore()
					if err1 != nil || err2 != nil {
						return cdti.CmdTIDinval
					}
					ack.Outcome, ack.Value = cdti.CallReturned, abi.result(rgp, rfp, c.Return)
					return cdti.CmdSuccess
				}
				if b := p.bps[addr]; b != nil && !b.lifted {
					// A breakpoint on the way: calls run through them.
					if err := p.movePCBack(tid, ev.PC, addr); err == nil && p.liftTrap(b) == nil {
						lifted, step = b, true
						continue
					}
				}
			case target.TrapStep, target.TrapWatch:
				continue // a stale step trap, or a watchpoint: nothing the call reports
			}
		}
		if ev.Signal == int(syscall.SIGSTOP) {
			continue // a tool's stop request, not the function's doing
		}
		ack.Outcome, ack.Signal, ack.PC = cdti.CallSignaled, uint32(ev.Signal), ev.PC
		restore()
		return cdti.CmdSuccess
	}
}

// runCaptured resumes (or single-steps) th alone and waits for its next event. When deadline
// passes first the thread is interrupted and the event of that interrupt returned with
// CmdSuccess; CmdTimeout with a nil event means the thread would not stop.
func (p *proc) runCaptured(th *pthread, step bool, deadline time.Time) (*target.Event, cdti.CmdReturnCode) {
	p.capture, p.captured = th.tid, nil
	defer func() { p.capture, p.captured = 0, nil }()
	var err error
	if step {
		err = p.tp.Step(th.tid, 0)
	} else {
		err = p.tp.Resume(th.tid, 0)
	}
	if err != nil {
		if errors.Is(err, target.ErrExited) {
			return nil, cdti.CmdProcessExiting
		}
		return nil, cdti.CmdTIDinval
	}
	th.stopped, th.pc = false, 0
	err = p.pumpUntil(func() bool { return p.captured != nil }, time.Until(deadline), p.ending)
	if errors.Is(err, errTimeout) {
		if ierr := p.tp.Interrupt(th.tid); ierr == nil {
			th.interrupting = true
		}
		err = p.pump(func() bool { return p.captured != nil })
		if errors.Is(err, errTimeout) {
			p.capture = 0
			return nil, cdti.CmdTimeout
		}
	}
	if err != nil || p.captured == nil {
		return nil, cdti.CmdProcessExiting
	}
	ev := p.captured
	return ev, cdti.CmdSuccess
}

// pumpUntil is pump with a limit of its own; abandon (when not nil) closing ends it early
// as the limit would.
func (p *proc) pumpUntil(cond func() bool, limit time.Duration, abandon <-chan struct{}) error {
	if limit <= 0 {
		if cond() {
			return nil
		}
		return errTimeout
	}
	timer := time.NewTimer(limit)
	defer timer.Stop()
	for !cond() {
		if p.exited {
			return target.ErrExited
		}
		if p.events == nil {
			return errShutdown
		}
		select {
		case ev, ok := <-p.events:
			if !ok {
				p.events = nil
				continue
			}
			p.handleEvent(ev)
		case <-timer.C:
			return errTimeout
		case <-abandon:
			return errTimeout
		case <-p.quit:
			return errShutdown
		}
	}
	return nil
}
