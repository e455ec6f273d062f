//go:build linux && amd64

package ptrace

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"testing"
	"time"

	"golang.org/x/arch/x86/x86asm"
	"golang.org/x/sys/cpu"
	"golang.org/x/sys/unix"

	"github.com/hpcdap/hpcdap/amd64"
	"github.com/hpcdap/hpcdap/target"
)

// TestStepRange: StepRange walks a thread through a range on the tracer's thread and reports
// one event: the step trap after Max steps (Steps says Max), the step trap at an address of
// Stops (once around a loop), the step trap before a trap planted during the walk, and, for an
// endless walk (a loop that never leaves the range), the stop an Interrupt asks for. The
// thread then runs on as usual.
func TestStepRange(t *testing.T) {
	p, pid, fn, _ := inTight(t)
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

// TestStepRangeInterrupted: a walk that an Interrupt ends reports the steps it took, whichever
// stop ends it (the interrupt's EventStopped, or the step trap the interrupt met), and a stale
// interrupt met later does not end the next walk. Walks started again and again with what is
// left of a budget, each interrupted, so take exactly the budget in all, as the loop's counter
// (stored once every four instructions) and the pc where the last walk ends say. That holds
// whether the walk runs through the loop's straight-line code to a hardware breakpoint (a run
// interrupted, and a run's breakpoint hit as the interrupt came, whose trap the kernel
// delivers later), or single-steps it, every debug register being a watchpoint's.
func TestStepRangeInterrupted(t *testing.T) {
	t.Run("runs", func(t *testing.T) { testStepRangeInterrupted(t, false) })
	t.Run("watchpoints", func(t *testing.T) { testStepRangeInterrupted(t, true) })
}

func testStepRangeInterrupted(t *testing.T, watchAll bool) {
	p, pid, fn, counter := inTight(t)
	if watchAll {
		watched := symAddr(t, pid, progPath, "watched") // never written in tight()
		for slot := range amd64.WatchSlots {
			if err := p.SetWatchpoint(pid, slot, watched, 4, target.WatchWrite); err != nil {
				t.Fatal(err)
			}
		}
	}
	read := func() uint64 {
		t.Helper()
		b := make([]byte, 8)
		if _, err := p.ReadMemory(counter, b); err != nil {
			t.Fatal(err)
		}
		return binary.LittleEndian.Uint64(b)
	}
	before := read()

	const budget, interrupts = 1 << 14, 100
	left, walks, stopped := budget, 0, 0
	var ev target.Event
	for left > 0 {
		most := left
		if walks >= interrupts {
			most = min(left, 1024) // the rest in walks short enough for a loaded machine
		}
		if err := p.(target.RangeStepper).StepRange(pid, 0, target.StepRange{Lo: fn, Hi: fn + 0x100, Max: most}); err != nil {
			t.Fatal(err)
		}
		walks++
		if walks <= interrupts {
			if err := p.Interrupt(pid); err != nil {
				t.Fatal(err)
			}
		}
		switch ev = nextEvent(t, p); {
		case ev.Kind == target.EventStopped:
			stopped++
		case ev.Kind == target.EventSignal && ev.Trap == target.TrapStep:
		default:
			t.Fatalf("walk %d (%d steps left): %+v", walks, left, ev)
		}
		if ev.Steps > most || walks > interrupts && ev.Steps != most {
			t.Fatalf("walk %d of at most %d steps: %+v", walks, most, ev)
		}
		left -= ev.Steps
	}
	// Two steps of prologue, then rounds of load, add, store and jump back.
	code := make([]byte, 32)
	if _, err := p.ReadMemory(fn, code); err != nil {
		t.Fatal(err)
	}
	var at []uint64
	for off := 0; len(at) < 6; {
		in, err := amd64.Decode(code[off:])
		if err != nil {
			t.Fatalf("tight+%#x: %v", off, err)
		}
		at = append(at, fn+uint64(off))
		off += in.Len
	}
	if in, _ := amd64.Decode(code[at[5]-fn:]); in.Op != x86asm.JMP || in.Args[0] != x86asm.Rel(int32(at[2])-int32(at[5]+uint64(in.Len))) {
		t.Fatalf("tight: %x: not 2 instructions of prologue and a loop of 4", code)
	}
	if want := at[2+(budget-2)%4]; ev.PC != want {
		t.Errorf("%d walks (%d ended by the interrupt's stop) of %d steps in all end at %#x, want %#x", walks, stopped, budget, ev.PC, want)
	}
	if stores, want := read()-before, uint64(budget-1)/4; stores != want {
		t.Errorf("%d walks (%d ended by the interrupt's stop) of %d steps in all: the loop stored its counter %d times, want %d",
			walks, stopped, budget, stores, want)
	}
	t.Logf("%d walks, %d ended by the interrupt's stop", walks, stopped)
}

// TestStepRangeMeetsWatchpoint: a walk through straight-line code that stores to a watched
// variable reports the watchpoint, right after the store, with the steps it took; the walks
// after it count their steps as before, and the breakpoint of the runs never surfaces.
func TestStepRangeMeetsWatchpoint(t *testing.T) {
	p, pid, fn, counter := inTight(t)
	loop := target.StepRange{Lo: fn, Hi: fn + 0x100, Max: 1 << 20}
	if err := p.SetWatchpoint(pid, 0, counter, 8, target.WatchWrite); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if err := p.(target.RangeStepper).StepRange(pid, 0, loop); err != nil {
			t.Fatal(err)
		}
		ev := expect(t, p, target.EventSignal)
		if ev.Trap != target.TrapWatch || ev.Slot != 0 || ev.Addr != counter || ev.Steps < 1 || ev.Steps > 6 {
			t.Fatalf("walk %d through a store to %#x, watched: %+v", i, counter, ev)
		}
		code := make([]byte, 16)
		p.ReadMemory(ev.PC, code)
		if in, err := amd64.Decode(code); err != nil || in.Op != x86asm.JMP {
			t.Fatalf("walk %d: the watchpoint reported at %#x, before %x, not after the loop's store (before its jump)", i, ev.PC, code)
		}
	}
	if err := p.ClearWatchpoint(pid, 0); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		r := loop
		r.Max = 101 + i
		if err := p.(target.RangeStepper).StepRange(pid, 0, r); err != nil {
			t.Fatal(err)
		}
		if ev := expect(t, p, target.EventSignal); ev.Trap != target.TrapStep || ev.Steps != r.Max {
			t.Fatalf("walk of %d steps after the watchpoint: %+v", r.Max, ev)
		}
	}
}

