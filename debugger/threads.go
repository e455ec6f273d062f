package debugger

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"

	"github.com/hpcdap/hpcdap/cdti"
	"github.com/hpcdap/hpcdap/symbols"
)

// Thread is one (rank, LWP) pair: a DAP thread with a stable id.
type Thread struct {
	ID   int
	Rank *Rank
	LWP  int
	Name string
}

// addThread registers (rank, lwp) and returns its thread; j.mu must be held or the job not
// yet shared.
func (j *Job) addThread(r *Rank, lwp int) *Thread {
	for _, t := range r.threads {
		if t.LWP == lwp {
			return t
		}
	}
	j.nextThread++
	t := &Thread{ID: j.nextThread, Rank: r, LWP: lwp}
	t.Name = threadName(r, lwp, threadLabel{}, "")
	j.threads[t.ID] = t
	r.threads = append(r.threads, t)
	sort.SliceStable(r.threads, func(a, b int) bool {
		if (r.threads[a].LWP == r.leader) != (r.threads[b].LWP == r.leader) {
			return r.threads[a].LWP == r.leader
		}
		return r.threads[a].LWP < r.threads[b].LWP
	})
	return t
}

// mainThread returns the rank's leader thread.
func (r *Rank) mainThread() *Thread {
	if len(r.threads) > 0 && r.threads[0].LWP == r.leader {
		return r.threads[0]
	}
	for _, t := range r.threads {
		if t.LWP == r.leader {
			return t
		}
	}
	if len(r.threads) > 0 {
		return r.threads[0]
	}
	return nil
}

// threadFor returns the thread of (rank, lwp), registering it if new.
func (j *Job) threadFor(r *Rank, lwp int) *Thread {
	j.mu.Lock()
	defer j.mu.Unlock()
	if lwp == 0 {
		return r.mainThread()
	}
	return j.addThread(r, lwp)
}

// threadRefresh is the reading of one stopped rank's threads for its stop: what is known
// before its thread list is read (beginRefresh) and what the list is then made into
// (endRefresh). The list is read by the rank alone (readThreads) or with other ranks of its
// connection in one collective (threadscoll.go).
type threadRefresh struct {
	r    *Rank
	gen  int
	plan *labelPlan // the first labelling of the rank's threads follows it
	mods []*symbols.Module
	lead bool // the rank leads plan (its reads are recorded for the others)
}

// refreshThreads reads a stopped rank's thread list once per stop.
func (j *Job) refreshThreads(ctx context.Context, r *Rank) {
	if t := j.beginRefresh(ctx, r); t != nil {
		j.readThreads(ctx, t)
	}
}

// beginRefresh returns the refresh of r's threads, or nil when its list was read at this stop
// or it is not stopped.
func (j *Job) beginRefresh(ctx context.Context, r *Rank) *threadRefresh {
	j.mu.Lock()
	fresh := r.threadsGen == r.gen || r.state != RankStopped
	t := &threadRefresh{r: r, gen: r.gen}
	// The first labelling of a rank's threads follows the plan of its module layout: the
	// first rank of the layout leads it, the others read the list and the thread library's
	// data together (threadnames.go).
	first := r.labels == nil
	j.mu.Unlock()
	if fresh {
		return nil
	}
	if first {
		if m, err := r.sym.modules(ctx, false); err == nil && len(m) > 0 {
			t.mods = m
			t.plan, t.lead = j.labelPlan(m)
		}
	}
	return t
}

// readThreads reads t's thread list by itself (with the plan's memory when it follows one)
// and ends the refresh.
func (j *Job) readThreads(ctx context.Context, t *threadRefresh) {
	if t.lead {
		defer t.plan.learned(nil, nil) // if the labelling did not get to it
	}
	var list []cdti.ThreadEntry
	if t.plan != nil && !t.lead {
		list = t.r.sym.listWithPlan(ctx, t.plan, t.mods)
	}
	if list == nil {
		var err error
		if list, err = t.r.node.client.ThreadList(ctx, uint32(t.r.Num)); err != nil {
			return
		}
	}
	j.endRefresh(ctx, t, list)
}

// endRefresh names the threads of list, t's rank's thread list as just read (labelling them
// from the thread library when one is new), and records them for the stop.
func (j *Job) endRefresh(ctx context.Context, t *threadRefresh, list []cdti.ThreadEntry) {
	r := t.r
	// A thread's pthread_t and start routine do not change while it lives: the thread
	// library's list is read again only when a thread it has not labelled is there.
	j.mu.Lock()
	labels := r.labels
	for _, e := range list {
		if labels[int(e.TID)].pthread == 0 {
			labels = nil
			break
		}
	}
	j.mu.Unlock()
	lwps := make([]int, len(list))
	for i, e := range list {
		lwps[i] = int(e.TID)
	}
	if labels == nil {
		labels = r.sym.threadLabels(ctx, lwps, t.plan, t.lead)
	}
	hw := r.hardwareThreads(ctx, lwps)
	j.mu.Lock()
	defer j.mu.Unlock()
	if r.gen != t.gen {
		return
	}
	r.labels = labels
	alive := map[int]bool{}
	for _, e := range list {
		lwp := int(e.TID)
		alive[lwp] = true
		th := j.addThread(r, lwp)
		th.Name = threadName(r, lwp, labels[lwp], hw[lwp])
	}
	kept := r.threads[:0]
	for _, th := range r.threads {
		if alive[th.LWP] || th.LWP == r.leader {
			kept = append(kept, th)
		} else {
			delete(j.threads, th.ID)
		}
	}
	r.threads = kept
	r.threadsGen = t.gen
}

