package adapter

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-dap"
	"github.com/hpcdap/hpcdap/adapter/dapclient"
	"github.com/hpcdap/hpcdap/internal/testenv"
	"github.com/hpcdap/hpcdap/launch"
	"github.com/hpcdap/hpcdap/launch/pmix"
	"github.com/hpcdap/hpcdap/symbols"
)

// hpcdapBinary returns the hpcdap binary built for the tests (on first use, so that a run that
// needs none, such as a fuzz target's, does not build it): the agent the adapter starts, and
// the `hpcdap dap` the stdio tests talk to.
func hpcdapBinary(t testing.TB) string {
	t.Helper()
	hpcdapOnce.Do(func() {
		hpcdapDir, hpcdapErr = os.MkdirTemp("", "hpcdap-adapter-test-*")
		if hpcdapErr != nil {
			return
		}
		bin := filepath.Join(hpcdapDir, "hpcdap")
		args := []string{"build", "-o", bin}
		if pmix.Built {
			// The tests run with the pmix tag: so does the agent, and the PMIx tool it runs.
			args = append(args, "-tags", "pmix")
		}
		build := exec.Command("go", append(args, "github.com/hpcdap/hpcdap/cmd/hpcdap")...)
		if out, err := build.CombinedOutput(); err != nil {
			hpcdapErr = fmt.Errorf("build hpcdap for the tests: %v\n%s", err, out)
			return
		}
		// The emulated BG/Q's runjob goes beside it, as make build places it.
		helper := exec.Command("gcc", "-O1", "-g", "-o", filepath.Join(hpcdapDir, launch.EmulatedRunjob), filepath.Join("..", "bgq", "helper", "runjob.c"))
		if out, err := helper.CombinedOutput(); err != nil {
			hpcdapErr = fmt.Errorf("build %s for the tests: %v\n%s", launch.EmulatedRunjob, err, out)
			return
		}
		hpcdapBuilt = bin
	})
	if hpcdapErr != nil {
		t.Fatal(hpcdapErr)
	}
	return hpcdapBuilt
}

// Only hpcdapBinary reads these: the path is empty until it has built the binary (and an
// empty AgentPath would make a server start the test binary itself as its agent).
var (
	hpcdapOnce  sync.Once
	hpcdapDir   string
	hpcdapBuilt string
	hpcdapErr   error
)

// testSymbols is shared by the tests' in-process servers: libc's debugging information is
// read once for the whole run, as one long-lived `hpcdap serve` would.
var testSymbols = symbols.NewCache(nil)

func TestMain(m *testing.M) {
	code := m.Run()
	if hpcdapDir != "" {
		os.RemoveAll(hpcdapDir)
	}
	os.Exit(code)
}

// needTool fails the test when a program it needs is missing.
func needTool(t testing.TB, name string) string {
	t.Helper()
	return testenv.NeedTool(t, name, toolPackages[name])
}

// toolPackages names the Debian package of each tool the adapter's tests run.
var toolPackages = map[string]string{
	"gcc": "gcc", "g++": "g++", "gdb": "gdb", "gdb-multiarch": "gdb-multiarch", "objdump": "binutils", "nm": "binutils",
	"mpicc.openmpi": "libopenmpi-dev", "mpirun.openmpi": "openmpi-bin", "mpicc.mpich": "libmpich-dev",
	"mpiexec.hydra": "mpich", "node": "nodejs", "npm": "npm", "lldb-vscode-15": "lldb-15",
}

// program is a C test program compiled into a test directory.
type program struct {
	bin, src string
	dir      string
	marks    map[string]int
}

var buildMu sync.Mutex

// compileC builds testdata/<name>.c with gcc and finds its MARK: lines.
func compileC(t testing.TB, name string, flags ...string) *program {
	t.Helper()
	return compileWith(t, "gcc", name, ".c", flags...)
}

// compileCXX builds testdata/<name>.cpp with g++ and finds its MARK: lines.
func compileCXX(t testing.TB, name string, flags ...string) *program {
	t.Helper()
	return compileWith(t, "g++", name, ".cpp", flags...)
}

// compileWith builds testdata/<name><ext> with a compiler and finds its MARK: lines.
func compileWith(t testing.TB, compiler, name, ext string, flags ...string) *program {
	t.Helper()
	needTool(t, compiler)
	dir := t.TempDir()
	srcData, err := os.ReadFile(filepath.Join("testdata", name+ext))
	if err != nil {
		t.Fatal(err)
	}
	// name may be a path under testdata or beside it (an example of the repository's).
	src := filepath.Join(dir, filepath.Base(name)+ext)
	if err := os.WriteFile(src, srcData, 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, filepath.Base(name))
	args := append([]string{"-g", "-O0", "-o", bin, src}, flags...)
	if strings.Contains(string(srcData), "pthread") {
		args = append(args, "-pthread")
	}
	buildMu.Lock()
	out, err := exec.Command(compiler, args...).CombinedOutput()
	buildMu.Unlock()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", compiler, name, err, out)
	}
	p := &program{bin: bin, src: src, dir: dir, marks: map[string]int{}}
	for i, l := range strings.Split(string(srcData), "\n") {
		if k := strings.Index(l, "MARK:"); k >= 0 {
			name := strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(l[k+5:]), "*/"))
			p.marks[name] = i + 1
		}
	}
	return p
}

