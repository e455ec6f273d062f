package adapter

import (
	"context"
	"slices"
	"sort"
	"strings"

	"github.com/hpcdap/hpcdap/debugger"
	"github.com/hpcdap/hpcdap/rankset"
)

// The requests over many ranks: hpcdap/parallelStacks (the job collects the stacks, the
// session merges them into a tree) and hpcdap/compareExpression (the job evaluates in each
// rank, the session groups the ranks by value).

func (s *Conn) onParallelStacksRequest(req *ParallelStacksRequest) {
	j := s.currentJob(&req.Request)
	if j == nil {
		return
	}
	set, err := j.RanksArg(req.Arguments.Ranks)
	if err != nil {
		s.sendError(&req.Request, errBadArguments, "hpcdap/parallelStacks: "+err.Error())
		return
	}
	if req.Arguments.MaxFrames < 0 {
		s.sendError(&req.Request, errBadArguments, "hpcdap/parallelStacks: maxFrames must not be negative")
		return
	}
	ctx, cancel := context.WithTimeout(s.ctx, debugger.DefaultTimeout)
	defer cancel()
	stacks := j.CollectStacks(ctx, set)
	body := s.mergeStacks(stacks, req.Arguments.MaxFrames, req.Arguments.ByFunction)
	s.respond(&req.Request, body)
}

// mergeStacks builds the session's tree: files named as stackTrace names them.
func (s *Conn) mergeStacks(stacks []*debugger.RankStack, maxFrames int, byFunction bool) ParallelStacksBody {
	return MergeStacks(stacks, MergeOptions{MaxFrames: maxFrames, ByFunction: byFunction, Source: func(file string) *StackSource {
		src := s.sources.source(file)
		if src.Path == "" {
			return nil // as stackTrace shows it: the line only of a local file
		}
		return &StackSource{Name: src.Name, Path: src.Path}
	}, Line: s.lineOut})
}

// MergeOptions shape MergeStacks's tree.
type MergeOptions struct {
	MaxFrames  int  // frames kept per stack from the innermost (0: all)
	ByFunction bool // one node per function whatever the line
	// Source names a frame's file for the client, or nil when it is not shown (the frame
	// then carries no line either). A nil Source shows no file.
	Source func(file string) *StackSource
	// Line converts a line for the client (nil: as the debug information gives it).
	Line func(int) int
}

// MergeStacks builds the prefix tree of stacks: outermost frame first, one node per
// distinct frame after the same path (per function, whatever the line, with ByFunction),
// siblings ordered by their lowest rank, ids in depth-first order. A node's Ranks is the set
// of ranks of the stacks through it, its Count the number of those stacks: one per rank
// when stacks holds one stack per rank, more when it holds several threads of a rank or
// several samples of it. Total is the number of stacks.
func MergeStacks(stacks []*debugger.RankStack, o MergeOptions) ParallelStacksBody {
	type building struct {
		node     *StackNode
		set      rankset.Set
		count    int
		children map[debugger.TreeFrame]*building
		order    []*building
	}
	root := &building{children: map[debugger.TreeFrame]*building{}}
	total := 0
	stacks = slices.Clone(stacks)
	sort.SliceStable(stacks, func(a, b int) bool { return stacks[a].Rank.Num < stacks[b].Rank.Num })
	for _, st := range stacks {
		frames := st.Frames
		if len(frames) == 0 { // an error without frames (a rank behind a lost agent has one)
			frames = []debugger.TreeFrame{{Name: "<stack unavailable>"}}
		}
		if o.MaxFrames > 0 && len(frames) > o.MaxFrames {
			frames = frames[:o.MaxFrames]
		}
		total++
		level := root
		for i := len(frames) - 1; i >= 0; i-- {
			f := frames[i]
			var src *StackSource
			if f.File != "" && o.Source != nil {
				src = o.Source(f.File)
			}
			if src == nil {
				f.File, f.Line = "", 0
			}
			key := f
			if o.ByFunction {
				key.Line = 0
			}
			b := level.children[key]
			if b == nil {
				n := &StackNode{Name: f.Name, FrameLevel: i, Children: []*StackNode{}}
				if st.Thread != nil {
					n.ThreadID = st.Thread.ID
				}
				if src != nil {
					n.Source = src
					n.Line = f.Line
					if o.Line != nil {
						n.Line = o.Line(f.Line)
					}
				}
				b = &building{node: n, children: map[debugger.TreeFrame]*building{}}
				level.children[key] = b
				level.order = append(level.order, b)
			}
			b.set = b.set.Add(st.Rank.Num)
			b.count++
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
			c.node.Count = c.count
			c.node.Children = build(c)
			out = append(out, c.node)
		}
		return out
	}
	return ParallelStacksBody{Total: total, Roots: build(root)}
}

func (s *Conn) onCompareExpressionRequest(req *CompareExpressionRequest) {
	j := s.currentJob(&req.Request)
	if j == nil {
		return
	}
	a := req.Arguments
	expr := strings.TrimSpace(a.Expression)
	if expr == "" {
		s.sendError(&req.Request, errBadArguments, "hpcdap/compareExpression: empty expression")
		return
	}
	if a.FrameLevel != nil && *a.FrameLevel < 0 {
		s.sendError(&req.Request, errBadArguments, "hpcdap/compareExpression: frameLevel must not be negative")
		return
	}
	set, err := j.RanksArg(a.Ranks)
	if err != nil {
		s.sendError(&req.Request, errBadArguments, "hpcdap/compareExpression: "+err.Error())
		return
	}
	ctx, cancel := context.WithTimeout(s.ctx, debugger.DefaultTimeout)
	defer cancel()
	ranks := j.RanksIn(set)
	vals := j.Compare(ctx, ranks, expr, a.FrameLevel)
	for _, v := range vals {
		if v.Called != nil {
			s.invalidateAfterWrite(j, v.Called) // a function ran there
		}
	}
	body := CompareBody{Groups: []CompareGroup{}, Errors: []CompareError{}}
	byValue := map[string]rankset.Set{}
	byErr := map[string]rankset.Set{}
	for i, r := range ranks {
		if v := vals[i]; v.Err != nil {
			byErr[v.Err.Error()] = byErr[v.Err.Error()].Add(r.Num)
		} else {
			byValue[v.Value] = byValue[v.Value].Add(r.Num)
		}
	}
	for v, rs := range byValue {
		body.Groups = append(body.Groups, CompareGroup{Value: v, Ranks: rs.String(), Count: rs.Len()})
	}
	for m, rs := range byErr {
		body.Errors = append(body.Errors, CompareError{Message: m, Ranks: rs.String()})
	}
	// The largest group first, then by lowest rank: the odd ones out stand out.
	sort.Slice(body.Groups, func(x, y int) bool {
		gx, gy := body.Groups[x], body.Groups[y]
		if gx.Count != gy.Count {
			return gx.Count > gy.Count
		}
		return byValue[gx.Value].Min() < byValue[gy.Value].Min()
	})
	sort.Slice(body.Errors, func(x, y int) bool {
		return byErr[body.Errors[x].Message].Min() < byErr[body.Errors[y].Message].Min()
	})
	s.respond(&req.Request, body)
}
