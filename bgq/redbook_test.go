package bgq

import (
	"context"
	"debug/elf"
	"encoding/binary"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/hpcdap/hpcdap/cdti"
	"github.com/hpcdap/hpcdap/ppc64"
)

// TestMultiToolControlAuthority is the Redbook's multi-tool example (§4.5.4; cdti-v6.md §9.2)
// through one compute node's toolctld: a tool at priority 10 holds control of a rank; a
// debugger at priority 90 asks for it and is refused with ToolControlConflict naming the
// holder, who hears Notify(Control, Conflict) naming the debugger; when the holder releases,
// the debugger hears Notify(Control, Available) naming it and must ask again, which succeeds;
// the debugger then stops the rank at a breakpoint, and both tools leave it running.
func TestMultiToolControlAuthority(t *testing.T) {
	// QEMU ≥ 9 ignores a debugger's interrupt: the CNK stops the rank with SIGUSR1, which it
	// handles (testdata/ranks.c).
	t.Setenv("HPCDAP_AGENT_INTERRUPT_SIGNAL", "SIGUSR1")
	j, out := testJob(t, 1, 1, 1, nil, "spin")
	_, exe := built(t)
	work := workEntry(t, exe)
	ctx := context.Background()
	monitor, _ := dialTool(t, nodePath(j, 0, 0), 1, j.ID())
	debugger, _ := dialTool(t, nodePath(j, 0, 0), 2, j.ID())
	for _, c := range []struct {
		cl   *cdti.Client
		tag  string
		prio uint8
	}{{monitor, "monitor", 10}, {debugger, "debugger", 90}} {
		if ack, err := c.cl.Attach(ctx, 0, cdti.RanksInNode, cdti.NewTag(c.tag), c.prio); err != nil || ack.ReturnCode != cdti.Success {
			t.Fatalf("%s: attach: %v %+v", c.tag, err, ack)
		}
	}
	if err := j.Start(); err != nil {
		t.Fatal(err)
	}
	notify := cdti.Control{NotifySet: cdti.Signals(int(syscall.SIGTRAP), int(syscall.SIGSTOP))}
	if ack, err := monitor.Control(ctx, 0, notify); err != nil || ack.ControllingToolID != 1 {
		t.Fatalf("monitor: control: %v %+v", err, ack)
	}
	// The debugger is refused, the ack describing the holder; the holder hears of the request.
	ack, err := debugger.Control(ctx, 0, notify)
	if ack == nil || ack.ReturnCode != cdti.ToolControlConflict || ack.ControllingToolID != 1 || ack.Priority != 10 ||
		ack.Tag.String() != "monitor" {
		t.Fatalf("debugger: control while the monitor holds it: %v %+v", err, ack)
	}
	if n := nextNotify(t, monitor); n.Kind != cdti.NotifyTypeControl || n.Control.Reason != cdti.ControlConflict ||
		n.Control.ToolID != 2 || n.Control.Priority != 90 {
		t.Fatalf("monitor: %+v, want Notify(Control, Conflict) naming the debugger", n)
	}
	// The holder releases: the refused debugger hears that control is available, naming the
	// monitor, and must ask again.
	update(t, monitor, 0, &cdti.ReleaseControl{Notify: cdti.ReleaseInactive})
	if n := nextNotify(t, debugger); n.Kind != cdti.NotifyTypeControl || n.Control.Reason != cdti.ControlAvailable ||
		n.Control.ToolID != 1 {
		t.Fatalf("debugger: %+v, want Notify(Control, Available) naming the monitor", n)
	}
	if ack, err := debugger.Control(ctx, 0, notify); err != nil || ack.ReturnCode != cdti.Success || ack.ControllingToolID != 2 {
		t.Fatalf("debugger: control once available: %v %+v", err, ack)
	}
	// The debugger now controls the rank: it stops it (once the rank handles the interrupt),
	// plants a breakpoint, and the rank stops there.
	waitFor(t, "the rank in its loop", func() bool {
		b, _ := os.ReadFile(out)
		return strings.Contains(string(b), "rank 0 tick 1\n")
	})
	stop(t, debugger)
	update(t, debugger, 0, &cdti.SetBreakpoint{Addr: work, Instruction: ppc64.TrapWordCNK})
	update(t, debugger, 0, &cdti.SetContinuationSignal{}, &cdti.ContinueProcess{})
	if n := nextNotify(t, debugger); n.Kind != cdti.NotifyTypeSignal || n.Signal.Reason != cdti.SignalBreakpoint ||
		n.Signal.InstAddress != work {
		t.Fatalf("debugger: %+v, want its breakpoint", n)
	}
	// It gives the rank back as a tool must (§9.5, §9.6), the monitor leaves too, and the rank
	// runs on: another tool can take control, stop it, and sees it running through work.
	update(t, debugger, 0, &cdti.ResetBreakpoint{Addr: work, Instruction: originalAt(t, exe, work)})
	update(t, debugger, 0, &cdti.ReleaseControl{Notify: cdti.ReleaseInactive})
	for _, c := range []*cdti.Client{debugger, monitor} {
		if ack, err := c.Detach(ctx, 0, cdti.RanksInNode); err != nil || ack.ReturnCode != cdti.Success {
			t.Fatalf("detach: %v %+v", err, ack)
		}
	}
	late, _ := dialTool(t, nodePath(j, 0, 0), 3, j.ID())
	if ack, err := late.Attach(ctx, 0, cdti.RanksInNode, cdti.NewTag("late"), 50); err != nil || ack.ReturnCode != cdti.Success {
		t.Fatalf("a later tool: attach: %v %+v", err, ack)
	}
	if ack, err := late.Control(ctx, 0, notify); err != nil || ack.ControllingToolID != 3 {
		t.Fatalf("a later tool: control: %v %+v", err, ack)
	}
	stop(t, late)
	update(t, late, 0, &cdti.SetBreakpoint{Addr: work, Instruction: ppc64.TrapWordCNK})
	update(t, late, 0, &cdti.SetContinuationSignal{}, &cdti.ContinueProcess{})
	if n := nextNotify(t, late); n.Kind != cdti.NotifyTypeSignal || n.Signal.InstAddress != work {
		t.Fatalf("a later tool: %+v, want the rank at its breakpoint (it ran on)", n)
	}
}

// originalAt is the program's instruction at addr, from its file: what ResetBreakpoint must
// put back (a CNK keeps no copy, §8.8).
func originalAt(t testing.TB, exe string, addr uint64) uint32 {
	t.Helper()
	f, err := elf.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, s := range f.Sections {
		if s.Type == elf.SHT_PROGBITS && addr >= s.Addr && addr+4 <= s.Addr+s.Size {
			var b [4]byte
			if _, err := s.ReadAt(b[:], int64(addr-s.Addr)); err != nil {
				t.Fatal(err)
			}
			return binary.BigEndian.Uint32(b[:])
		}
	}
	t.Fatalf("%#x is in no section of %s", addr, exe)
	return 0
}

// stop stops rank 0 with SIGSTOP, as a tool in control does, and waits for its notification.
func stop(t *testing.T, c *cdti.Client) {
	t.Helper()
	update(t, c, 0, &cdti.SendSignalToProcess{Signal: uint32(syscall.SIGSTOP)})
	if n := nextNotify(t, c); n.Kind != cdti.NotifyTypeSignal || n.Signal.Signal != uint32(syscall.SIGSTOP) {
		t.Fatalf("after SIGSTOP: kind %v signal %+v control %+v", n.Kind, n.Signal, n.Control)
	}
}
