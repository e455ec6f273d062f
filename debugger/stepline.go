package debugger

import (
	"context"
	"errors"

	"github.com/hpcdap/hpcdap/symbols"
)

// stepPlan is what a step needs to know of where it starts, read while the rank is stopped.
type stepPlan struct {
	pc, sp  uint64
	cfa     uint64 // frame 0's canonical frame address
	retAddr uint64 // frame 1's pc (0: unknown)
	lo, hi  uint64 // run-time range of the current line
	spanHi  uint64 // end of the rows after [lo, hi) that belong to the step's line too (lineSpan)
	line    symbols.Line
	hasLine bool
	fnLo    uint64 // run-time range of the current function
	fnHi    uint64
	proc    *symbols.Process
}

// maxSteps bounds the advances of one source step (each a single step, a StepRange of at
// most maxSteps instructions, or a call run over) before the step runs to the line's
// boundaries instead (a loop inside one line); a StepRange that spends its budget in the
// line's range counts as maxSteps.
const maxSteps = 2000

// prepare reads where the step starts.
func (st *stepper) prepare(ctx context.Context) error {
	ts, err := st.r.sym.stack(ctx, st.lwp)
	if err != nil {
		return err
	}
	p := &st.plan
	p.pc, _ = ts.regs.PC()
	p.sp, _ = ts.regs.SP()
	p.proc = ts.proc
	if len(ts.Frames) > 0 {
		p.cfa = ts.Frames[0].CFA
		for _, f := range ts.Frames[1:] {
			if f.Kind != symbols.FrameInline {
				p.retAddr = f.PC
				break
			}
		}
	}
	st.setRange(p.pc)
	return nil
}

// setRange makes the line and function around pc the step's range.
func (st *stepper) setRange(pc uint64) {
	p := &st.plan
	p.hasLine = false
	p.lo, p.hi, p.fnLo, p.fnHi = pc, pc+1, 0, 0
	m := p.proc.ModuleAt(pc)
	if m == nil {
		return
	}
	if fn := m.Bin.FunctionAt(pc - m.Bias); fn != nil {
		p.fnLo, p.fnHi = fn.Low+m.Bias, fn.High+m.Bias
	}
	if l, ok := m.Bin.LineForPC(pc - m.Bias); ok && l.Line > 0 {
		p.line, p.hasLine = l, true
		p.lo, p.hi = l.Addr+m.Bias, l.End+m.Bias
		if p.hi <= p.lo {
			p.hi = p.lo + 1
		}
	}
}

// lineAt returns the line of a run-time pc and whether pc starts a statement.
func (st *stepper) lineAt(pc uint64) (symbols.Line, bool, bool) {
	m := st.plan.proc.ModuleAt(pc)
	if m == nil {
		return symbols.Line{}, false, false
	}
	l, ok := m.Bin.LineForPC(pc - m.Bias)
	if !ok || l.Line == 0 {
		return l, false, false
	}
	return l, true, m.Bin.IsStatementStart(pc - m.Bias)
}

// perform runs the step; it returns the LWP that ends it.
func (st *stepper) perform(ctx context.Context) (int, error) {
	p := &st.plan
	if st.kind == StepOutOf {
		return st.lwp, st.finishFrame(ctx)
	}
	if st.instr {
		_, err := st.advance(ctx)
		return st.lwp, err
	}
	if !p.hasLine {
		// No line information where the step starts: run back out to the caller, as gdb
		// does, then finish the caller's line unless the return lands on a line start.
		if err := st.finishFrame(ctx); err != nil {
			return st.lwp, err
		}
		if _, ok, start := st.lineStart(p.pc); !ok || start {
			return st.lwp, nil
		}
		st.setRange(p.pc)
	}
	startLine := p.line
	startPC := p.pc
	steps := 0
	for {
		if p.pc != startPC && st.j.bps.isUserSite(st.r, p.pc) {
			// The step reached a breakpoint: gdb reports the breakpoint (if its condition
			// holds) and ends the step there.
			if stop, info := st.j.bps.hit(st.r, st.lwp, p.pc, hitStep); stop && info.reason != "exception" {
				st.end = &info
				return st.lwp, nil
			}
		}
		if steps >= maxSteps {
			if err := st.runToLineEnd(ctx); err != nil {
				return st.lwp, err
			}
			steps = 0
		} else {
			p.spanHi = st.lineSpan(startLine)
			done, err := st.advance(ctx)
			if err != nil || done {
				return st.lwp, err
			}
			steps++
			if st.rangeSpent {
				steps, st.rangeSpent = maxSteps, false
			}
		}
		pc := p.pc
		if pc >= p.lo && pc < p.hi {
			continue
		}
		l, ok, atStart := st.lineStart(pc)
		if !ok {
			// Returned or jumped into code without line information: stop there, as gdb
			// does ("no line number information").
			return st.lwp, nil
		}
		if atStart && (l.Line != startLine.Line || l.File != startLine.File) {
			return st.lwp, nil
		}
		// Mid-line (back in a caller), or another row of the same line: keep stepping.
		st.setRange(pc)
	}
}

