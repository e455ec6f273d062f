package debugger

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/hpcdap/hpcdap/cdti"
)

// Control authority among the tools of a rank (cdti-v6.md §9.2): one tool controls a process
// at a time. A session asking for control that a tool of lower priority holds is refused with
// ToolControlConflict, the holder hears Notify(Control, Conflict), and the session waits for
// Notify(Control, Available) to ask again: the holder is expected to give way to a
// higher-priority tool, as this engine does itself (yield). A holder of higher priority is
// not waited for: the session cannot take the rank, and says so.

// DefaultToolPriority is the CDTI priority a session attaches with when none is given: below
// the maximum (99), so that a tool of higher priority can still take control.
const DefaultToolPriority = 90

// controlWait bounds the wait for a lower-priority holder to give control up.
const controlWait = 2 * time.Minute

// controlHolder describes the tool a ControlAck or Notify(Control) names.
func controlHolder(id uint32, tag cdti.Tag, prio uint8) string {
	return fmt.Sprintf("tool %d (%q, priority %d)", id, tag.String(), prio)
}

// startControl is the Control that takes a rank at the session's start: its SIGSTOP stops the
// rank, at its entry point when it has not started yet.
func startControl() cdti.Control {
	return cdti.Control{NotifySet: notifySet, SendSignal: uint32(syscall.SIGSTOP), DynamicNotify: cdti.DynamicNotifyStart,
		WatchPolicy: cdti.WatchPropagate}
}

// takeControl asks for control of rank r with req. Against a holder of lower priority it
// waits, until wait ends (the start's one bound for such waits, controlWait), for the holder
// to give control up (Notify(Control, Available)), and asks again; against one of equal or
// higher priority it fails, naming the holder. The wait also ends with ctx (the request's)
// and with the connection to r's agent.
func (j *Job) takeControl(ctx, wait context.Context, r *Rank, req cdti.Control) error {
	said := false
	for {
		ack, err := r.node.client.Control(ctx, uint32(r.Num), req)
		if err == nil || !errors.Is(err, cdti.ToolControlConflict) || ack == nil {
			return err
		}
		holder := controlHolder(uint32(ack.ControllingToolID), ack.Tag, ack.Priority)
		if ack.Priority >= j.priority {
			return fmt.Errorf("control authority is held by %s, which this session's priority %d does not outrank "+
				"(toolPriority; the holder must release it first)", holder, j.priority)
		}
		if !said {
			said = true
			j.output("console", fmt.Sprintf("rank %d: %s holds control authority; waiting for it to give way to this session (priority %d)\n",
				r.Num, holder, j.priority))
		}
		select {
		case <-r.controlFree:
		case <-ctx.Done():
			return fmt.Errorf("control authority is held by %s: %w", holder, context.Cause(ctx))
		case <-wait.Done():
			if ctx.Err() != nil {
				return fmt.Errorf("control authority is held by %s: %w", holder, context.Cause(ctx))
			}
			return fmt.Errorf("control authority is held by %s, which did not give it up within %v", holder, controlWait)
		case <-r.node.client.Done():
			return fmt.Errorf("control authority is held by %s, and the connection to the agent ended while waiting: %v",
				holder, r.node.client.Err())
		}
	}
}

// queueControl hands a Notify(Control) of rank r to onControlNotify without blocking the
// notification reader, in the order the notifications came: an Available and a new Conflict
// are then never handled the other way round.
func (j *Job) queueControl(r *Rank, m *cdti.NotifyControl) {
	j.mu.Lock()
	r.ctlQueue = append(r.ctlQueue, m)
	if r.ctlBusy {
		j.mu.Unlock()
		return
	}
	r.ctlBusy = true
	j.mu.Unlock()
	go func() {
		for {
			j.mu.Lock()
			if len(r.ctlQueue) == 0 {
				r.ctlQueue, r.ctlBusy = nil, false
				j.mu.Unlock()
				return
			}
			next := r.ctlQueue[0]
			r.ctlQueue = r.ctlQueue[1:]
			j.mu.Unlock()
			j.onControlNotify(r, next)
		}
	}()
}

