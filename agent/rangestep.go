package agent

import (
	"github.com/hpcdap/hpcdap/arch"
	"github.com/hpcdap/hpcdap/cdti"
)

// rangeStep is a tool's StepRange under way on one thread: its single steps go on, unseen by
// the tool, while the pc stays in [lo, hi), is not at a call instruction or at a tool's
// breakpoint, and left steps remain.
type rangeStep struct {
	lo, hi uint64
	left   uint32
}

// stepRange answers StepRange: the first step is StepThread's (stepThread), and the step
// goes on as the range says (stepOn).
func (p *proc) stepRange(th *pthread, c *cdti.StepRange) cdti.Result {
	r := p.stepThread(th)
	if r.Code != cdti.CmdSuccess {
		return r
	}
	if c.Hi > c.Lo {
		left := c.MaxSteps
		if left == 0 {
			left = cdti.MaxRangeSteps
		}
		th.rng = &rangeStep{lo: c.Lo, hi: c.Hi, left: left - 1}
	}
	return r
}

// stepOn is called when th completed one single step of a tool's StepRange (rng, taken off
// the thread) at pc: it reports whether the thread steps again instead of the tool being
// told, and if so asks for the step.
func (p *proc) stepOn(th *pthread, rng *rangeStep, pc uint64) bool {
	if rng.left == 0 || pc < rng.lo || pc >= rng.hi {
		return false
	}
	if b := p.bps[pc]; b != nil && !b.lifted && !b.internalOnly() {
		return false // a tool's breakpoint: the tool decides what it means to the step
	}
	if p.callAt(pc) {
		return false // the tool steps into the call or over it
	}
	rng.left--
	th.rng, th.stepReq = rng, true
	return true
}

// callAt reports whether the instruction at pc is a call (reading the original bytes of a
// planted breakpoint), or whether it cannot be told: a range step then stops there.
func (p *proc) callAt(pc uint64) bool {
	code := make([]byte, 16)
	n, err := p.tp.ReadMemory(pc, code)
	if err != nil || n == 0 {
		return true
	}
	code = code[:n]
	p.shadowRead(pc, code)
	a, err := arch.For(p.info.Machine, p.info.ByteOrder)
	if err != nil {
		return true
	}
	call, _, ok := a.DecodeCall(code, pc)
	return call || !ok
}
