package agent

import (
	"syscall"

	"github.com/hpcdap/hpcdap/arch"
	"github.com/hpcdap/hpcdap/cdti"
	"github.com/hpcdap/hpcdap/target"
)

// rangeStep is a tool's StepRange under way on one thread: its single steps go on, unseen by
// the tool, while the pc stays in [lo, hi), is not at a call instruction or at a tool's
// breakpoint, and steps remain (left, the one under way included).
type rangeStep struct {
	lo, hi uint64
	left   uint32
}

// stepRange answers StepRange (decoded, so with a range that is not empty and a budget within
// bounds; a malformed one the framework answers CmdParmErr): the first step is StepThread's
// (stepThread), and the step goes on as the range says (stepOn).
func (p *proc) stepRange(th *pthread, c *cdti.StepRange) cdti.Result {
	r := p.stepThread(th)
	if r.Code != cdti.CmdSuccess {
		return r
	}
	left := c.MaxSteps
	if left == 0 {
		left = cdti.MaxRangeSteps
	}
	th.rng = &rangeStep{lo: c.Lo, hi: c.Hi, left: left}
	return r
}

// toolStep starts th's step for a tool: a plain single step, or, for a StepRange where the back
// end is a target.RangeStepper, the steps of the range that the back end can take alone (it
// stops at every trap planted in the range, which the agent steps over itself).
func (p *proc) toolStep(th *pthread, sig int) error {
	rs, ok := p.tp.(target.RangeStepper)
	if th.rng == nil || th.rng.left == 0 || !ok {
		return p.tp.Step(th.tid, sig)
	}
	r := target.StepRange{Lo: th.rng.lo, Hi: th.rng.hi, Max: int(th.rng.left)}
	for addr := range p.bps {
		if addr >= r.Lo && addr < r.Hi {
			r.Stops = append(r.Stops, addr)
		}
	}
	return rs.StepRange(th.tid, sig, r)
}

// stepOn is called when th completed the steps it was sent on for a tool's StepRange (rng,
// taken off the thread): taken steps, the last at pc. It reports whether the thread steps
// again instead of the tool being told, and if so asks for the step.
func (p *proc) stepOn(th *pthread, rng *rangeStep, pc uint64, taken int) bool {
	rng.left -= min(rng.left, uint32(max(taken, 1)))
	if rng.left == 0 || pc < rng.lo || pc >= rng.hi {
		return false
	}
	if b := p.bps[pc]; b != nil && !b.lifted && !b.internalOnly() {
		return false // a tool's breakpoint: the tool decides what it means to the step
	}
	if p.callAt(pc) {
		return false // the tool steps into the call or over it
	}
	th.rng, th.stepReq = rng, true
	return true
}

// rangeStepInterrupted is called when th, stepping for a tool, was interrupted (ev, an
// EventStopped) before its step completed: the steps a range step took before the interrupt
// come off its budget, so that however often it is interrupted (a tool holding the thread,
// the process suspended for another thread's stop or step over a trap) it never takes more
// than its MaxSteps in all. A range step whose budget is spent so completes where it stands.
func (p *proc) rangeStepInterrupted(th *pthread, ev target.Event) {
	rng := th.rng
	if rng == nil {
		return
	}
	rng.left -= min(rng.left, uint32(ev.Steps))
	if rng.left > 0 {
		return
	}
	th.stepReq, th.rng = false, nil
	if p.holder != nil {
		p.pending = append(p.pending, stepCompleteAt(th, ev.PC))
	}
}

// stepMetTrap ends or carries on a tool's step whose thread executed a trap that no tool is
// told of (an internal one, a condition that does not hold, a trap removed since it was
// hit), taken steps before it (a range step's): planted while the step was on its way, it was
// not there when the step began. The thread stands at addr, the trap's instruction not
// executed. A range step goes on from there (stepOn); any other step completes at addr, so
// that the tool hears of its end.
func (p *proc) stepMetTrap(th *pthread, rng *rangeStep, addr uint64, taken int) {
	if p.holder == nil {
		return // the tool that stepped released control: the step is over
	}
	if rng != nil && len(p.pending) == 0 && p.inflight == nil && p.stepOn(th, rng, addr, taken) {
		return
	}
	p.pending = append(p.pending, stepCompleteAt(th, addr))
}

// stepCompleteAt is the notification of th's step for a tool completed at pc.
func stepCompleteAt(th *pthread, pc uint64) notif {
	return notif{tid: th.tid, sig: int(syscall.SIGTRAP), reason: cdti.SignalStepComplete, inst: pc}
}

// callAt reports whether the instruction at pc is a call (reading the original bytes of a
// planted breakpoint), or whether it cannot be told: a range step then stops there.
func (p *proc) callAt(pc uint64) bool {
	code := make([]byte, 16)
	n, _ := programMemory{p}.ReadMemory(pc, code)
	if n == 0 {
		return true
	}
	code = code[:n]
	a, err := arch.For(p.info.Machine, p.info.ByteOrder)
	if err != nil {
		return true
	}
	call, _, ok := a.DecodeCall(code, pc)
	return call || !ok
}
