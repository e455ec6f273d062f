package adapter

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/hpcdap/hpcdap/rankset"
	"github.com/hpcdap/hpcdap/symbols"
)

// hpcdap/compareExpression evaluates one expression in every rank (the main thread) and
// groups the ranks by value, as DDT's cross-process comparison does. Without frameLevel, each
// rank evaluates in its innermost frame where the expression can be evaluated (a rank
// blocked in a library call has no locals in its innermost frame).

func (s *Session) onCompareExpressionRequest(req *CompareExpressionRequest) {
	j := s.currentJob(&req.Request)
	if j == nil {
		return
	}
	a := req.Arguments
	expr := strings.TrimSpace(a.Expression)
	if expr == "" {
		s.sendError(&req.Request, errBadArguments, "hpcdap/compareExpression: empty expression")
		return
	}
	if a.FrameLevel != nil && *a.FrameLevel < 0 {
		s.sendError(&req.Request, errBadArguments, "hpcdap/compareExpression: frameLevel must not be negative")
		return
	}
	set, err := j.ranksArg(a.Ranks)
	if err != nil {
		s.sendError(&req.Request, errBadArguments, "hpcdap/compareExpression: "+err.Error())
		return
	}
	ctx, cancel := context.WithTimeout(s.ctx, defaultTimeout)
	defer cancel()
	j.mu.Lock()
	ranks := j.ranksInLocked(set)
	j.mu.Unlock()
	values := make([]string, len(ranks))
	errs := make([]string, len(ranks))
	called := make([]*Thread, len(ranks))
	forEach(len(ranks), func(i int) {
		v, t, e := j.evalOnRank(ctx, ranks[i], expr, a.FrameLevel)
		values[i], called[i] = v, t
		if e != nil {
			errs[i] = e.Error()
		}
	})
	for _, t := range called {
		if t != nil {
			s.invalidateAfterWrite(j, t) // a function ran there
		}
	}
	body := CompareBody{Groups: []CompareGroup{}, Errors: []CompareError{}}
	byValue := map[string]rankset.Set{}
	byErr := map[string]rankset.Set{}
	for i, r := range ranks {
		if errs[i] != "" {
			byErr[errs[i]] = byErr[errs[i]].Add(r.Num)
		} else {
			byValue[values[i]] = byValue[values[i]].Add(r.Num)
		}
	}
	for v, rs := range byValue {
		body.Groups = append(body.Groups, CompareGroup{Value: v, Ranks: rs.String(), Count: rs.Len()})
	}
	for m, rs := range byErr {
		body.Errors = append(body.Errors, CompareError{Message: m, Ranks: rs.String()})
	}
	// The largest group first, then by lowest rank: the odd ones out stand out.
	sort.Slice(body.Groups, func(x, y int) bool {
		gx, gy := body.Groups[x], body.Groups[y]
		if gx.Count != gy.Count {
			return gx.Count > gy.Count
		}
		return byValue[gx.Value].Min() < byValue[gy.Value].Min()
	})
	sort.Slice(body.Errors, func(x, y int) bool {
		return byErr[body.Errors[x].Message].Min() < byErr[body.Errors[y].Message].Min()
	})
	s.respond(&req.Request, body)
}

// evalOnRank evaluates expr in rank r's main thread. called is that thread when the
// expression called a function in it.
func (j *Job) evalOnRank(ctx context.Context, r *Rank, expr string, level *int) (v string, called *Thread, err error) {
	j.mu.Lock()
	state := r.state
	t := r.mainThread()
	j.mu.Unlock()
	if state != rankStopped {
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
		if *level >= len(ts.frames) {
			return "", nil, fmt.Errorf("no frame %d (the stack has %d)", *level, len(ts.frames))
		}
		v, err := evalString(ts.frames[*level], expr, calls)
		return v, nil, err
	}
	var first error
	for _, f := range ts.frames {
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
