package adapter

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"

	"github.com/hpcdap/hpcdap/cdti"
	"github.com/hpcdap/hpcdap/symbols"
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

type stepKind int

const (
	stepInto stepKind = iota
	stepOver
	stepOutOf
)

// stepGroup is the set of ranks stepping for one request.
type stepGroup struct {
	ranks       map[*Rank]bool // still stepping
	primary     *Rank
	info        stopInfo
	primaryInfo *stopInfo
}

// stepper steps one thread of one rank.
type stepper struct {
	j      *Job
	r      *Rank
	lwp    int
	kind   stepKind
	instr  bool
	single bool
	ch     chan *cdti.Notify

	cancelled bool          // guarded by j.mu
	gone      chan struct{} // closed when the rank has ended (endLocked)
	ended     bool          // guarded by j.mu
	temps     []uint64
	plan      stepPlan
	end       *stopInfo // how the step ended when not as a plain step (a breakpoint on the way)
}

// stepPlan is what a step needs to know of where it starts, read while the rank is stopped.
type stepPlan struct {
	pc, sp  uint64
	cfa     uint64 // frame 0's canonical frame address
	retAddr uint64 // frame 1's pc (0: unknown)
	lo, hi  uint64 // run-time range of the current line
	line    symbols.Line
	hasLine bool
	fnLo    uint64 // run-time range of the current function
	fnHi    uint64
	proc    *symbols.Process
}

// maxSteps bounds the single steps of one source step before the step runs to the line's
// boundaries instead (a loop inside one line).
const maxSteps = 2000

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

