package debugger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/hpcdap/hpcdap/cdti"
	"github.com/hpcdap/hpcdap/launch"
	"github.com/hpcdap/hpcdap/mgmt"
	"github.com/hpcdap/hpcdap/rankset"
	"github.com/hpcdap/hpcdap/topology"
)

// The tree overlay of agents. A job of more agents than the fan-out (Config.Fanout, default
// topology.DefaultFanout) puts them in a k-ary tree (package topology) over the agents in
// the order the launcher gave them: the front end tells each agent, on its management plane,
// the agents below it with their ranks (the management call "tree"), and holds one CDTI
// connection, to the root, through a Router of its own in this process (cdti.DialTree), which
// adopts the root's children if the root is lost. Every node's CDTI then goes through that
// connection and is routed by rank, unaltered, through the interior agents (cdti.Router);
// notifications come back the same way. Collectives go down once: parallel stacks are one GatherStacks, merged on the way
// up; stops, continues and breakpoints are Collectives (collective.go), reduced on the way up.
// A job of at most fan-out agents keeps one connection per agent, as before the tree.

// A Router that loses its link to an agent heals the tree (it adopts the agents below the lost
// one, which held the session) and tells the front end, one notification per rank, which
// ranks it could not keep (cdti.NotifyTypeUnreachable, each counting the ranks of the loss):
// the lost agent's own, which run on as after a detach.
// The engine then ends them as the ranks of a lost agent's own connection are ended: they are
// lost (exited, without a code) and out of run control, so that a continue lets the others go
// and an all-stop does not wait for them. A request that meets the loss first (its answer
// ErrorCodeUnreachable) ends its rank the same way.

// lostRanks collects the notifications of the losses on one connection until each is whole.
type lostRanks map[uint32][]*Rank // by the number of ranks of the loss

// add records one notification, of a loss of n ranks, and returns that loss's ranks once
// all n have been told.
func (l *lostRanks) add(r *Rank, n uint32) []*Rank {
	if *l == nil {
		*l = make(lostRanks)
	}
	rs := append((*l)[n], r)
	if uint32(len(rs)) < n {
		(*l)[n] = rs
		return nil
	}
	delete(*l, n)
	return rs
}

// onLost ends ranks that a lost agent cut off from the session: one important line names
// those that had not ended on their own, k of N (an operation's unreachable answer may have
// ended some already, silently: Rank.cutOff), and each is ended as after its agent's
// connection closed.
func (j *Job) onLost(ranks []*Rank) {
	var set rankset.Set
	j.mu.Lock()
	for _, r := range ranks {
		if !r.lostTold && (r.state != RankExited || r.cutOff) {
			r.lostTold = true
			set = set.Add(r.Num)
		}
	}
	j.mu.Unlock()
	if set.Empty() {
		return
	}
	j.output("important", fmt.Sprintf("lost %d of %d ranks (an agent on the way to them is gone): %s; they run on outside the session\n",
		set.Len(), len(j.ranks), set))
	for _, r := range ranks {
		go j.onExit(r, cdti.ExitStatus(-1))
	}
	go j.resendNotifications(ranks)
}

// resendNotifications asks every rank the session takes for running or starting (its first
// stop to come), but the lost ones, to
// send again a notification it sent and had no answer to (StopResendOnly): one that was on
// its way through the lost agent is gone, and its rank, suspended, would never be seen to
// stop, an all-stop under way waiting for it for ever. One collective per connection that
// reaches several ranks; a Client drops the repeat of a notification it delivered.
func (j *Job) resendNotifications(lost []*Rank) {
	defer j.recoverPanic("notifications sent again after a loss")
	gone := make(map[*Rank]bool, len(lost))
	for _, r := range lost {
		gone[r] = true
	}
	var running []*Rank
	j.mu.Lock()
	for _, r := range j.ranks {
		if (r.state == RankRunning || r.state == RankStarting) && r.yieldedTo == nil && !gone[r] {
			running = append(running, r)
		}
	}
	j.mu.Unlock()
	if len(running) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), collectiveTimeout)
	defer cancel()
	resend := &cdti.StopProcess{Flags: cdti.StopResendOnly}
	groups, single := j.collectiveGroups(running)
	for _, g := range groups {
		if _, err := j.collective(ctx, g, 0, resend); err != nil {
			single = append(single, g...)
		}
	}
	for _, r := range single {
		if _, err := r.node.client.Update(ctx, uint32(r.Num), resend); err != nil {
			j.logf("rank %d: notification not asked for again: %v", r.Num, err)
		}
	}
}

