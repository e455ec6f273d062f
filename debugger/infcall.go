package debugger

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/hpcdap/hpcdap/cdti"
	"github.com/hpcdap/hpcdap/procimage"
	"github.com/hpcdap/hpcdap/symbols"
)

// Function calls in expressions. The evaluator (symbols) classifies a call; the agent runs it
// in one stopped thread with the CallFunction extension, which saves the thread's registers,
// sets up the arguments and a return address on a trap at the program's entry point, runs the
// thread alone and restores it on return, on a signal and on a timeout. No stop or continue
// reaches the run control of the session: the rank stays stopped as it was.

// CallTimeout bounds one function call in an expression unless the launch's callTimeout
// says otherwise.
const CallTimeout = 10 * time.Second

// ThreadCaller runs functions in one thread of a rank (symbols.Caller).
type ThreadCaller struct {
	rs      *rankSymbols
	lwp     int
	proc    *symbols.Process // the thread's process, to name where a signal stopped a call
	timeout time.Duration
	// called reports that a function ran: the process may have changed.
	called bool
}

// newCaller returns the Caller of thread t, whose stack ts is.
func newCaller(t *Thread, ts *ThreadStack) *ThreadCaller {
	return &ThreadCaller{rs: &t.Rank.sym, lwp: t.LWP, proc: ts.proc, timeout: t.Rank.job.callTimeout}
}

// noCaller refuses every call with a fixed error.
type noCaller struct{ err error }

func (n noCaller) Call(*symbols.Call) (uint64, error) { return 0, n.err }

// Call runs c in the thread and returns the function's value.
func (tc *ThreadCaller) Call(c *symbols.Call) (uint64, error) {
	entry, toc := c.Entry, c.TOC
	if c.IFunc {
		// The symbol names a resolver: call it with the hardware capabilities for the
		// address of the implementation this machine uses.
		hwcap := tc.rs.auxValue(procimage.AtHwcap)
		addr, err := tc.run(c.Name, &cdti.CallFunction{Entry: entry, TOC: toc, Return: cdti.CallInt,
			Args: []cdti.CallArg{{Kind: cdti.CallInt, Value: hwcap}}})
		if err != nil {
			return 0, err
		}
		entry, toc = addr, 0
		if tc.proc.Arch.ELFv1() {
			// The resolver returns a function descriptor.
			if entry, toc, err = tc.proc.ReadDescriptor(addr); err != nil {
				return 0, fmt.Errorf("call %s: read the descriptor its resolver returned: %w", c.Name, err)
			}
		}
	}
	cmd := &cdti.CallFunction{Entry: entry, TOC: toc, Return: cdti.CallKind(c.Return), Data: c.Data}
	for _, a := range c.Args {
		cmd.Args = append(cmd.Args, cdti.CallArg{Kind: cdti.CallKind(a.Kind), Value: a.Bits})
	}
	return tc.run(c.Name, cmd)
}