// lineSpan returns the end of the rows that follow the current range [lo, hi) without a gap
// and belong to line (the line the step started on) as the range does: the step goes on
// through them without looking (perform), so one StepRange may cover them all. It is hi when
// the range is not of line (back in a caller, mid-line).
func (st *stepper) lineSpan(line symbols.Line) uint64 {
	p := &st.plan
	if !p.hasLine || p.line.Line != line.Line || p.line.File != line.File {
		return p.hi
	}
	m := p.proc.ModuleAt(p.lo)
	if m == nil {
		return p.hi
	}
	hi := p.hi
	for range 256 {
		if p.fnHi != 0 && hi >= p.fnHi {
			break
		}
		l, ok := m.Bin.LineForPC(hi - m.Bias)
		if !ok || l.Line != line.Line || l.File != line.File || l.Addr+m.Bias != hi || l.End <= l.Addr {
			break
		}
		hi = l.End + m.Bias
	}
	return hi
}

// lineStart returns the line of pc and whether pc is the first address of a statement row.
func (st *stepper) lineStart(pc uint64) (symbols.Line, bool, bool) {
	l, ok, stmt := st.lineAt(pc)
	return l, ok, ok && stmt && l.Addr+st.biasAt(pc) == pc
}

// finishFrame runs until the current frame returns to its caller.
func (st *stepper) finishFrame(ctx context.Context) error {
	p := &st.plan
	if p.retAddr == 0 {
		if err := st.refreshRet(ctx); err != nil {
			return err
		}
	}
	if p.retAddr == 0 {
		return errors.New("no caller to return to")
	}
	return st.runTo(ctx, []uint64{p.retAddr}, p.cfa)
}

// biasAt returns the load bias of the module containing pc.
func (st *stepper) biasAt(pc uint64) uint64 {
	if m := st.plan.proc.ModuleAt(pc); m != nil {
		return m.Bias
	}
	return 0
}

// advance executes one instruction of the thread, a call as a whole when stepping over it,
// and, at an instruction that is not a call, the instructions after it while they stay in the
// line's range (stepInRange).
// Stepping into a call whose target has line information stops at the callee's first line
// (done); a callee without line information is run through. A step in with a target steps
// over the other calls.
func (st *stepper) advance(ctx context.Context) (done bool, err error) {
	p := &st.plan
	isCall, next := st.decodeCall(p.pc)
	if isCall && p.sp == 0 {
		if err := st.refresh(ctx); err != nil {
			return false, err
		}
	}
	callSP := p.sp
	if isCall && (st.kind == StepOver || st.site != 0 && p.pc != st.site && !st.instr) {
		return st.instr, st.runTo(ctx, []uint64{next}, callSP)
	}
	if !isCall && !st.instr && p.hi > p.lo {
		hi := max(p.hi, p.spanHi)
		err = st.stepInRange(ctx, p.lo, hi)
		if err == nil && p.pc >= p.lo && p.pc < hi && st.plainInstruction(p.pc) && !st.j.bps.isUserSite(st.r, p.pc) {
			// Still in the range, at an instruction the agent steps on from: the step's
			// budget of instructions is spent (a loop within the line).
			st.rangeSpent = true
		}
	} else {
		err = st.stepInstr(ctx)
	}
	if err != nil {
		return false, err
	}
	if !isCall || st.kind != StepInto || st.instr {
		return st.instr, nil
	}
	// At the callee's entry, the return address on the stack.
	m := p.proc.ModuleAt(p.pc)
	var fn *symbols.Function
	if m != nil {
		fn = m.Bin.FunctionAt(p.pc - m.Bias)
	}
	if _, hasLine, _ := st.lineAt(p.pc); fn == nil || !hasLine {
		return false, st.runTo(ctx, []uint64{next}, callSP)
	}
	target := p.pc
	name := fn.Name
	if fn.LinkageName != "" {
		name = fn.LinkageName
	}
	if locs, err := m.Bin.FunctionBreakpoints(name); err == nil {
		for _, l := range locs {
			if fn.Contains(l.Addr) {
				target = l.Addr + m.Bias
				break
			}
		}
	}
	if target != p.pc {
		if err := st.runTo(ctx, []uint64{target}, 0); err != nil {
			return false, err
		}
	}
	return true, nil
}