func (p *program) line(t testing.TB, mark string) int {
	t.Helper()
	l, ok := p.marks[mark]
	if !ok {
		t.Fatalf("no MARK:%s in %s", mark, p.src)
	}
	return l
}

// oracleFrame and oracleDump are gdb's view (testdata/gdboracle.py).
type oracleFrame struct {
	Name string `json:"name"`
	File string `json:"file"`
	Line int    `json:"line"`
	PC   uint64 `json:"pc"`
}

type oracleDump struct {
	Frames []oracleFrame     `json:"frames"`
	Locals map[string]string `json:"locals"`
	Args   map[string]string `json:"args"`
	Signal int               `json:"signal"`
	SiAddr *uint64           `json:"siaddr"`
	Exprs  map[string]string `json:"exprs"`
	Error  string            `json:"error"`
}

// gdbOracle runs the program under gdb with commands (use "oracle-dump" to record a state)
// and returns the states in order.
func gdbOracle(t testing.TB, p *program, env []string, args []string, cmds ...string) []oracleDump {
	t.Helper()
	needTool(t, "gdb")
	script, _ := filepath.Abs(filepath.Join("testdata", "gdboracle.py"))
	gargs := []string{"-batch", "-nx", "-x", script}
	for _, c := range cmds {
		gargs = append(gargs, "-ex", c)
	}
	gargs = append(gargs, "--args", p.bin)
	gargs = append(gargs, args...)
	cmd := exec.Command("gdb", gargs...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Dir = p.dir
	out, err := cmd.CombinedOutput()
	var dumps []oracleDump
	for _, l := range strings.Split(string(out), "\n") {
		if j, ok := strings.CutPrefix(l, "ORACLE "); ok {
			var d oracleDump
			if err := json.Unmarshal([]byte(j), &d); err != nil {
				t.Fatalf("gdb oracle output %q: %v", j, err)
			}
			dumps = append(dumps, d)
		}
	}
	if len(dumps) == 0 {
		t.Fatalf("gdb produced no oracle dump (err %v):\n%s", err, out)
	}
	return dumps
}

// dapSession is a scripted conversation with the adapter.
type dapSession struct {
	t    testing.TB
	c    *dapclient.Client
	end  func()
	pids map[int]bool // rank processes seen, killed at the end if a test left them behind
	// logDir holds the logs of the node agents of a local launch (not over stdio).
	logDir string
}

// transport names how a test talks to the adapter.
type transport string

const (
	viaPipe  transport = "pipe"  // in-process Server, net.Pipe
	viaTCP   transport = "tcp"   // in-process Server, hpcdap serve's accept loop on loopback
	viaStdio transport = "stdio" // the built `hpcdap dap` as a child process
)

// newDAP starts a session over a transport.
func newDAP(t testing.TB, tr transport) *dapSession {
	t.Helper()
	return newDAPLogging(t, tr, newTestWriter(t))
}

// newDAPKeepingLog is newDAP for a test that looks at the front end's log: what it logs is kept
// in the returned writer too.
func newDAPKeepingLog(t testing.TB, tr transport) (*dapSession, *testWriter) {
	t.Helper()
	w := newTestWriter(t)
	w.keep = true
	return newDAPLogging(t, tr, w), w
}

// newDAPLogging starts a session that logs to w, and shows the agents' logs when the test fails.
func newDAPLogging(t testing.TB, tr transport, w *testWriter) *dapSession {
	t.Helper()
	logger := log.New(w, "", log.Lmicroseconds)
	logDir := t.TempDir()
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		// Node agents', and the launcher agent's of a workload manager's job, which is in the
		// job's working directory (launch-*).
		for _, l := range agentLogFiles(logDir) {
			b, _ := os.ReadFile(l)
			t.Logf("%s:\n%s", filepath.Base(l), b)
		}
	})
	d := openDAP(t, tr, logger, logDir)
	d.logDir = logDir
	return d
}

// agentLogFiles lists the node agents' logs in a session's log directory, and the launcher
// agent's of a workload manager's job, which is in the job's working directory (launch-*).
func agentLogFiles(logDir string) []string {
	logs, _ := filepath.Glob(filepath.Join(logDir, "*agent-*.log"))
	more, _ := filepath.Glob(filepath.Join(logDir, "launch-*", "*agent-*.log"))
	return append(logs, more...)
}

