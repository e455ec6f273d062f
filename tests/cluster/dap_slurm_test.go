package cluster

import (
	"bytes"
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

	"github.com/google/go-dap"
)

// ompiTaskEnv quiets Open MPI's busy waiting on a 2-core machine shared by eight ranks.
const ompiTaskEnv = "OMPI_MCA_mpi_yield_when_idle=1"

// submitDeadlock submits a batch job whose step 0 runs the deadlocked program on four nodes
// and waits until every rank has reported that it blocks. It returns the job id. A job that
// loses a rank in its start-up, before any debugger is near it, is submitted again (see
// srunAttempts).
func submitDeadlock(t *testing.T, c *Cluster, prog string, n int) string {
	t.Helper()
	for attempt := 1; ; attempt++ {
		job, out, ok := submitDeadlockOnce(t, c, prog, n)
		if ok {
			return job
		}
		if attempt == srunAttempts {
			t.Fatalf("phase submit: job %s lost a rank in its start-up, %d times:\n%s", job, attempt, out)
		}
		t.Logf("phase submit: attempt %d: job %s lost a rank in its start-up (see srunAttempts):\n%s", attempt, job, out)
		c.Command("scancel", job).Run()
	}
}

// submitDeadlockOnce submits the deadlocked job once. It reports false, with the job's output,
// if a rank died before every rank blocked.
func submitDeadlockOnce(t *testing.T, c *Cluster, prog string, n int) (job string, out []byte, ok bool) {
	t.Helper()
	dir := t.TempDir()
	outFile := filepath.Join(dir, "job.out")
	script := fmt.Sprintf("#!/bin/sh\nexport %s\nexec srun --mpi=pmix %s\n", ompiTaskEnv, prog)
	scriptFile := filepath.Join(dir, "job.sh")
	if err := os.WriteFile(scriptFile, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	sb, err := run(t, c, 30*time.Second, "sbatch", "--parsable", "-N4", "-n"+strconv.Itoa(n), "--output="+outFile,
		"--chdir="+dir, scriptFile)
	if err != nil {
		t.Fatalf("phase submit: sbatch: %v\n%s", err, sb)
	}
	job = strings.TrimSpace(sb)
	if _, err := strconv.Atoi(job); err != nil {
		t.Fatalf("phase submit: sbatch --parsable said %q", sb)
	}
	t.Cleanup(func() { c.Command("scancel", job).Run() })
	deadline := time.Now().Add(60 * time.Second)
	for {
		out, _ = os.ReadFile(outFile)
		switch {
		case strings.Count(string(out), " blocking\n") == n:
			return job, out, true
		case bytes.Contains(out, []byte("srun: error:")):
			return job, out, false
		case time.Now().After(deadline):
			q, _ := c.Command("squeue", "-s").CombinedOutput()
			t.Fatalf("phase submit: job %s: not every rank blocks within 60 s:\n%s\nsqueue -s:\n%s\n%s", job, out, q, c.Logs())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// gdbBacktrace is gdb's view of a process's main thread: the function names, innermost first.
func gdbBacktrace(t *testing.T, pid int) []string {
	t.Helper()
	if _, err := exec.LookPath("gdb"); err != nil {
		t.Fatalf("gdb not found: install the Debian package gdb")
	}
	out, err := exec.Command("gdb", "-batch", "-nx", "-p", strconv.Itoa(pid), "-ex", "thread 1", "-ex", "bt").CombinedOutput()
	if err != nil {
		t.Fatalf("gdb -p %d: %v\n%s", pid, err, out)
	}
	var names []string
	for _, m := range btFrame.FindAllStringSubmatch(string(out), -1) {
		names = append(names, m[1])
	}
	return names
}

// btFrame matches a gdb backtrace line: "#1  0x... in NAME (" or "#0  NAME (".
var btFrame = regexp.MustCompile(`(?m)^#\d+\s+(?:0x[0-9a-f]+ in )?(\S+) \(`)

// A deadlocked job started with sbatch outside the debugger is attached by its step id
// ("slurmJob": "J.0"), paused, and every rank's stack shows where it blocks (rank 0 in
// wait_for_token's MPI_Recv, the others in wait_at_barrier's MPI_Barrier, as gdb also sees
// them). Disconnecting without terminating leaves the job running, its ranks untraced; then
// the test cancels it.
func TestDAPSlurmAttachDeadlock(t *testing.T) {
	hpcdap(t)
	p := buildC(t, "deadlock", "mpicc.openmpi", "libopenmpi-dev")
	c := slurm.Need(t)
	cancelJobs(t, c)
	const n = 4
	job := submitDeadlock(t, c, p.bin, n)
	step := job + ".0"
	d := startDAP(t, c, 240*time.Second)
	d.initialize()
	d.in("attach " + step)
	d.call("attach", map[string]any{"slurmJob": step, "program": p.bin}, nil)
	d.event("initialized", 120*time.Second)
	ranks := d.rankTable()
	checkRankTable(d, ranks, n, c.Nodes)
	for _, r := range ranks {
		if o, err := taskOf(r.Pid); err == nil && o.Step != step {
			d.errorf("rank %d on %s: pid %d belongs to step %s, not %s", r.Rank, r.Host, r.Pid, o.Step, step)
		}
	}
	d.call("configurationDone", nil, nil)

	d.in("pause")
	d.call("pause", map[string]any{"threadId": ranks[0].ThreadID}, nil)
	ranks = d.waitRanks(60*time.Second, "stopped by the pause", func(r rankState) bool { return r.State == "stopped" })

	d.in("stacks of the blocked ranks")
	want := func(rank int) string {
		if rank == 0 {
			return "wait_for_token"
		}
		return "wait_at_barrier"
	}
	stacks := map[int][]string{}
	for _, r := range ranks {
		names := frameNames(d.stackTrace(r.ThreadID))
		stacks[r.Rank] = names
		t.Logf("rank %d on %s: %v", r.Rank, r.Host, names)
		i := slices.Index(names, want(r.Rank))
		if i < 1 || !slices.Contains(names[i:], "main") {
			d.errorf("rank %d on %s: stack %v, want MPI frames under %s ... main", r.Rank, r.Host, names, want(r.Rank))
		}
	}

	d.in("disconnect without terminating")
	d.call("disconnect", map[string]any{"terminateDebuggee": false}, nil)

	d.in("the job after the disconnect")
	out, err := run(t, c, 10*time.Second, "squeue", "-h", "-j", job, "-o", "%T")
	if err != nil || strings.TrimSpace(out) != "RUNNING" {
		d.errorf("squeue -j %s: %q, %v; want RUNNING", job, out, err)
	}
	out, err = run(t, c, 10*time.Second, "scontrol", "show", "step", step)
	if err != nil || !strings.Contains(out, "StepId="+step) {
		d.errorf("scontrol show step %s: %v\n%s", step, err, out)
	}
	// The agents detach when the session ends; give a slow machine a moment.
	d.checkLetGo(ranks, 10*time.Second)
	// gdb, attached now that the debugger is gone, sees each kind of rank where the adapter did.
	for _, r := range ranks[:2] {
		g := gdbBacktrace(t, r.Pid)
		i := slices.Index(g, want(r.Rank))
		if i < 0 || !slices.Contains(g[i:], "main") {
			d.errorf("gdb: rank %d on %s: %v, the adapter said %v", r.Rank, r.Host, g, stacks[r.Rank])
		}
	}

	d.in("cancel")
	if out, err := run(t, c, 30*time.Second, "scancel", job); err != nil {
		d.fatalf("scancel %s: %v\n%s", job, err, out)
	}
}

// Rank 2 of `srun -N4 -n8` dereferences a null pointer: the adapter reports a stopped event
// with reason exception whose text names rank 2 and the node it runs on, and rank 2's stack
// starts in crash at the faulting line.
func TestDAPSrunSegfault(t *testing.T) {
	hpcdap(t)
	p := buildC(t, "segv", "mpicc.openmpi", "libopenmpi-dev")
	c := slurm.Need(t)
	cancelJobs(t, c)
	d := startDAP(t, c, 240*time.Second)
	d.initialize()
	d.in("launch")
	d.call("launch", map[string]any{"program": p.bin, "cwd": t.TempDir(), "launcher": "srun",
		"launcherArgs": []string{"--mpi=pmix", "-N4"}, "np": 8}, nil)
	d.event("initialized", 120*time.Second)
	ranks := d.rankTable()
	checkRankTable(d, ranks, 8, c.Nodes)
	rank2 := ranks[2]
	d.call("configurationDone", nil, nil)

	d.in("wait for the fault")
	var st dap.StoppedEventBody
	if err := d.event("stopped", 120*time.Second).Decode(&st); err != nil {
		d.fatalf("stopped event: %v", err)
	}
	if st.Reason != "exception" || st.ThreadId != rank2.ThreadID {
		d.fatalf("stopped %+v, want an exception on rank 2 (thread %d)", st, rank2.ThreadID)
	}
	if !regexp.MustCompile(`\brank 2\b`).MatchString(st.Text) || !strings.Contains(st.Text, rank2.Host) {
		d.errorf("stopped text %q does not name rank 2 and its node %s", st.Text, rank2.Host)
	}
	frames := d.stackTrace(st.ThreadId)
	if names := frameNames(frames); len(frames) == 0 || frames[0].Name != "crash" || frames[0].Line != p.line(t, "fault") ||
		!slices.Contains(names, "main") {
		d.errorf("rank 2's stack %v, want crash:%d ... main", names, p.line(t, "fault"))
	}
	for _, r := range d.rankTable() {
		if r.Rank == 2 && (r.Signal != "SIGSEGV" || r.StopReason != "exception") {
			d.errorf("rank 2 in hpcdap/ranks: %+v, want stopped by SIGSEGV", r)
		}
	}

	d.in("terminate")
	d.call("disconnect", map[string]any{"terminateDebuggee": true}, nil)
	// Every process of the job ends at once: ranks, agents, staging tasks.
	deadline := time.Now().Add(15 * time.Second)
	for procs := c.Processes(); procs != ""; procs = c.Processes() {
		if time.Now().After(deadline) {
			d.fatalf("processes of the job 15 s after disconnect with terminateDebuggee:\n%s", procs)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Slurm then lets the job go. A step daemon may first wait out its own 60 s for output
	// that its srun, gone with the job, will never read ("Abandoning IO 60 secs after job
	// shutdown initiated"): that wait is Slurm's, not a process of the job.
	gone := time.Now()
	deadline = gone.Add(100 * time.Second)
	for {
		out, _ := c.Command("squeue", "-h", "-o", "%i").Output()
		if strings.TrimSpace(string(out)) == "" {
			if waited := time.Since(gone); waited > 5*time.Second {
				t.Logf("the job left the queue %v after its last process", waited.Round(time.Second))
			}
			break
		}
		if time.Now().After(deadline) {
			q, _ := c.Command("squeue", "-s").CombinedOutput()
			d.fatalf("jobs still queued 100 s after disconnect with terminateDebuggee: %s\nsteps:\n%s\nprocesses of the job:\n%s",
				out, q, c.Processes())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// startSleepingJob runs `srun -N4 -n8 ranks SECONDS` from this host and waits until every rank
// has said it sleeps after the breakpoint function. Open MPI under srun --mpi=pmix now and
// then crashes a rank in its start-up (see srunAttempts): the job is then run again.
func startSleepingJob(t *testing.T, c *Cluster, prog string, n int) (*exec.Cmd, *outFile, map[int]bool) {
	t.Helper()
	for attempt := 1; ; attempt++ {
		out := newOutFile(t)
		cmd := c.Command("srun", "--mpi=pmix", "-N4", "-n"+strconv.Itoa(n), prog, "20")
		cmd.Env = append(cmd.Env, ompiTaskEnv)
		cmd.Stdout, cmd.Stderr = out.f, out.f
		if err := cmd.Start(); err != nil {
			t.Fatalf("srun: %v", err)
		}
		exited := make(chan struct{})
		go func() { cmd.Process.Wait(); close(exited) }()
		deadline := time.Now().Add(60 * time.Second)
		for {
			if strings.Count(out.String(), " asleep\n") == n {
				pids := map[int]bool{}
				for _, pid := range processesRunning(prog) {
					pids[pid] = true
				}
				t.Cleanup(func() { cmd.Process.Kill(); <-exited })
				return cmd, out, pids
			}
			crashed := strings.Contains(out.String(), "error:")
			select {
			case <-exited:
				crashed = true
			case <-time.After(50 * time.Millisecond):
				if !crashed && time.Now().Before(deadline) {
					continue
				}
			}
			cmd.Process.Kill()
			<-exited
			if !crashed {
				t.Fatalf("srun -n%d: not every rank asleep within 60 s\n%s", n, out.String())
			}
			break
		}
		if attempt == srunAttempts {
			t.Fatalf("srun -n%d: a rank died before every rank slept, %d times:\n%s", n, attempt, out.String())
		}
		t.Logf("attempt %d: a rank died before every rank slept (see srunAttempts):\n%s", attempt, out.String())
	}
}

// outFile is a command's output file, read while the command runs.
type outFile struct{ f *os.File }

func newOutFile(t *testing.T) *outFile {
	f, err := os.Create(filepath.Join(t.TempDir(), "out"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return &outFile{f}
}

// String is what was written so far.
func (o *outFile) String() string {
	b, _ := os.ReadFile(o.f.Name())
	return string(b)
}

// processesRunning lists this host's processes whose executable is exe.
func processesRunning(exe string) []int {
	var out []int
	links, _ := filepath.Glob("/proc/[0-9]*/exe")
	for _, l := range links {
		if target, err := os.Readlink(l); err == nil && target == exe {
			if pid, err := strconv.Atoi(filepath.Base(filepath.Dir(l))); err == nil {
				out = append(out, pid)
			}
		}
	}
	return out
}

// Attach to a running srun by its pid (MPIR attach: srun's proctable is already filled): the
// rank table has the eight ranks on the four nodes, each rank's stack shows it asleep under
// main, and a disconnect that does not terminate leaves the job to its normal end, each rank
// with its own exit code.
func TestDAPAttachSrunLauncherPid(t *testing.T) {
	hpcdap(t)
	p := buildC(t, "ranks", "mpicc.openmpi", "libopenmpi-dev")
	c := slurm.Need(t)
	cancelJobs(t, c)
	const n = 8
	srun, out, pids := startSleepingJob(t, c, p.bin, n)
	d := startDAP(t, c, 240*time.Second)
	d.initialize()
	d.in("attach to srun pid " + strconv.Itoa(srun.Process.Pid))
	d.call("attach", map[string]any{"launcherPid": srun.Process.Pid, "program": p.bin}, nil)
	d.event("initialized", 120*time.Second)
	ranks := d.rankTable()
	checkRankTable(d, ranks, n, c.Nodes)
	for _, r := range ranks {
		if !pids[r.Pid] {
			d.errorf("rank %d on %s: pid %d is not one of the job's sleeping ranks %v", r.Rank, r.Host, r.Pid, pids)
		}
	}
	d.call("configurationDone", nil, nil)

	d.in("pause")
	d.call("pause", map[string]any{"threadId": ranks[0].ThreadID}, nil)
	ranks = d.waitRanks(60*time.Second, "stopped by the pause", func(r rankState) bool { return r.State == "stopped" })
	d.in("stacks of the sleeping ranks")
	for _, r := range ranks {
		names := frameNames(d.stackTrace(r.ThreadID))
		i := slices.IndexFunc(names, func(n string) bool { return strings.Contains(n, "sleep") })
		if i < 0 || !slices.Contains(names[i:], "main") {
			d.errorf("rank %d on %s: stack %v, want sleep ... main", r.Rank, r.Host, names)
		}
	}

	d.in("disconnect without terminating")
	d.call("disconnect", map[string]any{"terminateDebuggee": false}, nil)
	d.checkLetGo(ranks, 10*time.Second)
	d.in("the job after the disconnect")
	waited := make(chan error, 1)
	go func() { waited <- srun.Wait() }()
	select {
	case err := <-waited:
		// Every rank exits with 10 + its rank: srun reports a failure.
		if err == nil {
			d.errorf("srun exited 0; its ranks exit with 10 + rank")
		}
	case <-time.After(90 * time.Second):
		d.fatalf("srun did not end after the disconnect:\n%s", out.String())
	}
	if got := strings.Count(out.String(), "/8 on node"); got != n {
		d.errorf("%d of %d ranks finished after the disconnect:\n%s", got, n, out.String())
	}
}
