package cdti

import (
	"bytes"
	"context"
	"crypto/hmac"
	"errors"
	"io"
	"log"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// peer is the far end of a Client, driven frame by frame by the test.
type peer struct {
	t    *testing.T
	conn net.Conn
}

func newPeer(t *testing.T, opts ClientOptions) (*Client, *peer) {
	return newPeerOver(t, "pipe", opts)
}

// newPeerOver connects a Client to a test-driven peer over net.Pipe or loopback TCP.
func newPeerOver(t *testing.T, transport string, opts ClientOptions) (*Client, *peer) {
	var cs, ps net.Conn
	if transport == "pipe" {
		cs, ps = net.Pipe()
	} else {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		if cs, err = net.Dial("tcp", ln.Addr().String()); err != nil {
			t.Fatal(err)
		}
		if ps, err = ln.Accept(); err != nil {
			t.Fatal(err)
		}
	}
	c := NewClient(cs, opts)
	t.Cleanup(func() { c.Close(); ps.Close() })
	return c, &peer{t, ps}
}

func (p *peer) recv() Message {
	p.t.Helper()
	b, err := ReadFrame(p.conn)
	if err != nil {
		p.t.Fatal(err)
	}
	m, err := DecodeMessage(b)
	if err != nil {
		p.t.Fatal(err)
	}
	return m
}

func (p *peer) send(m Message) {
	p.t.Helper()
	b, err := Encode(m)
	if err != nil {
		p.t.Fatal(err)
	}
	if _, err := p.conn.Write(b); err != nil {
		p.t.Fatal(err)
	}
}

// goQuery runs a Query in the background and returns where its outcome will arrive.
func goQuery(ctx context.Context, c *Client, rank uint32) chan error {
	ch := make(chan error, 1)
	go func() {
		_, err := c.Query(ctx, rank, &GetThreadList{})
		ch <- err
	}()
	return ch
}

func threadListAck(req Message) *QueryAck {
	return &QueryAck{Header: req.Hdr().Reply(Success), Results: []Result{{Code: CmdSuccess, Ack: &GetThreadListAck{ThreadID: 1}}}}
}

func TestErrorAckFailsAllOutstanding(t *testing.T) {
	c, p := newPeer(t, ClientOptions{ToolID: 1})
	ctx := testCtx(t)
	var outs []chan error
	var reqs []Message
	for r := range 3 {
		outs = append(outs, goQuery(ctx, c, uint32(r)))
		reqs = append(reqs, p.recv())
	}
	// An ErrorAck whose echoed header matches nothing (as toolctld's stale buffer may).
	p.send(&ErrorAck{Header{Service: ServiceToolctl, SequenceID: 0xdead, ReturnCode: UnsupportedType}})
	for i, ch := range outs {
		err := <-ch
		var rc *ReturnCodeError
		if !errors.As(err, &rc) || rc.Reply != MsgErrorAck || !errors.Is(err, UnsupportedType) {
			t.Errorf("request %d: %v", i, err)
		}
	}
	// Their real acks arrive later and are discarded; the connection keeps working.
	for _, r := range reqs {
		p.send(threadListAck(r))
	}
	ch := goQuery(ctx, c, 9)
	r := p.recv()
	if r.Hdr().Rank != 9 {
		t.Fatalf("next request for rank %d", r.Hdr().Rank)
	}
	p.send(threadListAck(r))
	if err := <-ch; err != nil {
		t.Fatal(err)
	}
}

func TestSerializeOneOutstanding(t *testing.T) {
	c, p := newPeer(t, ClientOptions{ToolID: 1, Serialize: true})
	ctx := testCtx(t)
	first := goQuery(ctx, c, 1)
	second := goQuery(ctx, c, 2)
	r1 := p.recv()
	// While r1 is unanswered, nothing else may be written.
	p.conn.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if _, err := ReadFrame(p.conn); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("second request written while the first was outstanding: %v", err)
	}
	p.conn.SetReadDeadline(time.Time{})
	p.send(threadListAck(r1))
	r2 := p.recv()
	p.send(threadListAck(r2))
	for _, ch := range []chan error{first, second} {
		if err := <-ch; err != nil {
			t.Error(err)
		}
	}
	// With Serialize an ErrorAck is attributed to the single request in flight.
	ch := goQuery(ctx, c, 3)
	p.recv()
	p.send(&ErrorAck{Header{Service: ServiceToolctl, SequenceID: 0xbad, ReturnCode: WrongService}})
	if err := <-ch; !errors.Is(err, WrongService) {
		t.Errorf("errorack: %v", err)
	}
}

