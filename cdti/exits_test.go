package cdti

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// exitsServer starts a memAgent server whose exit reports wait delay and returns it with
// the server side of a Client dialed over TCP.
func exitsServer(t *testing.T, delay time.Duration) (*Client, *Conn) {
	t.Helper()
	a := newMemAgent(4096)
	s := startServer(t, a)
	s.srv.ExitDelay = delay
	c := s.dial(t, "tcp", ClientOptions{})
	return c, recvConn(t, a.opened)
}

func recvConn(t *testing.T, ch chan *Conn) *Conn {
	t.Helper()
	select {
	case c := <-ch:
		return c
	case <-time.After(10 * time.Second):
		t.Fatal("no connection opened")
		return nil
	}
}

// nextNotify returns the Client's next notification, failing the test after 10 s.
func nextNotify(t *testing.T, c *Client) *Notify {
	t.Helper()
	select {
	case n, ok := <-c.Notifications():
		if !ok {
			t.Fatal("the notifications ended")
		}
		return n
	case <-time.After(10 * time.Second):
		t.Fatal("no notification in 10 s")
		return nil
	}
}

// readMessage reads and decodes one message from r, failing the test if it cannot.
func readMessage(t *testing.T, r io.Reader) Message {
	t.Helper()
	b, err := ReadFrame(r)
	if err != nil {
		t.Fatal(err)
	}
	m, err := DecodeMessage(b)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func termination(rank uint32, status ExitStatus) *Notify {
	return &Notify{Header: Header{Rank: rank, JobID: 77, ToolID: 5}, Kind: NotifyTypeTermination, Exit: status}
}

// TestExitsCoalesced: the Termination reports of 200 ranks, a relayed Exits and a relayed
// Termination Notify among them, reach a tool of this version as one message, sent before
// the Notify written after them, and the Client gives back each rank's Termination Notify.
func TestExitsCoalesced(t *testing.T) {
	c, sc := exitsServer(t, time.Hour) // sent by the next write alone
	_, before := c.Messages()
	want := map[uint32]ExitStatus{}
	for r := range uint32(200) {
		st := ExitStatus(0)
		if r%50 == 7 {
			st = 3 << 8
		}
		want[r] = st
		switch r {
		case 120: // relayed from an agent below as it sent it
			b, err := Encode(&Exits{Header: hdr(9), Groups: []ExitGroup{{JobID: 77, ToolID: 5, Status: st, Ranks: RanksOf(r)}}})
			if err != nil {
				t.Fatal(err)
			}
			if err := sc.SendEncoded(b); err != nil {
				t.Fatal(err)
			}
		case 121:
			b, err := Encode(termination(r, st))
			if err != nil {
				t.Fatal(err)
			}
			if err := sc.SendEncoded(b); err != nil {
				t.Fatal(err)
			}
		default:
			if err := sc.Notify(termination(r, st)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := sc.Notify(&Notify{Header: Header{Rank: 3}, Kind: NotifyTypeSignal, Signal: NotifySignal{Signal: 5}}); err != nil {
		t.Fatal(err)
	}
	for range 200 {
		n := nextNotify(t, c)
		st, ok := want[n.Rank]
		if n.Kind != NotifyTypeTermination || !ok || n.Exit != st || n.JobID != 77 || n.ToolID != 5 || n.Version != 0 {
			t.Fatalf("notification %+v: want the Termination of a rank not yet reported", n)
		}
		delete(want, n.Rank)
	}
	if n := nextNotify(t, c); n.Kind != NotifyTypeSignal || n.Rank != 3 {
		t.Fatalf("after the exits: %+v, want rank 3's signal", n)
	}
	if _, after := c.Messages(); after-before != 2 {
		t.Errorf("%d messages received for 200 exits and a signal, want 2", after-before)
	}
}

// TestExitsSentInTime: with the default delay, a lone report is sent by itself, nothing
// else written after it.
func TestExitsSentInTime(t *testing.T) {
	c, sc := exitsServer(t, 0)
	if err := sc.Notify(termination(4, 9)); err != nil {
		t.Fatal(err)
	}
	if n := nextNotify(t, c); n.Kind != NotifyTypeTermination || n.Rank != 4 || n.Exit != 9 {
		t.Fatalf("%+v, want rank 4's Termination", n)
	}
}

// TestExitsFlushedByClose: reports waiting when the agent closes the connection are sent
// before it closes.
func TestExitsFlushedByClose(t *testing.T) {
	c, sc := exitsServer(t, time.Hour)
	for r := range uint32(3) {
		if err := sc.Notify(termination(r, 0)); err != nil {
			t.Fatal(err)
		}
	}
	sc.Close()
	for r := range uint32(3) {
		if n := nextNotify(t, c); n.Kind != NotifyTypeTermination || n.Rank != r {
			t.Fatalf("%+v, want rank %d's Termination", n, r)
		}
	}
}

// TestExitsFull: reports that would not fit one message are sent as several, each within
// the frame bound, and none is lost.
func TestExitsFull(t *testing.T) {
	c, sc := exitsServer(t, time.Hour)
	_, before := c.Messages()
	const n = 20000 // squares: their distances grow, so that a range holds two at most
	for i := range uint32(n) {
		if err := sc.Notify(termination(i*i, ExitStatus(i%2))); err != nil {
			t.Fatal(err)
		}
	}
	sc.Close()
	seen := map[uint32]bool{}
	for range n {
		x := nextNotify(t, c)
		if seen[x.Rank] || x.Exit != ExitStatus(x.Rank%2) {
			t.Fatalf("%+v: not a report sent, or sent twice", x)
		}
		seen[x.Rank] = true
	}
	if _, after := c.Messages(); after-before < 2 {
		t.Errorf("%d messages for %d reports of scattered ranks: they cannot fit one", after-before, n)
	}
}

// TestExitsInterleaved: the reports of agents whose ranks interleave (a cyclic mapping: every
// third rank on each) go up as one message of a group a set, their ranks never listed, and
// an Exits of more ranks than the Client's queue holds is received whole.
func TestExitsInterleaved(t *testing.T) {
	c, sc := exitsServer(t, time.Hour)
	_, before := c.Messages()
	const n = 300000 // more than NotifyLimit's 65,536
	for first := range uint32(3) {
		b, err := Encode(&Exits{Header: hdr(9), Groups: []ExitGroup{{JobID: 77, ToolID: 5, Ranks: RankRanges{{first, n - 3 + first, 3}}}}})
		if err != nil {
			t.Fatal(err)
		}
		if err := sc.SendEncoded(b); err != nil {
			t.Fatal(err)
		}
	}
	sc.Close()
	seen := make([]bool, n)
	for range n {
		x := nextNotify(t, c)
		if x.Rank >= n || seen[x.Rank] || x.Kind != NotifyTypeTermination {
			t.Fatalf("%+v: not a report sent, or sent twice", x)
		}
		seen[x.Rank] = true
	}
	if _, after := c.Messages(); after-before != 1 {
		t.Errorf("%d messages for the reports of 3 interleaved sets, want 1", after-before)
	}
}

// TestExitsBehindCNK: an agent that answers as a CNK sends one Termination Notify a rank, to
// a tool of this version too.
func TestExitsBehindCNK(t *testing.T) {
	a := newMemAgent(4096)
	a.ext = false
	s := startServer(t, a)
	s.srv.CNK = true
	s.srv.ExitDelay = time.Hour
	c := s.dial(t, "tcp", ClientOptions{})
	sc := recvConn(t, a.opened)
	_, before := c.Messages()
	for r := range uint32(3) {
		if err := sc.Notify(termination(r, 0)); err != nil {
			t.Fatal(err)
		}
	}
	for r := range uint32(3) {
		if n := nextNotify(t, c); n.Rank != r || n.Kind != NotifyTypeTermination {
			t.Fatalf("%+v, want rank %d's Termination", n, r)
		}
	}
	if _, after := c.Messages(); after-before != 3 {
		t.Errorf("%d messages for 3 exits behind a CNK, want 3", after-before)
	}
}

// TestExitsAfterClose: a report on a connection closed is an error, as any write is.
func TestExitsAfterClose(t *testing.T) {
	_, sc := exitsServer(t, time.Hour)
	sc.Close()
	if err := sc.Notify(termination(1, 0)); err == nil {
		t.Error("a report on a closed connection: no error")
	}
}

// TestExitsToOlderTool: a tool of extension version 2 is sent one Termination Notify a rank,
// a relayed Exits included.
func TestExitsToOlderTool(t *testing.T) {
	a := newMemAgent(4096)
	s := startServer(t, a)
	cs, ss := net.Pipe()
	go s.srv.ServeConn(ss)
	defer cs.Close()
	rawHelloVersion(t, cs, []byte(testToken), 2)
	sc := recvConn(t, a.opened)
	go func() {
		sc.Notify(termination(1, 0))
		b, _ := Encode(&Exits{Header: hdr(3), Groups: []ExitGroup{{JobID: 77, ToolID: 5, Status: 256, Ranks: RankRanges{{4, 8, 2}}}}})
		sc.SendEncoded(b)
	}()
	br := bufio.NewReader(cs)
	for _, want := range []struct {
		rank   uint32
		status ExitStatus
	}{{1, 0}, {4, 256}, {6, 256}, {8, 256}} {
		m := readMessage(t, br)
		n, ok := m.(*Notify)
		if !ok || n.Kind != NotifyTypeTermination || n.Rank != want.rank || n.Exit != want.status || n.Length != notifySize {
			t.Fatalf("%#v, want the Termination Notify of rank %d", m, want.rank)
		}
	}
}

func TestExitsMalformed(t *testing.T) {
	good, err := Encode(&Exits{Header: hdr(1), Groups: []ExitGroup{
		{JobID: 1, ToolID: 2, Status: 0, Ranks: RankRanges{{0, 10, 2}}},
		{JobID: 1, ToolID: 2, Status: 256, Ranks: RanksOf(1, 3, 20)}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := DecodeMessage(good); err != nil {
		t.Fatal(err)
	}
	setLen := func(b []byte) []byte { be.PutUint32(b[20:], uint32(len(b))); return b }
	bad := map[string]func(b []byte) []byte{
		"no group":         func(b []byte) []byte { be.PutUint32(b[40:], 0); return b },
		"too many groups":  func(b []byte) []byte { be.PutUint32(b[40:], 1000); return b },
		"one group more":   func(b []byte) []byte { be.PutUint32(b[40:], 3); return b },
		"a group of none":  func(b []byte) []byte { be.PutUint32(b[48+16:], 0); return b },
		"too many ranges":  func(b []byte) []byte { be.PutUint32(b[48+16:], 400); return b },
		"a reversed range": func(b []byte) []byte { be.PutUint32(b[48+24:], 11); return b },
		"a zero stride":    func(b []byte) []byte { be.PutUint32(b[48+24+8:], 0); return b },
		"bytes after":      func(b []byte) []byte { return setLen(append(b, make([]byte, 8)...)) },
		"cut":              func(b []byte) []byte { return setLen(b[:len(b)-8]) },
		"header only":      func(b []byte) []byte { return setLen(b[:44]) },
	}
	for what, f := range bad {
		if _, err := DecodeMessage(f(bytes.Clone(good))); !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "Exits") {
			t.Errorf("%s: %v, want a malformed Exits", what, err)
		}
	}
	if _, err := Encode(&Exits{Header: hdr(1)}); err == nil {
		t.Error("an Exits of no group encoded")
	}
	if _, err := Encode(&Exits{Header: hdr(1), Groups: []ExitGroup{{Status: 1}}}); err == nil {
		t.Error("an Exits group of no rank encoded")
	}
}

// TestRouterReducesExits: in a tree of 7 agents at fan-out 2, 3 ranks each, every agent
// reports its ranks' ends (status rank % 2) on its connection up; each level merges what it
// relays into what it reports itself, and the tool receives the 21 reports in one message
// (the root's reports wait here until the next message, its ack of a Query, sends them).
func TestRouterReducesExits(t *testing.T) {
	const n, per = 7, 3
	srvs, root := simTreeWith(t, n, 2, per, simSpec{exits: func(i int) time.Duration {
		if i == 0 {
			return time.Hour
		}
		return 0
	}})
	c := dialRoot(t, root)
	ctx := testCtx(t)
	for i := range n { // a link to every agent
		if _, err := c.Traceback(ctx, uint32(i*per), 0, 0); err != nil {
			t.Fatal(err)
		}
	}
	upstream := func(s *Server) *Conn {
		s.mu.Lock()
		defer s.mu.Unlock()
		if len(s.conns) != 1 {
			t.Fatalf("%d connections to agent %s, want its parent's alone", len(s.conns), s.Node)
		}
		for sc := range s.conns {
			return sc
		}
		return nil
	}
	for i, s := range srvs {
		sc := upstream(s)
		for r := uint32(i * per); r < uint32(i*per+per); r++ {
			if err := sc.Notify(termination(r, ExitStatus(r%2))); err != nil {
				t.Fatal(err)
			}
		}
	}
	top := upstream(srvs[0])
	waitFor := time.Now().Add(10 * time.Second)
	for {
		top.wmu.Lock()
		held := 0
		for _, g := range top.exits.groups {
			held += g.Ranks.Count()
		}
		top.wmu.Unlock()
		if held == n*per {
			break
		}
		if time.Now().After(waitFor) {
			t.Fatalf("the root holds %d reports, want %d", held, n*per)
		}
		time.Sleep(time.Millisecond)
	}
	_, before := c.Messages()
	if _, err := c.Traceback(ctx, 1, 0, 0); err != nil {
		t.Fatal(err)
	}
	if _, after := c.Messages(); after-before != 2 {
		t.Errorf("%d messages for the ends of %d ranks and an ack, want 2", after-before, n*per)
	}
	seen := map[uint32]bool{}
	for range n * per {
		x := nextNotify(t, c)
		if x.Kind != NotifyTypeTermination || x.Rank >= n*per || seen[x.Rank] || x.Exit != ExitStatus(x.Rank%2) {
			t.Fatalf("%+v: not a report sent, or sent twice", x)
		}
		seen[x.Rank] = true
	}
}
