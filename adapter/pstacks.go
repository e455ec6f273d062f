package adapter

import (
	"context"
	"fmt"
	"sort"
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

// treeFrame is a frame as the tree merges it (the identity the client keys nodes on).
type treeFrame struct {
	name string
	file string
	line int
}

// rankStack is one rank's frames, innermost first.
type rankStack struct {
	rank   *Rank
	thread *Thread
	frames []treeFrame
	err    error
}

// parallelism bounds the ranks worked on at once.
const parallelism = 64

func (s *Session) onParallelStacksRequest(req *ParallelStacksRequest) {
	j := s.currentJob(&req.Request)
	if j == nil {
		return
	}
	set, err := j.ranksArg(req.Arguments.Ranks)
	if err != nil {
		s.sendError(&req.Request, errBadArguments, "hpcdap/parallelStacks: "+err.Error())
		return
	}
	if req.Arguments.MaxFrames < 0 {
		s.sendError(&req.Request, errBadArguments, "hpcdap/parallelStacks: maxFrames must not be negative")
		return
	}
	ctx, cancel := context.WithTimeout(s.ctx, defaultTimeout)
	defer cancel()
	stacks := j.collectStacks(ctx, set)
	body := s.mergeStacks(stacks, req.Arguments.MaxFrames, req.Arguments.ByFunction)
	s.respond(&req.Request, body)
}

// collectStacks returns the stacks of the stopped ranks of set, by rank.
func (j *Job) collectStacks(ctx context.Context, set rankset.Set) []*rankStack {
	j.mu.Lock()
	var out []*rankStack
	for _, r := range j.ranksInLocked(set) {
		if r.state != rankStopped {
			continue
		}
		if t := r.mainThread(); t != nil {
			out = append(out, &rankStack{rank: r, thread: t})
		}
	}
	j.mu.Unlock()
	if len(out) == 0 {
		return nil
	}
	// 1. Agent tracebacks, in parallel over all ranks (pipelined on each node's connection).
	sigs := make([]string, len(out))
	tbs := make([][]cdti.TraceFrame, len(out))
	if j.core == nil {
		forEach(len(out), func(i int) {
			rs := out[i]
			tb, err := rs.rank.node.client.Traceback(ctx, uint32(rs.rank.Num), uint32(rs.thread.LWP), 0)
			if err != nil {
				sigs[i] = fmt.Sprintf("error %d", i) // a group of its own: unwound exactly
				return
			}
			tbs[i] = tb
			var b strings.Builder
			for _, f := range tb {
				fmt.Fprintf(&b, "%x/", f.PC)
			}
			sigs[i] = b.String()
		})
	} else {
		for i := range out {
			sigs[i] = fmt.Sprint(i)
		}
	}
	// 2. Group by traceback; unwind one representative of each group exactly.
	groups := map[string][]int{}
	var keys []string
	for i, sg := range sigs {
		if _, ok := groups[sg]; !ok {
			keys = append(keys, sg)
		}
		groups[sg] = append(groups[sg], i)
	}
	var exactMu sync.Mutex
	var exact []int // ranks that need their own exact unwind
	forEach(len(keys), func(k int) {
		idx := groups[keys[k]]
		rep := out[idx[0]]
		frames, phys, err := j.exactStack(ctx, rep)
		rep.frames, rep.err = frames, err
		confirmed := err == nil && tbs[idx[0]] != nil && tracebackConfirms(tbs[idx[0]], phys)
		for _, i := range idx[1:] {
			if confirmed {
				out[i].frames = frames
			} else {
				exactMu.Lock()
				exact = append(exact, i)
				exactMu.Unlock()
			}
		}
	})
	forEach(len(exact), func(k int) {
		rs := out[exact[k]]
		rs.frames, _, rs.err = j.exactStack(ctx, rs)
	})
	return out
}

// forEach runs f(0…n-1) with bounded parallelism.
func forEach(n int, f func(i int)) {
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
func (j *Job) exactStack(ctx context.Context, rs *rankStack) ([]treeFrame, []uint64, error) {
	ts, err := rs.rank.sym.stack(ctx, rs.thread.LWP)
	if err != nil {
		return nil, nil, err
	}
	frames := make([]treeFrame, 0, len(ts.frames))
	var phys []uint64
	for _, f := range ts.frames {
		tf := treeFrame{name: frameName(f)}
		if j.s.localSource(f) != nil { // as stackTrace shows it
			tf.file, tf.line = f.Line.File, f.Line.Line
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

// mergeStacks builds the prefix tree: outermost frame first, one node per distinct frame
// after the same path (per function, whatever the line, with byFunction), siblings ordered by
// their lowest rank, ids in depth-first order.
func (s *Session) mergeStacks(stacks []*rankStack, maxFrames int, byFunction bool) ParallelStacksBody {
	type building struct {
		node     *StackNode
		set      rankset.Set
		children map[treeFrame]*building
		order    []*building
	}
	root := &building{children: map[treeFrame]*building{}}
	total := 0
	sort.Slice(stacks, func(a, b int) bool { return stacks[a].rank.Num < stacks[b].rank.Num })
	for _, st := range stacks {
		frames := st.frames
		if st.err != nil || len(frames) == 0 {
			frames = []treeFrame{{name: "<stack unavailable>"}}
		}
		if maxFrames > 0 && len(frames) > maxFrames {
			frames = frames[:maxFrames]
		}
		total++
		level := root
		for i := len(frames) - 1; i >= 0; i-- {
			f := frames[i]
			key := f
			if byFunction {
				key.line = 0
			}
			b := level.children[key]
			if b == nil {
				n := &StackNode{Name: f.name, ThreadID: st.thread.ID, FrameLevel: i, Children: []*StackNode{}}
				if f.file != "" {
					src := s.sources.source(f.file) // as stackTrace names it
					n.Source = &StackSource{Name: src.Name, Path: src.Path}
					n.Line = s.lineOut(f.line)
				}
				b = &building{node: n, children: map[treeFrame]*building{}}
				level.children[key] = b
				level.order = append(level.order, b)
			}
			b.set = b.set.Add(st.rank.Num)
			level = b
		}
	}
	next := 0
	var build func(b *building) []*StackNode
	build = func(b *building) []*StackNode {
		out := []*StackNode{}
		for _, c := range b.order { // insertion order is lowest-rank order (stacks sorted)
			next++
			c.node.ID = next
			c.node.Ranks = c.set.String()
			c.node.Count = c.set.Len()
			c.node.Children = build(c)
			out = append(out, c.node)
		}
		return out
	}
	return ParallelStacksBody{Total: total, Roots: build(root)}
}
