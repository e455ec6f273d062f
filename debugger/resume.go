package debugger

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/hpcdap/hpcdap/cdti"
)

// runTargets returns the ranks a run-control request on thread t applies to: the focus set
// and t's own rank (in stop modes rank and thread: t's rank only).
func (j *Job) runTargets(t *Thread, single bool) []*Rank {
	j.mu.Lock()
	defer j.mu.Unlock()
	if single || j.mode != StopAll {
		return []*Rank{t.Rank}
	}
	set := j.focus.Add(t.Rank.Num)
	return j.ranksInLocked(set)
}

// resume continues a stopped rank (ContinueProcess on its notified thread).
func (j *Job) resume(r *Rank) error {
	j.logf("rank %d: resume", r.Num)
	j.mu.Lock()
	if r.state == RankExited {
		j.mu.Unlock()
		return nil
	}
	if len(r.sym.held) > 0 {
		// Stop mode thread: the threads it holds stay stopped, and what the client reads of
		// them stays valid; the rank's other threads run on.
		r.notif = nil
		j.mu.Unlock()
		r.sym.invalidate()
		return j.continueRank(r)
	}
	j.beginRunLocked(r)
	j.mu.Unlock()
	return j.continueRank(r)
}

// endStopLocked ends what belongs to r's stop (with j.mu held): what was read at it is
// forgotten, and the user hears that the stop is over (Events.StopOver).
func (j *Job) endStopLocked(r *Rank) {
	r.gen++
	r.sym.invalidate()
	j.ev.StopOver(r.Num)
}

// beginRunLocked marks a rank running and invalidates everything read at its last stop.
func (j *Job) beginRunLocked(r *Rank) {
	r.pauseReq = false
	if r.state == RankStopped {
		r.state = RankRunning
		j.markChanged(r)
	}
	r.notif = nil
	j.endStopLocked(r)
	if r.sym.mem != nil {
		r.sym.mem.live.Store(false)
	}
}

// continueRank sends ContinueProcess for the notified thread.
func (j *Job) continueRank(r *Rank) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rs, err := r.node.client.Update(ctx, uint32(r.Num), &cdti.ContinueProcess{})
	return j.continueAnswered(r, rs, err)
}

// continueAnswered handles the answer to a rank's ContinueProcess.
func (j *Job) continueAnswered(r *Rank, rs []cdti.Result, err error) error {
	if unreachable(err) {
		// Cut off by a lost agent: the rank runs on outside the session; its loss's
		// notification names it, and ends it unless this does first.
		j.logf("rank %d: continue: %v", r.Num, err)
		j.mu.Lock()
		r.cutOff = true
		j.mu.Unlock()
		go j.onExit(r, cdti.ExitStatus(-1))
		return nil
	}
	if err != nil {
		j.logf("rank %d: continue: %v", r.Num, err)
		return fmt.Errorf("continue rank %d: %w", r.Num, err)
	}
	if len(rs) != 1 {
		return fmt.Errorf("continue rank %d: %d results", r.Num, len(rs))
	}
	j.logf("rank %d: continue: %v", r.Num, rs[0].Code)
	if rs[0].Code != cdti.CmdSuccess && rs[0].Code != cdti.CmdProcessExiting {
		return fmt.Errorf("continue rank %d: %v", r.Num, rs[0].Code)
	}
	return nil
}

// continueRanks resumes every stopped rank of ranks (releasing threads held by stop mode
// thread) and returns the threads that now run. own, if not nil, is a rank whose evMu the
// caller holds.
//
// Each rank is let go under its evMu, as the stop of an all-stop is sent (sendStop), and only
// if no all-stop has begun since the continue did (Job.stops): a rank that another rank's stop
// overtook stays stopped as part of that stop, instead of running while the job is reported
// stopped.
func (j *Job) continueRanks(ranks []*Rank, own *Rank) ([]*Thread, error) {
	j.mu.Lock()
	epoch := j.stops
	j.mu.Unlock()
	return j.continueRanksIn(ranks, own, epoch)
}

