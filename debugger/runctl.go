package debugger

import (
	"context"
	"fmt"
	"syscall"
	"time"

	"github.com/hpcdap/hpcdap/cdti"
)

// Run control follows the CNK's contract as the agent gives it: a signal in the notify set
// suspends every thread of a rank and sends one Notify; the rank stays suspended until the
// adapter continues it (ContinueProcess) or steps one of its threads (StepThread). On top of
// that the adapter builds the job's stops:
//
//   - all-stop (the default): the first rank that stops for a reason of its own becomes the
//     primary stop; every other running rank is stopped (StopProcess), and the DAP stopped
//     event goes out once all of them have reported (the collector);
//   - rank: a rank's stop is reported alone, the others keep running;
//   - thread: the stopped thread is held and its rank continued at once.
//
// Ranks are stopped with the agent's StopProcess, not with a signal: the agent stops every
// thread and answers with one Notify(SIGSTOP, Interrupt), or tells that a notification already
// on its way is the stop; nothing is left in the kernel to stop the rank again later. A rank
// that an all-stop or a pause waits for takes whatever notification comes next as its stop,
// even one that would otherwise be passed on (a false condition, a library load, a signal the
// program handles). Only against an agent without the extension (a real CNK) is SIGSTOP sent.

// collector gathers an all-stop.
type collector struct {
	primary *Rank
	info    stopInfo
	waiting map[*Rank]bool
	// also are the other ranks that stopped for an event of their own (a breakpoint hit, a
	// signal) while the job stopped: each is reported with the stop, so that no hit is lost.
	also []rankStop
}

// rankStop is one rank's stop and why.
type rankStop struct {
	r    *Rank
	info stopInfo
}

// ownStop reports whether a stop of this reason is an event of the rank's own, which the user
// must hear of even when another rank's stop stopped the job first.
func ownStop(reason string) bool {
	switch reason {
	case "pause", "step", "entry":
		return false
	}
	return true
}

// stopInfo is why a rank stopped, in DAP terms.
type stopInfo struct {
	reason string // "breakpoint", "step", "pause", "exception", "entry", ...
	text   string // description
	tid    int    // the LWP that stopped
	bps    []int  // hit breakpoint ids
}

// readNotifications dispatches the notifications of one connection (one agent's, or every
// agent's through the tree) until it ends; nodes are those it serves.
func (j *Job) readNotifications(nodes []*node) {
	n := nodes[0]
	defer j.recoverPanic("notifications of " + n.host)
	var cut lostRanks
	for m := range n.client.Notifications() {
		r := j.rank(int(m.Rank))
		if r == nil {
			continue
		}
		switch m.Kind {
		case cdti.NotifyTypeUnreachable:
			if lost := cut.add(r, m.Lost); lost != nil {
				j.onLost(lost)
			}
		case cdti.NotifyTypeSignal:
			j.mu.Lock()
			gen := r.ctlGen
			j.mu.Unlock()
			go j.onSignal(r, m, gen)
		case cdti.NotifyTypeTermination:
			go j.onExit(r, m.Exit)
		case cdti.NotifyTypeControl:
			j.queueControl(r, &m.Control)
		}
	}
	// The connection ended: every rank of the node is gone for this session.
	if err := n.client.Err(); err != nil {
		j.mu.Lock()
		ending := j.stopAll
		j.mu.Unlock()
		if !ending {
			j.output("important", fmt.Sprintf("lost the agent on %s: %v\n", n.host, err))
		}
	}
	for _, n := range nodes {
		for _, r := range n.ranks {
			j.onExit(r, cdti.ExitStatus(-1))
		}
	}
}

// onSignal handles a signal notification of rank r, read while r's control generation was
// gen. One read before the session gave control up or took it back, or while another tool
// controls the rank, is about a stop that is not the session's (the release continued the
// rank): it is dropped.
func (j *Job) onSignal(r *Rank, m *cdti.Notify, gen int) {
	defer j.recoverPanic(fmt.Sprintf("signal notification of rank %d", r.Num))
	r.evMu.Lock()
	defer r.evMu.Unlock()
	j.mu.Lock()
	if r.yieldedTo != nil || r.ctlGen != gen {
		j.mu.Unlock()
		j.logf("rank %d: notify %s dropped: sent under a control authority that is over", r.Num, SignalName(int(m.Signal.Signal)))
		return
	}
	if r.state == RankExited {
		// Read before its end, handled after it: a rank lost with its agent, whose last
		// notification was on its way, is out of the session and stops nothing.
		j.mu.Unlock()
		j.logf("rank %d: notify %s dropped: the rank has left the session", r.Num, SignalName(int(m.Signal.Signal)))
		return
	}
	r.quietStop = false
	if st := r.stepper; st != nil {
		j.mu.Unlock()
		st.deliver(m)
		return
	}
	j.mu.Unlock()
	j.handleSignal(r, m)
}

