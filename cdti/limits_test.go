package cdti

import (
	"bytes"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
)

func TestBuilderLimits(t *testing.T) {
	hold := func() Command { return &HoldThread{ThreadID: 1} }
	tests := []struct {
		name string
		kind MessageType
		cmds []Command
		want error // error of the last Add; all earlier ones must succeed
	}{
		{"16 commands", MsgUpdate, repeat(hold, 16), nil},
		{"17 commands", MsgUpdate, repeat(hold, 17), ErrTooManyCommands},
		{"action last", MsgUpdate, []Command{hold(), &SetContinuationSignal{}, &ContinueProcess{}}, nil},
		{"two action commands", MsgUpdate, []Command{&StepThread{ThreadID: 2}, &ContinueProcess{}}, ErrActionNotLast},
		{"action not last", MsgUpdate, []Command{&ReleaseControl{}, hold()}, ErrActionNotLast},
		{"query command in update", MsgUpdate, []Command{hold(), &GetMemory{Length: 4}}, ErrWrongMessage},
		{"update command in query", MsgQuery, []Command{&GetThreadList{}, &SetBreakpoint{}}, ErrWrongMessage},
		{"extension query command in update", MsgUpdate, []Command{&GetTargetInfo{}}, ErrWrongMessage},
		{"raw command in either", MsgQuery, []Command{&RawCommand{Type: 4242, Data: make([]byte, 8)}}, nil},
		{"GetMemory 65024", MsgQuery, []Command{&GetMemory{Length: 65024}}, nil},
		{"GetMemory 65025", MsgQuery, []Command{&GetMemory{Length: 65025}}, ErrMemoryTooLarge},
		{"SetMemory 65025", MsgUpdate, []Command{&SetMemory{Data: make([]byte, 65025)}}, ErrMemoryTooLarge},
		// 304 + 65048 + 120 = 65472: the predicted ack is exactly MaxRequestSize.
		{"ack at the limit", MsgQuery, []Command{&GetMemory{Length: 65024}, &GetMemory{Length: 96}}, nil},
		{"ack over the limit", MsgQuery, []Command{&GetMemory{Length: 65024}, &GetMemory{Length: 97}}, ErrTooLarge},
		{"7 thread lists", MsgQuery, repeat(func() Command { return &GetThreadList{} }, 7), nil},
		{"8 thread lists", MsgQuery, repeat(func() Command { return &GetThreadList{} }, 8), ErrTooLarge},
		{"request over the limit", MsgUpdate, []Command{&SetMemory{Data: make([]byte, 65024)}, &SetMemory{Data: make([]byte, 100)}}, ErrTooLarge},
		{"long pathname", MsgQuery, []Command{&GetFileStatData{Pathname: string(make([]byte, 128))}}, nil},
		{"nil command", MsgQuery, []Command{nil}, nil},
	}
	tests[len(tests)-2].want = errAny
	tests[len(tests)-1].want = errAny
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := NewBuilder(tc.kind)
			var err error
			for i, c := range tc.cmds {
				err = b.Add(c)
				if i < len(tc.cmds)-1 && err != nil {
					t.Fatalf("Add %d: %v", i, err)
				}
			}
			switch {
			case tc.want == nil && err != nil:
				t.Fatalf("last Add: %v", err)
			case tc.want == errAny && err == nil, tc.want != nil && tc.want != errAny && !errors.Is(err, tc.want):
				t.Fatalf("last Add: %v, want %v", err, tc.want)
			}
			// Encode applies the same rules; EncodeLax only the 16-command bound.
			m := Message(&Query{Header: hdr(1), Commands: tc.cmds})
			if tc.kind == MsgUpdate {
				m = &Update{Header: hdr(1), Commands: tc.cmds}
			}
			_, encErr := Encode(m)
			if (encErr == nil) != (tc.want == nil) {
				t.Errorf("Encode: %v, builder: %v", encErr, err)
			}
			if tc.want == nil {
				if b.Len() != len(tc.cmds) || b.Size() > MaxRequestSize || b.AckSize() > MaxRequestSize {
					t.Errorf("builder: %d commands, size %d, ack %d", b.Len(), b.Size(), b.AckSize())
				}
				enc, _ := Encode(m)
				if len(enc) != b.Size() {
					t.Errorf("encoded %d bytes, builder predicted %d", len(enc), b.Size())
				}
			}
		})
	}
	if _, err := EncodeLax(&Update{Commands: repeat(hold, 17)}); !errors.Is(err, ErrTooManyCommands) {
		t.Errorf("EncodeLax of 17 commands: %v", err)
	}
	if _, err := EncodeLax(&Update{Commands: []Command{&ContinueProcess{}, &StepThread{}, &GetMemory{}}}); err != nil {
		t.Errorf("EncodeLax of a rule-breaking update: %v", err)
	}
}

