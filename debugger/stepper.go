package debugger

import (
	"context"
	"errors"
	"fmt"
	"syscall"

	"github.com/hpcdap/hpcdap/cdti"
)

// stepper steps one thread of one rank.
type stepper struct {
	j      *Job
	r      *Rank
	lwp    int
	kind   StepKind
	instr  bool
	single bool
	ch     chan *cdti.Notify

	cancelled bool          // guarded by j.mu
	gone      chan struct{} // closed when the rank has ended (endLocked)
	ended     bool          // guarded by j.mu
	temps     []uint64
	plan      stepPlan
	end       *stopInfo // how the step ended when not as a plain step (a breakpoint on the way)
	site      uint64    // a step in with a target: the one call to enter (0: any)
	// rangeSpent: the last StepRange ended in its range, short of a call or a breakpoint:
	// it executed maxSteps instructions.
	rangeSpent bool
}

// deliver hands a notification to the stepper; it never blocks the notification reader.
func (st *stepper) deliver(m *cdti.Notify) {
	select {
	case st.ch <- m:
	default:
		// Cannot happen (one notification in flight per rank), but never lose one.
		go func() { st.ch <- m }()
	}
}

// cancelLocked asks the stepper to stop at its next event; j.mu must be held.
func (st *stepper) cancelLocked() { st.cancelled = true }

// endLocked ends the stepper of a rank that has ended: no event will come to it; j.mu must be
// held.
func (st *stepper) endLocked() {
	st.cancelled = true
	if !st.ended && st.gone != nil {
		st.ended = true
		close(st.gone)
	}
}

func (st *stepper) isCancelled() bool {
	st.j.mu.Lock()
	defer st.j.mu.Unlock()
	return st.cancelled
}

// errAborted ends a step because something else happened; the notification that did it has
// been handed to the regular path.
var errAborted = errors.New("step aborted")

// run performs the step and reports its end.
func (st *stepper) run() {
	ctx := context.Background()
	lwp, err := st.perform(ctx)
	st.cleanup(ctx)
	j := st.j
	j.mu.Lock()
	given := st.ended // the rank ended, or its control was given up (abandonLocked)
	j.mu.Unlock()
	if errors.Is(err, errAborted) || given {
		return
	}
	j.mu.Lock()
	if st.r.stepper == st {
		st.r.stepper = nil
	}
	exited := st.r.state == RankExited
	j.mu.Unlock()
	if exited {
		return
	}
	if err != nil {
		j.output("console", fmt.Sprintf("rank %d: step: %v\n", st.r.Num, err))
	}
	if st.end != nil {
		// Ended at a breakpoint: a stop of its own, which ends the step group too.
		j.mu.Lock()
		if j.steps != nil {
			delete(j.steps.ranks, st.r)
		}
		j.steps = nil
		j.mu.Unlock()
		j.rankStopped(st.r, *st.end)
		return
	}
	j.rankStopped(st.r, stopInfo{reason: "step", tid: lwp})
}

func (st *stepper) cleanup(ctx context.Context) {
	st.j.bps.removeTemp(ctx, st.r, st.temps...)
	st.temps = nil
}

// abort gives a notification that is not the step's to the regular path.
func (st *stepper) abort(m *cdti.Notify) error {
	st.cleanup(context.Background())
	st.j.mu.Lock()
	if st.r.stepper == st {
		st.r.stepper = nil
	}
	st.j.mu.Unlock()
	st.r.evMu.Lock()
	st.j.handleSignal(st.r, m)
	st.r.evMu.Unlock()
	return errAborted
}

// stepInstr single-steps the thread and waits for the step to complete.
func (st *stepper) stepInstr(ctx context.Context) error {
	return st.stepWith(ctx, &cdti.StepThread{ThreadID: uint32(st.lwp)})
}

// stepInRange executes the thread's instructions while its pc stays in [lo, hi), short of a
// call or a breakpoint: one StepRange, which the agent carries out alone, where the rank's
// agent has it (else single steps, one at a time, as stepInstr: a BG/Q CNK).
func (st *stepper) stepInRange(ctx context.Context, lo, hi uint64) error {
	if st.r.sym.isCNK() || st.r.noRangeStep.Load() {
		return st.stepInstr(ctx)
	}
	err := st.stepWith(ctx, &cdti.StepRange{ThreadID: uint32(st.lwp), Lo: lo, Hi: hi, MaxSteps: maxSteps})
	switch rangeRefusal(err) {
	case rangeUnknown:
		st.r.noRangeStep.Store(true) // an agent without the extension
		return st.stepInstr(ctx)
	case rangeRefused:
		// The agent knows range steps but takes not this one (one of another build, with
		// other bounds): this step goes one instruction at a time, and the rank's later
		// steps still try ranges. (A thread that cannot step at all fails the StepThread
		// too, with its own error.)
		st.j.logf("rank %d: %v; stepping one instruction instead", st.r.Num, err)
		return st.stepInstr(ctx)
	}
	return err
}

