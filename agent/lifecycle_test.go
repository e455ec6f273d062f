package agent

import (
	"bytes"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hpcdap/hpcdap/cdti"
	"github.com/hpcdap/hpcdap/internal/testenv"
	"github.com/hpcdap/hpcdap/target/ptrace"
)

// startRunning starts `prog run` outside the agent (as a launcher would) and registers it as
// rank 0 in attach mode.
func startRunning(t *testing.T, h *harness) (*exec.Cmd, *outFile) {
	t.Helper()
	out := newOutFile(t)
	cmd := exec.Command(progBin, "run")
	cmd.Stdout, cmd.Stderr = out.f, out.f
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	out.waitFor(t, "pid ")
	if err := h.a.AttachRanks(map[uint32]int{0: cmd.Process.Pid}); err != nil {
		t.Fatal(err)
	}
	return cmd, out
}

// checkUntouched verifies that a process runs on, untraced, with its text byte-identical to
// the executable file.
func checkUntouched(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for procStatus(t, pid, "TracerPid") != "0" {
		if time.Now().After(deadline) {
			t.Fatalf("pid %d still traced by %s", pid, procStatus(t, pid, "TracerPid"))
		}
		time.Sleep(10 * time.Millisecond)
	}
	addr, want := textBytes(t, progBin)
	if got := procMem(t, pid, addr, len(want)); !bytes.Equal(got, want) {
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("text differs from the executable at %#x: %#x, file %#x", addr+uint64(i), got[i], want[i])
			}
		}
	}
	counter := testenv.NMSymbol(t, progBin, "counter")
	c1 := le.Uint64(procMem(t, pid, counter, 8))
	deadline = time.Now().Add(10 * time.Second)
	for le.Uint64(procMem(t, pid, counter, 8)) == c1 {
		if time.Now().After(deadline) {
			t.Fatalf("pid %d does not run: counter stays %d (states %v)", pid, c1, taskStates(t, pid))
		}
		time.Sleep(5 * time.Millisecond)
	}
	for tid, st := range taskStates(t, pid) {
		if st == 't' || st == 'T' {
			t.Errorf("thread %d stopped (%c) after the tool left", tid, st)
		}
	}
}

// A tool that detaches (after releasing control) leaves the process running as if never
// touched: no trap in its text, no tracer.
func TestDetachLeavesProcessUntouched(t *testing.T) {
	h := newHarness(t, "")
	cmd, _ := startRunning(t, h)
	pid := cmd.Process.Pid
	tt := h.dial(1)
	tt.attach(0, 99, "dbg")
	if got := procStatus(t, pid, "TracerPid"); got == "0" {
		t.Fatalf("not traced after Attach")
	}
	tt.control(0, int(syscall.SIGSTOP), cdti.DynamicNotifyDLoader)
	if n := tt.signalNotify(); n.Signal != uint32(syscall.SIGSTOP) {
		t.Fatalf("%+v", n)
	}
	hit := testenv.NMSymbol(t, progBin, "hit")
	tt.setBreak(0, hit)
	tt.cont(0)
	if n := tt.signalNotify(); n.InstAddress != hit {
		t.Fatalf("%+v", n)
	}
	// Detach while holding control is refused.
	if _, err := tt.c.Detach(ctx(), 0, cdti.RankInHeader); !isCode(err, cdti.ToolControlReleaseRequired) {
		t.Fatalf("Detach while in control: %v, want ToolControlReleaseRequired", err)
	}
	tt.mustUpdate(0, &cdti.ReleaseControl{})
	ack, err := tt.c.Detach(ctx(), 0, cdti.RankInHeader)
	if err != nil || len(ack.Ranks) != 1 || ack.Ranks[0] != 0 {
		t.Fatalf("Detach: %+v %v", ack, err)
	}
	time.Sleep(50 * time.Millisecond)
	if st, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat"); strings.Contains(string(st), ") Z") {
		err := cmd.Wait()
		t.Fatalf("process died: %v", err)
	}
	checkUntouched(t, pid)
}

// A tool whose connection drops while it holds control, with the process stopped at its
// breakpoint and a thread held, is treated as detached: the process runs on, untouched.
func TestDroppedConnection(t *testing.T) {
	h := newHarness(t, "")
	cmd, _ := startRunning(t, h)
	pid := cmd.Process.Pid
	tt := h.dial(1)
	tt.attach(0, 99, "dbg")
	tt.control(0, int(syscall.SIGSTOP), cdti.DynamicNotifyDLoader)
	tt.signalNotify()
	hit := testenv.NMSymbol(t, progBin, "hit")
	tt.setBreak(0, hit)
	tt.mustUpdate(0, &cdti.SetWatchpoint{Addr: testenv.NMSymbol(t, progBin, "counter"), Length: 8, Type: cdti.WatchWrite})
	tt.cont(0)
	n := tt.signalNotify()
	if n.InstAddress != hit {
		t.Fatalf("%+v", n)
	}
	tt.mustUpdate(0, &cdti.HoldThread{})
	for _, st := range taskStates(t, pid) {
		if st != 't' {
			t.Fatalf("process not stopped at the breakpoint: %v", taskStates(t, pid))
		}
	}
	tt.c.Close()
	checkUntouched(t, pid)
}

