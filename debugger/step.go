package debugger

import (
	"context"
	"fmt"
	"sync"

	"github.com/hpcdap/hpcdap/cdti"
)

// Stepping. A step is a small program run against one thread with the rank's own run-control
// primitives: single instruction steps (StepThread, which the agent performs over planted
// traps) and runs to temporary breakpoints (ContinueProcess). Source-level stepping follows
// gdb: step through the current line's address range; a call is stepped over by running to
// its return address with the frame checked (recursion); a step into a function without line
// information runs back out; leaving the range ends the step at the start of a line, and a
// step that lands mid-line (returning into a caller) keeps going to the next line start.
//
// In all-stop mode a step request applies to the focus set: every stopped rank of the focus
// steps its main thread (the requested thread for its own rank), and one stopped event is
// sent when all of them are done.

// StepKind is what a step does: step into calls, step over them, or step out of the frame.
type StepKind int

// The kinds of step (next is StepOver, stepIn StepInto, stepOut StepOutOf).
const (
	StepInto StepKind = iota
	StepOver
	StepOutOf
)

// stepGroup is the set of ranks stepping for one request.
type stepGroup struct {
	ranks       map[*Rank]bool // still stepping
	primary     *Rank
	info        stopInfo
	primaryInfo *stopInfo
}

// StartSteps starts a step of thread t (and, in all-stop mode, of the focus ranks' main
// threads). It returns once the steppers run.
func (j *Job) StartSteps(ctx context.Context, t *Thread, kind StepKind, instr, single bool) error {
	return j.startSteps(ctx, t, kind, instr, single, nil)
}

// startSteps is StartSteps; a step in with a target enters only that call of the line.
func (j *Job) startSteps(ctx context.Context, t *Thread, kind StepKind, instr, single bool, target *StepTarget) error {
	// One step sets out at a time (clients sharing the job may ask at once): a step looks at
	// the other ranks, takes some into its group and runs the rest free, which another step
	// setting out beside it would be doing too.
	j.stepMu.Lock()
	defer j.stepMu.Unlock()
	// No notification of t's rank is half handled while the step looks at the rank and sets
	// out (in stop mode thread, a thread that stopped meanwhile is held, and its rank running
	// again, before the step sees it).
	t.Rank.evMu.Lock()
	locked := true
	defer func() {
		if locked {
			t.Rank.evMu.Unlock()
		}
	}()
	j.mu.Lock()
	ranks := []*Rank{t.Rank}
	if j.mode == StopAll && !single {
		for _, r := range j.ranksInLocked(j.focus) {
			if r != t.Rank && r.state == RankStopped && r.stepper == nil {
				ranks = append(ranks, r)
			}
		}
	}
	if t.Rank.state != RankStopped {
		j.mu.Unlock()
		return fmt.Errorf("rank %d is %s", t.Rank.Num, t.Rank.state)
	}
	if t.Rank.notif == nil {
		// stopMode "thread": the rank runs with this thread held; CDTI steps a thread only
		// while its process is suspended.
		held := t.Rank.sym.held[t.LWP]
		j.mu.Unlock()
		if !held {
			return fmt.Errorf("rank %d: LWP %d is not stopped", t.Rank.Num, t.LWP)
		}
		t.Rank.evMu.Unlock() // the stop's notification is handled while the step waits
		locked = false
		if err := j.suspendForStep(ctx, t); err != nil {
			return err
		}
		t.Rank.evMu.Lock() // the rank is suspended now: nothing comes until it runs
		locked = true
	} else {
		j.mu.Unlock()
	}
	steppers := make([]*stepper, len(ranks))
	errs := make([]error, len(ranks))
	var wg sync.WaitGroup
	for i, r := range ranks {
		lwp := t.LWP
		if r != t.Rank {
			j.mu.Lock()
			if mt := r.mainThread(); mt != nil {
				lwp = mt.LWP
			}
			j.mu.Unlock()
		}
		wg.Go(func() {
			st := &stepper{j: j, r: r, lwp: lwp, kind: kind, instr: instr, single: single, ch: make(chan *cdti.Notify, 4),
				gone: make(chan struct{})}
			if errs[i] = st.prepare(ctx); errs[i] == nil {
				st.site = target.siteIn(st)
				steppers[i] = st
			}
		})
	}
	wg.Wait()
	if errs[0] != nil {
		return errs[0]
	}
	// The other ranks step with t only where they stand where t does; the rest run free while
	// the step lasts, and are stopped with the job when it ends (as gdb lets other inferiors
	// run during a step). Stepped from elsewhere, a rank could finish its own step first and
	// stay stopped while t's step waits for it (a message it has yet to send): the step would
	// never end.
	var free []*Rank
	for i := 1; i < len(steppers); i++ {
		if st := steppers[i]; st != nil && !samePlace(steppers[0].plan, st.plan, instr) {
			free = append(free, st.r)
			steppers[i] = nil
		}
	}
	if !single {
		// Threads held by an earlier single-thread continue run again.
		for _, st := range steppers {
			if st == nil {
				continue
			}
			j.mu.Lock()
			held := st.r.sym.single
			st.r.sym.single = nil
			j.mu.Unlock()
			if len(held) > 0 {
				j.releaseHeld(st.r, held)
			}
		}
	}
	j.mu.Lock()
	g := &stepGroup{ranks: map[*Rank]bool{}, primary: t.Rank, info: stopInfo{reason: "step", tid: t.LWP}}
	for _, st := range steppers {
		if st == nil {
			continue
		}
		g.ranks[st.r] = true
		st.r.stepper = st
		j.beginRunLocked(st.r)
	}
	if j.mode == StopAll {
		j.steps = g
	}
	epoch := j.stops
	// The step's response tells the client that t runs; the other ranks the step resumes are
	// announced, so that no client goes on taking them for stopped.
	var others []*Thread
	for _, st := range steppers {
		if st != nil && st.r != t.Rank {
			others = append(others, st.r.threads...)
		}
	}
	for _, r := range free {
		others = append(others, r.threads...)
	}
	j.mu.Unlock()
	for _, o := range others {
		if o.ID != t.ID {
			j.ev.Continued(o.ID)
		}
	}
	for _, st := range steppers {
		if st != nil {
			go st.run()
		}
	}
	if len(free) > 0 {
		// t's rank is on its way: its event lock goes before the free ranks' are taken, one
		// rank's at a time, as every continue takes them. Unless the step has ended meanwhile
		// (the epoch), they run; else they stay stopped with the job.
		t.Rank.evMu.Unlock()
		locked = false
		if _, err := j.continueRanksIn(free, nil, epoch); err != nil {
			j.logf("step: run ranks free: %v", err)
		}
	}
	return nil
}

