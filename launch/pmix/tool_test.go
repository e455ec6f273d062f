//go:build cgo && pmix

package pmix

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hpcdap/hpcdap/procimage"
)

// programs builds the test programs once per test binary.
var programs struct {
	once         sync.Once
	dir          string
	ranks, plain string
	err          error
}

// buildPrograms compiles testdata/ranks.c with mpicc and testdata/plain.c with cc.
func buildPrograms(t *testing.T) (ranks, plain string) {
	t.Helper()
	programs.once.Do(func() {
		dir, err := os.MkdirTemp("", "pmixtest")
		if err != nil {
			programs.err = err
			return
		}
		programs.dir = dir
		programs.ranks, programs.plain = filepath.Join(dir, "ranks"), filepath.Join(dir, "plain")
		for _, c := range [][]string{
			{"mpicc", "-g", "-O0", "-o", programs.ranks, "testdata/ranks.c"},
			{"cc", "-g", "-O0", "-o", programs.plain, "testdata/plain.c"},
		} {
			if out, err := exec.Command(c[0], c[1:]...).CombinedOutput(); err != nil {
				programs.err = fmt.Errorf("%s: %v\n%s", strings.Join(c, " "), err, out)
				return
			}
		}
	})
	if programs.err != nil {
		t.Fatal(programs.err)
	}
	return programs.ranks, programs.plain
}

// launcher returns the absolute path of name; the tests need Open MPI 5 / PRRTE (make test-pmix).
func launcher(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Skipf("%s not found: the PMIx tests run in the Debian 13 root (make test-pmix)", name)
	}
	return p
}

// launchArgs are the launcher arguments the tests use: 4 ranks on this one machine. No output
// option: the launcher forwards the ranks' output to the tool, which labels it.
var launchArgs = []string{"--map-by", ":oversubscribe", "-np", "4"}

// procState returns the state letter of pid from /proc/PID/stat.
func procState(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatalf("rank pid %d: %v", pid, err)
	}
	i := strings.LastIndexByte(string(b), ')')
	return string(b[i+2])
}

// tracerPid returns TracerPid from /proc/PID/status.
func tracerPid(t *testing.T, pid int) int {
	t.Helper()
	st, err := procimage.ReadStatus(pid)
	if err != nil {
		t.Fatalf("rank pid %d: %v", pid, err)
	}
	return st.TracerPid
}

// waitEnd waits for the job's end and returns its status.
func waitEnd(t *testing.T, tool *Tool) int {
	t.Helper()
	select {
	case <-tool.Ended():
	case <-time.After(2 * time.Minute):
		t.Fatal("the job did not end")
	}
	st, err := tool.Status()
	if err != nil {
		t.Fatalf("Status: %v", err)
	}
	return st
}

// releaseToEnd releases the held job, waits for its end and checks its status.
func releaseToEnd(ctx context.Context, t *testing.T, tool *Tool, want int) {
	t.Helper()
	if err := tool.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if st := waitEnd(t, tool); st != want {
		t.Errorf("job status %d, want %d", st, want)
	}
}

// closeChecked ends the tool and checks its stdout (checkOutput).
func closeChecked(t *testing.T, tool *Tool, stdout string, r Ready) {
	t.Helper()
	if err := tool.Close(); err != nil {
		t.Fatal(err)
	}
	checkOutput(t, stdout, r)
}

// checkProcs checks a 4-rank proc table against the running processes.
func checkProcs(t *testing.T, r Ready, exe string) {
	t.Helper()
	if len(r.Procs) != 4 {
		t.Fatalf("proc table has %d entries, want 4: %+v", len(r.Procs), r.Procs)
	}
	host, _ := os.Hostname()
	for i, p := range r.Procs {
		if p.Rank != i {
			t.Errorf("entry %d has rank %d", i, p.Rank)
		}
		if p.Host != host {
			t.Errorf("rank %d host %q, want os.Hostname %q", p.Rank, p.Host, host)
		}
		if p.Executable != exe {
			t.Errorf("rank %d executable %q, want %q", p.Rank, p.Executable, exe)
		}
		if got, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", p.Pid)); err != nil || got != exe {
			t.Errorf("rank %d pid %d: /proc/PID/exe = %q, %v; want %q", p.Rank, p.Pid, got, err, exe)
		}
	}
}