func TestPeerDisconnectsMidMessage(t *testing.T) {
	forTransports(t, testPeerDisconnectsMidMessage)
}

func testPeerDisconnectsMidMessage(t *testing.T, transport string) {
	c, p := newPeerOver(t, transport, ClientOptions{ToolID: 1})
	ctx := testCtx(t)
	p.send(&Notify{Header: hdr(1), Kind: NotifyTypeTermination, Exit: 9})
	var outs []chan error
	var reqs []Message
	for r := range 3 {
		outs = append(outs, goQuery(ctx, c, uint32(r)))
		reqs = append(reqs, p.recv())
	}
	b, _ := Encode(threadListAck(reqs[0]))
	p.conn.Write(b[:len(b)/2])
	p.conn.Close()
	for i, ch := range outs {
		err := <-ch
		if !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("request %d: %v", i, err)
		}
		var op *OpError
		if !errors.As(err, &op) || op.Op != "query" || op.Object != "rank "+string(rune('0'+i)) {
			t.Errorf("request %d: error does not name op and object: %v", i, err)
		}
	}
	<-c.Done()
	if _, err := c.Query(ctx, 5, &GetThreadList{}); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("after the loss: %v", err)
	}
	// The notification that arrived before the loss is still delivered, then the channel closes.
	if n, ok := <-c.Notifications(); !ok || n.Exit != 9 {
		t.Errorf("notification %#v %v", n, ok)
	}
	if _, ok := <-c.Notifications(); ok {
		t.Error("channel not closed")
	}
}

func TestContextCancellation(t *testing.T) {
	c, p := newPeer(t, ClientOptions{ToolID: 1})
	// A write the peer does not read is abandoned when the context ends; nothing was written,
	// so the connection survives.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := c.Query(ctx, 1, &GetThreadList{}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("unread write: %v", err)
	}
	if c.Err() != nil {
		t.Fatalf("connection failed: %v", c.Err())
	}
	// A request whose answer is late: the caller returns at cancellation, the late ack is
	// discarded, the next request is answered.
	ctx2, cancel2 := context.WithCancel(context.Background())
	ch := goQuery(ctx2, c, 2)
	r2 := p.recv()
	cancel2()
	if err := <-ch; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled request: %v", err)
	}
	p.send(threadListAck(r2))
	ch = goQuery(testCtx(t), c, 3)
	r3 := p.recv()
	p.send(threadListAck(r3))
	if err := <-ch; err != nil {
		t.Fatal(err)
	}
}

func TestTimeoutOption(t *testing.T) {
	c, p := newPeer(t, ClientOptions{ToolID: 1, Timeout: 30 * time.Millisecond})
	ch := goQuery(context.Background(), c, 1)
	p.recv()
	if err := <-ch; !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("timeout: %v", err)
	}
}

func TestNotifyOverflow(t *testing.T) {
	c, p := newPeer(t, ClientOptions{ToolID: 1, NotifyLimit: 4})
	go func() {
		for i := range 10 {
			b, _ := Encode(&Notify{Header: hdr(uint32(i + 1)), Kind: NotifyTypeSignal})
			if _, err := p.conn.Write(b); err != nil {
				return
			}
		}
	}()
	<-c.Done()
	if !errors.Is(c.Err(), ErrNotifyOverflow) {
		t.Fatalf("err %v", c.Err())
	}
	var got []uint32
	for n := range c.Notifications() {
		got = append(got, n.SequenceID)
	}
	// The first delivered notification may already have left the queue for the channel.
	if len(got) < 4 || len(got) > 5 || got[0] != 1 {
		t.Errorf("delivered %v", got)
	}
}

