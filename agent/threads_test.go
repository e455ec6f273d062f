package agent

import (
	"os"
	"sort"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/hpcdap/hpcdap/cdti"
	"github.com/hpcdap/hpcdap/internal/testenv"
)

// procTasks lists /proc/PID/task, sorted.
func procTasks(t testing.TB, pid int) []uint32 {
	t.Helper()
	ents, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	if err != nil {
		t.Fatal(err)
	}
	var out []uint32
	for _, e := range ents {
		v, _ := strconv.Atoi(e.Name())
		out = append(out, uint32(v))
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

func threadList(t testing.TB, tt *testTool, rank uint32) []uint32 {
	t.Helper()
	r := tt.query(rank, &cdti.GetThreadList{})
	if r.Code != cdti.CmdSuccess {
		t.Fatalf("GetThreadList: %v", r.Code)
	}
	var out []uint32
	for _, e := range r.Ack.(*cdti.GetThreadListAck).Threads {
		out = append(out, e.TID)
	}
	return out
}

// Two threads hit breakpoints at once: one Notify at a time, every thread of the process
// stopped meanwhile (checked in /proc/PID/task/*/stat), the next Notify sent by
// ContinueProcess without anything resuming (the workers' total, which bump() changes right
// after the breakpoint, stays the same); the thread list equals /proc/PID/task. Four workers
// leave a barrier together to call bump(); the run is repeated until a hit was queued behind
// the first Notify (the agent's own queue, looked at from inside).
func TestSimultaneousHits(t *testing.T) {
	for try := 1; ; try++ {
		if simultaneousHits(t) {
			return
		}
		if try == 5 {
			t.Fatal("in 5 runs no two threads hit the breakpoint at once")
		}
	}
}

func simultaneousHits(t *testing.T) (queued bool) {
	h := newHarness(t, "")
	out := h.spawn(1, threadsBin, "1")
	tt, _ := startStopped(t, h, 1)
	pid := h.rankPid(0)
	bump, total := testenv.NMSymbol(t, threadsBin, "bump"), testenv.NMSymbol(t, threadsBin, "total")
	tt.setBreak(0, bump)
	tt.cont(0)
	seen := map[uint32]bool{}
	for i := 0; i < 4; i++ {
		n := tt.signalNotify()
		if n.Reason != cdti.SignalBreakpoint || n.InstAddress != bump {
			t.Fatalf("notify %d: %+v, want a hit of bump %#x", i, n, bump)
		}
		if seen[n.ThreadID] {
			t.Fatalf("thread %d notified twice", n.ThreadID)
		}
		seen[n.ThreadID] = true
		if i == 0 {
			tids := threadList(t, tt, 0)
			sorted := append([]uint32(nil), tids...)
			sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
			if want := procTasks(t, pid); !equalU32(sorted, want) {
				t.Errorf("thread list %v, /proc/%d/task %v", tids, pid, want)
			}
			if tids[0] != uint32(pid) {
				t.Errorf("thread list %v does not start with the leader %d", tids, pid)
			}
		}
		for tid, st := range taskStates(t, pid) {
			if st != 't' {
				t.Errorf("after notify %d: thread %d is in state %c, want t (stopped)", i, tid, st)
			}
		}
		if pc := tt.pc(0, 0); pc != bump {
			t.Errorf("notified thread's pc %#x, want %#x", pc, bump)
		}
		var pending int
		h.a.proc(0).do(func() { pending = len(h.a.proc(0).pending) })
		before := le.Uint64(procMem(t, pid, total, 8))
		tt.cont(0)
		if pending > 0 {
			// The next Notify comes from the queue: nothing ran in between.
			queued = true
			time.Sleep(20 * time.Millisecond)
			if after := le.Uint64(procMem(t, pid, total, 8)); after != before {
				t.Errorf("total went from %d to %d while a queued notification was pending", before, after)
			}
			for tid, st := range taskStates(t, pid) {
				if st != 't' {
					t.Errorf("thread %d in state %c after ContinueProcess with a notification queued", tid, st)
				}
			}
		}
	}
	if st := tt.waitTermination(0); st.ExitCode() != 0 {
		t.Errorf("exit %v", st)
	}
	out.waitFor(t, "total 10")
	return queued
}

func equalU32(a, b []uint32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// HoldThread keeps a thread stopped while the others run; ReleaseThread lets it go.
func TestHoldRelease(t *testing.T) {
	h := newHarness(t, "")
	out := h.spawn(1, threadsBin, "1")
	tt, _ := startStopped(t, h, 1)
	bump := testenv.NMSymbol(t, threadsBin, "bump")
	tt.setBreak(0, bump)
	tt.cont(0)
	n := tt.signalNotify()
	held := n.ThreadID
	// Hold the thread that hit, clear the breakpoint, continue: the others finish their work
	// and wait in pthread_join/exit; the held thread stays on bump.
	tt.mustUpdate(0, &cdti.HoldThread{ThreadID: held}, &cdti.ResetBreakpoint{Addr: bump, Instruction: uint32(origByte(t, threadsBin, bump))})
	tt.cont(0)
	// Threads that hit bump together with the first are reported next: let them go too.
	for {
		select {
		case n := <-tt.c.Notifications():
			if n.Kind != cdti.NotifyTypeSignal || n.Signal.InstAddress != bump {
				t.Fatalf("unexpected %+v", n)
			}
			tt.cont(0)
			continue
		case <-time.After(300 * time.Millisecond):
		}
		break
	}
	pid := h.rankPid(0)
	if st := taskStates(t, pid)[int(held)]; st != 't' {
		t.Errorf("held thread %d in state %c, want t", held, st)
	}
	td := tt.query(0, &cdti.GetThreadData{ThreadID: held}).Ack.(*cdti.GetThreadDataAck)
	if td.ToolState != cdti.ToolHold {
		t.Errorf("held thread's tool state %v, want Hold", td.ToolState)
	}
	if pc := tt.pc(0, held); pc != bump {
		t.Errorf("held thread moved: pc %#x", pc)
	}
	if out.String() != "" {
		t.Errorf("the program finished with a thread held: %q", out.String())
	}
	tt.mustUpdate(0, &cdti.ReleaseThread{ThreadID: held})
	if st := tt.waitTermination(0); st.ExitCode() != 0 {
		t.Errorf("exit %v", st)
	}
	out.waitFor(t, "total 10")
}

// origByte is the byte of bin's text at addr, from the file.
func origByte(t testing.TB, bin string, addr uint64) byte {
	base, text := textBytes(t, bin)
	return text[addr-base]
}

// A watchpoint reports the writing instruction (objdump finds the store) and the data
// address (nm), with reason WatchpointWrite; reset, the second write goes unseen.
func TestWatchpoint(t *testing.T) {
	h := newHarness(t, "")
	out := h.spawn(1, progBin, "watch")
	tt, _ := startStopped(t, h, 1)
	watched := testenv.NMSymbol(t, progBin, "watched")
	store := objdumpStore(t, progBin, "poke", "watched")
	rs := tt.update(0, &cdti.SetWatchpoint{Addr: watched, Length: 4, Type: cdti.WatchWrite})
	if rs[0].Code != cdti.CmdSuccess {
		t.Fatalf("SetWatchpoint: %v", rs[0].Code)
	}
	ack := rs[0].Ack.(*cdti.SetWatchpointAck)
	if ack.Watch[0] != (cdti.WatchEntry{Addr: watched, Length: 4, Type: cdti.WatchWrite}) || ack.Watch[1].Type != cdti.WatchNone {
		t.Errorf("SetWatchpointAck %+v", ack.Watch)
	}
	// The CNK's checks: overlap, alignment, size, a third watch.
	for _, c := range []struct {
		w    cdti.SetWatchpoint
		want cdti.CmdReturnCode
	}{
		{cdti.SetWatchpoint{Addr: watched + 1, Length: 2, Type: cdti.WatchWrite}, cdti.CmdAddrErr},       // misaligned
		{cdti.SetWatchpoint{Addr: watched &^ 7, Length: 8, Type: cdti.WatchRead}, cdti.CmdWatchConflict}, // overlaps
		{cdti.SetWatchpoint{Addr: watched + 64, Length: 3, Type: cdti.WatchWrite}, cdti.CmdLngthErr},
		{cdti.SetWatchpoint{Addr: 0, Length: 4, Type: cdti.WatchWrite}, cdti.CmdAddrErr},
		{cdti.SetWatchpoint{Addr: (watched + 64) &^ 31, Length: 32, Type: cdti.WatchWrite}, cdti.CmdHwdUnavail},
	} {
		w := c.w
		if r := tt.update(0, &w)[0]; r.Code != c.want {
			t.Errorf("SetWatchpoint %#x/%d: %v, want %v", w.Addr, w.Length, r.Code, c.want)
		}
	}
	tt.cont(0)
	n := tt.signalNotify()
	if n.Reason != cdti.SignalWatchpointWrite || n.DataAddress != watched || n.InstAddress != store {
		t.Fatalf("watch notify %+v, want WatchpointWrite data %#x inst %#x (objdump)", n, watched, store)
	}
	if got := tt.memory(0, watched, 4); le.Uint32(got) != 1 {
		t.Errorf("watched = %d after the first write, want 1", le.Uint32(got))
	}
	rs = tt.update(0, &cdti.ResetWatchpoint{Addr: watched})
	if rs[0].Code != cdti.CmdSuccess || rs[0].Ack.(*cdti.ResetWatchpointAck).Watch[0].Type != cdti.WatchNone {
		t.Fatalf("ResetWatchpoint: %v %+v", rs[0].Code, rs[0].Ack)
	}
	if r := tt.update(0, &cdti.ResetWatchpoint{Addr: watched})[0]; r.Code != cdti.CmdAddrErr {
		t.Errorf("second ResetWatchpoint: %v, want CmdAddrErr", r.Code)
	}
	tt.cont(0)
	if st := tt.waitTermination(0); st.ExitCode() != 0 {
		t.Errorf("exit %v", st)
	}
	out.waitFor(t, "watched 2")
}

// A signal in the notify set stops the process; the continuation signal decides what the
// program receives: SIGUSR1 runs its handler, 0 suppresses it.
func TestContinuationSignal(t *testing.T) {
	for _, deliver := range []bool{true, false} {
		t.Run(map[bool]string{true: "deliver", false: "suppress"}[deliver], func(t *testing.T) {
			h := newHarness(t, "")
			out := h.spawn(1, progBin, "signal")
			tt, _ := startStopped(t, h, 1, int(syscall.SIGUSR1))
			hit := testenv.NMSymbol(t, progBin, "hit")
			tt.setBreak(0, hit)
			tt.cont(0)
			if n := tt.signalNotify(); n.InstAddress != hit {
				t.Fatalf("%+v", n)
			}
			out.waitFor(t, "ready")
			tt.mustUpdate(0, &cdti.SendSignal{Signal: uint32(syscall.SIGUSR1)})
			tt.cont(0) // the signal is delivered as the thread resumes: it stops at once
			n := tt.signalNotify()
			if n.Signal != uint32(syscall.SIGUSR1) || n.Reason != cdti.SignalGeneric {
				t.Fatalf("notify %+v, want SIGUSR1 Generic", n)
			}
			sig := uint32(0)
			if deliver {
				sig = uint32(syscall.SIGUSR1)
			}
			// SetContinuationSignal must name the notified thread.
			if r := tt.update(0, &cdti.SetContinuationSignal{ThreadID: n.ThreadID + 100000, Signal: sig})[0]; r.Code != cdti.CmdTIDinval {
				t.Errorf("SetContinuationSignal on a bad thread: %v", r.Code)
			}
			tt.mustUpdate(0, &cdti.SetContinuationSignal{ThreadID: n.ThreadID, Signal: sig}, &cdti.ContinueProcess{ThreadID: n.ThreadID})
			if st := tt.waitTermination(0); st.ExitCode() != 0 {
				t.Errorf("exit %v", st)
			}
			out.waitFor(t, "done")
			if got := containsLine(out.String(), "got SIGUSR1"); got != deliver {
				t.Errorf("handler ran: %v, want %v; output:\n%s", got, deliver, out.String())
			}
		})
	}
}

func containsLine(s, line string) bool {
	for _, l := range splitLines(s) {
		if l == line {
			return true
		}
	}
	return false
}

func splitLines(s string) []string {
	var out []string
	start := 0
	for i := 0; i < len(s); i++ {
		if s[i] == '\n' {
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	if start < len(s) {
		out = append(out, s[start:])
	}
	return out
}

// With WatchPropagate, a watchpoint set while the process has one thread applies to the
// threads it creates later: the first worker's write is reported from a worker thread.
func TestWatchPropagate(t *testing.T) {
	h := newHarness(t, "")
	h.spawn(1, threadsBin, "1")
	tt := h.dial(1)
	tt.attach(0, 99, "dbg")
	if _, err := tt.c.Control(ctx(), 0, cdti.Control{NotifySet: cdti.Signals(int(syscall.SIGTRAP), int(syscall.SIGSTOP)),
		SendSignal: uint32(syscall.SIGSTOP), WatchPolicy: cdti.WatchPropagate}); err != nil {
		t.Fatal(err)
	}
	first := tt.signalNotify()
	total := testenv.NMSymbol(t, threadsBin, "total")
	tt.mustUpdate(0, &cdti.SetWatchpoint{Addr: total, Length: 8, Type: cdti.WatchWrite})
	tt.cont(0)
	n := tt.signalNotify()
	if n.Reason != cdti.SignalWatchpointWrite || n.DataAddress != total || n.ThreadID == first.ThreadID {
		t.Fatalf("notify %+v, want a write of total %#x by a worker (not %d)", n, total, first.ThreadID)
	}
	if !inFunc(t, threadsBin, "bump", n.InstAddress) {
		t.Errorf("writing instruction %#x is not in bump", n.InstAddress)
	}
	r := tt.update(0, &cdti.ResetWatchpoint{Addr: total})[0]
	if r.Code != cdti.CmdSuccess {
		t.Fatalf("reset: %v", r.Code)
	}
	tt.cont(0)
	for {
		n := tt.notify()
		if n.Kind == cdti.NotifyTypeTermination {
			break
		}
		if n.Signal.Reason != cdti.SignalWatchpointWrite {
			t.Fatalf("%+v", n)
		}
		tt.cont(0) // writes that raced with the reset
	}
}

// Exec is followed: breakpoints go with the old image; the new image is reported with a
// SIGTRAP at its first instruction and can be debugged at once.
func TestExecFollowed(t *testing.T) {
	h := newHarness(t, "")
	out := h.spawn(1, progBin, "exec")
	tt, _ := startStopped(t, h, 1)
	hit := testenv.NMSymbol(t, progBin, "hit")
	tt.setBreak(0, hit) // in the old image: never hit
	tt.cont(0)
	n := tt.signalNotify()
	if n.Signal != uint32(syscall.SIGTRAP) || n.Reason != cdti.SignalGeneric {
		t.Fatalf("exec notify %+v, want SIGTRAP Generic", n)
	}
	if want := interpreterEntry(t, h.rankPid(0)); n.InstAddress != want {
		t.Errorf("exec stop at %#x, want the new ld.so entry %#x", n.InstAddress, want)
	}
	tt.setBreak(0, hit)
	hits := countHits(t, tt, hit)
	if hits != 2 {
		t.Errorf("%d hits after exec, want 2", hits)
	}
	out.waitFor(t, "iterations 2")
}

// A read watchpoint (which x86 can only watch together with writes) reports the read and not
// the write before it; a third watchpoint on a thread finds no free pair.
func TestReadWatchpoint(t *testing.T) {
	h := newHarness(t, "")
	out := h.spawn(1, progBin, "rwatch")
	tt, _ := startStopped(t, h, 1)
	watched := testenv.NMSymbol(t, progBin, "watched")
	tt.mustUpdate(0, &cdti.SetWatchpoint{Addr: watched, Length: 4, Type: cdti.WatchRead})
	tt.mustUpdate(0, &cdti.SetWatchpoint{Addr: testenv.NMSymbol(t, progBin, "counter"), Length: 8, Type: cdti.WatchWrite})
	if r := tt.update(0, &cdti.SetWatchpoint{Addr: testenv.NMSymbol(t, progBin, "spin"), Length: 4, Type: cdti.WatchWrite})[0]; r.Code != cdti.CmdHwdUnavail {
		t.Errorf("third watchpoint: %v, want CmdHwdUnavail", r.Code)
	}
	tt.cont(0)
	n := tt.signalNotify()
	if n.Reason != cdti.SignalWatchpointRead || n.DataAddress != watched || !inFunc(t, progBin, "peek", n.InstAddress) {
		t.Fatalf("notify %+v, want WatchpointRead of %#x from peek", n, watched)
	}
	if got := le.Uint32(tt.memory(0, watched, 4)); got != 5 {
		t.Errorf("watched = %d at the read, want 5 (the write happened first)", got)
	}
	tt.cont(0)
	if st := tt.waitTermination(0); st.ExitCode() != 0 {
		t.Errorf("exit %v", st)
	}
	out.waitFor(t, "peeked 5")
}
