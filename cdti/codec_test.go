package cdti

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"reflect"
	"testing"
)

func encodePayload(e interface {
	EncodedSize() int
	Encode([]byte)
}) []byte {
	b := make([]byte, e.EncodedSize())
	e.Encode(b)
	return b
}

func TestCommandRoundTrip(t *testing.T) {
	seen := map[CommandType]bool{}
	for _, s := range commandSamples() {
		ct := s.cmd.CommandType()
		t.Run(ct.String(), func(t *testing.T) {
			seen[ct] = true
			if n := s.cmd.EncodedSize(); n != s.size {
				t.Errorf("EncodedSize %d, spec %d", n, s.size)
			}
			if n := s.cmd.AckSize(); n != s.ackSize {
				t.Errorf("AckSize %d, spec %d", n, s.ackSize)
			}
			b := encodePayload(s.cmd)
			got, err := DecodeCommand(ct, b)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, s.cmd) {
				t.Errorf("round trip:\n got %#v\nwant %#v", got, s.cmd)
			}
			if be.Uint32(b) != s.cmd.Thread() {
				t.Errorf("threadID @0 = %d, want %d", be.Uint32(b), s.cmd.Thread())
			}
			// Truncated payloads are errors, never panics.
			if s.size > 8 {
				if _, err := DecodeCommand(ct, b[:s.size-1]); err == nil && ct != TypeSetMemory && ct != TypeSetRegisterSet {
					t.Errorf("decode of %d bytes accepted", s.size-1)
				}
			}
			if _, err := DecodeCommand(ct, b[:7]); err == nil {
				t.Error("decode of 7 bytes accepted")
			}
		})
	}
	for _, ct := range CommandTypes() {
		if !seen[ct] {
			t.Errorf("no round-trip sample for %v", ct)
		}
	}
	if len(CommandTypes()) != 13+26+12 {
		t.Errorf("%d command types registered, want 13 query + 26 update + 12 extension", len(CommandTypes()))
	}
}

func TestAckRoundTrip(t *testing.T) {
	seen := map[CommandType]bool{}
	for _, s := range ackSamples() {
		at := s.ack.CommandType()
		t.Run(at.String(), func(t *testing.T) {
			seen[at] = true
			if !at.IsAck() {
				t.Errorf("%v is not an ack type", at)
			}
			if n := s.ack.EncodedSize(); n != s.size {
				t.Errorf("EncodedSize %d, spec %d", n, s.size)
			}
			b := encodePayload(s.ack)
			got, err := DecodeAck(at, b)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, s.ack) {
				t.Errorf("round trip:\n got %#v\nwant %#v", got, s.ack)
			}
			if be.Uint32(b) != s.ack.Thread() || got.Thread() != s.ack.Thread() {
				t.Errorf("threadID @0 = %d, Thread() = %d", be.Uint32(b), s.ack.Thread())
			}
			if _, err := DecodeAck(at, b[:7]); err == nil {
				t.Error("decode of 7 bytes accepted")
			}
			if s.size > 8 && at != TypeGetMemoryAck && at != TypeGetFileContentsAck && at != TypeGetTargetInfoAck &&
				at != TypeGetRegisterSetAck && at != TypeGetTracebackAck {
				if _, err := DecodeAck(at, b[:s.size-1]); err == nil {
					t.Errorf("decode of %d bytes (shorter than the fixed ack) accepted", s.size-1)
				}
			}
		})
	}
	for _, ct := range CommandTypes() {
		if !seen[ct.Ack()] {
			t.Errorf("no round-trip sample for %v", ct.Ack())
		}
	}
}