// If the agent itself goes away (its tracer thread ends), the process is not left stopped.
func TestAgentShutdownLetsGo(t *testing.T) {
	h := newHarness(t, "")
	cmd, _ := startRunning(t, h)
	tt := h.dial(1)
	tt.attach(0, 99, "dbg")
	tt.control(0, int(syscall.SIGSTOP), cdti.DynamicNotifyDLoader)
	tt.signalNotify()
	tt.setBreak(0, testenv.NMSymbol(t, progBin, "hit"))
	tt.cont(0)
	tt.signalNotify()
	h.a.Shutdown(false)
	checkUntouched(t, cmd.Process.Pid)
}

func isCode(err error, rc cdti.ReturnCode) bool {
	return err != nil && strings.Contains(err.Error(), rc.Error())
}

// The Redbook's example: a debugger (priority 99) holds control; a snapshot tool (priority 50)
// attaches and asks for control: Conflict, and the debugger hears of it. The debugger releases
// (asking to hear of the next release): the snapshot tool gets Available, asks again, gets
// control, walks the stacks and releases; the debugger regains control the same way.
func TestRedbookTwoTools(t *testing.T) {
	h := newHarness(t, "")
	h.spawn(1, progBin, "run")
	dbg, _ := startStopped(t, h, 1)
	hit := testenv.NMSymbol(t, progBin, "hit")
	dbg.setBreak(0, hit)
	dbg.cont(0)
	if n := dbg.signalNotify(); n.InstAddress != hit {
		t.Fatalf("%+v", n)
	}

	snap := h.dial(2)
	snap.attach(0, 50, "snapshot")
	// The CNK's attach checks.
	if _, err := h.dial(3).c.Attach(ctx(), 0, cdti.RankInHeader, cdti.NewTag("x"), 99); !isCode(err, cdti.ToolPriorityConflict) {
		t.Errorf("attach at the debugger's priority: %v, want ToolPriorityConflict", err)
	}
	if _, err := h.dial(0).c.Attach(ctx(), 0, cdti.RankInHeader, cdti.NewTag("x"), 10); !isCode(err, cdti.ToolIdError) {
		t.Errorf("attach with tool id 0: %v, want ToolIdError", err)
	}
	if rs, err := snap.c.Update(ctx(), 0, &cdti.ContinueProcess{}); !isCode(err, cdti.ToolControlRequired) {
		t.Errorf("Update without control: %v %v, want ToolControlRequired", rs, err)
	}

	ack, err := snap.c.Control(ctx(), 0, cdti.Control{NotifySet: cdti.Signals(int(syscall.SIGSTOP)), SendSignal: uint32(syscall.SIGSTOP)})
	if !isCode(err, cdti.ToolControlConflict) || ack == nil || ack.ControllingToolID != 1 || ack.Priority != 99 || ack.Tag.String() != "test" {
		t.Fatalf("snapshot Control: %+v %v, want ToolControlConflict naming the debugger", ack, err)
	}
	n := dbg.notify()
	if n.Kind != cdti.NotifyTypeControl || n.Control.Reason != cdti.ControlConflict || n.Control.ToolID != 2 ||
		n.Control.Priority != 50 || n.Control.Tag.String() != "snapshot" {
		t.Fatalf("debugger got %+v, want Notify(Control, Conflict) from the snapshot tool", n)
	}

	dbg.mustUpdate(0, &cdti.ReleaseControl{Notify: cdti.ReleaseActive})
	n = snap.notify()
	if n.Kind != cdti.NotifyTypeControl || n.Control.Reason != cdti.ControlAvailable || n.Control.ToolID != 1 {
		t.Fatalf("snapshot got %+v, want Notify(Control, Available) from the debugger", n)
	}
	// Control is never granted by itself: the snapshot tool asks again.
	ack, err = snap.c.Control(ctx(), 0, cdti.Control{NotifySet: cdti.Signals(int(syscall.SIGSTOP)), SendSignal: uint32(syscall.SIGSTOP)})
	if err != nil || ack.ControllingToolID != 2 {
		t.Fatalf("snapshot Control again: %+v %v", ack, err)
	}
	if n := snap.signalNotify(); n.Signal != uint32(syscall.SIGSTOP) {
		t.Fatalf("snapshot: %+v, want SIGSTOP", n)
	}
	// The snapshot: every thread's stack.
	for _, tid := range threadList(t, snap, 0) {
		r := snap.query(0, &cdti.GetThreadData{ThreadID: tid})
		if r.Code != cdti.CmdSuccess {
			t.Fatalf("GetThreadData %d: %v", tid, r.Code)
		}
		td := r.Ack.(*cdti.GetThreadDataAck)
		if td.ToolState != cdti.ToolSuspend {
			t.Errorf("thread %d: tool state %v", tid, td.ToolState)
		}
		frames, err := snap.c.Traceback(ctx(), 0, tid, 0)
		if err != nil || len(frames) == 0 || frames[0].PC != snap.pc(0, tid) {
			t.Fatalf("traceback of %d: %+v %v", tid, frames, err)
		}
		// GetThreadData's frames are the frame-pointer chain: stopped in the program's own
		// code (built with frame pointers) it has its callers; stopped at some points of libc
		// (usleep), whose code uses rbp as a register of its own, the chain ends at frame 0
		// and the list is empty.
		if inProgramText(t, frames[0].PC) && len(td.Frames) == 0 {
			t.Errorf("thread %d stopped in the program at %#x: no frames in GetThreadData", tid, frames[0].PC)
		}
		// A frame-pointer walk sees main when the thread stopped in the program's own code
		// (built with frame pointers); stopped inside libc (usleep), libc's frame hides it.
		if inProgramText(t, frames[0].PC) && !hasFrameIn(t, frames, "main") {
			t.Errorf("traceback of %d: %+v: no frame in main", tid, frames)
		}
	}
	snap.mustUpdate(0, &cdti.ReleaseControl{})
	n = dbg.notify()
	if n.Kind != cdti.NotifyTypeControl || n.Control.Reason != cdti.ControlAvailable || n.Control.ToolID != 2 {
		t.Fatalf("debugger got %+v, want Notify(Control, Available) from the snapshot tool", n)
	}
	dbg.control(0, int(syscall.SIGSTOP), cdti.DynamicNotifyDLoader)
	// The program calls hit() every millisecond: a breakpoint hit may be reported before the
	// SIGSTOP, which proves the debugger's breakpoint survived the snapshot tool's turn.
	hits := 0
	for {
		n := dbg.signalNotify()
		if n.Signal == uint32(syscall.SIGSTOP) {
			break
		}
		if n.Reason != cdti.SignalBreakpoint || n.InstAddress != hit {
			t.Fatalf("debugger after regaining control: %+v", n)
		}
		hits++
		dbg.cont(0)
	}
	if hits == 0 {
		dbg.cont(0)
		if n := dbg.signalNotify(); n.Reason != cdti.SignalBreakpoint || n.InstAddress != hit {
			t.Fatalf("debugger after regaining control: %+v", n)
		}
	}
	// Up to four tools per process.
	h.dial(3).attach(0, 30, "third")
	h.dial(4).attach(0, 40, "fourth")
	if _, err := h.dial(6).c.Attach(ctx(), 0, cdti.RankInHeader, cdti.NewTag("fifth"), 60); !isCode(err, cdti.ToolMaxAttachedExceeded) {
		t.Errorf("fifth tool: %v, want ToolMaxAttachedExceeded", err)
	}
	// The process ends (killed): every attached tool hears of it, with the wait status.
	dbg.mustUpdate(0, &cdti.SendSignalToProcess{Signal: uint32(syscall.SIGKILL)})
	for _, tt := range []*testTool{dbg, snap} {
		for {
			n := tt.notify()
			if n.Kind != cdti.NotifyTypeTermination {
				continue
			}
			if !n.Exit.Signaled() || n.Exit.Signal() != int(syscall.SIGKILL) {
				t.Errorf("tool %d: termination %v, want killed by SIGKILL", tt.id, n.Exit)
			}
			break
		}
	}
	// Detach after the end needs no ReleaseControl.
	if _, err := dbg.c.Detach(ctx(), 0, cdti.RankInHeader); err != nil {
		t.Errorf("detach after exit: %v", err)
	}
}