// TestStepRangeDetach: a process detached while a walk runs through its code (an endless
// loop, so that a run's breakpoint is armed) runs on untraced, not killed by the breakpoint's
// trap, and its loop goes on.
func TestStepRangeDetach(t *testing.T) {
	p, pid, fn, counter := inTight(t)
	if err := p.(target.RangeStepper).StepRange(pid, 0, target.StepRange{Lo: fn, Hi: fn + 0x100, Max: 1 << 30}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	if err := p.Detach(); err != nil {
		t.Fatal(err)
	}
	defer unix.Kill(pid, unix.SIGKILL)
	read := func() uint64 {
		b := make([]byte, 8)
		f, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.ReadAt(b, int64(counter)); err != nil {
			t.Fatalf("read the loop's counter after the detach: %v (%c)", err, threadState(t, pid))
		}
		return binary.LittleEndian.Uint64(b)
	}
	before := read()
	time.Sleep(300 * time.Millisecond)
	if s := threadState(t, pid); s != 'R' && s != 'S' {
		t.Fatalf("after the detach the process is in state %c", s)
	}
	if after := read(); after <= before+1000 {
		t.Fatalf("after the detach the loop's counter went from %d to %d", before, after)
	}
}

// inTight spawns the test program in its endless loop tight() and runs it to the function's
// first instruction: the process, its pid, the address of tight() and of its loop's counter.
func inTight(t *testing.T) (p target.Process, pid int, fn, counter uint64) {
	t.Helper()
	p, pid, fn = inFunc(t, "tight", "tight")
	return p, pid, fn, symAddr(t, pid, progPath, "tight_counter")
}

// inFunc spawns the test program in mode and runs it to the first instruction of function fn:
// the process, its pid and fn's address.
func inFunc(t *testing.T, mode, fn string) (p target.Process, pid int, addr uint64) {
	t.Helper()
	p = spawn(t, newTracer(t), mode)
	pid = p.Info().Pid
	addr = symAddr(t, pid, progPath, fn)
	runTo(t, p, pid, addr)
	return p, pid, addr
}

// TestStepRangeVzeroupperBeforeCall: a walk through straight-line code that ends with
// vzeroupper, then a call (as gcc emits it after AVX code), stops at the call: the run's end
// lies where the instruction after vzeroupper begins, not a byte into the call (the thread would
// run through the call, and on for ever).
func TestStepRangeVzeroupperBeforeCall(t *testing.T) {
	if !cpu.X86.HasAVX {
		t.Skip("the processor has no AVX: no vzeroupper")
	}
	p, pid, fn := inFunc(t, "vzero", "vzero_loop")
	code := make([]byte, 48)
	if _, err := p.ReadMemory(fn, code); err != nil {
		t.Fatal(err)
	}
	call := bytes.Index(code, []byte{0xc5, 0xf8, 0x77, 0xe8})
	if call < 0 {
		t.Fatalf("vzero_loop: no vzeroupper before a call in % x", code)
	}
	// The instructions from off to the call, which all fall through.
	count := func(off int) int {
		n := 0
		for off < call+3 {
			in, err := amd64.Decode(code[off:])
			if err != nil {
				t.Fatalf("vzero_loop+%#x: %v", off, err)
			}
			off += in.Len
			n++
		}
		return n
	}
	jump, ok := amd64.DecodeBranch(code[call+8:], fn+uint64(call)+8)
	if !ok || jump.Call || jump.Target < fn || jump.Target >= fn+uint64(call) {
		t.Fatalf("vzero_loop: no jump back after the call in % x", code)
	}
	// The first walk from the function's entry; the others from the jump back after the
	// call, carried out on the registers, to the call again.
	want := count(0)
	for i := range 3 {
		if err := p.(target.RangeStepper).StepRange(pid, 0, target.StepRange{Lo: fn, Hi: fn + 0x100, Max: 10000}); err != nil {
			t.Fatal(err)
		}
		ev := expect(t, p, target.EventSignal)
		if ev.Trap != target.TrapStep || ev.PC != fn+uint64(call)+3 || ev.Steps != want {
			t.Fatalf("walk %d through vzeroupper to the call at %#x, %d steps: %+v", i, fn+uint64(call)+3, want, ev)
		}
		want = 1 + count(int(jump.Target-fn))
		// Over the call, and on to the loop's top.
		if err := p.Step(pid, 0); err != nil {
			t.Fatal(err)
		}
		expect(t, p, target.EventSignal)
		runTo(t, p, pid, fn+uint64(call)+8)
	}
}

// TestStepRangeJumpToItself: a jump to itself, which the walk carries out on the registers a
// bounded number of times in a row before it single-steps one, takes exactly the walk's budget
// and stays where it is; an endless one ends at an interrupt.
func TestStepRangeJumpToItself(t *testing.T) {
	p, pid, fn := inFunc(t, "jumpself", "jump_self")
	code := make([]byte, 16)
	if _, err := p.ReadMemory(fn, code); err != nil {
		t.Fatal(err)
	}
	jmp := fn + uint64(bytes.Index(code, []byte{0xeb, 0xfe}))
	runTo(t, p, pid, jmp)
	for _, n := range []int{1, 63, 64, 65, 1000} {
		if err := p.(target.RangeStepper).StepRange(pid, 0, target.StepRange{Lo: fn, Hi: fn + 0x10, Max: n}); err != nil {
			t.Fatal(err)
		}
		if ev := expect(t, p, target.EventSignal); ev.Trap != target.TrapStep || ev.PC != jmp || ev.Steps != n {
			t.Fatalf("walk of %d steps on a jump to itself at %#x: %+v", n, jmp, ev)
		}
	}
	if err := p.(target.RangeStepper).StepRange(pid, 0, target.StepRange{Lo: fn, Hi: fn + 0x10, Max: 1 << 30}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	if err := p.Interrupt(pid); err != nil {
		t.Fatal(err)
	}
	if ev := nextEvent(t, p); ev.PC != jmp || !(ev.Kind == target.EventStopped || ev.Trap == target.TrapStep) {
		t.Fatalf("endless walk on a jump to itself, interrupted: %+v", ev)
	}
}

// TestStepRangeMeetsTrapPlantedInRun: a trap written while the walk runs through 40 no-ops
// ends it before the trap, as a single step would: a step trap at the trap's address, the
// trap not executed, the steps counted to it. (The thread is most often inside a run then, so
// that it executes the trap, which the walk takes back.)
func TestStepRangeMeetsTrapPlantedInRun(t *testing.T) {
	p, pid, fn := inFunc(t, "nops", "nops")
	code := make([]byte, 64)
	if _, err := p.ReadMemory(fn, code); err != nil {
		t.Fatal(err)
	}
	first := bytes.Index(code, bytes.Repeat([]byte{0x90}, 40))
	if first < 0 {
		t.Fatalf("nops: no 40 no-ops in % x", code)
	}
	// Two places taken in turn, so that the trap never goes where the thread stands (its first
	// step would execute it).
	places := []uint64{fn + uint64(first) + 10, fn + uint64(first) + 30}
	for i := range 20 {
		at := places[i%2]
		if err := p.(target.RangeStepper).StepRange(pid, 0, target.StepRange{Lo: fn, Hi: fn + 0x100, Max: 1 << 30}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Duration(i%4) * time.Millisecond)
		if _, err := p.WriteMemory(at, []byte{0xcc}); err != nil {
			t.Fatal(err)
		}
		ev := expect(t, p, target.EventSignal)
		if _, err := p.WriteMemory(at, []byte{0x90}); err != nil {
			t.Fatal(err)
		}
		if ev.Trap != target.TrapStep || ev.PC != at || ev.Steps < 1 {
			t.Fatalf("round %d: walk meeting a trap planted at %#x: %+v", i, at, ev)
		}
		regs, err := p.Registers(pid, target.RegsGeneral)
		if err != nil {
			t.Fatal(err)
		}
		if pc := amd64.Reg(regs, amd64.OffRIP); pc != at {
			t.Fatalf("round %d: the walk reported the trap at %#x, the thread stands at %#x", i, at, pc)
		}
	}
}
