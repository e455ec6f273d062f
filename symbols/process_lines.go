package symbols

import (
	"errors"
	"fmt"
)

// RuntimeLocation is a breakpoint location in a process: a run-time address in a module.
type RuntimeLocation struct {
	Location // Addr is the run-time address
	Module   *Module
}

// LineBreakpoints returns where a breakpoint on file:line goes in every module of the
// process that has code for it (run-time addresses).
func (p *Process) LineBreakpoints(file string, line int) ([]RuntimeLocation, error) {
	var out []RuntimeLocation
	var errs []error
	for _, m := range p.mods {
		locs, err := m.Bin.LineBreakpoints(file, line)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, l := range locs {
			l.Addr += m.Bias
			out = append(out, RuntimeLocation{Location: l, Module: m})
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("symbols: no code for %s:%d in any module: %w", file, line, errors.Join(errs...))
	}
	return out, nil
}

// FunctionBreakpoints returns where a breakpoint on a function goes in every module that
// defines it (run-time addresses).
func (p *Process) FunctionBreakpoints(name string) ([]RuntimeLocation, error) {
	var out []RuntimeLocation
	for _, m := range p.mods {
		locs, err := m.Bin.FunctionBreakpoints(name)
		if err != nil {
			continue
		}
		for _, l := range locs {
			l.Addr += m.Bias
			out = append(out, RuntimeLocation{Location: l, Module: m})
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("symbols: no function %q in any module", name)
	}
	return out, nil
}

// LineAt returns the source position of a run-time pc (for a caller frame, pass the return
// address minus one, or use the Frame's Line).
func (p *Process) LineAt(pc uint64) (Line, *Module, bool) {
	m := p.ModuleAt(pc)
	if m == nil {
		return Line{}, nil, false
	}
	l, ok := m.Bin.LineForPC(pc - m.Bias)
	if !ok {
		return Line{}, m, false
	}
	l.Addr += m.Bias
	l.End += m.Bias
	return l, m, true
}

// StepRange returns the run-time address range [lo, hi) of the source line containing pc: a
// source-level step runs until the pc leaves it (and, as gdb does, lands on the start of a
// line, see IsStatementStart).
func (p *Process) StepRange(pc uint64) (lo, hi uint64, ok bool) {
	l, _, ok := p.LineAt(pc)
	if !ok {
		return 0, 0, false
	}
	return l.Addr, l.End, true
}

// IsStatementStart reports whether a run-time pc is the first address of a source line.
func (p *Process) IsStatementStart(pc uint64) bool {
	l, _, ok := p.LineAt(pc)
	return ok && l.Addr == pc
}
