package agent

import (
	"bufio"
	"crypto/hmac"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hpcdap/hpcdap/cdti"
	"github.com/hpcdap/hpcdap/internal/testenv"
)

// readUntilClosed reads a connection until the peer closes it; it fails if the peer keeps it
// open.
func readUntilClosed(t *testing.T, nc net.Conn) []byte {
	t.Helper()
	nc.SetReadDeadline(time.Now().Add(15 * time.Second))
	b, err := io.ReadAll(nc)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the agent kept the connection open")
	}
	return b
}

// The management plane refuses a hello with a bad token and closes the connection.
func TestManagementBadToken(t *testing.T) {
	h := newHarness(t, "")
	nc, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	writeHello(t, nc, bufio.NewReader(nc), 1, "wrong", "")
	got := string(readUntilClosed(t, nc))
	if !strings.Contains(got, "bad token") || strings.Contains(got, `"result"`) {
		t.Errorf("answer to a bad hello: %q", got)
	}
	// Any other first call is refused too.
	nc2, _ := net.Dial("tcp", h.addr)
	defer nc2.Close()
	writeRPC(t, nc2, 1, "ranks", nil)
	if got := string(readUntilClosed(t, nc2)); strings.Contains(got, `"result"`) {
		t.Errorf("ranks before hello answered: %q", got)
	}
}

// The management plane with the right token: hello, ranks, health, shutdown.
func TestManagementPlane(t *testing.T) {
	h := newHarness(t, "")
	h.spawn(2, progBin, "loop", "1")
	nc, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	r := bufio.NewReader(nc)
	writeHello(t, nc, r, 1, testToken, "test")
	var hello HelloResult
	readRPC(t, r, &hello)
	if hello.Node != "testnode" || hello.Ranks != 2 {
		t.Errorf("hello %+v", hello)
	}
	writeRPC(t, nc, 2, "ranks", nil)
	var ranks []RankInfo
	readRPC(t, r, &ranks)
	if len(ranks) != 2 || ranks[1].Rank != 1 || ranks[0].State != "loaded" || ranks[0].Executable != progBin {
		t.Errorf("ranks %+v", ranks)
	}
	writeRPC(t, nc, 3, "health", nil)
	var health HealthResult
	readRPC(t, r, &health)
	if health.Ranks != 2 || health.Alive != 2 {
		t.Errorf("health %+v", health)
	}
	writeRPC(t, nc, 4, "shutdown", ShutdownParams{Kill: true})
	var empty struct{}
	readRPC(t, r, &empty)
	select {
	case <-h.a.Done():
	case <-time.After(20 * time.Second):
		t.Fatal("shutdown did not end the agent")
	}
}

// writeHello authenticates a management connection with token: it asks for the agent's
// challenge (checking the agent's proof only when token is the session's) and writes the hello
// call of id with the proof; the caller reads its answer.
func writeHello(t *testing.T, w io.Writer, r *bufio.Reader, id int, token, client string) {
	t.Helper()
	mine := cdti.NewNonce()
	writeRPC(t, w, 1000+id, "hello.challenge", ChallengeParams{Nonce: mine})
	var ch ChallengeResult
	readRPC(t, r, &ch)
	if token == testToken && !hmac.Equal(ch.Proof, cdti.HelloProof([]byte(token), cdti.HelloRoleAgent, mine, ch.Nonce)) {
		t.Fatalf("the agent's proof %x is wrong", ch.Proof)
	}
	writeRPC(t, w, id, "hello", HelloParams{Proof: cdti.HelloProof([]byte(token), cdti.HelloRoleTool, ch.Nonce, mine), Client: client})
}

func writeRPC(t *testing.T, w io.Writer, id int, method string, params any) {
	t.Helper()
	msg := map[string]any{"jsonrpc": "2.0", "id": id, "method": method}
	if params != nil {
		msg["params"] = params
	}
	b, _ := json.Marshal(msg)
	if _, err := fmt.Fprintf(w, "Content-Length: %d\r\n\r\n%s", len(b), b); err != nil {
		t.Fatal(err)
	}
}

