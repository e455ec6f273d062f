//go:build linux && amd64

package ptrace

import (
	"errors"
	"strings"
	"testing"

	"github.com/hpcdap/hpcdap/internal/testenv"
	"github.com/hpcdap/hpcdap/target"
)

// TestWatchpoints: a write watchpoint stops after the store to the watched variable, with the
// data address; a read-write one after the load; objdump confirms that the instruction before
// the reported PC is the access.
func TestWatchpoints(t *testing.T) {
	tr := newTracer(t)
	p := spawn(t, tr, "watch")
	pid := p.Info().Pid
	watched := symAddr(t, pid, progPath, "watched")
	base := watched - testenv.NMSymbol(t, progPath, "watched")
	_, prev := objdumpInsns(t, progPath)

	if err := p.SetWatchpoint(pid, 0, watched, 4, target.WatchRead); !errors.Is(err, target.ErrUnsupported) {
		t.Fatalf("read-only watch: %v, want ErrUnsupported", err)
	}
	if err := p.SetWatchpoint(pid, 0, watched+1, 4, target.WatchWrite); !errors.Is(err, target.ErrAddress) {
		t.Fatalf("misaligned watch: %v, want ErrAddress", err)
	}
	if err := p.SetWatchpoint(pid, 0, watched, 3, target.WatchWrite); err == nil {
		t.Fatal("size 3 accepted")
	}
	if err := p.SetWatchpoint(pid, 4, watched, 4, target.WatchWrite); err == nil {
		t.Fatal("slot 4 accepted")
	}
	if err := p.SetWatchpoint(pid, 2, watched, 4, target.WatchWrite); err != nil {
		t.Fatal(err)
	}
	p.Resume(pid, 0)
	ev := expect(t, p, target.EventSignal)
	if ev.Signal != 5 || ev.Trap != target.TrapWatch || ev.Slot != 2 || ev.Addr != watched {
		t.Fatalf("write watch event %+v, want slot 2 at %#x", ev, watched)
	}
	insn := prev[ev.PC-base]
	if !strings.Contains(insn, "mov") || !strings.Contains(insn, "<watched>") || !strings.HasSuffix(strings.TrimSpace(strings.Split(insn, "#")[0]), "(%rip)") {
		t.Fatalf("instruction before pc %#x is %q, want a store to watched", ev.PC, insn)
	}
	got := make([]byte, 4)
	p.ReadMemory(watched, got)
	if got[0] != 7 {
		t.Fatalf("watched = %d after the store, want 7", got[0])
	}

	// Read-or-write: the next access is load_watched's read.
	if err := p.ClearWatchpoint(pid, 2); err != nil {
		t.Fatal(err)
	}
	if err := p.SetWatchpoint(pid, 0, watched, 4, target.WatchReadWrite); err != nil {
		t.Fatal(err)
	}
	p.Resume(pid, 0)
	ev = expect(t, p, target.EventSignal)
	if ev.Trap != target.TrapWatch || ev.Slot != 0 || ev.Addr != watched {
		t.Fatalf("read-write watch event %+v", ev)
	}
	insn = prev[ev.PC-base]
	if !strings.Contains(insn, "<watched>") || !strings.HasPrefix(strings.TrimSpace(strings.Split(insn, "#")[0]), "mov") ||
		!strings.Contains(insn, "(%rip),") {
		t.Fatalf("instruction before pc %#x is %q, want a load from watched", ev.PC, insn)
	}
	addr := symAddr(t, pid, progPath, "load_watched")
	if ev.PC < addr || ev.PC > addr+32 {
		t.Fatalf("read reported at %#x, load_watched is at %#x", ev.PC, addr)
	}
	// A single step that does not touch the variable is a step, not a watch.
	if err := p.Step(pid, 0); err != nil {
		t.Fatal(err)
	}
	if ev = expect(t, p, target.EventSignal); ev.Trap != target.TrapStep {
		t.Fatalf("step with a watchpoint armed: %+v", ev)
	}
	if err := p.ClearWatchpoint(pid, 0); err != nil {
		t.Fatal(err)
	}
	p.Resume(pid, 0)
	expectExit(t, p, 0)
}
