package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hpcdap/hpcdap/adapter"
	"github.com/hpcdap/hpcdap/rankset"
)

// The tests of `hpcdap stacks` run the built binary against real jobs (Open MPI's mpirun and
// plain processes) and take gdb's backtraces of the same processes as the oracle.

// ompiEnv lets Open MPI run as root and oversubscribe the machine's cores.
var ompiEnv = []string{"OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1",
	"OMPI_MCA_rmaps_base_oversubscribe=1"}

// needTools fails the test when a tool the test needs is missing.
func needTools(t testing.TB, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is required (scripts/install-deps.sh installs it)", tool)
		}
	}
}

// buildHpcdap builds the hpcdap binary for a test.
func buildHpcdap(t testing.TB) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "hpcdap")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// compileC compiles testdata/src with cc.
func compileC(t testing.TB, cc, src string, flags ...string) string {
	t.Helper()
	needTools(t, cc)
	bin := filepath.Join(t.TempDir(), strings.TrimSuffix(src, ".c"))
	args := append([]string{"-g", "-O0", "-o", bin, filepath.Join("testdata", src)}, flags...)
	if out, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", cc, src, err, out)
	}
	return bin
}

// stacksRun runs hpcdap stacks and returns its stdout, stderr and exit status.
func stacksRun(t testing.TB, bin string, env []string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"stacks"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run hpcdap stacks: %v", err)
	}
	return out.String(), errOut.String(), code
}

// waitFor polls cond until it holds, failing the test after limit.
func waitFor(t testing.TB, what string, limit time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, limit)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// procField reads a field of /proc/PID/status.
func procField(pid int, field string) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// inSyscall reports whether every thread of pid waits in the system call numbered nr.
func inSyscall(pid int, nr string) bool {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/syscall", pid))
	for _, f := range tasks {
		b, _ := os.ReadFile(f)
		if strings.Fields(string(b) + " x")[0] != nr {
			return false
		}
	}
	return len(tasks) > 0
}

// checkUntouched asserts that a process runs on as if never debugged: no tracer, not stopped.
func checkUntouched(t *testing.T, what string, pid int) {
	t.Helper()
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*", pid))
	if len(tasks) == 0 {
		t.Errorf("%s (pid %d) is gone", what, pid)
	}
	for _, task := range tasks {
		lwp, _ := strconv.Atoi(filepath.Base(task))
		b, _ := os.ReadFile(task + "/status")
		st := string(b)
		if !strings.Contains(st, "\nTracerPid:\t0\n") {
			t.Errorf("%s (pid %d, LWP %d) is still traced:\n%s", what, pid, lwp, st)
		}
		if m := regexp.MustCompile(`\nState:\t(\S)`).FindStringSubmatch(st); m == nil || m[1] == "t" || m[1] == "T" {
			t.Errorf("%s (pid %d, LWP %d) is stopped: %v", what, pid, lwp, m)
		}
	}
}

var (
	gdbThread = regexp.MustCompile(`^Thread \d+ .*\(LWP (\d+)\)`)
	gdbFrame  = regexp.MustCompile(`^#\d+\s+(?:0x[0-9a-f]+ in )?(\S+) \(.*?\)(?: from (\S+))?`)
)

// gdbStacks returns every thread's backtrace of pid as gdb gives it, outermost frame first
// ("?? from LIB" for a frame in no known function).
func gdbStacks(t *testing.T, pid int) [][]string {
	t.Helper()
	out, err := exec.Command("gdb", "-nx", "-batch", "-p", strconv.Itoa(pid), "-ex", "thread apply all bt").CombinedOutput()
	if err != nil {
		t.Fatalf("gdb -p %d: %v\n%s", pid, err, out)
	}
	var paths [][]string
	var cur []string
	flush := func() {
		if cur != nil {
			slices.Reverse(cur)
			paths = append(paths, cur)
		}
		cur = nil
	}
	for _, l := range strings.Split(string(out), "\n") {
		if gdbThread.MatchString(l) {
			flush()
			cur = []string{}
			continue
		}
		if m := gdbFrame.FindStringSubmatch(l); m != nil && cur != nil {
			name := m[1]
			if name == "??" {
				name = "?? from " + filepath.Base(m[2])
			}
			cur = append(cur, name)
		}
	}
	flush()
	if len(paths) == 0 {
		t.Fatalf("gdb -p %d gave no backtrace:\n%s", pid, out)
	}
	return paths
}

