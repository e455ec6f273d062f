package agent

import (
	"bytes"
	"encoding/binary"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/hpcdap/hpcdap/cdti"
)

// TestCNKMode checks an agent with Config.CNK as a tool sees it: every extension command is
// answered CmdInval, in a Query or an Update, among protocol v6 commands that still work;
// GatherStacks is refused as an unsupported message type; a command after a refused
// extension in an Update fails as after any failed command; and ack payloads come in a
// shuffled order that the client reads right.
func TestCNKMode(t *testing.T) {
	h := newHarness(t, "", func(c *Config) { c.CNK = true })
	h.spawn(1, progBin)
	tt, stop := startStopped(t, h, 1)
	tid := stop.ThreadID
	textAddr, text := textBytes(t, progBin)

	queries := []cdti.Command{&cdti.GetTargetInfo{}, &cdti.GetRegisterSet{Set: cdti.RegSetGeneral},
		&cdti.GetTraceback{}, &cdti.GetLinkMap{}}
	for _, ext := range queries {
		r := tt.query(0, ext)
		if r.Code != cdti.CmdInval {
			t.Errorf("%v answered %v, want CmdInval", ext.CommandType(), r.Code)
		}
	}
	if _, err := tt.c.TargetInfo(ctx(), 0); !errors.Is(err, cdti.ErrNotSupported) {
		t.Errorf("TargetInfo: %v, want ErrNotSupported", err)
	}
	updates := []cdti.Command{
		&cdti.SetRegisterSet{ThreadID: tid, Set: cdti.RegSetGeneral, Data: make([]byte, 216)},
		&cdti.StopProcess{},
		&cdti.CallFunction{ThreadID: tid, Entry: textAddr},
		&cdti.SetTrapCondition{Address: textAddr},
	}
	for _, ext := range updates {
		rs := tt.update(0, ext)
		if rs[0].Code != cdti.CmdInval {
			t.Errorf("%v answered %v, want CmdInval", ext.CommandType(), rs[0].Code)
		}
	}
	if _, err := tt.c.GatherStacks(ctx(), 0); !errors.Is(err, cdti.UnsupportedType) {
		t.Errorf("GatherStacks: %v, want UnsupportedType", err)
	}

	// Extensions mixed with v6 commands, many times: the v6 answers are right whatever the
	// order their payloads came in.
	for range 20 {
		rs, err := tt.c.Query(ctx(), 0, &cdti.GetMemory{Addr: textAddr, Length: 64}, &cdti.GetTargetInfo{},
			&cdti.GetThreadList{}, &cdti.GetTraceback{}, &cdti.GetMemory{Addr: textAddr + 256, Length: 24},
			&cdti.GetAuxVectors{})
		if err != nil {
			t.Fatal(err)
		}
		if m := rs[0].Ack.(*cdti.GetMemoryAck); !bytes.Equal(m.Data, text[:64]) {
			t.Fatalf("text %x, want %x", m.Data, text[:64])
		}
		if m := rs[4].Ack.(*cdti.GetMemoryAck); !bytes.Equal(m.Data, text[256:280]) {
			t.Fatalf("text at +256 %x, want %x", m.Data, text[256:280])
		}
		if tl := rs[2].Ack.(*cdti.GetThreadListAck); len(tl.Threads) != 1 || tl.Threads[0].TID != tid {
			t.Fatalf("thread list %+v, want thread %d", tl.Threads, tid)
		}
		if av := rs[5].Ack.(*cdti.GetAuxVectorsAck); len(av.Words) < 4 {
			t.Fatalf("auxiliary vector %v", av.Words)
		}
		if rs[1].Code != cdti.CmdInval || rs[3].Code != cdti.CmdInval {
			t.Fatalf("extensions answered %v, %v", rs[1].Code, rs[3].Code)
		}
	}
	shuffled := false
	rc := h.rawDial(testToken)
	if m, err := rc.recv(); err != nil || m.Hdr().ReturnCode != cdti.Success {
		t.Fatalf("hello: %v %v", m, err)
	}
	hd := cdti.Header{Service: cdti.ServiceToolctl, Version: cdti.ProtocolVersion, ToolID: 77}
	rc.send(&cdti.Attach{Header: hd, Tag: cdti.NewTag("raw"), Priority: 0})
	if m, err := rc.recv(); err != nil || m.Hdr().ReturnCode != cdti.Success {
		t.Fatalf("attach: %v %v", m, err)
	}
	for i := 0; i < 64 && !shuffled; i++ {
		rc.send(&cdti.Query{Header: hd, Commands: []cdti.Command{&cdti.GetMemory{Addr: textAddr, Length: 8},
			&cdti.GetThreadList{}, &cdti.GetMemory{Addr: textAddr + 8, Length: 8}}})
		rc.nc.SetReadDeadline(time.Now().Add(20 * time.Second))
		b, err := cdti.ReadFrame(rc.r)
		if err != nil {
			t.Fatal(err)
		}
		var offs []uint32
		for d := range 3 {
			offs = append(offs, binary.BigEndian.Uint32(b[44+cdti.DescriptorSize*d+4:]))
		}
		shuffled = !slices.IsSorted(offs)
	}
	if !shuffled {
		t.Error("64 acks of 3 payloads all came in descriptor order")
	}

	// A refused extension fails the action command after it, as any failed command does.
	rs := tt.update(0, &cdti.StopProcess{}, &cdti.ContinueProcess{})
	if rs[0].Code != cdti.CmdInval || rs[1].Code != cdti.CmdPrevCmdFail {
		t.Errorf("StopProcess, ContinueProcess answered %v, %v; want CmdInval, CmdPrevCmdFail", rs[0].Code, rs[1].Code)
	}
	// The v6 way still runs the rank to its end.
	tt.cont(0)
	if st := tt.waitTermination(0); !st.Exited() {
		t.Errorf("rank ended with %v", st)
	}
}
