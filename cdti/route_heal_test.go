package cdti

import (
	"context"
	"errors"
	"io"
	"net"
	"slices"
	"sync"
	"testing"
	"time"
)

// gatedAgent is a stackAgent whose Updates wait for gate to close, after telling entered.
type gatedAgent struct {
	*stackAgent
	entered chan struct{}
	gate    chan struct{}
}

func (a *gatedAgent) Update(c *Conn, m *Update) ([]Result, ReturnCode) {
	select {
	case a.entered <- struct{}{}:
	default:
	}
	<-a.gate
	return a.stackAgent.Update(c, m)
}

// doneAgent is a stackAgent that tells did after each Update.
type doneAgent struct {
	*stackAgent
	did chan struct{}
}

func (a *doneAgent) Update(c *Conn, m *Update) ([]Result, ReturnCode) {
	defer func() {
		select {
		case a.did <- struct{}{}:
		default:
		}
	}()
	return a.stackAgent.Update(c, m)
}

// TestCollectiveInFlightWhenAgentLost: interior agent 1 (children 3 and 4 at fan-out 2) is
// lost while a collective stop is in flight through it (its own ranks' stop waits). The
// collective's answer names agent 1's ranks unreachable and those of the agents below it
// (whose answers went with agent 1) timed out, not lost; the loss is told once, for agent
// 1's ranks alone; the next collective reaches the adopted agents' ranks, which the lost
// stop did stop.
func TestCollectiveInFlightWhenAgentLost(t *testing.T) {
	const n, per = 7, 2
	gated := &gatedAgent{entered: make(chan struct{}, 1), gate: make(chan struct{})}
	below := make(chan struct{}, 2*per) // agents 3 and 4 applied an Update
	srvs, root := simTreeWith(t, n, 2, per, simSpec{local: func(i int, a *stackAgent) any {
		switch i {
		case 1:
			gated.stackAgent = a
			return gated
		case 3, 4:
			return &doneAgent{a, below}
		}
		return a
	}})
	c := dialRoot(t, root)
	ctx := testCtx(t)
	all := RanksOf(seq(n * per)...)
	if _, err := c.Collective(ctx, 0, all, &GetThreadList{}); err != nil { // links open
		t.Fatal(err)
	}
	type answer struct {
		a   *CollectiveAck
		err error
	}
	done := make(chan answer, 1)
	go func() {
		a, err := c.Collective(ctx, CollectiveQuietStop, all, &StopProcess{})
		done <- answer{a, err}
	}()
	<-gated.entered
	for range 2 * per { // agent 1 lost only once the stop reached the agents below it
		<-below
	}
	closed := make(chan struct{})
	go func() { srvs[1].Close(); close(closed) }() // its connections go at once; Close waits for the gate
	ans := <-done
	close(gated.gate)
	<-closed
	if ans.err != nil {
		t.Fatal(ans.err)
	}
	if want := RanksOf(2, 3); !ans.a.Unreachable.Equal(want) {
		t.Fatalf("unreachable %v, want %v", ans.a.Unreachable, want)
	}
	var late, stopped RankRanges
	for _, g := range ans.a.Groups {
		switch {
		case g.Code == RequestFailed && g.ErrorCode == ErrorCodeTimedOut:
			late = g.Ranks
		case g.Code == Success:
			stopped = g.Ranks
		default:
			t.Fatalf("group %+v", g)
		}
	}
	if want := RanksOf(6, 7, 8, 9); !late.Equal(want) {
		t.Fatalf("timed out %v, want %v", late, want)
	}
	if want := RanksOf(0, 1, 4, 5, 10, 11, 12, 13); !stopped.Equal(want) {
		t.Fatalf("stopped %v, want %v", stopped, want)
	}
	waitLost(t, c, 2, 3)

	a, err := c.Collective(ctx, 0, all, &ContinueProcess{})
	if err != nil {
		t.Fatal(err)
	}
	if want := RanksOf(2, 3); !a.Unreachable.Equal(want) {
		t.Fatalf("continue: unreachable %v, want %v", a.Unreachable, want)
	}
	if len(a.Groups) != 1 || a.Groups[0].Code != Success || a.Groups[0].Results[0].Code != CmdSuccess ||
		a.Groups[0].Ranks.Count() != n*per-2 {
		t.Fatalf("continue after the loss: %+v", a.Groups)
	}
	select {
	case m := <-c.Notifications():
		t.Fatalf("a second notification: %v for rank %d", m.Kind, m.Rank)
	default:
	}
}