// onControlNotify handles a Notify(Control) for rank r: another tool asks for the control
// this session holds (Conflict), or the control this session waited for is free (Available).
func (j *Job) onControlNotify(r *Rank, m *cdti.NotifyControl) {
	defer j.recoverPanic(fmt.Sprintf("control notification of rank %d", r.Num))
	other := controlHolder(m.ToolID, m.Tag, m.Priority)
	switch m.Reason {
	case cdti.ControlConflict:
		if m.Priority <= j.priority {
			j.output("console", fmt.Sprintf("rank %d: %s asked for control authority; this session (priority %d) keeps it\n",
				r.Num, other, j.priority))
			return
		}
		j.yield(r, m)
	case cdti.ControlAvailable:
		j.mu.Lock()
		yielded := r.yieldedTo != nil
		j.mu.Unlock()
		if !yielded {
			select { // takeControl waits for it
			case r.controlFree <- struct{}{}:
			default:
			}
			return
		}
		j.regain(r, other)
	}
}

// yield gives rank r's control up to the higher-priority tool m names, which asked for it:
// at once if the rank runs; a rank stopped for this session is continued first (its stop is
// over for the session). The session asks to hear when control is free again
// (ReleaseControl with notify Active) and takes it back then (regain).
func (j *Job) yield(r *Rank, m *cdti.NotifyControl) {
	r.evMu.Lock()
	defer r.evMu.Unlock()
	other := controlHolder(m.ToolID, m.Tag, m.Priority)
	j.mu.Lock()
	if r.state == RankExited || r.yieldedTo != nil || j.stopAll {
		j.mu.Unlock()
		return
	}
	if r.state == RankStarting {
		// The session's start waits for the rank's first stop, which the release would cancel.
		j.mu.Unlock()
		j.output("important", fmt.Sprintf("rank %d: %s asked for control authority; this session keeps it until the rank has started\n",
			r.Num, other))
		return
	}
	c := *m
	r.yieldedTo = &c
	j.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var err error
	for range 100 {
		var rs []cdti.Result
		rs, err = r.node.client.Update(ctx, uint32(r.Num), &cdti.ReleaseControl{Notify: cdti.ReleaseActive})
		if err == nil && rs[0].Code != cdti.CmdSuccess {
			err = fmt.Errorf("release control: %w", rs[0].Code)
		}
		if err == nil || rs == nil || rs[0].Code != cdti.CmdPendingNotify {
			break
		}
		time.Sleep(20 * time.Millisecond) // the agent sends the pending notifications first
	}
	if err != nil {
		j.mu.Lock()
		r.yieldedTo = nil
		j.mu.Unlock()
		j.output("important", fmt.Sprintf("rank %d: %s asked for control authority, and this session could not give it up: %v\n",
			r.Num, other, err))
		return
	}
	j.mu.Lock()
	// Notifications the agent sent before the release (the pending ones it flushed) are
	// about a control that is over: onSignal drops them.
	r.ctlGen++
	if r.state == RankStopped {
		j.beginRunLocked(r) // ReleaseControl continued it (cdti-v6.md §9.5)
	}
	j.abandonLocked(r) // unlocks j.mu
	j.output("important", fmt.Sprintf("rank %d: %s took control authority (priority %d over this session's %d): the rank runs "+
		"under its control, and this session cannot stop or step it until that tool releases it\n", r.Num, other, m.Priority, j.priority))
}

// abandonLocked ends what the session was doing with rank r, whose control it gave up: a step
// under way ends (its completion will not come), and an all-stop or a step group no longer
// waits for the rank. j.mu must be held; abandonLocked unlocks it.
func (j *Job) abandonLocked(r *Rank) {
	if st := r.stepper; st != nil {
		st.endLocked()
		r.stepper = nil
	}
	r.pauseReq = false
	r.sigstopSent = false
	if g := j.steps; g != nil && g.ranks[r] {
		delete(g.ranks, r)
		if len(g.ranks) == 0 && j.collect == nil && !j.stopAll {
			j.endStepGroupLocked(g)
		}
	}
	if c := j.collect; c != nil && c.waiting[r] {
		delete(c.waiting, r)
		j.finishCollectLocked()
		return
	}
	j.mu.Unlock()
}