// checkOutput checks that the tool's stdout holds exactly each rank's line, once, labelled
// with its rank.
func checkOutput(t *testing.T, stdout string, r Ready) {
	t.Helper()
	b, err := os.ReadFile(stdout)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{}
	for _, p := range r.Procs {
		want[fmt.Sprintf("[1,%d]<stdout>:rank %d of 4 pid %d", p.Rank, p.Rank, p.Pid)] = 0
	}
	for _, line := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		if _, ok := want[line]; !ok {
			t.Errorf("tool stdout line %q is not one rank's labelled line", line)
			continue
		}
		want[line]++
	}
	for line, n := range want {
		if n != 1 {
			t.Errorf("tool stdout holds %q %d times, want once", line, n)
		}
	}
	if t.Failed() {
		t.Logf("tool stdout:\n%s", b)
	}
}

// startServe starts the tool and logs its stderr if the test fails.
func startServe(t *testing.T, env ...string) (*Tool, string) {
	t.Helper()
	tool, stdout, stderr := startTool(t, "serve", env...)
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(stderr)
			t.Logf("tool stderr:\n%s", b)
		}
	})
	return tool, stdout
}

// TestLaunchExitStatus: the job's status is the ranks' exit status.
func TestLaunchExitStatus(t *testing.T) {
	ranks, _ := buildPrograms(t)
	tool, _ := startServe(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := tool.Launch(ctx, Request{Launcher: launcher(t, "prterun"), Args: launchArgs, Program: ranks, ProgramArgs: []string{"3"}, Hold: HoldExec}); err != nil {
		t.Fatal(err)
	}
	releaseToEnd(ctx, t, tool, 3)
}

// TestLaunchNoHold: without a hold the job runs at once; ready still gives the table.
func TestLaunchNoHold(t *testing.T) {
	ranks, _ := buildPrograms(t)
	tool, stdout := startServe(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r, err := tool.Launch(ctx, Request{Launcher: launcher(t, "prterun"), Args: launchArgs, Program: ranks, ProgramArgs: []string{"0", "2"}})
	if err != nil {
		t.Fatal(err)
	}
	if r.Hold != HoldNone {
		t.Errorf("hold %q, want %q", r.Hold, HoldNone)
	}
	checkProcs(t, r, ranks)
	if st := waitEnd(t, tool); st != 0 {
		t.Errorf("job status %d, want 0", st)
	}
	closeChecked(t, tool, stdout, r)
}

// TestCloseWhileHeld: ending the tool with the ranks stopped on exec lets them run to the
// end; none is left stopped. Close releases first; a tool whose input just ends (the front
// end died) releases on its own.
func TestCloseWhileHeld(t *testing.T) {
	ranks, _ := buildPrograms(t)
	for _, how := range []string{"Close", "end of input"} {
		t.Run(how, func(t *testing.T) {
			tool, _ := startServe(t)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			r, err := tool.Launch(ctx, Request{Launcher: launcher(t, "prterun"), Args: launchArgs, Program: ranks, Hold: HoldExec})
			if err != nil {
				t.Fatal(err)
			}
			if how == "Close" {
				if err := tool.Close(); err != nil {
					t.Fatal(err)
				}
			} else {
				tool.reqs.Close()
				select {
				case <-tool.exited:
				case <-ctx.Done():
					t.Fatal("the tool did not exit at the end of its input")
				}
			}
			// The ranks and the launcher run to completion on their own (their output, with
			// the tool gone, goes nowhere).
			waitGone(t, r.LauncherPid)
			for _, p := range r.Procs {
				waitGone(t, p.Pid)
			}
		})
	}
}

// TestKill signals the running ranks through the launcher, and kills held ones.
func TestKill(t *testing.T) {
	ranks, _ := buildPrograms(t)
	for _, c := range []struct {
		name    string
		sig     syscall.Signal
		release bool
	}{
		{"SIGTERM running", syscall.SIGTERM, true},
		{"SIGKILL held", syscall.SIGKILL, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			tool, _ := startServe(t)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			r, err := tool.Launch(ctx, Request{Launcher: launcher(t, "prterun"), Args: launchArgs, Program: ranks, ProgramArgs: []string{"0", "60"}, Hold: HoldExec})
			if err != nil {
				t.Fatal(err)
			}
			if c.release {
				if err := tool.Release(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if err := tool.Kill(ctx, c.sig); err != nil {
				t.Fatal(err)
			}
			st := waitEnd(t, tool)
			t.Logf("job status after %v: %d", c.sig, st)
			// The launcher reports a signalled job as 128 + the signal.
			if st != 128+int(c.sig) {
				t.Errorf("job status %d after %v, want %d", st, c.sig, 128+int(c.sig))
			}
			for _, p := range r.Procs {
				waitGone(t, p.Pid)
			}
		})
	}
}

// waitGone waits until pid no longer exists (or is a zombie), failing if it stays stopped.
func waitGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return
		}
		i := strings.LastIndexByte(string(b), ')')
		st := string(b[i+2])
		if st == "Z" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pid %d still there in state %s", pid, st)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestLaunchNotALauncher: a program that never calls back gives an error, not a hang.
func TestLaunchNotALauncher(t *testing.T) {
	for _, c := range []struct{ launcher, program, says string }{
		{"/bin/true", "/bin/true", "the launcher exited without calling back"},
		{"/bin/sleep", "30", "the launcher runs but did not call back"},
	} {
		l := c.launcher
		t.Run(filepath.Base(l), func(t *testing.T) {
			tool, _ := startServe(t)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			_, err := tool.Launch(ctx, Request{Launcher: l, Program: c.program, Hold: HoldExec})
			if err == nil {
				t.Fatalf("Launch with %s succeeded", l)
			}
			t.Logf("Launch with %s: %v", l, err)
			for _, want := range []string{"PMIx_tool_set_server", l, c.says} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q lacks %q", err, want)
				}
			}
			// 0 when /bin/true was gone before the tool looked for its child.
			pid := tool.LauncherPid()
			if err := tool.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
			// The tool ended the launcher it started before it exited.
			if pid > 0 && alive(pid) {
				t.Errorf("launcher %s pid %d still runs after the failed launch's tool exited", l, pid)
			}
		})
	}
}

