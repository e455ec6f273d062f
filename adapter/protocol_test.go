package adapter

import (
	"bytes"
	"encoding/json"
	"net"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-dap"
	"github.com/hpcdap/hpcdap/adapter/dapclient"
)

// nextError waits for an error response that answers no request of the client's own (the
// answer to malformed input) and returns it.
func nextError(t *testing.T, c *dapclient.Client, seen int) *dapclient.Message {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if errs := c.UnsolicitedErrors(); len(errs) > seen {
			return errs[seen]
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("no error response")
	return nil
}

// TestMalformedDAP sends broken input of every kind; each gets an error response naming the
// request where possible, and the session keeps working.
func TestMalformedDAP(t *testing.T) {
	t.Parallel()
	for _, tr := range []transport{viaPipe, viaStdio} {
		t.Run(string(tr), func(t *testing.T) { testMalformed(t, tr) })
	}
}

func testMalformed(t *testing.T, tr transport) {
	d := newDAP(t, tr)
	defer d.close()
	c := d.c
	// A request before initialize.
	if msg := d.callErr("threads", nil); !strings.Contains(msg, "initialize") {
		t.Errorf("threads before initialize: %q", msg)
	}
	seen := 0
	expect := func(what string, seq int, command, contains string) {
		t.Helper()
		m := nextError(t, c, seen)
		seen++
		if m.Success || m.RequestSeq != seq || m.Command != command || !strings.Contains(m.Message, contains) {
			t.Errorf("%s: answered %+v, want request_seq %d command %q and a message with %q", what, m, seq, command, contains)
		}
	}
	c.WriteRaw([]byte(`{"seq": 100, "type": "request", "command": "initialize", "arguments": {`))
	expect("truncated JSON", 100, "initialize", "malformed")
	c.WriteRaw([]byte(`not json at all`))
	expect("not JSON", 0, "", "malformed")
	c.WriteRaw([]byte(`{"seq": "one", "type": "request", "command": "threads"}`))
	expect("seq of the wrong type", 0, "threads", "seq")
	c.WriteRaw([]byte(`{"seq": 101, "type": "event", "event": "stopped"}`))
	expect("an event from the client", 101, "", "not a request")
	c.WriteRaw([]byte(`{"seq": 102, "type": "request"}`))
	expect("no command", 102, "", "command")
	c.WriteRaw([]byte(`{"seq": 103, "type": "request", "command": "fly"}`))
	expect("unknown command", 103, "fly", "unsupported")
	c.WriteRaw([]byte(`{"seq": 104, "type": "request", "command": "initialize", "arguments": {"linesStartAt1": "yes"}}`))
	expect("argument of the wrong type", 104, "initialize", "linesStartAt1")
	// A message above the size bound is skipped without being buffered.
	huge := []byte(`{"seq": 105, "type": "request", "command": "evaluate", "arguments": {"expression": "`)
	huge = append(huge, bytes.Repeat([]byte("x"), MaxMessageSize+10)...)
	huge = append(huge, `"}}`...)
	c.WriteRaw(huge)
	expect("huge message", 105, "evaluate", "exceeds the limit")
	// Framing errors: a header without Content-Length, then a bad length.
	c.WriteBytes([]byte("Content-Type: application/json\r\n\r\n"))
	expect("no Content-Length", 0, "", "Content-Length")
	c.WriteBytes([]byte("Content-Length: lots\r\n\r\n"))
	expect("bad Content-Length", 0, "", "Content-Length")
	// The session still works.
	d.initialize()
	if msg := d.callErr("initialize", map[string]any{"adapterID": "x"}); !strings.Contains(msg, "already") {
		t.Errorf("second initialize: %q", msg)
	}
	for _, bad := range []struct {
		args     map[string]any
		contains string
	}{
		{map[string]any{}, "program"},
		{map[string]any{"program": "/nonexistent/prog"}, "nonexistent"},
		{map[string]any{"program": "/bin/true", "np": 0}, "np"},
		{map[string]any{"program": "/bin/true", "np": "four"}, "np"},
		{map[string]any{"program": "/bin/true", "launcher": "/nonexistent/mpirun"}, "not found"},
		{map[string]any{"program": "/bin/true", "launcher": "prun"}, "launcher"},
		{map[string]any{"program": "/bin/true", "emulator": "qemu-ppc64"}, "not a 64-bit Power executable"},
		{map[string]any{"program": "/bin/true", "launcher": "pbs"}, "launcher"},
		{map[string]any{"program": "/bin/true", "stopMode": "some"}, "stopMode"},
		{map[string]any{"program": "/bin/true", "np": 4, "ranks": "2-9"}, "ranks"},
		{map[string]any{"program": "/bin/true", "callTimeout": 0}, "callTimeout"},
		{map[string]any{"program": "/bin/true", "callTimeout": -2}, "callTimeout"},
		{map[string]any{"program": "/bin/true", "callTimeout": 1e9}, "callTimeout"},
		{map[string]any{"program": "/bin/true", "callTimeout": "10s"}, "callTimeout"},
	} {
		if msg := d.callErr("launch", bad.args); !strings.Contains(msg, bad.contains) {
			t.Errorf("launch %v: %q, want a message about %q", bad.args, msg, bad.contains)
		}
	}
	for _, bad := range []struct {
		args     map[string]any
		contains string
	}{
		{map[string]any{}, "exactly one"},
		{map[string]any{"pid": 1, "pids": map[string]int{"0": 1}}, "exactly one"},
		{map[string]any{"launcherPid": 0}, "not a process id"},
		{map[string]any{"launcherPid": 999999999}, "no such process"},
		{map[string]any{"slurmJob": "42"}, "JOBID.STEPID"},
		{map[string]any{"slurmJob": "42.0; rm"}, "JOBID.STEPID"},
		{map[string]any{"pids": map[string]int{"x": 1}}, "rank"},
		{map[string]any{"pid": 999999999}, "no such process"},
	} {
		if msg := d.callErr("attach", bad.args); !strings.Contains(msg, bad.contains) {
			t.Errorf("attach %v: %q, want a message about %q", bad.args, msg, bad.contains)
		}
	}
	// Requests that need a job.
	for _, cmd := range []string{"stackTrace", "continue", "hpcdap/ranks", "hpcdap/parallelStacks"} {
		if msg := d.callErr(cmd, map[string]any{"threadId": 1}); !strings.Contains(msg, "launch or attach") {
			t.Errorf("%s without a job: %q", cmd, msg)
		}
	}
	// And a real launch still works after all that.
	p := compileC(t, "stacks")
	d.call("launch", map[string]any{"program": p.bin}, nil)
	d.event("initialized")
	d.call("configurationDone", nil, nil)
	d.event("terminated")
	// Requests about things that do not exist.
	if msg := d.callErr("stackTrace", map[string]any{"threadId": 9999}); !strings.Contains(msg, "unknown thread") {
		t.Errorf("stackTrace of an unknown thread: %q", msg)
	}
	if msg := d.callErr("scopes", map[string]any{"frameId": 4242}); !strings.Contains(msg, "frame") {
		t.Errorf("scopes of an unknown frame: %q", msg)
	}
	if msg := d.callErr("variables", map[string]any{"variablesReference": 77}); !strings.Contains(msg, "reference") {
		t.Errorf("variables of an unknown reference: %q", msg)
	}
}

// TestServeConcurrentSessions: one server, several clients at once, each debugging its own
// job; the sessions do not see each other.
func TestServeConcurrentSessions(t *testing.T) {
	t.Parallel()
	p := compileC(t, "stacks")
	srv := NewServer(Config{AgentPath: hpcdapBinary(t), Log: testLogger(t), LogDir: t.TempDir(), Symbols: testSymbols})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	const clients = 3
	var wg sync.WaitGroup
	for i := range clients {
		wg.Go(func() {
			conn, err := net.Dial("tcp", l.Addr().String())
			if err != nil {
				t.Error(err)
				return
			}
			d := &dapSession{t: t, c: dapclient.New(conn, conn), end: func() { conn.Close() }}
			defer d.end()
			d.launch(map[string]any{"program": p.bin, "np": 2, "ranks": "0-1"})
			d.setBreakpoints(p.src, p.line(t, "leaf-return"))
			d.call("configurationDone", nil, nil)
			st := d.stopped()
			var threads dap.ThreadsResponseBody
			d.call("threads", nil, &threads)
			if len(threads.Threads) != 2 {
				t.Errorf("client %d sees %d threads", i, len(threads.Threads))
			}
			frames := d.stackTrace(st.ThreadId)
			if frames[0].Name != "leaf" {
				t.Errorf("client %d stopped in %s", i, frames[0].Name)
			}
			pids := map[int]bool{}
			for _, r := range d.ranks().Ranks {
				pids[r.Pid] = true
			}
			d.call("disconnect", map[string]any{}, nil)
			for pid := range pids {
				waitForExit(t, pid)
			}
		})
	}
	wg.Wait()
	srv.Close()
	if err := <-served; err != nil {
		t.Errorf("serve: %v", err)
	}
}

// waitForExit waits until pid is gone (or a zombie).
func waitForExit(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		st := procStatus(pid, "State")
		if st == "" || strings.HasPrefix(st, "Z") {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Errorf("pid %d still alive after disconnect", pid)
}

// TestServeCommand runs `hpcdap serve` and talks to it over TCP.
func TestServeCommand(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(hpcdapBinary(t), "serve", "--listen", "127.0.0.1:0")
	out, _ := cmd.StdoutPipe()
	cmd.Stderr = newTestWriter(t)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	var line string
	buf := make([]byte, 256)
	n, _ := out.Read(buf)
	line = strings.TrimSpace(string(buf[:n]))
	addr, ok := strings.CutPrefix(line, "listening on ")
	if !ok {
		t.Fatalf("hpcdap serve said %q", line)
	}
	for i := range 2 {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		c := dapclient.New(conn, conn)
		var caps Capabilities
		if err := c.Call("initialize", map[string]any{"adapterID": "hpcdap"}, &caps); err != nil {
			t.Fatalf("client %d: %v", i, err)
		}
		if !caps.SupportsConfigurationDoneRequest || !caps.SupportsDataBreakpoints {
			t.Errorf("capabilities %+v", caps)
		}
		conn.Close()
	}
	b, _ := json.Marshal(capabilities())
	if !bytes.Contains(b, []byte(`"supportsSingleThreadExecutionRequests":true`)) {
		t.Errorf("capabilities JSON %s", b)
	}
}

// TestEmptyArgumentsAsArray: a client that encodes empty arguments as [] (Lua's JSON encoders
// cannot tell an empty object from an empty list) is answered as if it had sent {}: requests
// whose arguments are optional succeed, and one with required arguments names what is missing.
func TestEmptyArgumentsAsArray(t *testing.T) {
	t.Parallel()
	p := compileC(t, "stacks")
	d := newDAP(t, viaPipe)
	defer d.close()
	empty := json.RawMessage("[]")
	d.initialize()
	if msg := d.callErr("launch", empty); !strings.Contains(msg, "program") || strings.Contains(msg, "array") {
		t.Errorf("launch with [] answered %q, want a message about the missing program", msg)
	}
	d.call("launch", map[string]any{"program": p.bin}, nil)
	d.event("initialized")
	d.setBreakpoints(p.src, p.line(t, "leaf-write"))
	d.call("configurationDone", empty, nil)
	d.stopped()
	var th dap.ThreadsResponseBody
	d.call("threads", empty, &th)
	if len(th.Threads) == 0 {
		t.Errorf("threads with []: no thread")
	}
	var ps ParallelStacksBody
	d.call("hpcdap/parallelStacks", empty, &ps)
	if ps.Total != 1 || len(ps.Roots) == 0 {
		t.Errorf("hpcdap/parallelStacks with []: %+v", ps)
	}
	var rb RanksBody
	d.call("hpcdap/ranks", empty, &rb)
	if len(rb.Ranks) != 1 || rb.Ranks[0].State != "stopped" {
		t.Errorf("hpcdap/ranks with []: %+v", rb)
	}
	var mods dap.ModulesResponseBody
	d.call("modules", empty, &mods)
	if len(mods.Modules) == 0 {
		t.Errorf("modules with []: none")
	}
	var ls dap.LoadedSourcesResponseBody
	d.call("loadedSources", empty, &ls)
	if len(ls.Sources) == 0 {
		t.Errorf("loadedSources with []: none")
	}
	if msg := d.callErr("stackTrace", empty); strings.Contains(msg, "array") {
		t.Errorf("stackTrace with []: %q, want a message about the missing thread", msg)
	}
	d.call("disconnect", empty, nil)
}
