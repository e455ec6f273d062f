package cdti

import (
	"bufio"
	"net"
	"sync"
	"testing"
	"time"
)

// sessionAgent records the connections its Server opens and closes.
type sessionAgent struct {
	opened chan *Conn
	closed chan *Conn
}

func (a *sessionAgent) Opened(c *Conn)            { a.opened <- c }
func (a *sessionAgent) Closed(c *Conn, err error) { a.closed <- c }

// startSessionServer serves a sessionAgent with the given grace.
func startSessionServer(t *testing.T, grace time.Duration) (*sessionAgent, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := &sessionAgent{opened: make(chan *Conn, 8), closed: make(chan *Conn, 8)}
	srv := &Server{Handler: a, Token: []byte(testToken), ResumeGrace: grace}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return a, ln.Addr().String()
}

// dialSession connects to addr as a Router's link of session id.
func dialSession(t *testing.T, addr string, id [SessionIDSize]byte) (net.Conn, *bufio.Reader, SessionState) {
	t.Helper()
	nc, br, st, err := dialAgent(testCtx(t), addr, []byte(testToken), id, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return nc, br, st
}

// waitHeld waits until c's transport has failed and c is held.
func waitHeld(t *testing.T, c *Conn) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c.wmu.Lock()
		held := c.suspended
		c.wmu.Unlock()
		if held {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the connection was not held after its transport broke")
		}
		time.Sleep(time.Millisecond)
	}
}

func recv(t *testing.T, ch chan *Conn, what string) *Conn {
	t.Helper()
	select {
	case c := <-ch:
		return c
	case <-time.After(10 * time.Second):
		t.Fatalf("no connection %s", what)
		return nil
	}
}

// TestSessionResume: a connection that names a session and loses its transport without a
// farewell is held, its handler not told; the notifications sent meanwhile are kept; another
// connection naming the session resumes it (the same Conn, its context live) and receives
// them first. A farewell then ends it at once, and the session cannot be resumed again.
func TestSessionResume(t *testing.T) {
	a, addr := startSessionServer(t, time.Minute)
	id := newSessionID()
	nc, _, st := dialSession(t, addr, id)
	if st != SessionNew {
		t.Fatalf("first link: %v, want new", st)
	}
	c := recv(t, a.opened, "opened")
	if got, ok := c.Session(); !ok || got != id {
		t.Fatalf("session %x %v, want %x", got, ok, id)
	}
	nc.Close() // as when the agent above is killed
	waitHeld(t, c)
	for i := range 3 {
		if err := c.Notify(&Notify{Header: Header{Rank: uint32(i)}, Kind: NotifyTypeSignal, Signal: NotifySignal{Signal: 5}}); err != nil {
			t.Fatalf("notify while held: %v", err)
		}
	}
	// Two ranks' ends and a stop after them: kept as one Exits, then the stop.
	for r := range uint32(2) {
		if err := c.Notify(&Notify{Header: Header{Rank: 3 + r}, Kind: NotifyTypeTermination, Exit: 256}); err != nil {
			t.Fatalf("exit while held: %v", err)
		}
	}
	if err := c.Notify(&Notify{Header: Header{Rank: 5}, Kind: NotifyTypeSignal, Signal: NotifySignal{Signal: 5}}); err != nil {
		t.Fatalf("notify while held: %v", err)
	}
	select {
	case <-a.closed:
		t.Fatal("the handler was told of the close of a held connection")
	case <-c.Context().Done():
		t.Fatal("the held connection's context ended")
	default:
	}

	nc2, br, st := dialSession(t, addr, id)
	if st != SessionResumed {
		t.Fatalf("second link: %v, want resumed", st)
	}
	recv(t, a.opened, "opened for the resuming connection") // the transport's own, soon closed
	for i := range 3 {
		m := readMessage(t, br)
		if n, ok := m.(*Notify); !ok || n.Rank != uint32(i) {
			t.Fatalf("kept notification %d: %+v", i, m)
		}
	}
	for _, want := range []MessageType{MsgExits, MsgNotify} {
		m := readMessage(t, br)
		switch m := m.(type) {
		case *Exits:
			if want != MsgExits || len(m.Groups) != 1 || !m.Groups[0].Ranks.Equal(RanksOf(3, 4)) || m.Groups[0].Status != 256 {
				t.Fatalf("kept %+v, want the Exits of ranks 3 and 4", m)
			}
		case *Notify:
			if want != MsgNotify || m.Rank != 5 || m.Kind != NotifyTypeSignal {
				t.Fatalf("kept %+v, want rank 5's stop after the exits", m)
			}
		default:
			t.Fatalf("kept %v, want %v", m.MessageType(), want)
		}
	}
	if err := c.Notify(&Notify{Header: Header{Rank: 9}, Kind: NotifyTypeSignal, Signal: NotifySignal{Signal: 5}}); err != nil {
		t.Fatal(err)
	}
	b, err := ReadFrame(br)
	if err != nil {
		t.Fatalf("notify after the resumption: %v", err)
	}
	if h, _ := ParseHeader(b); h.Type != MsgNotify || h.Rank != 9 {
		t.Fatalf("after the resumption: %v for rank %d", h.Type, h.Rank)
	}
	if closed := recv(t, a.closed, "closed for the resuming connection"); closed == c {
		t.Fatal("the held connection was closed by its resumption")
	}

	end, _ := Encode(&Session{Header: Header{Service: ServiceToolctl, Version: ProtocolVersion}, Flags: SessionEnd})
	if _, err := nc2.Write(end); err != nil {
		t.Fatal(err)
	}
	if closed := recv(t, a.closed, "closed after the farewell"); closed != c {
		t.Fatal("another connection closed after the farewell")
	}
	if _, _, st := dialSession(t, addr, id); st != SessionEnded {
		t.Fatalf("resuming after the farewell: %v, want ended", st)
	}
}