// TestLaunchAbandoned: a front end that goes away before its launch is ready leaves nothing
// behind: the tool ends the launcher and every rank it started before it exits. A launcher
// that ignores SIGTERM, or is stopped by SIGSTOP (it can then neither get its job ready nor
// act on SIGTERM), is killed.
func TestLaunchAbandoned(t *testing.T) {
	ranks, _ := buildPrograms(t)
	// A copy of its own, to find this run's ranks by their executable.
	exe := filepath.Join(t.TempDir(), "ranks")
	if b, err := os.ReadFile(ranks); err != nil {
		t.Fatal(err)
	} else if err := os.WriteFile(exe, b, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name     string
		launcher string
		args     []string
		program  string
		progArgs []string
		stop     bool
	}{
		{"not a launcher", "/bin/sleep", nil, "300", nil, false},
		{"ignores SIGTERM", "/bin/sh", []string{"-c", "trap '' TERM; exec sleep 300"}, "sh", nil, false},
		{"stopped prterun", launcher(t, "prterun"), launchArgs, exe, []string{"0", "300"}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			tool, _ := startServe(t)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			launched := make(chan error, 1)
			go func() {
				_, err := tool.Launch(ctx, Request{Launcher: c.launcher, Args: c.args, Program: c.program, ProgramArgs: c.progArgs, Hold: HoldExec})
				launched <- err
			}()
			var pid int
			for pid = tool.LauncherPid(); pid == 0; pid = tool.LauncherPid() {
				select {
				case err := <-launched:
					t.Fatalf("Launch returned %v before the tool reported the launcher", err)
				case <-time.After(5 * time.Millisecond):
				}
			}
			if c.stop {
				if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
					t.Fatal(err)
				}
			}
			// The front end goes away.
			tool.reqs.Close()
			if err := <-launched; err == nil {
				t.Fatal("Launch succeeded though its front end went away")
			} else {
				t.Logf("Launch: %v", err)
			}
			select {
			case <-tool.exited:
			case <-ctx.Done():
				t.Fatal("the tool did not exit at the end of its input")
			}
			if alive(pid) {
				t.Errorf("launcher %s pid %d still runs after the tool exited", c.launcher, pid)
			}
			if left := processesOf(exe); len(left) > 0 {
				t.Errorf("ranks %v still run after the tool exited", left)
			}
		})
	}
}

