package cluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hpcdap/hpcdap/internal/testenv"
)

var slurm = Lazy(Config{})

func TestMain(m *testing.M) {
	code := m.Run()
	if err := slurm.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		if code == 0 {
			code = 1
		}
	}
	// The programs built for the run.
	if progDir != "" {
		os.RemoveAll(progDir)
	}
	if hpcdapBin != "" {
		os.RemoveAll(filepath.Dir(hpcdapBin))
	}
	for _, p := range cprogs {
		os.RemoveAll(filepath.Dir(p.bin))
	}
	os.Exit(code)
}

// Programs compiled once, on first use.
var (
	progOnce sync.Once
	progDir  string
	progs    = map[string]string{}
	progErr  error
)

func program(t *testing.T, name string) string {
	t.Helper()
	progOnce.Do(func() {
		progDir, progErr = os.MkdirTemp("", "cluster-progs-")
		if progErr != nil {
			return
		}
		for _, b := range []struct{ name, cc, pkg string }{
			{"ompi", "mpicc.openmpi", "libopenmpi-dev"}, {"mpich", "mpicc.mpich", "libmpich-dev"},
		} {
			out := filepath.Join(progDir, "mpi_ranks_"+b.name)
			if progErr = testenv.Build(b.pkg, b.cc, "-O0", "-g", "-o", out, "../../launch/testdata/mpi_ranks.c"); progErr != nil {
				return
			}
			progs[b.name] = out
		}
	})
	if progErr != nil {
		t.Fatalf("building MPI programs: %v", progErr)
	}
	return progs[name]
}

// run runs a client command with a time limit and returns its output and error.
func run(t *testing.T, c *Cluster, limit time.Duration, name string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := c.CommandContext(ctx, name, args...)
	cmd.Dir = t.TempDir()
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("%s %s: no answer in %v\n%s\n%s", name, strings.Join(args, " "), limit, out, c.Logs())
	}
	return string(out), err
}

// sinfo sees every node idle once the cluster is up.
func TestClusterUp(t *testing.T) {
	c := slurm.Need(t)
	n, err := c.IdleNodes()
	if err != nil || n != 4 {
		t.Fatalf("idle nodes %d, %v; want 4", n, err)
	}
	out, err := run(t, c, 10*time.Second, "sinfo", "-h", "-N", "-o", "%N %T")
	if err != nil {
		t.Fatalf("sinfo: %v\n%s", err, out)
	}
	var got []string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		got = append(got, l)
	}
	sort.Strings(got)
	if want := []string{"node1 idle", "node2 idle", "node3 idle", "node4 idle"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("sinfo -N: %q, want %q", got, want)
	}
	t.Logf("cluster start took %v", c.Startup)
}