var errAny = errors.New("any error")

func repeat(f func() Command, n int) []Command {
	var cs []Command
	for range n {
		cs = append(cs, f())
	}
	return cs
}

func TestSplitAndBatch(t *testing.T) {
	// 65025 bytes: two commands (65024 + 1); their acks (65048 + 32) still fit one message.
	cmds := SplitGetMemory(3, 0x10000, 65025, SpecAccessUseThreadState)
	if len(cmds) != 2 || cmds[0].(*GetMemory).Length != 65024 || cmds[1].(*GetMemory).Length != 1 ||
		cmds[1].(*GetMemory).Addr != 0x10000+65024 || cmds[1].Thread() != 3 {
		t.Fatalf("split of 65025: %#v %#v", cmds[0], cmds[len(cmds)-1])
	}
	bs, err := Batch(MsgQuery, cmds)
	if err != nil || len(bs) != 1 || len(bs[0]) != 2 {
		t.Fatalf("batch of 65025: %d messages, %v", len(bs), err)
	}
	// 1 MiB + 3: 17 commands, each large one alone in its message because of the ack bound.
	big := SplitGetMemory(0, 0x400000, 1<<20+3, SpecAccessUseThreadState)
	checkBatches(t, MsgQuery, big, 17)
	next := uint64(0x400000)
	for _, c := range big {
		g := c.(*GetMemory)
		if g.Addr != next || g.Length > MaxMemorySize {
			t.Fatalf("chunk at %#x+%d, want at %#x", g.Addr, g.Length, next)
		}
		next += uint64(g.Length)
	}
	if next != 0x400000+1<<20+3 {
		t.Fatalf("chunks end at %#x", next)
	}
	data := bytes.Repeat([]byte{0xab}, 3*MaxMemorySize+5)
	sets := SplitSetMemory(1, 0x1000, data, SpecAccessUseThreadState, SharedMemoryAllow)
	if len(sets) != 4 || len(sets[3].(*SetMemory).Data) != 5 {
		t.Fatalf("split set: %d commands", len(sets))
	}
	checkBatches(t, MsgUpdate, sets, 3) // the last 5 bytes fit with the third chunk
	// Actions close their message; 40 small commands give 16 + 16 + 8.
	h := func() Command { return &HoldThread{} }
	mixed := []Command{h(), &ContinueProcess{}, h(), h(), &StepThread{}, &ReleaseControl{}, h()}
	bs = checkBatches(t, MsgUpdate, mixed, 4)
	if len(bs[0]) != 2 || len(bs[1]) != 3 || len(bs[2]) != 1 || len(bs[3]) != 1 {
		t.Errorf("batch sizes %d %d %d %d", len(bs[0]), len(bs[1]), len(bs[2]), len(bs[3]))
	}
	b := NewBuilder(MsgUpdate)
	for _, c := range mixed[:2] {
		if err := b.Add(c); err != nil {
			t.Fatal(err)
		}
	}
	if !b.Closed() || b.Kind() != MsgUpdate || len(b.Commands()) != 2 {
		t.Errorf("builder after an action: closed %v, %d commands", b.Closed(), len(b.Commands()))
	}
	if u, ok := b.Message(hdr(1)).(*Update); !ok || len(u.Commands) != 2 || u.Commands[1] != mixed[1] {
		t.Errorf("builder message %#v", b.Message(hdr(1)))
	}
	b.Reset()
	if b.Len() != 0 || b.Closed() || b.Size() != CommandMessageSize || b.AckSize() != CommandMessageSize {
		t.Error("reset")
	}
	bs = checkBatches(t, MsgUpdate, repeat(h, 40), 3)
	if len(bs[2]) != 8 {
		t.Errorf("last batch %d", len(bs[2]))
	}
	if _, err := Batch(MsgQuery, []Command{&GetThreadList{}, &HoldThread{}}); !errors.Is(err, ErrWrongMessage) {
		t.Errorf("batch with a wrong command: %v", err)
	}
	if _, err := Batch(MsgQuery, []Command{&GetMemory{Length: 70000}}); !errors.Is(err, ErrMemoryTooLarge) {
		t.Errorf("batch with an oversize read: %v", err)
	}
}