// The steps of a source line are within what one StepRange may take: a negative difference
// does not compile as a uint.
const _ uint = cdti.MaxRangeSteps - maxSteps

// errStepRefused is the error of a step command (StepThread, StepRange) the agent answered
// with a code other than CmdSuccess.
type errStepRefused struct {
	lwp  int
	cmd  cdti.Command
	code cdti.CmdReturnCode
}

func (e *errStepRefused) Error() string {
	switch {
	case e.code == cdti.CmdInval && e.cmd.CommandType().IsExtension():
		return fmt.Sprintf("step LWP %d: %v: the agent does not know it", e.lwp, e.cmd.CommandType())
	case e.cmd.CommandType() == cdti.TypeStepRange:
		c := e.cmd.(*cdti.StepRange)
		return fmt.Sprintf("step LWP %d through [%#x, %#x), at most %d steps: %v", e.lwp, c.Lo, c.Hi, c.MaxSteps, e.code)
	}
	return fmt.Sprintf("step LWP %d: %v", e.lwp, e.code)
}

// rangeOutcome is what a StepRange's error says of the agent's range steps.
type rangeOutcome int

const (
	rangeOther   rangeOutcome = iota // no refusal of the command itself: the step's own outcome
	rangeUnknown                     // CmdInval: the agent does not know range steps (a BG/Q CNK)
	rangeRefused                     // CmdParmErr: the agent knows them, and refused this one
)

// rangeRefusal classifies the error of a StepRange (stepWith): only CmdInval, which a CNK and
// an agent without the extension answer, means that the agent has no range steps; CmdParmErr
// is the answer to a StepRange that does not decode (its range or its budget), or to a thread
// that cannot step now.
func rangeRefusal(err error) rangeOutcome {
	var e *errStepRefused
	switch {
	case !errors.As(err, &e) || e.cmd.CommandType() != cdti.TypeStepRange:
		return rangeOther
	case e.code == cdti.CmdInval:
		return rangeUnknown
	case e.code == cdti.CmdParmErr:
		return rangeRefused
	}
	return rangeOther
}

// stepWith runs one step command (StepThread, StepRange) and waits for its completion.
func (st *stepper) stepWith(ctx context.Context, cmd cdti.Command) error {
	for {
		if err := st.act(ctx, func() error {
			rs, err := st.r.node.client.Update(ctx, uint32(st.r.Num), cmd)
			if err == nil && rs[0].Code != cdti.CmdSuccess {
				err = &errStepRefused{lwp: st.lwp, cmd: cmd, code: rs[0].Code}
			}
			return err
		}); err != nil {
			return err
		}
		m, err := st.wait(ctx)
		if err != nil {
			return err
		}
		if st.staleStop(m) {
			continue // the step again
		}
		ns := m.Signal
		if int(ns.Signal) == int(syscall.SIGTRAP) && ns.Reason == cdti.SignalStepComplete && int(ns.ThreadID) == st.lwp {
			st.setNotif(m)
			st.plan.pc = ns.InstAddress
			st.plan.sp = 0
			return nil
		}
		return st.abort(m)
	}
}

// act runs one action that lets the thread run (a step, a continue), unless the step has been
// cancelled, which ends it where it stands. The rank's evMu is held from the check through the
// action, so that a stop sent for an all-stop or a pause (under the same lock) either finds the
// step cancelled before it acts or the rank running after it.
func (st *stepper) act(ctx context.Context, action func() error) error {
	st.r.evMu.Lock()
	if st.isCancelled() {
		st.r.evMu.Unlock()
		return st.stopForCancel(ctx)
	}
	st.r.sym.invalidate()
	err := action()
	st.r.evMu.Unlock()
	return err
}

// staleStop recognises the notification of a stop the adapter asked for that nobody waits for
// any more (a SIGSTOP sent to an agent without StopProcess, taken only now): the step goes on.
func (st *stepper) staleStop(m *cdti.Notify) bool {
	if !isRequestedStop(m, st.r) {
		return false
	}
	j := st.j
	j.mu.Lock()
	defer j.mu.Unlock()
	if st.cancelled || j.awaitedLocked(st.r) {
		return false
	}
	st.r.sigstopSent = false
	ns := m.Signal
	st.r.notif = &ns
	return true
}