// TestRouterToolLeavesDuringHeal: the tool leaves while its Router re-dials a child whose
// link broke (the child accepts but does not answer yet). That dial stops, and the child is
// not taken for lost: the next tool reaches its rank.
func TestRouterToolLeavesDuringHeal(t *testing.T) {
	s := newHealScene(t)
	ctx, tool, nc, rootAddr := s.ctx, s.tool, s.nc, s.rootAddr
	tool.Close()
	nc.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.Copy(io.Discard, nc); err != nil {
		t.Fatalf("the dial did not stop when the tool left: %v", err)
	}
	s.mu.Lock()
	s.silent = false
	s.mu.Unlock()
	if _, err := dialRoot(t, rootAddr).Query(ctx, 1, &GetThreadList{}); err != nil {
		t.Fatalf("the next tool's query: %v", err)
	}
}

// TestRouterServesDuringHeal: while the Router re-dials a child whose link broke (the child
// accepts but does not answer yet), a request for the child's rank waits for the heal off
// the connection's reader: a request for another rank is answered meanwhile, before the
// re-dial is answered or given up. The child then answers the re-dial (it no longer knows
// the session): the rank-1 request comes back unreachable, and the child is not taken for
// lost, the next tool reaching its rank.
func TestRouterServesDuringHeal(t *testing.T) {
	s := newHealScene(t)
	ctx, tool, nc, rootAddr := s.ctx, s.tool, s.nc, s.rootAddr
	sent, _ := tool.Messages()
	lost := make(chan error, 1)
	go func() {
		_, err := tool.Query(ctx, 1, &GetThreadList{})
		lost <- err
	}()
	for n, _ := tool.Messages(); n == sent; n, _ = tool.Messages() { // the rank-1 request is on its way
		select {
		case err := <-lost:
			t.Fatalf("the rank-1 query was answered during the heal: %v", err)
		case <-time.After(time.Millisecond):
		}
	}
	if _, err := tool.Query(ctx, 0, &GetThreadList{}); err != nil {
		t.Fatalf("rank-0 query during the heal: %v", err)
	}
	s.mu.Lock()
	go s.srv.ServeConn(nc) // the re-dial is answered only now
	s.silent = false
	s.mu.Unlock()
	var rc *ReturnCodeError
	if err := <-lost; !errors.As(err, &rc) || rc.ErrorCode != ErrorCodeUnreachable {
		t.Fatalf("rank-1 query across the heal: %v, want unreachable", err)
	}
	if _, err := dialRoot(t, rootAddr).Query(ctx, 1, &GetThreadList{}); err != nil {
		t.Fatalf("the next tool's query: %v (the child was taken for lost)", err)
	}
}

// TestLinkForwardReaderOwns: a request whose write fails after the link's reader took the
// outstanding requests (to answer them) is the reader's to answer: forward says so rather
// than have its caller answer it a second time. One whose write fails before is the caller's.
func TestLinkForwardReaderOwns(t *testing.T) {
	for _, taken := range []bool{true, false} {
		near, far := net.Pipe()
		l := &link{nc: near, pending: make(map[uint32]Header), parts: make(map[uint32]*partsWait)}
		h := Header{Type: MsgQuery, SequenceID: 7}
		res := make(chan error, 1)
		go func() { res <- l.forward(h, make([]byte, 64)) }() // blocks: nothing reads far
		for {
			l.mu.Lock()
			_, in := l.pending[h.SequenceID]
			if in && taken { // the reader's end: it answers what was outstanding
				l.pending = nil
			}
			l.mu.Unlock()
			if in {
				break
			}
			time.Sleep(time.Millisecond)
		}
		far.Close() // the write fails
		err := <-res
		switch {
		case taken && !errors.Is(err, errReaderOwns):
			t.Errorf("write failed after the reader took the request: %v, want errReaderOwns", err)
		case !taken && (err == nil || errors.Is(err, errReaderOwns)):
			t.Errorf("write failed before the reader took the request: %v, want the write's error", err)
		case !taken && len(l.pending) != 0:
			t.Errorf("the failed request stays outstanding: %v", l.pending)
		}
	}
}