// TestFieldOffsets checks fields at the offsets of the spec's tables (§5, §7), for the layouts
// the golden vectors do not cover.
func TestFieldOffsets(t *testing.T) {
	u32 := func(b []byte, o int) uint64 { return uint64(binary.BigEndian.Uint32(b[o:])) }
	u64 := func(b []byte, o int) uint64 { return binary.BigEndian.Uint64(b[o:]) }
	type field struct {
		off  int
		get  func([]byte, int) uint64
		want uint64
	}
	check := func(name string, b []byte, fs ...field) {
		t.Helper()
		for _, f := range fs {
			if got := f.get(b, f.off); got != f.want {
				t.Errorf("%s @%d = %#x, want %#x", name, f.off, got, f.want)
			}
		}
	}
	samples := map[CommandType][]byte{}
	for _, s := range commandSamples() {
		samples[s.cmd.CommandType()] = encodePayload(s.cmd)
	}
	for _, s := range ackSamples() {
		samples[s.ack.CommandType()] = encodePayload(s.ack)
	}
	check("GetSpecialRegsAck", samples[TypeGetSpecialRegsAck], field{8, u64, 0x1000010}, field{64, u64, 8}, field{72, u64, 9})
	check("GetGeneralRegsAck", samples[TypeGetGeneralRegsAck], field{8, u64, sampleGPR[0]}, field{256, u64, sampleGPR[31]})
	check("GetFloatRegsAck", samples[TypeGetFloatRegsAck], field{8, u64, sampleFPR[0][0]}, field{8 + 32*31 + 24, u64, sampleFPR[31][3]})
	check("GetDebugRegsAck", samples[TypeGetDebugRegsAck], field{8, u64, 1}, field{104, u64, 13})
	check("GetMemory", samples[TypeGetMemory], field{8, u64, 0x10000000}, field{16, u32, 300}, field{20, u32, 1})
	check("GetThreadListAck", samples[TypeGetThreadListAck], field{8, u32, 3}, field{12, u32, 100}, field{20, u32, 101},
		field{24, u32, 0x80000000}, field{28, u32, 102})
	check("GetAuxVectorsAck", samples[TypeGetAuxVectorsAck], field{8, u32, 6}, field{16, u64, 3}, field{24, u64, 0x10000040})
	check("GetProcessDataAck", samples[TypeGetProcessDataAck], field{8, u32, 3}, field{12, u32, 4242}, field{36, u32, 6},
		field{40, u64, 0x100}, field{88, u64, 0x550}, field{104, u64, 0x800}, field{112, u64, 1700000000}, field{120, u64, 123456})
	check("GetThreadDataAck", samples[TypeGetThreadDataAck], field{8, u32, 3}, field{12, u32, 2}, field{16, u32, 3},
		field{20, u32, 4}, field{24, u32, 1}, field{32, u64, 1}, field{56, u64, 4}, field{64, u32, 2},
		field{72, u64, 0x7ff0}, field{80, u64, 0x1000010}, field{88, u64, 0x7ff8})
	check("GetPreferencesAck", samples[TypeGetPreferencesAck], field{8, u32, 1}, field{12, u32, 2}, field{16, u32, 1})
	check("GetFilenamesAck", samples[TypeGetFilenamesAck], field{8, u32, 2}, field{12, u32, uint64(binary.BigEndian.Uint32([]byte("/a\x00\x00")))},
		field{12 + 128, u32, uint64(binary.BigEndian.Uint32([]byte("/per")))})
	check("GetFileStatDataAck", samples[TypeGetFileStatDataAck], field{8, u64, 1}, field{32, u32, 0o100644}, field{36, u32, 4},
		field{40, u32, 5}, field{48, u64, 6}, field{56, u64, 7}, field{80, u64, 10}, field{88, u64, 11}, field{112, u64, 14}, field{120, u64, 15})
	check("GetFileContents", samples[TypeGetFileContents], field{136, u64, 4096}, field{144, u64, 777})
	check("GetFileContentsAck", samples[TypeGetFileContentsAck], field{8, u64, 5}, field{16, u32, 0x0a0b0c0d})
	check("SetGeneralReg", samples[TypeSetGeneralReg], field{8, u32, 31}, field{16, u64, 0xdeadbeefcafe})
	check("SetFloatReg", samples[TypeSetFloatReg], field{8, u32, 3}, field{16, u64, 1}, field{40, u64, 4})
	check("SetMemory", samples[TypeSetMemory], field{8, u64, 0x2000}, field{16, u32, 11}, field{20, u32, 1}, field{24, u32, 1},
		field{28, u32, 0x01020304})
	check("SetMemoryAck", samples[TypeSetMemoryAck], field{8, u64, 0x2000}, field{16, u32, 11})
	check("InstallTrapHandler", samples[TypeInstallTrapHandler], field{8, u64, 0x10020000})
	check("AllocateMemory", samples[TypeAllocateMemory], field{8, u64, 1 << 20})
	check("AllocateMemoryAck", samples[TypeAllocateMemoryAck], field{8, u64, 0x4000000})
	check("SetWatchpoint", samples[TypeSetWatchpoint], field{8, u64, 0x3000}, field{16, u32, 8}, field{20, u32, 3})
	check("SetWatchpointAck", samples[TypeSetWatchpointAck], field{8, u64, 0x3000}, field{16, u32, 8}, field{20, u32, 2},
		field{36, u32, 0})
	check("ResetWatchpointAck", samples[TypeResetWatchpointAck], field{24, u64, 0x5000}, field{32, u32, 4}, field{36, u32, 1})
	check("SetPreferences", samples[TypeSetPreferences], field{8, u32, 2}, field{12, u32, 1}, field{16, u32, 2})
	check("FreeMemory", samples[TypeFreeMemory], field{8, u64, 0x4000}, field{16, u64, 4096})
	check("SetSpecialReg", samples[TypeSetSpecialReg], field{8, u32, 2}, field{16, u64, 0x1000abc})
	check("SetDebugRegs", samples[TypeSetDebugRegs], field{8, u64, 1}, field{104, u64, 13})
	check("SetSpecialRegs", samples[TypeSetSpecialRegs], field{8, u64, 0x1000010}, field{72, u64, 9})
	check("ReleaseControl", samples[TypeReleaseControl], field{8, u32, 1})
	check("SetContinuationSignal", samples[TypeSetContinuationSignal], field{8, u32, 11})
	check("SendSignalToProcess", samples[TypeSendSignalToProcess], field{8, u32, 15})
	check("GetTargetInfoAck", samples[TypeGetTargetInfoAck], field{8, func(b []byte, o int) uint64 { return uint64(be.Uint16(b[o:])) }, 62},
		field{10, func(b []byte, o int) uint64 { return uint64(b[o]) }, 1}, field{12, u32, 4096}, field{16, u32, 4242},
		field{20, u32, 12}, field{24, u32, uint64(binary.BigEndian.Uint32([]byte("/usr")))})
	check("GetTracebackAck", samples[TypeGetTracebackAck], field{8, u32, 2}, field{16, u64, 0x401000}, field{24, u64, 0x7ffe0010},
		field{32, u64, 0x401234})
	check("GetLinkMap", samples[TypeGetLinkMap], field{8, u64, 0x403e10}, field{16, u32, 0x1d0}, field{20, u32, 8192},
		field{24, u64, 0x7f0000003118})
	check("GetLinkMapAck", samples[TypeGetLinkMapAck], field{8, u64, 0x7f0000003118}, field{16, u64, 0x7f0000001000},
		field{24, u32, 1}, field{28, u32, 3}, field{32, u64, 0x555555554000}, field{40, u64, 0x7f00000042c0}, field{48, u32, 0},
		field{56, u64, 0x7f0000100000}, field{64, u64, 0x7f0000004800}, field{72, u32, 14},
		field{80, u32, uint64(binary.BigEndian.Uint32([]byte("/lib")))}, field{96, u64, 0x7f0000200000}, field{112, u32, 16})
}

