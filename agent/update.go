package agent

import (
	"bytes"
	"errors"
	"syscall"

	"github.com/hpcdap/hpcdap/cdti"
	"github.com/hpcdap/hpcdap/target"
)

// update runs the commands of an Update for tool t (the holder). after, if not nil, must run
// once the UpdateAck has been written (a control-Available notification).
func (p *proc) update(t *tool, cmds []cdti.Command) (rs []cdti.Result, after func()) {
	rs = make([]cdti.Result, len(cmds))
	failed := false
	for i, c := range cmds {
		if raw, isRaw := c.(*cdti.RawCommand); isRaw {
			rs[i] = fail(cdti.CmdInval, raw.ThreadID) // answered by the framework
			failed = true
			continue
		}
		if p.exited {
			rs[i] = fail(cdti.CmdProcessExiting, c.Thread())
			failed = true
			continue
		}
		if failed && c.CommandType().IsAction() {
			rs[i] = fail(cdti.CmdPrevCmdFail, c.Thread())
			continue
		}
		th := p.resolve(t, c.Thread())
		if th == nil {
			rs[i] = fail(cdti.CmdTIDinval, c.Thread())
			failed = true
			continue
		}
		var f func()
		rs[i], f = p.updateOne(t, th, c)
		if f != nil {
			after = f
		}
		if rs[i].Code != cdti.CmdSuccess {
			failed = true
		}
	}
	return rs, after
}

func (p *proc) updateOne(t *tool, th *pthread, c cdti.Command) (cdti.Result, func()) {
	tid := uint32(th.tid)
	done := ok(&cdti.BareAck{ThreadID: tid})
	switch c := c.(type) {
	case *cdti.SetMemory:
		return p.setMemory(tid, c), nil
	case *cdti.HoldThread:
		th.held, th.holder = true, t.id
		if !th.stopped && !th.interrupting {
			if err := p.tp.Interrupt(th.tid); err == nil {
				th.interrupting = true
			}
		}
		return done, nil
	case *cdti.ReleaseThread:
		th.held = false
		return done, nil
	case *cdti.AllocateMemory:
		addr, code := p.allocateMemory(th, c.Size)
		if code != cdti.CmdSuccess {
			return fail(code, tid), nil
		}
		return ok(&cdti.AllocateMemoryAck{ThreadID: tid, Addr: addr}), nil
	case *cdti.FreeMemory:
		if code := p.freeMemory(th, c.Addr, c.Size); code != cdti.CmdSuccess {
			return fail(code, tid), nil
		}
		return done, nil
	case *cdti.SendSignal:
		return p.sendSignal(th, th.tid, c.Signal, tid), nil
	case *cdti.SendSignalToProcess:
		return p.sendSignal(th, 0, c.Signal, tid), nil
	case *cdti.StopProcess:
		return p.stopProcess(t, th, c.Flags), nil
	case *cdti.ContinueProcess:
		code, _ := p.satisfy(th.tid)
		if code != cdti.CmdSuccess {
			return fail(code, tid), nil
		}
		return done, nil
	case *cdti.StepThread:
		return p.stepThread(th), nil
	case *cdti.StepRange:
		return p.stepRange(th, c), nil
	case *cdti.ReleaseControl:
		return p.releaseControl(t, th, c.Notify)
	case *cdti.SetBreakpoint:
		return p.setBreakpointCmd(t, tid, c.Addr, c.Instruction), nil
	case *cdti.ResetBreakpoint:
		return p.resetBreakpointCmd(t, tid, c.Addr, c.Instruction), nil
	case *cdti.SetWatchpoint:
		code := p.setWatchpoint(th, t.id, c.Addr, c.Length, c.Type)
		return cdti.Result{Code: code, Ack: &cdti.SetWatchpointAck{ThreadID: tid, Watch: p.watchEntries(th)}}, nil
	case *cdti.ResetWatchpoint:
		code := p.resetWatchpoint(th, c.Addr)
		return cdti.Result{Code: code, Ack: &cdti.ResetWatchpointAck{ThreadID: tid, Watch: p.watchEntries(th)}}, nil
	case *cdti.SetPreferences:
		if c.BreakpointMode != cdti.FastBreakNoChange {
			p.prefs.breakMode = c.BreakpointMode
		}
		if c.WatchpointMode != cdti.FastWatchNoChange {
			p.prefs.watchMode = c.WatchpointMode
		}
		if c.DACMode != cdti.DACTrapNoChange {
			p.prefs.dacMode = c.DACMode
		}
		return done, nil
	case *cdti.SetContinuationSignal:
		if p.inflight == nil || (p.inflight.tid != th.tid && !p.inflight.gone) {
			return fail(cdti.CmdTIDinval, tid), nil
		}
		if c.Signal > 64 {
			return fail(cdti.CmdParmErr, tid), nil
		}
		th.sig = int(c.Signal)
		return done, nil
	case *cdti.SetRegisterSet:
		return p.setRegisterSet(th, c), nil
	case *cdti.CallFunction:
		return p.callFunction(th, c), nil
	case *cdti.SetTrapCondition:
		return p.setTrapCondition(t, tid, c), nil
	}
	if r, handled := p.powerUpdate(th, c); handled {
		return r, nil
	}
	// SetGeneralReg(s), SetSpecialReg(s), SetFloatReg(s), SetDebugReg(s): Power registers;
	// InstallTrapHandler, RemoveTrapHandler: Power fast traps (fasttrap.go). None exists on
	// this target.
	return fail(cdti.CmdInval, tid), nil
}

