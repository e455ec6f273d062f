package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hpcdap/hpcdap/rankset"
)

// stacksRun is one run of `hpcdap stacks`: its output, exit status and duration, or, for a run
// still going at its time limit (then killed) or that could not start, err.
type stacksRun struct {
	out, errOut string
	code        int
	took        time.Duration
	err         error
}

// startStacks runs `hpcdap stacks ARGS` against the cluster (its nodes' private directory for
// staging, agents calling back on loopback), killed after limit, and sends its result on the
// returned channel. It may be called from any goroutine.
func startStacks(c *Cluster, bin string, limit time.Duration, args ...string) <-chan stacksRun {
	done := make(chan stacksRun, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), limit)
		defer cancel()
		cmd := c.CommandContext(ctx, bin, append([]string{"stacks"}, args...)...)
		cmd.Env = append(cmd.Env, "HPCDAP_FRONTEND_HOST=127.0.0.1", "HPCDAP_NODE_TMPDIR="+c.LocalDir())
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		t0 := time.Now()
		err := cmd.Run()
		r := stacksRun{out: out.String(), errOut: errOut.String(), took: time.Since(t0)}
		var ee *exec.ExitError
		switch {
		case ctx.Err() != nil:
			r.err = fmt.Errorf("hpcdap stacks %q: still running after %v\nstderr:\n%s", args, limit, r.errOut)
		case errors.As(err, &ee):
			r.code = ee.ExitCode()
		case err != nil:
			r.err = fmt.Errorf("hpcdap stacks %q: %w", args, err)
		}
		done <- r
	}()
	return done
}

// stacksCmd runs `hpcdap stacks ARGS` to its end (startStacks), failing the test if it had to
// be killed at limit. It returns stdout, stderr, the exit status and how long it took.
func stacksCmd(t *testing.T, c *Cluster, limit time.Duration, args ...string) (string, string, int, time.Duration) {
	t.Helper()
	r := <-startStacks(c, hpcdap(t), limit, args...)
	if r.err != nil {
		t.Fatal(r.err)
	}
	return r.out, r.errOut, r.code, r.took
}

// ended reports a run of startStacks that has ended, without waiting.
func ended(done <-chan stacksRun) func() (stacksRun, bool) {
	return func() (stacksRun, bool) {
		select {
		case r := <-done:
			return r, true
		default:
			return stacksRun{}, false
		}
	}
}

// stackTreePaths reads `hpcdap stacks --format json` back as one path per rank: its
// functions from the outermost (single-threaded ranks, one sample: one path each).
func stackTreePaths(t *testing.T, js string) map[int][]string {
	t.Helper()
	var b psBody
	if err := json.Unmarshal([]byte(js), &b); err != nil {
		t.Fatalf("hpcdap stacks --format json: %v\n%s", err, js)
	}
	out := map[int][]string{}
	var walk func(n *psNode, path []string)
	walk = func(n *psNode, path []string) {
		path = append(slices.Clone(path), n.Name)
		ends, err := rankset.Parse(n.Ranks, -1)
		if err != nil {
			t.Fatalf("node %s: ranks %q: %v", n.Name, n.Ranks, err)
		}
		for _, c := range n.Children {
			cs, _ := rankset.Parse(c.Ranks, -1)
			ends = ends.Minus(cs)
			walk(c, path)
		}
		for _, r := range ends.Ranks() {
			if _, dup := out[r]; dup {
				t.Errorf("rank %d ends in two places of the tree", r)
			}
			out[r] = path
		}
	}
	for _, n := range b.Roots {
		walk(n, nil)
	}
	return out
}

// gdbPath is gdb's backtrace of a single-threaded process, outermost first, a frame in no
// known function written "?? from LIB".
func gdbPath(t *testing.T, pid int) []string {
	t.Helper()
	out, err := exec.Command("gdb", "-nx", "-batch", "-p", strconv.Itoa(pid), "-ex", "bt").CombinedOutput()
	if err != nil {
		t.Fatalf("gdb -p %d: %v\n%s", pid, err, out)
	}
	var path []string
	for _, m := range gdbFrameLib.FindAllStringSubmatch(string(out), -1) {
		name := m[1]
		if name == "??" {
			name = "?? from " + filepath.Base(m[2])
		}
		path = append(path, name)
	}
	if len(path) == 0 {
		t.Fatalf("gdb -p %d gave no backtrace:\n%s", pid, out)
	}
	slices.Reverse(path)
	return path
}