// A drained node is not idle; WaitIdle resumes it once the queue is empty and names it.
func TestWaitIdleResumesDrained(t *testing.T) {
	c := slurm.Need(t)
	if out, err := run(t, c, 10*time.Second, "scontrol", "update", "NodeName=node2", "State=DRAIN", "Reason=drained by a test"); err != nil {
		t.Fatalf("scontrol drain: %v\n%s", err, out)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if n, err := c.IdleNodes(); err == nil && n == 3 {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("idle nodes with node2 drained: %d, %v; want 3", n, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resumed, err := c.WaitIdle(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(resumed) != 1 || !strings.HasPrefix(resumed[0], "node2 (drained: drained by a test)") {
		t.Errorf("resumed %q, want node2 with its reason", resumed)
	}
	if n, err := c.IdleNodes(); err != nil || n != 4 {
		t.Errorf("idle nodes after WaitIdle: %d, %v; want 4", n, err)
	}
}

// srun -N4 -n8 hostname runs on node1..node4, with gethostname() returning the node name.
func TestSrunHostnames(t *testing.T) {
	c := slurm.Need(t)
	out, err := run(t, c, 30*time.Second, "srun", "-N4", "-n8", "-l", "hostname")
	if err != nil {
		t.Fatalf("srun: %v\n%s", err, out)
	}
	hosts := map[string]int{}
	tasks := map[string]bool{}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		task, host, ok := strings.Cut(l, ": ")
		if !ok {
			t.Fatalf("unlabelled line %q", l)
		}
		tasks[task] = true
		hosts[host]++
	}
	if len(tasks) != 8 || len(hosts) != 4 {
		t.Fatalf("%d tasks on %v; want 8 tasks on node1..node4\n%s", len(tasks), hosts, out)
	}
	for _, n := range c.Nodes {
		if hosts[n] == 0 {
			t.Errorf("no task on %s: %v", n, hosts)
		}
	}
}

var rankLine = regexp.MustCompile(`(?m)^rank (\d+)/(\d+) on (node\d+) pid \d+$`)

// checkRanks checks that the output has one line per rank of an np-rank job spread over the
// cluster's nodes.
func checkRanks(t *testing.T, out string, np int, nodes []string) {
	t.Helper()
	seen := map[string]bool{}
	on := map[string]bool{}
	for _, m := range rankLine.FindAllStringSubmatch(out, -1) {
		if m[2] != fmt.Sprint(np) {
			t.Errorf("line %q: job size %s, want %d", m[0], m[2], np)
		}
		seen[m[1]] = true
		on[m[3]] = true
	}
	if len(seen) != np {
		t.Errorf("%d distinct ranks, want %d:\n%s", len(seen), np, out)
	}
	for _, n := range nodes {
		if !on[n] {
			t.Errorf("no rank on %s:\n%s", n, out)
		}
	}
}

// Open MPI runs under srun --mpi=pmix on all four nodes (per-node TmpFS makes pmix work with
// several slurmds on one host); each rank exits with 10+rank, which srun reports.
func TestOpenMPIUnderSrunPMIx(t *testing.T) {
	prog := program(t, "ompi")
	c := slurm.Need(t)
	out, err := run(t, c, 60*time.Second, "srun", "--mpi=pmix", "-N4", "-n8", prog)
	if _, ok := err.(*exec.ExitError); !ok {
		t.Fatalf("srun: %v (want an exit error from the ranks' codes)\n%s", err, out)
	}
	checkRanks(t, out, 8, c.Nodes)
	if !strings.Contains(out, "task 7: Exited with exit code 17") {
		t.Errorf("srun does not report rank 7's exit code 17:\n%s", out)
	}
}

// MPICH runs under srun --mpi=pmi2.
func TestMPICHUnderSrunPMI2(t *testing.T) {
	prog := program(t, "mpich")
	c := slurm.Need(t)
	out, _ := run(t, c, 60*time.Second, "srun", "--mpi=pmi2", "-N4", "-n8", prog)
	checkRanks(t, out, 8, c.Nodes)
}

// The combinations launchers.md §3.3 calls broken behave as it says: MPICH with --mpi=pmix runs
// singletons (every task is rank 0 of 1).
func TestMPICHUnderSrunPMIxRunsSingletons(t *testing.T) {
	prog := program(t, "mpich")
	c := slurm.Need(t)
	out, _ := run(t, c, 60*time.Second, "srun", "--mpi=pmix", "-N2", "-n2", prog)
	if n := strings.Count(out, "rank 0/1 on"); n != 2 {
		t.Errorf("%d singleton lines, want 2:\n%s", n, out)
	}
}

// sbcast into LocalDir puts one copy on each node, in that node's own directory.
func TestSbcastToNodeLocalDir(t *testing.T) {
	c := slurm.Need(t)
	src := filepath.Join(t.TempDir(), "payload")
	if err := os.WriteFile(src, []byte("payload\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(c.LocalDir(), "payload-copy")
	script := fmt.Sprintf("sbcast -f %s %s && srun --overlap -l cat %s", src, dst, dst)
	out, err := run(t, c, 60*time.Second, "salloc", "-N4", "--ntasks-per-node=1", "sh", "-c", script)
	if err != nil {
		t.Fatalf("salloc: %v\n%s", err, out)
	}
	if n := strings.Count(out, "payload"); n != 4 {
		t.Errorf("%d nodes printed the payload, want 4:\n%s", n, out)
	}
	for _, n := range c.Nodes {
		p := filepath.Join(c.NodeDir(n), "payload-copy")
		if b, err := os.ReadFile(p); err != nil || string(b) != "payload\n" {
			t.Errorf("%s: %q, %v", p, b, err)
		}
		os.Remove(p)
	}
	if _, err := os.Stat(dst); err == nil {
		t.Errorf("%s exists on the host: the node directories are not private", dst)
	}
}
