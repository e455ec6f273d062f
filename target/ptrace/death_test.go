//go:build linux && amd64

package ptrace

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/hpcdap/hpcdap/procimage"
	"github.com/hpcdap/hpcdap/target"
)

// The test binary doubles as a tracer process that the tests can kill: TestMain runs runHelper
// when helperEnv is set.
const (
	helperEnv = "HPCDAP_PTRACE_TEST_HELPER" // "hold" or "plant"
	helperPID = "HPCDAP_PTRACE_TEST_PID"
	helperSym = "HPCDAP_PTRACE_TEST_ADDR"
)

// runHelper attaches to a process and reports "ready" on stdout, then waits to be killed.
// "hold" leaves every thread stopped; "plant" also writes an int3 at the address in helperSym;
// "hit" plants, resumes every thread and waits until one is stopped at the breakpoint; "watch"
// sets a write watchpoint on the leader at that address.
func runHelper() int {
	mode := os.Getenv(helperEnv)
	pid, _ := strconv.Atoi(os.Getenv(helperPID))
	tr, err := NewTracer()
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	p, err := tr.Attach(pid)
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	if mode == "plant" || mode == "hit" {
		addr, _ := strconv.ParseUint(os.Getenv(helperSym), 0, 64)
		if _, err := p.WriteMemory(addr, []byte{0xcc}); err != nil {
			fmt.Println("error", err)
			return 1
		}
	}
	if mode == "watch" {
		addr, _ := strconv.ParseUint(os.Getenv(helperSym), 0, 64)
		if err := p.SetWatchpoint(pid, 0, addr, 4, target.WatchWrite); err != nil {
			fmt.Println("error", err)
			return 1
		}
	}
	if mode == "hit" {
		tids, _ := p.Threads()
		for _, tid := range tids {
			p.Resume(tid, 0)
		}
		if ev := <-p.Events(); ev.Trap != target.TrapBreakpoint {
			fmt.Println("error: event", ev)
			return 1
		}
	}
	fmt.Println("ready")
	select {}
}

// startHelper runs the test binary as a tracer of pid.
func startHelper(t *testing.T, mode string, pid int, addr uint64) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+mode, helperPID+"="+strconv.Itoa(pid), helperSym+"="+strconv.FormatUint(addr, 10))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if strings.TrimSpace(line) != "ready" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("helper: %q %v", line, err)
	}
	return cmd
}

// startTracee runs the test program in mode sigusr (it loops calling target_fn and
// store_watched until SIGUSR1, then exits 42) and waits until its handler is installed.
func startTracee(t *testing.T) *exec.Cmd {
	t.Helper()
	needPrograms(t)
	cmd := exec.Command(progPath, "sigusr")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	if line, err := bufio.NewReader(out).ReadString('\n'); line != "ready\n" {
		t.Fatalf("tracee: %q %v", line, err)
	}
	return cmd
}

// TestTracerDeathLeavesTraceeRunning: the tracer process is SIGKILLed while every thread of its
// tracee is stopped; without PTRACE_O_EXITKILL the kernel detaches and resumes them and the
// tracee goes on: it handles SIGUSR1 and exits 42.
func TestTracerDeathLeavesTraceeRunning(t *testing.T) {
	tracee := startTracee(t)
	pid := tracee.Process.Pid
	helper := startHelper(t, "hold", pid, 0)
	st, err := procimage.ReadStatus(pid)
	if err != nil || st.TracerPid == 0 {
		t.Fatalf("tracee status %+v %v, want traced", st, err)
	}
	// TracerPid is the tracer's thread; its thread group is the helper.
	if tst, err := procimage.ReadStatus(st.TracerPid); err != nil || tst.Tgid != helper.Process.Pid {
		t.Fatalf("tracer thread %d: %+v %v, want a thread of %d", st.TracerPid, tst, err, helper.Process.Pid)
	}
	for _, tid := range procTasks(t, pid) {
		if s := threadState(t, tid); s != 't' {
			t.Fatalf("thread %d state %q while held, want t", tid, s)
		}
	}
	helper.Process.Signal(syscall.SIGKILL)
	helper.Wait()
	tracee.Process.Signal(syscall.SIGUSR1)
	err = tracee.Wait()
	if code := tracee.ProcessState.ExitCode(); code != 42 {
		t.Fatalf("tracee after tracer death: %v (exit code %d), want exit 42", err, code)
	}
}

// TestTracerDeathLeavesBreakpoints documents the cost of dying with a breakpoint planted: the
// int3 stays in the text and, with nobody to catch it, kills the process with SIGTRAP.
func TestTracerDeathLeavesBreakpoints(t *testing.T) {
	ws := killTracerOf(t, "plant")
	if !ws.Signaled() || ws.Signal() != syscall.SIGTRAP {
		t.Fatalf("tracee ended with %v, want death by SIGTRAP", ws)
	}
}

// TestTracerDeathDropsPendingSignal documents what happens to a thread stopped at a breakpoint
// (a SIGTRAP signal-delivery stop) when the tracer dies: the kernel resumes it without the
// signal, so it executes past the int3, inside the instruction the int3 replaced. In target_fn
// that skips "push %rbp"; the function's "pop %rbp; ret" then returns to the saved frame
// pointer, a stack address, and the process dies of SIGSEGV instead of SIGTRAP.
func TestTracerDeathDropsPendingSignal(t *testing.T) {
	ws := killTracerOf(t, "hit")
	if !ws.Signaled() || ws.Signal() != syscall.SIGSEGV {
		t.Fatalf("tracee ended with %v, want death by SIGSEGV (SIGTRAP dropped)", ws)
	}
}

// TestTracerDeathLeavesWatchpoints: a write watchpoint armed by the dead tracer still fires
// and, untraced, kills the process with SIGTRAP.
func TestTracerDeathLeavesWatchpoints(t *testing.T) {
	ws := killTracerOf(t, "watch")
	if !ws.Signaled() || ws.Signal() != syscall.SIGTRAP {
		t.Fatalf("tracee ended with %v, want death by SIGTRAP", ws)
	}
}

func killTracerOf(t *testing.T, mode string) syscall.WaitStatus {
	tracee := startTracee(t)
	pid := tracee.Process.Pid
	sym := "target_fn"
	if mode == "watch" {
		sym = "watched"
	}
	helper := startHelper(t, mode, pid, symAddr(t, pid, progPath, sym))
	helper.Process.Signal(syscall.SIGKILL)
	helper.Wait()
	tracee.Wait()
	return tracee.ProcessState.Sys().(syscall.WaitStatus)
}