// rankPaths returns the call paths of rank r in the tree: from a root to every node of r
// none of whose children holds r.
func rankPaths(t *testing.T, body adapter.ParallelStacksBody, r int) [][]string {
	t.Helper()
	var out [][]string
	var walk func(nodes []*adapter.StackNode, path []string)
	walk = func(nodes []*adapter.StackNode, path []string) {
		for _, n := range nodes {
			set, err := rankset.Parse(n.Ranks, 1<<20)
			if err != nil {
				t.Fatalf("node %q: rank set %q: %v", n.Name, n.Ranks, err)
			}
			if !set.Contains(r) {
				continue
			}
			p := append(slices.Clone(path), n.Name)
			leaf := true
			for _, c := range n.Children {
				if cs, _ := rankset.Parse(c.Ranks, 1<<20); cs.Contains(r) {
					leaf = false
				}
			}
			if leaf {
				out = append(out, p)
			}
			walk(n.Children, p)
		}
	}
	walk(body.Roots, nil)
	return out
}

// sameFrame matches a frame name of gdb's with the tree's.
func sameFrame(gdb, tree string) bool {
	if lib, ok := strings.CutPrefix(gdb, "?? from "); ok {
		return strings.HasPrefix(tree, "?? ("+lib+"+0x")
	}
	return gdb == tree
}

// matchPaths checks that the tree's distinct paths of a rank are gdb's (threads with the
// same path are one path; the totals count them). cut, when set, names a frame below which a
// path may differ (a rank polling inside an MPI call): both paths are compared down to it.
func matchPaths(t *testing.T, rank int, gdb, tree [][]string, cut string) {
	t.Helper()
	trim := func(p []string) []string {
		if i := slices.Index(p, cut); cut != "" && i >= 0 {
			return p[:i+1]
		}
		return p
	}
	same := func(g, tp []string) bool {
		g, tp = trim(g), trim(tp)
		if len(g) != len(tp) {
			return false
		}
		for k := range g {
			if !sameFrame(g[k], tp[k]) {
				return false
			}
		}
		return true
	}
	for _, g := range gdb {
		if !slices.ContainsFunc(tree, func(tp []string) bool { return same(g, tp) }) {
			t.Errorf("rank %d: gdb's path %q is not in the tree; the tree has %q", rank, g, tree)
		}
	}
	for _, tp := range tree {
		if !slices.ContainsFunc(gdb, func(g []string) bool { return same(g, tp) }) {
			t.Errorf("rank %d: the tree's path %q is none of gdb's %q", rank, tp, gdb)
		}
	}
}

// node finds the node at path (function names from a root) in the tree.
func node(body adapter.ParallelStacksBody, path ...string) *adapter.StackNode {
	nodes := body.Roots
	var n *adapter.StackNode
	for _, name := range path {
		n = nil
		for _, c := range nodes {
			if c.Name == name {
				n = c
			}
		}
		if n == nil {
			return nil
		}
		nodes = n.Children
	}
	return n
}

// checkNode asserts the rank set and count of the node at path.
func checkNode(t *testing.T, body adapter.ParallelStacksBody, ranks string, count int, path ...string) {
	t.Helper()
	n := node(body, path...)
	if n == nil {
		t.Errorf("no node %q in the tree", path)
		return
	}
	if n.Ranks != ranks || n.Count != count {
		t.Errorf("node %q: ranks %q count %d, want %q and %d", path, n.Ranks, n.Count, ranks, count)
	}
}

// deadlockJob is a running 4-rank deadlock: rank 3 in stuck_waiting, the others in
// MPI_Barrier.
type deadlockJob struct {
	cmd   *exec.Cmd
	ranks map[int]int // rank → pid
	done  chan error
}

// mpi is one MPI implementation: its compiler, its launcher and how a rank learns its number.
type mpi struct {
	cc, launcher, rankVar string
	env                   []string
}