// processesOf returns the live processes running exe.
func processesOf(exe string) []int {
	dirs, _ := os.ReadDir("/proc")
	var pids []int
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		if got, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); err == nil && got == exe && alive(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// TestLaunchBadRequest: bad input is refused before anything starts.
func TestLaunchBadRequest(t *testing.T) {
	tool, _ := startServe(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, c := range []struct {
		req  Request
		want string
	}{
		{Request{Launcher: "mpirun", Program: "/bin/true"}, "not an absolute path"},
		{Request{Launcher: "/bin/true"}, "no program"},
		{Request{Launcher: "/bin/true", Program: "/bin/true", Hold: "main"}, `unknown hold "main"`},
	} {
		if _, err := tool.Launch(ctx, c.req); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Launch(%+v) = %v, want %q", c.req, err, c.want)
		}
	}
	if err := tool.Release(ctx); err == nil || !strings.Contains(err.Error(), "no job") {
		t.Errorf("Release without a job = %v", err)
	}
}

// TestAttach attaches by pid to a running 4-rank prterun job, reads its table, detaches, and
// the job completes.
func TestAttach(t *testing.T) {
	ranks, _ := buildPrograms(t)
	dir := t.TempDir()
	out, err := os.Create(filepath.Join(dir, "job.out"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	job := exec.Command(launcher(t, "prterun"), append(slices.Clone(launchArgs), ranks, "0", "6")...)
	job.Stdout, job.Stderr = out, out
	job.Env = append(os.Environ(), "TMPDIR="+dir)
	if err := job.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- job.Wait() }()
	defer job.Process.Kill()
	// Wait until every rank has printed (the job runs).
	waitFor(t, out.Name(), 4, "rank ")

	// The tool finds the launcher's rendezvous file under its TMPDIR.
	tool, _ := startServe(t, "TMPDIR="+dir)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// A wrong nspace is refused; the launcher's one job is found without one.
	if _, err := tool.Attach(ctx, job.Process.Pid, "nosuchjob@1"); err == nil {
		t.Error("Attach to job nosuchjob@1 succeeded")
	} else {
		t.Logf("Attach to nosuchjob@1: %v", err)
	}
	tool, _ = startServe(t, "TMPDIR="+dir)
	r, err := tool.Attach(ctx, job.Process.Pid, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("attached: %+v", r)
	if r.Hold != HoldNone || r.LauncherPid != job.Process.Pid {
		t.Errorf("Ready = %+v", r)
	}
	checkProcs(t, r, ranks)
	if err := tool.Detach(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			b, _ := os.ReadFile(out.Name())
			t.Fatalf("job after detach: %v\n%s", err, b)
		}
	case <-ctx.Done():
		t.Fatal("the job did not complete after detach")
	}
}

// waitFor waits until file holds n lines containing s.
func waitFor(t *testing.T, file string, n int, s string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		b, _ := os.ReadFile(file)
		if strings.Count(string(b), s) >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s holds %q after a minute", file, b)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestLauncherDies: a launcher killed while its job runs ends the wait for the job with an
// error, not a hang.
func TestLauncherDies(t *testing.T) {
	ranks, _ := buildPrograms(t)
	tool, _ := startServe(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r, err := tool.Launch(ctx, Request{Launcher: launcher(t, "prterun"), Args: launchArgs, Program: ranks, ProgramArgs: []string{"0", "5"}, Hold: HoldExec})
	if err != nil {
		t.Fatal(err)
	}
	if err := tool.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(r.LauncherPid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case <-tool.Ended():
	case <-ctx.Done():
		t.Fatal("Ended not closed after the launcher died")
	}
	if st, err := tool.Status(); err == nil || !strings.Contains(err.Error(), "lost") {
		t.Errorf("Status = %d, %v; want the lost connection", st, err)
	}
	// The ranks outlive their launcher and run to their end; none stays behind stopped.
	for _, p := range r.Procs {
		waitGone(t, p.Pid)
	}
}