// setMemory answers SetMemory. Writes reach read-only text; bytes that fall on a planted trap
// become the trap's original instruction, and the trap stays.
func (p *proc) setMemory(tid uint32, c *cdti.SetMemory) cdti.Result {
	ack := &cdti.SetMemoryAck{ThreadID: tid, Addr: c.Addr, Length: uint32(len(c.Data))}
	if len(c.Data) == 0 {
		return ok(ack)
	}
	if len(c.Data) > cdti.MaxMemorySize || !p.mapped(c.Addr, uint64(len(c.Data))) {
		return cdti.Result{Code: cdti.CmdParmErr, Ack: ack}
	}
	if c.SharedMemory != cdti.SharedMemoryAllow {
		if ms, err := readMaps(p.pid); err == nil {
			end := c.Addr + uint64(len(c.Data))
			for _, m := range ms {
				if m.shared() && m.start < end && c.Addr < m.end {
					return cdti.Result{Code: cdti.CmdParmErr, Ack: ack}
				}
			}
		}
	}
	data := p.shadowWrite(c.Addr, c.Data)
	if n, err := p.tp.WriteMemory(c.Addr, data); err != nil || n != len(data) {
		return cdti.Result{Code: cdti.CmdParmErr, Ack: ack}
	}
	return ok(ack)
}

// sendSignal answers SendSignal (tid, the thread th) and SendSignalToProcess (tid 0).
func (p *proc) sendSignal(th *pthread, tid int, sig uint32, ackTid uint32) cdti.Result {
	if sig > 64 {
		return fail(cdti.CmdParmErr, ackTid)
	}
	if sig == 0 {
		return ok(&cdti.BareAck{ThreadID: ackTid})
	}
	if err := p.tp.Kill(tid, int(sig)); err != nil {
		if sig == uint32(syscall.SIGSTOP) && errors.Is(err, target.ErrUnsupported) {
			return p.stopByInterrupt(th, ackTid)
		}
		return fail(cdti.CmdParmErr, ackTid)
	}
	return ok(&cdti.BareAck{ThreadID: ackTid})
}

// stopByInterrupt gives SIGSTOP its effect where the back end cannot send it (a program under
// QEMU, where a host SIGSTOP would stop the emulator): the running threads are interrupted and,
// once all are stopped, th is notified as the signal would have been (SIGSTOP, Generic).
func (p *proc) stopByInterrupt(th *pthread, ackTid uint32) cdti.Result {
	if !p.started {
		return fail(cdti.CmdParmErr, ackTid)
	}
	if _, err := p.interruptRunning(nil); err != nil {
		p.a.logf("agent: rank %d: SIGSTOP by interrupt: %v", p.rank, err)
		return fail(cdti.CmdParmErr, ackTid)
	}
	p.pending = append(p.pending, notif{tid: th.tid, sig: int(syscall.SIGSTOP), reason: cdti.SignalGeneric})
	return ok(&cdti.BareAck{ThreadID: ackTid})
}

// stopProcess answers the StopProcess extension (StopResendOnly aside: see below): every
// thread stops without a signal and one Notify(SIGSTOP, SignalInterrupt) names th once all are
// stopped; nothing is left in the kernel to stop the process again later. A notification
// already queued or in flight is the stop (Stopping false, nothing more is sent). A tool step
// under way is cancelled: its thread stops where it stands, and its step trap, should it still
// come, is ignored as stale.
func (p *proc) stopProcess(t *tool, th *pthread, flags cdti.StopFlags) cdti.Result {
	tid := uint32(th.tid)
	if flags&cdti.StopResendOnly != 0 {
		// Nothing is stopped: a notification sent and not answered is sent again, with its
		// number, for a tool that may have lost it on its way (a Client drops a repeat of
		// what it delivered).
		if n := p.inflight; n != nil && !n.unsent && p.holder == t {
			p.notifyInflight(true)
		}
		return ok(&cdti.StopProcessAck{ThreadID: tid})
	}
	if !p.started {
		return fail(cdti.CmdParmErr, tid) // held before its first instruction: nothing runs
	}
	if n := p.inflight; n != nil && n.unsent && p.quietFor != t {
		// Stopped quietly, and stopped again plainly: the tool lost the collective's answer
		// and learns of the stop now.
		p.notifyInflight(false)
		return ok(&cdti.StopProcessAck{ThreadID: tid, Stopping: true})
	}
	if p.inflight != nil || len(p.pending) > 0 {
		return ok(&cdti.StopProcessAck{ThreadID: tid})
	}
	// The running threads are interrupted now, so that a back end that cannot interrupt
	// (QEMU's stub from version 9 on) is known before anything is promised: the tool is then
	// answered as by an agent without the extension, and signals the process instead.
	if _, err := p.interruptRunning(nil); errors.Is(err, target.ErrUnsupported) {
		return fail(cdti.CmdInval, tid)
	}
	for _, o := range p.threads {
		o.stepReq, o.toolStep, o.rng = false, false, nil
	}
	if p.stepOver != nil {
		p.stepOver.tool = false // its end is no StepComplete either
	}
	p.pending = append(p.pending, notif{tid: th.tid, sig: int(syscall.SIGSTOP), reason: cdti.SignalInterrupt,
		quiet: t != nil && p.quietFor == t})
	return ok(&cdti.StopProcessAck{ThreadID: tid, Stopping: true})
}

