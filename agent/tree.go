package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

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

// childShutdownTimeout bounds the wait for the agents below to answer a shutdown.
const childShutdownTimeout = 5 * time.Second

// setChildren makes the agents of children this agent's children on both planes: CDTI to
// their ranks is relayed to them (the Router), and the management plane goes through this
// agent (a.below: their output is relayed to this agent's subscribers, they end when it
// ends, and they count this connection as the front end's). It returns once every child is
// connected, so that the front end may then drop its own connections to them.
func (a *Agent) setChildren(children []cdti.Route) error {
	a.router.SetChildren(children)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := a.below.Connect(ctx, children); err != nil {
		return fmt.Errorf("agent: tree: %w", err)
	}
	return nil
}

// relayOutput publishes a chunk of output of a rank below (mgmt.Subtree.Output) to this
// agent's own subscribers, numbered as its agent numbered it.
func (a *Agent) relayOutput(params json.RawMessage) {
	var ev OutputParams
	if err := json.Unmarshal(params, &ev); err != nil {
		a.logf("agent: output of an agent below: %v", err)
		return
	}
	a.output.relay(ev)
}