// agentLogs returns what the node agents of a local launch logged, all files together.
func (d *dapSession) agentLogs() string {
	var all strings.Builder
	for _, l := range agentLogFiles(d.logDir) {
		b, _ := os.ReadFile(l)
		all.Write(b)
	}
	return all.String()
}

// openDAP opens a session over a transport, the node agents' logs in logDir (but for stdio).
func openDAP(t testing.TB, tr transport, logger *log.Logger, logDir string) *dapSession {
	switch tr {
	case viaPipe:
		return pipeSession(t, NewServer(Config{AgentPath: hpcdapBinary(t), Log: logger, LogDir: logDir, Symbols: testSymbols}))
	case viaTCP:
		srv := NewServer(Config{AgentPath: hpcdapBinary(t), Log: logger, LogDir: logDir, Symbols: testSymbols})
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		served := make(chan error, 1)
		go func() { served <- srv.Serve(l) }()
		conn, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		c := dapclient.New(conn, conn)
		return &dapSession{t: t, c: c, end: func() {
			conn.Close()
			srv.Close()
			if err := <-served; err != nil {
				t.Errorf("serve: %v", err)
			}
		}}
	case viaStdio:
		cmd := exec.Command(hpcdapBinary(t), "dap", "--log", filepath.Join(t.TempDir(), "adapter.log"))
		in, _ := cmd.StdinPipe()
		out, _ := cmd.StdoutPipe()
		cmd.Stderr = newTestWriter(t)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		c := dapclient.New(out, in)
		return &dapSession{t: t, c: c, end: func() {
			in.Close()
			select {
			case <-done:
			case <-time.After(20 * time.Second):
				cmd.Process.Kill()
				t.Errorf("hpcdap dap did not exit after its stdin closed")
			}
		}}
	}
	t.Fatalf("unknown transport %q", tr)
	return nil
}

// pipeSession is a DAP session with srv over an in-process pipe.
func pipeSession(t testing.TB, srv *Server) *dapSession {
	a, b := net.Pipe()
	done := make(chan struct{})
	go func() { srv.ServeConn(a); close(done) }()
	c := dapclient.New(b, b)
	return &dapSession{t: t, c: c, end: func() {
		b.Close()
		waitOrFail(t, done, "session end")
	}}
}

func waitOrFail(t testing.TB, ch <-chan struct{}, what string) {
	select {
	case <-ch:
	case <-time.After(30 * time.Second):
		buf := make([]byte, 1<<20)
		n := runtime.Stack(buf, true)
		t.Errorf("%s: timed out\n%s", what, buf[:n])
	}
}

// testWriter sends diagnostics to the test log while the test runs (goroutines that outlive
// it must not call t.Log).
type testWriter struct {
	mu   sync.Mutex
	t    testing.TB
	done bool
	keep bool            // keep what was written, for a test that looks at the log
	kept strings.Builder // what was written, with keep
}

// text returns what was written since keep was set.
func (w *testWriter) text() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.kept.String()
}