// Thread returns the thread with DAP id id, or nil.
func (j *Job) Thread(id int) *Thread {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.threads[id]
}

// LiveThreads refreshes the thread lists of stopped ranks (once per stop each, in parallel,
// each bounded by ctx and DefaultTimeout; those sharing a connection with collectives,
// refreshStale) and returns copies of the threads of the ranks that
// have not exited, in rank order: every rank's main thread, and the others while the list
// holds fewer than max.
func (j *Job) LiveThreads(ctx context.Context, max int) []Thread {
	stale := false
	j.mu.Lock()
	for _, r := range j.ranks {
		stale = stale || (r.state == RankStopped && r.threadsGen != r.gen)
	}
	j.mu.Unlock()
	if stale {
		// Only a stop's first request reads: a repeated one costs no timer.
		ctx, cancel := context.WithTimeout(ctx, DefaultTimeout)
		defer cancel()
		j.refreshStale(ctx, j.ranks)
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.liveThreadsLocked(max)
}

// KnownThreads returns what LiveThreads would when no stopped rank's thread list is to be
// read, without waiting for anything; ok is false when one is (the caller then uses
// LiveThreads).
func (j *Job) KnownThreads(max int) (list []Thread, ok bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	for _, r := range j.ranks {
		if r.state == RankStopped && r.threadsGen != r.gen {
			return nil, false
		}
	}
	return j.liveThreadsLocked(max), true
}

// liveThreadsLocked lists the threads of the ranks that have not exited, as LiveThreads
// says; j.mu is held.
func (j *Job) liveThreadsLocked(max int) []Thread {
	var list []Thread
	for _, r := range j.ranks {
		if r.state == RankExited {
			continue // its threads are gone
		}
		for _, t := range r.threads {
			if len(list) >= max && t.LWP != r.leader {
				continue
			}
			list = append(list, *t)
		}
	}
	return list
}

// ErrNotStopped is what an operation that needs a stopped thread answers for a thread whose
// rank runs (errors.Is); errUnknownThread for a thread id the job does not know.
var (
	ErrNotStopped    = errors.New("not stopped")
	errUnknownThread = errors.New("unknown thread")
)

// notStoppedError says which rank runs (or ended) where a stopped thread was needed.
type notStoppedError struct {
	rank  int
	state RankState
}

func (e *notStoppedError) Error() string        { return fmt.Sprintf("rank %d is %s", e.rank, e.state) }
func (e *notStoppedError) Is(target error) bool { return target == ErrNotStopped }

// StoppedThread returns the thread with DAP id for an operation that reads or runs it
// stopped: its rank is stopped, or (stop mode thread) the thread itself is held while its
// rank runs. The error wraps errUnknownThread or ErrNotStopped.
func (j *Job) StoppedThread(id int) (*Thread, error) {
	t := j.Thread(id)
	if t == nil {
		return nil, fmt.Errorf("%w %d", errUnknownThread, id)
	}
	j.mu.Lock()
	st := t.Rank.state
	held := t.Rank.sym.held[t.LWP] // stop mode thread: this thread is stopped, others run
	j.mu.Unlock()
	if st != RankStopped && !held {
		return nil, &notStoppedError{rank: t.Rank.Num, state: st}
	}
	return t, nil
}

// DropStack forgets the thread's stack read at this stop, after a write (a register, a
// variable, a function call) may have changed it.
func (t *Thread) DropStack() { t.Rank.sym.dropStack(t.LWP) }

// Stops returns the stops that hold now, one per stopped rank, as Stopped reported them: for
// a client that joins a running job. The ranks stopped by a breakpoint, a step or a signal
// come first, then the ones an all-stop or a pause stopped, each in rank order. In stop mode
// "all" every stop says AllStopped when no rank runs.
func (j *Job) Stops() []StopEvent {
	j.mu.Lock()
	defer j.mu.Unlock()
	running := false
	for _, r := range j.ranks {
		if r.state == RankRunning || r.state == RankStarting {
			running = true
		}
	}
	var own, paused []StopEvent
	for _, r := range j.ranks {
		if r.state != RankStopped {
			continue
		}
		tid := 0
		if r.notif != nil {
			tid = int(r.notif.ThreadID)
		}
		t := j.threadForLocked(r, tid)
		if t == nil {
			continue
		}
		ev := StopEvent{ThreadID: t.ID, Rank: r.Num, Reason: r.stopReason, Text: r.stopText,
			HitBPs: slices.Clone(r.stopBPs), AllStopped: j.mode == StopAll && !running}
		if ev.Reason == "pause" {
			paused = append(paused, ev)
		} else {
			own = append(own, ev)
		}
	}
	return append(own, paused...)
}