var (
	openMPI = mpi{"mpicc.openmpi", "mpirun.openmpi", "OMPI_COMM_WORLD_RANK", ompiEnv}
	mpich   = mpi{"mpicc.mpich", "mpiexec.hydra", "PMI_RANK", nil}
)

// startDeadlock runs testdata/deadlock.c through m's launcher on 4 ranks and waits until
// every rank is blocked where it stays.
func startDeadlock(t *testing.T, m mpi) *deadlockJob {
	t.Helper()
	needTools(t, m.launcher, "gdb")
	prog := compileC(t, m.cc, "deadlock.c")
	marks := t.TempDir()
	cmd := exec.Command(m.launcher, "-np", "4", prog, marks)
	cmd.Env = append(os.Environ(), m.env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	j := &deadlockJob{cmd: cmd, ranks: map[int]int{}, done: make(chan error, 1)}
	go func() { j.done <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		for _, pid := range j.ranks {
			if p, err := os.FindProcess(pid); err == nil {
				p.Kill()
			}
		}
		<-j.done
	})
	waitFor(t, "4 ranks at their blocking call", time.Minute, func() bool {
		m, _ := filepath.Glob(filepath.Join(marks, "rank.*"))
		return len(m) == 4
	})
	procs, _ := filepath.Glob("/proc/[0-9]*/exe")
	for _, e := range procs {
		if exe, _ := os.Readlink(e); exe != prog {
			continue
		}
		pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(e)))
		env, _ := os.ReadFile(filepath.Join(filepath.Dir(e), "environ"))
		for _, kv := range strings.Split(string(env), "\x00") {
			if v, ok := strings.CutPrefix(kv, m.rankVar+"="); ok {
				r, _ := strconv.Atoi(v)
				j.ranks[r] = pid
			}
		}
	}
	if len(j.ranks) != 4 {
		t.Fatalf("ranks found %v, want 4\n%s", j.ranks, out.String())
	}
	// Rank 3 waits in rt_sigsuspend (130 on x86-64); the others cannot leave the barrier.
	waitFor(t, "rank 3 in sigsuspend", time.Minute, func() bool {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/syscall", j.ranks[3]))
		return strings.HasPrefix(string(b), "130 ")
	})
	return j
}

