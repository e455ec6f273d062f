package cdti

import (
	"fmt"
	"slices"
	"sort"
)

// RankRange is an inclusive range of ranks, the unit of the rank sets a StackTree carries.
type RankRange struct{ Lo, Hi uint32 }

// RankRanges is a set of ranks as sorted, disjoint, non-adjacent ranges.
type RankRanges []RankRange

// Count returns the number of ranks in the set.
func (s RankRanges) Count() int {
	n := 0
	for _, r := range s {
		n += int(r.Hi-r.Lo) + 1
	}
	return n
}

// Ranks lists the ranks of the set in order.
func (s RankRanges) Ranks() []uint32 {
	out := make([]uint32, 0, s.Count())
	for _, r := range s {
		for x := uint64(r.Lo); x <= uint64(r.Hi); x++ {
			out = append(out, uint32(x))
		}
	}
	return out
}

// Union returns the union of s and o (neither is modified).
func (s RankRanges) Union(o RankRanges) RankRanges {
	all := make(RankRanges, 0, len(s)+len(o))
	all = append(append(all, s...), o...)
	return normalize(all)
}

// RanksOf returns the set holding ranks.
func RanksOf(ranks ...uint32) RankRanges {
	all := make(RankRanges, len(ranks))
	for i, r := range ranks {
		all[i] = RankRange{r, r}
	}
	return normalize(all)
}

func normalize(all RankRanges) RankRanges {
	if !slices.IsSortedFunc(all, func(a, b RankRange) int { return int64cmp(a.Lo, b.Lo) }) {
		sort.Slice(all, func(i, j int) bool { return all[i].Lo < all[j].Lo })
	}
	out := all[:0]
	for _, r := range all {
		if n := len(out); n > 0 && uint64(r.Lo) <= uint64(out[n-1].Hi)+1 {
			out[n-1].Hi = max(out[n-1].Hi, r.Hi)
			continue
		}
		out = append(out, r)
	}
	return out
}

func int64cmp(a, b uint32) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// StackNode is one frame of a merged stack tree: a pc (a call site, or the innermost pc at a
// leaf), the ranks whose stacks pass through it, and the frames called from it.
type StackNode struct {
	PC       uint64
	Ranks    RankRanges
	Children []*StackNode
}

// StackTree is the stacks of many ranks merged into a prefix tree from the outermost frame
// (STAT's model): ranks with the same stack share one path, so its size grows with the number
// of distinct stacks, not with the number of ranks. Unreachable names the ranks whose agent
// could not be reached; Ranks every rank that contributed a stack.
type StackTree struct {
	Roots       []*StackNode
	Ranks       RankRanges
	Unreachable RankRanges
}

// Add merges one rank's stack, its pcs innermost first (as GetTracebackAck gives them).
func (t *StackTree) Add(rank uint32, pcs []uint64) {
	one := RankRanges{{rank, rank}}
	t.Ranks = t.Ranks.Union(one)
	level := &t.Roots
	for i := len(pcs) - 1; i >= 0; i-- {
		n := child(level, pcs[i])
		n.Ranks = n.Ranks.Union(one)
		level = &n.Children
	}
}

// Merge merges o into t.
func (t *StackTree) Merge(o *StackTree) {
	t.Ranks = t.Ranks.Union(o.Ranks)
	t.Unreachable = t.Unreachable.Union(o.Unreachable)
	mergeLevel(&t.Roots, o.Roots)
}

func mergeLevel(level *[]*StackNode, from []*StackNode) {
	for _, f := range from {
		n := child(level, f.PC)
		n.Ranks = n.Ranks.Union(f.Ranks)
		mergeLevel(&n.Children, f.Children)
	}
}

// child finds or adds the node of pc in level.
func child(level *[]*StackNode, pc uint64) *StackNode {
	for _, n := range *level {
		if n.PC == pc {
			return n
		}
	}
	n := &StackNode{PC: pc}
	*level = append(*level, n)
	return n
}

// Nodes returns the number of nodes of the tree.
func (t *StackTree) Nodes() int {
	var count func([]*StackNode) int
	count = func(l []*StackNode) int {
		n := len(l)
		for _, c := range l {
			n += count(c.Children)
		}
		return n
	}
	return count(t.Roots)
}

// Paths returns, for every rank of the tree, its stack innermost first, as Add was given it:
// the inverse of Add, for checking a merge against each rank's own stack.
func (t *StackTree) Paths() map[uint32][]uint64 {
	out := make(map[uint32][]uint64)
	var walk func(l []*StackNode, outer []uint64)
	walk = func(l []*StackNode, outer []uint64) {
		for _, n := range l {
			path := append(slices.Clip(outer), n.PC)
			// A rank ends here when no child holds it.
			ends := n.Ranks
			for _, c := range n.Children {
				ends = ends.minus(c.Ranks)
			}
			for _, r := range ends.Ranks() {
				p := slices.Clone(path)
				slices.Reverse(p)
				out[r] = p
			}
			walk(n.Children, path)
		}
	}
	walk(t.Roots, nil)
	return out
}

// minus returns s without the ranks of o.
func (s RankRanges) minus(o RankRanges) RankRanges {
	var out RankRanges
	for _, r := range s {
		lo := uint64(r.Lo)
		for _, x := range o {
			if uint64(x.Hi) < lo || x.Lo > r.Hi {
				continue
			}
			if uint64(x.Lo) > lo {
				out = append(out, RankRange{uint32(lo), x.Lo - 1})
			}
			lo = uint64(x.Hi) + 1
		}
		if lo <= uint64(r.Hi) {
			out = append(out, RankRange{uint32(lo), r.Hi})
		}
	}
	return out
}

