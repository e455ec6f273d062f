package cdti

import (
	"context"
	"errors"
	"net"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// runState is the run control of a simulated agent's ranks: StopProcess stops a running rank
// and notifies the stop (after the ack, as an agent does once every thread has stopped)
// unless a collective asked for it quietly; ContinueProcess lets a stopped rank go.
type runState struct {
	mu      sync.Mutex
	stopped map[uint32]bool
	quiet   map[uint32]bool // the next stop of the rank is not notified
	unsent  map[uint32]bool // stopped quietly: the notification was never sent
}

func (a *stackAgent) Update(c *Conn, m *Update) ([]Result, ReturnCode) {
	if !a.serves(m.Rank) {
		return nil, ToolRankNotFound
	}
	s := &a.run
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped == nil {
		s.stopped, s.quiet, s.unsent = map[uint32]bool{}, map[uint32]bool{}, map[uint32]bool{}
	}
	tid := 1000 + m.Rank // the rank's default thread
	out := make([]Result, len(m.Commands))
	for i, cmd := range m.Commands {
		switch cmd.(type) {
		case *StopProcess:
			if s.stopped[m.Rank] {
				if s.unsent[m.Rank] { // a plain stop recovers a quiet one: notified now
					delete(s.unsent, m.Rank)
					a.notifyStop(c, m, tid)
					out[i] = Result{Ack: &StopProcessAck{ThreadID: tid, Stopping: true}}
					continue
				}
				out[i] = Result{Ack: &StopProcessAck{ThreadID: tid}}
				continue
			}
			s.stopped[m.Rank] = true
			if s.quiet[m.Rank] {
				delete(s.quiet, m.Rank)
				s.unsent[m.Rank] = true
			} else {
				a.notifyStop(c, m, tid)
			}
			out[i] = Result{Ack: &StopProcessAck{ThreadID: tid, Stopping: true}}
		case *ContinueProcess:
			if !s.stopped[m.Rank] {
				out[i] = Result{Code: CmdParmErr, Ack: &BareAck{Type: TypeContinueProcessAck, ThreadID: tid}}
				continue
			}
			delete(s.stopped, m.Rank)
			delete(s.unsent, m.Rank)
			out[i] = Result{Ack: &BareAck{Type: TypeContinueProcessAck, ThreadID: tid}}
		default:
			out[i] = Result{Code: CmdInval, Ack: &BareAck{Type: cmd.CommandType() + 1, ThreadID: tid}}
		}
	}
	return out, Success
}

func (a *stackAgent) notifyStop(c *Conn, m *Update, tid uint32) {
	c.AfterReply(func() {
		c.Notify(&Notify{Header: Header{Rank: m.Rank, ToolID: m.ToolID}, Kind: NotifyTypeSignal,
			Signal: NotifySignal{Signal: 19, ThreadID: tid, Reason: SignalInterrupt}})
	})
}

// QuietStop arranges a quiet stop; the simulated stop is complete at once.
func (a *stackAgent) QuietStop(c *Conn, rank uint32) func(context.Context) bool {
	s := &a.run
	s.mu.Lock()
	if s.quiet == nil {
		s.stopped, s.quiet, s.unsent = map[uint32]bool{}, map[uint32]bool{}, map[uint32]bool{}
	}
	s.quiet[rank] = true
	s.mu.Unlock()
	return func(context.Context) bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		delete(s.quiet, rank)
		return s.unsent[rank]
	}
}

// countingConn counts the CDTI frames a client writes and reads on one connection.
type countingConn struct {
	net.Conn
	wrote, read atomic.Int64 // frames
	rbuf        []byte
}

func (c *countingConn) Write(b []byte) (int, error) {
	c.wrote.Add(1) // the Client writes one frame per Write
	return c.Conn.Write(b)
}

func (c *countingConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.rbuf = append(c.rbuf, b[:n]...)
	for len(c.rbuf) >= HeaderSize {
		l := int(be.Uint32(c.rbuf[20:]))
		if l < HeaderSize || len(c.rbuf) < l {
			break
		}
		c.read.Add(1)
		c.rbuf = c.rbuf[l:]
	}
	return n, err
}

