package cdti

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strings"

	"testing"
	"time"
)

// stackAgent is an agent of a simulated node: it serves ranks whose main-thread stacks are
// generated from the rank and the agent's index (so that an answer names the agent that gave
// it), answers GetTraceback for them, Control with a Notify, and GatherStacks.
type stackAgent struct {
	index int
	ranks []uint32
}

// stackOf is the stack rank r's agent reports, innermost first: three distinct shapes, and
// an innermost pc that names the agent.
func stackOf(index int, r uint32) []uint64 {
	switch r % 3 {
	case 0:
		return []uint64{0x5000 + uint64(index), 0x3000, 0x2000, 0x1000}
	case 1:
		return []uint64{0x4000, 0x2000, 0x1000}
	}
	return []uint64{0x6000, 0x3000, 0x2000, 0x1000}
}

func (a *stackAgent) serves(r uint32) bool { return slices.Contains(a.ranks, r) }

func (a *stackAgent) Query(c *Conn, m *Query) ([]Result, ReturnCode) {
	if !a.serves(m.Rank) {
		return nil, ToolRankNotFound
	}
	out := make([]Result, len(m.Commands))
	for i, cmd := range m.Commands {
		if _, ok := cmd.(*GetTraceback); ok {
			var fr []TraceFrame
			for _, pc := range stackOf(a.index, m.Rank) {
				fr = append(fr, TraceFrame{PC: pc})
			}
			out[i] = Result{Ack: &GetTracebackAck{ThreadID: 1, Frames: fr}}
		}
	}
	return out, Success
}

func (a *stackAgent) Control(c *Conn, m *Control) *ControlAck {
	if !a.serves(m.Rank) {
		return &ControlAck{Header: Header{ReturnCode: ToolRankNotFound}}
	}
	c.AfterReply(func() {
		c.Notify(&Notify{Header: Header{Rank: m.Rank, ToolID: m.ToolID}, Kind: NotifyTypeSignal,
			Signal: NotifySignal{Signal: m.SendSignal, ThreadID: uint32(a.index)}})
	})
	return &ControlAck{}
}

func (a *stackAgent) GatherStacks(c *Conn, m *GatherStacks) *StackTree {
	t := &StackTree{}
	for _, r := range a.ranks {
		t.Add(r, stackOf(a.index, r))
	}
	return t
}

// simTree starts n agents, each serving perAgent ranks, as a k-ary tree of Routers (agent
// i's children are k·i+1 … k·i+k) and returns their servers; agent 0 is the root.
func simTree(t testing.TB, n, k, perAgent int) ([]*Server, string) {
	lns := make([]net.Listener, n)
	for i := range lns {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns[i] = ln
	}
	agents := make([]*stackAgent, n)
	for i := range agents {
		agents[i] = &stackAgent{index: i}
		for r := 0; r < perAgent; r++ {
			agents[i].ranks = append(agents[i].ranks, uint32(i*perAgent+r))
		}
	}
	var route func(i int) Route
	route = func(i int) Route {
		rt := Route{Addr: lns[i].Addr().String(), Ranks: agents[i].ranks}
		for c := k*i + 1; c <= k*i+k && c < n; c++ {
			rt.Children = append(rt.Children, route(c))
		}
		return rt
	}
	srvs := make([]*Server, n)
	for i := range srvs {
		rt := &Router{Local: agents[i], Token: []byte(testToken), Timeout: 10 * time.Second}
		rt.SetChildren(route(i).Children)
		srvs[i] = &Server{Token: []byte(testToken), Node: fmt.Sprint("node", i), Handler: rt}
		go srvs[i].Serve(lns[i])
	}
	t.Cleanup(func() {
		for _, s := range srvs {
			s.Close()
		}
	})
	return srvs, lns[0].Addr().String()
}