// GatherStacks (extension message 5102) asks an agent for the merged main-thread stacks of
// every stopped rank it serves and, through a Router, of every agent below it.
type GatherStacks struct {
	Header
	MaxFrames uint32 // 0: MaxStackFrames
}

// GatherStacksAck (5103) answers GatherStacks with the merged tree.
type GatherStacksAck struct {
	Header
	Tree StackTree
}

func (m *GatherStacks) MessageType() MessageType         { return MsgGatherStacks }
func (m *GatherStacks) encodedSize(bool) (int, error)    { return 48, nil }
func (m *GatherStacks) encodeBody(b []byte)              { be.PutUint32(b[40:], m.MaxFrames) }
func (m *GatherStacksAck) MessageType() MessageType      { return MsgGatherStacksAck }
func (m *GatherStacksAck) encodedSize(bool) (int, error) { return m.size(), nil }

// size is the encoded size: @40 contributing range count u32, unreachable range count u32,
// node count u32, pad u32; the ranges (lo u32, hi u32), contributing then unreachable; then
// the nodes in preorder, each pc u64, child count u32, range count u32 and its ranges.
func (m *GatherStacksAck) size() int {
	n := 56 + 8*(len(m.Tree.Ranks)+len(m.Tree.Unreachable))
	var walk func([]*StackNode)
	walk = func(l []*StackNode) {
		for _, x := range l {
			n += 16 + 8*len(x.Ranks)
			walk(x.Children)
		}
	}
	walk(m.Tree.Roots)
	return n
}

func (m *GatherStacksAck) encodeBody(b []byte) {
	t := &m.Tree
	be.PutUint32(b[40:], uint32(len(t.Ranks)))
	be.PutUint32(b[44:], uint32(len(t.Unreachable)))
	be.PutUint32(b[48:], uint32(len(t.Roots)))
	at := 56
	putRanges := func(rs RankRanges) {
		for _, r := range rs {
			be.PutUint32(b[at:], r.Lo)
			be.PutUint32(b[at+4:], r.Hi)
			at += 8
		}
	}
	putRanges(t.Ranks)
	putRanges(t.Unreachable)
	var walk func([]*StackNode)
	walk = func(l []*StackNode) {
		for _, x := range l {
			be.PutUint64(b[at:], x.PC)
			be.PutUint32(b[at+8:], uint32(len(x.Children)))
			be.PutUint32(b[at+12:], uint32(len(x.Ranks)))
			at += 16
			putRanges(x.Ranks)
			walk(x.Children)
		}
	}
	walk(t.Roots)
}

func decGatherStacks(h Header, b []byte) (Message, error) {
	if err := needMsg(h, b, 48); err != nil {
		return nil, err
	}
	return &GatherStacks{Header: h, MaxFrames: be.Uint32(b[40:])}, nil
}

func decGatherStacksAck(h Header, b []byte) (Message, error) {
	if h.ReturnCode != Success && len(b) < 56 {
		return &GatherStacksAck{Header: h}, nil
	}
	if err := needMsg(h, b, 56); err != nil {
		return nil, err
	}
	at := 56
	bad := func(what string) error {
		return malformed(h.Type, "%s at %d in a %d-byte message", what, at, len(b))
	}
	ranges := func(n uint32) (RankRanges, error) {
		if uint64(n)*8 > uint64(len(b)-at) {
			return nil, bad(fmt.Sprintf("%d rank ranges", n))
		}
		out := make(RankRanges, n)
		for i := range out {
			out[i] = RankRange{be.Uint32(b[at:]), be.Uint32(b[at+4:])}
			if out[i].Lo > out[i].Hi || (i > 0 && uint64(out[i-1].Hi)+1 >= uint64(out[i].Lo)) {
				return nil, bad("unsorted rank ranges")
			}
			at += 8
		}
		return out, nil
	}
	m := &GatherStacksAck{Header: h}
	var err error
	if m.Tree.Ranks, err = ranges(be.Uint32(b[40:])); err != nil {
		return nil, err
	}
	if m.Tree.Unreachable, err = ranges(be.Uint32(b[44:])); err != nil {
		return nil, err
	}
	var level func(n uint32, depth int) ([]*StackNode, error)
	level = func(n uint32, depth int) ([]*StackNode, error) {
		if depth > 4*MaxStackFrames {
			return nil, bad("a tree deeper than the frame limit")
		}
		var out []*StackNode
		for range n {
			if len(b)-at < 16 {
				return nil, bad("a truncated node")
			}
			x := &StackNode{PC: be.Uint64(b[at:])}
			kids, nr := be.Uint32(b[at+8:]), be.Uint32(b[at+12:])
			at += 16
			var err error
			if x.Ranks, err = ranges(nr); err != nil {
				return nil, err
			}
			if x.Children, err = level(kids, depth+1); err != nil {
				return nil, err
			}
			out = append(out, x)
		}
		return out, nil
	}
	if m.Tree.Roots, err = level(be.Uint32(b[48:]), 0); err != nil {
		return nil, err
	}
	if at != len(b) {
		return nil, bad("trailing bytes")
	}
	return m, nil
}
