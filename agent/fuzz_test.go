package agent

import (
	"bufio"
	"bytes"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hpcdap/hpcdap/cdti"
)

// FuzzParseMaps: any text gives mappings with start ≤ end, or an error; never a panic.
func FuzzParseMaps(f *testing.F) {
	if b, err := os.ReadFile("/proc/self/maps"); err == nil {
		f.Add(b)
	}
	f.Add([]byte("7f00-7f10 r-xp 00000000 08:01 42   /path/with spaces/lib.so\n"))
	f.Add([]byte("1000-2000 rw-p 00000000 00:00 0\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		ms, err := parseMaps(b)
		if err != nil {
			return
		}
		for _, m := range ms {
			if m.end < m.start {
				t.Fatalf("mapping %+v ends before it starts", m)
			}
			if m.path != strings.TrimSpace(m.path) {
				t.Fatalf("path %q not trimmed", m.path)
			}
		}
		layoutOf(ms, "/x")
	})
}

// FuzzParseStat: any text gives fields or an error; never a panic.
func FuzzParseStat(f *testing.F) {
	if b, err := os.ReadFile("/proc/self/stat"); err == nil {
		f.Add(b)
	}
	f.Add([]byte("1 (a) b) R 0 0 0 0 0 0 0 0 0 0 0 0 0 0 20 0 1 0 100 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 3 0 0"))
	f.Fuzz(func(t *testing.T, b []byte) {
		parseStat(b)
	})
}

// FuzzParseAttachList: any text gives a rank↔pid map of positive pids, or an error.
func FuzzParseAttachList(f *testing.F) {
	f.Add("0=4242,1=4243")
	f.Add("3=1")
	f.Add("0=1,0=2")
	f.Fuzz(func(t *testing.T, s string) {
		m, err := ParseAttachList(s)
		if err != nil {
			return
		}
		for r, p := range m {
			if p <= 0 {
				t.Fatalf("rank %d: pid %d", r, p)
			}
		}
	})
}

// FuzzManagementCodec: the management plane's framing bounds what it reads and never panics.
func FuzzManagementCodec(f *testing.F) {
	f.Add([]byte("Content-Length: 17\r\n\r\n{\"jsonrpc\":\"2.0\"}"))
	f.Add([]byte("Content-Length: 99999999\r\n\r\n"))
	f.Add([]byte("X: y\r\nContent-Length: 2\r\n\r\n{}"))
	f.Fuzz(func(t *testing.T, b []byte) {
		var v any
		newBoundedCodec(true).ReadObject(bufio.NewReader(bytes.NewReader(b)), &v)
	})
}

// FuzzAgentFrames sends arbitrary bytes, after an accepted Hello and an Attach, to an agent
// serving a real process. Whatever they are, the agent must not fail internally, and another
// connection must still be served.
func FuzzAgentFrames(f *testing.F) {
	h := newHarness(f, "")
	h.spawn(1, progBin, "loop", "1000000")
	hd := cdti.Header{Service: cdti.ServiceToolctl, Version: cdti.ProtocolVersion, ToolID: 9, SequenceID: 1}
	seeds := []cdti.Message{
		&cdti.Query{Header: hd, Commands: []cdti.Command{&cdti.GetThreadList{}, &cdti.GetMemory{Addr: 0x401000, Length: 16}}},
		&cdti.Query{Header: hd, Commands: []cdti.Command{&cdti.GetThreadData{}, &cdti.GetTraceback{}, &cdti.GetRegisterSet{Set: cdti.RegSetGeneral}}},
		&cdti.Control{Header: hd, NotifySet: cdti.Signals(int(syscall.SIGTRAP), int(syscall.SIGSTOP)), SendSignal: uint32(syscall.SIGSTOP)},
		&cdti.Update{Header: hd, Commands: []cdti.Command{&cdti.SetBreakpoint{Addr: 0x401000, Instruction: 0xCC}, &cdti.ContinueProcess{}}},
		&cdti.Update{Header: hd, Commands: []cdti.Command{&cdti.SetWatchpoint{Addr: 0x404000, Length: 8, Type: cdti.WatchWrite}, &cdti.StepThread{}}},
		&cdti.Detach{Header: hd, Select: cdti.RanksInNode},
	}
	for _, m := range seeds {
		b, err := cdti.EncodeLax(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		nc, err := net.Dial("tcp", h.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		r := bufio.NewReader(nc)
		mine := cdti.NewNonce()
		hello, _ := cdti.Encode(&cdti.Hello{Header: hd, ExtVersion: cdti.ExtensionVersion, Nonce: mine})
		nc.Write(hello)
		fb, err := cdti.ReadFrame(r)
		if err != nil {
			t.Fatalf("hello challenge: %v", err)
		}
		ch, err := cdti.DecodeMessage(fb)
		if err != nil {
			t.Fatalf("hello challenge: %v", err)
		}
		proof, _ := cdti.Encode(&cdti.Hello{Header: hd, ExtVersion: cdti.ExtensionVersion,
			Proof: cdti.HelloProof([]byte(testToken), cdti.HelloRoleTool, ch.(*cdti.HelloAck).Nonce, mine)})
		attach, _ := cdti.Encode(&cdti.Attach{Header: hd, Tag: cdti.NewTag("fuzz"), Priority: 7})
		nc.Write(proof)
		nc.Write(attach)
		nc.Write(b)
		// Half-close: the agent answers what it was sent, finds the end of its input and hangs
		// up (dropping the tool), which ends the read at once. (A fixed wait for the answers
		// bounded this target to 50 inputs a second.) The deadline only guards against a hang.
		nc.(*net.TCPConn).CloseWrite()
		nc.SetReadDeadline(time.Now().Add(10 * time.Second))
		for {
			if _, err := cdti.ReadFrame(r); err != nil {
				break
			}
		}
		nc.Close()
		if strings.Contains(h.logBuf.String(), "internal error") {
			t.Fatalf("the agent failed internally:\n%s", h.logBuf.String())
		}
		// The process's goroutine still answers.
		alive := make(chan error, 1)
		go func() { alive <- h.a.proc(0).do(func() {}) }()
		select {
		case err := <-alive:
			if err != nil {
				t.Fatalf("process goroutine: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("the process's goroutine is stuck")
		}
	})
}
