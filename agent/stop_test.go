package agent

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hpcdap/hpcdap/cdti"
	"github.com/hpcdap/hpcdap/internal/testenv"
)

// stopProcess sends StopProcess to rank 0 and returns whether a notification follows.
func (tt *testTool) stopProcess() bool {
	tt.t.Helper()
	rs := tt.update(0, &cdti.StopProcess{})
	if rs[0].Code != cdti.CmdSuccess {
		tt.t.Fatalf("StopProcess: %v", rs[0].Code)
	}
	return rs[0].Ack.(*cdti.StopProcessAck).Stopping
}

// StopProcess stops every thread of a running process with one Notify(SIGSTOP, Interrupt)
// and leaves no signal behind in the kernel; asked again while that notification is in
// flight, it answers that no other notification comes. Repeated, so that stops land
// everywhere in the program's run.
func TestStopProcess(t *testing.T) {
	h := newHarness(t, "")
	h.spawn(1, threadsBin, "100000000")
	tt, _ := startStopped(t, h, 1)
	pid := h.rankPid(0)
	tt.cont(0)
	// Every thread has run before the first stop: a thread being created is not yet stopped
	// in the kernel when the agent, which has not heard of it, reports the process stopped
	// (it stops before its first instruction all the same).
	for deadline := time.Now().Add(30 * time.Second); !allRan(pid, 5); {
		if time.Now().After(deadline) {
			t.Fatalf("the program's 5 threads have not all run: %v", taskStates(t, pid))
		}
		time.Sleep(time.Millisecond)
	}
	for i := range 30 {
		time.Sleep(time.Duration(i%5) * time.Millisecond)
		if !tt.stopProcess() {
			t.Fatalf("stop %d: a running process answered that no notification comes", i)
		}
		n := tt.signalNotify()
		if n.Signal != uint32(syscall.SIGSTOP) || n.Reason != cdti.SignalInterrupt {
			t.Fatalf("stop %d: notify %+v, want SIGSTOP Interrupt", i, n)
		}
		if pc := tt.pc(0, n.ThreadID); pc != n.InstAddress {
			t.Errorf("stop %d: notify names pc %#x, thread %d is at %#x", i, n.InstAddress, n.ThreadID, pc)
		}
		for tid, st := range taskStates(t, pid) {
			if st != 't' {
				t.Errorf("stop %d: thread %d in state %c, want t (traced stop)", i, tid, st)
			}
		}
		for _, f := range []string{"SigPnd", "ShdPnd"} {
			if v := procStatus(t, pid, f); strings.Trim(v, "0") != "" {
				t.Errorf("stop %d: %s %s: a signal was left in the kernel", i, f, v)
			}
		}
		if tt.stopProcess() {
			t.Fatalf("stop %d: a suspended process answered that another notification comes", i)
		}
		tt.noNotify(50 * time.Millisecond)
		tt.cont(0)
	}
	tt.mustUpdate(0, &cdti.SendSignalToProcess{Signal: uint32(syscall.SIGKILL)})
	if st := tt.waitTermination(0); !st.Signaled() || st.Signal() != int(syscall.SIGKILL) {
		t.Errorf("exit %v, want SIGKILL", st)
	}
}

// Several threads hit one breakpoint at once; the tool is told of the first, removes the
// breakpoint and continues: the hits still queued are forgotten (each thread executes the
// original instruction), and the process runs to its end with the right result.
func TestRemovedBreakpointDropsQueuedHits(t *testing.T) {
	for i := range 10 {
		h := newHarness(t, "")
		out := h.spawn(1, threadsBin, "3")
		tt, _ := startStopped(t, h, 1)
		bump := testenv.NMSymbol(t, threadsBin, "bump")
		tt.setBreak(0, bump)
		tt.cont(0)
		n := tt.signalNotify()
		if n.Reason != cdti.SignalBreakpoint || n.InstAddress != bump {
			t.Fatalf("run %d: first notify %+v, want the breakpoint", i, n)
		}
		tt.mustUpdate(0, &cdti.ResetBreakpoint{Addr: bump, Instruction: uint32(origByte(t, threadsBin, bump))})
		tt.cont(0)
		m := tt.notify()
		if m.Kind != cdti.NotifyTypeTermination {
			t.Fatalf("run %d: after the breakpoint was removed: %+v", i, m.Signal)
		}
		if !m.Exit.Exited() || m.Exit.ExitCode() != 0 {
			t.Errorf("run %d: exit %v", i, m.Exit)
		}
		out.waitFor(t, "total 30") // 3 calls by each of threads 1..4
	}
}

// allRan reports whether process pid has n threads and each has run (used processor time or
// sleeps).
func allRan(pid, n int) bool {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil || len(ents) != n {
		return false
	}
	for _, e := range ents {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, e.Name()))
		if err != nil {
			return false
		}
		// state is field 3, utime and stime fields 14 and 15, counted after the command name.
		// A thread that sleeps has run; one that is runnable may not have run yet.
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		if len(f) < 13 || f[0] != "S" && f[11] == "0" && f[12] == "0" {
			return false
		}
	}
	return true
}

// A stop that cuts short the step over a breakpoint (the thread interrupted before the
// original instruction ran) leaves the thread on the breakpoint, to step over it when it runs
// again: every hit is reported exactly once. Stops are sent right after each continue, where
// the step over happens.
func TestStopDuringStepOver(t *testing.T) {
	h := newHarness(t, "")
	out := h.spawn(1, progBin, "loop", "300")
	tt, _ := startStopped(t, h, 1)
	hit := objdumpStore(t, progBin, "hit", "counter") // an instruction stepped over for real
	tt.setBreak(0, hit)
	tt.cont(0)
	hits, interrupts := 0, 0
	for {
		n := tt.notify()
		if n.Kind == cdti.NotifyTypeTermination {
			if !n.Exit.Exited() || n.Exit.ExitCode() != 0 {
				t.Errorf("exit %v", n.Exit)
			}
			break
		}
		switch {
		case n.Signal.Reason == cdti.SignalBreakpoint && n.Signal.InstAddress == hit:
			hits++
		case n.Signal.Reason == cdti.SignalInterrupt:
			interrupts++
		default:
			t.Fatalf("notify %+v", n.Signal)
		}
		tt.cont(0)
		if n.Signal.Reason == cdti.SignalBreakpoint {
			// The stop may meet the step over, the run, or the next hit; after the last hit
			// the process may already be exiting, which the agent answers as such.
			_, err := tt.c.Update(ctx(), 0, &cdti.StopProcess{})
			if err != nil && !(hits == 300 && errors.Is(err, cdti.ToolProcessExiting)) {
				t.Fatalf("stop after hit %d: %v", hits, err)
			}
		}
	}
	if hits != 300 {
		t.Errorf("%d breakpoint hits reported for 300 calls (%d stops)", hits, interrupts)
	}
	out.waitFor(t, "iterations 300 counter 44850")
}
