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
// blocked in a library call has no locals in its innermost frame).

// EvalOnRank evaluates expr in rank r's main thread. called is that thread when the
// expression called a function in it.
func (j *Job) EvalOnRank(ctx context.Context, r *Rank, expr string, level *int) (v string, called *Thread, err error) {
	j.mu.Lock()
	state := r.state
	t := r.mainThread()
	j.mu.Unlock()
	if state != RankStopped {
		return "", nil, fmt.Errorf("rank is %s", state)
	}
	if t == nil {
		return "", nil, errors.New("no thread")
	}
	ts, err := r.sym.stack(ctx, t.LWP)
	if err != nil {
		return "", nil, err
	}
	calls := newCaller(t, ts)
	defer func() {
		if calls.called {
			called = t
		}
	}()
	if level != nil {
		if *level >= len(ts.Frames) {
			return "", nil, fmt.Errorf("no frame %d (the stack has %d)", *level, len(ts.Frames))
		}
		v, err := evalString(ts.Frames[*level], expr, calls)
		return v, nil, err
	}
	var first error
	for _, f := range ts.Frames {
		if f.Function == nil {
			continue // no debugging information: no scope to evaluate in
		}
		v, err := evalString(f, expr, calls)
		if err == nil {
			return v, nil, nil
		}
		if first == nil {
			first = err
		}
		if calls.called {
			break // a function ran: evaluating again in an outer frame would run it again
		}
	}
	if first == nil {
		first = errors.New("no frame with debugging information")
	}
	return "", nil, first
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
