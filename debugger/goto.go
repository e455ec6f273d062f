package debugger

import (
	"context"
	"fmt"
)

// Goto moves a stopped thread to a line of the function it is in, as gdb's jump does: the
// thread's pc becomes the line's address (for a line without code, the next line's that has),
// and nothing else changes: no code runs, variables keep their values. file is the path the
// debugging information records (or a suffix of it). A line in another function, or in no
// function, is refused: the frame would not match the code. It returns the line gone to.
func (j *Job) Goto(ctx context.Context, t *Thread, file string, line int) (int, error) {
	ts, m, pc, err := j.stoppedAt(ctx, t)
	if err != nil {
		return 0, err
	}
	fn := m.Bin.FunctionAt(pc - m.Bias)
	if fn == nil {
		return 0, fmt.Errorf("no function with line information at pc %#x", pc)
	}
	locs, err := m.Bin.LineBreakpoints(file, line)
	if err != nil {
		return 0, fmt.Errorf("%s:%d: %w", file, line, err)
	}
	for _, l := range locs {
		if !fn.Contains(l.Addr) {
			continue
		}
		a := ts.proc.Arch
		if err := j.SetRegister(ctx, t, ts, a.RegName(a.PCReg), l.Addr+m.Bias); err != nil {
			return 0, fmt.Errorf("set pc: %w", err)
		}
		t.DropStack()
		return l.Line, nil
	}
	if len(locs) > 0 && locs[0].Function != "" {
		return 0, fmt.Errorf("%s:%d is in %s, not in %s where the thread is: a jump to another function is refused",
			file, line, locs[0].Function, fn.Name)
	}
	return 0, fmt.Errorf("%s:%d has no code in %s, where the thread is", file, line, fn.Name)
}
