package cdti

import (
	"bytes"
	"reflect"
	"testing"
)

// seedMessages returns real encodings: the golden vectors and a message of every type,
// including Query, Update and acks carrying every command and ack sample.
func seedMessages(t testing.TB) [][]byte {
	vecs, _ := loadVectors(t)
	var seeds [][]byte
	for _, id := range []string{"V1", "V2", "V3", "V4", "V6", "V7", "V8"} {
		seeds = append(seeds, vecs[id].bytes)
	}
	var q, u, act []Command
	for _, s := range commandSamples() {
		switch {
		case s.cmd.CommandType().Kind() == MsgQuery:
			q = append(q, s.cmd)
		case s.cmd.CommandType().IsAction():
			act = append(act, s.cmd)
		default:
			u = append(u, s.cmd)
		}
	}
	// The action commands, and StepRanges that do not decode (reversed, empty, over budget,
	// short), so that their decoders are fuzzed too.
	act = append(act, &StepRange{Lo: 0x2000, Hi: 0x1000}, &StepRange{Lo: 0x1000, Hi: 0x1000},
		&StepRange{Lo: 0x1000, Hi: 0x2000, MaxSteps: MaxRangeSteps + 1},
		&RawCommand{Type: TypeStepRange, ThreadID: 5, Data: make([]byte, 16)})
	var rs []Result
	for _, s := range ackSamples() {
		if s.size < 4096 {
			rs = append(rs, Result{Code: CmdSuccess, Ack: s.ack})
		}
	}
	msgs := []Message{
		&Query{Header: hdr(1), Commands: q[:8]}, &Query{Header: hdr(2), Commands: q[8:]},
		&Update{Header: hdr(3), Commands: u[:16]}, &Update{Header: hdr(4), Commands: u[16:]},
		&QueryAck{Header: hdr(5), Results: rs[:16]}, &UpdateAck{Header: hdr(6), Results: rs[16:32]},
		&QueryAck{Header: hdr(7), Results: []Result{{Type: TypeGetMemoryAck, Code: CmdAllocErr},
			{Code: CmdTIDinval, Ack: &BareAck{Type: TypeGetThreadListAck, ThreadID: 3}}}},
		&AttachAck{Header: hdr(8), Ranks: []uint32{1, 2}}, &DetachAck{Header: hdr(9)},
		&Hello{Header: hdr(10), Nonce: []byte("nonce"), Proof: []byte("proof")}, &HelloAck{Header: hdr(11), Node: "n", Nonce: []byte("nn"), Proof: []byte("p")},
		&SetupJob{Header: hdr(12), Ranks: []uint32{3}}, &ErrorAck{hdr(13)},
		&Notify{Header: hdr(14), Kind: NotifyTypeTermination, Exit: 256},
		&GatherStacks{Header: hdr(15), MaxFrames: 64}, &GatherStacksAck{Header: hdr(16), Tree: seedStackTree()},
	}
	msgs = append(msgs, seedCollectives()...)
	msgs = append(msgs, &GatherStacksAck{Header: hdr(22), More: true, Tree: seedStackTree()},
		&Session{Header: hdr(23), Flags: SessionEnd, ID: [SessionIDSize]byte{1, 2, 3}},
		&SessionAck{Header: hdr(24), State: SessionResumed},
		&Update{Header: hdr(26), Commands: act},
		// The link-map query and its ack, and a GetLinkMap over its bound, which does not decode.
		&Query{Header: hdr(27), Commands: []Command{&GetAuxVectors{}, &GetLinkMap{RDebug: 0x7f0000003118},
			&RawCommand{Type: TypeGetLinkMap, ThreadID: 5, Data: rawLinkMap(MaxLinkMapSize + 1)}}},
		&QueryAck{Header: hdr(28), Results: linkMapResults()},
		// An evaluation in a frame and its answers, and one whose program is over its bound.
		&Query{Header: hdr(29), Commands: []Command{&EvaluateValue{Format: 1, Program: []byte{1, 2}, Modules: []string{"", "libm"}},
			&RawCommand{Type: TypeEvaluateValue, ThreadID: 5, Data: rawEvaluate(MaxEvaluateProgram + 1)}}},
		&QueryAck{Header: hdr(30), Results: []Result{{Code: CmdSuccess, Ack: &EvaluateValueAck{Text: "42"}},
			{Code: CmdAddrErr, Ack: &BareAck{Type: TypeEvaluateValueAck, ThreadID: 5}}}},
		// A read relative to a module and its answers.
		&Query{Header: hdr(31), Commands: []Command{&GetModuleMemory{Module: "/lib/libc.so.6", Offset: 0x1000, Length: 16}, &GetModuleMemory{Length: 8}}},
		&QueryAck{Header: hdr(32), Results: []Result{{Code: CmdSuccess, Ack: &GetModuleMemoryAck{Addr: 0x7f0000001000, Length: 2, Data: []byte{1, 2}}},
			{Code: CmdParmErr, Ack: &GetModuleMemoryAck{Length: 8}}}},
		// A thread list sized to its threads and its answer.
		&Query{Header: hdr(33), Commands: []Command{&ListThreads{ThreadID: 3}}},
		&QueryAck{Header: hdr(34), Results: []Result{{Code: CmdSuccess, Ack: &ListThreadsAck{Threads: []ThreadEntry{{TID: 7}, {TID: 8, CommThread: true}}}}}},
		// The exits of several ranks.
		&Exits{Header: hdr(35), Groups: []ExitGroup{{JobID: 1, ToolID: 2, Ranks: RankRanges{{0, 62, 2}, {63, 63, 1}}}, {Status: 256, Ranks: RanksOf(1, 9)}}})
	for _, m := range msgs {
		b, err := EncodeLax(m)
		if err != nil {
			t.Fatal(err)
		}
		seeds = append(seeds, b)
	}
	// A refused Session answered by the header alone.
	short := &SessionAck{Header: hdr(25)}
	short.ReturnCode = RequestFailed
	b, err := EncodeLax(short)
	if err != nil {
		t.Fatal(err)
	}
	b = b[:ToolMessageSize]
	short.Header.put(b, MsgSessionAck, len(b))
	return append(seeds, b)
}