// startSteps starts a step of thread t (and, in all-stop mode, of the focus ranks' main
// threads). It returns once the steppers run.
func (j *Job) startSteps(ctx context.Context, t *Thread, kind stepKind, instr, single bool) error {
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
	if j.mode == stopAll && !single {
		for _, r := range j.ranksInLocked(j.focus) {
			if r != t.Rank && r.state == rankStopped && r.stepper == nil {
				ranks = append(ranks, r)
			}
		}
	}
	if t.Rank.state != rankStopped {
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
				steppers[i] = st
			}
		})
	}
	wg.Wait()
	if errs[0] != nil {
		return errs[0]
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
	if j.mode == stopAll {
		j.steps = g
	}
	// The step's response tells the client that t runs; the other ranks the step resumes are
	// announced, so that no client goes on taking them for stopped.
	var others []*Thread
	for _, st := range steppers {
		if st != nil && st.r != t.Rank {
			others = append(others, st.r.threads...)
		}
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
	return nil
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

// prepare reads where the step starts.
func (st *stepper) prepare(ctx context.Context) error {
	ts, err := st.r.sym.stack(ctx, st.lwp)
	if err != nil {
		return err
	}
	p := &st.plan
	p.pc, _ = ts.regs.PC()
	p.sp, _ = ts.regs.SP()
	p.proc = ts.proc
	if len(ts.frames) > 0 {
		p.cfa = ts.frames[0].CFA
		for _, f := range ts.frames[1:] {
			if f.Kind != symbols.FrameInline {
				p.retAddr = f.PC
				break
			}
		}
	}
	st.setRange(p.pc)
	return nil
}

// setRange makes the line and function around pc the step's range.
func (st *stepper) setRange(pc uint64) {
	p := &st.plan
	p.hasLine = false
	p.lo, p.hi, p.fnLo, p.fnHi = pc, pc+1, 0, 0
	m := p.proc.ModuleAt(pc)
	if m == nil {
		return
	}
	if fn := m.Bin.FunctionAt(pc - m.Bias); fn != nil {
		p.fnLo, p.fnHi = fn.Low+m.Bias, fn.High+m.Bias
	}
	if l, ok := m.Bin.LineForPC(pc - m.Bias); ok && l.Line > 0 {
		p.line, p.hasLine = l, true
		p.lo, p.hi = l.Addr+m.Bias, l.End+m.Bias
		if p.hi <= p.lo {
			p.hi = p.lo + 1
		}
	}
}

// lineAt returns the line of a run-time pc and whether pc starts a statement.
func (st *stepper) lineAt(pc uint64) (symbols.Line, bool, bool) {
	m := st.plan.proc.ModuleAt(pc)
	if m == nil {
		return symbols.Line{}, false, false
	}
	l, ok := m.Bin.LineForPC(pc - m.Bias)
	if !ok || l.Line == 0 {
		return l, false, false
	}
	return l, true, m.Bin.IsStatementStart(pc - m.Bias)
}

// errAborted ends a step because something else happened; the notification that did it has
// been handed to the regular path.
var errAborted = errors.New("step aborted")

// run performs the step and reports its end.
func (st *stepper) run() {
	ctx := context.Background()
	lwp, err := st.perform(ctx)
	st.cleanup(ctx)
	if errors.Is(err, errAborted) {
		return
	}
	j := st.j
	j.mu.Lock()
	if st.r.stepper == st {
		st.r.stepper = nil
	}
	exited := st.r.state == rankExited
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

// perform runs the step; it returns the LWP that ends it.
func (st *stepper) perform(ctx context.Context) (int, error) {
	p := &st.plan
	if st.kind == stepOutOf {
		return st.lwp, st.finishFrame(ctx)
	}
	if st.instr {
		_, err := st.advance(ctx)
		return st.lwp, err
	}
	if !p.hasLine {
		// No line information where the step starts: run back out to the caller, as gdb
		// does, then finish the caller's line unless the return lands on a line start.
		if err := st.finishFrame(ctx); err != nil {
			return st.lwp, err
		}
		if _, ok, start := st.lineStart(p.pc); !ok || start {
			return st.lwp, nil
		}
		st.setRange(p.pc)
	}
	startLine := p.line
	startPC := p.pc
	steps := 0
	for {
		if p.pc != startPC && st.j.bps.isUserSite(st.r, p.pc) {
			// The step reached a breakpoint: gdb reports the breakpoint (if its condition
			// holds) and ends the step there.
			if stop, info := st.j.bps.hit(st.r, st.lwp, p.pc); stop && info.reason != "exception" {
				st.end = &info
				return st.lwp, nil
			}
		}
		if steps >= maxSteps {
			if err := st.runToLineEnd(ctx); err != nil {
				return st.lwp, err
			}
			steps = 0
		} else {
			done, err := st.advance(ctx)
			if err != nil || done {
				return st.lwp, err
			}
			steps++
		}
		pc := p.pc
		if pc >= p.lo && pc < p.hi {
			continue
		}
		l, ok, atStart := st.lineStart(pc)
		if !ok {
			// Returned or jumped into code without line information: stop there, as gdb
			// does ("no line number information").
			return st.lwp, nil
		}
		if atStart && (l.Line != startLine.Line || l.File != startLine.File) {
			return st.lwp, nil
		}
		// Mid-line (back in a caller), or another row of the same line: keep stepping.
		st.setRange(pc)
	}
}

// lineStart returns the line of pc and whether pc is the first address of a statement row.
func (st *stepper) lineStart(pc uint64) (symbols.Line, bool, bool) {
	l, ok, stmt := st.lineAt(pc)
	return l, ok, ok && stmt && l.Addr+st.biasAt(pc) == pc
}

// finishFrame runs until the current frame returns to its caller.
func (st *stepper) finishFrame(ctx context.Context) error {
	p := &st.plan
	if p.retAddr == 0 {
		if err := st.refreshRet(ctx); err != nil {
			return err
		}
	}
	if p.retAddr == 0 {
		return errors.New("no caller to return to")
	}
	return st.runTo(ctx, []uint64{p.retAddr}, p.cfa)
}

// biasAt returns the load bias of the module containing pc.
func (st *stepper) biasAt(pc uint64) uint64 {
	if m := st.plan.proc.ModuleAt(pc); m != nil {
		return m.Bias
	}
	return 0
}

// advance executes one instruction of the thread, a call as a whole when stepping over it.
// Stepping into a call whose target has line information stops at the callee's first line
// (done); a callee without line information is run through.
func (st *stepper) advance(ctx context.Context) (done bool, err error) {
	p := &st.plan
	isCall, next := st.decodeCall(p.pc)
	if isCall && p.sp == 0 {
		if err := st.refresh(ctx); err != nil {
			return false, err
		}
	}
	callSP := p.sp
	if isCall && st.kind == stepOver {
		return st.instr, st.runTo(ctx, []uint64{next}, callSP)
	}
	if err := st.stepInstr(ctx); err != nil {
		return false, err
	}
	if !isCall || st.kind != stepInto || st.instr {
		return st.instr, nil
	}
	// At the callee's entry, the return address on the stack.
	m := p.proc.ModuleAt(p.pc)
	var fn *symbols.Function
	if m != nil {
		fn = m.Bin.FunctionAt(p.pc - m.Bias)
	}
	if _, hasLine, _ := st.lineAt(p.pc); fn == nil || !hasLine {
		return false, st.runTo(ctx, []uint64{next}, callSP)
	}
	target := p.pc
	name := fn.Name
	if fn.LinkageName != "" {
		name = fn.LinkageName
	}
	if locs, err := m.Bin.FunctionBreakpoints(name); err == nil {
		for _, l := range locs {
			if fn.Contains(l.Addr) {
				target = l.Addr + m.Bias
				break
			}
		}
	}
	if target != p.pc {
		if err := st.runTo(ctx, []uint64{target}, 0); err != nil {
			return false, err
		}
	}
	return true, nil
}

// decodeCall reports whether the instruction at pc is a call, and the address after it.
func (st *stepper) decodeCall(pc uint64) (bool, uint64) {
	var code [16]byte
	n, _ := st.plan.proc.Mem.ReadAt(code[:], pc)
	if n == 0 {
		return false, 0
	}
	call, next, ok := st.plan.proc.Arch.DecodeCall(code[:n], pc)
	if !ok {
		return false, 0
	}
	return call, next
}

// stepInstr single-steps the thread and waits for the step to complete.
func (st *stepper) stepInstr(ctx context.Context) error {
	for {
		if err := st.act(ctx, func() error {
			rs, err := st.r.node.client.Update(ctx, uint32(st.r.Num), &cdti.StepThread{ThreadID: uint32(st.lwp)})
			if err == nil && rs[0].Code != cdti.CmdSuccess {
				err = fmt.Errorf("step LWP %d: %v", st.lwp, rs[0].Code)
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

// refresh reads the thread's pc and sp now.
func (st *stepper) refresh(ctx context.Context) error {
	gp, fp, err := st.r.sym.registers(ctx, st.lwp)
	if err != nil {
		return err
	}
	regs, err := symbols.RegsFromNative(st.r.sym.Arch(), gp, fp)
	if err != nil {
		return err
	}
	st.plan.pc, _ = regs.PC()
	st.plan.sp, _ = regs.SP()
	return nil
}

// refreshRet learns the current frame's CFA and return address (after entering a function
// without line information).
func (st *stepper) refreshRet(ctx context.Context) error {
	st.r.sym.invalidate()
	ts, err := st.r.sym.stack(ctx, st.lwp)
	if err != nil {
		return err
	}
	st.plan.retAddr, st.plan.cfa = 0, 0
	if len(ts.frames) > 0 {
		st.plan.cfa = ts.frames[0].CFA
	}
	for _, f := range ts.frames[1:] {
		if f.Kind != symbols.FrameInline {
			st.plan.retAddr = f.PC
			break
		}
	}
	st.plan.pc, _ = ts.regs.PC()
	st.plan.sp, _ = ts.regs.SP()
	return nil
}

// runToLineEnd runs to the first statement outside the current line of the function, or to
// the return address: a fast way through a loop that stays on one line.
func (st *stepper) runToLineEnd(ctx context.Context) error {
	p := &st.plan
	var targets []uint64
	m := p.proc.ModuleAt(p.pc)
	if m != nil && p.fnHi > p.fnLo {
		for pc := p.fnLo; pc < p.fnHi && len(targets) < 512; {
			var code [16]byte
			n, _ := p.proc.Mem.ReadAt(code[:], pc)
			length := p.proc.Arch.InstLen(code[:n])
			if (pc < p.lo || pc >= p.hi) && m.Bin.IsStatementStart(pc-m.Bias) {
				targets = append(targets, pc)
			}
			pc += uint64(length)
		}
	}
	if p.retAddr != 0 {
		targets = append(targets, p.retAddr)
	}
	if len(targets) == 0 {
		return errors.New("no way out of the current line")
	}
	return st.runTo(ctx, targets, 0)
}
