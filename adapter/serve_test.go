package adapter

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hpcdap/hpcdap/adapter/dapclient"
)

// nobodyUID is the unprivileged account the peer-check tests connect as.
const nobodyUID = 65534

// needRoot skips a test that must run the server as root and a client as another user.
func needRoot(t *testing.T) {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("needs root: the server runs as root and the client as nobody")
	}
}

// countingLog is a log destination that counts the lines containing a word.
type countingLog struct {
	mu    sync.Mutex
	word  string
	n     int
	lines []string
	more  chan struct{}
}

func newCountingLog(word string) *countingLog {
	return &countingLog{word: word, more: make(chan struct{}, 1)}
}

func (c *countingLog) Write(p []byte) (int, error) {
	c.mu.Lock()
	c.lines = append(c.lines, strings.TrimRight(string(p), "\n"))
	if strings.Contains(string(p), c.word) {
		c.n++
	}
	c.mu.Unlock()
	select {
	case c.more <- struct{}{}:
	default:
	}
	return len(p), nil
}

// waitCount waits until n lines with the word were logged, or fails the test after limit.
func (c *countingLog) waitCount(t *testing.T, n int, limit time.Duration) {
	t.Helper()
	deadline := time.After(limit)
	for {
		c.mu.Lock()
		got := c.n
		c.mu.Unlock()
		if got >= n {
			return
		}
		select {
		case <-c.more:
		case <-deadline:
			c.mu.Lock()
			defer c.mu.Unlock()
			t.Fatalf("%d of %d connections logged %q; log:\n%s", got, n, c.word, strings.Join(c.lines, "\n"))
		}
	}
}

// frame returns DAP messages framed with Content-Length headers.
func frame(msgs ...map[string]any) string {
	var b bytes.Buffer
	for i, m := range msgs {
		m["seq"] = i + 1
		m["type"] = "request"
		j, _ := json.Marshal(m)
		fmt.Fprintf(&b, "Content-Length: %d\r\n\r\n%s", len(j), j)
	}
	return b.String()
}

// hitAndRun is what a user who wants a command run by the server's owner sends: initialize,
// a noDebug launch of the command, configurationDone and a disconnect that leaves it running.
func hitAndRun(command string) string {
	return frame(
		map[string]any{"command": "initialize", "arguments": map[string]any{"adapterID": "hpcdap"}},
		map[string]any{"command": "launch", "arguments": map[string]any{"program": "/bin/sh",
			"args": []string{"-c", command}, "noDebug": true}},
		map[string]any{"command": "configurationDone"},
		map[string]any{"command": "disconnect", "arguments": map[string]any{"terminateDebuggee": false}},
	)
}

// asNobody runs a shell script as the nobody user, with env added.
func asNobody(t *testing.T, script string, env ...string) {
	t.Helper()
	cmd := exec.Command("/bin/bash", "-c", script)
	cmd.Dir = "/"
	cmd.Env = append([]string{"PATH=/usr/bin:/bin"}, env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobodyUID, Gid: nobodyUID}}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("client as nobody: %v\n%s", err, out)
	}
}

// TestServeRefusesOtherUserThatHangsUp: a client running as nobody connects to a server
// running as root over TCP, sends a whole session that would run a command, and closes at once
// — the closed socket no longer shows its owner. Repeated many times, the command never runs
// and every connection is refused; a client of the server's own user still gets its command run.
func TestServeRefusesOtherUserThatHangsUp(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	marker := filepath.Join(dir, "ran")
	logs := newCountingLog("refused")
	srv := NewServer(Config{AgentPath: hpcdapBinary(t), Log: log.New(logs, "", 0), LogDir: t.TempDir(), Symbols: testSymbols})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	defer func() {
		srv.Close()
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
	}()
	port := l.Addr().(*net.TCPAddr).Port
	const attempts = 150
	// A write may meet a connection the server has already refused: that is not the client's
	// failure.
	script := fmt.Sprintf(`trap '' PIPE
	for i in $(seq %d); do
		exec 3<>/dev/tcp/127.0.0.1/%d || exit 1
		printf '%%s' "$MSG" >&3 2>/dev/null
		exec 3>&-
	done`, attempts, port)
	asNobody(t, script, "MSG="+hitAndRun("echo ran >> "+marker))
	logs.waitCount(t, attempts, 2*time.Minute)
	if b, err := os.ReadFile(marker); err == nil {
		t.Fatalf("a connection from uid %d ran a command as uid %d (%d times)", nobodyUID, os.Getuid(), bytes.Count(b, []byte("ran")))
	}

	// The server's own user is served.
	d := dialSession(t, "tcp", l.Addr().String())
	defer d.close()
	d.initialize()
	d.call("launch", map[string]any{"program": "/bin/sh", "args": []string{"-c", "echo ran >> " + marker}, "noDebug": true}, nil)
	d.event("initialized")
	d.call("configurationDone", nil, nil)
	d.event("terminated")
	if b, err := os.ReadFile(marker); err != nil || string(b) != "ran\n" {
		t.Fatalf("the server's own user's command: marker %q, %v", b, err)
	}
}

