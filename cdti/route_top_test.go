package cdti

import (
	"context"
	"errors"
	"io"
	"net"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// simRootRoute is the Route of a simulated tree's root (agent 0 of simTree, perAgent ranks).
func simRootRoute(srvs []*Server, addr string, perAgent int) Route {
	return Route{Addr: addr, Ranks: seq(perAgent), Children: srvs[0].Handler.(*Router).Children()}
}

// dialTree is DialTree to a simulated tree, closed with the test.
func dialTree(t testing.TB, root Route) *Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := DialTree(ctx, root, ClientOptions{ToolID: 3, Token: []byte(testToken)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// dialSim connects a tool to a simulated tree (simTree's servers and root, perAgent ranks
// each): to the root directly, or through a Router of its own (toolRouter, DialTree).
func dialSim(t testing.TB, srvs []*Server, root string, perAgent int, toolRouter bool) *Client {
	t.Helper()
	if toolRouter {
		return dialTree(t, simRootRoute(srvs, root, perAgent))
	}
	return dialRoot(t, root)
}

// TestDialTreeAdoptsRootsChildren: a tool connected through DialTree to a 7-agent tree at
// fan-out 2 loses the root (0 → 1, 2; 1 → 3, 4; 2 → 5, 6). The tool's own Router adopts
// agents 1 and 2, which held the session: the tool is told of the root's ranks alone, by
// one Notify each, and every other rank still answers, one by one and in a collective.
func TestDialTreeAdoptsRootsChildren(t *testing.T) {
	const n, per = 7, 2
	srvs, addr := simTree(t, n, 2, per)
	c := dialTree(t, simRootRoute(srvs, addr, per))
	ctx := testCtx(t)
	all := RanksOf(seq(n * per)...)
	a, err := c.Collective(ctx, 0, all, &GetThreadList{})
	if err != nil || a.Unreachable.Count() != 0 {
		t.Fatalf("collective before the loss: %+v, %v", a, err)
	}

	srvs[0].Close() // the root is gone: its links below break without a farewell
	var lost []uint32
	for len(lost) < per {
		select {
		case m, ok := <-c.Notifications():
			if !ok {
				t.Fatalf("the tool's connection ended after the root's loss: %v", c.Err())
			}
			if m.Kind != NotifyTypeUnreachable || m.Lost != per {
				t.Fatalf("notify %+v, want the loss of %d ranks", m, per)
			}
			lost = append(lost, m.Rank)
		case <-time.After(30 * time.Second):
			t.Fatalf("told of the loss of ranks %v only, want %v", lost, seq(per))
		}
	}
	slices.Sort(lost)
	if !slices.Equal(lost, seq(per)) {
		t.Fatalf("lost ranks %v, want the root's %v", lost, seq(per))
	}
	for r := uint32(per); r < n*per; r++ {
		if _, err := c.Traceback(ctx, r, 0, 0); err != nil {
			t.Errorf("rank %d after the root's loss: %v", r, err)
		}
	}
	var rc *ReturnCodeError
	if _, err := c.Traceback(ctx, 0, 0, 0); !errors.As(err, &rc) || rc.ErrorCode != ErrorCodeUnreachable {
		t.Errorf("rank 0 after the root's loss: %v, want unreachable", err)
	}
	a, err = c.Collective(ctx, 0, all, &GetThreadList{})
	if err != nil {
		t.Fatal(err)
	}
	if want := RanksOf(seq(per)...); !a.Unreachable.Equal(want) {
		t.Errorf("collective after the root's loss: unreachable %v, want %v", a.Unreachable, want)
	}
	answered := 0
	for _, g := range a.Groups {
		answered += g.Ranks.Count()
	}
	if answered != (n-1)*per {
		t.Errorf("collective after the root's loss: %d ranks answered, want %d", answered, (n-1)*per)
	}
}

// TestDialTreeRootOutOfReach: a root that cannot be dialed fails DialTree, naming it.
func TestDialTreeRootOutOfReach(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	c, err := DialTree(testCtx(t), Route{Addr: addr, Ranks: []uint32{0}}, ClientOptions{Token: []byte(testToken)})
	if err == nil {
		c.Close()
		t.Fatal("DialTree to a closed port succeeded")
	}
	if !strings.Contains(err.Error(), addr) {
		t.Fatalf("error %q does not name the root %s", err, addr)
	}
}

// TestSessionUnheld: a connection named with SessionUnheld ends when its transport breaks,
// however long the grace, and another connection naming the same session does not resume
// it but starts anew.
func TestSessionUnheld(t *testing.T) {
	a, addr := startSessionServer(t, time.Hour)
	var id [SessionIDSize]byte
	id[0] = 7
	nc, _, st, err := dialAgent(testCtx(t), addr, []byte(testToken), id, SessionUnheld)
	if err != nil || st != SessionNew {
		t.Fatalf("unheld session: %v, %v; want new", st, err)
	}
	first := <-a.opened
	nc.Close()
	select {
	case c := <-a.closed:
		if c != first {
			t.Fatal("another connection closed")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the unheld connection was held after its transport broke")
	}
	if _, _, st := dialSession(t, addr, id); st != SessionNew {
		t.Fatalf("the same session named again: %v, want new", st)
	}
}

// TestDialTreeEndsWithItsContext: a root that accepts the connection and never answers holds
// DialTree only as long as its context lasts, and the error says so.
func TestDialTreeEndsWithItsContext(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() { // accept, read, never answer
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			go io.Copy(io.Discard, nc)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		c, err := DialTree(ctx, Route{Addr: ln.Addr().String(), Ranks: []uint32{0}}, ClientOptions{Token: []byte(testToken)})
		if err == nil {
			c.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("DialTree to a silent root: %v, want its context's end", err)
		}
	case <-time.After(20 * time.Second): // a hang guard: the Router's own dial limit is 30 s
		t.Fatal("DialTree outlived its context")
	}
}

// TestDialTreeUnknownRank: a rank that no agent of the tree serves is refused through the
// tool's own Router exactly as the root refuses it to a tool connected to it directly: the
// request's own ack with ToolRankNotFound, one by one (Query, Update, Control, Attach) and
// in a collective.
func TestDialTreeUnknownRank(t *testing.T) {
	const n, per, nobody = 3, 2, 40
	srvs, addr := simTree(t, n, 2, per)
	ctx := testCtx(t)
	for _, via := range []struct {
		name string
		c    *Client
	}{{"the root", dialRoot(t, addr)}, {"DialTree", dialTree(t, simRootRoute(srvs, addr, per))}} {
		for what, op := range map[string]func() error{
			"query": func() error { _, err := via.c.Traceback(ctx, nobody, 0, 0); return err },
			"update": func() error {
				_, err := via.c.Update(ctx, nobody, &StepThread{})
				return err
			},
			"control": func() error { _, err := via.c.Control(ctx, nobody, Control{}); return err },
			"attach": func() error {
				_, err := via.c.Attach(ctx, nobody, RankInHeader, NewTag("t"), 1)
				return err
			},
		} {
			if err := op(); !errors.Is(err, ToolRankNotFound) {
				t.Errorf("%s to rank %d through %s: %v, want ToolRankNotFound", what, nobody, via.name, err)
			}
		}
		a, err := via.c.Collective(ctx, 0, RanksOf(0, nobody), &GetThreadList{})
		if err != nil {
			t.Fatalf("collective through %s: %v", via.name, err)
		}
		for _, g := range a.Groups {
			if g.Ranks.Equal(RanksOf(nobody)) && g.Code != ToolRankNotFound {
				t.Errorf("collective through %s: rank %d answered %+v, want ToolRankNotFound", via.name, nobody, g)
			}
		}
	}
}

// slowRoot is a simulated root whose GetThreadList waits until release is closed, having
// said on entered that it was asked.
type slowRoot struct {
	*stackAgent
	entered chan struct{}
	release chan struct{}
}

func (a *slowRoot) Query(c *Conn, m *Query) ([]Result, ReturnCode) {
	if _, ok := m.Commands[0].(*GetThreadList); ok {
		a.entered <- struct{}{}
		<-a.release
	}
	return a.stackAgent.Query(c, m)
}

// openCounter is a simulated agent that counts the tool connections made to it.
type openCounter struct {
	*stackAgent
	opened *atomic.Int32
}

func (a *openCounter) Opened(c *Conn) { a.opened.Add(1) }

// TestDialTreeEndHealsNothing: a tool that ends its session (closes its Client) and then
// the agents (the root first) dials nothing more: the root's link, broken by its end, is not
// taken for the root's loss, and its children are not adopted. So even while the tool's
// Router is still busy with a collective the root has not answered, whose reader sees the
// tool's end only once it is done.
func TestDialTreeEndHealsNothing(t *testing.T) {
	const n, per = 3, 2
	root := &slowRoot{entered: make(chan struct{}, 1), release: make(chan struct{})}
	var opened atomic.Int32
	srvs, addr := simTreeWith(t, n, 2, per, simSpec{local: func(i int, a *stackAgent) any {
		if i == 0 {
			root.stackAgent = a
			return root
		}
		return &openCounter{stackAgent: a, opened: &opened}
	}})
	c, router, err := dialToolRouter(testCtx(t), simRootRoute(srvs, addr, per), ClientOptions{ToolID: 3, Token: []byte(testToken)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	toRoot := linkTo(t, router, addr)
	go c.Collective(context.Background(), 0, RanksOf(seq(per)...), &GetThreadList{})
	<-root.entered
	before := opened.Load()

	c.Close()
	closed := make(chan struct{})
	go func() {
		srvs[0].Close() // its connections at once, then it waits for the collective's handler
		close(closed)
	}()
	<-toRoot.healed // the Router's reader of the root's link has ended, and any heal with it
	close(root.release)
	<-closed
	if got := opened.Load() - before; got != 0 {
		t.Errorf("the session's end, then the root's: %d connections dialed to the root's children, want none", got)
	}
}

// TestRouterStopHealing: an interior agent told that it is ending (StopHealing, as an agent
// is told to shut down before its children are) takes a child's end that follows for no
// loss: the root of a 7-agent tree at fan-out 2 (0 → 1, 2; 1 → 3, 4), its links open, sees
// agent 1 end and dials nothing, neither agent 1 again nor agents 3 and 4 below it.
func TestRouterStopHealing(t *testing.T) {
	const n, per = 7, 1
	var opened atomic.Int32
	srvs, addr := simTreeWith(t, n, 2, per, simSpec{local: func(i int, a *stackAgent) any {
		if i == 3 || i == 4 {
			return &openCounter{stackAgent: a, opened: &opened}
		}
		return a
	}})
	c := dialRoot(t, addr)
	if a, err := c.Collective(testCtx(t), 0, RanksOf(seq(n*per)...), &GetThreadList{}); err != nil || a.Unreachable.Count() != 0 {
		t.Fatalf("collective: %+v, %v", a, err) // every link is open
	}
	root := srvs[0].Handler.(*Router)
	one := root.Children()[0].Addr
	toOne := linkTo(t, root, one)
	before := opened.Load()

	root.StopHealing()
	srvs[1].Close()
	<-toOne.healed // the root's reader of agent 1's link has ended, and any heal with it
	if got := opened.Load() - before; got != 0 {
		t.Errorf("agent 1's end after the root's: %d connections dialed to agents 3 and 4, want none", got)
	}
}

// linkTo returns r's link to the agent at addr (of its one upstream connection).
func linkTo(t *testing.T, r *Router, addr string) *link {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, ls := range r.links {
		if l := ls[addr]; l != nil {
			return l
		}
	}
	t.Fatalf("the Router has no link to %s", addr)
	return nil
}