func hdr(seq uint32) Header {
	return Header{Service: ServiceToolctl, Version: ProtocolVersion, Rank: 5, SequenceID: seq, JobID: 77, ToolID: 3}
}

func TestMessageRoundTrip(t *testing.T) {
	rcFail := hdr(9)
	rcFail.ReturnCode = ToolControlConflict
	rcFail.ErrorCode = 22
	var raw [64]byte
	raw[0], raw[63] = 0xaa, 0x55
	msgs := []struct {
		m    Message
		size int
	}{
		{&ErrorAck{hdr(1)}, 40},
		{&Attach{Header: hdr(2), Tag: NewTag("12345678"), Priority: 99, Select: RankInHeader}, 56},
		{&AttachAck{Header: hdr(3), Ranks: []uint32{0, 1, 2, 63}}, 304},
		{&Detach{Header: hdr(4), Select: RanksInNode}, 48},
		{&DetachAck{Header: hdr(5), Ranks: []uint32{7}}, 304},
		{&Control{Header: hdr(6), NotifySet: Signals(5, 19, 11), SendSignal: 5, DynamicNotify: DynamicNotifyStart,
			DACTrap: TrapAfterDAC, WatchPolicy: WatchNoPropagate}, 64},
		{&ControlAck{Header: rcFail, ControllingToolID: 9, Tag: NewTag("holder"), Priority: 42}, 56},
		{&SetupJob{Header: hdr(7), Ranks: []uint32{4, 5}, UserID: 1000, GroupID: 100, NodeID: 12}, 312},
		{&SetupJobAck{hdr(8)}, 40},
		{&NotifyAck{hdr(9)}, 40},
		{&Notify{Header: hdr(10), Kind: NotifyTypeSignal, Signal: NotifySignal{Signal: 5, ThreadID: 99, InstAddress: 1,
			DataAddress: 2, Reason: SignalWatchpointWrite, ExecuteMode: ExecuteSpeculative,
			Spec: SpecContext{InstAddress: 3, GPR1: 4, GPR2: 5, GPR3: 6}}}, 112},
		{&Notify{Header: hdr(10), Kind: NotifyTypeSignal, Repeat: true, Signal: NotifySignal{Signal: 5, ThreadID: 9}}, 112},
		{&Notify{Header: hdr(11), Kind: NotifyTypeTermination, Exit: ExitStatus(3 << 8)}, 112},
		{&Notify{Header: hdr(14), Kind: NotifyTypeUnreachable, Lost: 6}, 112},
		{&Notify{Header: hdr(12), Kind: NotifyTypeControl, Control: NotifyControl{ToolID: 4, Tag: NewTag("t"), Priority: 1,
			Reason: ControlAvailable}}, 112},
		{&Notify{Header: hdr(13), Kind: 7, Raw: raw}, 112},
		{&Hello{Header: hdr(14), ExtVersion: 2, Nonce: make([]byte, 32)}, 48 + 32},
		{&Hello{Header: hdr(14), ExtVersion: 2, Proof: []byte("proof-of-11")}, 48 + 16},
		{&HelloAck{Header: hdr(15), ExtVersion: 2, Node: "node17"}, 48 + 8},
		{&HelloAck{Header: hdr(15), ExtVersion: 2, Nonce: make([]byte, 32), Proof: make([]byte, 32)}, 48 + 64},
		{&RawMessage{Header: Header{Type: 6000, Rank: 1, Length: 0}, Body: []byte{1, 2, 3}}, 43},
		{&Query{Header: hdr(16)}, 304},
		{&Update{Header: hdr(17), Commands: []Command{&SetMemory{ThreadID: 1, Addr: 2, Data: []byte{1, 2, 3}},
			&SendSignal{ThreadID: 1, Signal: 2}, &ContinueProcess{}}}, 304 + 40 + 16 + 8},
		{&QueryAck{Header: rcFail}, 304},
		{&Exits{Header: hdr(18), Groups: []ExitGroup{{JobID: 7, ToolID: 3, Ranks: RankRanges{{0, 62, 2}}},
			{JobID: 7, ToolID: 3, Status: 3 << 8, Ranks: RanksOf(1, 5, 6)}}}, 48 + 24 + 16 + 24 + 24},
	}
	for _, tc := range msgs {
		t.Run(tc.m.MessageType().String(), func(t *testing.T) {
			b, err := Encode(tc.m)
			if err != nil {
				t.Fatal(err)
			}
			if len(b) != tc.size {
				t.Errorf("encoded %d bytes, spec %d", len(b), tc.size)
			}
			got, err := DecodeMessage(b)
			if err != nil {
				t.Fatal(err)
			}
			want := reflect.New(reflect.TypeOf(tc.m).Elem())
			want.Elem().Set(reflect.ValueOf(tc.m).Elem())
			w := want.Interface().(Message)
			w.Hdr().Type, w.Hdr().Length = tc.m.MessageType(), uint32(tc.size)
			if !reflect.DeepEqual(got, w) {
				t.Errorf("round trip:\n got %#v\nwant %#v", got, w)
			}
		})
	}
}

