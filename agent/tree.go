package agent

import (
	"sync"

	"github.com/hpcdap/hpcdap/cdti"
)

// The tree overlay. Every agent serves CDTI through a cdti.Router: messages for its own ranks
// go to its handler, messages for ranks of the agents below it (set by the management call
// "tree" from the front end) are relayed to them unaltered, each child authenticated with
// the session token as the front end authenticates to an agent. GatherStacks is answered
// here for this agent's ranks and merged by the Router with its children's; a Collective is
// applied to this agent's ranks through the ordinary Query and Update handlers, its quiet
// stops through QuietStop (quiet.go).

// TreeParams is the management call "tree": the agents directly below this one, each with
// the ranks it serves and its own subtree.
type TreeParams struct {
	Children []cdti.Route `json:"children"`
}

// GatherStacks unwinds the main thread of every rank the tool of c may query (attached, as
// for a Query) that is stopped, and merges their stacks into one tree.
func (h *handler) GatherStacks(c *cdti.Conn, m *cdti.GatherStacks) *cdti.StackTree {
	defer h.recoverConn(c, "gather stacks")
	tc := conn(c)
	var mu sync.Mutex
	var wg sync.WaitGroup
	t := &cdti.StackTree{}
	for _, p := range h.agent().allProcs() {
		wg.Go(func() {
			var pcs []uint64
			have := false
			p.do(func() {
				if p.check(tc, m.ToolID, false) != cdti.Success || !(p.suspended || p.allStopped()) {
					return
				}
				th := p.threads[p.leader]
				if th == nil {
					return
				}
				r := p.getTraceback(th, &cdti.GetTraceback{MaxFrames: m.MaxFrames})
				a, ok := r.Ack.(*cdti.GetTracebackAck)
				if r.Code != cdti.CmdSuccess || !ok {
					return
				}
				for _, f := range a.Frames {
					pcs = append(pcs, f.PC)
				}
				have = true
			})
			if have {
				mu.Lock()
				t.Add(p.rank, pcs)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return t
}