// dialSession opens a session with a server already listening on addr.
func dialSession(t *testing.T, network, addr string) *dapSession {
	t.Helper()
	conn, err := net.Dial(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	return &dapSession{t: t, c: dapclient.New(conn, conn), end: func() { conn.Close() }}
}

// TestServeUnixSocket: `--listen unix:PATH` makes a socket only its user may open, and a
// client of another user that gets past the file mode (made world-writable here) is still
// refused by its credentials, its command never run; the server's own user is served.
func TestServeUnixSocket(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	os.Chmod(filepath.Dir(dir), 0o755) // the test's directory is private; only the socket's mode is to decide
	os.Chmod(dir, 0o755)
	marker := filepath.Join(dir, "ran")
	path := filepath.Join(dir, "dap.sock")
	l, err := Listen("unix:" + path)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket %s has mode %v, want a socket with 0600", path, fi.Mode())
	}
	logs := newCountingLog("refused")
	srv := NewServer(Config{AgentPath: hpcdapBinary(t), Log: log.New(logs, "", 0), LogDir: t.TempDir(), Symbols: testSymbols})
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	defer func() {
		srv.Close()
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
	}()

	// The file mode keeps nobody out.
	client := `import os, socket, sys
s = socket.socket(socket.AF_UNIX)
try:
    s.connect(sys.argv[1])
except PermissionError:
    print("EACCES"); sys.exit(0)
print("CONNECTED")
try:
    s.sendall(os.environ["MSG"].encode())
    s.recv(1)
except OSError:
    pass`
	msg := "MSG=" + hitAndRun("echo ran >> "+marker)
	if out := asNobodyOutput(t, []string{msg}, "/usr/bin/python3", "-c", client, path); out != "EACCES" {
		t.Fatalf("nobody connecting to the 0600 socket: %q, want EACCES", out)
	}
	// Its credentials keep it out when the mode does not.
	os.Chmod(path, 0o666)
	const attempts = 20
	for range attempts {
		if out := asNobodyOutput(t, []string{msg}, "/usr/bin/python3", "-c", client, path); out != "CONNECTED" {
			t.Fatalf("nobody connecting to the 0666 socket: %q, want CONNECTED", out)
		}
	}
	logs.waitCount(t, attempts, time.Minute)
	if _, err := os.Stat(marker); err == nil {
		t.Fatalf("a connection from uid %d ran a command as uid %d", nobodyUID, os.Getuid())
	}

	d := dialSession(t, "unix", path)
	defer d.close()
	d.initialize()
	d.call("launch", map[string]any{"program": "/bin/sh", "args": []string{"-c", "echo ran >> " + marker}, "noDebug": true}, nil)
	d.event("initialized")
	d.call("configurationDone", nil, nil)
	d.event("terminated")
	if b, err := os.ReadFile(marker); err != nil || string(b) != "ran\n" {
		t.Fatalf("the server's own user's command: marker %q, %v", b, err)
	}
}

// asNobodyOutput runs a program as the nobody user and returns its trimmed standard output;
// env is added to its environment.
func asNobodyOutput(t *testing.T, env []string, prog string, args ...string) string {
	t.Helper()
	cmd := exec.Command(prog, args...)
	cmd.Dir = "/"
	cmd.Env = append([]string{"PATH=/usr/bin:/bin"}, env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobodyUID, Gid: nobodyUID}}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s as nobody: %v\n%s", prog, err, stderr.Bytes())
	}
	return strings.TrimSpace(string(out))
}