func inProgramText(t testing.TB, pc uint64) bool {
	base, text := textBytes(t, progBin)
	return pc >= base && pc < base+uint64(len(text))
}

func hasFrameIn(t testing.TB, frames []cdti.TraceFrame, fn string) bool {
	for _, f := range frames {
		if inFunc(t, progBin, fn, f.PC) {
			return true
		}
	}
	return false
}

// Spawn mode with 16 ranks: each gets HPCDAP_RANK and HPCDAP_NP, one Attach (RanksInNode)
// covers them, each starts when its tool takes control, and each exit status comes back.
func TestSpawn16Ranks(t *testing.T) {
	h := newHarness(t, "")
	h.spawn(16, progBin, "rank")
	tt := h.dial(1)
	ack, err := tt.c.Attach(ctx(), 0, cdti.RanksInNode, cdti.NewTag("all"), 10)
	if err != nil || len(ack.Ranks) != 16 {
		t.Fatalf("attach: %+v %v", ack, err)
	}
	for r := uint32(0); r < 16; r++ {
		pid := h.rankPid(int(r))
		env, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
		if err != nil {
			t.Fatal(err)
		}
		vars := strings.Split(string(env), "\x00")
		if !contains(vars, "HPCDAP_RANK="+strconv.Itoa(int(r))) || !contains(vars, "HPCDAP_NP=16") || hasPrefix(vars, "HPCDAP_TOKEN=") {
			t.Errorf("rank %d environment: %q", r, vars)
		}
		pd := tt.query(r, &cdti.GetProcessData{}).Ack.(*cdti.GetProcessDataAck)
		if pd.Rank != r || pd.TGID != uint32(pid) {
			t.Errorf("rank %d: process data rank %d tgid %d, want pid %d", r, pd.Rank, pd.TGID, pid)
		}
		td := tt.query(r, &cdti.GetThreadData{}).Ack.(*cdti.GetThreadDataAck)
		if td.ToolState != cdti.ToolSuspend {
			t.Errorf("rank %d not started yet: tool state %v, want Suspend", r, td.ToolState)
		}
	}
	for r := uint32(0); r < 16; r++ {
		if _, err := tt.c.Control(ctx(), r, cdti.Control{NotifySet: cdti.Signals(int(syscall.SIGSTOP))}); err != nil {
			t.Fatal(err)
		}
	}
	got := map[uint32]cdti.ExitStatus{}
	for len(got) < 16 {
		n := tt.notify()
		if n.Kind != cdti.NotifyTypeTermination {
			t.Fatalf("%+v", n)
		}
		got[n.Rank] = n.Exit
	}
	for r := uint32(0); r < 16; r++ {
		if st := got[r]; !st.Exited() || st.ExitCode() != int(r) {
			t.Errorf("rank %d: %v, want exit status %d", r, st, r)
		}
	}
	for _, ri := range h.a.RankInfos() {
		if ri.State != "exited" || ri.ExitStatus == nil || *ri.ExitStatus>>8 != ri.Rank {
			t.Errorf("rank info %+v", ri)
		}
	}
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

func hasPrefix(ss []string, p string) bool {
	for _, x := range ss {
		if strings.HasPrefix(x, p) {
			return true
		}
	}
	return false
}

// A tool attaching to a registered process that has meanwhile ended gets ToolRankNotFound.
func TestAttachToEndedProcess(t *testing.T) {
	h := newHarness(t, "")
	cmd, _ := startRunning(t, h)
	cmd.Process.Kill()
	cmd.Wait()
	tt := h.dial(1)
	if _, err := tt.c.Attach(ctx(), 0, cdti.RankInHeader, cdti.NewTag("late"), 5); !isCode(err, cdti.ToolRankNotFound) {
		t.Errorf("attach to an ended process: %v, want ToolRankNotFound", err)
	}
}

// A SIGSTOP a tool sent while the process was stopped at a breakpoint (an all-stop reaching a
// rank that had already stopped) is still pending when the tool's connection drops: the
// agent cancels it, or the untraced process would stop for good with nobody to continue it.
func TestDroppedConnectionCancelsPendingStop(t *testing.T) {
	h := newHarness(t, "")
	cmd, _ := startRunning(t, h)
	pid := cmd.Process.Pid
	tt := h.dial(1)
	tt.attach(0, 99, "dbg")
	tt.control(0, int(syscall.SIGSTOP), cdti.DynamicNotifyDLoader)
	tt.signalNotify()
	hit := testenv.NMSymbol(t, progBin, "hit")
	tt.setBreak(0, hit)
	tt.cont(0)
	if n := tt.signalNotify(); n.InstAddress != hit {
		t.Fatalf("%+v", n)
	}
	tt.mustUpdate(0, &cdti.SendSignalToProcess{Signal: uint32(syscall.SIGSTOP)})
	if !ptrace.SignalPending(pid, syscall.SIGSTOP) {
		t.Fatalf("SIGSTOP is not pending after SendSignalToProcess (status ShdPnd %s)", procStatus(t, pid, "ShdPnd"))
	}
	tt.c.Close()
	checkUntouched(t, pid)
}