// gdbFrameLib matches a gdb backtrace line, with the library of a frame gdb cannot name.
var gdbFrameLib = regexp.MustCompile(`(?m)^#\d+\s+(?:0x[0-9a-f]+ in )?(\S+) \(.*?\)(?: from (\S+))?`)

// samePath compares gdb's path with the tree's: a frame gdb cannot name is the tree's
// "?? (LIB+0x...)".
func samePath(gdb, tree []string) bool {
	if len(gdb) != len(tree) {
		return false
	}
	for i := range gdb {
		if lib, ok := strings.CutPrefix(gdb[i], "?? from "); ok {
			if !strings.HasPrefix(tree[i], "?? ("+lib+"+0x") {
				return false
			}
		} else if gdb[i] != tree[i] {
			return false
		}
	}
	return true
}

// stepRanks lists the pids of a step's ranks, by rank, from the tasks' own environments.
func stepRanks(t testing.TB, step string, n int) map[int]int {
	t.Helper()
	job, _, _ := strings.Cut(step, ".")
	pids := map[int]int{}
	for _, pid := range pidsWithEnv("SLURM_JOB_ID=" + job) {
		comm, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
		if o, err := taskOf(pid); err == nil && o.Step == step && strings.TrimSpace(string(comm)) == "hung" {
			pids[o.Rank] = pid
		}
	}
	if len(pids) != n {
		t.Fatalf("step %s: %d rank processes found, want %d", step, len(pids), n)
	}
	return pids
}

