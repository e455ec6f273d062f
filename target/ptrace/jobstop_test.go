//go:build linux && amd64

package ptrace

import (
	"fmt"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/hpcdap/hpcdap/procimage"
	"github.com/hpcdap/hpcdap/target"
)

// startJobStopped runs prog count -1 untraced and puts it in a job-control stop (state T), as
// slurmstepd holds a task at its exec.
func startJobStopped(t *testing.T) *exec.Cmd {
	t.Helper()
	needPrograms(t)
	cmd := exec.Command(progPath, "count", "-1")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	pid := cmd.Process.Pid
	deadline := time.Now().Add(eventWait)
	syscall.Kill(pid, syscall.SIGSTOP)
	for threadState(t, pid) != 'T' {
		if time.Now().After(deadline) {
			t.Fatalf("pid %d did not enter the job-control stop", pid)
		}
		time.Sleep(time.Millisecond)
	}
	return cmd
}

// TestKillInJobControlStop: a signal sent with Kill to an attached process in a job-control
// stop is reported (the listening thread is woken to dequeue it), for the process and for a
// thread, and also when it was sent while the thread was still stopped by the attach; resuming a reported SIGSTOP without a signal puts the process back into its
// job-control stop (the counter does not move), and SIGCONT then lets it run.
func TestKillInJobControlStop(t *testing.T) {
	for _, c := range []struct{ byThread, beforeResume bool }{{false, false}, {true, false}, {false, true}} {
		byThread := c.byThread
		cmd := startJobStopped(t)
		pid := cmd.Process.Pid
		tr := newTracer(t)
		p, err := tr.Attach(pid)
		if err != nil {
			t.Fatal(err)
		}
		counter := symAddr(t, pid, progPath, "counter")
		tid := 0
		if byThread {
			tid = pid
		}
		if c.beforeResume {
			// Sent while the tracer holds the thread in the group stop: reported once resumed.
			if err := p.Kill(tid, int(syscall.SIGSTOP)); err != nil {
				t.Fatal(err)
			}
		}
		if err := p.Resume(pid, 0); err != nil { // into PTRACE_LISTEN
			t.Fatal(err)
		}
		if !c.beforeResume {
			if err := p.Kill(tid, int(syscall.SIGSTOP)); err != nil {
				t.Fatal(err)
			}
		}
		ev := expect(t, p, target.EventSignal)
		if ev.Signal != int(syscall.SIGSTOP) || ev.Tid != pid {
			t.Fatalf("kill(tid %d): event %+v, want SIGSTOP of %d", tid, ev, pid)
		}
		if s := threadState(t, pid); s != 't' {
			t.Fatalf("state %q at the SIGSTOP report, want t", s)
		}
		c0 := readCounter(t, p, counter)
		if err := p.Resume(pid, 0); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
		if c1 := readCounter(t, p, counter); c1 != c0 {
			t.Fatalf("counter moved from %d to %d: the process left its job-control stop", c0, c1)
		}
		// Still in the job-control stop: Interrupt reaches it, and no other event came.
		if err := p.Interrupt(pid); err != nil {
			t.Fatal(err)
		}
		if ev := expect(t, p, target.EventStopped); ev.Tid != pid {
			t.Fatalf("event %+v", ev)
		}
		p.Resume(pid, 0)
		if err := p.Kill(0, int(syscall.SIGCONT)); err != nil {
			t.Fatal(err)
		}
		ev = expect(t, p, target.EventSignal)
		if ev.Signal != int(syscall.SIGCONT) {
			t.Fatalf("event %+v, want SIGCONT", ev)
		}
		p.Resume(pid, int(syscall.SIGCONT))
		waitCounterMoves(t, p, counter, c0)
		if err := p.Detach(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestDetachWhileStepping: detaching right after a single step was started never leaves the
// step's SIGTRAP to kill the untraced process. The race (the interrupt reported before the
// trap is dequeued) is timing-dependent, so the scenario runs many times.
func TestDetachWhileStepping(t *testing.T) {
	detachRuns(t, 500, func(p target.Process, pid int) error { return p.Step(pid, 0) })
}

// TestDetachAtBreakpointHit: detaching while the thread runs into a breakpoint, removed just
// before the detach, never leaves the breakpoint's SIGTRAP to kill the untraced process: the
// detach's interrupt may be reported before the trap is dequeued. Timing-dependent, so the
// scenario runs many times.
func TestDetachAtBreakpointHit(t *testing.T) {
	addr := uint64(0)
	orig := make([]byte, 1)
	detachRuns(t, 300, func(p target.Process, pid int) error {
		if addr == 0 {
			addr = symAddr(t, pid, progPath, "target_fn")
			if _, err := p.ReadMemory(addr, orig); err != nil {
				return err
			}
		}
		if _, err := p.WriteMemory(addr, []byte{0xcc}); err != nil {
			return fmt.Errorf("plant: %w", err)
		}
		if err := p.Resume(pid, 0); err != nil {
			return err
		}
		// The loop calls target_fn all the time: the hit comes at once, before, during or
		// after the detach's interrupt.
		if _, err := p.WriteMemory(addr, orig); err != nil {
			return fmt.Errorf("remove: %w", err)
		}
		return nil
	})
}

// detachRuns attaches runs times to a process calling target_fn forever, does before each
// detach what before says, and fails as soon as the process has died after a detach.
func detachRuns(t *testing.T, runs int, before func(p target.Process, pid int) error) {
	needPrograms(t)
	cmd := exec.Command(progPath, "count", "-1")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	pid := cmd.Process.Pid
	tr := newTracer(t)
	for i := range runs {
		p, err := tr.Attach(pid)
		if err != nil {
			if st, serr := procimage.ReadStatus(pid); serr != nil || st.State == 'Z' {
				cmd.Wait()
				t.Fatalf("run %d: the process died after the previous detach: %v", i, cmd.ProcessState)
			}
			t.Fatalf("run %d: attach: %v", i, err)
		}
		if err := before(p, pid); err != nil {
			t.Fatalf("run %d: %v", i, err)
		}
		if err := p.Detach(); err != nil {
			t.Fatalf("run %d: detach: %v", i, err)
		}
		for range p.Events() {
		}
		if st, err := procimage.ReadStatus(pid); err != nil || st.State == 'Z' || st.State == 'X' {
			cmd.Wait()
			t.Fatalf("run %d: the process died after the detach: %v", i, cmd.ProcessState)
		}
	}
	// The last detach may have left a trap pending just now: give it a moment to strike.
	time.Sleep(20 * time.Millisecond)
	if st, err := procimage.ReadStatus(pid); err != nil || st.State == 'Z' {
		cmd.Wait()
		t.Fatalf("the process died after the last detach: %v", cmd.ProcessState)
	}
}

// TestHeldQueueRelease: events collected while a queue is held (an Attach in progress) are all
// receivable without blocking once it is released, in order, however many there are.
func TestHeldQueueRelease(t *testing.T) {
	q := newHeldEventQueue()
	const n = 3 * queueCap
	for i := range n {
		q.push(target.Event{Kind: target.EventSignal, Tid: i})
	}
	q.release()
	for i := range n {
		select {
		case ev := <-q.out:
			if ev.Tid != i {
				t.Fatalf("event %d has tid %d", i, ev.Tid)
			}
		default:
			t.Fatalf("event %d of %d not receivable at once", i, n)
		}
	}
	q.push(target.Event{Kind: target.EventExit, Tid: n})
	q.end()
	if ev := <-q.out; ev.Tid != n {
		t.Fatalf("event after release: %+v", ev)
	}
	if _, ok := <-q.out; ok {
		t.Fatal("channel not closed after end")
	}
}
