//go:build linux && amd64

package ptrace

import (
	"encoding/binary"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hpcdap/hpcdap/internal/testenv"
	"github.com/hpcdap/hpcdap/procimage"
	"github.com/hpcdap/hpcdap/target"
)

// TestKillDeliveredByResume: a signal sent with Kill stops the thread (EventSignal); resuming
// with it runs the program's handler, which makes it exit 42.
func TestKillDeliveredByResume(t *testing.T) {
	for _, tc := range []struct {
		name string
		tid  bool
	}{{"process", false}, {"thread", true}} {
		t.Run(tc.name, func(t *testing.T) {
			tr := newTracer(t)
			p := spawn(t, tr, "sigusr")
			pid := p.Info().Pid
			stopAtFunction(t, p, "target_fn") // the handler is installed by now
			p.Resume(pid, 0)
			tid := 0
			if tc.tid {
				tid = pid
			}
			if err := p.Kill(tid, int(syscall.SIGUSR1)); err != nil {
				t.Fatal(err)
			}
			ev := expect(t, p, target.EventSignal)
			wantCode := 0 // SI_USER
			if tc.tid {
				wantCode = -6 // SI_TKILL
			}
			if ev.Signal != int(syscall.SIGUSR1) || ev.Trap != target.TrapNone || ev.Code != wantCode || ev.Tid != pid {
				t.Fatalf("event %+v", ev)
			}
			if err := p.Resume(pid, int(syscall.SIGUSR1)); err != nil {
				t.Fatal(err)
			}
			expectExit(t, p, 42<<8)
		})
	}
}

// TestResumeWithSignalFromInterrupt: an interrupt stop cannot carry a signal through
// PTRACE_CONT; the back end queues it and delivers it without a second report.
func TestResumeWithSignalFromInterrupt(t *testing.T) {
	tr := newTracer(t)
	p := spawn(t, tr, "sigusr")
	pid := p.Info().Pid
	stopAtFunction(t, p, "target_fn")
	p.Resume(pid, 0)
	p.Interrupt(pid)
	expect(t, p, target.EventStopped)
	if err := p.Resume(pid, int(syscall.SIGUSR1)); err != nil {
		t.Fatal(err)
	}
	expectExit(t, p, 42<<8)
}

// TestSuppressSignal: resuming with 0 from a signal-delivery stop discards the signal.
func TestSuppressSignal(t *testing.T) {
	tr := newTracer(t)
	p := spawn(t, tr, "count", "-1")
	pid := p.Info().Pid
	p.Resume(pid, 0)
	p.Kill(0, int(syscall.SIGTERM))
	ev := expect(t, p, target.EventSignal)
	if ev.Signal != int(syscall.SIGTERM) {
		t.Fatalf("event %+v", ev)
	}
	p.Resume(pid, 0) // suppressed: the program keeps counting
	p.Interrupt(pid)
	expect(t, p, target.EventStopped)
	p.Kill(0, int(syscall.SIGKILL))
	expectExit(t, p, int(syscall.SIGKILL))
}

// TestGroupStop: a delivered SIGSTOP puts the process in a job-control stop that holds under
// the tracer (PTRACE_LISTEN) until SIGCONT, and Interrupt still reaches a thread in it.
func TestGroupStop(t *testing.T) {
	tr := newTracer(t)
	p := spawn(t, tr, "count", "-1")
	pid := p.Info().Pid
	counter := symAddr(t, pid, progPath, "counter")
	p.Resume(pid, 0)
	p.Kill(0, int(syscall.SIGSTOP))
	ev := expect(t, p, target.EventSignal)
	if ev.Signal != int(syscall.SIGSTOP) {
		t.Fatalf("event %+v", ev)
	}
	if err := p.Resume(pid, int(syscall.SIGSTOP)); err != nil {
		t.Fatal(err)
	}
	// The thread is in the group stop, not in a ptrace stop the agent knows: Interrupt works.
	if _, err := p.PC(pid); err == nil {
		t.Fatal("PC of a thread in a job-control stop: want ErrRunning")
	}
	c0 := readCounter(t, p, counter)
	time.Sleep(50 * time.Millisecond)
	if c1 := readCounter(t, p, counter); c1 != c0 {
		t.Fatalf("counter moved from %d to %d during the job-control stop", c0, c1)
	}
	if err := p.Interrupt(pid); err != nil {
		t.Fatal(err)
	}
	ev = expect(t, p, target.EventStopped)
	if ev.Tid != pid {
		t.Fatalf("event %+v", ev)
	}
	// Resuming keeps the job-control stop.
	p.Resume(pid, 0)
	time.Sleep(20 * time.Millisecond)
	if c1 := readCounter(t, p, counter); c1 != c0 {
		t.Fatalf("counter moved after resume inside the job-control stop")
	}
	p.Kill(0, int(syscall.SIGCONT))
	ev = expect(t, p, target.EventSignal)
	if ev.Signal != int(syscall.SIGCONT) {
		t.Fatalf("event %+v", ev)
	}
	p.Resume(pid, 0)
	waitCounterMoves(t, p, counter, c0)
	p.Interrupt(pid)
	expect(t, p, target.EventStopped)
}

// TestDetachFromGroupStop: Detach from a process in a job-control stop leaves it running.
func TestDetachFromGroupStop(t *testing.T) {
	tr := newTracer(t)
	p := spawn(t, tr, "stopme")
	pid := p.Info().Pid
	p.Resume(pid, 0)
	ev := expect(t, p, target.EventSignal)
	if ev.Signal != int(syscall.SIGSTOP) {
		t.Fatalf("event %+v", ev)
	}
	p.Resume(pid, int(syscall.SIGSTOP))
	time.Sleep(20 * time.Millisecond)
	if err := p.Detach(); err != nil {
		t.Fatal(err)
	}
	if _, ok := <-p.Events(); ok {
		t.Fatal("events not closed after Detach")
	}
	// The process is our child: its exit is reaped by the tracer, so watch it disappear.
	waitGone(t, pid)
}

