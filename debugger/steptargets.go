package debugger

import (
	"context"
	"fmt"

	"github.com/hpcdap/hpcdap/symbols"
)

// StepTarget is a call made by a thread's current line that a step in may enter.
type StepTarget struct {
	Site   uint64 // run-time address of the call instruction in the primary rank
	Callee string // the function called; empty for an indirect call
	Line   symbols.Line
	// Where the call lies in its function (the offset from the function's lowest address), so
	// that the other ranks of an all-stop step find the same call in their own address spaces.
	fn      string
	fnOff   uint64
	primary *Rank
}

// maxLineScan bounds the instructions read to find the calls of one line.
const maxLineScan = 1 << 14

// stoppedAt reads where stopped thread t stands: its stack, the module and pc of its innermost
// frame. A rank that is not stopped is a notStoppedError.
func (j *Job) stoppedAt(ctx context.Context, t *Thread) (*ThreadStack, *symbols.Module, uint64, error) {
	j.mu.Lock()
	state := t.Rank.state
	j.mu.Unlock()
	if state != RankStopped {
		return nil, nil, 0, &notStoppedError{t.Rank.Num, state}
	}
	ts, err := t.Rank.sym.stack(ctx, t.LWP)
	if err != nil {
		return nil, nil, 0, err
	}
	pc, _ := ts.regs.PC()
	m := ts.proc.ModuleAt(pc)
	if m == nil {
		return nil, nil, 0, fmt.Errorf("no module holds pc %#x", pc)
	}
	return ts, m, pc, nil
}

// StepInTargets returns the calls of thread t's current line at or after its pc, in address
// order (the order in which a straight-line statement makes them): the functions a step in
// may enter, as `f(g(1), h(2))` calls g, h and f.
func (j *Job) StepInTargets(ctx context.Context, t *Thread) ([]StepTarget, error) {
	ts, m, pc, err := j.stoppedAt(ctx, t)
	if err != nil {
		return nil, err
	}
	p := ts.proc
	fn := m.Bin.FunctionAt(pc - m.Bias)
	line, ok := m.Bin.LineForPC(pc - m.Bias)
	if fn == nil || !ok || line.Line == 0 {
		return nil, fmt.Errorf("no line information at pc %#x", pc)
	}
	var out []StepTarget
	lo, hi := fn.Low+m.Bias, fn.High+m.Bias
	for a, n := pc, 0; a < hi && n < maxLineScan; n++ {
		var code [16]byte
		k, _ := p.Mem.ReadAt(code[:], a)
		if k == 0 {
			break
		}
		length := p.Arch.InstLen(code[:k])
		if l, ok := m.Bin.LineForPC(a - m.Bias); ok && l.Line == line.Line && l.File == line.File {
			if call, _, ok := p.Arch.DecodeCall(code[:k], a); ok && call {
				st := StepTarget{Site: a, Line: l, fn: fn.Name, fnOff: a - lo, primary: t.Rank}
				if target, direct := p.Arch.CallTarget(code[:k], a); direct {
					st.Callee = calleeName(p, target)
				}
				out = append(out, st)
			}
		}
		a += uint64(length)
	}
	return out, nil
}

// calleeName names the function at a call's target: its debugging information's name, its
// ELF symbol's, or for a PLT stub the function the stub jumps to, when a symbol says so.
func calleeName(p *symbols.Process, target uint64) string {
	if m := p.ModuleAt(target); m != nil {
		if fn := m.Bin.FunctionAt(target - m.Bias); fn != nil {
			return fn.Name
		}
	}
	if sym, off, ok := p.SymbolAt(target); ok && off == 0 {
		return sym.Name
	}
	return ""
}

// StartStepInto starts a step in of thread t that enters the call target names and steps
// over the line's other calls; in all-stop mode the other ranks of the focus step as well,
// into the same call of the same function when they stand in it (else as a plain step in).
func (j *Job) StartStepInto(ctx context.Context, t *Thread, target StepTarget, single bool) error {
	if target.primary != t.Rank {
		return fmt.Errorf("the step target is not one of rank %d's", t.Rank.Num)
	}
	return j.startSteps(ctx, t, StepInto, false, single, &target)
}

// siteIn returns where the target's call lies in a stepper's function, or 0 when the
// stepper stands in another function.
func (tg *StepTarget) siteIn(st *stepper) uint64 {
	p := &st.plan
	if tg == nil || p.fnHi <= p.fnLo {
		return 0
	}
	m := p.proc.ModuleAt(p.pc)
	if m == nil {
		return 0
	}
	if fn := m.Bin.FunctionAt(p.pc - m.Bias); fn == nil || fn.Name != tg.fn {
		return 0
	}
	return p.fnLo + tg.fnOff
}
