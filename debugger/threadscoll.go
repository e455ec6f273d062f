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
	// The leaders first: the others of their layouts wait for what they read.
	var followers []*threadRefresh
	for _, t := range ts {
		switch {
		case t == nil:
		case t.lead:
			wg.Go(func() {
				defer j.recoverPanic(fmt.Sprintf("threads of rank %d", t.r.Num))
				j.readThreads(ctx, t)
			})
		default:
			followers = append(followers, t)
		}
	}
	// The others by plan (nil: their threads are named already): one collective each.
	parts := map[*labelPlan][]*threadRefresh{}
	var plans []*labelPlan
	for _, t := range followers {
		if t.plan != nil {
			if t.r.sym.mem.live.Load() {
				wg.Go(func() { // nothing is cached: it reads by itself
					defer j.recoverPanic(fmt.Sprintf("threads of rank %d", t.r.Num))
					j.readThreads(ctx, t)
				})
				continue
			}
			select {
			case <-t.plan.ready:
			case <-ctx.Done():
				return
			}
		}
		if _, seen := parts[t.plan]; !seen {
			plans = append(plans, t.plan)
		}
		parts[t.plan] = append(parts[t.plan], t)
	}
	for _, p := range plans {
		part := parts[p]
		if len(part) == 1 {
			wg.Go(func() {
				defer j.recoverPanic(fmt.Sprintf("threads of rank %d", part[0].r.Num))
				j.readThreads(ctx, part[0])
			})
			continue
		}
		wg.Go(func() {
			defer j.recoverPanic(fmt.Sprintf("threads of %d ranks", len(part)))
			j.readThreadsTogether(ctx, p, part)
		})
	}
	wg.Wait()
}

// readThreadsTogether reads the thread lists of ts (ranks of one connection that follow plan,
// or, plan nil, whose threads are named already) with one collective, with plan's memory
// relative to its modules, and ends each refresh. A rank whose part failed reads by itself.
func (j *Job) readThreadsTogether(ctx context.Context, plan *labelPlan, ts []*threadRefresh) {
	ranks := make([]*Rank, len(ts))
	epochs := make([]int, len(ts))
	for i, t := range ts {
		ranks[i] = t.r
		epochs[i] = t.r.sym.mem.currentEpoch()
	}
	cmds, at := []cdti.Command{&cdti.ListThreads{}}, []int(nil)
	var placed [][]memSpan // each rank's ranges of plan, where its modules put them
	if plan != nil {
		same := true
		for _, t := range ts {
			placed = append(placed, plan.placed(t.mods))
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
	out, err := j.collective(ctx, ranks, 0, cmds...)
	var wg sync.WaitGroup
	defer wg.Wait()
	for i, t := range ts {
		var list []cdti.ThreadEntry
		if err == nil {
			if a := out[t.r]; a.err == nil && len(a.res) == len(cmds) && a.res[0].Code == cdti.CmdSuccess {
				if l, ok := a.res[0].Ack.(*cdti.ListThreadsAck); ok {
					list = l.Threads
					if plan != nil {
						// Kept where each range lies in this rank, as the front end knows
						// its modules: a read the agent placed elsewhere is not kept.
						t.r.sym.mem.keep(epochs[i], placed[i], at, a.res)
					}
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