// checkBatches batches cmds, checks each message is valid and the order is preserved.
func checkBatches(t *testing.T, kind MessageType, cmds []Command, want int) [][]Command {
	t.Helper()
	bs, err := Batch(kind, cmds)
	if err != nil {
		t.Fatal(err)
	}
	if len(bs) != want {
		t.Errorf("%d messages, want %d", len(bs), want)
	}
	i := 0
	for _, b := range bs {
		if err := CheckCommands(kind, b); err != nil {
			t.Errorf("batch invalid: %v", err)
		}
		for j, c := range b {
			if c != cmds[i] {
				t.Fatalf("order changed at %d", i)
			}
			if c.CommandType().IsAction() && j != len(b)-1 {
				t.Errorf("action command not last")
			}
			i++
		}
	}
	if i != len(cmds) {
		t.Errorf("%d commands batched, want %d", i, len(cmds))
	}
	return bs
}

// frameWithLength returns a header claiming length n followed by n-32 bytes (when n ≥ 32).
func frameWithLength(n uint32, body int) []byte {
	b := make([]byte, HeaderSize+body)
	be.PutUint32(b[20:], n)
	return b
}

func TestFrameLimits(t *testing.T) {
	for _, tc := range []struct {
		length uint32
		ok     bool
	}{{31, false}, {0, false}, {32, true}, {40, true}, {65536, true}, {65537, false}, {1 << 31, false}} {
		body := 0
		if tc.ok {
			body = int(tc.length) - HeaderSize
		}
		in := append(frameWithLength(tc.length, body), 0xee) // one byte of the next message
		r := bytes.NewReader(in)
		b, err := ReadFrame(chunkReader{r, 1 + int(tc.length)%13}) // partial reads of odd sizes
		if tc.ok {
			if err != nil || len(b) != int(tc.length) || r.Len() != 1 {
				t.Errorf("length %d: %d bytes, %v, %d left", tc.length, len(b), err, r.Len())
			}
		} else {
			var fe *FrameError
			if !errors.As(err, &fe) || fe.Length != tc.length {
				t.Errorf("length %d: %v", tc.length, err)
			}
		}
		if err := WriteFrame(io.Discard, frameWithLength(tc.length, max(0, int(tc.length)-HeaderSize))); (err == nil) != tc.ok {
			t.Errorf("WriteFrame of length %d: %v", tc.length, err)
		}
	}
	if _, err := ReadFrame(bytes.NewReader(nil)); err != io.EOF {
		t.Errorf("empty stream: %v", err)
	}
	if _, err := ReadFrame(bytes.NewReader(make([]byte, 10))); err != io.ErrUnexpectedEOF {
		t.Errorf("stream ending in a header: %v", err)
	}
	if _, err := ReadFrame(bytes.NewReader(frameWithLength(100, 20))); err != io.ErrUnexpectedEOF {
		t.Errorf("stream ending in a body: %v", err)
	}
	if err := WriteFrame(io.Discard, frameWithLength(100, 10)); err == nil {
		t.Error("WriteFrame accepted a length that disagrees with the buffer")
	}
}

// ackBytes builds a QueryAck by hand: descriptors as given and a payload area of n bytes.
func ackBytes(rc ReturnCode, numCommands int, ds [][4]uint32, n int) []byte {
	b := make([]byte, CommandMessageSize+n)
	h := hdr(1)
	h.ReturnCode = rc
	h.put(b, MsgQueryAck, len(b))
	be.PutUint16(b[40:], uint16(numCommands))
	for i, d := range ds {
		putDescriptor(b, i, CommandType(d[0]), int(d[1]), int(d[2]), CmdReturnCode(d[3]))
	}
	return b
}

