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
)

// The holds: the ranks stopped at exec and held in PMIx_Init when the launch is reported
// ready, and the front end's going away while the tool waits for them to be there.

func TestLaunchHoldExec(t *testing.T) {
	ranks, _ := buildPrograms(t)
	// The launcher's own output options do not matter: it forwards the ranks' text to the
	// tool, which labels it.
	for _, c := range []struct {
		name string
		args []string
	}{
		{"prterun", launchArgs},
		{"mpirun", append(slices.Clone(launchArgs), "--output", "tag")},
	} {
		name := c.name
		t.Run(name, func(t *testing.T) {
			tool, stdout, stderr := startTool(t, "serve")
			defer func() {
				if t.Failed() {
					b, _ := os.ReadFile(stderr)
					t.Logf("tool stderr:\n%s", b)
				}
			}()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			start := time.Now()
			r, err := tool.Launch(ctx, Request{Launcher: launcher(t, name), Args: c.args, Program: ranks, Hold: HoldExec})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("ready after %v: %+v", time.Since(start), r)
			if r.Hold != HoldExec || r.Nspace == "" || r.LauncherPid <= 0 || r.Version == "" {
				t.Errorf("Ready = %+v", r)
			}
			checkProcs(t, r, ranks)
			for _, p := range r.Procs {
				if st := procState(t, p.Pid); st != "T" {
					t.Errorf("rank %d pid %d state %s, want T (stopped on exec)", p.Rank, p.Pid, st)
				}
				if tp := tracerPid(t, p.Pid); tp != 0 {
					t.Errorf("rank %d pid %d traced by %d, want untraced", p.Rank, p.Pid, tp)
				}
			}
			releaseToEnd(ctx, t, tool, 0)
			closeChecked(t, tool, stdout, r)
		})
	}
}

