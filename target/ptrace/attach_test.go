//go:build linux && amd64

package ptrace

import (
	"errors"
	"fmt"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hpcdap/hpcdap/internal/testenv"
	"github.com/hpcdap/hpcdap/target"
)

// TestAttachDetach attaches to a running multithreaded process, checks that every thread is
// stopped and listed, and detaches: the process finishes normally (its exit code is 3).
func TestAttachDetach(t *testing.T) {
	needPrograms(t)
	cmd := exec.Command(progPath, "run", "400")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	pid := cmd.Process.Pid
	waitThreads(t, pid, 3)
	tr := newTracer(t)
	p, err := tr.Attach(pid)
	if err != nil {
		t.Fatal(err)
	}
	tids, err := p.Threads()
	if err != nil {
		t.Fatal(err)
	}
	if proc := procTasks(t, pid); !equalInts(tids, proc) || len(tids) != 3 || tids[0] != pid {
		t.Fatalf("Threads %v, /proc task %v", tids, proc)
	}
	for _, tid := range tids {
		if s := threadState(t, tid); s != 't' {
			t.Fatalf("thread %d state %q, want t", tid, s)
		}
		if _, err := p.Registers(tid, target.RegsGeneral); err != nil {
			t.Fatal(err)
		}
	}
	addr := symAddr(t, pid, progPath, "target_fn")
	got := make([]byte, 16)
	if _, err := p.ReadMemory(addr, got); err != nil || string(got) != string(testenv.ELFBytes(t, progPath, testenv.NMSymbol(t, progPath, "target_fn"), 16)) {
		t.Fatalf("read target_fn: % x %v", got, err)
	}
	if _, err := tr.Attach(pid); err == nil {
		t.Fatal("second Attach of the same process succeeded")
	}
	// A watchpoint set before Detach must not survive it (it would kill the process).
	watched := symAddr(t, pid, progPath, "watched")
	if err := p.SetWatchpoint(pid, 1, watched, 4, target.WatchWrite); err != nil {
		t.Fatal(err)
	}
	if err := p.Detach(); err != nil {
		t.Fatal(err)
	}
	if _, ok := <-p.Events(); ok {
		t.Fatal("event after Detach")
	}
	if err := p.Resume(pid, 0); err == nil {
		t.Fatal("Resume after Detach succeeded")
	}
	cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != 3 {
		t.Fatalf("after detach: %v, want exit 3", cmd.ProcessState)
	}
}

// TestAttachWhileCloning attaches to a process that creates and joins threads continuously,
// runs it under the tracer reporting new threads, then detaches; it completes with exit 0.
func TestAttachWhileCloning(t *testing.T) {
	needPrograms(t)
	cmd := exec.Command(progPath, "churn", "600")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	pid := cmd.Process.Pid
	time.Sleep(20 * time.Millisecond)
	tr := newTracer(t)
	p, err := tr.Attach(pid)
	if err != nil {
		t.Fatal(err)
	}
	tids, _ := p.Threads()
	if proc := procTasks(t, pid); !equalInts(tids, proc) {
		t.Fatalf("Threads %v, /proc task %v", tids, proc)
	}
	for _, tid := range tids {
		p.Resume(tid, 0)
	}
	news, exits := 0, 0
	until := time.After(150 * time.Millisecond)
loop:
	for {
		select {
		case ev := <-p.Events():
			switch ev.Kind {
			case target.EventNewThread:
				news++
				if err := p.Resume(ev.Tid, 0); err != nil {
					t.Fatal(err)
				}
			case target.EventThreadExit:
				exits++
			default:
				t.Fatalf("event %+v", ev)
			}
		case <-until:
			break loop
		}
	}
	if news == 0 || exits == 0 {
		t.Fatalf("%d new threads, %d exits reported", news, exits)
	}
	if err := p.Detach(); err != nil {
		t.Fatal(err)
	}
	for range p.Events() {
	}
	cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("after detach: %v", cmd.ProcessState)
	}
}

func TestAttachErrors(t *testing.T) {
	tr := newTracer(t)
	if _, err := tr.Attach(0); err == nil {
		t.Fatal("attach 0 succeeded")
	}
	needPrograms(t)
	cmd := exec.Command(progPath, "exit", "0")
	cmd.Run()
	if _, err := tr.Attach(cmd.Process.Pid); !errors.Is(err, target.ErrExited) {
		t.Fatalf("attach to a reaped pid: %v, want ErrExited", err)
	}
}

