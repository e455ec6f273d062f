package agent

import (
	"encoding/binary"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/hpcdap/hpcdap/bpcode"
	"github.com/hpcdap/hpcdap/cdti"
	"github.com/hpcdap/hpcdap/internal/testenv"
)

// instructions lists the addresses of fn's instructions in objdump's listing, and of the
// first call among them (0 if none).
func instructions(t *testing.T, bin, fn string) (addrs []uint64, call uint64) {
	t.Helper()
	out, err := exec.Command("objdump", "-d", "--disassemble="+fn, bin).Output()
	if err != nil {
		t.Fatalf("objdump: %v", err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		a, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		v, err := strconv.ParseUint(a, 16, 64)
		if err != nil {
			continue
		}
		addrs = append(addrs, v)
		if f := strings.Fields(rest); call == 0 && len(f) > 0 && strings.Contains(rest, "\tcall ") {
			call = v
		}
	}
	if len(addrs) == 0 {
		t.Fatalf("objdump lists no instruction of %s", fn)
	}
	return addrs, call
}

// stepComplete waits for the StepComplete of a step and checks where it stopped.
func stepComplete(t *testing.T, tt *testTool, what string, want uint64) {
	t.Helper()
	n := tt.signalNotify()
	if n.Reason != cdti.SignalStepComplete || n.InstAddress != want {
		t.Fatalf("%s: notify %+v, want StepComplete at %#x", what, n, want)
	}
	if pc := tt.pc(0, 0); pc != want {
		t.Fatalf("%s: pc %#x, want %#x", what, pc, want)
	}
}

// TestStepRange: StepRange steps on in the agent while the pc stays in its range, and stops,
// with one StepComplete, at the first call instruction of the range (not executed), at a
// tool's breakpoint in the range (not executed; the trap stays), after MaxSteps
// instructions, and at the first instruction outside the range. The program then runs to its
// end with the right result: every instruction ran once.
func TestStepRange(t *testing.T) {
	h := newHarness(t, "")
	out := h.spawn(1, progBin, "loop", "2")
	tt, _ := startStopped(t, h, 1)
	inner := testenv.NMSymbol(t, progBin, "inner")
	innerCode, call := instructions(t, progBin, "inner")
	hitCode, _ := instructions(t, progBin, "hit")
	if call == 0 || len(hitCode) < 7 {
		t.Fatalf("inner %x (call at %#x), hit %x: not the code the test expects", innerCode, call, hitCode)
	}
	tt.setBreak(0, inner)
	tt.cont(0)
	if n := tt.signalNotify(); n.InstAddress != inner {
		t.Fatalf("hit %+v, want inner at %#x", n, inner)
	}
	tt.mustUpdate(0, &cdti.ResetBreakpoint{Addr: inner, Instruction: uint32(origByte(t, progBin, inner))})

	// From inner's entry through its range: stops at the call, not executed.
	end := innerCode[len(innerCode)-1] + 1
	tt.mustUpdate(0, &cdti.StepRange{Lo: inner, Hi: end})
	stepComplete(t, tt, "StepRange to the call", call)
	// Into hit, one instruction.
	tt.mustUpdate(0, &cdti.StepThread{})
	stepComplete(t, tt, "StepThread into hit", hitCode[0])
	// Through hit's range with a breakpoint at its 5th instruction: stops on the trap.
	hitEnd := hitCode[len(hitCode)-1] + 1
	tt.setBreak(0, hitCode[4])
	tt.mustUpdate(0, &cdti.StepRange{Lo: hitCode[0], Hi: hitEnd})
	stepComplete(t, tt, "StepRange to a breakpoint", hitCode[4])
	tt.mustUpdate(0, &cdti.ResetBreakpoint{Addr: hitCode[4], Instruction: uint32(origByte(t, progBin, hitCode[4]))})
	// Two instructions at most.
	tt.mustUpdate(0, &cdti.StepRange{Lo: hitCode[0], Hi: hitEnd, MaxSteps: 2})
	stepComplete(t, tt, "StepRange of 2 steps", hitCode[6])
	// A range of one instruction: the next is outside it.
	tt.mustUpdate(0, &cdti.StepRange{Lo: hitCode[6], Hi: hitCode[6] + 1})
	stepComplete(t, tt, "StepRange of one instruction", hitCode[7])

	tt.cont(0)
	if st := tt.waitTermination(0); st.ExitCode() != 0 {
		t.Errorf("exit %v", st)
	}
	out.waitFor(t, "iterations 2 counter 1")
}

// TestStepRangeMeetsTrapPlantedOnTheWay: a breakpoint (with a condition that never holds) is
// planted in a loop while a StepRange goes round it. The step ends at the breakpoint, its
// instruction not executed, with a StepComplete the tool hears of: the trap was not there
// when the step began, and the tool decides what it means to its step.
func TestStepRangeMeetsTrapPlantedOnTheWay(t *testing.T) {
	tt, fn, code, _ := stoppedInTight(t)
	end := code[len(code)-1] + 1
	// Into the loop, then one step ahead of a place it comes back to.
	step := func(max uint32) uint64 {
		t.Helper()
		tt.mustUpdate(0, &cdti.StepRange{Lo: fn, Hi: end, MaxSteps: max})
		n := tt.signalNotify()
		if n.Reason != cdti.SignalStepComplete {
			t.Fatalf("StepRange of %d steps: %+v", max, n)
		}
		return n.InstAddress
	}
	step(len32(code))
	ahead := step(1)
	step(1)

	tt.mustUpdate(0, &cdti.StepRange{Lo: fn, Hi: end})
	var b bpcode.Builder
	b.Const(0)
	never, err := b.Program(false)
	if err != nil {
		t.Fatal(err)
	}
	tt.mustUpdate(0, &cdti.SetBreakpoint{Addr: ahead, Instruction: 0xCC},
		&cdti.SetTrapCondition{Address: ahead, Site: (&bpcode.Site{Cond: never}).Encode()})
	n := tt.signalNotify()
	if n.Reason != cdti.SignalStepComplete || n.InstAddress != ahead {
		t.Fatalf("StepRange meeting a breakpoint planted at %#x: %+v, want StepComplete there", ahead, n)
	}
	if pc := tt.pc(0, 0); pc != ahead {
		t.Errorf("pc %#x, want %#x", pc, ahead)
	}
}

// stoppedInTight runs the test program in its "tight" mode to the first instruction of tight,
// and removes the breakpoint that stopped it there: the tool, tight's address, the addresses
// of its instructions, and the stop.
func stoppedInTight(t *testing.T) (*testTool, uint64, []uint64, cdti.NotifySignal) {
	t.Helper()
	h := newHarness(t, "")
	h.spawn(1, progBin, "tight")
	tt, _ := startStopped(t, h, 1)
	fn := testenv.NMSymbol(t, progBin, "tight")
	code, _ := instructions(t, progBin, "tight")
	tt.setBreak(0, fn)
	tt.cont(0)
	hit := tt.signalNotify()
	if hit.InstAddress != fn {
		t.Fatalf("hit %+v, want tight at %#x", hit, fn)
	}
	tt.mustUpdate(0, &cdti.ResetBreakpoint{Addr: fn, Instruction: uint32(origByte(t, progBin, fn))})
	return tt, fn, code, hit
}

// len32 is the length of a slice as a StepRange's MaxSteps.
func len32[T any](s []T) uint32 { return uint32(len(s)) }

// TestStepRangeBudgetAcrossInterrupts: a StepRange round an endless loop whose thread a tool
// holds and releases again and again while it steps (each hold interrupts it) takes its
// MaxSteps single steps in all, not one more: the loop's counter, stored once every four
// instructions, has moved by what MaxSteps allow when its one StepComplete arrives, at the
// instruction MaxSteps lead to.
func TestStepRangeBudgetAcrossInterrupts(t *testing.T) {
	tt, fn, code, hit := stoppedInTight(t)
	counter := testenv.NMSymbol(t, progBin, "counter")
	if len(code) != 6 {
		t.Fatalf("tight: %x, want the 2 instructions of its prologue and a loop of 4", code)
	}
	end := code[len(code)-1] + 2
	count := func() uint64 { return binary.LittleEndian.Uint64(tt.memory(0, counter, 8)) }
	before := count()

	const max = cdti.MaxRangeSteps
	tt.mustUpdate(0, &cdti.StepRange{Lo: fn, Hi: end, MaxSteps: max})
	holds := 0
	var done *cdti.Notify
	for done == nil && holds < 200 {
		select {
		case done = <-tt.c.Notifications():
			continue
		default:
		}
		tt.mustUpdate(0, &cdti.HoldThread{ThreadID: hit.ThreadID})
		tt.mustUpdate(0, &cdti.ReleaseThread{ThreadID: hit.ThreadID})
		holds++
	}
	if done == nil {
		done = tt.notify()
	}
	if done.Kind != cdti.NotifyTypeSignal || done.Signal.Reason != cdti.SignalStepComplete {
		t.Fatalf("StepRange of %d steps held and released %d times: %+v, want StepComplete", max, holds, done)
	}
	// Two steps of prologue, then rounds of four with a store of the counter at the third.
	if pc, want := done.Signal.InstAddress, code[2+(max-2)%4]; pc != want {
		t.Errorf("StepRange of %d steps, held and released %d times while it stepped, ended at %#x, want %#x", max, holds, pc, want)
	}
	if stores, want := count()-before, uint64(max-1)/4; stores != want {
		t.Errorf("StepRange of %d steps, held and released %d times while it stepped: the loop stored its counter %d times, want %d",
			max, holds, stores, want)
	}
}

// TestStepRangeMalformed: a StepRange the agent cannot take (a range reversed or empty, a
// budget over MaxRangeSteps, a payload too short) is answered CmdParmErr, never CmdInval,
// which would tell the tool that the agent does not know range steps; nothing runs, and a
// StepRange that is well formed then steps as usual.
func TestStepRangeMalformed(t *testing.T) {
	tt, fn, code, _ := stoppedInTight(t)
	end := code[len(code)-1] + 2
	for what, c := range map[string]cdti.Command{
		"reversed":   &cdti.StepRange{Lo: end, Hi: fn},
		"empty":      &cdti.StepRange{Lo: fn, Hi: fn},
		"over limit": &cdti.StepRange{Lo: fn, Hi: end, MaxSteps: cdti.MaxRangeSteps + 1},
		"short":      &cdti.RawCommand{Type: cdti.TypeStepRange, Data: make([]byte, 16)},
	} {
		if rs := tt.update(0, c); rs[0].Code != cdti.CmdParmErr {
			t.Errorf("StepRange %s: %v, want CmdParmErr", what, rs[0].Code)
		}
	}
	if pc := tt.pc(0, 0); pc != fn {
		t.Fatalf("after the refused StepRanges: pc %#x, want %#x", pc, fn)
	}
	tt.mustUpdate(0, &cdti.StepRange{Lo: fn, Hi: end, MaxSteps: 2})
	stepComplete(t, tt, "StepRange of 2 steps", code[2])
}
