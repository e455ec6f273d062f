package agent

import (
	"errors"
	"syscall"

	"github.com/hpcdap/hpcdap/cdti"
	"github.com/hpcdap/hpcdap/target"
)

// Tools and control authority, after the CNK (cdti-v6.md §9): up to four tools per process,
// distinct nonzero priorities, one controlling tool; a refused requester is remembered as
// conflicting and the highest-priority one hears Notify(Control, Available) when the holder
// releases, after which it must ask again.

// validateAttach applies the CNK's checks for adding tool id with priority prio.
func (p *proc) validateAttach(id uint32, prio uint8) cdti.ReturnCode {
	switch {
	case p.exited:
		return cdti.ToolRankNotFound
	case id == 0:
		return cdti.ToolIdError
	case len(p.tools) >= cdti.MaxActiveTools:
		return cdti.ToolMaxAttachedExceeded
	}
	for _, t := range p.tools {
		if t.id == id {
			return cdti.ToolIdConflict
		}
		if prio != 0 && t.priority == prio {
			return cdti.ToolPriorityConflict
		}
	}
	return cdti.Success
}

// addTool attaches a tool (validateAttach has passed), tracing the process if no tool was
// attached in attach mode.
func (p *proc) addTool(tc *toolConn, id uint32, tag cdti.Tag, prio uint8) (cdti.ReturnCode, uint32) {
	if rc := p.validateAttach(id, prio); rc != cdti.Success {
		return rc, 0
	}
	if p.tp == nil {
		if err := p.trace(); err != nil {
			p.a.logf("agent: rank %d: attach pid %d: %v", p.rank, p.pid, err)
			if errors.Is(err, target.ErrExited) {
				return cdti.ToolRankNotFound, 0 // the process is gone
			}
			return cdti.RequestFailed, errnoOf(err)
		}
	}
	t := &tool{id: id, tag: tag, priority: prio, tc: tc}
	i := 0
	for i < len(p.tools) && p.tools[i].priority >= prio {
		i++
	}
	p.tools = append(p.tools, nil)
	copy(p.tools[i+1:], p.tools[i:])
	p.tools[i] = t
	return cdti.Success, 0
}

// errnoOf extracts an errno for Header.ErrorCode.
func errnoOf(err error) uint32 {
	for err != nil {
		if e, ok := err.(syscall.Errno); ok {
			return uint32(e)
		}
		u, ok := err.(interface{ Unwrap() error })
		if !ok {
			break
		}
		err = u.Unwrap()
	}
	return 0
}

// control handles a Control message. after runs once the ack has been written.
func (p *proc) control(tc *toolConn, m *cdti.Control) (ack *cdti.ControlAck, after func()) {
	ack = &cdti.ControlAck{}
	t := p.findTool(m.ToolID, tc)
	switch {
	case t == nil:
		ack.ReturnCode = cdti.ToolIdError
		return ack, nil
	case p.exited:
		ack.ReturnCode = cdti.ToolProcessExiting
		return ack, nil
	}
	if h := p.holder; h != nil && h != t {
		t.conflicting = true
		ack.ReturnCode = cdti.ToolControlConflict
		ack.ControllingToolID, ack.Tag, ack.Priority = uint16(h.id), h.tag, h.priority
		return ack, func() { p.notifyControl(h, t, cdti.ControlConflict) }
	}
	p.holder = t
	t.conflicting = false
	p.ctl = controlSettings{
		notifySet: m.NotifySet &^ cdti.Signals(int(syscall.SIGKILL)),
		dacTrap:   m.DACTrap,
		// Tools older than protocol version 5 do not send a policy: the CNK propagates.
		propagate: m.Version < 5 || m.WatchPolicy == cdti.WatchPropagate,
	}
	if m.DACTrap != cdti.DACTrapNoChange {
		p.prefs.dacMode = m.DACTrap
	}
	ack.ControllingToolID, ack.Tag, ack.Priority = uint16(t.id), t.tag, t.priority
	sig, mode := int(m.SendSignal), m.DynamicNotify
	return ack, func() {
		if p.holder != t || p.exited {
			return
		}
		switch {
		case !p.started:
			p.start(sig, mode)
		case sig != 0:
			err := p.tp.Kill(p.leader, sig)
			if th := p.threads[p.leader]; err != nil && sig == int(syscall.SIGSTOP) && errors.Is(err, target.ErrUnsupported) && th != nil {
				// A program under QEMU: SIGSTOP takes effect by interrupt (see stopByInterrupt).
				if r := p.stopByInterrupt(th, 0); r.Code == cdti.CmdSuccess {
					p.advance()
					return
				}
			}
			if err != nil {
				p.a.logf("agent: rank %d: control signal %d: %v", p.rank, sig, err)
			}
		}
	}
}