// TestManyProcesses runs 16 spawned processes on one Tracer concurrently, each hitting a
// breakpoint and running to completion.
func TestManyProcesses(t *testing.T) {
	tr := newTracer(t)
	const n = 16
	procs := make([]target.Process, n)
	testenv.NMSymbol(t, progPath, "target_fn") // here a missing nm or symbol fails the test
	for i := range procs {
		procs[i] = spawn(t, tr, "count", fmt.Sprint(10+i))
	}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i, p := range procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- runOneBreakpoint(p, 10+i)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
}

// runOneBreakpoint: breakpoint on target_fn, hit once, removed, run to exit 0. Runs without a
// testing.T so that it can be used from goroutines.
func runOneBreakpoint(p target.Process, calls int) error {
	pid := p.Info().Pid
	base, err := mapBase(pid, progPath)
	if err != nil {
		return err
	}
	fn, err := symbolNoT(progPath, "target_fn")
	if err != nil {
		return err
	}
	addr := base + fn
	orig := make([]byte, 1)
	if _, err := p.ReadMemory(addr, orig); err != nil {
		return err
	}
	if _, err := p.WriteMemory(addr, []byte{0xcc}); err != nil {
		return err
	}
	if err := p.Resume(pid, 0); err != nil {
		return err
	}
	ev := <-p.Events()
	if ev.Kind != target.EventSignal || ev.Trap != target.TrapBreakpoint || ev.PC != addr+1 {
		return fmt.Errorf("pid %d: event %+v", pid, ev)
	}
	p.WriteMemory(addr, orig)
	p.SetPC(pid, addr)
	if err := p.Resume(pid, 0); err != nil {
		return err
	}
	ev = <-p.Events()
	if ev.Kind != target.EventExit || ev.Status != 0 {
		return fmt.Errorf("pid %d: event %+v, want exit 0", pid, ev)
	}
	return nil
}

func waitThreads(t *testing.T, pid, n int) {
	t.Helper()
	deadline := time.Now().Add(eventWait)
	for len(procTasks(t, pid)) < n {
		if time.Now().After(deadline) {
			t.Fatalf("pid %d never had %d threads", pid, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestDetachAfterTrap: Detach while a thread is stopped at a trap the agent has not resumed
// delivers nothing spurious. After a breakpoint whose int3 has been removed again, the PC is
// moved back so the restored instruction runs (otherwise the process would crash, see
// TestTracerDeathDropsPendingSignal); after a watchpoint the SIGTRAP is dropped. Either way
// the process goes on normally: it handles SIGUSR1 and exits 42.
func TestDetachAfterTrap(t *testing.T) {
	for _, kind := range []string{"breakpoint", "watchpoint"} {
		t.Run(kind, func(t *testing.T) {
			cmd := startTracee(t)
			pid := cmd.Process.Pid
			tr := newTracer(t)
			p, err := tr.Attach(pid)
			if err != nil {
				t.Fatal(err)
			}
			addr := symAddr(t, pid, progPath, "target_fn")
			orig := make([]byte, 1)
			if kind == "breakpoint" {
				p.ReadMemory(addr, orig)
				p.WriteMemory(addr, []byte{0xcc})
			} else {
				p.SetWatchpoint(pid, 3, symAddr(t, pid, progPath, "watched"), 4, target.WatchWrite)
			}
			tids, _ := p.Threads()
			for _, tid := range tids {
				p.Resume(tid, 0)
			}
			ev := nextEvent(t, p)
			for ev.Kind == target.EventNewThread { // workers started after the attach
				p.Resume(ev.Tid, 0)
				ev = nextEvent(t, p)
			}
			want := map[string]target.TrapKind{"breakpoint": target.TrapBreakpoint, "watchpoint": target.TrapWatch}[kind]
			if ev.Kind != target.EventSignal || ev.Trap != want || ev.Tid != pid {
				t.Fatalf("event %+v", ev)
			}
			if kind == "breakpoint" {
				p.WriteMemory(addr, orig) // removed, PC left after the int3
			}
			if err := p.Detach(); err != nil {
				t.Fatal(err)
			}
			cmd.Process.Signal(syscall.SIGUSR1)
			cmd.Wait()
			if code := cmd.ProcessState.ExitCode(); code != 42 {
				t.Fatalf("after detach: %v, want exit 42", cmd.ProcessState)
			}
		})
	}
}
