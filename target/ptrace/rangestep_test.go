//go:build linux && amd64

package ptrace

import (
	"testing"

	"github.com/hpcdap/hpcdap/target"
)

// TestStepRange: StepRange walks a thread through a range on the tracer's thread and reports
// one event: the step trap after Max steps (Steps says Max), the step trap at an address of
// Stops (once around a loop), the step trap before a trap planted during the walk, and, for an
// endless walk (a loop that never leaves the range), the stop an Interrupt asks for. The
// thread then runs on as usual.
func TestStepRange(t *testing.T) {
	tr := newTracer(t)
	p := spawn(t, tr, "tight")
	pid := p.Info().Pid
	fn := symAddr(t, pid, progPath, "tight")
	runTo(t, p, pid, fn)
	loop := target.StepRange{Lo: fn, Hi: fn + 0x100}

	// At most 5 steps.
	r := loop
	r.Max = 5
	if err := p.(target.RangeStepper).StepRange(pid, 0, r); err != nil {
		t.Fatal(err)
	}
	ev := expect(t, p, target.EventSignal)
	if ev.Trap != target.TrapStep || ev.Steps != 5 || ev.PC < fn || ev.PC >= fn+0x100 {
		t.Fatalf("walk of 5 steps: %+v", ev)
	}
	// Up to a stop address: where it stands, which the loop comes back to.
	stop := ev.PC
	r = loop
	r.Max, r.Stops = 1000, []uint64{stop}
	if err := p.(target.RangeStepper).StepRange(pid, 0, r); err != nil {
		t.Fatal(err)
	}
	if ev = expect(t, p, target.EventSignal); ev.Trap != target.TrapStep || ev.PC != stop || ev.Steps < 2 || ev.Steps >= 1000 {
		t.Fatalf("walk around the loop to %#x: %+v", stop, ev)
	}
	// A trap written into the range while the walk is on its way, which its Stops do not
	// name, ends it before the trap: a step trap at the trap's address, the trap not executed.
	// (The trap goes where the thread is not: one step ahead, which the loop comes back to.)
	r = loop
	r.Max = 1
	step := func() uint64 {
		t.Helper()
		if err := p.(target.RangeStepper).StepRange(pid, 0, r); err != nil {
			t.Fatal(err)
		}
		return expect(t, p, target.EventSignal).PC
	}
	ahead := step()
	step()
	r.Max = 1 << 24
	if err := p.(target.RangeStepper).StepRange(pid, 0, r); err != nil {
		t.Fatal(err)
	}
	orig := make([]byte, 1)
	if _, err := p.ReadMemory(ahead, orig); err != nil {
		t.Fatal(err)
	}
	if _, err := p.WriteMemory(ahead, []byte{0xcc}); err != nil {
		t.Fatal(err)
	}
	if ev = expect(t, p, target.EventSignal); ev.Trap != target.TrapStep || ev.PC != ahead {
		t.Fatalf("walk meeting a trap planted at %#x: %+v", ahead, ev)
	}
	if _, err := p.WriteMemory(ahead, orig); err != nil {
		t.Fatal(err)
	}
	// Endless: an interrupt ends it.
	r = loop
	r.Max = 1 << 30
	if err := p.(target.RangeStepper).StepRange(pid, 0, r); err != nil {
		t.Fatal(err)
	}
	if err := p.Interrupt(pid); err != nil {
		t.Fatal(err)
	}
	ev = nextEvent(t, p)
	if !(ev.Kind == target.EventStopped || ev.Kind == target.EventSignal && ev.Trap == target.TrapStep) {
		t.Fatalf("endless walk interrupted: %+v", ev)
	}
	t.Logf("endless walk interrupted: %+v", ev)
	// And the thread runs on, until it stops again: for the interrupt, or for a trap of the
	// interrupted step still pending, which then satisfies the interrupt.
	if err := p.Resume(pid, 0); err != nil {
		t.Fatal(err)
	}
	if err := p.Interrupt(pid); err != nil {
		t.Fatal(err)
	}
	if ev = nextEvent(t, p); ev.Kind != target.EventStopped && ev.Kind != target.EventSignal {
		t.Fatalf("after the walk, resumed and interrupted: %+v", ev)
	}
}

// runTo lets the stopped process p run until its thread pid reaches addr, by a breakpoint
// taken away once hit.
func runTo(t testing.TB, p target.Process, pid int, addr uint64) {
	t.Helper()
	orig := make([]byte, 1)
	if _, err := p.ReadMemory(addr, orig); err != nil {
		t.Fatal(err)
	}
	if _, err := p.WriteMemory(addr, []byte{0xcc}); err != nil {
		t.Fatal(err)
	}
	if err := p.Resume(pid, 0); err != nil {
		t.Fatal(err)
	}
	if ev := expect(t, p, target.EventSignal); ev.Trap != target.TrapBreakpoint || ev.PC != addr+1 {
		t.Fatalf("run to %#x: %+v", addr, ev)
	}
	p.WriteMemory(addr, orig)
	if err := p.SetPC(pid, addr); err != nil {
		t.Fatal(err)
	}
}
