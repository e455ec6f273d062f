package agent

import (
	"errors"
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
// flight, it answers that no other notification comes, and the repeat of that notification
// StopResendOnly makes the agent send is dropped by the Client that delivered it. Repeated,
// so that stops land everywhere in the program's run, its start of threads included.
func TestStopProcess(t *testing.T) {
	h := newHarness(t, "")
	h.spawn(1, threadsBin, "100000000")
	tt, _ := startStopped(t, h, 1)
	pid := h.rankPid(0)
	tt.cont(0) // the stops come while the program creates its threads, too
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
		tt.mustUpdate(0, &cdti.StopProcess{Flags: cdti.StopResendOnly})
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

// TestStopProcessRepeatsSentNotify: a tool that lost a breakpoint's notification (read here
// on a raw connection and dropped, as when a link of a tree of agents breaks while it is on
// its way) and asks to stop the process hears that the notification is the stop; asked with
// StopResendOnly, the agent sends it again with the same number (SequenceID), marked a repeat.
// StopResendOnly stops nothing: on a running process, what comes next is the next hit,
// numbered after the first.
func TestStopProcessRepeatsSentNotify(t *testing.T) {
	bin := buildOOL(t, false)
	h := newHarness(t, "")
	h.spawn(1, bin, "threads", "1", "1000000")
	a := testenv.NMSymbol(t, bin, "ool_bump")
	rc := h.rawDial(testToken)
	if m, err := rc.recv(); err != nil || m.Hdr().ReturnCode != cdti.Success {
		t.Fatalf("hello: %v %v", m, err)
	}
	hdr := cdti.Header{Service: cdti.ServiceToolctl, Version: cdti.ProtocolVersion, ToolID: 1}
	rc.send(&cdti.Attach{Header: hdr, Priority: 99})
	if m, err := rc.recv(); err != nil || m.Hdr().ReturnCode != cdti.Success {
		t.Fatalf("attach: %v %v", m, err)
	}
	rc.send(&cdti.Control{Header: hdr, NotifySet: cdti.Signals(int(syscall.SIGTRAP), int(syscall.SIGSTOP)),
		SendSignal: uint32(syscall.SIGSTOP), DynamicNotify: cdti.DynamicNotifyDLoader})
	if m, err := rc.recv(); err != nil || m.Hdr().ReturnCode != cdti.Success {
		t.Fatalf("control: %v %v", m, err)
	}
	next := func(what string) cdti.Message {
		t.Helper()
		rc.nc.SetReadDeadline(time.Now().Add(20 * time.Second))
		b, err := cdti.ReadFrame(rc.r)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		m, err := cdti.DecodeMessage(b)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return m
	}
	notify := func(what string) *cdti.Notify {
		t.Helper()
		m := next(what)
		n, ok := m.(*cdti.Notify)
		if !ok || n.Kind != cdti.NotifyTypeSignal {
			t.Fatalf("%s: %T %+v, want a signal notification", what, m, m)
		}
		return n
	}
	update := func(what string, cs ...cdti.Command) *cdti.UpdateAck {
		t.Helper()
		rc.send(&cdti.Update{Header: hdr, Commands: cs})
		m := next(what)
		ack, ok := m.(*cdti.UpdateAck)
		if !ok || ack.ReturnCode != cdti.Success {
			t.Fatalf("%s: %+v, want its ack", what, m)
		}
		for i, r := range ack.Results {
			if r.Code != cdti.CmdSuccess {
				t.Fatalf("%s: command %d: %v", what, i, r.Code)
			}
		}
		return ack
	}
	notify("the stop at the loader")
	update("set the breakpoint and continue", &cdti.SetBreakpoint{Addr: a, Instruction: 0xCC}, &cdti.ContinueProcess{})
	hit := notify("the breakpoint's hit")
	if hit.Signal.Reason != cdti.SignalBreakpoint || hit.Signal.InstAddress != a || hit.SequenceID == 0 {
		t.Fatalf("hit %+v, want a numbered breakpoint notification at %#x", hit, a)
	}
	// The hit is lost. A plain stop answers that the notification on its way is the stop, and
	// sends nothing; asked to send it again, the agent repeats it with its number.
	stop := func(what string, flags cdti.StopFlags) {
		t.Helper()
		rc.send(&cdti.Update{Header: hdr, Commands: []cdti.Command{&cdti.StopProcess{Flags: flags}}})
		m := next(what)
		ack, ok := m.(*cdti.UpdateAck)
		if !ok || len(ack.Results) != 1 || ack.Results[0].Code != cdti.CmdSuccess {
			t.Fatalf("%s: %+v", what, m)
		}
		if st := ack.Results[0].Ack.(*cdti.StopProcessAck); st.Stopping {
			t.Errorf("%s: answered that another notification comes", what)
		}
	}
	stop("StopProcess", 0)
	stop("StopProcess again", 0) // its answer comes next: nothing was sent in between
	// The repeat is written by the agent's notification writer, the answer by the request's
	// goroutine: either may come first.
	rc.send(&cdti.Update{Header: hdr, Commands: []cdti.Command{&cdti.StopProcess{Flags: cdti.StopResendOnly}}})
	var again *cdti.Notify
	for acked := false; !acked || again == nil; {
		switch m := next("StopResendOnly's answer and the repeat").(type) {
		case *cdti.UpdateAck:
			if acked || len(m.Results) != 1 || m.Results[0].Code != cdti.CmdSuccess || m.Results[0].Ack.(*cdti.StopProcessAck).Stopping {
				t.Fatalf("StopResendOnly: %+v", m)
			}
			acked = true
		case *cdti.Notify:
			if again != nil {
				t.Fatalf("a second repeat: %+v", m)
			}
			again = m
		default:
			t.Fatalf("StopResendOnly: %+v", m)
		}
	}
	if again.SequenceID != hit.SequenceID || again.Signal != hit.Signal || !again.Repeat || hit.Repeat {
		t.Errorf("sent again: %+v, want %+v marked as a repeat", again, hit)
	}
	// Running, the process is not stopped by StopResendOnly: what comes is the next hit (its
	// repeat too, should the hit come first), numbered after the first, never a stop.
	update("continue", &cdti.ContinueProcess{})
	rc.send(&cdti.Update{Header: hdr, Commands: []cdti.Command{&cdti.StopProcess{Flags: cdti.StopResendOnly}}})
	for acked, hits := false, 0; !acked || hits == 0; {
		switch m := next("StopResendOnly's answer and the next hit").(type) {
		case *cdti.UpdateAck:
			if len(m.Results) != 1 || m.Results[0].Code != cdti.CmdSuccess || m.Results[0].Ack.(*cdti.StopProcessAck).Stopping {
				t.Fatalf("StopResendOnly while running: %+v", m)
			}
			acked = true
		case *cdti.Notify:
			if m.Signal.Reason != cdti.SignalBreakpoint || m.SequenceID != hit.SequenceID+1 {
				t.Fatalf("while running: %+v, want the next hit, numbered %d", m, hit.SequenceID+1)
			}
			hits++
		default:
			t.Fatalf("while running: %+v", m)
		}
	}
}
