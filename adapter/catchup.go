package adapter

import (
	"context"
	"sync"

	"github.com/google/go-dap"
	"github.com/hpcdap/hpcdap/debugger"
)

// catchUp is how a client that joined a running job learns of its stops exactly once. From
// its attach until its configurationDone, the job's stops are not sent to it: the replay that
// configurationDone makes (replayStops) tells every stop that holds then. A stop the replay
// told whose live event comes after it (the engine records a stop before it reports it) is
// not told again; a rank's entry goes when its stop ends (StopOver), before it can stop anew.
type catchUp struct {
	mu      sync.Mutex // held while the replay runs, so that no stop slips between
	pending bool       // joined, not yet replayed

	told     sync.Mutex                 // guards replayed; taken last, never held while taking another
	replayed map[int]debugger.StopEvent // by rank: the stops the replay told
}

// begin marks the client as joining (on) or not (off: its join failed): stops wait for its
// replay.
func (c *catchUp) begin(on bool) {
	c.mu.Lock()
	c.pending = on
	c.mu.Unlock()
}

// admit reports whether ev, a live stop, is to be sent to the client.
func (c *catchUp) admit(ev debugger.StopEvent) bool {
	c.mu.Lock()
	pending := c.pending
	c.mu.Unlock()
	if pending {
		return false
	}
	c.told.Lock()
	defer c.told.Unlock()
	if r, ok := c.replayed[ev.Rank]; ok && !ev.Other && r.ThreadID == ev.ThreadID && r.Reason == ev.Reason {
		delete(c.replayed, ev.Rank)
		return false
	}
	return true
}

// over forgets what the replay told of rank's stop, which has ended.
func (c *catchUp) over(rank int) {
	c.told.Lock()
	delete(c.replayed, rank)
	c.told.Unlock()
}

// continued forgets what the replay told of the stop of the rank whose thread threadID (all:
// every thread) runs again: a rank continued with threads held (stop mode thread) ends no stop
// the engine reports as over, yet its next stop is a new one. The thread is looked up before
// told is taken: the engine calls over with its own lock held, so taking the engine's lock
// under told would deadlock with it.
func (c *catchUp) continued(j *debugger.Job, threadID int, all bool) {
	rank, found := 0, false
	if !all && j != nil {
		if t := j.Thread(threadID); t != nil {
			rank, found = t.Rank.Num, true
		}
	}
	c.told.Lock()
	defer c.told.Unlock()
	if all {
		clear(c.replayed)
		return
	}
	if found {
		delete(c.replayed, rank)
	}
}

// replayStops tells s, which joined a running job, of its threads, the stops that hold now
// and every rank's state, as if it had watched them happen: one thread event (started) per
// live thread, as the threads request lists them, one hpcdap/ranksChanged event with all
// ranks, and one stopped event per stopped rank, the first with the focus. From then on the
// job's stops reach s live.
func (s *Conn) replayStops(j *debugger.Job) {
	c := &s.catch
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pending = false
	ctx, cancel := context.WithTimeout(s.ctx, debugger.DefaultTimeout)
	threads := j.LiveThreads(ctx, maxThreads)
	cancel()
	for _, t := range threads {
		s.send(&dap.ThreadEvent{Event: newEvent("thread"), Body: dap.ThreadEventBody{Reason: "started", ThreadId: t.ID}})
	}
	ev := s.events()
	states, _ := j.RankStates()
	ev.RanksChanged(states)
	stops := j.Stops()
	c.told.Lock()
	c.replayed = make(map[int]debugger.StopEvent, len(stops))
	for _, st := range stops {
		c.replayed[st.Rank] = st
	}
	c.told.Unlock()
	for i, st := range stops {
		if i > 0 {
			st.Also = true
		}
		st.HitBPs = nil // breakpoints of the client that was there
		ev.send(st)
	}
}