// healScene is a Router whose child's link has just broken: the Router has dialed the child
// again (nc, held unanswered by the test), while the tool that was connected through it
// stays connected.
type healScene struct {
	ctx      context.Context
	tool     *Client
	nc       net.Conn // the Router's re-dial of the child, not yet answered
	rootAddr string
	mu       sync.Mutex
	srv      *Server // the child's server for connections answered from now on
	silent   bool    // connections to the child are held (sent on held) instead of served
}

func newHealScene(t *testing.T) *healScene {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	child := &stackAgent{index: 1, ranks: []uint32{1}}
	newChild := func() *Server {
		return &Server{Token: []byte(testToken), Handler: &Router{Local: child, Token: []byte(testToken)}}
	}
	s := &healScene{}
	s.srv, s.silent = newChild(), false
	held := make(chan net.Conn, 1)
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			srv, quiet := s.srv, s.silent
			s.mu.Unlock()
			if quiet {
				held <- nc
				continue
			}
			go srv.ServeConn(nc)
		}
	}()
	t.Cleanup(func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.srv.Close()
	})
	rootLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rt := &Router{Local: &stackAgent{ranks: []uint32{0}}, Token: []byte(testToken), Timeout: time.Minute}
	rt.SetChildren([]Route{{Addr: ln.Addr().String(), Ranks: []uint32{1}}})
	root := &Server{Token: []byte(testToken), Handler: rt}
	go root.Serve(rootLn)
	t.Cleanup(func() { root.Close() })

	ctx := testCtx(t)
	tool := dialRoot(t, rootLn.Addr().String())
	if _, err := tool.Query(ctx, 1, &GetThreadList{}); err != nil {
		t.Fatalf("first query: %v", err)
	}
	s.mu.Lock()
	old := s.srv
	s.srv, s.silent = newChild(), true
	s.mu.Unlock()
	old.Close() // the link breaks; the Router dials the child again and waits for its answer
	var nc net.Conn
	select {
	case nc = <-held:
	case <-ctx.Done():
		t.Fatal("the Router did not dial the child again")
	}
	t.Cleanup(func() { nc.Close() })
	s.ctx, s.tool, s.nc, s.rootAddr = ctx, tool, nc, rootLn.Addr().String()
	return s
}

// orderAgent answers every Query of its rank, recording the address of its first GetMemory.
type orderAgent struct {
	mu   sync.Mutex
	seen []uint64
}

func (a *orderAgent) Query(c *Conn, m *Query) ([]Result, ReturnCode) {
	if g, ok := m.Commands[0].(*GetMemory); ok {
		a.mu.Lock()
		a.seen = append(a.seen, g.Addr)
		a.mu.Unlock()
	}
	out := make([]Result, len(m.Commands))
	for i := range out {
		out[i] = Result{Code: CmdSuccess, Ack: &GetMemoryAck{Data: []byte{0}}}
	}
	return out, Success
}

// TestRouterKeepsOrderAcrossHeal: the link to a child breaks while the child lives (it holds
// the session), and the Router's re-dial is held up. Requests for the child's rank sent
// meanwhile, one after the other without waiting, reach the child in the order they were
// sent once the link is back and the session resumed, and each is answered.
func TestRouterKeepsOrderAcrossHeal(t *testing.T) {
	child := &orderAgent{}
	childSrv := &Server{Token: []byte(testToken), Handler: child, ResumeGrace: time.Minute}
	childLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go childSrv.Serve(childLn)
	t.Cleanup(func() { childSrv.Close() })

	// A proxy in front of the child: it can break the connection it carries, and hold the
	// next one until released.
	proxyLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxyLn.Close() })
	var pmu sync.Mutex
	var carried []net.Conn
	release := make(chan struct{})
	holding := false
	accepted := make(chan struct{}, 4)
	go func() {
		for {
			up, err := proxyLn.Accept()
			if err != nil {
				return
			}
			pmu.Lock()
			hold := holding
			pmu.Unlock()
			go func() {
				if hold {
					accepted <- struct{}{}
					<-release
				}
				down, err := net.Dial("tcp", childLn.Addr().String())
				if err != nil {
					up.Close()
					return
				}
				pmu.Lock()
				carried = append(carried, up, down)
				pmu.Unlock()
				go func() { io.Copy(down, up); down.Close() }()
				io.Copy(up, down)
				up.Close()
			}()
		}
	}()

	rootLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rt := &Router{Local: &stackAgent{ranks: []uint32{0}}, Token: []byte(testToken), Timeout: time.Minute}
	rt.SetChildren([]Route{{Addr: proxyLn.Addr().String(), Ranks: []uint32{1}}})
	root := &Server{Token: []byte(testToken), Handler: rt}
	go root.Serve(rootLn)
	t.Cleanup(func() { root.Close() })
	ctx := testCtx(t)
	tool := dialRoot(t, rootLn.Addr().String())
	if _, err := tool.Query(ctx, 1, &GetMemory{Addr: 1000, Length: 1}); err != nil {
		t.Fatalf("first query: %v", err)
	}

	pmu.Lock()
	holding = true
	for _, nc := range carried { // the link breaks; the child holds the session
		nc.Close()
	}
	pmu.Unlock()
	select {
	case <-accepted: // the Router's re-dial, held
	case <-ctx.Done():
		t.Fatal("the Router did not dial the child again")
	}
	const n = 40
	errs := make(chan error, n)
	for i := range n {
		sent, _ := tool.Messages()
		go func() {
			_, err := tool.Query(ctx, 1, &GetMemory{Addr: uint64(i), Length: 1})
			errs <- err
		}()
		for now, _ := tool.Messages(); now == sent; now, _ = tool.Messages() { // sent before the next
			time.Sleep(50 * time.Microsecond)
		}
	}
	close(release)
	for range n {
		if err := <-errs; err != nil {
			t.Fatalf("query across the heal: %v", err)
		}
	}
	child.mu.Lock()
	defer child.mu.Unlock()
	want := []uint64{1000}
	for i := range n {
		want = append(want, uint64(i))
	}
	if !slices.Equal(child.seen, want) {
		t.Fatalf("the child saw the requests in the order %v, want %v", child.seen, want)
	}
}