// gdbOracle takes gdb's backtraces of every rank, once ranks 0-2 show PMPI_Barrier (they may
// still be on their way into it when their mark appears).
func (j *deadlockJob) gdbOracle(t *testing.T) map[int][][]string {
	t.Helper()
	oracle := map[int][][]string{}
	for r, pid := range j.ranks {
		for try := 0; ; try++ {
			oracle[r] = gdbStacks(t, pid)
			inBarrier := slices.ContainsFunc(oracle[r], func(p []string) bool { return slices.Contains(p, "PMPI_Barrier") })
			if r == 3 || inBarrier || try == 50 {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return oracle
}

// finish releases rank 3 and checks that the job ends normally.
func (j *deadlockJob) finish(t *testing.T) {
	t.Helper()
	if err := exec.Command("kill", "-USR1", strconv.Itoa(j.ranks[3])).Run(); err != nil {
		t.Fatalf("release rank 3: %v", err)
	}
	select {
	case err := <-j.done:
		j.done <- err // for the cleanup
		if err != nil {
			t.Errorf("the job after the samples: %v, want a normal end", err)
		}
	case <-time.After(2 * time.Minute):
		t.Errorf("the job did not end after rank 3 was released")
	}
}

// TestStacksAttachDeadlockedMPI attaches to a deadlocked 4-rank Open MPI job by its mpirun's
// pid: the merged tree holds every thread's call path as gdb gives it rank by rank, with the
// right rank sets; the job runs on untouched and ends normally once released. DOT output
// parses with Graphviz, several samples count each rank once per sample.
func TestStacksAttachDeadlockedMPI(t *testing.T) {
	needTools(t, "dot")
	bin := buildHpcdap(t)
	j := startDeadlock(t, openMPI)
	oracle := j.gdbOracle(t)
	mpirun := strconv.Itoa(j.cmd.Process.Pid)

	start := time.Now()
	out, errOut, code := stacksRun(t, bin, nil, "--pid", mpirun, "--format", "json")
	t.Logf("4-rank sample, attach to detach: %v", time.Since(start))
	if code != 0 {
		t.Fatalf("hpcdap stacks: exit %d\n%s", code, errOut)
	}
	var body adapter.ParallelStacksBody
	if err := json.Unmarshal([]byte(out), &body); err != nil {
		t.Fatalf("--format json: %v\n%s", err, out)
	}
	threads := 0
	for r := range 4 {
		cut := "PMPI_Barrier" // ranks 0-2 poll below it
		if r == 3 {
			cut = ""
		}
		threads += len(oracle[r])
		matchPaths(t, r, oracle[r], rankPaths(t, body, r), cut)
	}
	if body.Total != threads {
		t.Errorf("total %d stacks, gdb saw %d threads", body.Total, threads)
	}
	checkNode(t, body, "0-3", 4, "main")
	checkNode(t, body, "0-2", 3, "main", "wait_at_barrier", "PMPI_Barrier")
	checkNode(t, body, "3", 1, "main", "stuck_waiting")
	for r, pid := range j.ranks {
		checkUntouched(t, "rank "+strconv.Itoa(r), pid)
	}
	checkUntouched(t, "mpirun", j.cmd.Process.Pid)

	// DOT: STAT-like labels, accepted by Graphviz.
	out, errOut, code = stacksRun(t, bin, nil, "--pid", mpirun, "--format", "dot")
	if code != 0 {
		t.Fatalf("hpcdap stacks --format dot: exit %d\n%s", code, errOut)
	}
	for _, want := range []string{`label="main\n4:[0-3]"`, `label="stuck_waiting\n1:[3]"`, `label="wait_at_barrier\n3:[0-2]"`} {
		if !strings.Contains(out, want) {
			t.Errorf("DOT output lacks %s:\n%s", want, out)
		}
	}
	svg := exec.Command("dot", "-Tsvg")
	svg.Stdin = strings.NewReader(out)
	if b, err := svg.CombinedOutput(); err != nil || !bytes.Contains(b, []byte("<svg")) {
		t.Errorf("dot -Tsvg: %v\n%s", err, b)
	}

	// Three samples: every node counts each of its ranks' threads once per sample.
	out, errOut, code = stacksRun(t, bin, nil, "--pid", mpirun, "--samples", "3", "--interval", "100ms")
	if code != 0 {
		t.Fatalf("hpcdap stacks --samples 3: exit %d\n%s", code, errOut)
	}
	for _, want := range []string{"4 rank(s) [0-3], 3 sample(s), " + strconv.Itoa(3*threads) + " stack(s)",
		"\nmain  [0-3] 12\n", "\n  wait_at_barrier  [0-2] 9\n", "\n  stuck_waiting  [3] 3\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("text output lacks %q:\n%s", want, out)
		}
	}
	for r, pid := range j.ranks {
		checkUntouched(t, "rank "+strconv.Itoa(r), pid)
	}
	j.finish(t)
}

// TestStacksLaunch runs the deadlocked job through the command itself: the tree shows the
// deadlock, and the job is ended afterwards.
func TestStacksLaunch(t *testing.T) {
	needTools(t, "mpirun.openmpi")
	bin := buildHpcdap(t)
	prog := compileC(t, "mpicc.openmpi", "deadlock.c")
	marks := t.TempDir()
	// --after is long enough for MPI_Init on a loaded machine; the marks say whether every
	// rank reached its blocking call by the sample.
	out, errOut, code := stacksRun(t, bin, ompiEnv, "--after", "10s", "--", "mpirun.openmpi", "-np", "4", prog, marks)
	if m, _ := filepath.Glob(filepath.Join(marks, "rank.*")); len(m) != 4 {
		t.Fatalf("only %d rank(s) had reached their blocking call after 10s: %s", len(m), errOut)
	}
	if code != 0 {
		t.Fatalf("hpcdap stacks -- mpirun: exit %d\n%s", code, errOut)
	}
	for _, want := range []string{"\nmain  [0-3] 4\n", "\n  wait_at_barrier  [0-2] 3\n", "\n    PMPI_Barrier  [0-2] 3\n",
		"\n  stuck_waiting  [3] 1\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("text output lacks %q:\n%s", want, out)
		}
	}
	// The launched job is ended.
	waitFor(t, "the launched job's end", time.Minute, func() bool {
		procs, _ := filepath.Glob("/proc/[0-9]*/exe")
		for _, e := range procs {
			if exe, _ := os.Readlink(e); exe == prog {
				return false
			}
		}
		return true
	})
}

// TestStacksPids samples plain multi-threaded processes by pid, as ranks 5 and 7: every
// thread is a path, as gdb gives it, and the processes run on untouched.
func TestStacksPids(t *testing.T) {
	needTools(t, "gdb")
	bin := buildHpcdap(t)
	prog := compileC(t, "gcc", "parked.c", "-pthread")
	var pids []int
	for i := range 2 {
		ready := filepath.Join(t.TempDir(), "ready")
		cmd := exec.Command(prog, ready)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		pid := cmd.Process.Pid
		waitFor(t, fmt.Sprintf("process %d parked", i), time.Minute, func() bool {
			_, err := os.Stat(ready)
			return err == nil && inSyscall(pid, "34") // pause(2) on x86-64
		})
		pids = append(pids, pid)
	}
	oracle := map[int][][]string{5: gdbStacks(t, pids[0]), 7: gdbStacks(t, pids[1])}
	out, errOut, code := stacksRun(t, bin, nil, "--pids", fmt.Sprintf("5=%d,7=%d", pids[0], pids[1]), "--format", "json")
	if code != 0 {
		t.Fatalf("hpcdap stacks --pids: exit %d\n%s", code, errOut)
	}
	var body adapter.ParallelStacksBody
	if err := json.Unmarshal([]byte(out), &body); err != nil {
		t.Fatalf("--format json: %v\n%s", err, out)
	}
	for r, paths := range oracle {
		matchPaths(t, r, paths, rankPaths(t, body, r), "")
	}
	if body.Total != 6 {
		t.Errorf("total %d stacks, want 6 (3 threads in each of 2 processes)", body.Total)
	}
	checkNode(t, body, "5,7", 2, "main", "park_main")
	checkNode(t, body, "5,7", 4, "clone3", "start_thread", "worker", "park_worker")
	for _, pid := range pids {
		checkUntouched(t, "process", pid)
	}

	// Plain pids are ranks 0, 1, ... in order.
	out, errOut, code = stacksRun(t, bin, nil, "--pids", fmt.Sprintf("%d,%d", pids[1], pids[0]))
	if code != 0 || !strings.Contains(out, "\nmain  [0-1] 2\n") || !strings.Contains(out, "2 rank(s) [0-1]") {
		t.Errorf("hpcdap stacks --pids PID,PID: exit %d\n%s\n%s", code, out, errOut)
	}
}

// TestStacksRankLost: a rank that ends between two samples is not sampled every time: the
// tree of the others is printed, and the exit status and standard error name the rank.
func TestStacksRankLost(t *testing.T) {
	bin := buildHpcdap(t)
	prog := compileC(t, "gcc", "parked.c", "-pthread")
	ready := filepath.Join(t.TempDir(), "ready")
	parked := exec.Command(prog, ready)
	if err := parked.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { parked.Process.Kill(); parked.Wait() })
	waitFor(t, "parked", time.Minute, func() bool { _, err := os.Stat(ready); return err == nil })
	// Rank 1 is sleep(1) for 8 s: attached and sampled at once (a second or two on a loaded
	// machine), it ends during the 15 s before the second sample.
	short := exec.Command("sleep", "8")
	if err := short.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { short.Process.Kill(); short.Wait() })
	out, errOut, code := stacksRun(t, bin, nil, "--pids", fmt.Sprintf("%d,%d", parked.Process.Pid, short.Process.Pid),
		"--samples", "2", "--interval", "15s")
	if code != 1 {
		t.Errorf("exit %d, want 1\n%s", code, errOut)
	}
	if !strings.Contains(errOut, "rank 1 not sampled: sample 2: exited") || !strings.Contains(errOut, "1 of 2 rank(s) not sampled: ranks 1") {
		t.Errorf("standard error does not name rank 1:\n%s", errOut)
	}
	if !strings.Contains(out, "\n  park_main  [0] 2\n") || !strings.Contains(out, "__GI___clock_nanosleep  [1] 1\n") {
		t.Errorf("the tree lacks the samples taken:\n%s", out)
	}
	checkUntouched(t, "process", parked.Process.Pid)
}

