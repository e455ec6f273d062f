package debugger

import (
	"context"
	"fmt"
	"sync"
	"syscall"
	"time"

	"github.com/hpcdap/hpcdap/cdti"
)

// onExit records the end of a rank.
func (j *Job) onExit(r *Rank, st cdti.ExitStatus) {
	defer j.recoverPanic(fmt.Sprintf("exit of rank %d", r.Num))
	r.evMu.Lock()
	defer r.evMu.Unlock()
	j.mu.Lock()
	if r.state == RankExited {
		j.mu.Unlock()
		return
	}
	if st != -1 {
		r.exit = &st
	}
	r.state = RankExited
	r.notif = nil
	j.endStopLocked(r)
	if r.stepper != nil {
		r.stepper.cancelLocked()
	}
	r.startOnce.Do(func() { close(r.started) })
	j.markChanged(r)
	if r.stepper != nil {
		r.stepper.endLocked()
	}
	if g := j.steps; g != nil {
		delete(g.ranks, r)
		if len(g.ranks) == 0 && j.collect == nil && !j.stopAll {
			j.endStepGroupLocked(g) // the rank was the last of the group to finish
		}
	}
	entryDone := false
	if j.entryWait != nil {
		delete(j.entryWait, r)
		entryDone = len(j.entryWait) == 0
	}
	var collect bool
	if j.collect != nil {
		delete(j.collect.waiting, r)
		collect = true
	}
	silent := j.stopAll
	j.mu.Unlock()
	j.drainOutput(r, 500*time.Millisecond)
	if !silent || st != -1 {
		switch {
		case st == -1:
		case st.Signaled():
			j.output("console", fmt.Sprintf("rank %d exited: killed by %s (exit code %d)\n", r.Num,
				SignalName(st.Signal()), exitCode(st)))
		default:
			j.output("console", fmt.Sprintf("rank %d exited with code %d\n", r.Num, st.ExitCode()))
		}
	}
	// The job has ended once every rank's end has been reported (not merely noticed: a rank
	// still printing its last output above is not done).
	j.mu.Lock()
	r.endReported = true
	all := true
	for _, q := range j.ranks {
		all = all && q.endReported
	}
	j.mu.Unlock()
	if collect {
		j.mu.Lock()
		j.finishCollectLocked()
	}
	if entryDone && !all {
		j.mu.Lock()
		j.entryWait = nil
		var first *Rank
		for _, q := range j.ranks {
			if q.state == RankStopped {
				first = q
				break
			}
		}
		if first != nil && j.collect == nil {
			j.collect = &collector{primary: first, info: stopInfo{reason: "entry"}, waiting: map[*Rank]bool{}}
			j.finishCollectLocked()
		} else {
			j.mu.Unlock()
		}
	}
	if all {
		j.AllExited()
	}
}

// AllExited sends the exited and terminated events once.
func (j *Job) AllExited() {
	j.mu.Lock()
	if j.exited {
		j.mu.Unlock()
		return
	}
	j.exited = true
	code := 0
	for _, r := range j.ranks {
		if r.exit != nil && code == 0 {
			code = exitCode(*r.exit)
		}
	}
	body := j.takeChangedLocked()
	j.mu.Unlock()
	if body != nil {
		j.ev.RanksChanged(body)
	}
	j.ev.Exited(code)
	j.ev.Terminated()
}