// plainInstruction reports whether the instruction at pc decodes and is not a call: one a
// StepRange steps on from (it stops at the others).
func (st *stepper) plainInstruction(pc uint64) bool {
	call, _, ok := st.decodeAt(pc)
	return ok && !call
}

// decodeCall reports whether the instruction at pc is a call, and the address after it.
func (st *stepper) decodeCall(pc uint64) (bool, uint64) {
	call, next, _ := st.decodeAt(pc)
	return call, next
}

// decodeAt decodes the instruction at pc: whether it is a call, the address after it, and
// whether it could be read and decoded at all.
func (st *stepper) decodeAt(pc uint64) (call bool, next uint64, ok bool) {
	var code [16]byte
	n, _ := st.plan.proc.Mem.ReadAt(code[:], pc)
	if n == 0 {
		return false, 0, false
	}
	call, next, ok = st.plan.proc.Arch.DecodeCall(code[:n], pc)
	if !ok {
		return false, 0, false
	}
	return call, next, true
}

// refresh reads the thread's pc and sp now.
func (st *stepper) refresh(ctx context.Context) error {
	gp, fp, err := st.r.sym.registers(ctx, st.lwp)
	if err != nil {
		return err
	}
	regs, err := symbols.RegsFromNative(st.r.sym.Arch(), gp, fp)
	if err != nil {
		return err
	}
	st.plan.pc, _ = regs.PC()
	st.plan.sp, _ = regs.SP()
	return nil
}

// refreshRet learns the current frame's CFA and return address (after entering a function
// without line information).
func (st *stepper) refreshRet(ctx context.Context) error {
	st.r.sym.invalidate()
	ts, err := st.r.sym.stack(ctx, st.lwp)
	if err != nil {
		return err
	}
	st.plan.retAddr, st.plan.cfa = 0, 0
	if len(ts.Frames) > 0 {
		st.plan.cfa = ts.Frames[0].CFA
	}
	for _, f := range ts.Frames[1:] {
		if f.Kind != symbols.FrameInline {
			st.plan.retAddr = f.PC
			break
		}
	}
	st.plan.pc, _ = ts.regs.PC()
	st.plan.sp, _ = ts.regs.SP()
	return nil
}

// runToLineEnd runs to the first statement outside the current line of the function, or to
// the return address: a fast way through a loop that stays on one line.
func (st *stepper) runToLineEnd(ctx context.Context) error {
	p := &st.plan
	var targets []uint64
	m := p.proc.ModuleAt(p.pc)
	if m != nil && p.fnHi > p.fnLo {
		for pc := p.fnLo; pc < p.fnHi && len(targets) < 512; {
			var code [16]byte
			n, _ := p.proc.Mem.ReadAt(code[:], pc)
			length := p.proc.Arch.InstLen(code[:n])
			if (pc < p.lo || pc >= p.hi) && m.Bin.IsStatementStart(pc-m.Bias) {
				targets = append(targets, pc)
			}
			pc += uint64(length)
		}
	}
	if p.retAddr != 0 {
		targets = append(targets, p.retAddr)
	}
	if len(targets) == 0 {
		return errors.New("no way out of the current line")
	}
	return st.runTo(ctx, targets, 0)
}
