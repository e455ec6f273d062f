//go:build linux && amd64

package ptrace

import (
	"sort"
	"strconv"
	"testing"

	"github.com/hpcdap/hpcdap/target"
)

// TestThreads: new threads are reported stopped, the thread list equals /proc/PID/task while
// everything is stopped, and thread exits are reported before the process exit.
func TestThreads(t *testing.T) {
	const workers = 3
	tr := newTracer(t)
	p := spawn(t, tr, "threads", "3")
	pid := p.Info().Pid
	addr := symAddr(t, pid, progPath, "all_started")
	orig := make([]byte, 1)
	p.ReadMemory(addr, orig)
	p.WriteMemory(addr, []byte{0xcc})
	p.Resume(pid, 0)
	news := map[int]bool{}
	for len(news) < workers {
		ev := expect(t, p, target.EventNewThread)
		if ev.Parent != pid || ev.Tid == pid || news[ev.Tid] {
			t.Fatalf("new thread event %+v", ev)
		}
		if s := threadState(t, ev.Tid); s != 't' {
			t.Fatalf("new thread %d in state %q, want t", ev.Tid, s)
		}
		if pc, err := p.PC(ev.Tid); err != nil || pc != ev.PC || pc == 0 {
			t.Fatalf("new thread PC %#x %v, event %#x", pc, err, ev.PC)
		}
		news[ev.Tid] = true
		if err := p.Resume(ev.Tid, 0); err != nil {
			t.Fatal(err)
		}
	}
	ev := expect(t, p, target.EventSignal)
	if ev.Tid != pid || ev.Trap != target.TrapBreakpoint || ev.PC != addr+1 {
		t.Fatalf("breakpoint event %+v", ev)
	}
	// Stop the workers, as the agent does for a Notify.
	for tid := range news {
		if err := p.Interrupt(tid); err != nil {
			t.Fatal(err)
		}
	}
	for range news {
		ev := expect(t, p, target.EventStopped)
		if !news[ev.Tid] {
			t.Fatalf("stop of %d", ev.Tid)
		}
	}
	tids, err := p.Threads()
	if err != nil {
		t.Fatal(err)
	}
	proc := procTasks(t, pid)
	if !equalInts(tids, proc) || len(tids) != workers+1 || tids[0] != pid {
		t.Fatalf("Threads %v, /proc/%d/task %v", tids, pid, proc)
	}
	for _, tid := range tids {
		if s := threadState(t, tid); s != 't' {
			t.Fatalf("thread %d state %q, want t", tid, s)
		}
	}
	p.WriteMemory(addr, orig)
	p.SetPC(pid, addr)
	for _, tid := range tids {
		if err := p.Resume(tid, 0); err != nil {
			t.Fatal(err)
		}
	}
	var gone []int
	for {
		ev := nextEvent(t, p)
		if ev.Kind == target.EventThreadExit {
			gone = append(gone, ev.Tid)
			continue
		}
		if ev.Kind != target.EventExit || ev.Status != 0 {
			t.Fatalf("got %+v, want exit 0", ev)
		}
		break
	}
	sort.Ints(gone)
	want := append([]int(nil), tids[1:]...)
	if !equalInts(gone, want) {
		t.Fatalf("thread exits %v, want %v", gone, want)
	}
}

// TestCloneProcessNotFollowed: clone without CLONE_THREAD and with an exit signal other than
// SIGCHLD is auto-attached by PTRACE_O_TRACECLONE; it is a new process, not a thread, so the
// tracer lets it go and reports nothing for it. The parent sees its exit status 9.
func TestCloneProcessNotFollowed(t *testing.T) {
	tr := newTracer(t)
	p := spawn(t, tr, "clonechild")
	pid := p.Info().Pid
	p.Resume(pid, 0)
	for {
		ev := nextEvent(t, p)
		switch ev.Kind {
		case target.EventSignal:
			if ev.Signal != 12 { // SIGUSR2, the child's exit signal
				t.Fatalf("event %+v", ev)
			}
			p.Resume(ev.Tid, ev.Signal)
			continue
		case target.EventExit:
			if ev.Status != 0 {
				t.Fatalf("exit status %#x: the cloned child did not run to its exit 9", ev.Status)
			}
		default:
			t.Fatalf("event %+v", ev)
		}
		break
	}
}

// TestLeaderExitsFirst: the leader calls pthread_exit; the process lives on in its other thread
// and its exit (status 5) is reported once that thread is gone.
func TestLeaderExitsFirst(t *testing.T) {
	tr := newTracer(t)
	p := spawn(t, tr, "leaderexit")
	pid := p.Info().Pid
	p.Resume(pid, 0)
	ev := expect(t, p, target.EventNewThread)
	worker := ev.Tid
	p.Resume(worker, 0)
	ev = expect(t, p, target.EventThreadExit)
	if ev.Tid != worker {
		t.Fatalf("event %+v, want exit of %d", ev, worker)
	}
	expectExit(t, p, 5<<8)
}

// TestStopWhileCreatingThreads: the leader creates 15 threads that block in pause() while it
// is interrupted again and again; each time its stop is reported, every thread it created so
// far has been announced (EventNewThread) and is in a traced stop: none is still on its way
// to its first stop, unknown to the tracer's consumer and running in the kernel.
func TestStopWhileCreatingThreads(t *testing.T) {
	const n = 16
	tr := newTracer(t)
	p := spawn(t, tr, "idle", strconv.Itoa(n))
	pid := p.Info().Pid
	known := map[int]bool{pid: true}
	for stops := 0; len(known) < n; stops++ {
		if stops > 10000 {
			t.Fatalf("%d threads known after %d stops, want %d", len(known), stops, n)
		}
		if err := p.Resume(pid, 0); err != nil {
			t.Fatal(err)
		}
		if err := p.Interrupt(pid); err != nil {
			t.Fatal(err)
		}
		for stopped := false; !stopped; {
			switch ev := nextEvent(t, p); ev.Kind {
			case target.EventNewThread:
				known[ev.Tid] = true // left stopped
			case target.EventStopped, target.EventSignal:
				stopped = ev.Tid == pid
				if !stopped {
					t.Fatalf("stop of %d, not the leader", ev.Tid)
				}
			default:
				t.Fatalf("event %+v", ev)
			}
		}
		for _, tid := range procTasks(t, pid) {
			if s := threadState(t, tid); !known[tid] || s != 't' {
				t.Fatalf("stop %d: thread %d in state %c, announced %v; want every thread announced and in state t",
					stops, tid, s, known[tid])
			}
		}
	}
}