// handleSignal is the regular path of a signal notification (no step owns the rank).
func (j *Job) handleSignal(r *Rank, m *cdti.Notify) {
	ns := m.Signal
	sig := int(ns.Signal)
	tid := int(ns.ThreadID)
	j.logf("rank %d: notify %s tid %d %v pc %#x data %#x", r.Num, SignalName(sig), tid, ns.Reason, ns.InstAddress, ns.DataAddress)
	j.mu.Lock()
	r.notif = &ns
	if r.state == RankStarting && r.leader == 0 && tid != 0 {
		// Behind a BG/Q CIOS agent the main thread is known from here on (see Rank.leader).
		for _, t := range r.threads {
			if t.LWP == 0 {
				t.LWP = tid
			}
		}
		r.leader = tid
		for _, t := range r.threads {
			if t.LWP == tid {
				t.Name = threadName(r, tid, threadLabel{}, "")
			}
		}
	}
	if r.state == RankStarting {
		r.state = RankStopped
		r.stopReason, r.stopText = "entry", ""
		j.markChanged(r)
		j.mu.Unlock()
		r.startOnce.Do(func() { close(r.started) })
		return
	}
	if ns.Reason == cdti.SignalInterrupt || (sig == int(syscall.SIGSTOP) && r.sigstopSent) {
		// The stop the adapter asked for. One that nobody waits for any more (its all-stop was
		// completed by another stop of this rank meanwhile) has nothing to report.
		r.sigstopSent = false
		if !j.awaitedLocked(r) {
			j.mu.Unlock()
			j.logf("rank %d: stop nobody waits for: continue", r.Num)
			j.resume(r)
			return
		}
		r.pauseReq = false
		j.mu.Unlock()
		j.rankStopped(r, stopInfo{reason: "pause", tid: tid})
		return
	}
	if j.stopAll {
		j.mu.Unlock()
		j.resume(r)
		return
	}
	j.mu.Unlock()
	var info stopInfo
	switch {
	case sig == int(syscall.SIGTRAP) && ns.Reason == cdti.SignalBreakpoint && j.isLibraryEvent(r, ns.InstAddress):
		j.onLibraryEvent(r)
		j.passOn(r, tid)
		return
	case sig == int(syscall.SIGTRAP) && (ns.Reason == cdti.SignalBreakpoint || ns.Reason == cdti.SignalConditionError):
		how := hitTrap
		if ns.Reason == cdti.SignalConditionError {
			how = hitCondErr
		}
		stop, info2 := j.bps.hit(r, tid, ns.InstAddress, how)
		if !stop {
			j.passOn(r, tid)
			return
		}
		info = info2
	case sig == int(syscall.SIGTRAP) && (ns.Reason == cdti.SignalWatchpointRead || ns.Reason == cdti.SignalWatchpointWrite):
		stop, info2 := j.bps.watchHit(r, tid, ns.DataAddress)
		if !stop {
			j.passOn(r, tid)
			return
		}
		info = info2
	case sig == int(syscall.SIGTRAP) && ns.Reason == cdti.SignalStepComplete:
		// A step whose stepper has gone (cancelled): report where it ended.
		info = stopInfo{reason: "step", tid: tid}
	default:
		j.mu.Lock()
		stopOnSignals := j.signalStop
		j.mu.Unlock()
		if !stopOnSignals && sig != int(syscall.SIGTRAP) {
			j.passOn(r, tid) // the signal is delivered as if nobody watched
			return
		}
		info = stopInfo{reason: "signal", text: SignalName(sig), tid: tid}
		if isFatal(sig) {
			info.reason = "exception"
			info.text = fmt.Sprintf("%s (%s) on rank %d%s", SignalName(sig), SignalDescription(sig), r.Num, r.Where())
		}
	}
	j.rankStopped(r, info)
}

// awaitedLocked reports whether an all-stop or a pause waits for r to stop; j.mu must be held.
func (j *Job) awaitedLocked(r *Rank) bool {
	return !j.stopAll && (r.pauseReq || (j.collect != nil && j.collect.waiting[r]))
}

// passOn lets a rank go on after a notification that is no stop of the user's: a condition
// that does not hold, a library load, a signal the program handles itself, a trap of a
// breakpoint removed meanwhile. A rank that an all-stop or a pause waits for stays stopped
// instead, this notification being its stop (what it was is kept by the agent: a signal is
// delivered, a breakpoint stepped over, when the rank runs again); so does one that a step of
// a held thread waits to suspend, silently.
func (j *Job) passOn(r *Rank, tid int) {
	j.mu.Lock()
	if r.stepHold {
		j.mu.Unlock() // a step in stop mode thread needed the rank suspended: it is
		return
	}
	if j.awaitedLocked(r) {
		r.pauseReq = false
		j.mu.Unlock()
		j.rankStopped(r, stopInfo{reason: "pause", tid: tid})
		return
	}
	j.mu.Unlock()
	j.resume(r)
}