func dialRoot(t testing.TB, addr string) *Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := Dial(ctx, "tcp", addr, ClientOptions{ToolID: 3, Token: []byte(testToken)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestRouterRoutesEveryRank queries every rank of a 7-agent tree at fan-out 2 through the
// root alone: each answer comes from the rank's own agent, and a Notify from a leaf two
// levels down reaches the tool unaltered.
func TestRouterRoutesEveryRank(t *testing.T) {
	const n, per = 7, 3
	_, root := simTree(t, n, 2, per)
	c := dialRoot(t, root)
	ctx := testCtx(t)
	for r := uint32(0); r < n*per; r++ {
		fr, err := c.Traceback(ctx, r, 0, 0)
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
		var pcs []uint64
		for _, f := range fr {
			pcs = append(pcs, f.PC)
		}
		if want := stackOf(int(r)/per, r); !slices.Equal(pcs, want) {
			t.Fatalf("rank %d: stack %x, want %x (from agent %d)", r, pcs, want, int(r)/per)
		}
	}
	if _, err := c.Control(ctx, 19, Control{SendSignal: 10}); err != nil {
		t.Fatal(err)
	}
	select {
	case nt := <-c.Notifications():
		if nt.Rank != 19 || nt.Signal.Signal != 10 || nt.Signal.ThreadID != 6 || nt.ToolID != 3 {
			t.Fatalf("notify through two relays: %#v", nt)
		}
	case <-ctx.Done():
		t.Fatal("no Notify from the leaf")
	}
	if _, err := c.Traceback(ctx, n*per, 0, 0); !errors.Is(err, ToolRankNotFound) {
		t.Fatalf("a rank no agent serves: %v, want ToolRankNotFound from the root", err)
	}
}

// TestGatherStacksEqualsEveryRanksOwn checks the collective: the merged tree the root answers
// holds, for every rank, exactly the stack the rank's own traceback gives, and its size
// follows the distinct stacks, not the ranks.
func TestGatherStacksEqualsEveryRanksOwn(t *testing.T) {
	const n, per = 15, 4
	_, root := simTree(t, n, 2, per)
	c := dialRoot(t, root)
	ctx := testCtx(t)
	tree, err := c.GatherStacks(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	own := make(map[uint32][]uint64)
	for r := uint32(0); r < n*per; r++ {
		fr, err := c.Traceback(ctx, r, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range fr {
			own[r] = append(own[r], f.PC)
		}
	}
	if got := tree.Paths(); !maps.EqualFunc(got, own, slices.Equal) {
		t.Fatalf("merged stacks differ from the ranks' own:\n got %x\nwant %x", got, own)
	}
	if len(tree.Unreachable) != 0 || tree.Ranks.Count() != n*per {
		t.Fatalf("unreachable %v, %d ranks", tree.Unreachable, tree.Ranks.Count())
	}
	// 1000 → 2000 → {3000 → {5000+i ×15, 6000}, 4000}: 20 nodes for 60 ranks.
	if tree.Nodes() != 2+1+n+1+1 {
		t.Fatalf("%d nodes", tree.Nodes())
	}
}

// TestRouterLostInteriorAgent kills an interior agent (1, with children 3 and 4, at fan-out
// 2). For the tool connected before the loss, whose attachments below it went with it, the
// next collective names the whole subtree's ranks as unreachable and merges the others; a
// request for one of them fails naming the rank. A tool that connects afterwards reaches the
// agents below the lost one from the root (their nearest live ancestor): only the lost
// agent's own ranks are unreachable.
func TestRouterLostInteriorAgent(t *testing.T) {
	const n, per = 7, 2
	srvs, root := simTree(t, n, 2, per)
	c := dialRoot(t, root)
	ctx := testCtx(t)
	if _, err := c.GatherStacks(ctx, 0); err != nil { // links open before the loss
		t.Fatal(err)
	}
	srvs[1].Close()
	tree, err := c.GatherStacks(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if want := RanksOf(2, 3, 6, 7, 8, 9); !slices.Equal(tree.Unreachable, want) {
		t.Fatalf("unreachable %v, want %v", tree.Unreachable, want)
	}
	if want := RanksOf(0, 1, 4, 5, 10, 11, 12, 13); !slices.Equal(tree.Ranks, want) {
		t.Fatalf("merged ranks %v, want %v", tree.Ranks, want)
	}
	for _, r := range []uint32{2, 7} {
		_, err = c.Traceback(ctx, r, 0, 0)
		var rc *ReturnCodeError
		if !errors.As(err, &rc) || rc.Code != RequestFailed || rc.ErrorCode != ErrorCodeUnreachable {
			t.Fatalf("rank %d below the lost link: %v", r, err)
		}
		if want := fmt.Sprint("rank ", r); !strings.Contains(err.Error(), want) {
			t.Fatalf("error %q does not name %s", err, want)
		}
	}
	if _, err := c.Traceback(ctx, 4, 0, 0); err != nil {
		t.Fatalf("rank 4 of the live subtree: %v", err)
	}

	late := dialRoot(t, root)
	tree, err = late.GatherStacks(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if want := RanksOf(2, 3); !slices.Equal(tree.Unreachable, want) {
		t.Fatalf("new tool: unreachable %v, want %v", tree.Unreachable, want)
	}
	if got, want := tree.Ranks.Count(), (n-1)*per; got != want {
		t.Fatalf("new tool: %d of %d ranks merged (%v)", got, want, tree.Ranks)
	}
	for _, r := range []uint32{6, 7, 8, 9} { // agents 3 and 4, below the lost one
		if _, err := late.Traceback(ctx, r, 0, 0); err != nil {
			t.Fatalf("new tool: rank %d below the lost agent: %v", r, err)
		}
	}
	if _, err := late.Traceback(ctx, 3, 0, 0); err == nil {
		t.Fatal("new tool: rank 3 of the lost agent answered")
	}
}

// TestStackTreeRoundTrip encodes and decodes a merged tree and refuses corrupt ones.
func TestStackTreeRoundTrip(t *testing.T) {
	var tr StackTree
	for r := uint32(0); r < 100; r++ {
		tr.Add(r, stackOf(int(r%5), r))
	}
	tr.Unreachable = RanksOf(200, 201, 202, 300)
	b, err := Encode(&GatherStacksAck{Tree: tr})
	if err != nil {
		t.Fatal(err)
	}
	m, err := DecodeMessage(b)
	if err != nil {
		t.Fatal(err)
	}
	got := m.(*GatherStacksAck).Tree
	if !maps.EqualFunc(got.Paths(), tr.Paths(), slices.Equal) || !slices.Equal(got.Unreachable, tr.Unreachable) {
		t.Fatal("the tree changed in the round trip")
	}
	for _, cut := range []int{len(b) - 8, 60, 57} {
		bad := append([]byte(nil), b[:cut]...)
		be.PutUint32(bad[20:], uint32(cut))
		if _, err := DecodeMessage(bad); !errors.Is(err, ErrMalformed) {
			t.Errorf("cut at %d: %v", cut, err)
		}
	}
}