// gateAgent serves rank 1 and answers a Query only once gate is closed; it passes each
// connection and Query on.
type gateAgent struct {
	gate    chan struct{}
	opened  chan *Conn
	queried chan uint32 // each Query's sequence id
}

func (a *gateAgent) Opened(c *Conn)            { a.opened <- c }
func (a *gateAgent) Closed(c *Conn, err error) {}

func (a *gateAgent) Query(c *Conn, m *Query) ([]Result, ReturnCode) {
	a.queried <- m.SequenceID
	<-a.gate
	return make([]Result, len(m.Commands)), Success
}

// TestRouterRequestOutlivesNotifyOfItsNumber: a notification that carries the sequence id of a
// request on its way (an agent numbers its notifications on its own) does not make the Router
// forget the request: when the link then breaks, the request is answered, timed out, instead
// of waiting for its caller's time.
func TestRouterRequestOutlivesNotifyOfItsNumber(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	child := &gateAgent{gate: make(chan struct{}), opened: make(chan *Conn, 4), queried: make(chan uint32, 4)}
	defer close(child.gate)
	csrv := &Server{Token: []byte(testToken), Handler: &Router{Local: child, Token: []byte(testToken)}}
	go csrv.Serve(ln)
	t.Cleanup(func() { csrv.Close() })
	rt := &Router{Local: &stackAgent{ranks: []uint32{0}}, Token: []byte(testToken), Timeout: time.Minute}
	rt.SetChildren([]Route{{Addr: ln.Addr().String(), Ranks: []uint32{1}}})
	rootLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	root := &Server{Token: []byte(testToken), Handler: rt}
	go root.Serve(rootLn)
	t.Cleanup(func() { root.Close() })
	tool := dialRoot(t, rootLn.Addr().String())

	res := make(chan error, 1)
	go func() {
		_, err := tool.Query(testCtx(t), 1, &GetThreadList{})
		res <- err
	}()
	link := recv(t, child.opened, "opened for the root's link")
	var seq uint32
	select {
	case seq = <-child.queried:
	case <-time.After(10 * time.Second):
		t.Fatal("the query did not reach the child")
	}
	if err := link.Notify(&Notify{Header: Header{Rank: 1, SequenceID: seq}, Kind: NotifyTypeSignal, Signal: NotifySignal{Signal: 5}}); err != nil {
		t.Fatal(err)
	}
	select {
	case n := <-tool.Notifications():
		if n.SequenceID != seq {
			t.Fatalf("notification %+v, want sequence id %d", n, seq)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the notification did not reach the tool")
	}
	link.Close() // the link breaks, the request on its way
	var rc *ReturnCodeError
	if err := <-res; !errors.As(err, &rc) || rc.Code != RequestFailed {
		t.Fatalf("the query across the break: %v, want it answered RequestFailed", err)
	}
}