// checkUntraced fails for every rank that is stopped or traced.
func checkUntraced(t *testing.T, pids map[int]int, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for r, pid := range pids {
		for {
			st, tr := status(pid, "State"), status(pid, "TracerPid")
			if st == "" || strings.HasPrefix(st, "Z") || (tr == "0" && !strings.HasPrefix(st, "t") && !strings.HasPrefix(st, "T")) {
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("rank %d (pid %d): state %q, traced by %q after hpcdap stacks ended", r, pid, st, tr)
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// `hpcdap stacks --slurm J.S --fanout 2` on a hung job of 32 ranks, 8 on each node (4
// agents: 0 → 1, 2; 1 → 3): every rank is in the tree once, in one of the four branches its
// pair waits in, and its path is gdb's backtrace of the same process (on the first eight
// ranks, two of each branch, and every seventh one beyond). The DOT form draws with Graphviz.
// Afterwards no rank is stopped or traced.
func TestStacksSlurmHung(t *testing.T) {
	hpcdap(t)
	if _, err := exec.LookPath("dot"); err != nil {
		t.Fatal("dot not found: install the Debian package graphviz")
	}
	p := buildC(t, "hung", "gcc", "gcc")
	c := slurm.Need(t)
	cancelJobs(t, c)
	const n = 32
	step := submitHung(t, c, p.bin, n) + ".0"
	pids := stepRanks(t, step, n)

	js, errOut, code, took := stacksCmd(t, c, 180*time.Second, "--slurm", step, "--fanout", "2", "--format", "json")
	if code != 0 {
		t.Fatalf("hpcdap stacks --slurm %s: exit %d\n%s", step, code, errOut)
	}
	t.Logf("hpcdap stacks --slurm %s --fanout 2 --format json: %v", step, took)
	checkUntraced(t, pids, 10*time.Second)
	paths := stackTreePaths(t, js)
	if len(paths) != n {
		t.Errorf("%d ranks in the tree, want %d", len(paths), n)
	}
	branches := map[string]rankset.Set{}
	for r := range n {
		path := paths[r]
		i := slices.Index(path, "main")
		if i < 0 || !slices.Contains(path[i:], hungCall(r)) {
			t.Errorf("rank %d: %q, want main ... %s", r, path, hungCall(r))
			continue
		}
		branches[hungCall(r)] = branches[hungCall(r)].Add(r)
	}
	if len(branches) != 4 {
		t.Errorf("the tree has %d branches under main, want 4: %v", len(branches), branches)
	}
	for r := range n {
		if r >= 8 && r%7 != 0 {
			continue
		}
		if g := gdbPath(t, pids[r]); !samePath(g, paths[r]) {
			t.Errorf("rank %d: gdb %q, hpcdap stacks %q", r, g, paths[r])
		}
	}
	checkUntraced(t, pids, 10*time.Second)

	dot, errOut, code, _ := stacksCmd(t, c, 180*time.Second, "--slurm", step, "--fanout", "2", "--format", "dot")
	if code != 0 {
		t.Fatalf("hpcdap stacks --format dot: exit %d\n%s", code, errOut)
	}
	svg := exec.Command("dot", "-Tsvg")
	svg.Stdin = strings.NewReader(dot)
	img, err := svg.CombinedOutput()
	if err != nil || !bytes.Contains(img, []byte("<svg")) {
		t.Errorf("dot -Tsvg: %v\n%s\ninput:\n%s", err, tail(string(img), 10), dot)
	}
	for _, want := range []string{"wait_for_peer", "wait_for_signal", "wait_for_event", "spin_on_lock"} {
		if !bytes.Contains(img, []byte(want)) {
			t.Errorf("the drawing lacks %q", want)
		}
	}
	if want := fmt.Sprintf(`main\n%d:[0-%d]"`, n, n-1); !strings.Contains(dot, want) {
		t.Errorf("the DOT lacks the label %s of main:\n%s", want, dot)
	}
	checkUntraced(t, pids, 10*time.Second)
}

// `hpcdap stacks --samples 2 --interval 20s` on the same kind of job, with interior agent 1
// (node2's) killed between the samples: the exit status is 1 and standard error names its own
// ranks (node2's, 8-15) as not sampled, and no others (node4's agent below it, 24-31, is adopted
// by the root), and the tree still holds the first sample's every rank. Nothing is left stopped
// or traced.
func TestStacksSlurmAgentLost(t *testing.T) {
	hpcdap(t)
	p := buildC(t, "hung", "gcc", "gcc")
	c := slurm.Need(t)
	cancelJobs(t, c)
	const n = 32
	job := submitHung(t, c, p.bin, n)
	step := job + ".0"
	pids := stepRanks(t, step, n)

	done := startStacks(c, hpcdap(t), 180*time.Second, "--slurm", step, "--fanout", "2", "--samples", "2",
		"--interval", "20s", "--format", "json")
	afterFirstSample(t, pids[8], ended(done))
	workers := agentWorkers(job)
	if len(workers) != 4 || workers[1].ranks[0] != 8 {
		t.Fatalf("agents %v, want 4, the second serving ranks 8-15", workers)
	}
	if err := syscall.Kill(workers[1].pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	lost := rankset.Range(8, 15) // agent 1's own ranks: agent 3 below it is adopted
	if r.code != 1 {
		t.Errorf("exit %d, want 1\n%s", r.code, r.errOut)
	}
	if want := fmt.Sprintf("%d of %d rank(s) not sampled: ranks %s", lost.Len(), n, lost); !strings.Contains(r.errOut, want) {
		t.Errorf("standard error does not say %q:\n%s", want, r.errOut)
	}
	for _, rk := range lost.Ranks() {
		if !strings.Contains(r.errOut, fmt.Sprintf("rank %d not sampled: sample 2", rk)) {
			t.Errorf("standard error does not name rank %d:\n%s", rk, r.errOut)
		}
	}
	for rk := 24; rk <= 31; rk++ { // below the lost agent: adopted, sampled
		if strings.Contains(r.errOut, fmt.Sprintf("rank %d not sampled", rk)) {
			t.Errorf("standard error names rank %d, of the adopted agent 3:\n%s", rk, r.errOut)
		}
	}
	if paths := stackTreePaths(t, r.out); len(paths) != n {
		t.Errorf("the tree holds %d ranks, want the first sample's %d", len(paths), n)
	}
	checkUntraced(t, pids, 15*time.Second)
}

// afterFirstSample returns once `hpcdap stacks --interval 20s` lets the ranks run between its
// first and second samples: the rank pid has been stopped (by the attach, by the first
// sample) and has then run for 4 s on end, which the attach and the first sample, one right
// after the other, never leave it. ended reports a command that ended meanwhile. (An interval
// of more than 20 s serves too.)
func afterFirstSample(t *testing.T, pid int, ended func() (stacksRun, bool)) {
	t.Helper()
	deadline := time.Now().Add(120 * time.Second)
	var stopped bool
	var running time.Time
	for {
		if st := status(pid, "State"); strings.HasPrefix(st, "t") {
			stopped, running = true, time.Time{}
		} else if stopped && running.IsZero() {
			running = time.Now()
		}
		if stopped && !running.IsZero() && time.Since(running) > 4*time.Second {
			return
		}
		if r, ok := ended(); ok {
			t.Fatalf("hpcdap stacks ended before its second sample: exit %d (%v)\n%s", r.code, r.err, r.errOut)
		}
		if time.Now().After(deadline) {
			t.Fatalf("pid %d: no first sample within 120 s", pid)
		}
		time.Sleep(time.Millisecond)
	}
}

// Bad input to `hpcdap stacks` against the cluster: a fan-out below 2, a job that does not
// exist, a step the job does not have, and a job cancelled between two samples each give a
// clear error naming what was wrong (the step, the ranks), and change nothing.
func TestStacksSlurmBadInput(t *testing.T) {
	hpcdap(t)
	p := buildC(t, "hung", "gcc", "gcc")
	c := slurm.Need(t)
	cancelJobs(t, c)
	const n = 8
	job := submitHung(t, c, p.bin, n)
	step := job + ".0"
	pids := stepRanks(t, step, n)
	for _, bad := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--slurm", step, "--fanout", "1"}, 2, "--fanout 1: must be at least 2 (a tree, not a chain)"},
		{[]string{"--slurm", "987654.0"}, 1, "attach to Slurm job step 987654.0"},
		{[]string{"--slurm", job + ".7"}, 1, "attach to Slurm job step " + job + ".7"},
	} {
		_, errOut, code, took := stacksCmd(t, c, 60*time.Second, bad.args...)
		t.Logf("hpcdap stacks %q: exit %d in %v: %s", bad.args, code, took.Round(time.Millisecond), strings.TrimSpace(errOut))
		if code != bad.code || !strings.Contains(errOut, bad.want) {
			t.Errorf("hpcdap stacks %q: exit %d, stderr %q; want %d and %q", bad.args, code, errOut, bad.code, bad.want)
		}
	}
	checkUntraced(t, pids, 10*time.Second)

	// The job ends between two samples an hour apart: the command ends at once, naming every
	// rank not sampled the second time, and prints the first sample.
	done := startStacks(c, hpcdap(t), 120*time.Second, "--slurm", step, "--samples", "2", "--interval", "1h")
	afterFirstSample(t, pids[0], ended(done))
	cancelled := time.Now()
	if out, err := c.Command("scancel", job).CombinedOutput(); err != nil {
		t.Fatalf("scancel %s: %v\n%s", job, err, out)
	}
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	t.Logf("job cancelled between the samples: exit %d %v after the scancel: %s", r.code, time.Since(cancelled).Round(time.Millisecond), strings.TrimSpace(r.errOut))
	if r.code != 1 || !strings.Contains(r.errOut, fmt.Sprintf("%d of %d rank(s) not sampled: ranks 0-%d", n, n, n-1)) ||
		!strings.Contains(r.errOut, "rank 0 not sampled: sample 2") {
		t.Errorf("exit %d, stderr %q; want 1 naming ranks 0-%d not sampled in sample 2", r.code, r.errOut, n-1)
	}
	if !strings.Contains(r.out, "main  [0-7] 8") {
		t.Errorf("the tree lacks the first sample:\n%s", r.out)
	}
}
