package launch

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hpcdap/hpcdap/internal/testenv"
)

// While Open MPI 4's mpirun sits in MPIR_Breakpoint only the thread that called it is held:
// the launcher's other threads serve the ranks' start-up, so every rank gets through MPI_Init
// as far as its wait for the debugger's release (its TCP transport set up and listening), yet
// none passes that wait until the launcher is released; then every rank runs to its end.
func TestLocalOpenMPIRanksStartWhileHeld(t *testing.T) {
	prog := program(t, "ompi")
	testenv.NeedTool(t, "mpirun.openmpi", "openmpi-bin")
	fe := newFrontend(t, "local", "")
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	app, err := fe.LaunchBarrier(ctx, LaunchSpec{Launcher: "mpirun.openmpi", Args: []string{"-np", "2"}, Program: prog, Env: ompiEnv})
	if err != nil {
		t.Fatalf("LaunchBarrier: %v", err)
	}
	released := false
	defer func() {
		if !released {
			app.Kill(ctx, syscall.SIGKILL)
		}
		app.Deregister()
	}()
	// The launcher's other threads run once its agent has acknowledged the hold.
	deadline := time.Now().Add(30 * time.Second)
	for {
		held, other := threadStopStates(t, app.LauncherPid())
		if held == 1 && other > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("launcher pid %d in MPIR_Breakpoint: %d threads in a tracing stop, %d others; want the one that called it alone", app.LauncherPid(), held, other)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, p := range app.Procs() {
		for !listensTCP(p.Pid) {
			if processEnded(p.Pid) {
				t.Fatalf("rank %d (pid %d) ended while the launcher was held", p.Rank, p.Pid)
			}
			if time.Now().After(deadline) {
				t.Fatalf("rank %d (pid %d) has set up no TCP transport within 30 s of the launcher's MPIR_Breakpoint: its MPI_Init does not progress while the launcher is held", p.Rank, p.Pid)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	// Held at the end of MPI_Init: alive, and none has printed the line that follows it.
	for _, p := range app.Procs() {
		if processEnded(p.Pid) {
			t.Errorf("rank %d (pid %d) ended while the launcher was held", p.Rank, p.Pid)
		}
	}
	if out, _ := os.ReadFile(app.OutputPath()); strings.Contains(string(out), "/2 on ") {
		t.Fatalf("a rank passed MPI_Init while the launcher was held:\n%s", out)
	}
	if err := app.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	released = true
	if st, err := app.Wait(ctx); err != nil || !st.Exited() {
		t.Errorf("mpirun: %v, %v; want a normal exit", st, err)
	}
	out, _ := os.ReadFile(app.OutputPath())
	if n := strings.Count(string(out), "/2 on "); n != 2 {
		t.Errorf("%d rank lines in the launcher output after the release, want 2:\n%s", n, out)
	}
}

// threadStopStates counts a process's threads in a tracing stop (state t) and the others.
func threadStopStates(t *testing.T, pid int) (stopped, other int) {
	t.Helper()
	dir := fmt.Sprintf("/proc/%d/task", pid)
	tasks, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("threads of pid %d: %v", pid, err)
	}
	for _, task := range tasks {
		b, err := os.ReadFile(dir + "/" + task.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ...: the state follows the last ')'.
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if len(f) > 0 && f[0] == "t" {
			stopped++
		} else {
			other++
		}
	}
	return stopped, other
}

// listensTCP reports whether the process has a TCP socket in the LISTEN state.
func listensTCP(pid int) bool {
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return false
	}
	inodes := map[string]bool{}
	for _, fd := range fds {
		l, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		if err == nil && strings.HasPrefix(l, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
		}
	}
	for _, table := range []string{"tcp", "tcp6"} {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/net/" + table)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			// sl local remote st tx:rx tr:when retrnsmt uid timeout inode
			f := strings.Fields(line)
			if len(f) > 9 && f[3] == "0A" && inodes[f[9]] {
				return true
			}
		}
	}
	return false
}