// TestSessionGrace: a held connection that nobody resumes within the grace ends as any other
// (its handler drops the tool), and the session is then answered ended.
func TestSessionGrace(t *testing.T) {
	a, addr := startSessionServer(t, 50*time.Millisecond)
	id := newSessionID()
	nc, _, _ := dialSession(t, addr, id)
	c := recv(t, a.opened, "opened")
	nc.Close()
	if closed := recv(t, a.closed, "closed after the grace"); closed != c {
		t.Fatal("another connection closed")
	}
	nc2, br, st, err := dialAgent(testCtx(t), addr, []byte(testToken), id, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer nc2.Close()
	if st != SessionEnded {
		t.Fatalf("resuming a dropped session: %v, want ended", st)
	}
	if _, err := ReadFrame(br); err == nil {
		t.Fatal("the agent kept the connection of a dropped session open")
	}
}

// TestSessionPlainConnection: a connection that names no session ends at once when its
// transport breaks, as before sessions.
func TestSessionPlainConnection(t *testing.T) {
	a, addr := startSessionServer(t, time.Minute)
	c, err := Dial(testCtx(t), "tcp", addr, ClientOptions{ToolID: 1, Token: []byte(testToken)})
	if err != nil {
		t.Fatal(err)
	}
	conn := recv(t, a.opened, "opened")
	c.Close()
	if closed := recv(t, a.closed, "closed"); closed != conn {
		t.Fatal("another connection closed")
	}
}

// TestSessionConcurrentResumptions: several links resume one held session one after the
// other while notifications are sent; the connection stays one, and the last link gets
// what is sent after it took over.
func TestSessionConcurrentResumptions(t *testing.T) {
	a, addr := startSessionServer(t, time.Minute)
	id := newSessionID()
	nc, _, _ := dialSession(t, addr, id)
	c := recv(t, a.opened, "opened")
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := uint32(0); ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			c.Notify(&Notify{Header: Header{Rank: i % 100}, Kind: NotifyTypeSignal, Signal: NotifySignal{Signal: 5}})
			time.Sleep(100 * time.Microsecond)
		}
	})
	nc.Close()
	var br *bufio.Reader
	for range 5 {
		var st SessionState
		_, br, st = dialSession(t, addr, id)
		if st != SessionResumed {
			close(stop)
			t.Fatalf("resumption: %v", st)
		}
	}
	close(stop)
	wg.Wait()
	if err := c.Notify(&Notify{Header: Header{Rank: 1000}, Kind: NotifyTypeSignal, Signal: NotifySignal{Signal: 5}}); err != nil {
		t.Fatal(err)
	}
	for {
		b, err := ReadFrame(br)
		if err != nil {
			t.Fatalf("the last link: %v", err)
		}
		if h, _ := ParseHeader(b); h.Rank == 1000 {
			break
		}
	}
	stillHeld(t, a, c)
}

// TestSessionCloseEnds: a connection the agent closes on purpose (as the agent does when a
// tool's notifications overflow, or after an internal error) ends for good although it names
// a session: the handler is told, and an agent above that dials the session again is
// answered that it ended, instead of resuming a connection nothing notifies any more.
func TestSessionCloseEnds(t *testing.T) {
	a, addr := startSessionServer(t, time.Minute)
	id := newSessionID()
	dialSession(t, addr, id)
	c := recv(t, a.opened, "opened")
	c.Close()
	if closed := recv(t, a.closed, "closed after the agent's Close"); closed != c {
		t.Fatal("another connection closed")
	}
	if c.Context().Err() == nil {
		t.Fatal("the closed connection's context is live")
	}
	if _, _, st, err := dialAgent(testCtx(t), addr, []byte(testToken), id, 0); err == nil && st != SessionEnded {
		t.Fatalf("dialing the session after the agent's Close: %v, want ended", st)
	}
}

