package agent

import (
	"bufio"
	"context"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/hpcdap/hpcdap/cdti"
	"github.com/hpcdap/hpcdap/target/ptrace"
)

// TestBinaryOutlivesDescriptorExhaustion runs an agent whose descriptor limit is low, makes it
// run out of descriptors by opening more connections than it may hold, and closes them: the
// agent keeps its rank and, once descriptors are free again, serves a front end.
func TestBinaryOutlivesDescriptorExhaustion(t *testing.T) {
	needPrograms(t)
	cmd := exec.Command("/bin/sh", "-c", `ulimit -n 32 && exec "$@"`, "sh",
		hpcdapBinary(t), "agent", "--listen", "127.0.0.1:0", "--np", "1", "--", progBin, "loop", "1")
	cmd.Env = append(withoutVar(os.Environ(), "HPCDAP_TOKEN"), "HPCDAP_TOKEN="+testToken)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	ap := &agentProc{cmd: cmd, stdout: bufio.NewReader(stdout), stderr: &syncBuffer{}}
	cmd.Stderr = ap.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("agent stderr:\n%s", ap.stderr.String())
		}
	})
	addr := ap.listening(t)

	var conns []net.Conn
	for range 48 {
		c, err := net.Dial("tcp", addr) // the kernel completes the handshake; the agent may not accept
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	// Wait until the agent has met the limit (or died of it).
	deadline := time.After(time.Minute)
	for !strings.Contains(ap.stderr.String(), "too many open files") {
		select {
		case err := <-exited:
			t.Fatalf("the agent ended when it ran out of descriptors: %v", err)
		case <-deadline:
			t.Fatalf("the agent never ran out of descriptors (limit 32, %d connections)", len(conns))
		case <-time.After(10 * time.Millisecond):
		}
	}
	for _, c := range conns {
		c.Close()
	}
	m, hello := dialMgmt(t, addr)
	if hello.Ranks != 1 {
		t.Errorf("hello after the exhaustion: %+v, want 1 rank", hello)
	}
	var ranks []RankInfo
	if err := m.call("ranks", nil, &ranks); err != nil || len(ranks) != 1 || ranks[0].State == "exited" {
		t.Errorf("ranks after the exhaustion: %+v, %v", ranks, err)
	}
	select {
	case err := <-exited:
		t.Fatalf("the agent ended: %v", err)
	default:
	}
}

// TestRegisterGivesUp: an agent whose front end never answers stops retrying after its
// RegisterTimeout, with an error that names the front end and the attempts.
func TestRegisterGivesUp(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().String()
	l.Close() // nobody listens there now
	tr, err := ptrace.NewTracer()
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	a, err := New(Config{Token: testToken, Backend: tr, RegisterTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Shutdown(false)
	own, err := ListenToward(dead)
	if err != nil {
		t.Fatal(err)
	}
	defer own.Close()
	err = a.Register(context.Background(), dead, own.Addr())
	if err == nil || !strings.Contains(err.Error(), "register with "+dead+": gave up after") ||
		!strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("Register with a front end that is gone: %v", err)
	}
}

// TestRegisterToImpostor: a listener at the front end's address that cannot prove the session
// token gets no registration: the agent gives up after its RegisterTimeout, having sent only
// its challenge.
func TestRegisterToImpostor(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	methods := make(chan string, 100)
	go func() {
		for {
			nc, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer nc.Close()
				r := bufio.NewReader(nc)
				for {
					var m struct {
						Method string `json:"method"`
						ID     *int   `json:"id"`
					}
					if newBoundedCodec(true).ReadObject(r, &m) != nil {
						return
					}
					methods <- m.Method
					if m.ID != nil {
						newBoundedCodec(true).WriteObject(nc, map[string]any{"jsonrpc": "2.0", "id": *m.ID,
							"result": ChallengeResult{Nonce: make([]byte, cdti.NonceSize), Proof: []byte("trust me")}})
					}
				}
			}()
		}
	}()
	tr, err := ptrace.NewTracer()
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	a, err := New(Config{Token: testToken, Backend: tr, RegisterTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Shutdown(false)
	own, err := ListenToward(l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer own.Close()
	err = a.Register(context.Background(), l.Addr().String(), own.Addr())
	if err == nil || !strings.Contains(err.Error(), "the front end did not prove the session token") {
		t.Fatalf("Register with an impostor: %v", err)
	}
	l.Close()
	close(methods)
	for m := range methods {
		if m != ChallengeMethod {
			t.Errorf("the impostor received %q", m)
		}
	}
}

// TestEndWithFrontEndThatNeverCame: an agent that ends with its front end (as PMIx debugger
// daemons do) registers, and the front end dies before it connects: the agent ends after its
// RegisterTimeout instead of waiting for the job to end.
func TestEndWithFrontEndThatNeverCame(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	registered := make(chan bool, 1)
	go func() {
		nc, err := l.Accept()
		if err != nil {
			return
		}
		defer nc.Close()
		r := bufio.NewReader(nc)
		var call struct {
			ID     *int `json:"id"`
			Params struct {
				Nonce []byte `json:"nonce"`
			} `json:"params"`
		}
		if newBoundedCodec(true).ReadObject(r, &call) != nil || call.ID == nil {
			return
		}
		mine := cdti.NewNonce()
		newBoundedCodec(true).WriteObject(nc, map[string]any{"jsonrpc": "2.0", "id": *call.ID,
			"result": ChallengeResult{Nonce: mine, Proof: cdti.HelloProof([]byte(testToken), cdti.HelloRoleTool, call.Params.Nonce, mine)}})
		var note struct {
			Method string `json:"method"`
		}
		registered <- newBoundedCodec(true).ReadObject(r, &note) == nil && note.Method == RegisterMethod
		// ...and the front end is gone before it connects to the agent.
	}()
	tr, err := ptrace.NewTracer()
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	a, err := New(Config{Token: testToken, Backend: tr, EndWithFrontEnd: true, RegisterTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Shutdown(false)
	own, err := ListenToward(l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer own.Close()
	go a.Serve(context.Background(), own)
	if err := a.Register(context.Background(), l.Addr().String(), own.Addr()); err != nil {
		t.Fatal(err)
	}
	if !<-registered {
		t.Fatal("the front end got no registration")
	}
	select {
	case <-a.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("the agent still runs 30 s after registering with a front end that never connected")
	}
}