// rawEvaluate is the payload of an EvaluateValue whose program has n bytes.
func rawEvaluate(n uint32) []byte {
	b := make([]byte, evaluateValueSize+int(n))
	be.PutUint32(b[8:], n)
	return b
}

// rawLinkMap is the payload of a GetLinkMap whose max length is n.
func rawLinkMap(n uint32) []byte {
	b := make([]byte, getLinkMapSize)
	be.PutUint32(b[20:], n)
	return b
}

// linkMapResults answers a GetAuxVectors and a GetLinkMap, one of each ack sample.
func linkMapResults() []Result {
	var rs []Result
	for _, s := range ackSamples() {
		if t := s.ack.CommandType(); t == TypeGetAuxVectorsAck || t == TypeGetLinkMapAck {
			rs = append(rs, Result{Code: CmdSuccess, Ack: s.ack})
		}
	}
	return append(rs, Result{Code: CmdLngthErr, Ack: &BareAck{Type: TypeGetLinkMapAck, ThreadID: 9}})
}

// seedCollectives are Collective and CollectiveAck messages of both kinds.
func seedCollectives() []Message {
	return []Message{
		&Collective{Header: hdr(17), Flags: CollectiveQuietStop, Ranks: RanksOf(0, 2, 4, 6, 9), Kind: MsgUpdate,
			Commands: []Command{&StopProcess{}}},
		&Collective{Header: hdr(18), Ranks: RanksOf(1, 2, 3), Kind: MsgUpdate,
			Commands: []Command{&SetBreakpoint{Addr: 0x401000, Instruction: 0x7fe00008}, &ResetBreakpoint{Addr: 0x402000, Instruction: 7}}},
		&Collective{Header: hdr(19), Ranks: RanksOf(5), Kind: MsgQuery, Commands: []Command{&GetThreadList{}, &GetMemory{Addr: 0x1000, Length: 16}}},
		&CollectiveAck{Header: hdr(20), Kind: MsgUpdateAck, Unreachable: RanksOf(7, 8),
			Groups: []AckGroup{{Ranks: RanksOf(0, 2, 4), Results: []Result{{Code: CmdSuccess, Ack: &StopProcessAck{Stopping: true, Reported: true}}}},
				{Ranks: RanksOf(9), Code: RequestFailed, ErrorCode: ErrorCodeTimedOut}}},
		&CollectiveAck{Header: hdr(21), More: true, Kind: MsgQueryAck,
			Groups: []AckGroup{{Ranks: RanksOf(1, 3), Results: []Result{{Code: CmdSuccess, Ack: &GetThreadListAck{Threads: []ThreadEntry{{TID: 4}}}}}}}},
	}
}