func newTestWriter(t testing.TB) *testWriter {
	w := &testWriter{t: t}
	t.Cleanup(func() {
		w.mu.Lock()
		w.done = true
		w.mu.Unlock()
	})
	return w
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.keep {
		w.kept.Write(p)
	}
	if !w.done {
		w.t.Logf("%s", strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

func testLogger(t testing.TB) *log.Logger { return log.New(newTestWriter(t), "", log.Lmicroseconds) }

// call sends a request and fails the test on an error response.
func (d *dapSession) call(command string, args any, out any) {
	d.t.Helper()
	if err := d.c.Call(command, args, out); err != nil {
		d.t.Fatalf("%s: %v", command, err)
	}
}

// callErr sends a request that must fail and returns its message.
func (d *dapSession) callErr(command string, args any) string {
	d.t.Helper()
	m, err := d.c.Request(command, args)
	if err != nil {
		d.t.Fatalf("%s: %v", command, err)
	}
	if m.Success {
		d.t.Fatalf("%s succeeded, want an error response", command)
	}
	return m.Message
}

func (d *dapSession) initialize() {
	d.t.Helper()
	d.call("initialize", map[string]any{"adapterID": "hpcdap", "clientID": "test", "linesStartAt1": true,
		"columnsStartAt1": true, "pathFormat": "path", "supportsProgressReporting": true,
		"supportsVariableType": true, "supportsInvalidatedEvent": true}, nil)
}

// launch initializes and launches; configurationDone is left to the caller.
func (d *dapSession) launch(args map[string]any) {
	d.t.Helper()
	d.initialize()
	d.call("launch", args, nil)
	d.event("initialized")
}

// event waits for the next event of a kind.
func (d *dapSession) event(name string) *dapclient.Message {
	d.t.Helper()
	m, err := d.c.WaitEvent(name, 60*time.Second, nil)
	if err != nil {
		d.t.Fatal(err)
	}
	return m
}

// focusStop is a WaitEvent filter that passes every event except the stopped events of other
// threads or ranks that come with a stop (preserveFocusHint): it leaves a test the stops of the
// job.
func focusStop(m *dapclient.Message) bool {
	if m.Event != "stopped" {
		return true
	}
	var b dap.StoppedEventBody
	return m.Decode(&b) == nil && !b.PreserveFocusHint
}

// stopped waits for the next stop that takes the focus: reports of other threads or ranks
// that came with a stop (preserveFocusHint) are left for Events.
func (d *dapSession) stopped() dap.StoppedEventBody {
	d.t.Helper()
	m, err := d.c.WaitEvent("stopped", 60*time.Second, focusStop)
	if err != nil {
		for _, o := range d.c.Events("output") {
			d.t.Logf("output: %s", o.Body)
		}
		d.t.Fatal(err)
	}
	var b dap.StoppedEventBody
	if err := m.Decode(&b); err != nil {
		d.t.Fatal(err)
	}
	return b
}

// runTo launches with args, sets a breakpoint at line of src, sends configurationDone and
// returns the first stop.
func (d *dapSession) runTo(args map[string]any, src string, line int) dap.StoppedEventBody {
	d.t.Helper()
	d.launch(args)
	d.setBreakpoints(src, line)
	d.call("configurationDone", nil, nil)
	return d.stopped()
}

func (d *dapSession) setBreakpoints(src string, lines ...int) []Breakpoint {
	d.t.Helper()
	var bps []map[string]any
	for _, l := range lines {
		bps = append(bps, map[string]any{"line": l})
	}
	var body struct{ Breakpoints []Breakpoint }
	d.call("setBreakpoints", map[string]any{"source": map[string]any{"path": src}, "breakpoints": bps}, &body)
	return body.Breakpoints
}

func (d *dapSession) stackTrace(tid int) []dap.StackFrame {
	d.t.Helper()
	var b dap.StackTraceResponseBody
	d.call("stackTrace", map[string]any{"threadId": tid}, &b)
	return b.StackFrames
}

// scopeVars returns a frame's variables of one scope by name.
func (d *dapSession) scopeVars(frameID int, scope string) map[string]dap.Variable {
	d.t.Helper()
	var sc dap.ScopesResponseBody
	d.call("scopes", map[string]any{"frameId": frameID}, &sc)
	for _, s := range sc.Scopes {
		if s.Name == scope {
			return d.vars(s.VariablesReference)
		}
	}
	d.t.Fatalf("no scope %q", scope)
	return nil
}

func (d *dapSession) vars(ref int) map[string]dap.Variable {
	d.t.Helper()
	var vb dap.VariablesResponseBody
	d.call("variables", map[string]any{"variablesReference": ref}, &vb)
	out := map[string]dap.Variable{}
	for _, v := range vb.Variables {
		out[v.Name] = v
	}
	return out
}

func (d *dapSession) ranks() RanksBody {
	d.t.Helper()
	var b RanksBody
	d.call("hpcdap/ranks", map[string]any{}, &b)
	if d.pids == nil {
		d.pids = map[int]bool{}
		d.t.Cleanup(d.reap)
	}
	for _, r := range b.Ranks {
		d.pids[r.Pid] = true
	}
	return b
}

// reap kills rank processes a failed test left running (the agent detaches, not kills, when
// its front end disappears).
func (d *dapSession) reap() {
	for pid := range d.pids {
		if st := procStatus(pid, "State"); st != "" && !strings.HasPrefix(st, "Z") {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// close disconnects (killing launched ranks) and ends the session.
func (d *dapSession) close() {
	d.t.Helper()
	d.c.Request("disconnect", map[string]any{})
	d.end()
}

// readLines collects lines from r in the background.
type lineCollector struct {
	mu    sync.Mutex
	lines []string
}

func collectLines(r io.Reader) *lineCollector {
	lc := &lineCollector{}
	go func() {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			lc.mu.Lock()
			lc.lines = append(lc.lines, sc.Text())
			lc.mu.Unlock()
		}
	}()
	return lc
}

func (lc *lineCollector) count() int {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	return len(lc.lines)
}

// dumpLogs logs every file under dir whose name ends in .log (a failed test's evidence).
func dumpLogs(t testing.TB, dir string) {
	filepath.WalkDir(dir, func(path string, e os.DirEntry, err error) error {
		if err == nil && !e.IsDir() && strings.HasSuffix(path, ".log") {
			b, _ := os.ReadFile(path)
			t.Logf("%s:\n%s", path, b)
		}
		return nil
	})
}
