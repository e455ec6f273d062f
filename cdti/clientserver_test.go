package cdti

import (
	"bytes"
	"context"
	"crypto/hmac"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func forTransports(t *testing.T, f func(t *testing.T, transport string)) {
	for _, tr := range []string{"pipe", "tcp"} {
		t.Run(tr, func(t *testing.T) { f(t, tr) })
	}
}

func TestClientServerSession(t *testing.T) {
	forTransports(t, func(t *testing.T, tr string) {
		a := newMemAgent(1 << 20)
		s := startServer(t, a)
		c := s.dial(t, tr, ClientOptions{ToolID: 7, JobID: 0x1234})
		ctx := testCtx(t)

		ack, err := c.Attach(ctx, 3, RanksInNode, NewTag("hpcdap"), 50)
		if err != nil || len(ack.Ranks) != 1 || ack.Ranks[0] != 3 || ack.SequenceID == 0 || ack.JobID != 0x1234 || ack.ToolID != 7 {
			t.Fatalf("attach: %#v, %v", ack, err)
		}
		if _, err := c.Attach(ctx, 3, RankInHeader, NewTag("x"), 13); !errors.Is(err, ToolPriorityConflict) {
			t.Errorf("attach with a conflicting priority: %v", err)
		} else if want := "cdti: attach rank 3: AttachAck ToolPriorityConflict (31)"; err.Error() != want {
			t.Errorf("error text %q, want %q", err, want)
		}

		cack, err := c.Control(ctx, 3, Control{NotifySet: Signals(5, 19), SendSignal: 19})
		if err != nil || cack.ControllingToolID != 7 {
			t.Fatalf("control: %#v, %v", cack, err)
		}
		n := <-c.Notifications()
		if n.Kind != NotifyTypeSignal || n.Signal.Signal != 19 || n.Rank != 3 || n.Version != ProtocolVersion {
			t.Errorf("notify after control: %#v", n)
		}
		cack, err = c.Control(ctx, 3, Control{})
		var rce *ReturnCodeError
		if !errors.As(err, &rce) || rce.Code != ToolControlConflict || rce.ErrorCode != 1 || cack == nil ||
			cack.ControllingToolID != 99 || cack.Tag.String() != "other" {
			t.Errorf("control conflict: %#v, %v", cack, err)
		}

		// One Query with several commands; unknown command types are answered by the framework.
		rs, err := c.Query(ctx, 3, &GetMemory{Addr: a.base + 8, Length: 16}, &RawCommand{Type: 4242, ThreadID: 9, Data: make([]byte, 24)},
			&GetThreadList{}, &GetMemory{Addr: 0x10, Length: 4})
		if err != nil {
			t.Fatal(err)
		}
		if m := rs[0].Ack.(*GetMemoryAck); !bytes.Equal(m.Data, memPattern(a.base+8, 16)) {
			t.Errorf("memory %x", m.Data)
		}
		if rs[1].Code != CmdInval || rs[1].Type != 4243 || rs[1].Ack.(*BareAck).ThreadID != 9 {
			t.Errorf("unknown command result %#v", rs[1])
		}
		if _, ok := a.lastCmd[1].(*RawCommand); !ok {
			t.Errorf("handler saw %T for the unknown command", a.lastCmd[1])
		}
		if tl := rs[2].Ack.(*GetThreadListAck); len(tl.Threads) != 2 || !tl.Threads[1].CommThread {
			t.Errorf("thread list %#v", tl)
		}
		if rs[3].Code != CmdAddrErr {
			t.Errorf("bad address: %v", rs[3].Code)
		}

		// Large transfers split across commands and messages.
		data := bytes.Repeat([]byte("0123456789abcdefXYZ"), 15000) // 285000 bytes
		if err := c.WriteMemory(ctx, 3, 0, a.base+1001, data, SpecAccessUseThreadState, SharedMemoryAllow); err != nil {
			t.Fatal(err)
		}
		got, err := c.ReadMemory(ctx, 3, 0, a.base+1001, len(data), SpecAccessUseThreadState)
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("read back %d bytes: %v", len(got), err)
		}
		got, err = c.ReadMemory(ctx, 3, 0, a.base+uint64(len(a.mem))-70000, 140000, SpecAccessUseThreadState)
		if !errors.Is(err, CmdAddrErr) || len(got) != 65024 {
			t.Errorf("read across the end: %d bytes, %v", len(got), err)
		}

		// Batches of any length, in order; per-command failures stay in the results.
		var many []Command
		for i := range 40 {
			many = append(many, &GetMemory{Addr: a.base + 600000 + uint64(i)*100, Length: 100})
		}
		many = append(many, &GetMemory{Addr: 8, Length: 1})
		brs, err := c.QueryBatch(ctx, 3, many)
		if err != nil || len(brs) != 41 {
			t.Fatalf("query batch: %d results, %v", len(brs), err)
		}
		for i, r := range brs[:40] {
			if r.Err() != nil || !bytes.Equal(r.Ack.(*GetMemoryAck).Data, memPattern(a.base+600000+uint64(i)*100, 100)) {
				t.Errorf("batch result %d: %v", i, r.Err())
			}
		}
		if !errors.Is(brs[40].Err(), CmdAddrErr) {
			t.Errorf("batch result 40: %v", brs[40].Err())
		}
		var sets []Command
		for i := range 20 {
			sets = append(sets, &SetMemory{Addr: a.base + uint64(i), Data: []byte{byte(i)}})
		}
		sets = append(sets, &ContinueProcess{}, &HoldThread{ThreadID: 1})
		urs0, err := c.UpdateBatch(ctx, 3, sets)
		if err != nil || len(urs0) != 22 {
			t.Fatalf("update batch: %d results, %v", len(urs0), err)
		}
		if got, _ := c.ReadMemory(ctx, 3, 0, a.base, 20, SpecAccessUseThreadState); got[19] != 19 || got[7] != 7 {
			t.Errorf("after update batch: %x", got)
		}
		if ts, err := c.ThreadList(ctx, 3); err != nil || len(ts) != 2 || ts[0].TID != 100 {
			t.Errorf("thread list %v, %v", ts, err)
		}

		// Update with an action command and a signal reported after the ack.
		urs, err := c.Update(ctx, 3, &SendSignal{Signal: 10}, &HoldThread{ThreadID: 101}, &ContinueProcess{})
		if err != nil || len(urs) != 3 || urs[1].Ack.(*HoldThreadAck).ThreadID != 101 {
			t.Fatalf("update: %#v, %v", urs, err)
		}
		if n := <-c.Notifications(); n.Signal.Signal != 10 {
			t.Errorf("notify after update: %#v", n)
		}
		if _, err := c.Update(ctx, 3, &ContinueProcess{}, &HoldThread{}); !errors.Is(err, ErrActionNotLast) {
			t.Errorf("invalid update sent: %v", err)
		}

		// Extensions.
		ti, err := c.TargetInfo(ctx, 3)
		if err != nil || ti.Pid != 4242 || ti.Exe != "/bin/app" || ti.PtrSize != 8 {
			t.Errorf("target info %#v, %v", ti, err)
		}
		regs, err := c.RegisterSet(ctx, 3, 100, RegSetGeneral)
		if err != nil || len(regs) != 216 || regs[215] != 215 {
			t.Errorf("general registers: %d bytes, %v", len(regs), err)
		}
		fregs, err := c.RegisterSet(ctx, 3, 100, RegSetFloat) // larger than the default bound: asked again
		if err != nil || len(fregs) != 6000 {
			t.Errorf("float registers: %d bytes, %v", len(fregs), err)
		}
		if err := c.SetRegisterSet(ctx, 3, 100, RegSetGeneral, []byte{1, 2, 3}); err != nil {
			t.Error(err)
		}
		if regs, _ := c.RegisterSet(ctx, 3, 100, RegSetGeneral); !bytes.Equal(regs, []byte{1, 2, 3}) {
			t.Errorf("registers after set: %x", regs)
		}
		fs, err := c.Traceback(ctx, 3, 100, 2)
		if err != nil || len(fs) != 2 || fs[1].PC != 0x401001 {
			t.Errorf("traceback %#v, %v", fs, err)
		}
		a.mu.Lock()
		a.ext = false // now the agent answers like a BG/Q CNK
		a.mu.Unlock()
		if _, err := c.TargetInfo(ctx, 3); !errors.Is(err, ErrNotSupported) {
			t.Errorf("target info on BG/Q: %v", err)
		}
		if _, err := c.Traceback(ctx, 3, 0, 0); !errors.Is(err, ErrNotSupported) {
			t.Errorf("traceback on BG/Q: %v", err)
		}
		if _, err := c.CallFunction(ctx, 3, &CallFunction{Entry: 0x401000}); !errors.Is(err, ErrNotSupported) {
			t.Errorf("call function on BG/Q: %v", err)
		}

		if d, err := c.Detach(ctx, 3, RanksInNode); err != nil || d.Ranks[0] != 3 {
			t.Errorf("detach %#v, %v", d, err)
		}
		c.Close()
		select {
		case err := <-a.closed:
			if err != nil {
				t.Errorf("server saw %v at a clean close", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("CloseHandler not called")
		}
		if _, err := c.Attach(ctx, 3, RankInHeader, Tag{}, 1); !errors.Is(err, ErrClosed) {
			t.Errorf("after Close: %v", err)
		}
	})
}

// TestPipelinedQueries: 1000 goroutines share one connection while the agent streams Notify
// messages; every query gets its own answer and every notification arrives, in order.
func TestPipelinedQueries(t *testing.T) {
	forTransports(t, func(t *testing.T, tr string) {
		a := newMemAgent(1 << 16)
		s := startServer(t, a)
		c := s.dial(t, tr, ClientOptions{ToolID: 1})
		ctx := testCtx(t)
		srvConn := <-a.opened

		const notifies = 300
		go func() {
			for i := range notifies {
				srvConn.Notify(&Notify{Kind: NotifyTypeSignal, Signal: NotifySignal{Signal: 5, ThreadID: uint32(i)}})
			}
		}()
		var wg sync.WaitGroup
		errs := make(chan error, 1000)
		for i := range 1000 {
			wg.Go(func() {
				addr := a.base + uint64(i*61%(1<<16-64))
				rs, err := c.Query(ctx, uint32(i), &GetMemory{Addr: addr, Length: uint32(8 + i%50)})
				if err != nil {
					errs <- err
					return
				}
				m := rs[0].Ack.(*GetMemoryAck)
				if m.Addr != addr || !bytes.Equal(m.Data, memPattern(addr, 8+i%50)) {
					errs <- fmt.Errorf("query %d: answer for %#x", i, m.Addr)
				}
			})
		}
		for i := range notifies {
			select {
			case n := <-c.Notifications():
				if n.Signal.ThreadID != uint32(i) || n.SequenceID != uint32(i+1) {
					t.Fatalf("notification %d: thread %d seq %d", i, n.Signal.ThreadID, n.SequenceID)
				}
			case <-ctx.Done():
				t.Fatalf("notification %d missing", i)
			}
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
	})
}

// TestAckThenNotifyOrder reads the raw stream: the Notify a handler defers with AfterReply
// follows the UpdateAck.
func TestAckThenNotifyOrder(t *testing.T) {
	a := newMemAgent(4096)
	s := startServer(t, a)
	cs, ss := net.Pipe()
	go s.srv.ServeConn(ss)
	defer cs.Close()
	send := func(m Message) {
		b, err := Encode(m)
		if err != nil {
			t.Fatal(err)
		}
		if err := WriteFrame(cs, b); err != nil {
			t.Fatal(err)
		}
	}
	recv := func() Message { return readMessage(t, cs) }
	if m := rawHello(t, cs, []byte(testToken)); m.Node != "node7" || m.Hdr().ReturnCode != Success {
		t.Fatalf("hello ack %#v", m)
	}
	send(&Update{Header: hdr(2), Commands: []Command{&SendSignal{Signal: 12}, &ContinueProcess{}}})
	if m := recv(); m.MessageType() != MsgUpdateAck || m.Hdr().SequenceID != 2 {
		t.Fatalf("first message %v", m.MessageType())
	}
	if m := recv(); m.MessageType() != MsgNotify || m.(*Notify).Signal.Signal != 12 {
		t.Fatalf("second message %#v", m)
	}
}

func TestServerLimits(t *testing.T) {
	a := newMemAgent(1 << 17)
	s := startServer(t, a)
	c := s.dial(t, "pipe", ClientOptions{ToolID: 1})
	ctx := testCtx(t)
	lax := func(m Message) Message {
		b, err := EncodeLax(m)
		if err != nil {
			t.Fatal(err)
		}
		reply, err := c.roundTripRaw(ctx, b)
		if err != nil && !errors.As(err, new(*ReturnCodeError)) {
			t.Fatal(err)
		}
		return reply
	}
	// Two action commands: the whole Update is refused, nothing runs.
	r := lax(&Update{Commands: []Command{&StepThread{}, &ContinueProcess{}}})
	if r.Hdr().ReturnCode != ToolConflictingCmds || len(r.(*UpdateAck).Results) != 0 {
		t.Errorf("two actions: %v", r.Hdr().ReturnCode)
	}
	// 17 commands: numCommands beyond the descriptor array.
	b, _ := EncodeLax(&Query{Commands: repeat(func() Command { return &GetThreadList{} }, 1)})
	be.PutUint16(b[40:], 17)
	if r, _ := c.roundTripRaw(ctx, b); r.Hdr().ReturnCode != ToolNumberOfCmdsExceeded {
		t.Errorf("17 commands: %v", r.Hdr().ReturnCode)
	}
	// Oversize memory commands and commands of the wrong kind are answered by the framework.
	r = lax(&Query{Commands: []Command{&GetMemory{Addr: a.base, Length: 65025}, &HoldThread{ThreadID: 4},
		&GetMemory{Addr: a.base, Length: 8}}})
	rs := r.(*QueryAck).Results
	if rs[0].Code != CmdLngthErr || rs[0].Ack.Thread() != 0 || rs[1].Code != CmdInval || rs[1].Type != TypeHoldThreadAck ||
		rs[2].Code != CmdSuccess {
		t.Errorf("framework answers: %#v", rs)
	}
	r = lax(&Update{Commands: []Command{&SetMemory{Addr: a.base, Data: make([]byte, 65100)}}})
	if rs := r.(*UpdateAck).Results; rs[0].Code != CmdParmErr {
		t.Errorf("oversize SetMemory: %v", rs[0].Code)
	}
	// Acks beyond the 64 KiB buffer become CmdAllocErr, as in CNK.
	r = lax(&Query{Commands: []Command{&GetMemory{Addr: a.base, Length: 65024}, &GetMemory{Addr: a.base, Length: 600},
		&GetThreadList{}}})
	rs = r.(*QueryAck).Results
	if rs[0].Code != CmdSuccess || rs[1].Code != CmdAllocErr || rs[1].Ack != nil || rs[2].Code != CmdAllocErr {
		t.Errorf("ack overflow: %v %v %v", rs[0].Code, rs[1].Code, rs[2].Code)
	}
	if n := r.Hdr().Length; n > SmallMessageRegionSize {
		t.Errorf("ack of %d bytes", n)
	}
	// Control without a ControlHandler implementation → ErrorAck(UnsupportedType).
	s2 := startServer(t, struct{ QueryHandler }{a})
	c2 := s2.dial(t, "tcp", ClientOptions{ToolID: 2})
	if _, err := c2.Control(ctx, 0, Control{}); !errors.Is(err, UnsupportedType) || !errors.As(err, &rce) || rce.Reply != MsgErrorAck {
		t.Errorf("unsupported: %v", err)
	}
	// A wrong service.
	b, _ = Encode(&Attach{Header: Header{Service: ServiceJobctl}})
	if r, err := c.roundTripRaw(ctx, b); !errors.Is(err, WrongService) || r != nil {
		t.Errorf("wrong service: %v", err)
	}
}

var rce *ReturnCodeError

// roundTripRaw sends pre-encoded bytes as a request.
func (c *Client) roundTripRaw(ctx context.Context, b []byte) (Message, error) {
	return c.RoundTripEncoded(ctx, b)
}

// relayAgent forwards frames unaltered to an upstream CDTI server, as an agent on a real BG/Q
// relays to toolctld.
type relayAgent struct {
	up net.Conn
}

func (r *relayAgent) Opened(c *Conn) {
	go func() {
		for {
			b, err := ReadFrame(r.up)
			if err != nil {
				c.Close()
				return
			}
			if err := c.SendEncoded(b); err != nil {
				return
			}
		}
	}()
}

func (r *relayAgent) Relay(c *Conn, frame []byte) error {
	_, err := r.up.Write(frame)
	return err
}

// relayUpstream starts a memAgent server (answering as a CNK if cnk) and returns it with a
// connection to it that said Hello, which a relayAgent forwards to.
func relayUpstream(t *testing.T, cnk bool) (*memAgent, net.Conn) {
	t.Helper()
	a := newMemAgent(4096)
	upstream := startServer(t, a)
	upstream.srv.CNK = cnk
	up, err := net.Dial("tcp", upstream.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { up.Close() })
	if ack := rawHello(t, up, []byte(testToken)); ack.ReturnCode != Success {
		t.Fatalf("upstream hello: %v", ack.ReturnCode)
	}
	return a, up
}

func TestRelay(t *testing.T) {
	a, up := relayUpstream(t, false)
	relay := startServer(t, &relayAgent{up: up})
	c := relay.dial(t, "tcp", ClientOptions{ToolID: 4})
	ctx := testCtx(t)
	got, err := c.ReadMemory(ctx, 2, 0, a.base+10, 100, SpecAccessUseThreadState)
	if err != nil || !bytes.Equal(got, memPattern(a.base+10, 100)) {
		t.Fatalf("read through the relay: %v", err)
	}
	if _, err := c.Control(ctx, 2, Control{NotifySet: Signals(19), SendSignal: 19}); err != nil {
		t.Fatal(err)
	}
	if n := <-c.Notifications(); n.Signal.Signal != 19 || n.ToolID != 4 {
		t.Errorf("notify through the relay: %#v", n)
	}
	if err := (&Conn{}).SendEncoded(frameWithLength(31, 0)); err == nil {
		t.Error("SendEncoded accepted a bad frame")
	}
}

// TestRouterRelayLocal: a Router whose Local is a relay (a BG/Q I/O node's agent) passes its
// own ranks' frames to it, and the tree's GatherStacks and Collective too, which the far end
// refuses as a CNK's toolctld does: not answered half by the Router.
func TestRouterRelayLocal(t *testing.T) {
	a, up := relayUpstream(t, true)
	relay := startServer(t, &Router{Local: &relayAgent{up: up}, Token: []byte(testToken)})
	c := relay.dial(t, "tcp", ClientOptions{ToolID: 4})
	ctx := testCtx(t)
	got, err := c.ReadMemory(ctx, 2, 0, a.base+10, 100, SpecAccessUseThreadState)
	if err != nil || !bytes.Equal(got, memPattern(a.base+10, 100)) {
		t.Fatalf("read through the Router's relay: %v", err)
	}
	if _, err := c.GatherStacks(ctx, 0); !errors.Is(err, UnsupportedType) {
		t.Errorf("GatherStacks through the Router's relay: %v, want UnsupportedType", err)
	}
	if _, err := c.Collective(ctx, 0, RanksOf(2), &GetThreadList{}); !errors.Is(err, UnsupportedType) {
		t.Errorf("Collective through the Router's relay: %v, want UnsupportedType", err)
	}
}

// rawHello authenticates a raw connection as a tool holding token and returns the final
// HelloAck; it fails the test if the agent does not prove the token.
func rawHello(t *testing.T, rw io.ReadWriter, token []byte) *HelloAck {
	t.Helper()
	return rawHelloVersion(t, rw, token, ExtensionVersion)
}

// rawHelloVersion is rawHello for a tool of extension version v.
func rawHelloVersion(t *testing.T, rw io.ReadWriter, token []byte, v uint32) *HelloAck {
	t.Helper()
	exchange := func(m *Hello) *HelloAck {
		b, err := Encode(m)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := rw.Write(b); err != nil {
			t.Fatal(err)
		}
		fb, err := ReadFrame(rw)
		if err != nil {
			t.Fatal(err)
		}
		reply, err := DecodeMessage(fb)
		if err != nil {
			t.Fatal(err)
		}
		return reply.(*HelloAck)
	}
	mine := NewNonce()
	ch := exchange(&Hello{Header: hdr(1), ExtVersion: v, Nonce: mine})
	if !hmac.Equal(ch.Proof, HelloProof(token, HelloRoleAgent, mine, ch.Nonce)) {
		t.Fatalf("the agent's proof %x is wrong", ch.Proof)
	}
	return exchange(&Hello{Header: hdr(2), ExtVersion: v, Proof: HelloProof(token, HelloRoleTool, ch.Nonce, mine)})
}
