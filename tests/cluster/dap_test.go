package cluster

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-dap"
	"github.com/hpcdap/hpcdap/adapter/dapclient"
	"github.com/hpcdap/hpcdap/internal/testenv"
)

// The hpcdap binary, built once for the package: `hpcdap dap` is what the DAP tests talk to,
// and the same file is shipped to the nodes as the agent.
var (
	hpcdapOnce sync.Once
	hpcdapBin  string
	hpcdapErr  error
)

func hpcdap(t testing.TB) string {
	t.Helper()
	hpcdapOnce.Do(func() {
		dir, err := os.MkdirTemp("", "cluster-hpcdap-")
		if err != nil {
			hpcdapErr = err
			return
		}
		hpcdapBin = filepath.Join(dir, "hpcdap")
		hpcdapErr = testenv.Build("golang", "go", "build", "-o", hpcdapBin, "github.com/hpcdap/hpcdap/cmd/hpcdap")
	})
	if hpcdapErr != nil {
		t.Fatalf("phase build: %v", hpcdapErr)
	}
	return hpcdapBin
}

// A C test program of testdata/, built once with a given compiler; marks are the lines
// carrying "MARK: name".
type cprog struct {
	bin, src string
	marks    map[string]int
}

var (
	cprogMu sync.Mutex
	cprogs  = map[string]*cprog{}
)

// buildC compiles testdata/name.c with cc (mpicc.openmpi, gcc) into a directory of the
// package run.
func buildC(t testing.TB, name, cc, pkg string) *cprog {
	t.Helper()
	cprogMu.Lock()
	defer cprogMu.Unlock()
	key := name + " " + cc
	if p, ok := cprogs[key]; ok {
		return p
	}
	if _, err := exec.LookPath(cc); err != nil {
		t.Fatalf("phase build: %s not found: install the Debian package %s", cc, pkg)
	}
	src, err := filepath.Abs(filepath.Join("testdata", name+".c"))
	if err != nil {
		t.Fatal(err)
	}
	text, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "cluster-prog-")
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, name)
	if out, err := exec.Command(cc, "-g", "-O0", "-o", bin, src).CombinedOutput(); err != nil {
		t.Fatalf("phase build: %s %s: %v\n%s", cc, name, err, out)
	}
	p := &cprog{bin: bin, src: src, marks: map[string]int{}}
	for i, l := range strings.Split(string(text), "\n") {
		if k := strings.Index(l, "MARK: "); k >= 0 {
			p.marks[strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(l[k+6:]), "*/"))] = i + 1
		}
	}
	cprogs[key] = p
	return p
}

func (p *cprog) line(t testing.TB, mark string) int {
	t.Helper()
	l, ok := p.marks[mark]
	if !ok {
		t.Fatalf("no MARK: %s in %s", mark, p.src)
	}
	return l
}

// dapRun is one `hpcdap dap` process talking DAP over its stdio with the cluster's
// environment, bounded by a watchdog: a test that hangs past its limit gets the adapter
// killed, so every wait fails with the phase it was in.
type dapRun struct {
	t       testing.TB
	c       *dapclient.Client
	cmd     *exec.Cmd
	logPath string
	done    chan struct{}
	phase   string
	mu      sync.Mutex
	ranks   map[int]int // pid → rank, every rank seen, for the cleanup
	// close ends the adapter (closing its stdin) and kills rank processes left behind; it
	// runs at the latest when the test ends.
	close     func()
	closeOnce sync.Once
}

// startDAP starts `hpcdap dap` for the cluster c. The adapter's sessions stage their files in
// the nodes' private directory and the node agents call back on loopback.
func startDAP(t testing.TB, c *Cluster, limit time.Duration) *dapRun {
	t.Helper()
	return startDAPStaging(t, c, limit, c.LocalDir())
}