// continueRanksIn is continueRanks for a continue that began at an earlier epoch of the job's
// stops (Job.stops): a rank that a stop since then has overtaken stays stopped.
func (j *Job) continueRanksIn(ranks []*Rank, own *Rank, epoch int) ([]*Thread, error) {
	var resumed []*Thread
	var first error
	var mu sync.Mutex
	var wg sync.WaitGroup
	j.mu.Lock()
	for _, r := range ranks {
		if r.state == RankStopped {
			resumed = append(resumed, r.threads...)
		}
	}
	j.mu.Unlock()
	note := func(err error) {
		if err != nil {
			mu.Lock()
			if first == nil {
				first = err
			}
			mu.Unlock()
		}
	}
	// A caller holding one rank's evMu continues rank by rank: a collective takes the ranks'
	// locks in rank order, which a lock already held would break.
	groups, single := [][]*Rank(nil), ranks
	if own == nil {
		groups, single = j.collectiveGroups(ranks)
	}
	for _, g := range groups {
		wg.Go(func() { note(j.continueCollective(g, epoch)) })
	}
	for _, r := range single {
		wg.Go(func() {
			if r != own {
				r.evMu.Lock()
				defer r.evMu.Unlock()
			}
			note(j.continueOne(r, epoch))
		})
	}
	wg.Wait()
	return resumed, first
}

// continueOne lets one stopped rank of a continue go (its evMu held), unless an all-stop has
// begun since the continue did (epoch).
func (j *Job) continueOne(r *Rank, epoch int) error {
	held, notified := j.continuePrepare(r, epoch)
	var err error
	if len(held) > 0 {
		err = j.releaseHeld(r, held)
	}
	if err == nil && notified {
		err = j.continueRank(r)
	}
	return err
}

// continuePrepare marks a stopped rank of a continue running (its evMu held) and returns what
// to send: the threads stop mode thread held, to release, and whether to continue the
// process (its notification in flight). A rank not stopped, or overtaken by a stop of the job
// since the continue began (epoch), needs nothing.
func (j *Job) continuePrepare(r *Rank, epoch int) (held []int, notified bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if r.state != RankStopped {
		return nil, false
	}
	if j.stops != epoch {
		// Overtaken by a stop of the job: the rank stays where it is, stopped with the job.
		r.stopReason, r.stopText, r.stopBPs = "pause", "", nil
		j.markChanged(r)
		return nil, false
	}
	// A rank whose notification is in flight is continued; one that only has threads held
	// (stop mode thread) is already running and just releases them.
	held = append(r.sym.heldLWPs(), r.sym.single...)
	r.sym.single = nil
	notified = r.notif != nil || len(held) == 0
	if notified {
		j.beginRunLocked(r)
	} else {
		r.state = RankRunning
		j.endStopLocked(r)
		j.markChanged(r)
	}
	return held, notified
}

// continueCollective is continueOne for ranks sharing a connection (none of them own): their
// evMu held in rank order, each is prepared as continueOne prepares it, and the ranks to
// continue without threads to release go in one collective ContinueProcess; the others, and
// all of them if the collective cannot be sent, go one by one.
func (j *Job) continueCollective(ranks []*Rank, epoch int) error {
	unlock := lockRanks(ranks)
	defer unlock()
	var plain []*Rank
	var first error
	note := func(err error) {
		if err != nil && first == nil {
			first = err
		}
	}
	for _, r := range ranks {
		held, notified := j.continuePrepare(r, epoch)
		switch {
		case len(held) > 0:
			err := j.releaseHeld(r, held)
			if err == nil && notified {
				err = j.continueRank(r)
			}
			note(err)
		case notified:
			plain = append(plain, r)
		}
	}
	if len(plain) == 0 {
		return first
	}
	ctx, cancel := context.WithTimeout(context.Background(), collectiveTimeout)
	defer cancel()
	var out map[*Rank]rankAnswer
	var err error
	if len(plain) > 1 {
		out, err = j.collective(ctx, plain, 0, &cdti.ContinueProcess{})
	}
	// Ranks the collective did not answer for (all of them when it failed) are continued one
	// by one, in parallel: one at a time, a slow connection would take each rank's time limit.
	var wg sync.WaitGroup
	var mu sync.Mutex
	for _, r := range plain {
		a, ok := out[r]
		if len(plain) > 1 && err == nil && ok {
			err := j.continueAnswered(r, a.res, a.err)
			mu.Lock()
			note(err)
			mu.Unlock()
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := j.continueRank(r)
			mu.Lock()
			note(err)
			mu.Unlock()
		}()
	}
	wg.Wait()
	return first
}