// unreachable reports whether err is a Router's answer for a rank it lost the way to.
func unreachable(err error) bool {
	var rc *cdti.ReturnCodeError
	return errors.As(err, &rc) && rc.ErrorCode == cdti.ErrorCodeUnreachable
}

// treeFor returns the tree over n agents at the fan-out cfg asks for, or nil when the agents
// are connected directly (n at most the fan-out).
func treeFor(n, fanout int) (*topology.Tree, error) {
	if fanout == 0 {
		fanout = topology.DefaultFanout
	}
	t, err := topology.New(n, fanout)
	if err != nil {
		return nil, err
	}
	if n <= fanout {
		return nil, nil
	}
	return t, nil
}

// dialed is an agent connected at the start of a job, or the error of its connection.
type dialed struct {
	n     *node
	infos []agentRankInfo
	err   error
}

// treeAgent is one agent of the management call "tree"'s answer (agent.TreeAgent).
type treeAgent struct {
	Addr  string          `json:"addr"`
	Hello agentHello      `json:"hello"`
	Ranks []agentRankInfo `json:"ranks"`
}

// discoverTree connects to the root of the tree t over g's agents (management plane only)
// and tells it the agents below it: each interior agent connects to its children and tells
// them theirs in turn, and the answer gives every agent's hello and ranks. The result is one
// entry per agent of g, the root's alone connected; an error is the root's entry's.
func (j *Job) discoverTree(ctx context.Context, g *launch.Agents, t *topology.Tree) []dialed {
	out := make([]dialed, len(g.Endpoints))
	root := t.Roots()[0]
	n, infos, err := dialNode(ctx, &g.Endpoints[root], j.onRankOutput, false)
	if err != nil {
		out[root].err = err
		return out
	}
	out[root] = dialed{n: n, infos: infos}
	// Addresses; ranks only where the session holds some of an agent's (a BG/Q CIOS agent
	// of a rank subset), which its parent routes alone.
	var addrs func(i int) []cdti.Route
	addrs = func(i int) []cdti.Route {
		var rts []cdti.Route
		for _, c := range t.Children(i) {
			rt := cdti.Route{Addr: g.Endpoints[c].Addr, Children: addrs(c)}
			if g.Endpoints[c].ToolID != 0 {
				for _, r := range g.Endpoints[c].Ranks {
					rt.Ranks = append(rt.Ranks, uint32(r))
				}
			}
			rts = append(rts, rt)
		}
		return rts
	}
	var res struct {
		Agents []treeAgent `json:"agents"`
	}
	// The tree's time by its height, as each agent gives its children's subtrees (so that an
	// agent that does not answer is named by the one above it).
	below := cdti.Route{Children: addrs(root)}
	ctx, cancel := context.WithTimeout(ctx, cdti.SubtreeWait(mgmt.TreeTimeout, below.Height()))
	defer cancel()
	if err := n.mgmt.Call(ctx, "tree", map[string]any{"children": below.Children}, &res); err != nil {
		out[root].err = fmt.Errorf("agent %s (%s): tree of %d agents: %w", n.ep.Addr, n.host, len(g.Endpoints), err)
		return out
	}
	byAddr := make(map[string]*treeAgent, len(res.Agents))
	for i := range res.Agents {
		byAddr[res.Agents[i].Addr] = &res.Agents[i]
	}
	for i := range g.Endpoints {
		if i == root {
			continue
		}
		ep := &g.Endpoints[i]
		ta := byAddr[ep.Addr]
		if ta == nil {
			out[root].err = fmt.Errorf("agent %s (%s): tree of %d agents: no answer for agent %s", n.ep.Addr, n.host, len(g.Endpoints), ep.Addr)
			return out
		}
		out[i] = dialed{n: newNode(ep, ta.Hello), infos: ta.Ranks}
	}
	return out
}

