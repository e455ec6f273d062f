package adapter

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-dap"
	"github.com/hpcdap/hpcdap/adapter/dapclient"
)

// serveShared starts a server on a Unix socket (the peer check by SO_PEERCRED) or, with tcp,
// on loopback TCP, and returns its address as Listen names it.
func serveShared(t testing.TB, tcp, anyUser bool) string {
	t.Helper()
	addr := "unix:" + filepath.Join(t.TempDir(), "dap.sock")
	if tcp {
		addr = "127.0.0.1:0"
	}
	l, err := Listen(addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(Config{AgentPath: hpcdapBinary(t), Log: testLogger(t), LogDir: t.TempDir(), Symbols: testSymbols, AnyUser: anyUser})
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	t.Cleanup(func() {
		srv.Close()
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	if tcp {
		return l.Addr().String()
	}
	return addr
}

// dialShared opens a session with the server serveShared started.
func dialShared(t testing.TB, addr string) *dapSession {
	t.Helper()
	conn, err := Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	return &dapSession{t: t, c: dapclient.New(conn, conn), end: func() { conn.Close() }}
}

// join initializes a session and joins the shared session name, up to its configurationDone.
func (d *dapSession) join(name string) {
	d.t.Helper()
	d.initialize()
	d.call("attach", map[string]any{"joinSession": name}, nil)
	d.event("initialized")
}

// sessions returns what hpcdap/sessions lists.
func (d *dapSession) sessions() []SessionInfo {
	d.t.Helper()
	var b SessionsBody
	d.call("hpcdap/sessions", nil, &b)
	return b.Sessions
}

// continued waits for a continued event.
func (d *dapSession) continued() dap.ContinuedEventBody {
	d.t.Helper()
	var b dap.ContinuedEventBody
	if err := d.event("continued").Decode(&b); err != nil {
		d.t.Fatal(err)
	}
	return b
}

// TestSharedSessionTwoClients: client A launches 4 ranks as a shared session and stops at
// its breakpoint in first(); client B joins by name (after a join of an unknown name fails),
// is told of the stops that hold, reads the stopped thread's frames with its own frame ids
// while A's stay valid, and sets its own breakpoint in second() in the same file, which
// leaves A's in place. Whoever continues, the other gets a continued event; both see every
// stop, each naming only its own breakpoint. B disconnects: A is told nothing ended, and
// with its own breakpoint removed runs the job to its end (B's left with B), then disconnects.
func TestSharedSessionTwoClients(t *testing.T) {
	t.Parallel()
	p := compileC(t, "rounds")
	addr := serveShared(t, false, false)
	a := dialShared(t, addr)
	defer a.close()
	// The ranks run unsynchronised, and a rank that hits a breakpoint while the job stops for
	// another's hit spends that hit inside the same stop: a rank passes at most one breakpoint
	// per stop. Each rank has more hits (two a round) than the stops the test may take (the
	// first, up to 24 in the loop below), so that every rank is still there when B leaves.
	a.launch(map[string]any{"program": p.bin, "np": 4, "env": map[string]any{"ROUNDS": "16"}, "sessionName": "twin"})
	aBPs := a.setBreakpoints(p.src, p.line(t, "first"))
	if len(aBPs) != 1 || !aBPs[0].Verified {
		t.Fatalf("A's breakpoint: %+v", aBPs)
	}
	aID := aBPs[0].Id
	a.call("configurationDone", nil, nil)
	ast := a.stopped()
	if ast.Reason != "breakpoint" || !slices.Equal(ast.HitBreakpointIds, []int{aID}) {
		t.Fatalf("A's first stop: %+v, want breakpoint %d", ast, aID)
	}
	a.ranks() // the ranks are reaped if the test fails

	b := dialShared(t, addr)
	defer b.close()
	b.initialize()
	if msg := b.callErr("attach", map[string]any{"joinSession": "nosuch"}); !strings.Contains(msg, `joinSession "nosuch": no running session has this name`) {
		t.Errorf("join of an unknown name: %q", msg)
	}
	b.call("attach", map[string]any{"joinSession": "twin"}, nil)
	b.event("initialized")
	bBPs := b.setBreakpoints(p.src, p.line(t, "second"))
	if len(bBPs) != 1 || !bBPs[0].Verified || bBPs[0].Id == aID {
		t.Fatalf("B's breakpoint: %+v (A's is %d)", bBPs, aID)
	}
	bID := bBPs[0].Id
	b.call("configurationDone", nil, nil)
	// B is told of the job's threads, one thread event each, as the threads request lists them.
	var threads dap.ThreadsResponseBody
	b.call("threads", nil, &threads)
	if len(threads.Threads) < 4 {
		t.Fatalf("B's threads: %+v", threads.Threads)
	}
	for _, th := range threads.Threads {
		var te dap.ThreadEventBody
		if err := b.event("thread").Decode(&te); err != nil || te.Reason != "started" || te.ThreadId != th.Id {
			t.Fatalf("B's thread event for thread %d: %+v, %v", th.Id, te, err)
		}
	}
	// The job is stopped on all 4 ranks: B is told of each stop, the first with the focus.
	var replay []dap.StoppedEventBody
	for range 4 {
		m, err := b.c.WaitEvent("stopped", time.Minute, nil) // the others' too (preserveFocusHint)
		if err != nil {
			t.Fatal(err)
		}
		var st dap.StoppedEventBody
		if err := m.Decode(&st); err != nil {
			t.Fatal(err)
		}
		replay = append(replay, st)
	}
	if replay[0].PreserveFocusHint {
		t.Errorf("B's first replayed stop does not take the focus: %+v", replay[0])
	}
	found := false
	for _, st := range replay {
		if st.ThreadId == ast.ThreadId {
			found = true
			if st.Reason != "breakpoint" {
				t.Errorf("B is told thread %d stopped for %q, A was told %q", st.ThreadId, st.Reason, ast.Reason)
			}
		}
	}
	if !found {
		t.Fatalf("B's replayed stops %+v miss A's stopped thread %d", replay, ast.ThreadId)
	}
	if ss := b.sessions(); len(ss) != 1 || ss[0].Name != "twin" || ss[0].Clients != 2 || ss[0].Ranks != 4 || ss[0].Kind != "launch" {
		t.Errorf("hpcdap/sessions: %+v, want twin with 2 clients and 4 ranks", ss)
	}

	// Each client has its own handles: A's frame ids stay valid once B has read frames.
	aFrames := a.stackTrace(ast.ThreadId)
	bFrames := b.stackTrace(ast.ThreadId)
	for who, fs := range map[string][]dap.StackFrame{"A": aFrames, "B": bFrames} {
		if len(fs) == 0 || fs[0].Name != "first" || fs[0].Line != p.line(t, "first") {
			t.Fatalf("%s's frames of thread %d: %s", who, ast.ThreadId, frameList(fs))
		}
	}
	if v, ok := a.scopeVars(aFrames[0].Id, "Arguments")["v"]; !ok {
		t.Errorf("A's frame %d after B's stackTrace: no argument v", aFrames[0].Id)
	} else if vb, ok := b.scopeVars(bFrames[0].Id, "Arguments")["v"]; !ok || vb.Value != v.Value {
		t.Errorf("v: A reads %q, B %q", v.Value, vb.Value)
	}

	// Whoever resumes, the other is told; both see each stop and each sees its own
	// breakpoints only, until both breakpoints were hit (the union is planted).
	resume := func(by, other *dapSession, tid int) {
		t.Helper()
		var rb dap.ContinueResponseBody
		by.call("continue", map[string]any{"threadId": tid}, &rb)
		if c := other.continued(); c.ThreadId != tid || !c.AllThreadsContinued || !rb.AllThreadsContinued {
			t.Fatalf("continue of thread %d: the other client's continued event %+v, response %+v", tid, c, rb)
		}
	}
	tid := ast.ThreadId
	seenA, seenB := false, false
	for i := 0; !seenA || !seenB; i++ {
		if i == 24 {
			t.Fatalf("no stop at both breakpoints in %d stops (A's seen %v, B's %v)", i, seenA, seenB)
		}
		if i%2 == 0 {
			resume(b, a, tid)
		} else {
			resume(a, b, tid)
		}
		as, bs := a.stopped(), b.stopped()
		if as.ThreadId != bs.ThreadId || as.Reason != "breakpoint" || bs.Reason != "breakpoint" {
			t.Fatalf("stop %d: A is told %+v, B %+v", i, as, bs)
		}
		switch {
		case slices.Equal(as.HitBreakpointIds, []int{aID}) && len(bs.HitBreakpointIds) == 0:
			seenA = true
		case slices.Equal(bs.HitBreakpointIds, []int{bID}) && len(as.HitBreakpointIds) == 0:
			seenB = true
		default:
			t.Fatalf("stop %d: A's hit ids %v (its breakpoint %d), B's %v (its %d)", i, as.HitBreakpointIds, aID,
				bs.HitBreakpointIds, bID)
		}
		tid = as.ThreadId
	}

	// B leaves; the job goes on with A alone.
	b.call("disconnect", map[string]any{}, nil)
	if ss := a.sessions(); len(ss) != 1 || ss[0].Clients != 1 {
		t.Errorf("hpcdap/sessions after B left: %+v, want twin with 1 client", ss)
	}
	a.call("threads", nil, &threads)
	if len(threads.Threads) < 4 {
		t.Errorf("A's threads after B left: %+v", threads.Threads)
	}
	a.setBreakpoints(p.src)
	a.call("continue", map[string]any{"threadId": tid}, nil)
	end, err := a.c.WaitAny([]string{"stopped", "terminated"}, 60*time.Second, focusStop)
	if err != nil {
		t.Fatal(err)
	}
	if end.Event != "terminated" {
		t.Fatalf("A with no breakpoint of its own, after B left: %s %s (B's breakpoint outlived B?)", end.Event, end.Body)
	}
	var ex dap.ExitedEventBody
	if err := a.event("exited").Decode(&ex); err != nil || ex.ExitCode != 0 {
		t.Errorf("exit: %+v, %v", ex, err)
	}
	if ts := a.c.Events("terminated"); len(ts) != 1 {
		t.Errorf("A got %d terminated events", len(ts))
	}
	// The job ended by itself, A still connected: the session is no more, its name free.
	if ss := a.sessions(); len(ss) != 0 {
		t.Errorf("hpcdap/sessions after the job ended: %+v", ss)
	}
}

// TestSharedSessionEndsForAll: three clients share a job of 2 ranks that runs without end. The
// first one's connection drops: the job goes on, and `hpcdap serve --list` shows it with the
// two others. One pauses it, and the other is told of the stop; that one disconnects with
// terminateDebuggee: the job ends, the last client is told it terminated, the ranks are gone
// and the session is no longer listed.
func TestSharedSessionEndsForAll(t *testing.T) {
	t.Parallel()
	p := compileC(t, "spin")
	addr := serveShared(t, false, false)
	a := dialShared(t, addr)
	a.launch(map[string]any{"program": p.bin, "np": 2, "sessionName": "forever"})
	a.call("configurationDone", nil, nil)
	pids := a.ranks()
	b := dialShared(t, addr)
	defer b.close()
	b.join("forever")
	b.call("configurationDone", nil, nil)
	c := dialShared(t, addr)
	defer c.close()
	c.join("forever")
	c.call("configurationDone", nil, nil)
	if ss := c.sessions(); len(ss) != 1 || ss[0].Clients != 3 {
		t.Fatalf("hpcdap/sessions with three clients: %+v", ss)
	}

	a.end() // its connection drops, without a disconnect
	// The server sees A's connection end a moment later.
	waitFor(t, "the session to have 2 clients after A dropped", func() bool {
		ss := b.sessions()
		if len(ss) != 1 {
			t.Fatalf("hpcdap/sessions after A dropped: %+v, want the session", ss)
		}
		return ss[0].Clients == 2
	})
	out, err := exec.Command(hpcdapBinary(t), "serve", "--list", "--listen", addr).CombinedOutput()
	if err != nil {
		t.Fatalf("hpcdap serve --list: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "NAME") {
		t.Fatalf("hpcdap serve --list:\n%s", out)
	}
	if f := strings.Fields(lines[1]); len(f) != 6 || f[0] != "forever" || f[1] != "launch" || f[2] != "2" || f[3] != "2" || f[5] != p.bin {
		t.Errorf("hpcdap serve --list: session line %q, want forever, launch, 2 ranks, 2 clients, %s", lines[1], p.bin)
	}

	var threads dap.ThreadsResponseBody
	b.call("threads", nil, &threads)
	b.call("pause", map[string]any{"threadId": threads.Threads[0].Id}, nil)
	bs, cs := b.stopped(), c.stopped()
	if bs.Reason != "pause" || cs.Reason != "pause" || bs.ThreadId != cs.ThreadId {
		t.Errorf("pause by B: B is told %+v, C %+v", bs, cs)
	}
	b.call("disconnect", map[string]any{"terminateDebuggee": true}, nil)
	c.event("terminated")
	for _, r := range pids.Ranks {
		waitFor(t, "rank "+strconv.Itoa(r.Rank)+" to be killed", func() bool {
			st := procStatus(r.Pid, "State")
			return st == "" || strings.HasPrefix(st, "Z")
		})
	}
	if ss := c.sessions(); len(ss) != 0 {
		t.Errorf("hpcdap/sessions after the job ended: %+v", ss)
	}
}

// TestSharedSessionOtherUser: a server that accepts other users' connections (--any-user)
// runs a shared session of its own user. A client running as nobody neither sees it listed
// nor may join it: the join is refused saying whose session it is; the session keeps its one
// client.
func TestSharedSessionOtherUser(t *testing.T) {
	needRoot(t)
	t.Parallel()
	p := compileC(t, "spin")
	addr := serveShared(t, true, true)
	a := dialShared(t, addr)
	defer a.close()
	a.launch(map[string]any{"program": p.bin, "sessionName": "mine"})
	a.call("configurationDone", nil, nil)
	a.ranks()

	client := `import json, socket, sys
host, port = sys.argv[1].rsplit(":", 1)
s = socket.create_connection((host, int(port)))
f = s.makefile("rb")
seq = 0
def req(cmd, args):
    global seq
    seq += 1
    b = json.dumps({"seq": seq, "type": "request", "command": cmd, "arguments": args}).encode()
    s.sendall(b"Content-Length: %d\r\n\r\n" % len(b) + b)
    while True:
        n = 0
        while True:
            l = f.readline().strip()
            if not l:
                break
            if l.lower().startswith(b"content-length:"):
                n = int(l.split(b":")[1])
        m = json.loads(f.read(n))
        if m.get("type") == "response" and m.get("request_seq") == seq:
            return m
req("initialize", {"adapterID": "hpcdap"})
m = req("hpcdap/sessions", {})
print(json.dumps(m["body"]))
m = req("attach", {"joinSession": sys.argv[2]})
print(json.dumps({"success": m["success"], "message": m.get("message", "")}))`
	out := asNobodyOutput(t, nil, "/usr/bin/python3", "-c", client, addr, "mine")
	lines := strings.Split(out, "\n")
	if len(lines) != 2 {
		t.Fatalf("client as nobody: %q", out)
	}
	var listed SessionsBody
	if err := json.Unmarshal([]byte(lines[0]), &listed); err != nil || len(listed.Sessions) != 0 {
		t.Errorf("hpcdap/sessions as nobody: %s (%v), want none", lines[0], err)
	}
	var join struct {
		Success bool
		Message string
	}
	if err := json.Unmarshal([]byte(lines[1]), &join); err != nil {
		t.Fatalf("join as nobody: %s: %v", lines[1], err)
	}
	want := `attach: joinSession "mine": this connection runs as uid ` + strconv.Itoa(nobodyUID) + `, the session as uid 0: only its user may join it`
	if join.Success || join.Message != want {
		t.Errorf("join as nobody: %+v, want refused with %q", join, want)
	}
	if ss := a.sessions(); len(ss) != 1 || ss[0].Clients != 1 {
		t.Errorf("hpcdap/sessions after the refused join: %+v, want mine with 1 client", ss)
	}
}

// TestSessionNameTaken: a second launch under a running session's name is refused before it
// starts anything, and bad names are refused; the client whose launch was refused can then
// join the session, and a terminate request of the other client ends the job for both.
func TestSessionNameTaken(t *testing.T) {
	t.Parallel()
	p := compileC(t, "spin")
	addr := serveShared(t, false, false)
	a := dialShared(t, addr)
	defer a.close()
	a.launch(map[string]any{"program": p.bin, "sessionName": "once"})
	a.call("configurationDone", nil, nil)
	a.ranks()
	b := dialShared(t, addr)
	defer b.close()
	b.initialize()
	if msg := b.callErr("launch", map[string]any{"program": p.bin, "sessionName": "once"}); !strings.Contains(msg, `sessionName "once" is taken`) {
		t.Errorf("launch under a taken name: %q", msg)
	}
	if msg := b.callErr("launch", map[string]any{"program": p.bin, "sessionName": "no spaces"}); !strings.Contains(msg, `sessionName "no spaces": use letters`) {
		t.Errorf("launch under a bad name: %q", msg)
	}
	if msg := b.callErr("attach", map[string]any{"joinSession": "once", "pid": 1}); !strings.Contains(msg, `"joinSession" joins a running job as it is`) {
		t.Errorf("join with a pid: %q", msg)
	}
	if ss := b.sessions(); len(ss) != 1 || ss[0].Name != "once" || ss[0].Clients != 1 {
		t.Errorf("hpcdap/sessions: %+v", ss)
	}

	// B, whose launch failed, may still join; A's terminate request ends the job for both.
	b.call("attach", map[string]any{"joinSession": "once"}, nil)
	b.event("initialized")
	b.call("configurationDone", nil, nil)
	a.call("terminate", nil, nil)
	for _, d := range []*dapSession{a, b} {
		d.event("terminated")
	}
	if ex := b.event("exited"); !strings.Contains(string(ex.Body), `"exitCode":137`) {
		t.Errorf("B's exited event: %s, want the kill's 137", ex.Body)
	}
}

// TestSharedAttachLastLeaves: A attaches to a running process as a shared session and stops
// it at a breakpoint; B joins (and may not restart it). A leaves with a plain disconnect,
// which for a single client would detach: the process stays under B, which resumes it, and it
// runs on without stopping at A's breakpoint, gone with A. B's disconnect, the last, detaches
// as an attach's does: the process ticks on, untraced.
func TestSharedAttachLastLeaves(t *testing.T) {
	t.Parallel()
	p := compileC(t, "spin")
	cmd, ticks := startSpin(t, p)
	pid := cmd.Process.Pid
	addr := serveShared(t, false, false)
	a := dialShared(t, addr)
	defer a.close()
	a.initialize()
	a.call("attach", map[string]any{"pid": pid, "sessionName": "watched"}, nil)
	a.event("initialized")
	a.setBreakpoints(p.src, p.line(t, "tick"))
	a.call("configurationDone", nil, nil)
	ast := a.stopped()

	b := dialShared(t, addr)
	defer b.close()
	b.join("watched")
	b.call("configurationDone", nil, nil)
	if bst := b.stopped(); bst.ThreadId != ast.ThreadId || bst.Reason != "breakpoint" {
		t.Fatalf("B is told %+v, A was told %+v", bst, ast)
	}
	if ss := b.sessions(); len(ss) != 1 || ss[0].Kind != "attach" || ss[0].Program != p.bin {
		t.Errorf("hpcdap/sessions: %+v, want watched, an attach of %s", ss, p.bin)
	}
	if msg := b.callErr("restart", nil); !strings.Contains(msg, "restart: other clients share this job") {
		t.Errorf("restart by a client that joined: %q", msg)
	}

	a.call("disconnect", map[string]any{}, nil)
	if tp := procStatus(pid, "TracerPid"); tp == "0" || tp == "" {
		t.Fatalf("after A left, the process is not traced any more (TracerPid %q)", tp)
	}
	b.call("continue", map[string]any{"threadId": ast.ThreadId}, nil)
	n := ticks.count()
	waitFor(t, "the process to tick under B", func() bool { return ticks.count() > n+5 })
	if sts := b.c.Events("stopped"); len(sts) != 1 {
		t.Errorf("B got %d stopped events, want the replayed one only (A's breakpoint outlived A?)", len(sts))
	}
	b.call("disconnect", map[string]any{}, nil)
	n = ticks.count()
	waitFor(t, "the process to tick after the last client left", func() bool { return ticks.count() > n+5 })
	if tp := procStatus(pid, "TracerPid"); tp != "0" {
		t.Errorf("after the last client left, the process is traced by %s", tp)
	}
	if ts := b.c.Events("terminated"); len(ts) != 0 {
		t.Errorf("B got %d terminated events at a detach", len(ts))
	}
}

// BenchmarkJoinStoppedJob: a client joins a shared job of 4 ranks stopped at a breakpoint
// (connect, initialize, attach with joinSession, configurationDone, the 4 replayed stops, a
// stackTrace of the stopped thread) and leaves; the job's first client stays.
func BenchmarkJoinStoppedJob(b *testing.B) {
	p := compileC(b, "rounds")
	addr := serveShared(b, false, false)
	a := dialShared(b, addr)
	defer a.close()
	a.launch(map[string]any{"program": p.bin, "np": 4, "sessionName": "bench"})
	a.setBreakpoints(p.src, p.line(b, "first"))
	a.call("configurationDone", nil, nil)
	ast := a.stopped()
	b.ResetTimer()
	for range b.N {
		j := dialShared(b, addr)
		j.join("bench")
		j.call("configurationDone", nil, nil)
		for range 4 {
			j.stopped()
		}
		j.stackTrace(ast.ThreadId)
		j.call("disconnect", map[string]any{}, nil)
		j.end()
	}
}

// TestSharedSessionRestartKeepsName: a shared session's only client restarts its job; the
// session keeps its name, and a client that joins then debugs the new job.
func TestSharedSessionRestartKeepsName(t *testing.T) {
	t.Parallel()
	p := compileC(t, "spin")
	addr := serveShared(t, false, false)
	a := dialShared(t, addr)
	defer a.close()
	a.launch(map[string]any{"program": p.bin, "sessionName": "again"})
	a.call("configurationDone", nil, nil)
	before := a.ranks().Ranks[0].Pid
	a.call("restart", nil, nil)
	after := a.ranks().Ranks[0].Pid
	if after == before {
		t.Fatalf("restart kept pid %d", before)
	}
	b := dialShared(t, addr)
	defer b.close()
	b.join("again")
	b.call("configurationDone", nil, nil)
	if got := b.ranks().Ranks[0].Pid; got != after {
		t.Errorf("B joined the job of pid %d, want the restarted one, %d (the old one was %d)", got, after, before)
	}
	if ss := b.sessions(); len(ss) != 1 || ss[0].Name != "again" || ss[0].Clients != 2 {
		t.Errorf("hpcdap/sessions after the restart: %+v", ss)
	}
}

// TestConcurrentStepsTwoClients: two clients of one job in stop mode all step different ranks,
// standing on different lines, at the same moment. Each step would take the other's rank to
// run free: one sets out, the other is answered (its rank runs by then), and the job stops
// again. Repeated, since the requests must meet for the race to show.
func TestConcurrentStepsTwoClients(t *testing.T) {
	t.Parallel()
	p := compileC(t, "rounds")
	for round := range 5 {
		addr := serveShared(t, false, false)
		a := dialShared(t, addr)
		name := "steps" + strconv.Itoa(round)
		a.launch(map[string]any{"program": p.bin, "np": 2, "env": map[string]any{"ROUNDS": "100000000"}, "sessionName": name})
		a.call("hpcdap/focus", map[string]any{"ranks": "0"}, nil)
		a.setBreakpoints(p.src, p.line(t, "first"))
		a.call("hpcdap/focus", map[string]any{"ranks": "0-1"}, nil)
		a.call("configurationDone", nil, nil)
		ast := a.stopped()
		a.setBreakpoints(p.src)
		b := dialShared(t, addr)
		b.join(name)
		b.call("configurationDone", nil, nil)
		other := 0
		for _, r := range a.ranks().Ranks {
			if r.ThreadID != ast.ThreadId {
				other = r.ThreadID
			}
		}
		done := make(chan *dapclient.Message, 2)
		for _, q := range []struct {
			d   *dapSession
			tid int
		}{{a, ast.ThreadId}, {b, other}} {
			go func() {
				m, err := q.d.c.Request("next", map[string]any{"threadId": q.tid})
				if err != nil {
					m = &dapclient.Message{Message: err.Error()}
				}
				done <- m
			}()
		}
		ok := 0
		for range 2 {
			select {
			case m := <-done:
				if m.Success {
					ok++
				} else if !strings.Contains(m.Message, "is running") && !strings.Contains(m.Message, "stepping") {
					t.Errorf("round %d: a next failed with %q, want success or \"… is running\"", round, m.Message)
				}
			case <-time.After(60 * time.Second):
				t.Fatalf("round %d: a next got no answer in 60 s", round)
			}
		}
		if ok == 0 {
			t.Errorf("round %d: neither step set out", round)
		}
		if st := a.stopped(); st.Reason != "step" {
			t.Errorf("round %d: the job stopped with %+v, want a step's end", round, st)
		}
		a.call("disconnect", map[string]any{"terminateDebuggee": true}, nil)
		b.event("terminated")
		a.close()
		b.close()
	}
}
