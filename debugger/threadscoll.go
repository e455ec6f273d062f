package debugger

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/hpcdap/hpcdap/cdti"
)

// The thread lists of a stop, read together. Where one connection reaches many stopped ranks
// whose lists are to be read (the root's, through the tree; or one agent's, serving a node),
// the engine reads them with one collective ListThreads (GetThreadList's list without its
// fixed 8 KiB) instead of one Query a rank. The answer carries every rank's list (no two are
// alike: their LWPs differ), in as many messages as its size needs, not one a rank.
//
// The first time a rank's threads are named, the collective also reads the thread library's
// data that the first rank of its files read (labelPlan), for the others of the plan:
//   - where every rank of the collective has its modules at the same addresses (randomisation
//     off, as a launch has it by default), at those addresses (GetMemory);
//   - otherwise (ranks attached to a running job each have a layout of their own) relative
//     to the modules (GetModuleMemory), which each agent places in its rank's link map.
//
// Each rank keeps what was read where the front end's own module list puts it; a range its
// agent placed elsewhere is not kept, and the labelling reads it as before. The first rank of
// a plan reads by itself, its reads recorded for the others.

// refreshStale reads the thread lists of ranks, those stopped whose lists were not read at
// this stop (once per stop each, in parallel, bounded by ctx): those sharing a connection with
// as few collectives as their plans allow, the others one by one.
func (j *Job) refreshStale(ctx context.Context, ranks []*Rank) {
	var stale []*Rank
	j.mu.Lock()
	for _, r := range ranks {
		if r.state == RankStopped && r.threadsGen != r.gen {
			stale = append(stale, r)
		}
	}
	j.mu.Unlock()
	groups, single := j.collectiveGroups(stale)
	var wg sync.WaitGroup
	for _, g := range groups {
		for c := range slices.Chunk(g, maxThreadListCollective) {
			wg.Go(func() {
				defer j.recoverPanic(fmt.Sprintf("threads of %d ranks", len(c)))
				j.refreshThreadsCollective(ctx, c)
			})
		}
	}
	for _, r := range single {
		wg.Go(func() {
			defer j.recoverPanic(fmt.Sprintf("threads of rank %d", r.Num))
			j.refreshThreads(ctx, r)
		})
	}
	wg.Wait()
}

// maxThreadListCollective bounds the ranks of one collective that reads thread lists: each
// rank's answer to one list takes at most a frame (a list of up to 1,024 threads and the
// thread library's data), and one collective's answer must stay within what a client puts
// together (cdti's bound on a split answer's parts).
const maxThreadListCollective = 2048

// refreshThreadsCollective refreshes the thread lists of ranks (reached through one
// connection), as refreshThreads does for each, with as few collectives as their plans allow.
func (j *Job) refreshThreadsCollective(ctx context.Context, ranks []*Rank) {
	ts := make([]*threadRefresh, len(ranks))
	var wg sync.WaitGroup
	for i, r := range ranks {
		wg.Go(func() {
			defer j.recoverPanic(fmt.Sprintf("threads of rank %d", r.Num))
			ts[i] = j.beginRefresh(ctx, r)
		})
	}
	wg.Wait()
	alone := func(t *threadRefresh) {
		wg.Go(func() {
			defer j.recoverPanic(fmt.Sprintf("threads of rank %d", t.r.Num))
			j.readThreads(ctx, t)
		})
	}
	// The leaders read by themselves (the others of their plans wait for what they read), as
	// do ranks whose memory is not cached (stop mode thread) or not known (their symbols
	// failed to load). The others go by plan (nil: their threads are named already).
	parts := map[*labelPlan][]*threadRefresh{}
	var plans []*labelPlan
	for _, t := range ts {
		switch {
		case t == nil:
		case t.lead:
			alone(t)
		case t.plan != nil && (t.r.sym.ensure(ctx) != nil || t.r.sym.mem.live.Load()):
			alone(t)
		default:
			if _, seen := parts[t.plan]; !seen {
				plans = append(plans, t.plan)
			}
			parts[t.plan] = append(parts[t.plan], t)
		}
	}
	for _, p := range plans {
		part := parts[p]
		wg.Go(func() {
			defer j.recoverPanic(fmt.Sprintf("threads of %d ranks", len(part)))
			if p != nil {
				select {
				case <-p.ready:
				case <-ctx.Done():
					return // as the rank-by-rank path: no list read after the request's time
				}
			}
			if len(part) == 1 {
				j.readThreads(ctx, part[0])
			} else {
				j.readThreadsTogether(ctx, p, part)
			}
		})
	}
	wg.Wait()
}

