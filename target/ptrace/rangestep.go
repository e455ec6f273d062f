//go:build linux && amd64

package ptrace

import (
	"slices"

	"github.com/hpcdap/hpcdap/amd64"
	"github.com/hpcdap/hpcdap/target"
)

// rangeWalk is a StepRange under way on a thread: its range, the steps taken, and the run
// through straight-line code the thread is on, if it is not single-stepping.
type rangeWalk struct {
	r     target.StepRange
	steps int
	run   straightRun
	code  []byte // armRun's buffer
}

// straightRun is a stretch of straight-line code a walk lets the thread run through instead of
// single-stepping it: its instructions, of lens bytes each, from from to to, where a hardware
// execution breakpoint in debug register slot (armed while armed) stops the thread before the
// instruction at to. The walk is single-stepping while lens is empty.
type straightRun struct {
	from, to uint64
	lens     []uint8
	slot     int
	armed    bool
	fired    bool // the thread stopped at the breakpoint, and that was seen
}

// minRun is the fewest instructions a walk runs through to a hardware breakpoint rather than
// single-stepping them: a run costs about as much as two steps (arming the breakpoint, the
// stop at it, disarming it).
const minRun = 3

// maxRunBytes bounds the code read to find where a run ends.
const maxRunBytes = 1024

// StepRange single-steps tid as Step does and steps on, on the tracer's thread, as r says
// (target.RangeStepper).
func (p *process) StepRange(tid int, sig int, r target.StepRange) error {
	return p.restart("step range", tid, sig, true, &rangeWalk{r: r})
}

// walkOn is called at the step trap of a thread in a StepRange (walk, taken off the thread,
// its steps counted), at pc, unless an interrupt was asked meanwhile: it reports whether the
// thread stepped on (then nothing is reported) and where it stands (the walk may have moved
// it). Runs on the tracer's thread. A relative jump the walk carries out on the registers
// (jumpAt), a step without a stop; straight-line code of minRun instructions or more it lets
// the thread run through to a hardware breakpoint at its end (armRun), which reports the step
// trap there as the last single step would have; anything else it single-steps.
func (th *thread) walkOn(w *rangeWalk, pc uint64) (bool, uint64) {
	r := &w.r
	for jumps := 0; ; jumps++ {
		if w.steps >= r.Max || pc < r.Lo || pc >= r.Hi || slices.Contains(r.Stops, pc) {
			return false, pc
		}
		var buf [amd64.MaxInstLen]byte
		n, _ := th.p.readMem(pc, buf[:])
		code := buf[:n]
		if walkEndsBefore(code) {
			return false, pc
		}
		if jumps == maxJumps {
			break // a loop of jumps alone: single-stepping lets an interrupt in
		}
		dest, ok := th.jumpAt(code, pc)
		if !ok || th.setPC(dest) != nil {
			break
		}
		w.steps++
		pc = dest
	}
	run := th.armRun(w, pc)
	if !run {
		th.disarmRun(w) // the breakpoint of a run before, if any: the thread single-steps
	}
	if th.resume(0, !run) != nil {
		th.disarmRun(w)
		return false, pc
	}
	th.walk = w
	return true, pc
}

// maxJumps bounds the jumps a walk carries out in a row without letting the thread run.
const maxJumps = 64

// jumpAt returns where the relative jump code starts with, at pc (jmp or jcc, not a call:
// amd64.DecodeBranch), goes from th's registers; ok is false for any other instruction.
func (th *thread) jumpAt(code []byte, pc uint64) (dest uint64, ok bool) {
	br, ok := amd64.DecodeBranch(code, pc)
	if !ok || br.Call || th.loadRegs() != nil || regsPC(th.regs[:]) != pc {
		return 0, false
	}
	dest, _, ok = br.Dest(th.regs[:])
	return dest, ok
}

// takeWalk ends th's walk, if one is under way, and returns it: the stop that ends it reports
// its steps (a run's are counted by ranTo). A run's breakpoint is disarmed.
func (th *thread) takeWalk() *rangeWalk {
	w := th.walk
	th.walk = nil
	if w != nil {
		th.disarmRun(w)
	}
	return w
}

// walkEndsBefore reports whether a walk stops before the instruction code starts with (the
// bytes read at its pc): a call, a trap (one planted since the walk began, which its Stops do
// not name: the agent decides about it), or code that cannot be read or decoded.
func walkEndsBefore(code []byte) bool {
	if len(code) == 0 || code[0] == amd64.TrapByte {
		return true
	}
	call, _, err := amd64.DecodeCall(code)
	return call || err != nil
}