// stepThread answers StepThread: it satisfies the notification in flight and single-steps th,
// which must be stopped and not held, the other threads staying suspended. With other
// notifications pending, the next is sent and the step waits until the process continues.
func (p *proc) stepThread(th *pthread) cdti.Result {
	tid := uint32(th.tid)
	if !th.stopped || th.held {
		return fail(cdti.CmdTIDinval, tid)
	}
	if p.inflight == nil {
		return fail(cdti.CmdParmErr, tid)
	}
	// The continuation signal stays with the notified thread, delivered when it runs again.
	p.inflight = nil
	th.stepReq, th.rng = true, nil
	return ok(&cdti.BareAck{ThreadID: tid})
}

// releaseControl answers ReleaseControl.
func (p *proc) releaseControl(t *tool, th *pthread, notify cdti.ReleaseNotify) (cdti.Result, func()) {
	tid := uint32(th.tid)
	if p.holder != t {
		return fail(cdti.CmdParmErr, tid), nil
	}
	if p.inflight != nil {
		code, more := p.satisfy(th.tid)
		if code != cdti.CmdSuccess {
			return fail(code, tid), nil
		}
		if more {
			return fail(cdti.CmdPendingNotify, tid), nil
		}
	}
	p.suspended = false
	return ok(&cdti.BareAck{ThreadID: tid}), p.release(t, notify == cdti.ReleaseActive)
}

// setBreakpointCmd answers SetBreakpoint: Instruction must carry the machine's trap (on x86 the
// int3 byte 0xCC in its low byte) and addr must be in the process.
func (p *proc) setBreakpointCmd(t *tool, tid uint32, addr uint64, insn uint32) cdti.Result {
	if p.isPower() {
		return p.setPowerBreakpoint(t, tid, addr, insn)
	}
	trap := p.info.Arch.BreakInstr
	if len(trap) == 0 {
		return fail(cdti.CmdInval, tid)
	}
	if !bytes.Equal(cdti.InstructionBytes(p.info.Machine, p.info.ByteOrder, insn), trap) {
		return fail(cdti.CmdParmErr, tid)
	}
	if (len(trap) == 4 && addr%4 != 0) || !p.mapped(addr, uint64(len(trap))) {
		return fail(cdti.CmdParmErr, tid)
	}
	if err := p.setBreakpoint(addr, t.id); err != nil {
		p.a.logf("agent: rank %d: set breakpoint %#x: %v", p.rank, addr, err)
		return fail(cdti.CmdBrkptFail, tid)
	}
	return ok(&cdti.BareAck{ThreadID: tid})
}

// resetBreakpointCmd answers ResetBreakpoint: the tool must present the original instruction
// (not a trap), and the trap must be one it set.
func (p *proc) resetBreakpointCmd(t *tool, tid uint32, addr uint64, insn uint32) cdti.Result {
	if p.isPower() {
		return p.resetPowerBreakpoint(t, tid, addr, insn)
	}
	trap := p.info.Arch.BreakInstr
	orig := cdti.InstructionBytes(p.info.Machine, p.info.ByteOrder, insn)
	b := p.bps[addr]
	if len(trap) == 0 || bytes.Equal(orig, trap) || b == nil || !b.owners[t.id] || !bytes.Equal(orig, b.orig) {
		return fail(cdti.CmdParmErr, tid)
	}
	p.resetBreakpoint(addr, t.id)
	return ok(&cdti.BareAck{ThreadID: tid})
}

func (p *proc) setRegisterSet(th *pthread, c *cdti.SetRegisterSet) cdti.Result {
	tid := uint32(th.tid)
	set, valid := regSet(c.Set)
	if !valid {
		return fail(cdti.CmdParmErr, tid)
	}
	code := p.pause([]int{th.tid}, func() cdti.CmdReturnCode {
		cur, err := p.tp.Registers(th.tid, set)
		if err != nil {
			return cdti.CmdTIDinval
		}
		if len(cur) != len(c.Data) {
			return cdti.CmdLngthErr
		}
		if err := p.tp.SetRegisters(th.tid, set, c.Data); err != nil {
			return cdti.CmdParmErr
		}
		if set == target.RegsGeneral {
			th.pc = 0 // re-read: the tool may have moved it
		}
		return cdti.CmdSuccess
	})
	if code != cdti.CmdSuccess {
		return fail(code, tid)
	}
	return ok(&cdti.BareAck{ThreadID: tid})
}