// TestLaunchHoldInit holds the ranks in PMIx_Init: running (not stopped), each blocked in
// MPI_Init, and released by DEBUGGER_RELEASE.
func TestLaunchHoldInit(t *testing.T) {
	ranks, _ := buildPrograms(t)
	tool, stdout := startServe(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r, err := tool.Launch(ctx, Request{Launcher: launcher(t, "mpirun"), Args: launchArgs, Program: ranks, Hold: HoldInit})
	if err != nil {
		t.Fatal(err)
	}
	if r.Hold != HoldInit {
		t.Errorf("hold %q, want %q", r.Hold, HoldInit)
	}
	checkProcs(t, r, ranks)
	// Held in PMIx_Init: gdb's backtrace of each rank goes through MPI_Init, and nothing
	// was printed yet.
	for _, p := range r.Procs {
		if st := procState(t, p.Pid); st == "T" || st == "t" || st == "Z" {
			t.Errorf("rank %d state %s, want running or sleeping", p.Rank, st)
		}
		if gdb, err := exec.LookPath("gdb"); err == nil {
			out, _ := exec.Command(gdb, "-batch", "-nx", "-p", fmt.Sprint(p.Pid), "-ex", "bt").CombinedOutput()
			if !strings.Contains(string(out), "PMPI_Init") && !strings.Contains(string(out), "MPI_Init") {
				t.Errorf("rank %d backtrace does not pass through MPI_Init:\n%s", p.Rank, out)
			}
		}
	}
	if b, _ := os.ReadFile(stdout); strings.Contains(string(b), "rank ") {
		t.Errorf("a held rank printed: %q", b)
	}
	releaseToEnd(ctx, t, tool, 0)
	closeChecked(t, tool, stdout, r)
}

// TestLaunchEndedWhileStopping: a launch whose front end gives up while the tool waits for the
// ranks of a stop-on-exec hold to stop (PRRTE reports such a job ready before every rank has
// stopped) ends at once: the launch returns the cancellation, the tool exits on the end of its
// input instead of being killed, and neither the launcher nor any rank is left, stopped or
// running. Here the test keeps the ranks from staying stopped (SIGCONT), so that the wait
// lasts until the front end goes: by cancelling the launch and closing the tool, or by the
// end of the tool's input alone (the front end died).
func TestLaunchEndedWhileStopping(t *testing.T) {
	ranks, _ := buildPrograms(t)
	for _, how := range []string{"cancel", "end of input"} {
		t.Run(how, func(t *testing.T) {
			// The tool may find every rank stopped in the moment before the test continues
			// one (a loaded machine): it then reports the job held, and the attempt is made
			// again.
			for attempt := 1; ; attempt++ {
				if endWhileStopping(t, ranks, how) {
					return
				}
				t.Logf("attempt %d: the tool found every rank stopped before the test continued one", attempt)
				if attempt == 10 {
					t.Fatal("the tool never waited for the ranks to stop")
				}
			}
		})
	}
}

// endWhileStopping is one attempt of TestLaunchEndedWhileStopping: false when the launch was
// reported held before the test could keep a rank from its stop.
func endWhileStopping(t *testing.T, ranks, how string) bool {
	t.Helper()
	// A copy of its own, to find this attempt's ranks by their executable.
	exe := filepath.Join(t.TempDir(), "ranks")
	if b, err := os.ReadFile(ranks); err != nil {
		t.Fatal(err)
	} else if err := os.WriteFile(exe, b, 0o755); err != nil {
		t.Fatal(err)
	}
	tool, _, stderr := startTool(t, "serve")
	defer func() {
		if t.Failed() {
			b, _ := os.ReadFile(stderr)
			t.Logf("tool stderr:\n%s", b)
		}
	}()
	stopCont := make(chan struct{})
	contDone := make(chan struct{})
	go func() {
		defer close(contDone)
		for {
			for _, pid := range processesOf(exe) {
				syscall.Kill(pid, syscall.SIGCONT)
			}
			select {
			case <-stopCont:
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}()
	var once sync.Once
	stop := func() { once.Do(func() { close(stopCont) }); <-contDone }
	defer stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	launched := make(chan error, 1)
	go func() {
		_, err := tool.Launch(ctx, Request{Launcher: launcher(t, "prterun"), Args: launchArgs, Program: exe,
			ProgramArgs: []string{"0", "300"}, Hold: HoldExec})
		launched <- err
	}()
	// The tool says when it has waited a while for the ranks to stop.
	if returned, err := waitSaid(t, stderr, "waiting for ranks to be stopped at exec", launched); returned {
		if err != nil {
			t.Fatalf("Launch: %v", err)
		}
		// The held job is not wanted: its ranks would sleep for minutes.
		stop()
		if err := tool.Kill(ctx, syscall.SIGKILL); err != nil {
			t.Fatalf("Kill: %v", err)
		}
		if err := tool.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		for _, pid := range processesOf(exe) {
			waitGone(t, pid)
		}
		return false
	}
	giveUp(t, tool, how, cancel, launched, stop, exe)
	return true
}

// waitBound bounds every wait of the hold tests, so that a regression fails instead of hanging.
const waitBound = 2 * time.Minute

// waitSaid waits until the tool's standard error, in the file stderr, holds text; if the
// launch returns first, it returns true and the launch's result.
func waitSaid(t *testing.T, stderr, text string, launched <-chan error) (bool, error) {
	t.Helper()
	deadline := time.After(waitBound)
	for b, _ := os.ReadFile(stderr); !strings.Contains(string(b), text); b, _ = os.ReadFile(stderr) {
		select {
		case err := <-launched:
			return true, err
		case <-deadline:
			t.Fatalf("the tool did not say %q within %v, and the launch did not return", text, waitBound)
		case <-time.After(50 * time.Millisecond):
		}
	}
	return false, nil
}

// giveUp ends a launch in progress as its front end gives up (how: "cancel", by cancelling
// the launch and closing the tool, or "end of input", the front end dying), and checks that
// the launch returns that, the tool exits by itself, and neither the launcher nor a process
// running exe is left. stop is called once the launch has returned.
func giveUp(t *testing.T, tool *Tool, how string, cancel func(), launched <-chan error, stop func(), exe string) {
	t.Helper()
	pid := tool.LauncherPid()
	gave := time.Now()
	launchErr := func() error {
		select {
		case err := <-launched:
			return err
		case <-time.After(waitBound):
			t.Fatalf("the launch did not return within %v of the front end's giving up (%s)", waitBound, how)
			return nil
		}
	}
	switch how {
	case "cancel":
		cancel()
		if err := launchErr(); err == nil || !strings.Contains(err.Error(), context.Canceled.Error()) {
			t.Fatalf("Launch = %v, want the cancellation", err)
		}
		stop()
		// Close fails when it has to kill the tool.
		if err := tool.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
	case "end of input":
		tool.reqs.Close()
		if err := launchErr(); err == nil || !strings.Contains(err.Error(), "the front end went away") {
			t.Fatalf("Launch = %v, want the front end's going away", err)
		}
		stop()
		select {
		case <-tool.exited:
		case <-time.After(waitBound):
			t.Fatalf("the tool did not exit within %v of the end of its input", waitBound)
		}
	}
	t.Logf("the tool exited %v after the front end gave up", time.Since(gave))
	// The tool ends the launcher and the ranks with SIGKILL as it exits: they are gone as
	// soon as the kernel has ended them (waitGone fails if they are not within a minute).
	if pid <= 0 {
		t.Errorf("no launcher pid")
	} else {
		waitGone(t, pid)
	}
	for _, rank := range processesOf(exe) {
		waitGone(t, rank)
	}
}

// TestLaunchHoldInitLateRank: PRRTE reports a job held in PMIx_Init ready for debug once its
// first rank is there. A rank that sleeps before MPI_Init (testdata/late.c) is still in main
// then; the launch is reported ready only once every rank is in MPI_Init (gdb's backtrace of
// each), and after the release every rank runs to its end.
func TestLaunchHoldInitLateRank(t *testing.T) {
	launcher(t, "mpirun")
	exe := filepath.Join(t.TempDir(), "late")
	if out, err := exec.Command("mpicc", "-g", "-O0", "-o", exe, "testdata/late.c").CombinedOutput(); err != nil {
		t.Fatalf("mpicc: %v\n%s", err, out)
	}
	gdb, err := exec.LookPath("gdb")
	if err != nil {
		t.Skip("gdb not found")
	}
	const np = 8
	tool, stdout := startServe(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	env := append(os.Environ(), "LATE_RANK=5", "LATE_SECONDS=2")
	r, err := tool.Launch(ctx, Request{Launcher: launcher(t, "prterun"), Args: []string{"--map-by", ":oversubscribe", "-np", strconv.Itoa(np)},
		Program: exe, Env: env, Hold: HoldInit})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Procs) != np {
		t.Fatalf("proc table has %d entries, want %d: %+v", len(r.Procs), np, r.Procs)
	}
	for _, p := range r.Procs {
		out, _ := exec.Command(gdb, "-batch", "-nx", "-p", strconv.Itoa(p.Pid), "-ex", "bt").CombinedOutput()
		if !strings.Contains(string(out), "MPI_Init") {
			t.Errorf("rank %d (pid %d) is not in MPI_Init when the job is reported held:\n%s", p.Rank, p.Pid, out)
		}
	}
	releaseToEnd(ctx, t, tool, 0)
	// Output can still arrive after the job's end: the tool's end flushes it.
	if err := tool.Close(); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(stdout)
	for rank := range np {
		if !strings.Contains(string(b), fmt.Sprintf("rank %d of %d", rank, np)) {
			t.Errorf("rank %d did not run to its end; output:\n%s", rank, b)
		}
	}
}

// TestLaunchEndedWhileInInit: a launch whose front end gives up while the tool waits for the
// ranks of a job held in PMIx_Init to be there (a rank sleeps a minute before MPI_Init,
// testdata/late.c) ends at once, as TestLaunchEndedWhileStopping checks for the hold at exec:
// the launch returns the cancellation or the front end's going away, the tool exits by
// itself, and neither the launcher nor any rank, the late one included, is left.
func TestLaunchEndedWhileInInit(t *testing.T) {
	launcher(t, "mpirun")
	exe := filepath.Join(t.TempDir(), "late")
	if out, err := exec.Command("mpicc", "-g", "-O0", "-o", exe, "testdata/late.c").CombinedOutput(); err != nil {
		t.Fatalf("mpicc: %v\n%s", err, out)
	}
	for _, how := range []string{"cancel", "end of input"} {
		t.Run(how, func(t *testing.T) {
			tool, _, stderr := startTool(t, "serve")
			defer func() {
				if t.Failed() {
					b, _ := os.ReadFile(stderr)
					t.Logf("tool stderr:\n%s", b)
				}
			}()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			launched := make(chan error, 1)
			go func() {
				_, err := tool.Launch(ctx, Request{Launcher: launcher(t, "prterun"), Args: launchArgs, Program: exe,
					Env: append(os.Environ(), "LATE_RANK=2", "LATE_SECONDS=60"), Hold: HoldInit})
				launched <- err
			}()
			if returned, err := waitSaid(t, stderr, "waiting for ranks to be in PMIx_Init", launched); returned {
				t.Fatalf("Launch returned %v before the tool waited for the late rank", err)
			}
			giveUp(t, tool, how, cancel, launched, func() {}, exe)
		})
	}
}