// readThreadsTogether reads the thread lists of ts (ranks of one connection that follow plan,
// or, plan nil, whose threads are named already) with one collective, or as few as the plan's
// reads need, and ends each refresh. A rank whose list was not read reads by itself.
func (j *Job) readThreadsTogether(ctx context.Context, plan *labelPlan, ts []*threadRefresh) {
	ranks := make([]*Rank, len(ts))
	for i, t := range ts {
		ranks[i] = t.r
	}
	cmds, at := []cdti.Command{&cdti.ListThreads{}}, []int(nil)
	var placed [][]memSpan // each rank's ranges of plan, where its modules put them
	var epochs []int
	if plan != nil {
		same := true
		for _, t := range ts {
			placed = append(placed, plan.placed(t.mods))
			epochs = append(epochs, t.r.sym.mem.currentEpoch())
			same = same && slices.Equal(placed[0], placed[len(placed)-1])
		}
		if same {
			// One layout (randomisation off, as a launch has it): the agents read the
			// addresses as they are, with no module to look up.
			cmds, at = spanCommands(placed[0], cmds)
		} else {
			cmds, at = plan.commands(cmds...)
		}
	}
	res := j.collectiveResults(ctx, ranks, cmds)
	var wg sync.WaitGroup
	defer wg.Wait()
	for i, t := range ts {
		var list []cdti.ThreadEntry
		if rs := res[t.r]; rs != nil && rs[0].Code == cdti.CmdSuccess {
			if l, ok := rs[0].Ack.(*cdti.ListThreadsAck); ok {
				list = l.Threads
				if plan != nil {
					// Kept where each range lies in this rank, as the front end knows its
					// modules: a read the agent placed elsewhere is not kept.
					t.r.sym.mem.keep(epochs[i], placed[i], at, rs)
				}
			}
		}
		wg.Go(func() {
			defer j.recoverPanic(fmt.Sprintf("threads of rank %d", t.r.Num))
			if len(list) == 0 {
				j.readThreads(ctx, t)
			} else {
				j.endRefresh(ctx, t, list)
			}
		})
	}
}

// collectiveResults applies the Query commands cmds to ranks (reached through one connection)
// with the collectives that carry them (cdti.BatchCollective), side by side, and returns each
// rank's results in the order of cmds: a command whose collective failed for the rank has a
// result of CmdPrevCmdFail and no ack; a rank with no result at all is absent.
func (j *Job) collectiveResults(ctx context.Context, ranks []*Rank, cmds []cdti.Command) map[*Rank][]cdti.Result {
	lists, err := cdti.BatchCollective(cdti.MsgQuery, cmds)
	if err != nil {
		j.logf("collective of %d commands: %v", len(cmds), err)
		return nil
	}
	answers := make([]map[*Rank]rankAnswer, len(lists))
	var wg sync.WaitGroup
	for i, l := range lists {
		wg.Go(func() { answers[i], _ = j.collective(ctx, ranks, 0, l...) })
	}
	wg.Wait()
	out := make(map[*Rank][]cdti.Result, len(ranks))
	for _, r := range ranks {
		var rs []cdti.Result
		some := false
		for i, l := range lists {
			a, ok := answers[i][r]
			if ok && a.err == nil && len(a.res) == len(l) {
				rs, some = append(rs, a.res...), true
				continue
			}
			for range l {
				rs = append(rs, cdti.Result{Code: cdti.CmdPrevCmdFail})
			}
		}
		if some {
			out[r] = rs
		}
	}
	return out
}
