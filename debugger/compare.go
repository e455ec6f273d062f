package debugger

import (
	"context"
	"errors"
	"fmt"

	"github.com/hpcdap/hpcdap/symbols"
)

// hpcdap/compareExpression evaluates one expression in every rank (the main thread) and
// groups the ranks by value, as DDT's cross-process comparison does. Without frameLevel, each
// rank evaluates in its innermost frame where the expression can be evaluated (a rank
// blocked in a library call has no locals in its innermost frame). Ranks stopped at the same
// place are evaluated by their agents (compareagent.go); the others, and every rank the
// agents cannot answer for, by the front end (evalIn).

// RankValue is one rank's part of a comparison: its value or why it has none, and the thread a
// function ran in when the expression called one.
type RankValue struct {
	Value  string
	Err    error
	Called *Thread
}

// Compare evaluates expr in the main thread of each of ranks, in frame level when not nil.
func (j *Job) Compare(ctx context.Context, ranks []*Rank, expr string, level *int) []RankValue {
	out := make([]RankValue, len(ranks))
	j.compareByAgents(ctx, ranks, expr, level, out, func(idx []int) {
		ForEach(len(idx), func(k int) {
			i := idx[k]
			e := j.evalIn(ctx, ranks[i], expr, level)
			out[i] = RankValue{Value: e.value, Err: e.err, Called: e.called}
		})
	})
	return out
}

// rankEval is an evaluation in one rank: the value, or why there is none; the frame it was
// evaluated in (an index of stack's frames); whether every frame tried failed on a name
// nothing there has, before the value was found or instead of it (so that the same code gives
// the same frame, or the same error, whatever its values); and the thread a function ran in.
type rankEval struct {
	value  string
	err    error
	stack  *ThreadStack
	frame  int
	byName bool
	called *Thread
}

// evalIn evaluates expr in rank r's main thread, by the front end, telling where the value
// was found; called is that thread when the expression called a function in it.
func (j *Job) evalIn(ctx context.Context, r *Rank, expr string, level *int) (e rankEval) {
	e.frame, e.byName = -1, true
	j.mu.Lock()
	state := r.state
	t := r.mainThread()
	j.mu.Unlock()
	if state != RankStopped {
		e.err = fmt.Errorf("rank is %s", state)
		return e
	}
	if t == nil {
		e.err = errors.New("no thread")
		return e
	}
	ts, err := r.sym.stack(ctx, t.LWP)
	if err != nil {
		e.err = err
		return e
	}
	e.stack = ts
	calls := newCaller(t, ts)
	defer func() {
		if calls.called {
			e.called = t
		}
	}()
	if level != nil {
		if *level >= len(ts.Frames) {
			e.err = fmt.Errorf("no frame %d (the stack has %d)", *level, len(ts.Frames))
			e.byName = false // the stack's depth, not its code
			return e
		}
		e.frame = *level
		e.value, e.err = evalString(ts.Frames[*level], expr, calls)
		var unknown *symbols.UnknownNameError
		e.byName = e.err == nil || errors.As(e.err, &unknown)
		return e
	}
	var first error
	for i, f := range ts.Frames {
		if f.Function == nil {
			continue // no debugging information: no scope to evaluate in
		}
		v, err := evalString(f, expr, calls)
		if err == nil {
			e.value, e.frame = v, i
			return e
		}
		if first == nil {
			first = err
		}
		var unknown *symbols.UnknownNameError
		if !errors.As(err, &unknown) {
			e.byName = false
		}
		if calls.called {
			break // a function ran: evaluating again in an outer frame would run it again
		}
	}
	if first == nil {
		first = errors.New("no frame with debugging information")
	}
	e.err = first
	return e
}

func evalString(f *symbols.Frame, expr string, calls symbols.Caller) (string, error) {
	v, err := f.EvalWith(expr, symbols.EvalOptions{Caller: calls})
	if err != nil {
		return "", err
	}
	if err := v.Fetch(); err != nil {
		return "", err
	}
	return v.String(), nil
}