// TestSessionResumeNeedsToken: only an authenticated connection resumes a held session: a
// wrong token is refused, a Session sent before any Hello is not answered with a SessionAck,
// and neither disturbs the held connection, which a proper link then resumes.
func TestSessionResumeNeedsToken(t *testing.T) {
	a, addr := startSessionServer(t, time.Minute)
	id := newSessionID()
	nc, _, _ := dialSession(t, addr, id)
	c := recv(t, a.opened, "opened")
	nc.Close()
	waitHeld(t, c)
	if _, _, st, err := dialAgent(testCtx(t), addr, []byte("wrong-token-wrong-token-wrong-to"), id, 0); err == nil {
		t.Fatalf("resumed with a wrong token: %v", st)
	}
	raw, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	b, err := Encode(&Session{Header: Header{Service: ServiceToolctl, Version: ProtocolVersion}, ID: id})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Write(b); err != nil {
		t.Fatal(err)
	}
	raw.SetReadDeadline(time.Now().Add(10 * time.Second))
	if fr, err := ReadFrame(bufio.NewReader(raw)); err == nil {
		if h, _ := ParseHeader(fr); h.Type == MsgSessionAck && h.ReturnCode == Success {
			t.Fatal("a Session before the Hello was answered")
		}
	}
	raw.Close()
	if _, _, st, err := dialAgent(testCtx(t), addr, []byte(testToken), id, 0); err != nil || st != SessionResumed {
		t.Fatalf("resuming after the refused attempts: %v, %v", st, err)
	}
	stillHeld(t, a, c)
}

// TestSessionResumeWriteFails: when the transport of a resumption fails while the kept
// notifications are being sent on it, those it did not carry stay kept, and the next
// resumption delivers them in order.
func TestSessionResumeWriteFails(t *testing.T) {
	id0 := newSessionID()
	a := &sessionAgent{opened: make(chan *Conn, 8), closed: make(chan *Conn, 8)}
	srv := &Server{Handler: a, Token: []byte(testToken), ResumeGrace: time.Minute}
	t.Cleanup(func() { srv.Close() })
	// pipe serves one connection of srv over a synchronous in-memory transport (each frame
	// written is read whole, the reader taking exactly what it asks for) and names the session.
	pipe := func() (net.Conn, *bufio.Reader, SessionState) {
		t.Helper()
		tool, agent := net.Pipe()
		go srv.ServeConn(agent)
		nc, br, st, err := helloAgent(testCtx(t), tool, "pipe", []byte(testToken), id0, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nc.Close() })
		nc.SetReadDeadline(time.Now().Add(10 * time.Second)) // a notification lost fails, not hangs
		return nc, br, st
	}
	nc, _, _ := pipe()
	c := recv(t, a.opened, "opened")
	nc.Close()
	waitHeld(t, c)
	for i := range 3 {
		if err := c.Notify(&Notify{Header: Header{Rank: uint32(i)}, Kind: NotifyTypeSignal, Signal: NotifySignal{Signal: 5}}); err != nil {
			t.Fatal(err)
		}
	}
	readRank := func(br *bufio.Reader) uint32 {
		t.Helper()
		b, err := ReadFrame(br)
		if err != nil {
			t.Fatal(err)
		}
		h, _ := ParseHeader(b)
		if h.Type != MsgNotify {
			t.Fatalf("got %v, want a kept Notify", h.Type)
		}
		return h.Rank
	}
	nc, br, st := pipe()
	if st != SessionResumed {
		t.Fatalf("first resumption: %v", st)
	}
	if r := readRank(br); r != 0 {
		t.Fatalf("first kept notification for rank %d, want 0", r)
	}
	nc.Close() // the rest cannot be written
	waitHeld(t, c)
	_, br, st = pipe()
	if st != SessionResumed {
		t.Fatalf("second resumption: %v", st)
	}
	for want := uint32(1); want < 3; want++ {
		if r := readRank(br); r != want {
			t.Fatalf("kept notification for rank %d, want %d", r, want)
		}
	}
}

// TestSessionUnwritten: the kept notifications left after a failed write are those not
// written whole, none when the write reported every byte written with its error.
func TestSessionUnwritten(t *testing.T) {
	held := [][]byte{make([]byte, 10), make([]byte, 20), make([]byte, 5)}
	for _, tc := range []struct {
		n    int64
		want int
	}{{0, 3}, {9, 3}, {10, 2}, {29, 2}, {30, 1}, {34, 1}, {35, 0}} {
		got := unwritten(held, tc.n)
		if len(got) != tc.want {
			t.Errorf("%d bytes written: %d frames left, want %d", tc.n, len(got), tc.want)
			continue
		}
		if tc.want > 0 && &got[0][0] != &held[3-tc.want][0] {
			t.Errorf("%d bytes written: the frames left are not the last %d", tc.n, tc.want)
		}
	}
}

// stillHeld fails the test if a has been told that its held connection c ended.
func stillHeld(t *testing.T, a *sessionAgent, c *Conn) {
	t.Helper()
	select {
	case cl := <-a.closed:
		if cl == c {
			t.Fatal("the held connection ended")
		}
	default:
	}
}