// armRun starts a run of w's through the straight-line code at pc, when there are minRun
// instructions or more of it and a debug register no watchpoint uses: it ends at the first
// instruction that may not fall through (amd64.FallsThrough: a branch, a call, a trap — a
// planted breakpoint of Stops among them), at the range's end, or once the walk's budget is
// spent. It reports whether the thread is to run (not step). The breakpoint of the walk's run
// before, still armed, is moved: a loop's runs, which end at the same place, cost no change.
func (th *thread) armRun(w *rangeWalk, pc uint64) bool {
	left := w.r.Max - w.steps
	slot := w.run.slot
	if !w.run.armed {
		slot = th.freeDebugSlot()
	}
	if left < minRun || slot < 0 {
		return false
	}
	w.code = slices.Grow(w.code[:0], maxRunBytes+amd64.MaxInstLen)
	code := w.code[:min(w.r.Hi-pc, maxRunBytes)+amd64.MaxInstLen]
	n, _ := th.p.readMem(pc, code)
	code = code[:n]
	run := straightRun{from: pc, lens: w.run.lens[:0], slot: slot}
	at := 0
	for len(run.lens) < left && pc+uint64(at) < w.r.Hi {
		inst, err := amd64.Decode(code[at:])
		if err != nil || !amd64.FallsThrough(inst, code[at:]) {
			break
		}
		run.lens = append(run.lens, uint8(inst.Len))
		at += inst.Len
	}
	run.to = pc + uint64(at)
	if len(run.lens) < minRun || !th.pointRun(&w.run, run.to, slot) {
		w.run.lens = run.lens[:0] // the buffer, kept for the next run
		return false
	}
	run.armed = true
	w.run = run
	return true
}

// pointRun points the execution breakpoint in debug register slot at to, arming it unless
// the run before (prev) left it armed there; it reports whether it is armed at to.
func (th *thread) pointRun(prev *straightRun, to uint64, slot int) bool {
	if (!prev.armed || prev.to != to) && pokeUser(th.tid, drOff(slot), to) != nil {
		return false
	}
	th.ranDR = true
	// An execution breakpoint: local enable, access 00 and length 00.
	return prev.armed || pokeUser(th.tid, drOff(7), th.watch.dr7|1<<(2*slot)) == nil
}

// freeDebugSlot returns a debug register no watchpoint uses, or -1.
func (th *thread) freeDebugSlot() int {
	for s := archFacts.WatchSlots - 1; s >= 0; s-- {
		if th.watch.dr7&slotBits(s) == 0 {
			return s
		}
	}
	return -1
}

// disarmRun disarms the breakpoint of w's run, if it is armed; the thread is stopped. Its
// address stays in the debug register, disabled. Unless the thread was seen stopping at the
// breakpoint, it may have reached it as another stop came (an interrupt): the breakpoint's
// trap then reaches the thread's next signal stop (runTrapPending, staleRunTrap).
func (th *thread) disarmRun(w *rangeWalk) {
	if !w.run.armed {
		return
	}
	if pokeUser(th.tid, drOff(7), th.watch.dr7) != nil {
		return // still armed: ranDR has the detach clear it
	}
	// No hit of the run's slot stays in DR6 for a watchpoint that may use the slot later.
	if dr6, err := peekUser(th.tid, drOff(6)); err == nil && dr6&(1<<w.run.slot) != 0 {
		pokeUser(th.tid, drOff(6), dr6&^(1<<w.run.slot))
	}
	w.run.armed = false
	if !w.run.fired {
		th.runTrapPending = true
	}
}

// endsRun reports whether a SIGTRAP that stopped th, of si_code code, at pc, is the hardware
// breakpoint that ends w's run.
func (w *rangeWalk) endsRun(code int, pc uint64) bool {
	return len(w.run.lens) > 0 && code == trapHwbkp && pc == w.run.to
}

// ranTo ends w's run, if the thread was on one, at the stop at pc (a breakpoint's trap: at
// trap, the pc after it): the instructions before pc count as steps taken. It reports the
// address of a trap the thread executed in the run, which was not there when the run began:
// planted since, it must stop the walk before it, as a single step would have.
func (w *rangeWalk) ranTo(pc uint64, trap bool) (plantedAt uint64, planted bool) {
	run := &w.run
	if len(run.lens) == 0 {
		return 0, false
	}
	defer func() { run.lens = run.lens[:0] }()
	at := run.from
	for i, n := range run.lens {
		if trap && at == pc-amd64.PCAfterTrap {
			w.steps += i
			return at, true
		}
		if at >= pc {
			w.steps += i
			return 0, false
		}
		at += uint64(n)
	}
	w.steps += len(run.lens) // at the run's end, or (not expected) somewhere else
	return 0, false
}