func TestAckDescriptorChecks(t *testing.T) {
	const sr = uint32(TypeGetSpecialRegsAck)
	const mem = uint32(TypeGetMemoryAck)
	tests := []struct {
		name string
		b    []byte
		ok   bool
	}{
		{"valid", ackBytes(Success, 2, [][4]uint32{{sr, 304, 80, 0}, {sr, 384, 80, 0}}, 160), true},
		{"numCommands 17", ackBytes(Success, 17, nil, 0), false},
		{"offset in fixed part", ackBytes(Success, 1, [][4]uint32{{sr, 296, 80, 0}}, 80), false},
		{"offset beyond end", ackBytes(Success, 1, [][4]uint32{{sr, 400, 80, 0}}, 80), false},
		{"length beyond end", ackBytes(Success, 1, [][4]uint32{{sr, 304, 81, 0}}, 80), false},
		{"offset overflows", ackBytes(Success, 1, [][4]uint32{{sr, 0xfffffff8, 16, 0}}, 80), false},
		{"overlap", ackBytes(Success, 2, [][4]uint32{{sr, 304, 80, 0}, {sr, 376, 80, 0}}, 160), false},
		{"same payload twice", ackBytes(Success, 2, [][4]uint32{{sr, 304, 80, 0}, {sr, 304, 80, 0}}, 160), false},
		{"shorter than threadID", ackBytes(Success, 1, [][4]uint32{{sr, 304, 4, 5}}, 80), false},
		{"shorter than the fixed ack", ackBytes(Success, 1, [][4]uint32{{sr, 304, 72, 0}}, 80), false},
		{"success without payload", ackBytes(Success, 1, [][4]uint32{{sr, 0, 0, 0}}, 0), false},
		{"AllocErr without payload", ackBytes(Success, 1, [][4]uint32{{sr, 0, 0, uint32(CmdAllocErr)}}, 0), true},
		{"failed command, 8-byte ack", ackBytes(Success, 1, [][4]uint32{{sr, 304, 8, uint32(CmdTIDinval)}}, 8), true},
		{"memory length lies", withU32(ackBytes(Success, 1, [][4]uint32{{mem, 304, 28, 0}}, 32), 304+16, 100), false},
		{"memory length lies, failed", withU32(ackBytes(Success, 1, [][4]uint32{{mem, 304, 24, uint32(CmdLngthErr)}}, 24), 304+16, 65025), true},
		{"failure skips descriptors", ackBytes(ToolIdError, 17, [][4]uint32{{sr, 1, 9999, 0}}, 0), true},
		{"too short for the fixed part", ackBytes(Success, 0, nil, 0)[:300], false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			be.PutUint32(tc.b[20:], uint32(len(tc.b)))
			m, err := DecodeMessage(tc.b)
			if tc.ok {
				if err != nil {
					t.Fatal(err)
				}
				if m.Hdr().ReturnCode != Success && len(m.(*QueryAck).Results) != 0 {
					t.Error("results decoded from a failed message")
				}
				return
			}
			if err == nil || !errors.Is(err, ErrMalformed) {
				t.Fatalf("decoded: %v", err)
			}
		})
	}
	// A failed command's 8-byte payload is a BareAck.
	m, err := DecodeMessage(ackBytes(Success, 1, [][4]uint32{{sr, 304, 8, uint32(CmdTIDinval)}}, 8))
	if err != nil {
		t.Fatal(err)
	}
	if r := m.(*QueryAck).Results[0]; r.Code != CmdTIDinval || r.Type != TypeGetSpecialRegsAck {
		t.Errorf("result %#v", r)
	} else if _, ok := r.Ack.(*BareAck); !ok {
		t.Errorf("ack %T", r.Ack)
	}
}

func withU32(b []byte, off int, v uint32) []byte {
	be.PutUint32(b[off:], v)
	return b
}

