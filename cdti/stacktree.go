package cdti

import (
	"fmt"
	"slices"
	"sort"
)

// RankRange is an inclusive range of ranks with a stride: Lo, Lo+Stride, …, Hi. Stride is
// at least 1 and divides Hi−Lo; a single rank has Lo = Hi and Stride 1.
type RankRange struct{ Lo, Hi, Stride uint32 }

// RankRanges is a set of ranks as strided ranges sorted by Lo whose spans [Lo, Hi] do not
// overlap, the form the MPIR subset notation prints (0-62:2): the ranks of one stack in a job
// are mostly runs and evenly spaced ranks, so the size of a set follows its shape, not its
// number of ranks. Two sets with the same ranks may be split differently: compare with Equal.
type RankRanges []RankRange

// Count returns the number of ranks in the set.
func (s RankRanges) Count() int {
	n := 0
	for _, r := range s {
		n += int((r.Hi-r.Lo)/r.Stride) + 1
	}
	return n
}

// Ranks lists the ranks of the set in order.
func (s RankRanges) Ranks() []uint32 {
	out := make([]uint32, 0, s.Count())
	for _, r := range s {
		for x := uint64(r.Lo); x <= uint64(r.Hi); x += uint64(r.Stride) {
			out = append(out, uint32(x))
		}
	}
	return out
}

// Equal reports whether s and o hold the same ranks.
func (s RankRanges) Equal(o RankRanges) bool { return slices.Equal(s.Ranks(), o.Ranks()) }

// Union returns the union of s and o (neither is modified). Sets whose spans do not overlap,
// as those of different agents, are merged without listing their ranks.
func (s RankRanges) Union(o RankRanges) RankRanges {
	all := make(RankRanges, 0, len(s)+len(o))
	all = append(append(all, s...), o...)
	sort.Slice(all, func(i, j int) bool { return all[i].Lo < all[j].Lo })
	for i := 1; i < len(all); i++ {
		if all[i].Lo <= all[i-1].Hi {
			return compress(dedup(RankRanges(all).Ranks()))
		}
	}
	return coalesce(all)
}

// RanksOf returns the set holding ranks.
func RanksOf(ranks ...uint32) RankRanges {
	rs := slices.Clone(ranks)
	slices.Sort(rs)
	return compress(dedup(rs))
}

func dedup(rs []uint32) []uint32 {
	slices.Sort(rs)
	return slices.Compact(rs)
}

// compress turns sorted distinct ranks into strided ranges.
func compress(rs []uint32) RankRanges {
	out := make(RankRanges, 0, len(rs))
	for _, r := range rs {
		out = appendRange(out, RankRange{r, r, 1})
	}
	return out
}

// coalesce joins neighbouring ranges of ranges sorted by Lo with disjoint spans.
func coalesce(rs RankRanges) RankRanges {
	out := rs[:0:0]
	for _, r := range rs {
		out = appendRange(out, r)
	}
	return out
}

// appendRange appends r (which starts after the last range's span), extending the last range
// when r continues its progression.
func appendRange(out RankRanges, r RankRange) RankRanges {
	n := len(out)
	if n == 0 {
		return append(out, r)
	}
	last := &out[n-1]
	single := last.Lo == last.Hi
	switch {
	case single && r.Lo == r.Hi:
		// Two single ranks make a progression of their distance.
		last.Hi, last.Stride = r.Lo, r.Lo-last.Lo
		return out
	case single && r.Stride == r.Lo-last.Lo:
		last.Hi, last.Stride = r.Hi, r.Stride
		return out
	case !single && (r.Lo == r.Hi || r.Stride == last.Stride) && uint64(r.Lo) == uint64(last.Hi)+uint64(last.Stride):
		last.Hi = r.Hi
		return out
	}
	return append(out, r)
}

// StackNode is one frame of a merged stack tree: a pc (a call site, or the innermost pc at a
// leaf), the ranks whose stacks pass through it, and the frames called from it.
type StackNode struct {
	PC       uint64
	Ranks    RankRanges
	Children []*StackNode
}

// StackTree is the stacks of many ranks merged into a prefix tree from the outermost frame:
// ranks with the same stack share one path, so its size grows with the number of distinct
// stacks, not with the number of ranks. Unreachable names the ranks whose agent
// could not be reached; Ranks every rank that contributed a stack.
type StackTree struct {
	Roots       []*StackNode
	Ranks       RankRanges
	Unreachable RankRanges
}

// Add merges one rank's stack, its pcs innermost first (as GetTracebackAck gives them).
func (t *StackTree) Add(rank uint32, pcs []uint64) {
	one := RankRanges{{rank, rank, 1}}
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
	drop := make(map[uint32]bool, o.Count())
	for _, r := range o.Ranks() {
		drop[r] = true
	}
	var keep []uint32
	for _, r := range s.Ranks() {
		if !drop[r] {
			keep = append(keep, r)
		}
	}
	return compress(keep)
}

// rangeBytes is the size of one strided range on the wire.
const rangeBytes = 12

// GatherStacks (extension message 5102) asks an agent for the merged main-thread stacks of
// every stopped rank it serves and, through a Router, of every agent below it.
type GatherStacks struct {
	Header
	MaxFrames uint32 // 0: MaxStackFrames
}