func readRPC(t *testing.T, r *bufio.Reader, result any) {
	t.Helper()
	var resp struct {
		Result json.RawMessage `json:"result"`
		Error  *struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := newBoundedCodec(true).ReadObject(r, &resp); err != nil {
		t.Fatalf("read management answer: %v", err)
	}
	if resp.Error != nil {
		t.Fatalf("management error: %s", resp.Error.Message)
	}
	if err := json.Unmarshal(resp.Result, result); err != nil {
		t.Fatalf("decode %s: %v", resp.Result, err)
	}
}

// CDTI refuses a Hello with a bad token (HelloAck ToolAuthorityError) and closes the
// connection; so it does with a first message that is not a Hello.
func TestCDTIBadToken(t *testing.T) {
	h := newHarness(t, "")
	h.spawn(1, progBin, "loop", "1")
	_, err := cdti.Dial(ctx(), "tcp", h.addr, cdti.ClientOptions{ToolID: 1, Token: []byte("wrong")})
	if !errors.Is(err, cdti.ErrAuthentication) {
		t.Errorf("dial with a bad token: %v, want ErrAuthentication", err)
	}
	rc := h.rawDial("wrong")
	m, err := rc.recv()
	if err != nil || m.Hdr().ReturnCode != cdti.ToolAuthorityError {
		t.Fatalf("answer to a bad Hello: %v %v", m, err)
	}
	rc.send(&cdti.Attach{Header: cdti.Header{Service: cdti.ServiceToolctl, ToolID: 1}, Priority: 1})
	readUntilClosed(t, rc.nc)

	nc, _ := net.Dial("tcp", h.addr)
	defer nc.Close()
	b, _ := cdti.Encode(&cdti.Attach{Header: cdti.Header{Service: cdti.ServiceToolctl, ToolID: 1}, Priority: 1})
	nc.Write(b)
	if got := readUntilClosed(t, nc); len(got) > 40 {
		t.Errorf("an unauthenticated Attach got %d bytes of answer", len(got))
	}
}

// Bad input: malformed frames close only their own connection; unknown and Power-only
// commands get CmdInval, bad threads CmdTIDinval, and the message-level checks come in the
// CNK's order.
func TestBadInput(t *testing.T) {
	h := newHarness(t, "")
	h.spawn(1, progBin, "run")
	tt, _ := startStopped(t, h, 1)
	hit := testenv.NMSymbol(t, progBin, "hit")

	// A frame whose length is shorter than a header, and one whose descriptors point outside
	// the message (from an attached tool, so that it passes the message-level checks): each
	// closes its connection; the tool's connection works on.
	for i, frame := range [][]byte{badLengthFrame(), badDescriptorFrame()} {
		rc := h.rawDial(testToken)
		if m, err := rc.recv(); err != nil || m.Hdr().ReturnCode != cdti.Success {
			t.Fatalf("hello: %v %v", m, err)
		}
		// Tool 77 attaches; the agent frees a dropped connection's tool ids once it has
		// cleaned up after it, so the second round uses another id.
		rc.send(&cdti.Attach{Header: cdti.Header{Service: cdti.ServiceToolctl, ToolID: 77 + uint32(i)}})
		if m, err := rc.recv(); err != nil || m.Hdr().ReturnCode != cdti.Success {
			t.Fatalf("attach: %v %v", m, err)
		}
		rc.write(frame)
		readUntilClosed(t, rc.nc)
	}
	if r := tt.query(0, &cdti.GetThreadList{}); r.Code != cdti.CmdSuccess {
		t.Fatalf("the tool's connection suffered: %v", r.Code)
	}

	rs := rawQuery(t, tt, 0,
		&cdti.RawCommand{Type: 1199, Data: make([]byte, 8)},
		&cdti.GetGeneralRegs{},
		&cdti.GetMemory{ThreadID: 999999, Addr: hit, Length: 4},
		&cdti.GetMemory{Addr: hit, Length: 4},
	)
	want := []cdti.CmdReturnCode{cdti.CmdInval, cdti.CmdInval, cdti.CmdTIDinval, cdti.CmdSuccess}
	for i, r := range rs {
		if r.Code != want[i] {
			t.Errorf("query command %d: %v, want %v", i, r.Code, want[i])
		}
	}

	// CmdPrevCmdFail: an action after a failed command does not run.
	rs = tt.update(0, &cdti.SetBreakpoint{Addr: 8, Instruction: 0xCC}, &cdti.ContinueProcess{})
	if rs[0].Code != cdti.CmdParmErr || rs[1].Code != cdti.CmdPrevCmdFail {
		t.Errorf("SetBreakpoint at 8 + Continue: %v %v, want CmdParmErr CmdPrevCmdFail", rs[0].Code, rs[1].Code)
	}
	rs = tt.update(0, &cdti.SetBreakpoint{Addr: hit, Instruction: 0x90}, &cdti.SetGeneralRegs{},
		&cdti.SetBreakpoint{Addr: hit, Instruction: 0xCC}, &cdti.ResetBreakpoint{Addr: hit, Instruction: 0x90},
		&cdti.ResetBreakpoint{Addr: hit, Instruction: 0xCC})
	for i, want := range []cdti.CmdReturnCode{cdti.CmdParmErr, cdti.CmdInval, cdti.CmdSuccess, cdti.CmdParmErr, cdti.CmdParmErr} {
		if rs[i].Code != want {
			t.Errorf("breakpoint command %d: %v, want %v", i, rs[i].Code, want)
		}
	}
	// ContinueProcess must name the notified thread.
	if r := tt.update(0, &cdti.ContinueProcess{ThreadID: 999999})[0]; r.Code != cdti.CmdTIDinval {
		t.Errorf("ContinueProcess on a bad thread: %v", r.Code)
	}

	// Message-level checks.
	if _, err := tt.c.Query(ctx(), 7, &cdti.GetThreadList{}); !isCode(err, cdti.ToolRankNotFound) {
		t.Errorf("query of rank 7: %v", err)
	}
	other := h.dial(5)
	if _, err := other.c.Query(ctx(), 0, &cdti.GetThreadList{}); !isCode(err, cdti.ToolIdError) {
		t.Errorf("query by an unattached tool: %v", err)
	}
	rc := h.rawDial(testToken)
	rc.recv()
	hdr := cdti.Header{Service: cdti.ServiceToolctl, Version: 6, ToolID: 1, SequenceID: 9}
	rc.send(&cdti.Update{Header: hdr, Commands: []cdti.Command{&cdti.ContinueProcess{}, &cdti.StepThread{}}})
	if m, err := rc.recv(); err != nil || m.Hdr().ReturnCode != cdti.ToolIdError {
		t.Errorf("Update from a connection without the tool: %v %v, want ToolIdError", m, err)
	}
	badJob := hdr
	badJob.JobID = 77
	rc.send(&cdti.Query{Header: badJob, Commands: []cdti.Command{&cdti.GetThreadList{}}})
	if m, err := rc.recv(); err != nil || m.Hdr().ReturnCode != cdti.JobIdError {
		t.Errorf("Query with another job id: %v %v, want JobIdError", m, err)
	}
	// Through the holder's own identity, on a raw connection: two actions are conflicting.
	tt.c.Close()
	rc2 := h.rawDial(testToken)
	rc2.recv()
	// The agent frees tool 1 once it has dropped the closed connection's tools.
	for deadline := time.Now().Add(10 * time.Second); ; {
		rc2.send(&cdti.Attach{Header: hdr, Priority: 99})
		m, err := rc2.recv()
		if err == nil && m.Hdr().ReturnCode == cdti.Success {
			break
		}
		if err != nil || m.Hdr().ReturnCode != cdti.ToolIdConflict || time.Now().After(deadline) {
			t.Fatalf("attach: %v %v", m, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	rc2.send(&cdti.Control{Header: hdr, NotifySet: cdti.Signals(int(syscall.SIGTRAP))})
	if m, err := rc2.recv(); err != nil || m.Hdr().ReturnCode != cdti.Success {
		t.Fatalf("control: %v %v", m, err)
	}
	rc2.send(&cdti.Update{Header: hdr, Commands: []cdti.Command{&cdti.ContinueProcess{}, &cdti.StepThread{}}})
	if m, err := rc2.recv(); err != nil || m.Hdr().ReturnCode != cdti.ToolConflictingCmds {
		t.Errorf("two action commands: %v %v, want ToolConflictingCmds", m, err)
	}
	rc2.write(seventeenCommands(hdr))
	if m, err := rc2.recv(); err != nil || m.Hdr().ReturnCode != cdti.ToolNumberOfCmdsExceeded {
		t.Errorf("17 commands: %v %v, want ToolNumberOfCmdsExceeded", m, err)
	}
}

func badLengthFrame() []byte {
	b := make([]byte, 32)
	b[0] = byte(cdti.ServiceToolctl)
	binary.BigEndian.PutUint16(b[2:], uint16(cdti.MsgQuery))
	binary.BigEndian.PutUint32(b[20:], 10)
	return b
}

func badDescriptorFrame() []byte {
	b, _ := cdti.Encode(&cdti.Query{Header: cdti.Header{Service: cdti.ServiceToolctl, ToolID: 78},
		Commands: []cdti.Command{&cdti.GetThreadList{}}})
	binary.BigEndian.PutUint32(b[44+4:], 60000) // offset beyond the end
	return b
}

// seventeenCommands builds a Query with numCommands 17 (more descriptors than the 16 slots).
func seventeenCommands(h cdti.Header) []byte {
	b, _ := cdti.Encode(&cdti.Query{Header: h, Commands: []cdti.Command{&cdti.GetThreadList{}}})
	binary.BigEndian.PutUint16(b[40:], 17)
	return b
}