// release ends t's control authority and returns what must follow the ack: Notify(Control,
// Available) to the highest-priority conflicting tool, describing t.
func (p *proc) release(t *tool, active bool) func() {
	p.holder = nil
	p.ctl = controlSettings{}
	var next *tool
	for _, o := range p.tools {
		if o != t && o.conflicting {
			next = o
			break
		}
	}
	if active {
		t.conflicting = true
	}
	if next == nil {
		return nil
	}
	next.conflicting = false
	return func() {
		if p.findTool(next.id, next.tc) == next {
			p.notifyControl(next, t, cdti.ControlAvailable)
		}
	}
}

// satisfy applies ContinueProcess to the notification in flight: tid (already resolved) must
// be the notified thread. More reports whether other notifications are pending (the next is
// then sent instead of resuming anything).
func (p *proc) satisfy(tid int) (code cdti.CmdReturnCode, more bool) {
	n := p.inflight
	if n == nil || (n.tid != tid && !n.gone) {
		return cdti.CmdTIDinval, false
	}
	p.inflight = nil
	if len(p.pending) > 0 {
		return cdti.CmdSuccess, true
	}
	p.suspended = false
	return cdti.CmdSuccess, false
}

// detachTool handles Detach for one process. ok is false when the tool was not attached.
func (p *proc) detachTool(tc *toolConn, id uint32) (rc cdti.ReturnCode, ok bool) {
	t := p.findTool(id, tc)
	if t == nil {
		return cdti.Success, false
	}
	if p.holder == t && !p.exited {
		return cdti.ToolControlReleaseRequired, false
	}
	p.removeTool(t, false)
	return cdti.Success, true
}

// removeTool takes a tool off the process as if it had never been there: it loses control
// (what it left suspended continues), its breakpoints and watchpoints go, the threads it held
// are released. When the last tool leaves, a process not yet started starts, and an attached
// process is no longer traced.
func (p *proc) removeTool(t *tool, dropped bool) {
	var after func()
	if p.holder == t {
		p.pending, p.inflight = nil, nil
		p.suspended = false
		for _, th := range p.threads {
			th.stepReq, th.rng = false, nil
		}
		after = p.release(t, false)
	}
	t.conflicting = false
	if !p.exited && p.tp != nil {
		p.removeOwner(t.id)
		p.removeWatches(func(w *watchSpec) bool { return w.owner == t.id })
		for _, th := range p.threads {
			if th.held && th.holder == t.id {
				th.held = false
			}
		}
	}
	for i, o := range p.tools {
		if o == t {
			p.tools = append(p.tools[:i], p.tools[i+1:]...)
			break
		}
	}
	if after != nil {
		after()
	}
	if len(p.tools) == 0 && !p.exited && p.tp != nil {
		if !p.started {
			p.start(0, cdti.DynamicNotifyDLoader)
		}
		if !p.spawned {
			p.untrace()
			return
		}
	}
	p.advance()
	if dropped {
		p.a.logf("agent: rank %d: tool %d dropped: control released, traps removed", p.rank, t.id)
	}
}
