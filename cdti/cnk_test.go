package cdti

import (
	"bytes"
	"errors"
	"net"
	"os"
	"slices"
	"testing"
	"time"
)

// TestShuffledAckDecoded checks that an ack whose payloads come in another order than its
// descriptors (as a CNK's hardware threads place them) decodes to the same results.
func TestShuffledAckDecoded(t *testing.T) {
	ack := &QueryAck{Header: hdr(9), Results: []Result{
		{Type: TypeGetMemoryAck, Ack: &GetMemoryAck{ThreadID: 5, Addr: 0x1000, Length: 13, Data: []byte("thirteen byte")}},
		{Type: TypeGetThreadListAck, Ack: &GetThreadListAck{ThreadID: 5, Threads: []ThreadEntry{{5, false}, {6, true}}}},
		{Type: TypeGetTargetInfoAck, Code: CmdInval, Ack: &BareAck{Type: TypeGetTargetInfoAck, ThreadID: 5}},
		{Type: TypeGetThreadDataAck, Code: CmdAllocErr}, // no room left: no payload
		{Type: TypeGetSpecialRegsAck, Ack: &GetSpecialRegsAck{ThreadID: 6, Regs: SpecialRegs{IAR: 0x10000100, LR: 0x10000200, CR: 0x22}}},
	}}
	ack.Header.Type = MsgQueryAck
	b, err := Encode(ack)
	if err != nil {
		t.Fatal(err)
	}
	want, err := DecodeMessage(b)
	if err != nil {
		t.Fatal(err)
	}
	// Descriptors 0, 1, 2 and 4 carry payloads (the CmdInval ack is the bare ToolCommand,
	// the CmdAllocErr one has none).
	for _, perm := range [][]int{{4, 2, 1, 0}, {1, 0, 4, 2}, {2, 4, 0, 1}} {
		s := ShuffleAckPayloads(b, perm)
		if bytes.Equal(s, b) {
			t.Fatalf("perm %v: frame unchanged", perm)
		}
		var offs []uint32
		for _, i := range perm {
			offs = append(offs, be.Uint32(s[44+DescriptorSize*i+4:]))
		}
		if !slices.IsSorted(offs) || offs[0] != CommandMessageSize {
			t.Fatalf("perm %v: payloads at %v, not in the order asked", perm, offs)
		}
		got, err := DecodeMessage(s)
		if err != nil {
			t.Fatalf("perm %v: %v", perm, err)
		}
		if g, w := got.(*QueryAck), want.(*QueryAck); !sameResults(g.Results, w.Results) {
			t.Errorf("perm %v: decoded %#v, want %#v", perm, g.Results, w.Results)
		}
	}
	if s := ShuffleAckPayloads(b, []int{0}); !bytes.Equal(s, b) {
		t.Error("a permutation of the wrong length changed the frame")
	}
}

func sameResults(a, b []Result) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		ea, _ := Encode(&QueryAck{Header: hdr(1), Results: a[i : i+1]})
		eb, _ := Encode(&QueryAck{Header: hdr(1), Results: b[i : i+1]})
		if a[i].Code != b[i].Code || a[i].Type != b[i].Type || !bytes.Equal(ea, eb) {
			return false
		}
	}
	return true
}

// TestCNKServer checks a Server in CNK mode: extension commands answered CmdInval whatever the
// handler would say, extension messages refused with ErrorAck(UnsupportedType), the Hello
// still required (a Query before it is refused), and acks whose payloads come shuffled, which the Client reads right.
func TestCNKServer(t *testing.T) {
	a := newMemAgent(4096) // answers the extensions itself: the server must not let it
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &testServer{srv: &Server{Handler: a, Token: []byte(testToken), CNK: true}, ln: ln}
	go s.srv.Serve(ln)
	t.Cleanup(func() { s.srv.Close() })
	c := s.dial(t, "tcp", ClientOptions{ToolID: 3})
	ctx := testCtx(t)

	if _, err := c.TargetInfo(ctx, 1); !errors.Is(err, ErrNotSupported) {
		t.Errorf("target info from a CNK: %v", err)
	}
	if _, err := c.GatherStacks(ctx, 0); !errors.Is(err, UnsupportedType) {
		t.Errorf("gather stacks from a CNK: %v", err)
	}
	for range 20 {
		rs, err := c.Query(ctx, 1, &GetMemory{Addr: a.base + 3, Length: 40}, &GetTraceback{}, &GetThreadList{},
			&GetRegisterSet{Set: RegSetGeneral}, &GetMemory{Addr: a.base + 100, Length: 7})
		if err != nil {
			t.Fatal(err)
		}
		if m := rs[0].Ack.(*GetMemoryAck); !bytes.Equal(m.Data, memPattern(a.base+3, 40)) {
			t.Fatalf("memory %x", m.Data)
		}
		if m := rs[4].Ack.(*GetMemoryAck); !bytes.Equal(m.Data, memPattern(a.base+100, 7)) {
			t.Fatalf("memory %x", m.Data)
		}
		if tl := rs[2].Ack.(*GetThreadListAck); len(tl.Threads) != 2 {
			t.Fatalf("thread list %#v", tl)
		}
		if rs[1].Code != CmdInval || rs[3].Code != CmdInval {
			t.Fatalf("extensions answered %v and %v, want CmdInval", rs[1].Code, rs[3].Code)
		}
	}

	// The transport's Hello is still required: a Query first is refused (ToolAuthorityError)
	// and the connection ends.
	bare, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer bare.Close()
	q, _ := Encode(&Query{Header: Header{Service: ServiceToolctl, Version: ProtocolVersion, Rank: 1, SequenceID: 1},
		Commands: []Command{&GetThreadList{}}})
	if _, err := bare.Write(q); err != nil {
		t.Fatal(err)
	}
	bare.SetReadDeadline(time.Now().Add(10 * time.Second))
	if f, err := ReadFrame(bare); err != nil {
		t.Errorf("a Query before the Hello: %v, want an ErrorAck", err)
	} else if h, _ := ParseHeader(f); h.Type != MsgErrorAck || h.ReturnCode != ToolAuthorityError {
		t.Errorf("a Query before the Hello answered %v %v, want ErrorAck ToolAuthorityError", h.Type, h.ReturnCode)
	}
	if _, err := ReadFrame(bare); errors.Is(err, os.ErrDeadlineExceeded) || err == nil {
		t.Errorf("after a Query before the Hello the connection stays open (%v)", err)
	}

	// On the wire the payloads are not always in descriptor order.
	nc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if ack := rawHello(t, nc, []byte(testToken)); ack.ReturnCode != Success {
		t.Fatalf("hello: %v", ack.ReturnCode)
	}
	req, err := Encode(&Query{Header: Header{Service: ServiceToolctl, Version: ProtocolVersion, Rank: 1, SequenceID: 1},
		Commands: []Command{&GetMemory{Addr: a.base, Length: 8}, &GetThreadList{}, &GetMemory{Addr: a.base + 8, Length: 8}}})
	if err != nil {
		t.Fatal(err)
	}
	shuffled := false
	for i := 0; i < 64 && !shuffled; i++ {
		if _, err := nc.Write(req); err != nil {
			t.Fatal(err)
		}
		f, err := ReadFrame(nc)
		if err != nil {
			t.Fatal(err)
		}
		var offs []uint32
		for d := range 3 {
			offs = append(offs, be.Uint32(f[44+DescriptorSize*d+4:]))
		}
		shuffled = !slices.IsSorted(offs)
	}
	if !shuffled {
		t.Error("64 acks of 3 payloads all came in descriptor order")
	}
}