func TestDecodeMessageErrors(t *testing.T) {
	good, _ := Encode(&Attach{Header: hdr(1), Tag: NewTag("x")})
	for name, b := range map[string][]byte{
		"empty":          nil,
		"header only":    frameWithLength(32, 0),
		"length differs": withU32(append([]byte(nil), good...), 20, 60),
		"short attach":   withU32(append([]byte(nil), good[:48]...), 20, 48),
		"short notify":   withU32(withU32(make([]byte, 100), 0, 0x05061393), 20, 100),
		"hello token":    withU32(withU32(withU32(make([]byte, 48), 0, 0x050613ec), 20, 48), 44, 0x00100000),
	} {
		if _, err := DecodeMessage(b); err == nil || !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v", name, err)
		}
	}
	// A command that does not decode is kept raw with its error (the framework answers it
	// CmdParmErr): a StopProcess with a flag no agent knows.
	stop, _ := Encode(&Update{Header: hdr(2), Commands: []Command{&StopProcess{Flags: 2}}})
	if m, err := DecodeMessage(stop); err != nil {
		t.Errorf("StopProcess with unknown flags: %v", err)
	} else if raw, ok := m.(*Update).Commands[0].(*RawCommand); !ok || raw.Err == nil || !strings.Contains(raw.Err.Error(), "unknown flags 0x2") {
		t.Errorf("StopProcess with unknown flags: %#v", m.(*Update).Commands[0])
	}
	// So is a StepRange whose range is reversed or empty or whose budget is over the limit.
	for what, c := range map[string]*StepRange{
		"is reversed": {Lo: 0x2000, Hi: 0x1000},
		"is empty":    {Lo: 0x1000, Hi: 0x1000},
		"steps":       {Lo: 0x1000, Hi: 0x2000, MaxSteps: MaxRangeSteps + 1},
	} {
		b, _ := Encode(&Update{Header: hdr(2), Commands: []Command{c}})
		if m, err := DecodeMessage(b); err != nil {
			t.Errorf("StepRange %+v: %v", c, err)
		} else if raw, ok := m.(*Update).Commands[0].(*RawCommand); !ok || raw.Err == nil || !strings.Contains(raw.Err.Error(), what) {
			t.Errorf("StepRange %+v: %#v", c, m.(*Update).Commands[0])
		}
	}
	// Unknown types are not errors.
	b := withU32(withU32(make([]byte, 48), 0, 0x05061f40), 20, 48)
	if m, err := DecodeMessage(b); err != nil {
		t.Errorf("unknown type: %v", err)
	} else if r, ok := m.(*RawMessage); !ok || r.Type != 8000 || len(r.Body) != 8 {
		t.Errorf("unknown type: %#v", m)
	}
}

// chunkReader returns at most n bytes per Read, as a stream socket may.
type chunkReader struct {
	r io.Reader
	n int
}

func (c chunkReader) Read(p []byte) (int, error) { return c.r.Read(p[:min(len(p), c.n)]) }

// TestLinkMapQueryFits: the Query a front end loads a rank with (GetTargetInfo, GetAuxVectors
// and GetLinkMap at its largest) fits one message and one ack; a larger bound is refused.
func TestLinkMapQueryFits(t *testing.T) {
	if err := CheckCommands(MsgQuery, []Command{&GetTargetInfo{}, &GetAuxVectors{}, &GetLinkMap{MaxLength: MaxLinkMapSize}}); err != nil {
		t.Errorf("GetTargetInfo, GetAuxVectors and the largest GetLinkMap: %v", err)
	}
	if err := Validate(&GetLinkMap{MaxLength: MaxLinkMapSize + 1}); err == nil {
		t.Error("a GetLinkMap over MaxLinkMapSize validated")
	}
	if _, err := DecodeCommand(TypeGetLinkMap, rawLinkMap(MaxLinkMapSize+1)); err == nil {
		t.Error("a GetLinkMap over MaxLinkMapSize decoded")
	}
	if _, err := DecodeCommand(TypeGetLinkMap, make([]byte, getLinkMapSize-1)); err == nil {
		t.Error("a short GetLinkMap decoded")
	}
}