func TestAuthentication(t *testing.T) {
	a := newMemAgent(4096)
	s := startServer(t, a)
	ctx := testCtx(t)
	// A tool with another token finds the agent's proof wrong and proves nothing itself.
	_, err := Dial(ctx, "tcp", s.ln.Addr().String(), ClientOptions{Token: []byte("wrong")})
	if !errors.Is(err, ErrAuthentication) || !strings.Contains(err.Error(), "the agent did not prove the session token") {
		t.Errorf("wrong token: %v", err)
	}
	// A tool that answers the challenge with a wrong proof is refused and closed.
	conn, err := net.Dial("tcp", s.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	mine := NewNonce()
	b, _ := Encode(&Hello{Header: hdr(1), ExtVersion: ExtensionVersion, Nonce: mine})
	conn.Write(b)
	fb, err := ReadFrame(conn)
	if err != nil {
		t.Fatal(err)
	}
	ch, _ := DecodeMessage(fb)
	if ack := ch.(*HelloAck); ack.ReturnCode != Success || !hmac.Equal(ack.Proof, HelloProof([]byte(testToken), HelloRoleAgent, mine, ack.Nonce)) {
		t.Fatalf("challenge %#v", ack)
	}
	b, _ = Encode(&Hello{Header: hdr(2), ExtVersion: ExtensionVersion, Proof: HelloProof([]byte("wrong"), HelloRoleTool, ch.(*HelloAck).Nonce, mine)})
	conn.Write(b)
	if fb, err := ReadFrame(conn); err != nil || be.Uint32(fb[12:]) != uint32(ToolAuthorityError) {
		t.Errorf("reply to a wrong proof: %x %v", fb, err)
	}
	if _, err := ReadFrame(conn); err != io.EOF {
		t.Errorf("connection not closed after a wrong proof: %v", err)
	}
	// A proof made for the agent's role (a reflected proof) is refused too.
	conn2, err := net.Dial("tcp", s.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn2.Close()
	b, _ = Encode(&Hello{Header: hdr(1), ExtVersion: ExtensionVersion, Nonce: mine})
	conn2.Write(b)
	fb, _ = ReadFrame(conn2)
	ch, _ = DecodeMessage(fb)
	b, _ = Encode(&Hello{Header: hdr(2), ExtVersion: ExtensionVersion, Proof: ch.(*HelloAck).Proof})
	conn2.Write(b)
	if fb, err := ReadFrame(conn2); err != nil || be.Uint32(fb[12:]) != uint32(ToolAuthorityError) {
		t.Errorf("reply to a reflected proof: %x %v", fb, err)
	}
	// A first message other than Hello gets ErrorAck(ToolAuthorityError) and the connection closes.
	conn, err = net.Dial("tcp", s.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	b, _ = Encode(&Attach{Header: hdr(1)})
	conn.Write(b)
	if m, err := ReadFrame(conn); err != nil || MessageType(be.Uint16(m[2:])) != MsgErrorAck || be.Uint32(m[12:]) != uint32(ToolAuthorityError) {
		t.Errorf("reply to Attach before Hello: %x %v", m, err)
	}
	if _, err := ReadFrame(conn); err != io.EOF {
		t.Errorf("connection not closed: %v", err)
	}
	select {
	case c := <-a.opened:
		t.Errorf("unauthenticated connection %d was opened", c.ID())
	default:
	}
	// The right token works, and never travels.
	cs, ss := net.Pipe()
	go s.srv.ServeConn(ss)
	sent := &recordingConn{Conn: cs}
	c := NewClient(sent, ClientOptions{Token: []byte(testToken)})
	defer c.Close()
	if _, err := c.Hello(ctx, []byte(testToken)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Query(ctx, 1, &GetThreadList{}); err != nil {
		t.Error(err)
	}
	if bytes.Contains(sent.bytes(), []byte(testToken)) {
		t.Errorf("the token was sent")
	}
}

// recordingConn keeps what is written through it.
type recordingConn struct {
	net.Conn
	mu  sync.Mutex
	out []byte
}

func (c *recordingConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	c.out = append(c.out, p...)
	c.mu.Unlock()
	return c.Conn.Write(p)
}

func (c *recordingConn) bytes() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]byte(nil), c.out...)
}

// TestMalformedFrameClosesOnlyThatConnection: bad frames end their own connection (the
// CloseHandler sees why) while another connection keeps working.
func TestMalformedFrameClosesOnlyThatConnection(t *testing.T) {
	a := newMemAgent(4096)
	s := startServer(t, a)
	ctx := testCtx(t)
	good := s.dial(t, "tcp", ClientOptions{ToolID: 1})
	<-a.opened
	badQuery, _ := Encode(&Query{Header: hdr(2), Commands: []Command{&GetThreadList{}}})
	be.PutUint32(badQuery[44+4:], 400) // descriptor points past the end
	for name, frame := range map[string][]byte{
		"length 31":           frameWithLength(31, 0),
		"length 65537":        frameWithLength(65537, 0),
		"short attach":        withU32(withU32(make([]byte, 44), 0, 0x05061389), 20, 44),
		"descriptor past end": badQuery,
		"header only":         withU32(withU32(make([]byte, 32), 0, 0x05061389), 20, 32),
		"half a message":      withU32(withU32(make([]byte, 30), 0, 0x05061389), 20, 56),
	} {
		t.Run(name, func(t *testing.T) {
			bad := s.dial(t, "tcp", ClientOptions{ToolID: 2})
			<-a.opened
			bad.wmu.Lock()
			bad.conn.Write(frame)
			if name == "half a message" {
				bad.conn.(*net.TCPConn).CloseWrite() // the peer goes away mid-message
			}
			bad.wmu.Unlock()
			<-bad.Done()
			if !errors.Is(bad.Err(), ErrPeerClosed) {
				t.Errorf("bad connection: %v", bad.Err())
			}
			if err := <-a.closed; err == nil {
				t.Error("CloseHandler saw no error")
			}
			if _, err := good.Query(ctx, 1, &GetThreadList{}); err != nil {
				t.Errorf("other connection: %v", err)
			}
		})
	}
}

type checkingAgent struct {
	*memAgent
	rc ReturnCode
}

func (a checkingAgent) Check(c *Conn, h *Header) ReturnCode { return a.rc }

func TestCheckerRunsFirst(t *testing.T) {
	a := checkingAgent{newMemAgent(4096), ToolIdError}
	s := startServer(t, a)
	c := s.dial(t, "pipe", ClientOptions{ToolID: 1})
	b, _ := EncodeLax(&Update{Commands: []Command{&StepThread{}, &ContinueProcess{}}})
	if _, err := c.RoundTripEncoded(testCtx(t), b); !errors.Is(err, ToolIdError) {
		t.Errorf("checker: %v", err)
	}
}

func TestServerClose(t *testing.T) {
	a := newMemAgent(4096)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &Server{Handler: a, Token: []byte(testToken)}
	served := make(chan error)
	go func() { served <- srv.Serve(ln) }()
	var clients []*Client
	for range 3 {
		c, err := Dial(testCtx(t), "tcp", ln.Addr().String(), ClientOptions{Token: []byte(testToken)})
		if err != nil {
			t.Fatal(err)
		}
		<-a.opened
		clients = append(clients, c)
	}
	srv.Close()
	if err := <-served; !errors.Is(err, ErrServerClosed) {
		t.Errorf("Serve: %v", err)
	}
	for range clients {
		<-a.closed
	}
	var wg sync.WaitGroup
	for _, c := range clients {
		wg.Go(func() {
			<-c.Done()
			c.Close()
		})
	}
	wg.Wait()
}

// panicAgent is a memAgent whose Query panics on a GetMemory of address 0xdead.
type panicAgent struct{ *memAgent }

func (a panicAgent) Query(c *Conn, m *Query) ([]Result, ReturnCode) {
	for _, cmd := range m.Commands {
		if g, ok := cmd.(*GetMemory); ok && g.Addr == 0xdead {
			var table []Result
			_ = table[g.Addr] // index out of range, as a handler bug would
		}
	}
	return a.memAgent.Query(c, m)
}

// TestServerRecoversHandlerPanic: a request whose handler panics is answered with
// RequestFailed, its connection alone is closed (the CloseHandler hears ErrInternal), and the
// server's other connections and new ones are served.
func TestServerRecoversHandlerPanic(t *testing.T) {
	a := newMemAgent(1 << 20)
	var logBuf syncBuffer
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &testServer{srv: &Server{Handler: panicAgent{a}, Token: []byte(testToken), ErrorLog: log.New(&logBuf, "", 0)}, ln: ln}
	go s.srv.Serve(ln)
	t.Cleanup(func() { s.srv.Close() })
	ctx := testCtx(t)
	other := s.dial(t, "tcp", ClientOptions{ToolID: 2})
	victim := s.dial(t, "tcp", ClientOptions{ToolID: 1})
	_, err = victim.Query(ctx, 3, &GetMemory{Addr: 0xdead, Length: 8})
	var rce *ReturnCodeError
	if !errors.As(err, &rce) || rce.Code != RequestFailed {
		t.Fatalf("query that panics: %v, want RequestFailed", err)
	}
	<-victim.Done()
	if err := <-a.closed; !errors.Is(err, ErrInternal) {
		t.Errorf("close handler heard %v, want ErrInternal", err)
	}
	if !strings.Contains(logBuf.String(), "panic: runtime error: index out of range") {
		t.Errorf("error log lacks the panic:\n%s", logBuf.String())
	}
	for _, c := range []*Client{other, s.dial(t, "tcp", ClientOptions{ToolID: 3})} {
		if rs, err := c.Query(ctx, 3, &GetMemory{Addr: a.base, Length: 8}); err != nil || rs[0].Code != CmdSuccess {
			t.Errorf("query on another connection after the panic: %v, %v", rs, err)
		}
	}
}

// syncBuffer is a bytes.Buffer safe for concurrent writers.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