// rankStopped records a stop and moves the job's stop forward according to the stop mode.
func (j *Job) rankStopped(r *Rank, info stopInfo) {
	j.logf("rank %d: stopped (%s, tid %d)", r.Num, info.reason, info.tid)
	j.mu.Lock()
	r.state = RankStopped
	r.pauseReq = false // a pause's stop still to come is not awaited any more: this is the stop
	r.stopReason, r.stopText, r.stopBPs = info.reason, info.text, info.bps
	j.markChanged(r)
	if j.mode != StopAll {
		body := j.takeChangedLocked()
		j.mu.Unlock()
		if body != nil {
			j.ev.RanksChanged(body)
		}
		j.reportRankStop(r, info)
		return
	}
	if j.entryWait != nil && j.collect == nil && info.reason == "entry" {
		// stopAtEntry: every rank runs to main by itself; the stop is reported once all are there.
		delete(j.entryWait, r)
		if len(j.entryWait) > 0 {
			j.mu.Unlock()
			return
		}
		j.entryWait = nil
		first := r
		for _, q := range j.ranks {
			if q.state == RankStopped {
				first = q
				break
			}
		}
		j.collect = &collector{primary: first, info: stopInfo{reason: "entry"}, waiting: map[*Rank]bool{}}
		if first == r {
			j.collect.info.tid = info.tid
		}
		j.finishCollectLocked()
		return
	}
	if g := j.steps; g != nil && j.collect == nil && g.ranks[r] && info.reason == "step" {
		delete(g.ranks, r)
		if len(g.ranks) > 0 {
			j.mu.Unlock()
			return
		}
		j.endStepGroupLocked(g)
	}
	if j.collect == nil {
		j.collect = &collector{primary: r, info: info, waiting: map[*Rank]bool{}}
		j.stops++
		var stop []*Rank
		for _, q := range j.ranks {
			if q == r || q.state != RankRunning || q.yieldedTo != nil { // another tool controls it: it runs on
				continue
			}
			j.collect.waiting[q] = true
			if q.stepper != nil {
				q.stepper.cancelLocked() // the job stops: a step under way ends where it is
			}
			if !q.pauseReq { // a pause's stop under way stops it already (or fails, ending the wait)
				stop = append(stop, q)
			}
		}
		j.sendStops(stop)
		if j.steps != nil {
			j.steps = nil // the step group ends with this stop
		}
	} else {
		delete(j.collect.waiting, r)
		if j.steps != nil {
			delete(j.steps.ranks, r)
		}
		if r != j.collect.primary && ownStop(info.reason) {
			j.collect.also = append(j.collect.also, rankStop{r, info})
		}
	}
	j.finishCollectLocked()
}

// endStepGroupLocked turns a step group whose ranks have all finished into the job's stop,
// reported on the group's primary rank or, if that one has ended, on a rank still stopped
// (none: the job has ended, and no stop is reported); j.mu must be held.
func (j *Job) endStepGroupLocked(g *stepGroup) {
	j.steps = nil
	primary, info := g.primary, g.info
	if g.primaryInfo != nil {
		info = *g.primaryInfo
	}
	if primary.state != RankStopped {
		primary, info.tid = nil, 0
		for _, q := range j.ranks {
			if q.state == RankStopped {
				primary = q
				break
			}
		}
	}
	if primary != nil {
		j.collect = &collector{primary: primary, info: info, waiting: map[*Rank]bool{}}
		// The ranks that ran free during the step stop with the job; one whose start to run
		// free is still on its way stays stopped (Job.stops).
		j.stops++
		var stop []*Rank
		for _, q := range j.ranks {
			if q.state == RankRunning && q.stepper == nil && q.yieldedTo == nil {
				j.collect.waiting[q] = true
				stop = append(stop, q)
			}
		}
		j.sendStops(stop)
	}
}

// finishCollectLocked emits the all-stop once nobody is left to wait for; it unlocks j.mu.
func (j *Job) finishCollectLocked() {
	c := j.collect
	if c == nil || len(c.waiting) > 0 {
		if c != nil {
			j.logf("all-stop: waiting for %d rank(s)", len(c.waiting))
		}
		j.mu.Unlock()
		return
	}
	j.logf("all-stop: rank %d %s", c.primary.Num, c.info.reason)
	j.collect = nil
	body := j.takeChangedLocked()
	t := j.threadForLocked(c.primary, c.info.tid)
	var also []StopEvent
	for _, a := range c.also {
		if a.r.state != RankStopped {
			continue // ended meanwhile
		}
		at := j.threadForLocked(a.r, a.info.tid)
		also = append(also, StopEvent{ThreadID: at.ID, Rank: a.r.Num, Reason: a.info.reason, Text: a.info.text,
			HitBPs: a.info.bps, AllStopped: true, Also: true})
	}
	j.mu.Unlock()
	if body != nil {
		j.ev.RanksChanged(body)
	}
	j.sendStopped(t, c.info, true)
	for _, ev := range also {
		j.ev.Stopped(ev)
	}
}

