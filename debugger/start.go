package debugger

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hpcdap/hpcdap/cdti"
)

// Start takes control of every rank: attach to each agent's ranks, ask for control with
// SIGSTOP as the start signal, and wait until every rank has stopped (at its program's entry
// point in spawn mode, wherever it runs in attach mode).
func (j *Job) Start(ctx context.Context, progress func(done, total int)) error {
	for _, g := range j.clientGroups() {
		go j.readNotifications(g)
	}
	// One wait for lower-priority holders to give control up, for every rank of the start.
	waitCtx, cancelWait := context.WithTimeout(ctx, controlWait)
	defer cancelWait()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failed []string // "rank 5 on node2: why", in no particular order
	attached := 0
	for _, n := range j.nodes {
		for _, kernel := range n.kernels() {
			wg.Go(func() {
				_, err := n.client.Attach(ctx, uint32(kernel[0].Num), n.kernelSelect(kernel), cdti.NewTag(toolTag), j.priority)
				if err != nil {
					mu.Lock()
					failed = append(failed, fmt.Sprintf("ranks %s on %s: attach: %v", rankList(kernel), n.host, attachError(err, j.priority)))
					mu.Unlock()
					return
				}
				// A node's ranks at once: each Control waits for its process to stop.
				ForEach(len(kernel), func(i int) {
					r := kernel[i]
					err := j.takeControl(ctx, waitCtx, r, startControl())
					mu.Lock()
					if err != nil {
						failed = append(failed, fmt.Sprintf("rank %d on %s: take control: %v", r.Num, n.host, err))
					} else {
						attached++
					}
					mu.Unlock()
				})
			})
		}
	}
	wg.Wait()
	if len(failed) > 0 {
		sort.Strings(failed)
		return fmt.Errorf("%d of %d ranks attached; %s", attached, len(j.ranks), strings.Join(failed, "; "))
	}
	return j.awaitFirstStops(ctx, progress)
}

// awaitFirstStops waits until every rank has reported its first stop; a rank that does not
// within the time limit is named.
func (j *Job) awaitFirstStops(ctx context.Context, progress func(done, total int)) error {
	// Every rank reports its first stop; a rank that does not within the time limit is named.
	limit := time.NewTimer(startTimeout)
	defer limit.Stop()
	done := 0
	for i, r := range j.ranks {
		select {
		case <-r.started:
		case <-limit.C:
			return fmt.Errorf("%d of %d ranks stopped for the debugger within %v; not: %s", done, len(j.ranks),
				startTimeout, rankList(j.lateRanks(j.ranks[i:])))
		case <-ctx.Done():
			return fmt.Errorf("%d of %d ranks stopped for the debugger; not: %s: %w", done, len(j.ranks),
				rankList(j.lateRanks(j.ranks[i:])), ctx.Err())
		}
		done++
		if progress != nil {
			progress(done, len(j.ranks))
		}
	}
	return nil
}

// startTimeout bounds the wait for the ranks' first stop after taking control.
const startTimeout = 2 * time.Minute

// lateRanks returns those of ranks that have not reported their first stop.
func (j *Job) lateRanks(ranks []*Rank) []*Rank {
	var late []*Rank
	for _, r := range ranks {
		select {
		case <-r.started:
		default:
			late = append(late, r)
		}
	}
	return late
}

// rankList names ranks with their hosts for messages: "5 (node2), 7 (node2)", shortened
// after a few.
func rankList(ranks []*Rank) string {
	var parts []string
	for i, r := range ranks {
		if i == 8 {
			parts = append(parts, fmt.Sprintf("and %d more", len(ranks)-i))
			break
		}
		host := ""
		if r.node != nil {
			host = " (" + r.node.host + ")"
		}
		parts = append(parts, fmt.Sprintf("%d%s", r.Num, host))
	}
	return strings.Join(parts, ", ")
}

// LoadSymbols reads each live rank's modules (the DWARF of each distinct binary once,
// through the cache) and starts watching library loads where breakpoints wait for one. It
// returns the first rank's error; the other ranks are read all the same.
func (j *Job) LoadSymbols(ctx context.Context) error {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for _, r := range j.liveRanks() {
		wg.Go(func() {
			defer j.recoverPanic(fmt.Sprintf("symbols of rank %d", r.Num))
			if e := r.sym.ensure(ctx); e != nil {
				mu.Lock()
				if firstErr == nil {
					firstErr = e
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	j.updateLibraryWatch(ctx, j.liveRanks())
	return firstErr
}