func readCounter(t *testing.T, p target.Process, addr uint64) uint64 {
	t.Helper()
	b := make([]byte, 8)
	if _, err := p.ReadMemory(addr, b); err != nil {
		t.Fatal(err)
	}
	return binary.LittleEndian.Uint64(b[0:])
}

func waitCounterMoves(t *testing.T, p target.Process, addr, from uint64) {
	t.Helper()
	deadline := time.Now().Add(eventWait)
	for readCounter(t, p, addr) == from {
		if time.Now().After(deadline) {
			t.Fatal("counter does not move")
		}
		time.Sleep(time.Millisecond)
	}
}

func waitGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(eventWait)
	for {
		st, err := procimage.ReadStatus(pid)
		if err != nil || st.State == 'Z' || st.State == 'X' {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pid %d still there in state %q", pid, st.State)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// stopAtFunction runs the leader to the first instruction of a function with a temporary
// breakpoint, leaving it stopped there.
func stopAtFunction(t *testing.T, p target.Process, name string) {
	t.Helper()
	pid := p.Info().Pid
	addr := symAddr(t, pid, progPath, name)
	orig := make([]byte, 1)
	p.ReadMemory(addr, orig)
	p.WriteMemory(addr, []byte{0xcc})
	p.Resume(pid, 0)
	ev := expect(t, p, target.EventSignal)
	if ev.Trap != target.TrapBreakpoint || ev.PC != addr+1 {
		t.Fatalf("event %+v, want breakpoint at %#x", ev, addr)
	}
	p.WriteMemory(addr, orig)
	p.SetPC(pid, addr)
}

// TestAttachStoppedProcess: attaching to a process in a job-control stop keeps it stopped
// while resumed under the tracer; Detach leaves it running and it completes (exit 5).
func TestAttachStoppedProcess(t *testing.T) {
	needPrograms(t)
	cmd := exec.Command(progPath, "stopme")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	pid := cmd.Process.Pid
	deadline := time.Now().Add(eventWait)
	for threadState(t, pid) != 'T' {
		if time.Now().After(deadline) {
			t.Fatal("stopme did not stop")
		}
		time.Sleep(time.Millisecond)
	}
	tr := newTracer(t)
	p, err := tr.Attach(pid)
	if err != nil {
		t.Fatal(err)
	}
	if s := threadState(t, pid); s != 't' {
		t.Fatalf("state %q after attach, want t", s)
	}
	if err := p.Resume(pid, 0); err != nil {
		t.Fatal(err)
	}
	if err := p.Interrupt(pid); err != nil {
		t.Fatal(err)
	}
	if ev := expect(t, p, target.EventStopped); ev.Tid != pid {
		t.Fatalf("event %+v", ev)
	}
	if err := p.Detach(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != 5 {
		t.Fatalf("after detach: %v, want exit 5", cmd.ProcessState)
	}
}

// TestStepIntoHandler: stepping with a signal enters its handler; the step ends at the
// handler's first instruction (nm gives its address).
func TestStepIntoHandler(t *testing.T) {
	tr := newTracer(t)
	p := spawn(t, tr, "sigusr")
	pid := p.Info().Pid
	stopAtFunction(t, p, "target_fn")
	p.Resume(pid, 0)
	p.Kill(pid, int(syscall.SIGUSR1))
	if ev := expect(t, p, target.EventSignal); ev.Signal != int(syscall.SIGUSR1) {
		t.Fatalf("event %+v", ev)
	}
	if err := p.Step(pid, int(syscall.SIGUSR1)); err != nil {
		t.Fatal(err)
	}
	ev := expect(t, p, target.EventSignal)
	handler := symAddr(t, pid, progPath, "on_usr1")
	if ev.Signal != int(syscall.SIGTRAP) || ev.Trap != target.TrapStep || ev.PC != handler {
		t.Fatalf("event %+v, want a step to the handler at %#x", ev, handler)
	}
	p.Resume(pid, 0)
	expectExit(t, p, 42<<8)
}

// TestStepSyscall: single-stepping through a syscall instruction reports ordinary steps (the
// kernel reports that one with TRAP_BRKPT on x86) and reaches the next instruction (objdump).
func TestStepSyscall(t *testing.T) {
	tr := newTracer(t)
	p := spawn(t, tr, "syscall")
	pid := p.Info().Pid
	stopAtFunction(t, p, "raw_getpid")
	next, prev := objdumpInsns(t, progPath)
	base := symAddr(t, pid, progPath, "raw_getpid") - testenv.NMSymbol(t, progPath, "raw_getpid")
	var after uint64
	for a, text := range prev {
		f := testenv.NMSymbol(t, progPath, "raw_getpid")
		if strings.TrimSpace(text) == "syscall" && a > f && a < f+64 {
			after = a + base
		}
	}
	if after == 0 {
		t.Fatal("objdump shows no syscall in raw_getpid")
	}
	for i := 0; ; i++ {
		pc, _ := p.PC(pid)
		if pc == after {
			break
		}
		if i == 32 {
			t.Fatalf("never reached %#x", after)
		}
		p.Step(pid, 0)
		ev := expect(t, p, target.EventSignal)
		if ev.Trap != target.TrapStep || ev.PC != next[pc-base]+base {
			t.Fatalf("step from %#x: %+v, want a step to %#x", pc, ev, next[pc-base]+base)
		}
	}
	p.Resume(pid, 0)
	expectExit(t, p, 0)
}