// run sends one CallFunction to the agent and turns its outcome into a value or an error.
func (tc *ThreadCaller) run(name string, cmd *cdti.CallFunction) (uint64, error) {
	r := tc.rs.rank
	if r.node == nil || r.node.client == nil {
		return 0, fmt.Errorf("call %s: rank %d has no live process (a core file cannot run functions)", name, r.Num)
	}
	if r.node.cnk.Load() {
		return 0, errCNKNoCalls(r, name)
	}
	if len(cmd.Args) > cdti.MaxCallArgs {
		return 0, fmt.Errorf("call %s: %d arguments (at most %d)", name, len(cmd.Args), cdti.MaxCallArgs)
	}
	if len(cmd.Data) > cdti.MaxCallData {
		return 0, fmt.Errorf("call %s: %d bytes of literal arguments (at most %d)", name, len(cmd.Data), cdti.MaxCallData)
	}
	cmd.ThreadID = uint32(tc.lwp)
	cmd.TimeoutMS = uint32(tc.timeout / time.Millisecond)
	ctx, cancel := context.WithTimeout(tc.rs.rank.job.ctx, tc.timeout+DefaultTimeout)
	defer cancel()
	tc.called = true
	ack, err := r.node.client.CallFunction(ctx, uint32(r.Num), cmd)
	// Whatever happened, the function may have written memory.
	tc.rs.mu.Lock()
	mem := tc.rs.mem
	tc.rs.mu.Unlock()
	if mem != nil {
		mem.reset()
	}
	switch {
	case errors.Is(err, cdti.ErrNotSupported):
		return 0, fmt.Errorf("call %s: calling functions is not available on rank %d%s (its agent does not offer it)", name, r.Num, r.Where())
	case errors.Is(err, cdti.CmdTimeout):
		return 0, fmt.Errorf("call %s: the function ran longer than %v and could not be interrupted on rank %d; the thread runs on with the call's registers", name, tc.timeout, r.Num)
	case errors.Is(err, cdti.CmdProcessExiting):
		return 0, fmt.Errorf("The program (rank %d) exited while in the function %s called from the expression.", r.Num, name)
	case errors.Is(err, cdti.CmdParmErr):
		return 0, fmt.Errorf("call %s: rank %d, LWP %d cannot run a function now (it must be stopped after the program's start)", name, r.Num, tc.lwp)
	case err != nil:
		return 0, fmt.Errorf("call %s: %w", name, err)
	}
	switch ack.Outcome {
	case cdti.CallReturned:
		return ack.Value, nil
	case cdti.CallSignaled:
		sig := int(ack.Signal)
		what := SignalName(sig)
		if d := SignalDescription(sig); d != what {
			what += " (" + d + ")"
		}
		return 0, fmt.Errorf("The program being debugged was signaled while in a function called from the expression: "+
			"%s%s. The state before the call was restored; the evaluation of the expression containing the function (%s) was abandoned.",
			what, tc.Where(ack.PC), name)
	case cdti.CallTimedOut:
		return 0, fmt.Errorf("The function %s called from the expression did not return within %v; it was interrupted%s "+
			"and the state before the call was restored.", name, tc.timeout, tc.Where(ack.PC))
	case cdti.CallThreadExited:
		return 0, fmt.Errorf("The thread (LWP %d) exited while in the function %s called from the expression.", tc.lwp, name)
	}
	return 0, fmt.Errorf("call %s: unknown outcome %v", name, ack.Outcome)
}

// Where names a code address for messages: " in f at file.c:12", or " at 0x401136".
func (tc *ThreadCaller) Where(pc uint64) string {
	if pc == 0 {
		return ""
	}
	s := ""
	if sym, _, ok := tc.proc.SymbolAt(pc); ok {
		s = " in " + sym.Name
	}
	if l, _, ok := tc.proc.LineAt(pc); ok {
		return fmt.Sprintf("%s at %s:%d", s, filepath.Base(l.File), l.Line)
	}
	return fmt.Sprintf("%s at %#x", s, pc)
}

// auxValue reads one entry of the rank's auxiliary vector (0 if absent).
func (rs *rankSymbols) auxValue(typ uint64) uint64 {
	ctx, cancel := context.WithTimeout(rs.rank.job.ctx, DefaultTimeout)
	defer cancel()
	res, err := rs.client().Query(ctx, rs.num(), &cdti.GetAuxVectors{})
	if err != nil || res[0].Code != cdti.CmdSuccess {
		return 0
	}
	if a, ok := res[0].Ack.(*cdti.GetAuxVectorsAck); ok {
		return procimage.AuxvFromWords(a.Words)[typ]
	}
	return 0
}

// GlobalScope returns a process to evaluate expressions without a frame in: the first
// stopped rank of the focus.
func (j *Job) GlobalScope() (*symbols.Process, *Thread, error) {
	for _, r := range j.focusRanks() {
		j.mu.Lock()
		stopped := r.state == RankStopped
		t := r.mainThread()
		j.mu.Unlock()
		if !stopped || t == nil {
			continue
		}
		ctx, cancel := context.WithTimeout(j.ctx, DefaultTimeout)
		ts, err := r.sym.stack(ctx, t.LWP)
		cancel()
		if err != nil {
			return nil, nil, err
		}
		return ts.proc, t, nil
	}
	return nil, nil, errors.New("no rank of the focus is stopped")
}

// EvalOptions returns the options to evaluate an expression with in thread t of process p:
// function calls run in t, unless the job cannot run (a core file) or refuse, when not nil,
// says why calls are not made. The caller it returns, if any, says afterwards whether a
// function was called (MadeCall).
func (j *Job) EvalOptions(t *Thread, p *symbols.Process, refuse error) (symbols.EvalOptions, *ThreadCaller) {
	if err := j.Frozen(); err != nil {
		return symbols.EvalOptions{Caller: noCaller{err}}, nil
	}
	if refuse != nil {
		return symbols.EvalOptions{Caller: noCaller{refuse}}, nil
	}
	c := &ThreadCaller{rs: &t.Rank.sym, lwp: t.LWP, proc: p, timeout: j.callTimeout}
	return symbols.EvalOptions{Caller: c}, c
}

// MadeCall reports whether a function was called through c.
func (c *ThreadCaller) MadeCall() bool { return c != nil && c.called }