// stopForCancel ends a cancelled step where it stands: the rank is still suspended (the last
// notification is in flight), so it simply reports a pause.
func (st *stepper) stopForCancel(ctx context.Context) error {
	st.cleanup(ctx)
	st.j.mu.Lock()
	if st.r.stepper == st {
		st.r.stepper = nil
	}
	st.r.pauseReq = false
	st.j.mu.Unlock()
	st.j.rankStopped(st.r, stopInfo{reason: "pause", tid: st.lwp})
	return errAborted
}

// setNotif records the notification in flight for the rank (so continue and queries name it).
func (st *stepper) setNotif(m *cdti.Notify) {
	st.j.mu.Lock()
	ns := m.Signal
	st.r.notif = &ns
	st.j.mu.Unlock()
	st.r.sym.invalidate()
}

// runTo plants temporary breakpoints at addrs and continues the rank until the thread reaches
// one of them with its stack pointer at or above minSP (0: any frame). Other threads hitting
// them, and the thread hitting them in a deeper frame, are continued.
func (st *stepper) runTo(ctx context.Context, addrs []uint64, minSP uint64) error {
	for _, a := range addrs {
		if err := st.j.bps.plantTemp(ctx, st.r, a); err != nil {
			return err
		}
		st.temps = append(st.temps, a)
	}
	defer st.cleanup(ctx)
	held := st.holdOthers(ctx)
	defer st.releaseOthers(ctx, held)
	for {
		if err := st.act(ctx, func() error { return st.j.continueRank(st.r) }); err != nil {
			return err
		}
		m, err := st.wait(ctx)
		if err != nil {
			return err
		}
		if st.staleStop(m) {
			continue // continued again at the top of the loop
		}
		ns := m.Signal
		if int(ns.Signal) == int(syscall.SIGTRAP) && ns.Reason == cdti.SignalBreakpoint && st.j.isLibraryEvent(st.r, ns.InstAddress) {
			st.setNotif(m)
			st.j.onLibraryEvent(st.r) // a library loaded on the way: take it in, go on
			continue
		}
		if int(ns.Signal) != int(syscall.SIGTRAP) || ns.Reason != cdti.SignalBreakpoint || !contains(addrs, ns.InstAddress) {
			return st.abort(m)
		}
		st.setNotif(m)
		if int(ns.ThreadID) != st.lwp {
			if st.j.bps.isUserSite(st.r, ns.InstAddress) {
				return st.abort(m) // another thread hit a user breakpoint there
			}
			continue
		}
		st.plan.pc = ns.InstAddress
		if err := st.refresh(ctx); err != nil {
			return err
		}
		if minSP == 0 || st.plan.sp >= minSP {
			return nil
		}
	}
}

func contains(list []uint64, a uint64) bool {
	for _, x := range list {
		if x == a {
			return true
		}
	}
	return false
}

// holdOthers holds the rank's other threads for a single-thread step.
func (st *stepper) holdOthers(ctx context.Context) []int {
	if !st.single {
		return nil
	}
	list, err := st.r.node.client.ThreadList(ctx, uint32(st.r.Num))
	if err != nil {
		return nil
	}
	var cmds []cdti.Command
	var held []int
	for _, e := range list {
		if int(e.TID) != st.lwp {
			cmds = append(cmds, &cdti.HoldThread{ThreadID: e.TID})
			held = append(held, int(e.TID))
		}
	}
	if len(cmds) > 0 {
		st.r.node.client.UpdateBatch(ctx, uint32(st.r.Num), cmds)
	}
	return held
}

func (st *stepper) releaseOthers(ctx context.Context, held []int) {
	var cmds []cdti.Command
	for _, l := range held {
		cmds = append(cmds, &cdti.ReleaseThread{ThreadID: uint32(l)})
	}
	if len(cmds) > 0 {
		st.r.node.client.UpdateBatch(ctx, uint32(st.r.Num), cmds)
	}
}

// isRequestedStop reports whether m is the notification of a stop the adapter asked r's agent
// for (StopProcess, or SIGSTOP where the agent lacks it).
func isRequestedStop(m *cdti.Notify, r *Rank) bool {
	ns := m.Signal
	if ns.Reason == cdti.SignalInterrupt {
		return true
	}
	r.job.mu.Lock()
	defer r.job.mu.Unlock()
	return int(ns.Signal) == int(syscall.SIGSTOP) && r.sigstopSent
}

// wait returns the rank's next notification for the step.
func (st *stepper) wait(ctx context.Context) (*cdti.Notify, error) {
	select {
	case m := <-st.ch:
		if st.isCancelled() {
			return nil, st.abort(m)
		}
		return m, nil
	case <-st.gone:
		return nil, errAborted // the rank has ended
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}
