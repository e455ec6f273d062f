package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
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

// TreeResult answers the management call "tree": every agent below this one, each with its
// hello answer and its ranks, so that the front end learns the whole tree from the root.
type TreeResult struct {
	Agents []TreeAgent `json:"agents"`
}

// TreeAgent is one agent of a TreeResult.
type TreeAgent struct {
	Addr  string      `json:"addr"`
	Hello HelloResult `json:"hello"`
	Ranks []RankInfo  `json:"ranks"`
}

// setChildren makes the agents of children (each with the agents below it; their ranks are
// learnt here) this agent's children on both planes, and returns every agent below with its
// ranks. The management plane goes through this agent (a.below): it connects to each child,
// tells it its own children in turn and asks it its ranks, so that the front end, which tells
// the root alone, connects to no other agent; the children's output is relayed to this
// agent's subscribers, they end when it ends, and they count this connection as the front
// end's. CDTI for their ranks is then relayed to them (the Router). It returns once every
// agent below is connected.
func (a *Agent) setChildren(children []cdti.Route) (TreeResult, error) {
	// Each child's subtree has the time of its height (cdti.SubtreeWait), less than this
	// agent's, so that the error of an agent that does not answer comes up in time, naming it.
	own := cdti.Route{Children: children}
	ctx, cancel := context.WithTimeout(context.Background(), cdti.SubtreeWait(a.treeTimeout, own.Height()-1))
	defer cancel()
	if err := a.below.Connect(ctx, children); err != nil {
		return TreeResult{}, fmt.Errorf("agent: tree: %w", err)
	}
	results := make([]TreeResult, len(children))
	errs := make([]error, len(children))
	var wg sync.WaitGroup
	for i, c := range children {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(ctx, cdti.SubtreeWait(a.treeTimeout, c.Height()))
			defer cancel()
			var own TreeAgent
			hello := a.below.Hello(c.Addr)
			if hello == nil {
				errs[i] = fmt.Errorf("agent: tree: agent %s: its connection broke", c.Addr)
				return
			}
			if err := json.Unmarshal(hello, &own.Hello); err != nil {
				errs[i] = fmt.Errorf("agent: tree: agent %s: hello: %w", c.Addr, err)
				return
			}
			if len(c.Children) > 0 {
				params := TreeParams{Children: c.Children}
				if err := a.below.Call(ctx, c.Addr, "tree", params, &results[i]); err != nil {
					errs[i] = fmt.Errorf("agent: tree: %w", err)
					return
				}
				// Its output is subscribed to now that its own children are known: it
				// forwards theirs, captured or not its own.
				for _, ag := range results[i].Agents {
					if slices.Contains(ag.Hello.Capabilities, CapabilityOutput) {
						if err := a.below.Subscribe(ctx, c.Addr); err != nil {
							errs[i] = fmt.Errorf("agent: tree: %w", err)
							return
						}
						break
					}
				}
			}
			if err := a.below.Call(ctx, c.Addr, "ranks", nil, &own.Ranks); err != nil {
				errs[i] = fmt.Errorf("agent: tree: %w", err)
				return
			}
			own.Addr = c.Addr
			results[i].Agents = append([]TreeAgent{own}, results[i].Agents...)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return TreeResult{}, err
	}
	var all TreeResult
	for _, r := range results {
		all.Agents = append(all.Agents, r.Agents...)
	}
	ranks := make(map[string][]uint32, len(all.Agents))
	for _, ag := range all.Agents {
		for _, ri := range ag.Ranks {
			ranks[ag.Addr] = append(ranks[ag.Addr], uint32(ri.Rank))
		}
	}
	a.router.SetChildren(withRanks(children, ranks))
	return all, nil
}

// withRanks returns routes with the ranks of each agent filled in from ranks, by address,
// where the route names none: a route that names its ranks keeps them (the session's, of an
// agent that serves more, such as a BG/Q CIOS agent of a rank subset).
func withRanks(routes []cdti.Route, ranks map[string][]uint32) []cdti.Route {
	out := make([]cdti.Route, len(routes))
	for i, rt := range routes {
		out[i] = cdti.Route{Addr: rt.Addr, Ranks: rt.Ranks, Children: withRanks(rt.Children, ranks)}
		if len(rt.Ranks) == 0 {
			out[i].Ranks = ranks[rt.Addr]
		}
	}
	return out
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