// Kill ends every rank (SIGKILL) and waits up to d for their termination notifications. The
// signal goes to the ranks one connection reaches in one collective (rank by rank where there
// is none, and for every rank whose part of it failed or that the collective did not answer
// for in time, each then within a time of its own).
func (j *Job) Kill(d time.Duration) {
	j.mu.Lock()
	j.stopAll = true
	live := []*Rank{}
	for _, r := range j.ranks {
		if r.state != RankExited {
			live = append(live, r)
		}
	}
	j.mu.Unlock()
	kill := &cdti.SendSignalToProcess{Signal: uint32(syscall.SIGKILL)}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	single := j.applyCollective(ctx, live, kill, nil)
	cancel()
	var wg sync.WaitGroup
	for _, r := range single {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			r.node.client.Update(ctx, uint32(r.Num), kill)
		})
	}
	wg.Wait()
	deadline := time.Now().Add(d)
	for _, r := range live {
		for time.Now().Before(deadline) {
			j.mu.Lock()
			gone := r.state == RankExited
			j.mu.Unlock()
			if gone {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// applyCollective sends cmd to ranks, one collective per group of them that one connection
// reaches, concurrently, and returns the ranks left to handle one by one: those reached by
// no such group, and those whose part failed (except behind a lost agent: nothing reaches
// them). A rank whose answer again(code) holds for is sent cmd again, in a collective of
// such ranks, after 20 ms, up to 100 times.
func (j *Job) applyCollective(ctx context.Context, ranks []*Rank, cmd cdti.Command, again func(cdti.CmdReturnCode) bool) (single []*Rank) {
	groups, single := j.collectiveGroups(ranks)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, g := range groups {
		wg.Go(func() {
			left := j.collectiveRepeated(ctx, g, cmd, again)
			mu.Lock()
			single = append(single, left...)
			mu.Unlock()
		})
	}
	wg.Wait()
	return single
}

// collectiveRepeated is applyCollective for one group.
func (j *Job) collectiveRepeated(ctx context.Context, ranks []*Rank, cmd cdti.Command, again func(cdti.CmdReturnCode) bool) (left []*Rank) {
	for range 100 {
		out, err := j.collective(ctx, ranks, 0, cmd)
		if err != nil {
			return append(left, ranks...)
		}
		var repeat []*Rank
		for _, r := range ranks {
			switch a := out[r]; {
			case a.err != nil && unreachable(a.err):
			case a.err != nil || len(a.res) != 1:
				left = append(left, r)
			case again != nil && again(a.res[0].Code):
				repeat = append(repeat, r)
			}
		}
		if len(repeat) == 0 {
			return left
		}
		ranks = repeat
		time.Sleep(20 * time.Millisecond)
	}
	return left
}

// Detach leaves every rank running as if never debugged: the adapter's traps and watchpoints
// are removed, control is released (which continues a suspended rank) and the tool detached.
// Control is released in one collective per connection that reaches several ranks; rank by
// rank elsewhere, for a rank with threads held alone (released first), and for every rank
// whose part of the collective failed or came too late.
func (j *Job) Detach() {
	j.mu.Lock()
	j.stopAll = true
	j.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	j.bps.removeAll(ctx)
	cancel()
	var live, single []*Rank
	j.mu.Lock()
	for _, r := range j.ranks {
		switch {
		case r.state == RankExited:
		case len(r.sym.heldLWPs()) > 0:
			single = append(single, r) // its held threads are released first
		default:
			live = append(live, r)
		}
	}
	j.mu.Unlock()
	pending := func(c cdti.CmdReturnCode) bool { return c == cdti.CmdPendingNotify } // notifications go first
	ctx, cancel = context.WithTimeout(context.Background(), 20*time.Second)
	single = append(single, j.applyCollective(ctx, live, &cdti.ReleaseControl{}, pending)...)
	cancel()
	// What is left, in a time of its own: an agent too slow for the collective delays only
	// its own ranks.
	ctx, cancel = context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	byNode := map[*node][]*Rank{}
	for _, r := range single {
		byNode[r.node] = append(byNode[r.node], r)
	}
	var wg sync.WaitGroup
	for _, n := range j.nodes {
		wg.Go(func() {
			for _, r := range byNode[n] {
				j.mu.Lock()
				held := r.sym.heldLWPs()
				j.mu.Unlock()
				if len(held) > 0 {
					j.releaseHeld(r, held)
				}
				for range 100 {
					rs, err := n.client.Update(ctx, uint32(r.Num), &cdti.ReleaseControl{})
					if err != nil || !pending(rs[0].Code) {
						break
					}
					time.Sleep(20 * time.Millisecond)
				}
			}
			for _, kernel := range n.kernels() {
				// Addressed to a rank still there: a CNK refuses a Detach naming one that
				// ended, and toolctld forgets the tool all the same (cdti-v6.md §9.6).
				j.mu.Lock()
				var at *Rank
				for _, r := range kernel {
					if r.state != RankExited {
						at = r
						break
					}
				}
				j.mu.Unlock()
				if at != nil {
					n.client.Detach(ctx, uint32(at.Num), cdti.RanksInNode)
				}
			}
		})
	}
	wg.Wait()
}
