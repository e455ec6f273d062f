package cdti

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"os"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// vector is one struct image of PART A of cdti-v6-vectors.txt.
type vector struct {
	id, name string
	size     int
	bytes    []byte
}

var (
	vecHeadRE  = regexp.MustCompile(`^\[(V\d+)\] (.+)$`)
	vecBytesRE = regexp.MustCompile(`^bytes:\s+(\d+)`)
	vecHexRE   = regexp.MustCompile(`^([0-9a-f]{4}): ((?:[0-9a-f]{2} ?){1,16})$`)
	vecEnumRE  = regexp.MustCompile(`^enum (\w+)$`)
	vecValueRE = regexp.MustCompile(`^  (\w+) = (\d+)$`)
)

// loadVectors parses the golden file: the hex dumps of PART A and the name = value lines of
// PART B (grouped by enum; "constants" is a group too).
func loadVectors(t testing.TB) (map[string]*vector, map[string][][2]string) {
	t.Helper()
	f, err := os.Open("testdata/cdti-v6-vectors.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	vecs := map[string]*vector{}
	groups := map[string][][2]string{}
	var cur *vector
	group := ""
	partB := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimRight(sc.Text(), " ")
		if strings.HasPrefix(line, "PART B") {
			partB, cur = true, nil
			continue
		}
		if partB {
			if m := vecEnumRE.FindStringSubmatch(line); m != nil {
				group = m[1]
			} else if line == "constants" {
				group = "constants"
			} else if m := vecValueRE.FindStringSubmatch(line); m != nil && group != "" {
				groups[group] = append(groups[group], [2]string{m[1], m[2]})
			}
			continue
		}
		if m := vecHeadRE.FindStringSubmatch(line); m != nil {
			cur = &vector{id: m[1], name: m[2]}
			vecs[cur.id] = cur
			continue
		}
		if cur == nil {
			continue
		}
		if m := vecBytesRE.FindStringSubmatch(line); m != nil {
			cur.size, _ = strconv.Atoi(m[1])
			continue
		}
		if m := vecHexRE.FindStringSubmatch(line); m != nil {
			off, _ := strconv.ParseUint(m[1], 16, 32)
			if int(off) != len(cur.bytes) {
				t.Fatalf("%s: hex line at %#x after %d bytes", cur.id, off, len(cur.bytes))
			}
			b, err := hex.DecodeString(strings.ReplaceAll(strings.TrimSpace(m[2]), " ", ""))
			if err != nil {
				t.Fatalf("%s: %v", cur.id, err)
			}
			cur.bytes = append(cur.bytes, b...)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	for id, v := range vecs {
		if len(v.bytes) != v.size || v.size == 0 {
			t.Fatalf("%s: %d bytes dumped, %d announced", id, len(v.bytes), v.size)
		}
	}
	if len(vecs) != 11 || len(groups) == 0 {
		t.Fatalf("parsed %d vectors and %d value groups, want 11 vectors and PART B", len(vecs), len(groups))
	}
	return vecs, groups
}

// vhdr is the default header of the vectors ("Unless a vector says otherwise").
func vhdr(t MessageType, seq uint32, length int) Header {
	return Header{Service: ServiceToolctl, Version: 6, Type: t, Rank: 3, SequenceID: seq, Length: uint32(length),
		JobID: 0x000000123456789a, ToolID: 7}
}

// goldenMessages transcribes the "settings" lines of the message vectors.
func goldenMessages() map[string]Message {
	return map[string]Message{
		"V1": &Attach{Header: vhdr(MsgAttach, 1, 56), Tag: NewTag("DYNINST"), Priority: 50, Select: RanksInNode},
		"V2": &Control{Header: vhdr(MsgControl, 2, 64), NotifySet: Signals(5, 19), SendSignal: 19,
			DynamicNotify: DynamicNotifyDLoader, DACTrap: DACTrapNoChange, WatchPolicy: WatchPropagate},
		"V3": &Query{Header: vhdr(MsgQuery, 3, 328), Commands: []Command{
			&GetMemory{ThreadID: 0, Addr: 0x0000000001000010, Length: 16, SpecAccess: SpecAccessForceNonSpeculative}}},
		"V4": &Update{Header: vhdr(MsgUpdate, 4, 328), Commands: []Command{
			&SetBreakpoint{ThreadID: 0, Addr: 0x0000000001000020, Instruction: 0x7d821008}}},
		"V6": &Notify{Header: vhdr(MsgNotify, 9, 112), Kind: NotifyTypeSignal, Signal: NotifySignal{
			Signal: 5, ThreadID: 0x00010203, InstAddress: 0x0000000001000020, DataAddress: 0,
			Reason: SignalBreakpoint, ExecuteMode: ExecuteNonSpeculative}},
		"V7": &Notify{Header: vhdr(MsgNotify, 10, 112), Kind: NotifyTypeControl, Control: NotifyControl{
			ToolID: 8, Tag: NewTag("gdbtool"), Priority: 99, Reason: ControlConflict}},
		"V8": &ControlAck{Header: vhdr(MsgControlAck, 2, 56), ControllingToolID: 7, Tag: NewTag("DYNINST"), Priority: 50},
	}
}

func TestGoldenMessages(t *testing.T) {
	vecs, _ := loadVectors(t)
	for id, want := range goldenMessages() {
		v := vecs[id]
		t.Run(id+" "+v.name, func(t *testing.T) {
			got, err := Encode(want)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, v.bytes) {
				t.Errorf("encode:\n got %x\nwant %x", got, v.bytes)
			}
			m, err := DecodeMessage(v.bytes)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(m, want) {
				t.Errorf("decode:\n got %#v\nwant %#v", m, want)
			}
		})
	}
}

// payloadVector checks a command or ack payload vector: the encoding equals the first
// EncodedSize bytes of the dump, the rest of the dump is zero, and decoding the dump gives the
// value.
func payloadVector(t *testing.T, v *vector, enc interface {
	EncodedSize() int
	Encode([]byte)
}, size int, decode func([]byte) (any, error)) {
	t.Helper()
	if n := enc.EncodedSize(); n != size {
		t.Fatalf("%s: EncodedSize %d, want %d", v.id, n, size)
	}
	got := make([]byte, max(size, len(v.bytes)))
	enc.Encode(got[:size])
	if !bytes.Equal(got, padTo(v.bytes, len(got))) {
		t.Errorf("%s encode:\n got %x\nwant %x", v.id, got, v.bytes)
	}
	d, err := decode(padTo(v.bytes, max(size, len(v.bytes))))
	if err != nil {
		t.Fatalf("%s decode: %v", v.id, err)
	}
	if !reflect.DeepEqual(d, enc) {
		t.Errorf("%s decode:\n got %#v\nwant %#v", v.id, d, enc)
	}
}

func padTo(b []byte, n int) []byte {
	return append(append([]byte(nil), b...), make([]byte, max(0, n-len(b)))...)
}

func TestGoldenPayloads(t *testing.T) {
	vecs, _ := loadVectors(t)
	cmd := func(ct CommandType) func([]byte) (any, error) {
		return func(b []byte) (any, error) { return DecodeCommand(ct, b) }
	}
	ack := func(ct CommandType) func([]byte) (any, error) {
		return func(b []byte) (any, error) { return DecodeAck(ct, b) }
	}
	// V5: SendSignal{threadID 0x00010203, signum 19}, 16 bytes.
	payloadVector(t, vecs["V5"], &SendSignal{ThreadID: 0x00010203, Signal: 19}, 16, cmd(TypeSendSignal))
	// V9: the first 32 of the 8208 bytes of GetThreadListAck.
	payloadVector(t, vecs["V9"], &GetThreadListAck{ThreadID: 1, Threads: []ThreadEntry{
		{TID: 0x00010203}, {TID: 0x00010204, CommThread: true}}}, 8208, ack(TypeGetThreadListAck))
	// V10: GetMemoryAck with 4 data bytes: descriptor length 28, CNK reserves 32.
	payloadVector(t, vecs["V10"], &GetMemoryAck{ThreadID: 0x00010203, Addr: 0x0000000001000010, Length: 4,
		Data: []byte{0x7d, 0x82, 0x10, 0x08}}, 28, ack(TypeGetMemoryAck))
	// V11: SetMemory with 4 data bytes: descriptor length 36.
	payloadVector(t, vecs["V11"], &SetMemory{ThreadID: 0, Addr: 0x0000000001000010, SpecAccess: SpecAccessUseThreadState,
		SharedMemory: SharedMemoryAllow, Data: []byte{0x60, 0, 0, 0}}, 36, cmd(TypeSetMemory))

	// V5's settings also describe its message: Update, sequence 5, length 320, one descriptor
	// {217, 0, 304, 16, 0}, the payload at 304.
	b, err := Encode(&Update{Header: vhdr(MsgUpdate, 5, 0), Commands: []Command{&SendSignal{ThreadID: 0x00010203, Signal: 19}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != 320 || be.Uint16(b[40:]) != 1 || !bytes.Equal(b[44:60], []byte{0, 217, 0, 0, 0, 0, 1, 0x30, 0, 0, 0, 16, 0, 0, 0, 0}) ||
		!bytes.Equal(b[304:], vecs["V5"].bytes) {
		t.Errorf("V5 message: %x", b)
	}
}

func TestGoldenValues(t *testing.T) {
	_, groups := loadVectors(t)
	for name, ec := range enumChecks() {
		t.Run(name, func(t *testing.T) {
			entries := groups[name]
			if len(entries) == 0 {
				t.Fatalf("enum %s not in PART B", name)
			}
			if len(entries) != len(ec.vals) {
				t.Errorf("PART B lists %d values, the package has %d", len(entries), len(ec.vals))
			}
			for _, e := range entries {
				want, _ := strconv.ParseInt(e[1], 10, 64)
				got, ok := ec.vals[e[0]]
				if !ok {
					t.Errorf("%s = %d: no Go constant", e[0], want)
					continue
				}
				if got != want {
					t.Errorf("%s: Go value %d, PART B %d", e[0], got, want)
				}
				str := ec.str
				if str == nil {
					str = constantString(e[0], want)
				}
				if str != nil {
					if s := str(want); s != e[0] {
						t.Errorf("%s(%d).String() = %q, want %q", name, want, s, e[0])
					}
				}
			}
		})
	}
	for g := range groups {
		if _, ok := enumChecks()[g]; !ok {
			t.Errorf("PART B group %s is not checked", g)
		}
	}
}

// constantString picks the String method for a value of the "constants" group: message types,
// service ids, and command and ack types have names; the limits do not.
func constantString(name string, v int64) func(int64) string {
	switch {
	case limitNames[name]:
		return nil
	case strings.Contains(name, "Service"):
		return func(v int64) string { return Service(v).String() }
	case v >= 5000 && v <= 5014:
		return func(v int64) string { return MessageType(v).String() }
	}
	return func(v int64) string { return CommandType(v).String() }
}

var limitNames = map[string]bool{
	"BaseRdmaPort": true, "ProtocolVersion": true, "MaxQueryCommands": true, "MaxUpdateCommands": true,
	"MaxMemorySize": true, "MaxThreadIds": true, "MaxAuxVecDWords": true, "MaxStackFrames": true,
	"NumGPRegs": true, "NumFPRegs": true, "QueryPriorityLevel": true, "MinUpdatePriorityLevel": true,
	"MaxUpdatePriorityLevel": true, "MaxActiveTools": true, "MaxRanksPerNode": true,
	"MaxPersistPathnameSize": true, "MaxPersistPathnames": true, "ToolTagSize": true,
	"SmallMessageRegionSize": true, "SmallMessageDataSize": true, "ImmediateMessageSize": true,
}
