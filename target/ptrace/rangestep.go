//go:build linux && amd64

package ptrace

import (
	"slices"

	"github.com/hpcdap/hpcdap/amd64"
	"github.com/hpcdap/hpcdap/target"
)

// rangeWalk is a StepRange under way on a thread: its range and the steps taken.
type rangeWalk struct {
	r     target.StepRange
	steps int
}

// StepRange single-steps tid as Step does and steps on, on the tracer's thread, as r says
// (target.RangeStepper).
func (p *process) StepRange(tid int, sig int, r target.StepRange) error {
	return p.restart("step range", tid, sig, true, &rangeWalk{r: r})
}

// walkOn is called at the step trap of a thread in a StepRange (walk, taken off the thread,
// its steps counted), at pc, unless an interrupt was asked meanwhile: it reports whether the
// thread stepped on (then nothing is reported). Runs on the tracer's thread.
func (th *thread) walkOn(w *rangeWalk, pc uint64) bool {
	r := &w.r
	if w.steps >= r.Max || pc < r.Lo || pc >= r.Hi || slices.Contains(r.Stops, pc) || th.p.walkEndsAt(pc) {
		return false
	}
	if th.resume(0, true) != nil {
		return false
	}
	th.walk = w
	return true
}

// takeWalk ends th's walk, if one is under way, and returns it: the stop that ends it reports
// its steps.
func (th *thread) takeWalk() *rangeWalk {
	w := th.walk
	th.walk = nil
	return w
}

// walkEndsAt reports whether a walk stops before the instruction at pc: a call, a trap (one
// planted since the walk began, which its Stops do not name: the agent decides about it), or
// code that cannot be read or decoded.
func (p *process) walkEndsAt(pc uint64) bool {
	var code [16]byte
	n, _ := p.readMem(pc, code[:])
	if n == 0 || code[0] == amd64.TrapByte {
		return true
	}
	call, _, err := amd64.DecodeCall(code[:n])
	return call || err != nil
}