// dialCounting connects a tool to the root through a countingConn.
func dialCounting(t *testing.T, addr string) (*Client, *countingConn) {
	t.Helper()
	ctx := testCtx(t)
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	cc := &countingConn{Conn: nc}
	c := NewClient(cc, ClientOptions{ToolID: 3})
	if _, err := c.Hello(ctx, []byte(testToken)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, cc
}

// TestCollectiveStopContinueReduced stops and continues every rank of a 15-agent tree at
// fan-out 2 with one Collective each: each answer is one message with one group of every
// rank (the ranks' thread ids differ, but the commands named thread 0), the quiet stop sends
// no Notify, and every rank's state changed as the per-rank Update would have changed it.
func TestCollectiveStopContinueReduced(t *testing.T) {
	const n, per = 15, 4
	_, root := simTree(t, n, 2, per)
	c, cc := dialCounting(t, root)
	ctx := testCtx(t)
	all := RanksOf(seq(n * per)...)
	wrote, read := cc.wrote.Load(), cc.read.Load()
	a, err := c.Collective(ctx, CollectiveQuietStop, all, &StopProcess{})
	if err != nil {
		t.Fatal(err)
	}
	if got := [2]int64{cc.wrote.Load() - wrote, cc.read.Load() - read}; got != [2]int64{1, 1} {
		t.Fatalf("stop of %d ranks: %d messages sent, %d received; want 1 and 1", n*per, got[0], got[1])
	}
	if len(a.Groups) != 1 || !a.Groups[0].Ranks.Equal(all) || len(a.Unreachable) != 0 {
		t.Fatalf("stop answer: %+v", a)
	}
	st, ok := a.Groups[0].Results[0].Ack.(*StopProcessAck)
	if !ok || !st.Reported || st.ThreadID != 0 {
		t.Fatalf("stop ack %#v, want Reported with thread 0", a.Groups[0].Results[0].Ack)
	}
	// A second, plain stop of one rank turns its quiet stop into a Notify (the recovery of a
	// tool that lost the collective's answer); it is the only notification of the test.
	if ok, err := c.StopProcess(ctx, 9); err != nil || !ok {
		t.Fatalf("plain stop after the quiet one: %v %v", ok, err)
	}
	select {
	case m := <-c.Notifications():
		if m.Rank != 9 || m.Signal.Reason != SignalInterrupt {
			t.Fatalf("notification %+v, want rank 9's stop", m)
		}
	case <-ctx.Done():
		t.Fatal("no notification of rank 9's stop")
	}

	wrote, read = cc.wrote.Load(), cc.read.Load()
	a, err = c.Collective(ctx, 0, all, &ContinueProcess{})
	if err != nil {
		t.Fatal(err)
	}
	if got := [2]int64{cc.wrote.Load() - wrote, cc.read.Load() - read}; got != [2]int64{1, 1} {
		t.Fatalf("continue: %d messages sent, %d received; want 1 and 1", got[0], got[1])
	}
	if len(a.Groups) != 1 || !a.Groups[0].Ranks.Equal(all) || a.Groups[0].Results[0].Code != CmdSuccess {
		t.Fatalf("continue answer: %+v", a)
	}
	// Every rank runs again: a second continue fails on each, one group of the same error.
	a, err = c.Collective(ctx, 0, RanksOf(1, 5, 22, 59), &ContinueProcess{})
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Groups) != 1 || a.Groups[0].Results[0].Code != CmdParmErr || !a.Groups[0].Ranks.Equal(RanksOf(1, 5, 22, 59)) {
		t.Fatalf("continue of running ranks: %+v", a)
	}
	select {
	case m := <-c.Notifications():
		t.Fatalf("unexpected notification %+v", m)
	default:
	}
}

func seq(n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(i)
	}
	return out
}