// GatherStacksAck (5103) answers GatherStacks with the merged tree. A tree too large for one
// message is sent as several GatherStacksAcks of the same sequence id, each the tree of some of
// the ranks, every one but the last with More set; the Client merges them.
type GatherStacksAck struct {
	Header
	More bool
	Tree StackTree
}

func (m *GatherStacks) MessageType() MessageType         { return MsgGatherStacks }
func (m *GatherStacks) encodedSize(bool) (int, error)    { return 48, nil }
func (m *GatherStacks) encodeBody(b []byte)              { be.PutUint32(b[40:], m.MaxFrames) }
func (m *GatherStacksAck) MessageType() MessageType      { return MsgGatherStacksAck }
func (m *GatherStacksAck) encodedSize(bool) (int, error) { return m.size(), nil }

// size is the encoded size: @40 contributing range count u32, unreachable range count u32,
// node count u32, flags u32 (1: more parts follow); the ranges (lo u32, hi u32, stride u32), contributing then
// unreachable, padded to 8; then the nodes in preorder, each pc u64, child count u32, range
// count u32 and its ranges, padded to 8.
func (m *GatherStacksAck) size() int {
	n := 56 + round8(rangeBytes*len(m.Tree.Ranks)) + round8(rangeBytes*len(m.Tree.Unreachable))
	var walk func([]*StackNode)
	walk = func(l []*StackNode) {
		for _, x := range l {
			n += 16 + round8(rangeBytes*len(x.Ranks))
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
	if m.More {
		be.PutUint32(b[52:], 1)
	}
	at := 56
	putRanges := func(rs RankRanges) {
		for _, r := range rs {
			be.PutUint32(b[at:], r.Lo)
			be.PutUint32(b[at+4:], r.Hi)
			be.PutUint32(b[at+8:], r.Stride)
			at += rangeBytes
		}
		at = round8(at)
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
		if uint64(round8(rangeBytes*int(min(n, 1<<20)))) > uint64(len(b)-at) {
			return nil, bad(fmt.Sprintf("%d rank ranges", n))
		}
		if n == 0 {
			return nil, nil // as readRanges: no ranges decode as nil, whatever the padding
		}
		out := make(RankRanges, n)
		for i := range out {
			r := RankRange{be.Uint32(b[at:]), be.Uint32(b[at+4:]), be.Uint32(b[at+8:])}
			if r.Lo > r.Hi || r.Stride == 0 || (r.Hi-r.Lo)%r.Stride != 0 || (r.Lo == r.Hi && r.Stride != 1) {
				return nil, bad("a malformed rank range")
			}
			if i > 0 && out[i-1].Hi >= r.Lo {
				return nil, bad("unsorted rank ranges")
			}
			out[i] = r
			at += rangeBytes
		}
		at = round8(at)
		return out, nil
	}
	flags := be.Uint32(b[52:])
	if flags&^1 != 0 {
		return nil, bad(fmt.Sprintf("flags %#x", flags))
	}
	m := &GatherStacksAck{Header: h, More: flags == 1}
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

// split cuts an answer over MaxFrameSize into answers of the ranks of halves of its rank span,
// halved again until each fits, every one but the last with More set. It reports false when a
// single rank's tree does not fit.
func (m *GatherStacksAck) split() ([]*GatherStacksAck, bool) {
	if m.size() <= MaxFrameSize {
		return []*GatherStacksAck{m}, true
	}
	all := m.Tree.Ranks.Union(m.Tree.Unreachable)
	if len(all) == 0 {
		return nil, false
	}
	lo, hi := all[0].Lo, all[len(all)-1].Hi
	if lo == hi {
		return nil, false
	}
	mid := lo + (hi-lo)/2
	var out []*GatherStacksAck
	for _, span := range [2][2]uint32{{lo, mid}, {mid + 1, hi}} {
		part := &GatherStacksAck{Header: m.Header, Tree: m.Tree.within(span[0], span[1])}
		ps, ok := part.split()
		if !ok {
			return nil, false
		}
		out = append(out, ps...)
	}
	for i, p := range out {
		p.More = i < len(out)-1
	}
	return out, true
}

// within returns the tree of t's ranks in [lo, hi]: every rank set cut to the interval, the
// nodes left without ranks dropped.
func (t *StackTree) within(lo, hi uint32) StackTree {
	var level func(l []*StackNode) []*StackNode
	level = func(l []*StackNode) []*StackNode {
		var out []*StackNode
		for _, n := range l {
			rs := n.Ranks.within(lo, hi)
			if len(rs) == 0 {
				continue
			}
			out = append(out, &StackNode{PC: n.PC, Ranks: rs, Children: level(n.Children)})
		}
		return out
	}
	return StackTree{Roots: level(t.Roots), Ranks: t.Ranks.within(lo, hi), Unreachable: t.Unreachable.within(lo, hi)}
}

// within returns the ranks of s in [lo, hi].
func (s RankRanges) within(lo, hi uint32) RankRanges {
	var out RankRanges
	for _, r := range s {
		if r.Hi < lo || r.Lo > hi {
			continue
		}
		a, b := r.Lo, r.Hi
		if a < lo {
			a += (lo - a + r.Stride - 1) / r.Stride * r.Stride
		}
		if b > hi {
			b -= (b - hi + r.Stride - 1) / r.Stride * r.Stride
		}
		if a > b {
			continue
		}
		st := r.Stride
		if a == b {
			st = 1
		}
		out = append(out, RankRange{a, b, st})
	}
	return out
}