// TestLinkMapAckMalformed: a GetLinkMapAck whose count or a name is over its limit, or runs
// past the payload, is an error naming the ack.
func TestLinkMapAckMalformed(t *testing.T) {
	a := &GetLinkMapAck{ThreadID: 1, RDebug: 0x1000, Entries: []LinkMapEntry{{Bias: 1, Node: 2}, {Bias: 3, Node: 4, Name: "/lib/libm.so.6"}}}
	good := make([]byte, a.EncodedSize())
	a.Encode(good)
	if got, err := DecodeAck(TypeGetLinkMapAck, good); err != nil || !reflect.DeepEqual(got, a) {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	bad := map[string]func(b []byte) []byte{
		"count over the limit": func(b []byte) []byte { be.PutUint32(b[28:], MaxLinkMapEntries+1); return b },
		"count past the end":   func(b []byte) []byte { be.PutUint32(b[28:], 3); return b },
		"name over the limit":  func(b []byte) []byte { be.PutUint32(b[56+16:], MaxExePathSize+1); return b },
		"name past the end":    func(b []byte) []byte { be.PutUint32(b[56+16:], 40); return b },
		"padding cut":          func(b []byte) []byte { return b[:len(b)-1] },
		"header cut":           func(b []byte) []byte { return b[:31] },
	}
	for what, f := range bad {
		_, err := DecodeAck(TypeGetLinkMapAck, f(bytes.Clone(good)))
		if err == nil || !strings.Contains(err.Error(), "GetLinkMapAck") {
			t.Errorf("%s: %v, want an error naming GetLinkMapAck", what, err)
		}
	}
}

// TestEvaluateValueMalformed: an EvaluateValue whose program or names are over their limits,
// whose module count disagrees with its names, or that runs past its payload, is an error
// naming the command; an ack whose text is over its limit too.
func TestEvaluateValueMalformed(t *testing.T) {
	c := &EvaluateValue{ThreadID: 1, Format: 1, Program: []byte{1, 0, 1, 2, 3}, Modules: []string{"", "/lib/libm.so.6"}}
	good := make([]byte, c.EncodedSize())
	c.Encode(good)
	if got, err := DecodeCommand(TypeEvaluateValue, good); err != nil || !reflect.DeepEqual(got, c) {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	bad := map[string]func(b []byte) []byte{
		"no program":              func(b []byte) []byte { be.PutUint32(b[8:], 0); return b },
		"program over the limit":  func(b []byte) []byte { be.PutUint32(b[8:], MaxEvaluateProgram+1); return b },
		"names over the limit":    func(b []byte) []byte { be.PutUint32(b[12:], MaxEvaluateModules+1); return b },
		"count over the limit":    func(b []byte) []byte { be.PutUint16(b[6:], MaxEvaluateModuleCount+1); return b },
		"more modules than names": func(b []byte) []byte { be.PutUint16(b[6:], 3); return b },
		"fewer modules":           func(b []byte) []byte { be.PutUint16(b[6:], 1); return b },
		"a name past the names":   func(b []byte) []byte { be.PutUint16(b[16+5+2:], 200); return b },
		"names cut":               func(b []byte) []byte { return b[:len(b)-1] },
		"header cut":              func(b []byte) []byte { return b[:15] },
	}
	for what, f := range bad {
		_, err := DecodeCommand(TypeEvaluateValue, f(bytes.Clone(good)))
		if err == nil || !strings.Contains(err.Error(), "EvaluateValue") {
			t.Errorf("%s: %v, want an error naming EvaluateValue", what, err)
		}
	}
	if err := Validate(&EvaluateValue{Program: make([]byte, MaxEvaluateProgram+1)}); err == nil {
		t.Error("an EvaluateValue over MaxEvaluateProgram validated")
	}
	if err := Validate(&EvaluateValue{Program: []byte{1}, Modules: make([]string, MaxEvaluateModuleCount+1)}); err == nil {
		t.Error("an EvaluateValue of too many modules validated")
	}
	long := make([]byte, evaluateValueAckSize+MaxValueText+1)
	be.PutUint32(long[8:], MaxValueText+1)
	if _, err := DecodeAck(TypeEvaluateValueAck, long); err == nil || !strings.Contains(err.Error(), "EvaluateValueAck") {
		t.Errorf("a text over the limit: %v", err)
	}
}

// TestGetModuleMemoryMalformed: a GetModuleMemory whose name is over its limit or runs past its
// payload, or whose length is over MaxMemorySize, is an error naming the command; an ack whose
// length runs past its data too.
func TestGetModuleMemoryMalformed(t *testing.T) {
	c := &GetModuleMemory{ThreadID: 1, Module: "/lib/libc.so.6", Offset: 0x1000, Length: 512, SpecAccess: SpecAccessUseThreadState}
	good := make([]byte, c.EncodedSize())
	c.Encode(good)
	if got, err := DecodeCommand(TypeGetModuleMemory, good); err != nil || !reflect.DeepEqual(got, c) {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	bad := map[string]func(b []byte) []byte{
		"name over the limit": func(b []byte) []byte { be.PutUint16(b[20:], MaxModuleNameSize+1); return b },
		"name past the end":   func(b []byte) []byte { be.PutUint16(b[20:], uint16(len(c.Module)+1)); return b },
		"name cut":            func(b []byte) []byte { return b[:len(b)-1] },
		"header cut":          func(b []byte) []byte { return b[:23] },
	}
	for what, f := range bad {
		_, err := DecodeCommand(TypeGetModuleMemory, f(bytes.Clone(good)))
		if err == nil || !strings.Contains(err.Error(), "GetModuleMemory") {
			t.Errorf("%s: %v, want an error naming GetModuleMemory", what, err)
		}
	}
	if err := Validate(&GetModuleMemory{Length: MaxMemorySize + 1}); !errors.Is(err, ErrMemoryTooLarge) {
		t.Errorf("a GetModuleMemory over MaxMemorySize: %v", err)
	}
	if err := Validate(&GetModuleMemory{Module: strings.Repeat("x", MaxModuleNameSize+1)}); err == nil {
		t.Error("a GetModuleMemory of a name over MaxModuleNameSize validated")
	}
	var cmds []Command
	for _, x := range SplitGetModuleMemory(3, "", 0x10, 2*MaxMemorySize+5, 0) {
		cmds = append(cmds, x)
	}
	if len(cmds) != 3 || cmds[2].(*GetModuleMemory).Offset != 0x10+2*MaxMemorySize || cmds[2].(*GetModuleMemory).Length != 5 {
		t.Errorf("split: %+v", cmds)
	}
	ack := make([]byte, 20+4)
	be.PutUint32(ack[16:], 5)
	if _, err := DecodeAck(TypeGetModuleMemoryAck, ack); err == nil || !strings.Contains(err.Error(), "GetModuleMemoryAck") {
		t.Errorf("an ack whose length runs past its data: %v", err)
	}
}

// TestListThreadsAckMalformed: a ListThreadsAck of more threads than MaxThreadIDs, or whose
// entries run past its payload, is an error naming the ack.
func TestListThreadsAckMalformed(t *testing.T) {
	a := &ListThreadsAck{ThreadID: 1, Threads: []ThreadEntry{{TID: 10}, {TID: 11}}}
	good := make([]byte, a.EncodedSize())
	a.Encode(good)
	bad := map[string]func(b []byte) []byte{
		"count over the limit": func(b []byte) []byte { be.PutUint32(b[8:], MaxThreadIDs+1); return b },
		"entries cut":          func(b []byte) []byte { return b[:len(b)-1] },
		"header cut":           func(b []byte) []byte { return b[:15] },
	}
	for what, f := range bad {
		if _, err := DecodeAck(TypeListThreadsAck, f(bytes.Clone(good))); err == nil || !strings.Contains(err.Error(), "ListThreadsAck") {
			t.Errorf("%s: %v, want an error naming ListThreadsAck", what, err)
		}
	}
	many := &ListThreadsAck{Threads: make([]ThreadEntry, MaxThreadIDs+5)}
	if n := many.EncodedSize(); n != 16+8*MaxThreadIDs {
		t.Errorf("an ack of %d threads encodes %d bytes, want the first %d threads' %d", len(many.Threads), n, MaxThreadIDs, 16+8*MaxThreadIDs)
	}
}