// releaseHeld releases threads the thread stop mode held.
func (j *Job) releaseHeld(r *Rank, lwps []int) error {
	var cmds []cdti.Command
	for _, l := range lwps {
		cmds = append(cmds, &cdti.ReleaseThread{ThreadID: uint32(l)})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := r.node.client.UpdateBatch(ctx, uint32(r.Num), cmds)
	j.logf("rank %d: release %v: %v %v", r.Num, lwps, res, err)
	j.mu.Lock()
	for _, l := range lwps {
		r.sym.heldLWP(l, false)
	}
	j.mu.Unlock()
	return err
}

// ContinueThread resumes one thread of a stopped rank, the rank's other threads held (a
// single-thread continue); they run again when the rank is next resumed or stepped as a whole.
func (j *Job) ContinueThread(ctx context.Context, t *Thread) error {
	r := t.Rank
	st := &stepper{j: j, r: r, lwp: t.LWP, single: true}
	held := st.holdOthers(ctx)
	j.mu.Lock()
	r.sym.single = append(r.sym.single, held...)
	j.beginRunLocked(r)
	j.mu.Unlock()
	return j.continueRank(r)
}

// heldAlone reports whether t is a thread that stop mode thread holds while its rank runs.
func (j *Job) heldAlone(t *Thread) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.mode == StopThread && t.Rank.notif == nil && t.Rank.sym.held[t.LWP]
}

// releaseThread lets one thread held by stop mode thread run again; its rank's other held
// threads stay stopped.
func (j *Job) releaseThread(t *Thread) error {
	r := t.Rank
	r.sym.dropStack(t.LWP)
	err := j.releaseHeld(r, []int{t.LWP})
	j.mu.Lock()
	if len(r.sym.held) == 0 && r.notif == nil && r.state == RankStopped {
		r.state = RankRunning
		j.endStopLocked(r)
	}
	j.markChanged(r)
	j.mu.Unlock()
	return err
}

// ContinueFrom continues from a stop of thread t: the ranks its stop mode continues (every
// rank, its rank, or — a thread held alone in stop mode thread — that thread). report gets the
// outcome (the threads that were continued, whether that is every rank, or the error) before
// any event of a continued rank can be reported: in stop modes rank and thread it runs with
// that rank's event lock held, so that the client hears the continue's answer, and which
// threads run, before any new stop of them.
func (j *Job) ContinueFrom(t *Thread, report func(resumed []*Thread, all bool, err error)) {
	ranks := j.runTargets(t, false)
	var own *Rank
	if len(ranks) == 1 {
		// One rank (stop modes rank and thread): no stop of it is half handled while it is
		// continued (in stop mode thread, a thread that stopped meanwhile is held, and its rank
		// running again, before this continue looks at it); the lock is held until report
		// has run.
		own = ranks[0]
		own.evMu.Lock()
		defer own.evMu.Unlock()
	}
	if j.heldAlone(t) {
		report(nil, false, j.releaseThread(t))
		return
	}
	resumed, err := j.continueRanks(ranks, own)
	report(resumed, len(ranks) == len(j.ranks), err)
}

// ContinueAll resumes every rank (the start of a launched job).
func (j *Job) ContinueAll() error {
	_, err := j.continueRanks(j.ranks, nil)
	return err
}