// TestStacksBadInput: usage errors are immediate, clear, and exit with status 2.
func TestStacksBadInput(t *testing.T) {
	bin := buildHpcdap(t)
	self := strconv.Itoa(os.Getpid())
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "no target"},
		{[]string{"--pid", self, "--pids", self}, "give only one target"},
		{[]string{"--slurm", "12.0", "--", "mpirun", "./a"}, "give only one target"},
		{[]string{"--pid", self, "--samples", "0"}, "--samples 0: take at least one sample"},
		{[]string{"--pid", self, "--interval", "-1s"}, "--interval -1s: must not be negative"},
		{[]string{"--pid", self, "--timeout", "0s"}, "--timeout 0s: must be positive"},
		{[]string{"--pid", self, "--fanout", "1"}, "--fanout 1: must be at least 2 (a tree, not a chain)"},
		{[]string{"--pid", self, "--fanout", "0"}, "--fanout 0: must be at least 2 (a tree, not a chain)"},
		{[]string{"--pid", self, "--format", "svg"}, `--format "svg": want one of text, dot, json`},
		{[]string{"--pid", "999999999"}, "--pid 999999999: no such process on this host"},
		{[]string{"--pids", "999999999"}, "--pids: rank 0: pid 999999999: no such process on this host"},
		{[]string{"--pids", "0=" + self + ",x"}, `give every entry as RANK=PID`},
		{[]string{"--pids", self + "," + self}, "given for ranks 0 and 1"},
		{[]string{"--pids", "a=1"}, `"a" is not a rank`},
		{[]string{"--slurm", "12"}, `--slurm "12": want a job step JOBID.STEPID`},
		{[]string{"--slurm", "x.0"}, `--slurm "x.0": want a job step`},
		{[]string{"--samples", "x"}, `invalid value "x" for flag -samples`},
	} {
		start := time.Now()
		_, errOut, code := stacksRun(t, bin, nil, c.args...)
		if code != 2 || !strings.Contains(errOut, c.want) {
			t.Errorf("hpcdap stacks %q: exit %d, stderr %q; want 2 and %q", c.args, code, errOut, c.want)
		}
		t.Logf("%q: %v", c.args, time.Since(start))
	}
	// A process that is no launcher: the attach fails naming it.
	_, errOut, code := stacksRun(t, bin, nil, "--pid", self)
	if code != 1 || !strings.Contains(errOut, "attach to the job of launcher pid "+self) || !strings.Contains(errOut, "no MPIR symbols") {
		t.Errorf("--pid of a test process: exit %d, stderr %q", code, errOut)
	}
	checkUntouched(t, "the test", os.Getpid())
}