// configureTree shares the root's connection with every node (the agents know their
// children: discoverTree) and connects the management plane to the root. nodes[i] is agent i
// of t.
func (j *Job) configureTree(ctx context.Context, t *topology.Tree) error {
	var route func(i int) cdti.Route
	route = func(i int) cdti.Route {
		n := j.nodes[i]
		rt := cdti.Route{Addr: n.ep.Addr}
		for _, r := range n.ranks {
			rt.Ranks = append(rt.Ranks, uint32(r.Num))
		}
		for _, c := range t.Children(i) {
			rt.Children = append(rt.Children, route(c))
		}
		return rt
	}
	root := t.Roots()[0]
	cl, err := cdti.DialTree(ctx, route(root), clientOptions(j.nodes[root].ep))
	if err != nil {
		return fmt.Errorf("connect to the tree of %d agents through its root %s (%s): %w", len(j.nodes), j.nodes[root].ep.Addr, j.nodes[root].host, err)
	}
	for _, n := range j.nodes {
		n.client = cl
	}
	j.tree = t
	// The management plane goes through the tree as well: the front end holds the root's
	// connection alone, and the agents' output comes up through it.
	j.below = &mgmt.Subtree{Token: j.nodes[root].ep.Token, Client: "hpcdap-adapter", Logf: j.logf,
		Output: func(raw json.RawMessage) {
			var p outputParams
			if json.Unmarshal(raw, &p) == nil {
				j.onRankOutput(p)
			}
		}}
	if err := j.below.Connect(ctx, []cdti.Route{route(root)}); err != nil {
		return fmt.Errorf("connect to the tree of %d agents through its root %s (%s): %w", len(j.nodes), j.nodes[root].ep.Addr, j.nodes[root].host, err)
	}
	if n := j.nodes[root]; n.mgmt != nil {
		n.mgmt.Close()
		n.mgmt = nil
	}
	return nil
}

// clientGroups returns the job's nodes grouped by the CDTI connection they share: one group
// per node without a tree, one group with it.
func (j *Job) clientGroups() [][]*node {
	var groups [][]*node
	at := map[*cdti.Client]int{}
	for _, n := range j.nodes {
		i, ok := at[n.client]
		if !ok {
			i = len(groups)
			at[n.client] = i
			groups = append(groups, nil)
		}
		groups[i] = append(groups[i], n)
	}
	return groups
}

// treeTracebacks gathers the main-thread tracebacks of every stopped rank in one collective
// through the tree: pcs by rank, innermost first, and the ranks whose agent could not be
// reached. Without a tree it returns nil.
func (j *Job) treeTracebacks(ctx context.Context) (map[int][]uint64, rankset.Set, error) {
	if j.tree == nil || j.nodes[0].cnk.Load() {
		return nil, rankset.Set{}, nil // no tree, or no collective behind a CNK
	}
	t, err := j.nodes[0].client.GatherStacks(ctx, 0)
	if err != nil {
		return nil, rankset.Set{}, err
	}
	out := make(map[int][]uint64)
	for r, pcs := range t.Paths() {
		out[int(r)] = pcs
	}
	var lost rankset.Set
	for _, r := range t.Unreachable.Ranks() {
		lost = lost.Add(int(r))
	}
	return out, lost, nil
}

// unreachableFrame is the one frame of a rank whose agent the tree could not reach.
const unreachableFrame = "<agent unreachable>"

// fromTree fills in, from one GatherStacks, the agent tracebacks of the main threads among
// stacks; tbs[i] stays nil for the others. Ranks behind a lost agent get the one frame
// unreachableFrame and are reported, k of N, as an important output.
func (j *Job) fromTree(ctx context.Context, stacks []*RankStack, tbs [][]cdti.TraceFrame) (done []bool) {
	pcs, lost, err := j.treeTracebacks(ctx)
	done = make([]bool, len(stacks))
	if pcs == nil && err == nil {
		return done
	}
	if err != nil {
		j.output("important", fmt.Sprintf("parallel stacks through the agent tree: %v; asking rank by rank\n", err))
		return done
	}
	var lostHere rankset.Set
	for i, rs := range stacks {
		if lost.Contains(rs.Rank.Num) {
			rs.Frames = []TreeFrame{{Name: unreachableFrame}}
			rs.Err = fmt.Errorf("rank %d: its agent cannot be reached", rs.Rank.Num)
			done[i] = true
			lostHere = lostHere.Add(rs.Rank.Num)
			continue
		}
		if p, ok := pcs[rs.Rank.Num]; ok && rs.Thread.LWP == rs.Rank.Pid {
			tb := make([]cdti.TraceFrame, len(p))
			for k, pc := range p {
				tb[k].PC = pc
			}
			tbs[i] = tb
		}
	}
	if !lostHere.Empty() {
		j.output("important", fmt.Sprintf("parallel stacks: %d of %d ranks answered; unreachable (agent lost): %s\n",
			len(j.ranks)-lostHere.Len(), len(j.ranks), lostHere))
	}
	return done
}