// samePlace reports whether a rank's step starts where the stepped thread's does: on the same
// source line (an instruction step: at the same instruction).
func samePlace(a, b stepPlan, instr bool) bool {
	if instr || !a.hasLine || !b.hasLine {
		return a.pc == b.pc
	}
	return a.line.File == b.line.File && a.line.Line == b.line.Line
}

// suspendForStep suspends the rank of a thread that stop mode "thread" holds while the rest of
// the rank runs, so that the thread can be stepped: the process is stopped, then the
// thread's hold is lifted (the rank's other held threads stay held). The step then runs the
// rank as in the other modes and, when it ends, the thread is held again and the rank goes on.
func (j *Job) suspendForStep(ctx context.Context, t *Thread) error {
	r := t.Rank
	for attempt := 1; ; attempt++ {
		st := &stepper{j: j, r: r, lwp: t.LWP, ch: make(chan *cdti.Notify, 4)}
		r.evMu.Lock()
		j.mu.Lock()
		if r.stepper != nil {
			j.mu.Unlock()
			r.evMu.Unlock()
			return fmt.Errorf("rank %d is stepping", r.Num)
		}
		if r.notif != nil {
			// Suspended already, by a stop handled meanwhile: the step can begin.
			j.mu.Unlock()
			r.evMu.Unlock()
			r.sym.invalidate()
			return j.releaseHeld(r, []int{t.LWP})
		}
		r.stepper = st // the stop's notification comes to st
		j.mu.Unlock()
		_, err := j.stopRank(ctx, r)
		r.evMu.Unlock()
		giveBack := func() {
			j.mu.Lock()
			if r.stepper == st {
				r.stepper = nil
			}
			j.mu.Unlock()
		}
		if err != nil {
			giveBack()
			return fmt.Errorf("rank %d: stop it to step LWP %d: %w", r.Num, t.LWP, err)
		}
		var m *cdti.Notify
		select {
		case m = <-st.ch:
		case <-ctx.Done():
			// The stop's notification, when it comes, finds nobody waiting and the rank goes on.
			giveBack()
			return fmt.Errorf("rank %d: did not stop to step LWP %d: %w", r.Num, t.LWP, ctx.Err())
		}
		giveBack()
		if isRequestedStop(m, r) {
			ns := m.Signal
			j.mu.Lock()
			r.sigstopSent = false
			r.notif = &ns
			j.mu.Unlock()
			r.sym.invalidate()
			return j.releaseHeld(r, []int{t.LWP})
		}
		// Another event came first. A stop of the user's (another thread's breakpoint) is
		// reported as usual, and the rank stopped again; one to pass on (a condition that does
		// not hold) leaves the rank suspended, which is what the step needs.
		r.evMu.Lock()
		j.mu.Lock()
		r.stepHold = true
		j.mu.Unlock()
		j.handleSignal(r, m)
		j.mu.Lock()
		r.stepHold = false
		j.mu.Unlock()
		r.evMu.Unlock()
		if attempt == 5 {
			return fmt.Errorf("rank %d stopped for other events %d times before the step could begin", r.Num, attempt)
		}
	}
}