// threadForLocked is threadFor with j.mu held.
func (j *Job) threadForLocked(r *Rank, lwp int) *Thread {
	if lwp == 0 {
		return r.mainThread()
	}
	return j.addThread(r, lwp)
}

// reportRankStop sends the stopped events of one rank (stop modes rank and thread).
func (j *Job) reportRankStop(r *Rank, info stopInfo) {
	if j.mode == StopThread {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		j.refreshThreads(ctx, r)
		cancel()
	}
	j.mu.Lock()
	t := j.threadForLocked(r, info.tid)
	others := append([]*Thread(nil), r.threads...)
	mode := j.mode
	j.mu.Unlock()
	if mode == StopThread && len(others) > 1 {
		// Only this thread stays stopped: hold it, let the rank's other threads run.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		rs, err := r.node.client.Update(ctx, uint32(r.Num), &cdti.HoldThread{ThreadID: uint32(t.LWP)})
		cancel()
		if err == nil && rs[0].Code == cdti.CmdSuccess {
			j.mu.Lock()
			r.sym.heldLWP(t.LWP, true)
			j.mu.Unlock()
			if r.sym.mem != nil {
				r.sym.mem.live.Store(true)
			}
			j.continueRank(r)
			j.mu.Lock()
			r.state = RankStopped // one thread is stopped: its frames stay readable
			r.notif = nil         // ...but no notification is in flight any more
			j.mu.Unlock()
			j.sendStopped(t, info, false)
			return
		}
	}
	j.sendStopped(t, info, false)
	for _, o := range others {
		if o != t {
			j.ev.Stopped(StopEvent{ThreadID: o.ID, Rank: r.Num, Reason: info.reason, Other: true})
		}
	}
}

// ReportStoppedInPlace reports the job's ranks, stopped where they were when the adapter took
// control of them, as its entry stop, on the thread of rank 0 that stopped.
func (j *Job) ReportStoppedInPlace() {
	r := j.ranks[0]
	j.mu.Lock()
	tid := 0
	if r.notif != nil {
		tid = int(r.notif.ThreadID)
	}
	t := j.threadForLocked(r, tid)
	j.mu.Unlock()
	j.sendStopped(t, stopInfo{reason: "entry"}, true)
}

// sendStopped reports the stop of thread t.
func (j *Job) sendStopped(t *Thread, info stopInfo, all bool) {
	if t == nil {
		return
	}
	j.ev.Stopped(StopEvent{ThreadID: t.ID, Rank: t.Rank.Num, Reason: info.reason, Text: info.text, HitBPs: info.bps,
		AllStopped: all})
}

// SignalDescription is a short explanation of a fatal signal.
func SignalDescription(sig int) string {
	switch syscall.Signal(sig) {
	case syscall.SIGSEGV:
		return "segmentation fault"
	case syscall.SIGBUS:
		return "bus error"
	case syscall.SIGFPE:
		return "arithmetic exception"
	case syscall.SIGILL:
		return "illegal instruction"
	case syscall.SIGABRT:
		return "aborted"
	case syscall.SIGSYS:
		return "bad system call"
	}
	return SignalName(sig)
}

// StopMode says what stops when one thread stops.
type StopMode int

const (
	StopAll    StopMode = iota // the whole job
	StopRank                   // the thread's rank
	StopThread                 // only the thread
)

// StopSignal returns the notification of the signal that r is stopped for, or nil if it is
// not stopped for a signal.
func (j *Job) StopSignal(r *Rank) *cdti.NotifySignal {
	j.mu.Lock()
	defer j.mu.Unlock()
	if r.notif == nil || (r.stopReason != "exception" && r.stopReason != "signal") {
		return nil
	}
	return r.notif
}

// PauseFrom pauses what a pause request of thread t stops: its run targets, or the focus when
// t is nil. It reports whether any rank was running.
func (j *Job) PauseFrom(t *Thread) bool {
	if t == nil {
		return j.pause(j.focusRanks())
	}
	return j.pause(j.runTargets(t, false))
}

// RestatePause reports t stopped for a pause that found nothing running, when its rank is
// stopped: the client still expects to hear that the thread is stopped.
func (j *Job) RestatePause(t *Thread) {
	if j.StateOf(t.Rank) == RankStopped {
		j.sendStopped(t, stopInfo{reason: "pause", tid: t.LWP}, j.mode == StopAll)
	}
}