// TestQueryAckRoundTrip covers every command kind in acks, with failure forms: an 8-byte ack for
// a failed command and CmdAllocErr without payload.
func TestQueryAckRoundTrip(t *testing.T) {
	var rs []Result
	for i, s := range ackSamples() {
		if i >= 12 {
			break
		}
		rs = append(rs, Result{Type: s.ack.CommandType(), Code: CmdSuccess, Ack: s.ack})
	}
	rs = append(rs, Result{Type: TypeGetMemoryAck, Code: CmdTIDinval, Ack: &BareAck{Type: TypeGetMemoryAck, ThreadID: 77}})
	rs = append(rs, Result{Type: TypeGetThreadDataAck, Code: CmdAllocErr})
	rs = append(rs, Result{Type: 1000, Code: CmdSuccess, Ack: &RawAck{Type: 1000, ThreadID: 5, Data: []byte{0, 0, 0, 5, 9, 9, 9, 9, 1}}})
	m := &QueryAck{Header: hdr(1), Results: rs}
	b, err := Encode(m)
	if err != nil {
		t.Fatal(err)
	}
	for i := range m.Results {
		off := be.Uint32(b[44+16*i+4:])
		if off%8 != 0 {
			t.Errorf("payload %d at %d, not 8-aligned", i, off)
		}
	}
	got, err := DecodeMessage(b)
	if err != nil {
		t.Fatal(err)
	}
	m.Type, m.Length = MsgQueryAck, uint32(len(b))
	if !reflect.DeepEqual(got, m) {
		t.Errorf("round trip:\n got %#v\nwant %#v", got, m)
	}
}