func seedStackTree() StackTree {
	var t StackTree
	t.Add(0, []uint64{3, 2, 1})
	t.Add(1, []uint64{4, 2, 1})
	t.Add(2, []uint64{3, 2, 1})
	t.Unreachable = RanksOf(5, 6)
	return t
}

// FuzzDecodeMessage: framing plus decoding never panic, and a decoded message re-encodes to
// bytes that decode to the same message.
func FuzzDecodeMessage(f *testing.F) {
	for _, s := range seedMessages(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if fr, err := ReadFrame(bytes.NewReader(b)); err == nil {
			b = fr
		}
		checkMessageRoundTrip(t, b)
	})
}

// checkMessageRoundTrip decodes b and, if that succeeds, checks the re-encoding.
func checkMessageRoundTrip(t *testing.T, b []byte) Message {
	m, err := DecodeMessage(b)
	if err != nil {
		return nil
	}
	out, err := EncodeLax(m)
	if err != nil {
		// Decoders accept payloads up to 4 bytes shorter than the encoders write (GetMemoryAck,
		// SetMemory), and re-encoding aligns each payload: allow for that near the 64 KiB limit.
		if len(b) <= MaxFrameSize-16*12 {
			t.Fatalf("re-encode of a decoded %v: %v", m.MessageType(), err)
		}
		return m
	}
	m2, err := DecodeMessage(out)
	if err != nil {
		t.Fatalf("decode of a re-encoded %v: %v\n%x", m.MessageType(), err, out)
	}
	m.Hdr().Length = m2.Hdr().Length
	if !reflect.DeepEqual(m, m2) {
		t.Fatalf("round trip changed the message:\n%#v\n%#v", m, m2)
	}
	return m
}

// commandListMessage frames body as the body of a Query/Update or of its ack.
func commandListMessage(t MessageType, rc ReturnCode, body []byte) []byte {
	b := make([]byte, ToolMessageSize+len(body))
	h := hdr(1)
	h.ReturnCode = rc
	h.put(b, t, len(b))
	copy(b[ToolMessageSize:], body)
	return b
}

// FuzzDecodeCommands fuzzes the command list of Query and Update requests: descriptors and
// payloads as a server receives them.
func FuzzDecodeCommands(f *testing.F) {
	for _, s := range seedMessages(f) {
		t := MessageType(be.Uint16(s[2:]))
		if t == MsgQuery || t == MsgUpdate {
			f.Add(t == MsgUpdate, s[ToolMessageSize:])
		}
	}
	f.Fuzz(func(t *testing.T, update bool, body []byte) {
		typ := MsgQuery
		if update {
			typ = MsgUpdate
		}
		m := checkMessageRoundTrip(t, commandListMessage(typ, Success, body))
		if m == nil {
			return
		}
		var cmds []Command
		switch r := m.(type) {
		case *Query:
			cmds = r.Commands
		case *Update:
			cmds = r.Commands
		}
		for i, c := range cmds {
			if c == nil {
				t.Fatalf("command %d is nil", i)
			}
			if r, ok := c.(*RawCommand); ok && r.Err == nil {
				t.Fatalf("command %d: raw command without a reason", i)
			}
			if _, raw := c.(*RawCommand); !raw && c.CommandType().Kind() != typ {
				t.Fatalf("command %d: %v decoded in a %v", i, c.CommandType(), typ)
			}
		}
	})
}