// TestStacksAttachHydra attaches to a deadlocked MPICH job by the pid of its mpiexec.hydra
// (no MPIR: the ranks are found as the launcher's children): the rank sets are right, and the
// job runs on untouched and ends normally once released.
func TestStacksAttachHydra(t *testing.T) {
	bin := buildHpcdap(t)
	j := startDeadlock(t, mpich)
	out, errOut, code := stacksRun(t, bin, nil, "--pid", strconv.Itoa(j.cmd.Process.Pid), "--format", "json")
	if code != 0 {
		t.Fatalf("hpcdap stacks: exit %d\n%s", code, errOut)
	}
	var body adapter.ParallelStacksBody
	if err := json.Unmarshal([]byte(out), &body); err != nil {
		t.Fatalf("--format json: %v\n%s", err, out)
	}
	checkNode(t, body, "0-3", 4, "main")
	checkNode(t, body, "0-2", 3, "main", "wait_at_barrier", "PMPI_Barrier")
	checkNode(t, body, "3", 1, "main", "stuck_waiting")
	for r, pid := range j.ranks {
		checkUntouched(t, "rank "+strconv.Itoa(r), pid)
	}
	checkUntouched(t, "mpiexec.hydra", j.cmd.Process.Pid)
	j.finish(t)
}