// regain takes rank r's control back once the tool it was yielded to released it, without
// stopping the rank.
func (j *Job) regain(r *Rank, from string) {
	r.evMu.Lock()
	defer r.evMu.Unlock()
	j.mu.Lock()
	ending := j.stopAll || r.state == RankExited
	if !ending {
		// Notifications read from here on are the session's again (a breakpoint the rank hits
		// as soon as control is back); those read before were sent under the other tool.
		r.ctlGen++
	}
	j.mu.Unlock()
	if ending {
		return // the session is letting its ranks go
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req := startControl()
	req.SendSignal, req.DynamicNotify = 0, 0
	ack, err := r.node.client.Control(ctx, uint32(r.Num), req)
	if err != nil && errors.Is(err, cdti.ToolControlConflict) && ack != nil {
		// Another tool took control first: the session waits for it to be free again, as
		// takeControl does (the next Notify(Control, Available) calls regain).
		j.mu.Lock()
		r.yieldedTo = &cdti.NotifyControl{Reason: cdti.ControlConflict, ToolID: uint32(ack.ControllingToolID), Tag: ack.Tag,
			Priority: ack.Priority}
		j.mu.Unlock()
		j.output("important", fmt.Sprintf("rank %d: %s released control authority, and %s took it before this session could: "+
			"this session waits for it to be free again\n", r.Num, from, controlHolder(uint32(ack.ControllingToolID), ack.Tag, ack.Priority)))
		return
	}
	if err != nil {
		// The session gives up the wait: the rank is its own again, though not controlled
		// by it, and a later stop or continue says why it fails.
		j.mu.Lock()
		r.yieldedTo = nil
		j.mu.Unlock()
		j.output("important", fmt.Sprintf("rank %d: %s released control authority, and this session could not take it back: %v; "+
			"the rank runs on, no longer controlled by this session\n", r.Num, from, err))
		return
	}
	j.mu.Lock()
	r.yieldedTo = nil
	j.mu.Unlock()
	j.output("console", fmt.Sprintf("rank %d: %s released control authority: it is this session's again\n", r.Num, from))
}

// noAuthority returns an error naming the tool that controls the ranks of ranks still there
// in this session's place, when another tool controls every one of them; nil when the
// session controls one.
func (j *Job) noAuthority(ranks []*Rank) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	var first *Rank
	for _, r := range ranks {
		switch {
		case r.state == RankExited:
		case r.yieldedTo == nil:
			return nil
		case first == nil:
			first = r
		}
	}
	if first == nil {
		return nil
	}
	m := first.yieldedTo
	return fmt.Errorf("rank %d: control authority is with %s until it releases it", first.Num,
		controlHolder(m.ToolID, m.Tag, m.Priority))
}

// Authority reports whether this session controls any of the ranks a run-control request on
// thread t (nil: the focus) applies to: an error names a rank whose control it gave up to a
// tool of higher priority, and that tool. (Where it controls some of them, a stop of the
// others fails rank by rank, naming the tool: stopRank.)
func (j *Job) Authority(t *Thread) error {
	if t == nil {
		return j.noAuthority(j.focusRanks())
	}
	return j.noAuthority(j.runTargets(t, false))
}

// RankAuthority reports whether this session controls rank r: an error names the tool of
// higher priority it gave the rank's control up to.
func (j *Job) RankAuthority(r *Rank) error { return j.noAuthority([]*Rank{r}) }

// attachError says what an Attach refused by the CNK or toolctld means for the session.
func attachError(err error, prio uint8) error {
	switch {
	case errors.Is(err, cdti.ToolPriorityConflict):
		return fmt.Errorf("%w: another tool is attached at this session's priority %d (toolPriority): give another", err, prio)
	case errors.Is(err, cdti.ToolMaxAttachedExceeded):
		return fmt.Errorf("%w: the ranks already have %d tools attached, the most a BG/Q process takes", err, cdti.MaxActiveTools)
	}
	return err
}
