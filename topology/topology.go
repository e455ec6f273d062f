// Package topology computes the tree overlay of a job's agents: from the front end's list of
// agents (one per node) and a fan-out k, the k-ary tree in which each agent has a parent (or
// is a root, held by the front end) and at most k children.
//
// The tree is laid out breadth first over the agents in the order given, as a complete k-ary
// tree: agent i's children are k·i+1 … k·i+k, its parent (i−1)/k. There is one root, so the
// front end holds one connection however many agents there are, and the depth is
// ⌈log_k((k−1)·n+1)⌉−1: two levels below the root for 1,024 agents at fan-out 32.
//
// Agents are named by their index in the list the front end was given; Tree.Subtree lists
// the agents a message to any of their ranks must be routed through a child to reach, and
// Tree.Path the route from the root down to one agent.
package topology

import (
	"errors"
	"fmt"
)

// DefaultFanout is the fan-out used when a launch or attach names none.
const DefaultFanout = 32

// MinFanout is the smallest fan-out that makes a tree rather than a chain.
const MinFanout = 2

// ErrFanout is wrapped by the error of a fan-out below MinFanout.
var ErrFanout = errors.New("fan-out below 2")

// Tree is a k-ary tree over n agents numbered 0 … n−1. Agent 0 is the root.
type Tree struct {
	n, k   int // k is the fan-out used to compute, at most max(n, 2), so that k·i never overflows
	fanout int // as asked
}

// New returns the k-ary tree over n agents. A fan-out below MinFanout or a negative count is
// an error naming the operation and the value.
func New(n, fanout int) (*Tree, error) {
	if fanout < MinFanout {
		return nil, fmt.Errorf("topology: fan-out %d: %w", fanout, ErrFanout)
	}
	if n < 0 {
		return nil, fmt.Errorf("topology: %d agents: a count cannot be negative", n)
	}
	return &Tree{n: n, k: min(fanout, max(n, MinFanout)), fanout: fanout}, nil
}

// Len returns the number of agents.
func (t *Tree) Len() int { return t.n }

// Fanout returns the tree's fan-out.
func (t *Tree) Fanout() int { return t.fanout }

// Roots returns the agents the front end connects to: agent 0, or none for an empty tree.
func (t *Tree) Roots() []int {
	if t.n == 0 {
		return nil
	}
	return []int{0}
}

// Parent returns agent i's parent, or -1 for the root or an index outside the tree.
func (t *Tree) Parent(i int) int {
	if i <= 0 || i >= t.n {
		return -1
	}
	return (i - 1) / t.k
}

// Children returns agent i's children in order (none for a leaf or an index outside the
// tree).
func (t *Tree) Children(i int) []int {
	if i < 0 || i >= t.n {
		return nil
	}
	var out []int
	for c := t.k*i + 1; c <= t.k*i+t.k && c < t.n; c++ {
		out = append(out, c)
	}
	return out
}

// Interior reports whether agent i has children.
func (t *Tree) Interior(i int) bool { return i >= 0 && i < t.n && t.k*i+1 < t.n }

// Depth returns agent i's distance from the root (0 for the root), or -1 outside the tree.
func (t *Tree) Depth(i int) int {
	if i < 0 || i >= t.n {
		return -1
	}
	d := 0
	for i > 0 {
		i = (i - 1) / t.k
		d++
	}
	return d
}

// Height returns the largest depth of any agent (0 for one agent, -1 for none).
func (t *Tree) Height() int { return t.Depth(t.n - 1) }

// Path returns the agents from the root down to agent i, both included, or nil outside the
// tree.
func (t *Tree) Path(i int) []int {
	if i < 0 || i >= t.n {
		return nil
	}
	path := make([]int, t.Depth(i)+1)
	for j := len(path) - 1; j >= 0; j-- {
		path[j] = i
		i = (i - 1) / t.k
	}
	return path
}

// Subtree returns agent i and every agent below it, breadth first, or nil outside the tree.
func (t *Tree) Subtree(i int) []int {
	if i < 0 || i >= t.n {
		return nil
	}
	var out []int
	// The agents of depth d below i form one contiguous range [lo, hi].
	for lo, hi := i, i; lo < t.n; lo, hi = t.k*lo+1, t.k*hi+t.k {
		for j := lo; j <= hi && j < t.n; j++ {
			out = append(out, j)
		}
	}
	return out
}

// NearestLive returns the closest ancestor of agent i for which live reports true, or -1
// when none is (the root is lost too): where a lost agent's children reconnect.
func (t *Tree) NearestLive(i int, live func(int) bool) int {
	for p := t.Parent(i); p >= 0; p = t.Parent(p) {
		if live(p) {
			return p
		}
	}
	return -1
}
