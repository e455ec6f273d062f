//go:build linux && amd64

package ptrace

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/hpcdap/hpcdap/internal/testenv"
	"github.com/hpcdap/hpcdap/target"
)

func TestReadMemoryMatchesELF(t *testing.T) {
	tr := newTracer(t)
	p := spawn(t, tr, "count", "1")
	pid := p.Info().Pid
	for _, name := range []string{"target_fn", "store_watched", "main"} {
		addr := symAddr(t, pid, progPath, name)
		got := make([]byte, 48)
		n, err := p.ReadMemory(addr, got)
		if err != nil || n != len(got) {
			t.Fatalf("read %s: %d, %v", name, n, err)
		}
		want := testenv.ELFBytes(t, progPath, testenv.NMSymbol(t, progPath, name), len(got))
		if string(got) != string(want) {
			t.Fatalf("%s in memory % x\nin file % x", name, got, want)
		}
	}
}

func TestReadMemoryErrors(t *testing.T) {
	tr := newTracer(t)
	p := spawn(t, tr, "count", "1")
	pid := p.Info().Pid
	b := make([]byte, 8)
	n, err := p.ReadMemory(0, b)
	if n != 0 || !errors.Is(err, target.ErrAddress) {
		t.Fatalf("read at 0: %d, %v; want ErrAddress", n, err)
	}
	if want := fmt.Sprintf("ptrace: read memory pid %d at 0x0: ", pid); !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("error %q does not start with %q", err, want)
	}
	if _, err := p.WriteMemory(0, b); !errors.Is(err, target.ErrAddress) {
		t.Fatalf("write at 0: %v; want ErrAddress", err)
	}
	// A read running off the end of a mapping returns what was readable.
	var end uint64
	maps := readMaps(t, pid)
	for i, m := range maps {
		if i+1 < len(maps) && maps[i+1].start > m.end && strings.HasPrefix(m.perm, "r") {
			end = m.end
			break
		}
	}
	if end == 0 {
		t.Fatal("no readable mapping followed by a hole")
	}
	b = make([]byte, 64)
	n, err = p.ReadMemory(end-24, b)
	if n != 24 || !errors.Is(err, target.ErrAddress) {
		t.Fatalf("read across %#x: %d, %v; want 24 bytes and ErrAddress", end, n, err)
	}
	if _, err := p.ReadMemory(1<<63, b); !errors.Is(err, target.ErrAddress) {
		t.Fatalf("read at 1<<63: %v", err)
	}
}

// TestBreakpointStepCycle plants an int3 the way the agent will, hits it, steps over the
// restored instruction and re-inserts it, for every call of target_fn.
func TestBreakpointStepCycle(t *testing.T) {
	const calls = 4
	tr := newTracer(t)
	p := spawn(t, tr, "count", fmt.Sprint(calls))
	pid := p.Info().Pid
	addr := symAddr(t, pid, progPath, "target_fn")
	next, _ := objdumpInsns(t, progPath)
	base := addr - testenv.NMSymbol(t, progPath, "target_fn")
	want := next[addr-base] + base // oracle: objdump's next instruction
	orig := make([]byte, 1)
	if _, err := p.ReadMemory(addr, orig); err != nil {
		t.Fatal(err)
	}
	// Program text is read-only: WriteMemory must still plant the trap.
	if _, err := p.WriteMemory(addr, []byte{0xcc}); err != nil {
		t.Fatal(err)
	}
	check := make([]byte, 1)
	p.ReadMemory(addr, check)
	if check[0] != 0xcc {
		t.Fatalf("after write: %#x", check[0])
	}
	p.Resume(pid, 0)
	for i := 0; i < calls; i++ {
		ev := expect(t, p, target.EventSignal)
		if ev.Signal != 5 || ev.Trap != target.TrapBreakpoint || ev.PC != addr+1 || ev.Tid != pid || ev.Code != 0x80 {
			t.Fatalf("hit %d: %+v, want SIGTRAP breakpoint at pc %#x", i, ev, addr+1)
		}
		if pc, _ := p.PC(pid); pc != addr+1 {
			t.Fatalf("PC %#x", pc)
		}
		p.WriteMemory(addr, orig)
		if err := p.SetPC(pid, addr); err != nil {
			t.Fatal(err)
		}
		if err := p.Step(pid, 0); err != nil {
			t.Fatal(err)
		}
		ev = expect(t, p, target.EventSignal)
		if ev.Signal != 5 || ev.Trap != target.TrapStep || ev.PC != want {
			t.Fatalf("step %d: %+v, want step to %#x", i, ev, want)
		}
		p.WriteMemory(addr, []byte{0xcc})
		p.Resume(pid, 0)
	}
	expectExit(t, p, 0)
}

func TestThreadErrors(t *testing.T) {
	tr := newTracer(t)
	p := spawn(t, tr, "count", "-1")
	pid := p.Info().Pid
	if _, err := p.Registers(pid+100000, target.RegsGeneral); !errors.Is(err, target.ErrNoThread) {
		t.Fatalf("unknown tid: %v", err)
	}
	if err := p.SetRegisters(pid, target.RegsGeneral, make([]byte, 10)); err == nil {
		t.Fatal("short register set accepted")
	}
	if err := p.Resume(pid, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Registers(pid, target.RegsGeneral); !errors.Is(err, target.ErrRunning) {
		t.Fatalf("running thread: %v", err)
	}
	if err := p.Resume(pid, 0); !errors.Is(err, target.ErrRunning) {
		t.Fatalf("resume running thread: %v", err)
	}
	if err := p.Interrupt(pid); err != nil {
		t.Fatal(err)
	}
	ev := expect(t, p, target.EventStopped)
	if ev.Tid != pid || ev.PC == 0 {
		t.Fatalf("stopped event %+v", ev)
	}
	if err := p.Interrupt(pid); err != nil {
		t.Fatalf("interrupting a stopped thread: %v", err)
	}
	if err := p.Kill(0, 9); err != nil {
		t.Fatal(err)
	}
	expectExit(t, p, 9)
	if _, err := p.Registers(pid, target.RegsGeneral); !errors.Is(err, target.ErrExited) {
		t.Fatalf("after exit: %v", err)
	}
	if _, err := p.ReadMemory(0x1000, make([]byte, 4)); !errors.Is(err, target.ErrExited) {
		t.Fatalf("read after exit: %v", err)
	}
	if err := p.Resume(pid, 0); !errors.Is(err, target.ErrExited) {
		t.Fatalf("resume after exit: %v", err)
	}
	if err := p.Kill(0, 10); !errors.Is(err, target.ErrExited) {
		t.Fatalf("kill after exit: %v", err)
	}
}
