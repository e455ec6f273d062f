package adapter

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Attaching to a running launcher's job: the job started outside the adapter, waiting for a
// file, and a session attached to it by the launcher's pid.

// startJob starts a launcher with a 4-rank job that waits for a file, and returns the
// launcher's command and the ranks' pids once all of them run the program.
func startWaitingJob(t *testing.T, p *program, launcher string, env []string, launcherArgs ...string) (*exec.Cmd, string, string) {
	t.Helper()
	dir := t.TempDir()
	goFile, done := filepath.Join(dir, "go"), filepath.Join(dir, "done")
	if err := os.Mkdir(done, 0o755); err != nil {
		t.Fatal(err)
	}
	args := append(append([]string(nil), launcherArgs...), p.bin, goFile, done)
	cmd := exec.Command(launcher, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = newTestWriter(t), newTestWriter(t)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		cmd.Wait()
	})
	return cmd, goFile, done
}

// ranksOf lists the processes under pid (its descendants) that run exe.
func ranksOf(pid int, exe string) []int {
	var out []int
	kids := childrenOf(pid)
	for len(kids) > 0 {
		k := kids[0]
		kids = append(kids[1:], childrenOf(k)...)
		if e, _ := os.Readlink("/proc/" + strconv.Itoa(k) + "/exe"); e == exe {
			out = append(out, k)
		}
	}
	return out
}

func childrenOf(pid int) []int {
	var out []int
	tasks, _ := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	for _, task := range tasks {
		b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/task/" + task.Name() + "/children")
		for _, f := range strings.Fields(string(b)) {
			if c, err := strconv.Atoi(f); err == nil {
				out = append(out, c)
			}
		}
	}
	return out
}

// waitRanksRunning waits until n processes under pid run exe and have reached the wait loop
// (their ready files in done).
func waitRanksRunning(t *testing.T, pid int, exe, done string, n int) []int {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		ready, _ := filepath.Glob(filepath.Join(done, "ready.*"))
		if r := ranksOf(pid, exe); len(r) == n && len(ready) == n {
			return r
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("the job of launcher %d did not start %d ranks of %s", pid, n, exe)
	return nil
}

// checkFinished waits for the launcher to end successfully and checks that every rank got
// through MPI_Finalize.
func checkFinished(t *testing.T, cmd *exec.Cmd, done string, np int) {
	t.Helper()
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	select {
	case err := <-waited:
		if err != nil {
			t.Errorf("launcher: %v", err)
		}
	case <-time.After(90 * time.Second):
		t.Fatalf("the job did not finish")
	}
	for r := 0; r < np; r++ {
		if _, err := os.Stat(filepath.Join(done, "rank."+strconv.Itoa(r))); err != nil {
			t.Errorf("rank %d did not finish: %v", r, err)
		}
	}
}

// Attach to a running mpirun job by its pid: the ranks come from its MPIR proctable, every
// rank's stack shows where it waits, and a disconnect that does not terminate leaves the job
// running to its normal end.
func TestMPIRunAttachLauncherPid(t *testing.T) {
	mpirun := needTool(t, "mpirun.openmpi")
	p := compileMPI(t, "mpicc.openmpi")
	mpirunAttach(t, p, mpirun, ompiEnv)
}

// mpirunAttach attaches to a running 4-rank job of launcher by the launcher's pid, checks
// the ranks and their stacks, detaches and checks that the job completes.
func mpirunAttach(t *testing.T, p *program, launcher string, envMap map[string]any) {
	var env []string
	for k, v := range envMap {
		env = append(env, k+"="+v.(string))
	}
	cmd, goFile, done := startWaitingJob(t, p, launcher, env, "-np", "4")
	pids := waitRanksRunning(t, cmd.Process.Pid, p.bin, done, 4)
	d, rs := attachAtEntry(t, cmd.Process.Pid, 4)
	seen := map[int]bool{}
	for _, pid := range pids {
		seen[pid] = true
	}
	for _, r := range rs {
		if !seen[r.Pid] {
			t.Errorf("rank %d: pid %d is not one of the job's ranks %v", r.Rank, r.Pid, pids)
		}
		if env, _ := os.ReadFile("/proc/" + strconv.Itoa(r.Pid) + "/environ"); !strings.Contains(string(env),
			"OMPI_COMM_WORLD_RANK="+strconv.Itoa(r.Rank)+"\x00") {
			t.Errorf("rank %d: pid %d is not Open MPI's rank %d", r.Rank, r.Pid, r.Rank)
		}
		frames := d.stackTrace(r.ThreadID)
		w := indexOfFrame(frames, 0, "wait_for")
		if w < 0 || indexOfFrame(frames, w, "main") != w+1 {
			t.Errorf("rank %d: stack %v, want wait_for under main", r.Rank, frameNames(frames))
		}
	}
	d.c.Request("disconnect", map[string]any{"terminateDebuggee": false})
	d.end()
	for _, pid := range pids {
		if st := procStatus(pid, "State"); !strings.HasPrefix(st, "S") && !strings.HasPrefix(st, "R") {
			t.Errorf("rank pid %d after the detach: state %q", pid, st)
		}
		if tr := procStatus(pid, "TracerPid"); tr != "0" {
			t.Errorf("rank pid %d after the detach: TracerPid %s", pid, tr)
		}
	}
	if err := os.WriteFile(goFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	checkFinished(t, cmd, done, 4)
}

// attachAtEntry attaches a new DAP session to the running job of launcher pid, stopped where
// each of its np ranks is (stopAtEntry), and returns the session and its ranks.
func attachAtEntry(t *testing.T, pid, np int) (*dapSession, []RankState) {
	t.Helper()
	d := newDAP(t, viaPipe)
	d.initialize()
	d.call("attach", map[string]any{"launcherPid": pid, "stopAtEntry": true}, nil)
	d.event("initialized")
	d.call("configurationDone", nil, nil)
	if st := d.stopped(); st.Reason != "entry" {
		t.Fatalf("stop %+v, want the entry stop", st)
	}
	rs := d.ranks().Ranks
	if len(rs) != np {
		t.Fatalf("ranks %+v, want %d", rs, np)
	}
	return d, rs
}