// TestAckPayloadOrder: CNK hands out ack space in whatever order its hardware threads run, so
// a reader must follow the descriptors. Build an ack, move its payloads into reverse order, and
// decode it.
func TestAckPayloadOrder(t *testing.T) {
	acks := []Ack{
		&GetMemoryAck{ThreadID: 1, Addr: 0x100, Length: 3, Data: []byte{1, 2, 3}},
		&GetSpecialRegsAck{ThreadID: 2, Regs: sampleSRegs},
		&GetPreferencesAck{ThreadID: 3, BreakpointMode: FastBreakEnable},
	}
	var rs []Result
	for _, a := range acks {
		rs = append(rs, Result{Code: CmdSuccess, Ack: a})
	}
	b, err := Encode(&QueryAck{Header: hdr(4), Results: rs})
	if err != nil {
		t.Fatal(err)
	}
	// Rebuild the payload area with the payloads in reverse order.
	out := append([]byte(nil), b[:CommandMessageSize]...)
	for i := len(acks) - 1; i >= 0; i-- {
		d := b[44+16*i:]
		off, n := be.Uint32(d[4:]), be.Uint32(d[8:])
		out = append(out, make([]byte, round8(len(out))-len(out))...)
		be.PutUint32(out[44+16*i+4:], uint32(len(out)))
		out = append(out, b[off:off+n]...)
	}
	be.PutUint32(out[20:], uint32(len(out)))
	m, err := DecodeMessage(out)
	if err != nil {
		t.Fatal(err)
	}
	got := m.(*QueryAck).Results
	for i, a := range acks {
		if !reflect.DeepEqual(got[i].Ack, a) {
			t.Errorf("result %d: got %#v, want %#v", i, got[i].Ack, a)
		}
	}
	if be.Uint32(out[44+4:]) <= be.Uint32(out[44+16+4:]) {
		t.Fatal("payloads were not reordered")
	}
}

