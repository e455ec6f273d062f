package debugger

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"

	"github.com/hpcdap/hpcdap/cdti"
	"github.com/hpcdap/hpcdap/rankset"
	"github.com/hpcdap/hpcdap/symbols"
)

// Parallel stacks, as STAT draws them: every stopped rank's main-thread stack, merged into a
// prefix tree from the outermost frame, with the set of ranks at each node.
//
// The bulk of the work scales with the number of ranks and is done by the agents: one
// GetTraceback per rank returns its frames' pcs, walked next to the process. Ranks whose
// tracebacks are identical form a group; the front end unwinds one representative of each
// group exactly (CFI, inlined calls, names and lines through package symbols) and, when that
// unwind confirms the agent's walk (same pcs: no frame was hidden from the frame-pointer
// walk), gives the same frames to the whole group. Otherwise every rank of the group is
// unwound exactly. Frames therefore always agree with stackTrace.

// TreeFrame is a frame as the tree merges it (the identity the client keys nodes on). Its
// file is the one the debug information names; the tree shows only files on this machine.
type TreeFrame struct {
	Name string
	File string
	Line int
}

// RankStack is one rank's frames, innermost first.
type RankStack struct {
	Rank   *Rank
	Thread *Thread
	Frames []TreeFrame
	Err    error
}

// parallelism bounds the ranks worked on at once.
const parallelism = 64

// CollectStacks returns the stacks of the stopped ranks of set, by rank.
func (j *Job) CollectStacks(ctx context.Context, set rankset.Set) []*RankStack {
	j.mu.Lock()
	var out []*RankStack
	for _, r := range j.ranksInLocked(set) {
		if r.state != RankStopped {
			continue
		}
		if t := r.mainThread(); t != nil {
			out = append(out, &RankStack{Rank: r, Thread: t})
		}
	}
	j.mu.Unlock()
	j.unwindStacks(ctx, out)
	return out
}

// CollectThreadStacks returns the stacks of every thread of the stopped ranks of set, by
// rank, leader thread first.
func (j *Job) CollectThreadStacks(ctx context.Context, set rankset.Set) []*RankStack {
	j.mu.Lock()
	var stopped []*Rank
	for _, r := range j.ranksInLocked(set) {
		if r.state == RankStopped {
			stopped = append(stopped, r)
		}
	}
	j.mu.Unlock()
	j.refreshStale(ctx, stopped)
	var out []*RankStack
	j.mu.Lock()
	for _, r := range stopped {
		for _, t := range r.threads {
			out = append(out, &RankStack{Rank: r, Thread: t})
		}
	}
	j.mu.Unlock()
	j.unwindStacks(ctx, out)
	return out
}

// unwindStacks fills in the frames of stacks.
func (j *Job) unwindStacks(ctx context.Context, out []*RankStack) {
	if len(out) == 0 {
		return
	}
	// 1. Agent tracebacks, in parallel over all ranks (pipelined on each node's connection).
	// With the agent tree, the main threads' tracebacks come merged from one collective.
	sigs := make([]string, len(out))
	tbs := make([][]cdti.TraceFrame, len(out))
	done := j.fromTree(ctx, out, tbs)
	ForEach(len(out), func(i int) {
		rs := out[i]
		if done[i] {
			return
		}
		tb := tbs[i]
		if tb == nil {
			var err error
			if tb, err = j.back.traceback(ctx, rs.Rank, rs.Thread.LWP); err != nil {
				sigs[i] = fmt.Sprintf("error %d", i) // a group of its own: unwound exactly
				return
			}
			tbs[i] = tb
		}
		var b strings.Builder
		for _, f := range tb {
			fmt.Fprintf(&b, "%x/", f.PC)
		}
		sigs[i] = b.String()
	})
	// 2. Group by traceback; unwind one representative of each group exactly.
	groups := map[string][]int{}
	var keys []string
	for i, sg := range sigs {
		if done[i] {
			continue
		}
		if _, ok := groups[sg]; !ok {
			keys = append(keys, sg)
		}
		groups[sg] = append(groups[sg], i)
	}
	var exactMu sync.Mutex
	var exact []int // ranks that need their own exact unwind
	ForEach(len(keys), func(k int) {
		idx := groups[keys[k]]
		rep := out[idx[0]]
		frames, phys, err := j.exactStack(ctx, rep)
		rep.Frames, rep.Err = frames, err
		confirmed := err == nil && tbs[idx[0]] != nil && tracebackConfirms(tbs[idx[0]], phys)
		for _, i := range idx[1:] {
			if confirmed {
				out[i].Frames = frames
			} else {
				exactMu.Lock()
				exact = append(exact, i)
				exactMu.Unlock()
			}
		}
	})
	ForEach(len(exact), func(k int) {
		rs := out[exact[k]]
		rs.Frames, _, rs.Err = j.exactStack(ctx, rs)
	})
}

// ForEach runs f(0…n-1) with bounded parallelism.
func ForEach(n int, f func(i int)) {
	sem := make(chan struct{}, parallelism)
	var wg sync.WaitGroup
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			f(i)
		})
	}
	wg.Wait()
}

// exactStack unwinds a rank's thread through package symbols (the same frames stackTrace
// shows) and returns its tree frames and the pcs of its physical frames.
func (j *Job) exactStack(ctx context.Context, rs *RankStack) ([]TreeFrame, []uint64, error) {
	ts, err := rs.Rank.sym.stack(ctx, rs.Thread.LWP)
	if err != nil {
		return nil, nil, err
	}
	frames := make([]TreeFrame, 0, len(ts.Frames))
	var phys []uint64
	for _, f := range ts.Frames {
		tf := TreeFrame{Name: treeName(f)}
		if f.HasLine && f.Line.File != "" {
			tf.File, tf.Line = f.Line.File, f.Line.Line
		}
		frames = append(frames, tf)
		if f.Kind == symbols.FrameNormal || f.Kind == symbols.FrameSignal {
			phys = append(phys, f.PC)
		}
	}
	return frames, phys, nil
}

// tracebackConfirms reports whether an agent traceback holds exactly the physical frames of
// an exact unwind (which stops at main, so the traceback may go on beyond it).
func tracebackConfirms(tb []cdti.TraceFrame, phys []uint64) bool {
	if len(phys) == 0 || len(tb) < len(phys) {
		return false
	}
	for i, pc := range phys {
		if tb[i].PC != pc {
			return false
		}
	}
	return true
}

// treeName is the frame's name in the tree: FrameName, except that a frame in no known
// function is named by its module and link-time address ("?? (libfoo.so.1+0x1234)"), the
// same in every rank whatever the load address, so that such frames still merge.
func treeName(f *symbols.Frame) string {
	if f.Name == "" && f.Kind != symbols.FrameSignal && f.Module != nil {
		return fmt.Sprintf("?? (%s+%#x)", filepath.Base(f.Module.Path), f.PC-f.Module.Bias)
	}
	return FrameName(f)
}

// FrameName is the frame's function as gdb names it, or "??" with the address.
func FrameName(f *symbols.Frame) string {
	switch {
	case f.Kind == symbols.FrameSignal:
		return "<signal handler called>"
	case f.Name != "":
		return f.Name
	}
	return fmt.Sprintf("?? (%#x)", f.PC)
}