// TestGoroutinePanicEndsNothing: a panic in a goroutine of one session (recovered by the
// wrapper the session's and job's goroutines defer) is logged and reported to that session's
// client; that session and the server's other session go on answering.
func TestGoroutinePanicEndsNothing(t *testing.T) {
	logs := newCountingLog("boom work: internal error")
	srv := NewServer(Config{AgentPath: hpcdapBinary(t), Log: log.New(logs, "", 0), Symbols: testSymbols})
	var ds []*dapSession
	var conns []net.Conn
	for range 2 {
		a, b := net.Pipe()
		go srv.ServeConn(a)
		d := &dapSession{t: t, c: dapclient.New(b, b), end: func() { b.Close() }}
		defer d.close()
		d.initialize()
		ds = append(ds, d)
		conns = append(conns, a)
	}
	var victim *Conn
	srv.mu.Lock()
	for s := range srv.sessions {
		if s.conn == conns[0] {
			victim = s
		}
	}
	srv.mu.Unlock()
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer victim.recoverPanic("boom work")
		var m map[string]int
		m["x"] = 1 // assignment to a nil map
	}()
	<-done
	logs.waitCount(t, 1, time.Minute)
	_, err := ds[0].c.WaitEvent("output", 30*time.Second, func(m *dapclient.Message) bool {
		return strings.Contains(string(m.Body), "internal error in boom work: assignment to entry in nil map")
	})
	reported := err == nil
	for i, d := range ds {
		// each session still answers
		if m, err := d.c.Request("initialize", map[string]any{"adapterID": "hpcdap"}); err != nil || m.Success {
			t.Errorf("session %d after the panic: second initialize: %+v, %v; want an error response", i, m, err)
		}
	}
	if !reported {
		t.Errorf("no session's client was told of the panic")
	}
}

// TestClientThatStopsReading: a client launches a program that prints without end and never
// reads. Its session ends with a logged write error once a write has waited WriteTimeout,
// and its job with it; another session of the same server is served meanwhile.
func TestClientThatStopsReading(t *testing.T) {
	logs := newCountingLog("session: write:")
	srv := NewServer(Config{AgentPath: hpcdapBinary(t), Log: log.New(logs, "", 0), LogDir: t.TempDir(), Symbols: testSymbols,
		WriteTimeout: 2 * time.Second})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	// Small socket buffers on both sides, so that a few KiB the client does not read block
	// the server's writes.
	go func() { served <- srv.Serve(smallSendBuffers{l}) }()
	defer func() {
		srv.Close()
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
	}()
	deaf, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer deaf.Close()
	deaf.(*net.TCPConn).SetReadBuffer(4096)
	if _, err := io.WriteString(deaf, frame(
		map[string]any{"command": "initialize", "arguments": map[string]any{"adapterID": "hpcdap"}},
		map[string]any{"command": "launch", "arguments": map[string]any{"program": "/usr/bin/yes", "args": []string{"hpcdap"}, "noDebug": true}},
		map[string]any{"command": "configurationDone"},
	)); err != nil {
		t.Fatal(err)
	}

	d := dialSession(t, "tcp", l.Addr().String())
	defer d.close()
	d.initialize()
	d.call("launch", map[string]any{"program": "/bin/true", "noDebug": true}, nil)
	d.event("initialized")
	d.call("configurationDone", nil, nil)
	d.event("terminated")

	logs.waitCount(t, 1, 2*time.Minute)
	// The deaf session ends, and the server's only session is then the other one.
	for limit := time.Now().Add(2 * time.Minute); ; {
		srv.mu.Lock()
		n := len(srv.sessions)
		srv.mu.Unlock()
		if n == 1 {
			break
		}
		if time.Now().After(limit) {
			t.Fatalf("the session of the client that does not read is still served (%d sessions)", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := d.c.Request("threads", nil); err != nil {
		t.Errorf("the other session after the deaf one ended: %v", err)
	}
}

// smallSendBuffers is a listener whose connections have a small kernel send buffer.
type smallSendBuffers struct{ net.Listener }

func (l smallSendBuffers) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetWriteBuffer(4096)
	}
	return c, err
}