// TestCollectiveGroupsAndErrors: distinct answers form distinct groups; a rank no agent serves
// is refused as a CNK refuses it (ToolRankNotFound), in its own group.
func TestCollectiveGroupsAndErrors(t *testing.T) {
	_, root := simTree(t, 7, 2, 2)
	c := dialRoot(t, root)
	ctx := testCtx(t)
	set := RanksOf(0, 3, 8, 13, 40, 41)
	a, err := c.Collective(ctx, 0, set, &GetThreadList{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[uint32]AckGroup{}
	for _, g := range a.Groups {
		for _, r := range g.Ranks.Ranks() {
			got[r] = g
		}
	}
	for _, r := range []uint32{0, 3, 8, 13} {
		g := got[r]
		tl, ok := g.Results[0].Ack.(*GetThreadListAck)
		if g.Code != Success || !ok || tl.ThreadID != 0 || !slices.Equal(tl.Threads, []ThreadEntry{{TID: 1000 + r}, {TID: 5000 + r}}) {
			t.Fatalf("rank %d: %+v", r, g)
		}
	}
	if g := got[40]; g.Code != ToolRankNotFound || !g.Ranks.Equal(RanksOf(40, 41)) {
		t.Fatalf("ranks nobody serves: %+v", g)
	}
	if len(a.Groups) != 5 {
		t.Fatalf("%d groups, want 4 distinct thread lists and one error", len(a.Groups))
	}
}

// TestCollectiveSplitsLargeAnswer: 896 ranks whose thread lists all differ make an answer of
// several times 64 KiB; it comes in several messages (so nothing falls back for its size),
// which the Client puts together, every rank with its own list.
func TestCollectiveSplitsLargeAnswer(t *testing.T) {
	const n, per = 14, 64
	_, root := simTree(t, n, 2, per)
	c, cc := dialCounting(t, root)
	ctx := testCtx(t)
	read := cc.read.Load()
	a, err := c.Collective(ctx, 0, RanksOf(seq(n*per)...), &GetThreadList{})
	if err != nil {
		t.Fatal(err)
	}
	parts := cc.read.Load() - read
	size, _ := a.encodedSize(false)
	if parts < 2 || size <= MaxFrameSize {
		t.Fatalf("%d parts for %d bytes: want a split answer", parts, size)
	}
	seen := map[uint32]bool{}
	for _, g := range a.Groups {
		tl := g.Results[0].Ack.(*GetThreadListAck)
		for _, r := range g.Ranks.Ranks() {
			if seen[r] || tl.Threads[0].TID != 1000+r {
				t.Fatalf("rank %d: twice, or the list %v", r, tl.Threads)
			}
			seen[r] = true
		}
	}
	if len(seen) != n*per {
		t.Fatalf("%d of %d ranks answered", len(seen), n*per)
	}
	t.Logf("%d ranks: %d bytes in %d messages", n*per, size, parts)
}

// TestCollectiveSplitRoundTrip splits answers whose groups and unreachable ranks do not fit
// in one message (scattered ranks, long replies) and puts them together again.
func TestCollectiveSplitRoundTrip(t *testing.T) {
	var odd []uint32
	for r := uint32(0); r < 120000; r += 3 {
		if r%7 != 0 {
			odd = append(odd, r)
		}
	}
	big := &GetMemoryAck{ThreadID: 0, Data: make([]byte, 30000)}
	a := &CollectiveAck{Header: Header{SequenceID: 5}, Kind: MsgQueryAck, Unreachable: RanksOf(odd...),
		Groups: []AckGroup{{Ranks: RanksOf(odd[:2000]...), Results: []Result{{Ack: big}}},
			{Ranks: RanksOf(1, 2), Code: RequestFailed, ErrorCode: ErrorCodeTimedOut}}}
	parts := a.Split()
	if len(parts) < 2 {
		t.Fatalf("%d parts", len(parts))
	}
	var dec []*CollectiveAck
	for i, p := range parts {
		b, err := Encode(p)
		if err != nil || len(b) > MaxFrameSize {
			t.Fatalf("part %d: %d bytes, %v", i, len(b), err)
		}
		m, err := DecodeMessage(b)
		if err != nil {
			t.Fatalf("part %d: %v", i, err)
		}
		if m.(*CollectiveAck).More != (i < len(parts)-1) {
			t.Fatalf("part %d: More %v", i, m.(*CollectiveAck).More)
		}
		dec = append(dec, m.(*CollectiveAck))
	}
	j := joinCollective(dec)
	if !j.Unreachable.Equal(a.Unreachable) || len(j.Groups) != 2 {
		t.Fatalf("joined: %d unreachable, %d groups", j.Unreachable.Count(), len(j.Groups))
	}
	for _, g := range j.Groups {
		if g.Code == Success && !g.Ranks.Equal(RanksOf(odd[:2000]...)) {
			t.Fatalf("group of %d ranks, want 2000", g.Ranks.Count())
		}
	}
}

// TestCollectiveLostInteriorAgent: after interior agent 1 (children 3 and 4) is lost, a
// collective stop names its own ranks unreachable, and stops and continues the others, those
// of the agents it adopted included.
func TestCollectiveLostInteriorAgent(t *testing.T) {
	const n, per = 7, 2
	srvs, root := simTree(t, n, 2, per)
	c := dialRoot(t, root)
	ctx := testCtx(t)
	all := RanksOf(seq(n * per)...)
	if _, err := c.Collective(ctx, 0, all, &GetThreadList{}); err != nil { // links open
		t.Fatal(err)
	}
	srvs[1].Close()
	waitLost(t, c, 2, 3)
	a, err := c.Collective(ctx, CollectiveQuietStop, all, &StopProcess{})
	if err != nil {
		t.Fatal(err)
	}
	lost := RanksOf(2, 3)
	if !a.Unreachable.Equal(lost) {
		t.Fatalf("unreachable %v, want %v", a.Unreachable, lost)
	}
	if len(a.Groups) != 1 || !a.Groups[0].Ranks.Equal(RanksOf(0, 1, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13)) {
		t.Fatalf("groups %+v", a.Groups)
	}
	a, err = c.Collective(ctx, 0, all, &ContinueProcess{})
	if err != nil {
		t.Fatal(err)
	}
	if !a.Unreachable.Equal(lost) || len(a.Groups) != 1 || a.Groups[0].Results[0].Code != CmdSuccess {
		t.Fatalf("continue after the loss: %+v", a)
	}
}

// waitLost waits for the notifications of the loss of ranks, and fails on any other.
func waitLost(t *testing.T, c *Client, ranks ...uint32) {
	t.Helper()
	ctx := testCtx(t)
	var told []uint32
	for len(told) < len(ranks) {
		select {
		case m := <-c.Notifications():
			if m.Kind != NotifyTypeUnreachable || m.Lost != uint32(len(ranks)) {
				t.Fatalf("notification %v (lost %d) for rank %d, want unreachable of %d", m.Kind, m.Lost, m.Rank, len(ranks))
			}
			told = append(told, m.Rank)
		case <-ctx.Done():
			t.Fatalf("told of ranks %v lost, want %v", told, ranks)
		}
	}
	if !RanksOf(told...).Equal(RanksOf(ranks...)) {
		t.Fatalf("told of ranks %v lost, want %v", told, ranks)
	}
}

// TestCollectiveRefusedByCNK: a server that answers as a BG/Q CNK refuses the message type,
// which the Client reports as UnsupportedType (the tool then goes rank by rank).
func TestCollectiveRefusedByCNK(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &Server{Token: []byte(testToken), Handler: &stackAgent{ranks: []uint32{0}}, CNK: true}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	c := dialRoot(t, ln.Addr().String())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = c.Collective(ctx, 0, RanksOf(0), &ContinueProcess{})
	if !errors.Is(err, UnsupportedType) {
		t.Fatalf("collective against a CNK: %v, want UnsupportedType", err)
	}
}

// TestGatherStacksSplitsLargeTree: 3,072 ranks whose innermost frames all differ make a merged
// tree of about 100 KB; it comes in several GatherStacksAcks (each the tree of some of the
// ranks) which the Client merges, every rank with its own stack: nothing falls back for size.
func TestGatherStacksSplitsLargeTree(t *testing.T) {
	const n, per = 48, 64
	own := func(_ int, r uint32) []uint64 { return []uint64{0x100000 + uint64(r)*4, 0x2000, 0x1000} }
	_, root := simTreeOf(t, n, 4, per, own)
	c, cc := dialCounting(t, root)
	ctx := testCtx(t)
	read := cc.read.Load()
	tree, err := c.GatherStacks(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	parts := cc.read.Load() - read
	size := (&GatherStacksAck{Tree: *tree}).size()
	if parts < 2 || size <= MaxFrameSize {
		t.Fatalf("%d parts for a tree of %d bytes: want a split answer", parts, size)
	}
	paths := tree.Paths()
	for r := uint32(0); r < n*per; r++ {
		if got := paths[r]; !slices.Equal(got, own(0, r)) {
			t.Fatalf("rank %d: %x, want %x", r, got, own(0, r))
		}
	}
	if len(paths) != n*per || tree.Ranks.Count() != n*per {
		t.Fatalf("%d paths, %d ranks", len(paths), tree.Ranks.Count())
	}
	t.Logf("%d ranks: a tree of %d bytes in %d messages", n*per, size, parts)
}

// TestRankRangesWithin cuts strided sets to intervals.
func TestRankRangesWithin(t *testing.T) {
	s := RankRanges{{0, 62, 2}, {70, 70, 1}, {100, 190, 10}}
	for _, c := range []struct {
		lo, hi uint32
		want   []uint32
	}{{0, 200, s.Ranks()}, {5, 9, []uint32{6, 8}}, {61, 71, []uint32{62, 70}}, {63, 69, nil}, {105, 125, []uint32{110, 120}}, {190, 190, []uint32{190}}} {
		got := s.within(c.lo, c.hi)
		if !slices.Equal(got.Ranks(), c.want) && !(len(got) == 0 && len(c.want) == 0) {
			t.Errorf("within(%d, %d) = %v, want %v", c.lo, c.hi, got.Ranks(), c.want)
		}
		for _, r := range got {
			if r.Lo == r.Hi && r.Stride != 1 {
				t.Errorf("within(%d, %d): single rank %v with a stride", c.lo, c.hi, r)
			}
		}
	}
}

// TestBatchCollective: command lists too long or whose acks are too large for one Collective
// are cut, in order, into lists each of which encodes as a Collective, while a Query of the
// largest list Batch makes would not (its ack is within a QueryAck's bound, not a group's).
func TestBatchCollective(t *testing.T) {
	var reads []Command
	for i := range 40 {
		reads = append(reads, &GetModuleMemory{Module: "/lib/libc.so.6", Offset: uint64(i) * 512, Length: 512})
	}
	wide := []Command{&ListThreads{}}
	for i := range 15 {
		wide = append(wide, &GetMemory{Addr: uint64(i) << 16, Length: 4000})
	}
	for _, c := range []struct {
		name string
		cmds []Command
		want int
	}{
		{"40 reads", reads, 3},
		{"a list and 15 reads of 4000 bytes", wide, 2},
		{"one list", []Command{&ListThreads{}}, 1},
	} {
		lists, err := BatchCollective(MsgQuery, c.cmds)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		var all []Command
		for i, l := range lists {
			if _, err := Encode(&Collective{Ranks: RanksOf(0, 1), Kind: MsgQuery, Commands: l}); err != nil {
				t.Errorf("%s: list %d of %d commands: %v", c.name, i, len(l), err)
			}
			all = append(all, l...)
		}
		if len(lists) != c.want || !reflect.DeepEqual(all, c.cmds) {
			t.Errorf("%s: %d lists of %d commands in all, want %d lists of the %d in order", c.name, len(lists), len(all), c.want, len(c.cmds))
		}
	}
	// A list at a Query's bound (an ack of 65,472 bytes) that a Collective cannot carry.
	full := []Command{&GetMemory{Length: MaxMemorySize}, &GetMemory{Length: 96}}
	batches, err := Batch(MsgQuery, full)
	if err != nil || len(batches) != 1 {
		t.Fatalf("Batch: %d lists, %v; want the one", len(batches), err)
	}
	if _, err := Encode(&Collective{Ranks: RanksOf(0), Kind: MsgQuery, Commands: batches[0]}); err == nil {
		t.Fatal("a Collective of a Query's largest list encoded")
	}
	lists, err := BatchCollective(MsgQuery, full)
	if err != nil || len(lists) != 2 {
		t.Fatalf("BatchCollective at the bound: %d lists, %v; want 2", len(lists), err)
	}
	for i, l := range lists {
		if _, err := Encode(&Collective{Ranks: RanksOf(0), Kind: MsgQuery, Commands: l}); err != nil {
			t.Errorf("list %d of %d commands at the bound: %v", i, len(l), err)
		}
	}
}