// FuzzParseAck fuzzes QueryAck/UpdateAck bodies and return codes: descriptors must be
// checked, never trusted.
func FuzzParseAck(f *testing.F) {
	for _, s := range seedMessages(f) {
		t := MessageType(be.Uint16(s[2:]))
		if t == MsgQueryAck || t == MsgUpdateAck {
			f.Add(t == MsgUpdateAck, uint32(0), s[ToolMessageSize:])
			f.Add(t == MsgUpdateAck, uint32(ToolIdError), s[ToolMessageSize:])
		}
	}
	f.Fuzz(func(t *testing.T, update bool, rc uint32, body []byte) {
		typ := MsgQueryAck
		if update {
			typ = MsgUpdateAck
		}
		m := checkMessageRoundTrip(t, commandListMessage(typ, ReturnCode(rc), body))
		if m == nil {
			return
		}
		var rs []Result
		switch r := m.(type) {
		case *QueryAck:
			rs = r.Results
		case *UpdateAck:
			rs = r.Results
		}
		if rc != 0 && len(rs) != 0 {
			t.Fatal("results read from a failed message")
		}
		for i, r := range rs {
			if r.Code == CmdSuccess && r.Ack == nil {
				t.Fatalf("result %d: success without a payload", i)
			}
			if r.Ack != nil && r.Ack.EncodedSize() < 8 {
				t.Fatalf("result %d: payload of %d bytes", i, r.Ack.EncodedSize())
			}
		}
	})
}

// FuzzCollective fuzzes the bodies of Collective and CollectiveAck: rank sets, the carried
// request and the groups' replies are checked, never trusted, and what decodes re-encodes to
// the same message.
func FuzzCollective(f *testing.F) {
	for _, m := range seedCollectives() {
		b, err := EncodeLax(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(m.MessageType() == MsgCollectiveAck, uint32(0), b[ToolMessageSize:])
	}
	f.Fuzz(func(t *testing.T, ack bool, rc uint32, body []byte) {
		typ := MsgCollective
		if ack {
			typ = MsgCollectiveAck
		} else {
			rc = 0
		}
		m := checkMessageRoundTrip(t, commandListMessage(typ, ReturnCode(rc), body))
		switch m := m.(type) {
		case *Collective:
			if m.Kind != MsgQuery && m.Kind != MsgUpdate {
				t.Fatalf("a collective of kind %v", m.Kind)
			}
			for i, c := range m.Commands {
				if c == nil {
					t.Fatalf("command %d is nil", i)
				}
			}
		case *CollectiveAck:
			for i, g := range m.Groups {
				if g.Ranks.Count() == 0 {
					t.Fatalf("group %d without ranks", i)
				}
				if g.Code != Success && len(g.Results) != 0 {
					t.Fatalf("group %d: results of a failed reply", i)
				}
			}
			// Splitting and joining keeps every rank's answer.
			parts := m.Split()
			j := joinCollective(parts)
			if !j.Unreachable.Equal(m.Unreachable) {
				t.Fatalf("split and join changed the unreachable ranks")
			}
		}
	})
}

// FuzzGatherStacksAck fuzzes GatherStacksAck bodies: what decodes re-encodes to the same
// message, and cutting its tree at any rank into two halves keeps every rank in one of them,
// each half no larger than the whole and encodable.
func FuzzGatherStacksAck(f *testing.F) {
	for _, m := range []*GatherStacksAck{{Header: hdr(1), Tree: seedStackTree()}, {Header: hdr(2), More: true, Tree: seedStackTree()}} {
		b, err := EncodeLax(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(uint32(1), b[ToolMessageSize:])
	}
	f.Fuzz(func(t *testing.T, cut uint32, body []byte) {
		m, ok := checkMessageRoundTrip(t, commandListMessage(MsgGatherStacksAck, Success, body)).(*GatherStacksAck)
		if !ok || m.Tree.Ranks.Count() > 1<<16 {
			return
		}
		a := m.Tree.within(0, cut)
		var b StackTree
		if cut != ^uint32(0) {
			b = m.Tree.within(cut+1, ^uint32(0))
		}
		if got := a.Ranks.Union(b.Ranks); !got.Equal(m.Tree.Ranks) {
			t.Fatalf("cut at %d: ranks %v and %v, want %v", cut, a.Ranks, b.Ranks, m.Tree.Ranks)
		}
		whole := (&GatherStacksAck{Tree: m.Tree}).size()
		for _, half := range []StackTree{a, b} {
			h := &GatherStacksAck{Tree: half}
			if h.size() > whole {
				t.Fatalf("cut at %d: a half of %d bytes from %d", cut, h.size(), whole)
			}
			if _, err := Encode(h); err != nil {
				t.Fatalf("cut at %d: %v", cut, err)
			}
		}
	})
}