// startDAPStaging is startDAP with the sessions' staging directories under nodeTmp ("": the
// adapter's default, /tmp, which the cluster's nodes share).
func startDAPStaging(t testing.TB, c *Cluster, limit time.Duration, nodeTmp string) *dapRun {
	t.Helper()
	bin := hpcdap(t)
	d := &dapRun{t: t, logPath: filepath.Join(t.TempDir(), "adapter.log"), done: make(chan struct{}),
		ranks: map[int]int{}, phase: "start"}
	d.cmd = exec.Command(bin, "dap", "--log", d.logPath)
	d.cmd.Env = append(c.Env(), "HPCDAP_FRONTEND_HOST=127.0.0.1")
	if nodeTmp != "" {
		d.cmd.Env = append(d.cmd.Env, "HPCDAP_NODE_TMPDIR="+nodeTmp)
	}
	d.cmd.Dir = t.TempDir()
	stderr, err := os.Create(filepath.Join(t.TempDir(), "adapter.stderr"))
	if err != nil {
		t.Fatal(err)
	}
	d.cmd.Stderr = stderr
	in, err := d.cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := d.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := d.cmd.Start(); err != nil {
		t.Fatalf("phase start: %s dap: %v", bin, err)
	}
	go func() { d.cmd.Wait(); stderr.Close(); close(d.done) }()
	d.c = dapclient.New(out, in)
	watchdog := time.AfterFunc(limit, func() {
		d.mu.Lock()
		ph := d.phase
		d.mu.Unlock()
		fmt.Fprintf(os.Stderr, "%s: time limit %v reached in phase %q: killing hpcdap dap\n", t.Name(), limit, ph)
		d.cmd.Process.Kill()
	})
	d.close = func() {
		d.closeOnce.Do(func() {
			watchdog.Stop()
			in.Close()
			select {
			case <-d.done:
			case <-time.After(30 * time.Second):
				d.cmd.Process.Kill()
				<-d.done
				t.Errorf("hpcdap dap did not exit within 30 s of its stdin closing")
			}
			if t.Failed() {
				log, _ := os.ReadFile(d.logPath)
				errOut, _ := os.ReadFile(stderr.Name())
				t.Logf("adapter log (last lines):\n%s\nadapter stderr:\n%s\ncluster logs:\n%s",
					tail(string(log), 60), tail(string(errOut), 30), c.Logs())
			}
			// Nothing a test started may outlive it: kill rank processes left behind.
			for pid := range d.ranks {
				if st := status(pid, "State"); st != "" && !strings.HasPrefix(st, "Z") {
					syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		})
	}
	t.Cleanup(d.close)
	return d
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// in names the phase the test is in: failures and the watchdog report it.
func (d *dapRun) in(phase string) {
	d.mu.Lock()
	d.phase = phase
	d.mu.Unlock()
}

func (d *dapRun) fatalf(format string, args ...any) {
	d.t.Helper()
	d.mu.Lock()
	ph := d.phase
	d.mu.Unlock()
	d.t.Fatalf("phase %s: %s", ph, fmt.Sprintf(format, args...))
}

func (d *dapRun) errorf(format string, args ...any) {
	d.t.Helper()
	d.mu.Lock()
	ph := d.phase
	d.mu.Unlock()
	d.t.Errorf("phase %s: %s", ph, fmt.Sprintf(format, args...))
}

// call sends a request and fails on an error response.
func (d *dapRun) call(command string, args any, out any) {
	d.t.Helper()
	if err := d.c.Call(command, args, out); err != nil {
		d.fatalf("%v", err)
	}
}

// event waits for the next event of a kind.
func (d *dapRun) event(name string, limit time.Duration) *dapclient.Message {
	d.t.Helper()
	m, err := d.c.WaitEvent(name, limit, nil)
	if err != nil {
		d.fatalf("%v", err)
	}
	return m
}

func (d *dapRun) initialize() {
	d.t.Helper()
	d.in("initialize")
	d.call("initialize", map[string]any{"adapterID": "hpcdap", "clientID": "cluster-test", "linesStartAt1": true,
		"columnsStartAt1": true, "pathFormat": "path", "supportsProgressReporting": true}, nil)
}

// rankState is hpcdap/ranks' entry for one rank.
type rankState struct {
	Rank       int    `json:"rank"`
	State      string `json:"state"`
	Pid        int    `json:"pid"`
	Host       string `json:"host"`
	ThreadID   int    `json:"threadId"`
	ExitCode   *int   `json:"exitCode"`
	Signal     string `json:"signal"`
	StopReason string `json:"stopReason"`
}

// rankTable asks hpcdap/ranks for the job's ranks.
func (d *dapRun) rankTable() []rankState {
	d.t.Helper()
	var b struct {
		Ranks []rankState `json:"ranks"`
	}
	d.call("hpcdap/ranks", map[string]any{}, &b)
	for _, r := range b.Ranks {
		if r.Pid > 0 {
			d.ranks[r.Pid] = r.Rank
		}
	}
	return b.Ranks
}

func (d *dapRun) stackTrace(tid int) []dap.StackFrame {
	d.t.Helper()
	var b dap.StackTraceResponseBody
	d.call("stackTrace", map[string]any{"threadId": tid}, &b)
	return b.StackFrames
}

func (d *dapRun) threads() []dap.Thread {
	d.t.Helper()
	var b dap.ThreadsResponseBody
	d.call("threads", nil, &b)
	return b.Threads
}

// output concatenates every output event's text so far.
func (d *dapRun) output() string {
	var b strings.Builder
	for _, m := range d.c.Events("output") {
		var o dap.OutputEventBody
		m.Decode(&o)
		b.WriteString(o.Output)
	}
	return b.String()
}

// frameNames lists a stack's function names, innermost first.
func frameNames(fs []dap.StackFrame) []string {
	out := make([]string, len(fs))
	for i, f := range fs {
		out[i] = f.Name
	}
	return out
}

// taskOracle is where a Slurm task really runs, from its own environment: its global task id
// (SLURM_PROCID), its node (SLURMD_NODENAME) and its job step.
type taskOracle struct {
	Rank       int
	Node, Step string
}

func taskOf(pid int) (taskOracle, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		return taskOracle{}, err
	}
	env := map[string]string{}
	for _, kv := range strings.Split(string(b), "\x00") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	r, err := strconv.Atoi(env["SLURM_PROCID"])
	if err != nil {
		return taskOracle{}, fmt.Errorf("pid %d: SLURM_PROCID %q: not a Slurm task", pid, env["SLURM_PROCID"])
	}
	return taskOracle{Rank: r, Node: env["SLURMD_NODENAME"], Step: env["SLURM_JOB_ID"] + "." + env["SLURM_STEP_ID"]}, nil
}

// status returns a field of /proc/PID/status ("" if the process is gone).
func status(pid int, field string) string {
	v, _ := testenv.ProcStatus(pid, field)
	return v
}

// checkLetGo waits up to limit for the debugger to let every rank go: each is then untraced and
// not stopped (or has ended), else the test fails naming it.
func (d *dapRun) checkLetGo(ranks []rankState, limit time.Duration) {
	d.t.Helper()
	deadline := time.Now().Add(limit)
	for _, r := range ranks {
		for {
			st, tr := status(r.Pid, "State"), status(r.Pid, "TracerPid")
			if st == "" || strings.HasPrefix(st, "Z") || (tr == "0" && !strings.HasPrefix(st, "t") && !strings.HasPrefix(st, "T")) {
				break
			}
			if time.Now().After(deadline) {
				d.errorf("rank %d on %s (pid %d): state %q, traced by %q, %v after the debugger let go; want untraced and running",
					r.Rank, r.Host, r.Pid, st, tr, limit)
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// checkRankTable compares the adapter's rank table with the tasks' own environments: same
// ranks, same nodes, one step; and the job spreads over every node of the cluster.
func checkRankTable(d *dapRun, ranks []rankState, n int, nodes []string) {
	d.t.Helper()
	if len(ranks) != n {
		d.fatalf("hpcdap/ranks lists %d ranks, want %d: %+v", len(ranks), n, ranks)
	}
	on := map[string]bool{}
	for _, r := range ranks {
		o, err := taskOf(r.Pid)
		if err != nil {
			d.errorf("rank %d (pid %d, %s): %v", r.Rank, r.Pid, r.Host, err)
			continue
		}
		if o.Rank != r.Rank || o.Node != r.Host {
			d.errorf("hpcdap/ranks: rank %d on %s (pid %d); the task says rank %d on %s", r.Rank, r.Host, r.Pid, o.Rank, o.Node)
		}
		on[r.Host] = true
	}
	for _, n := range nodes {
		if !on[n] {
			d.errorf("no rank on %s: %+v", n, ranks)
		}
	}
}

// waitRanks polls hpcdap/ranks until every rank satisfies ok, or fails naming the ranks that
// do not (with their nodes).
func (d *dapRun) waitRanks(limit time.Duration, what string, ok func(rankState) bool) []rankState {
	d.t.Helper()
	deadline := time.Now().Add(limit)
	for {
		ranks := d.rankTable()
		var missing []string
		for _, r := range ranks {
			if !ok(r) {
				missing = append(missing, fmt.Sprintf("rank %d on %s (%s)", r.Rank, r.Host, r.State))
			}
		}
		if len(missing) == 0 && len(ranks) > 0 {
			return ranks
		}
		if time.Now().After(deadline) {
			d.fatalf("not every rank %s within %v: %s", what, limit, strings.Join(missing, ", "))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// cancelJobs cancels every job of the cluster when the test ends, so that a failed test leaves
// the cluster idle for the next one.
func cancelJobs(t testing.TB, c *Cluster) {
	t.Cleanup(func() { c.Command("scancel", "--quiet", "--full", "--user=root").Run() })
}