func TestDecodeRequestFramingOfCommands(t *testing.T) {
	// An unknown command, a query command in an Update, and a short payload decode as
	// *RawCommand with the reason; the message itself is valid.
	u := &Update{Header: hdr(1), Commands: []Command{
		&RawCommand{Type: 999, ThreadID: 5, Data: make([]byte, 16)},
		&RawCommand{Type: TypeGetMemory, ThreadID: 6, Data: make([]byte, 24)},
		&RawCommand{Type: TypeSetBreakpoint, ThreadID: 7, Data: make([]byte, 16)},
		&HoldThread{ThreadID: 8},
	}}
	b, err := Encode(u)
	if err != nil {
		t.Fatal(err)
	}
	m, err := DecodeMessage(b)
	if err != nil {
		t.Fatal(err)
	}
	cmds := m.(*Update).Commands
	for i, want := range []error{ErrUnknownCommand, ErrWrongMessage, nil} {
		r, ok := cmds[i].(*RawCommand)
		if !ok {
			t.Fatalf("command %d decoded as %T", i, cmds[i])
		}
		if want != nil && !errors.Is(r.Err, want) || want == nil && r.Err == nil {
			t.Errorf("command %d: Err %v, want %v", i, r.Err, want)
		}
		if r.ThreadID != uint32(5+i) {
			t.Errorf("command %d: thread %d", i, r.ThreadID)
		}
	}
	if h, ok := cmds[3].(*HoldThread); !ok || h.ThreadID != 8 {
		t.Errorf("command 3: %#v", cmds[3])
	}
}

func TestHelpers(t *testing.T) {
	if s := NewTag("DYNINST").String(); s != "DYNINST" {
		t.Errorf("tag %q", s)
	}
	if s := NewTag("ABCDEFGHIJ").String(); s != "ABCDEFGH" {
		t.Errorf("8-byte tag without NUL: %q", s)
	}
	s := Signals(5, 19, 9)
	if uint64(s) != 1<<4|1<<18|1<<8 || !s.Has(19) || s.Has(18) || s.Add(0) != s || s.Add(65) != s {
		t.Errorf("signal set %#x", uint64(s))
	}
	// POSIX wait status, as CNK builds it (§9.4): exit code in bits 8-15, signal in bits 0-6.
	if e := ExitStatus(7 << 8); !e.Exited() || e.ExitCode() != 7 || e.Signaled() {
		t.Errorf("exit: %v", e)
	}
	if e := ExitStatus(9); e.Exited() || !e.Signaled() || e.Signal() != 9 {
		t.Errorf("kill: %v", e)
	}
	if got := InstructionBytes(elf.EM_X86_64, binary.LittleEndian, 0xcc); !bytes.Equal(got, []byte{0xcc}) {
		t.Errorf("x86 trap bytes %x", got)
	}
	if got := InstructionBytes(elf.EM_PPC64, binary.BigEndian, 0x7d821008); !bytes.Equal(got, []byte{0x7d, 0x82, 0x10, 0x08}) {
		t.Errorf("ppc64 trap bytes %x", got)
	}
	if got := InstructionBytes(elf.EM_PPC64, binary.LittleEndian, 0x7fe00008); !bytes.Equal(got, []byte{0x08, 0, 0xe0, 0x7f}) {
		t.Errorf("ppc64le trap bytes %x", got)
	}
	if v := InstructionValue(binary.LittleEndian, []byte{0x55}); v != 0x55 {
		t.Errorf("x86 original byte value %#x", v)
	}
	if v := InstructionValue(binary.BigEndian, []byte{0x7d, 0x82, 0x10, 0x08}); v != 0x7d821008 {
		t.Errorf("ppc64 value %#x", v)
	}
	if TypeGetMemory.String() != "GetMemory" || TypeGetMemoryAck.String() != "GetMemoryAck" ||
		CommandType(231).String() != "CommandType(231)" || CommandType(232).String() != "CommandType(232)" {
		t.Error("command type names")
	}
	if !TypeGetTargetInfo.IsExtension() || TypeGetMemory.IsExtension() || TypeGetTargetInfo.Kind() != MsgQuery ||
		TypeSetRegisterSet.Kind() != MsgUpdate || !TypeReleaseControl.IsAction() || TypeHoldThread.IsAction() {
		t.Error("command type classes")
	}
	if ReturnCode(99).String() != "ReturnCode(99)" || ToolControlConflict.Error() != "ToolControlConflict (51)" {
		t.Error("return code names")
	}
}
