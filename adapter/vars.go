package adapter

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/google/go-dap"
	"github.com/hpcdap/hpcdap/debugger"
	"github.com/hpcdap/hpcdap/symbols"
)

// maxNamedChildren caps the members listed for one struct; arrays are paged instead.
const maxNamedChildren = 1000

func (s *Conn) onVariablesRequest(req *dap.VariablesRequest) {
	j := s.currentJob(&req.Request)
	if j == nil {
		return
	}
	v, ok := s.handles.get(req.Arguments.VariablesReference)
	ref, isRef := v.(*varRef)
	if !ok || !isRef {
		s.sendError(&req.Request, errStale, fmt.Sprintf("variables: reference %d is not valid at this stop",
			req.Arguments.VariablesReference))
		return
	}
	hex := req.Arguments.Format != nil && req.Arguments.Format.Hex
	var out []dap.Variable
	var err error
	switch ref.kind {
	case varLocals, varArgs:
		out, err = s.frameVariables(j, ref, hex)
	case varRegisters:
		out = s.registerVariables(ref, hex)
	case varGlobals:
		out, err = s.globalVariables(j, ref, hex)
	case varValue:
		out, err = s.childVariables(j, ref, req.Arguments.Start, req.Arguments.Count, req.Arguments.Filter, hex)
	}
	if err != nil {
		s.sendError(&req.Request, errVariables, "variables: "+err.Error())
		return
	}
	if out == nil {
		out = []dap.Variable{}
	}
	resp := &dap.VariablesResponse{Response: newResponse(&req.Request)}
	resp.Body.Variables = out
	s.send(resp)
}

// frameVariables lists a frame's locals or arguments.
func (s *Conn) frameVariables(j *debugger.Job, ref *varRef, hex bool) ([]dap.Variable, error) {
	f := ref.frame.frame
	var vars []*symbols.Variable
	var err error
	if ref.kind == varArgs {
		vars, err = f.Args()
	} else {
		vars, err = f.Locals()
	}
	if err != nil && len(vars) == 0 {
		if ref.kind == varLocals && f.Function == nil {
			return nil, nil // no debugging information: nothing to list
		}
		return nil, err
	}
	out := make([]dap.Variable, 0, len(vars))
	seen := map[string]int{}
	for _, v := range vars {
		if v.Artificial && ref.kind == varLocals {
			continue
		}
		name := v.Name
		// A shadowed variable keeps its place but is named so the client can tell them apart.
		if n := seen[name]; n > 0 {
			name = fmt.Sprintf("%s (%d)", name, n+1)
		}
		seen[v.Name]++
		val := v.Value()
		out = append(out, s.variable(j, ref.frame, name, v.Name, val, hex))
	}
	return out, nil
}

// variable turns a value into a DAP variable, with a reference for its children.
func (s *Conn) variable(j *debugger.Job, fr *frameRef, name, expr string, v *symbols.Value, hex bool) dap.Variable {
	dv := dap.Variable{Name: name, EvaluateName: expr}
	if v == nil {
		dv.Value = "<unavailable>"
		return dv
	}
	if v.Type != nil {
		dv.Type = v.Type.String()
	}
	dv.Value = formatValue(v, hex)
	if n := v.NumChildren(); n > 0 {
		dv.VariablesReference = s.handles.add(fr.thread.Rank.Num, &varRef{kind: varValue, frame: fr, value: v, expr: expr})
		st := v.Type.Strip()
		if st != nil && st.Kind == symbols.KindArray {
			dv.IndexedVariables = n
		} else if n > 1 {
			dv.NamedVariables = n
		}
	}
	dv.MemoryReference = memoryReference(v)
	return dv
}

// memoryReference is the address a value points to (pointers) or lives at.
func memoryReference(v *symbols.Value) string {
	if st := v.Type.Strip(); st != nil && st.Kind == symbols.KindPointer {
		if u, err := v.Uint(); err == nil && u != 0 {
			return fmt.Sprintf("%#x", u)
		}
		return ""
	}
	if a, ok := v.Address(); ok {
		return fmt.Sprintf("%#x", a)
	}
	return ""
}

// formatValue renders a value as gdb does, integers in hex when asked.
func formatValue(v *symbols.Value, hex bool) string {
	if err := v.Err(); err != nil && !v.OptimizedOut() {
		return "<error: " + err.Error() + ">"
	}
	if hex {
		if st := v.Type.Strip(); st != nil {
			switch st.Kind {
			case symbols.KindInt, symbols.KindUint, symbols.KindEnum, symbols.KindBool, symbols.KindChar:
				if u, err := v.Uint(); err == nil {
					if st.Size > 0 && st.Size < 8 {
						u &= 1<<(8*uint(st.Size)) - 1
					}
					return fmt.Sprintf("%#x", u)
				}
			}
		}
	}
	return v.String()
}

// childVariables expands a value: members, array elements (paged), the pointee.
func (s *Conn) childVariables(j *debugger.Job, ref *varRef, start, count int, filter string, hex bool) ([]dap.Variable, error) {
	// The contents are read again: a write since the reference was made (setVariable on one of
	// its children, evaluate, writeMemory) must show. Pages are cached per stop, so this costs
	// no round trip when nothing changed.
	v := ref.value.Reread()
	n := v.NumChildren()
	st := v.Type.Strip()
	isArray := st != nil && st.Kind == symbols.KindArray
	if filter == "named" && isArray {
		return nil, nil
	}
	if filter == "indexed" && !isArray {
		return nil, nil
	}
	if !isArray {
		start = 0
		count = min(n, maxNamedChildren)
	} else if count == 0 {
		count = n - start
	}
	// Children name themselves after the expression of their parent.
	saved := v.Name
	v.Name = ref.expr
	kids, err := v.Children(start, count)
	v.Name = saved
	if err != nil {
		return nil, err
	}
	out := make([]dap.Variable, 0, len(kids))
	for _, c := range kids {
		// A pointer to an aggregate shows the aggregate's members directly, as lldb does.
		if st != nil && st.Kind == symbols.KindPointer && len(kids) == 1 {
			if ct := c.Value.Type.Strip(); ct != nil && (ct.Kind == symbols.KindStruct || ct.Kind == symbols.KindUnion) {
				return s.childVariables(j, &varRef{kind: varValue, frame: ref.frame, value: c.Value,
					expr: arrowBase(ref.expr)}, 0, 0, "", hex)
			}
		}
		out = append(out, s.variable(j, ref.frame, c.Name, c.Expr, c.Value, hex))
	}
	return out, nil
}

// arrowBase turns "p" into "(*p)" so that member expressions read "(*p).x".
func arrowBase(expr string) string {
	return "(*" + expr + ")"
}

// registerVariables lists the Registers scope: the thread's register sets for the innermost
// frame (a BG/Q CNK's by their BG/Q names), unwound values for outer frames.
func (s *Conn) registerVariables(ref *varRef, hex bool) []dap.Variable {
	fr := ref.frame
	var out []dap.Variable
	if fr.level == 0 {
		for _, r := range fr.ts.Registers() {
			out = append(out, dap.Variable{Name: r.Name, Value: r.Value, EvaluateName: r.EvaluateName})
		}
		return out
	}
	for _, rv := range fr.frame.Registers() {
		out = append(out, dap.Variable{Name: rv.Name, Value: fmt.Sprintf("%#x", rv.Value), EvaluateName: "$" + rv.Name})
	}
	return out
}

// globalVariables lists the statics of the frame's compile unit.
func (s *Conn) globalVariables(j *debugger.Job, ref *varRef, hex bool) ([]dap.Variable, error) {
	vals, err := ref.frame.frame.Statics()
	if err != nil {
		return nil, err
	}
	out := make([]dap.Variable, 0, len(vals))
	for _, v := range vals {
		out = append(out, s.variable(j, ref.frame, v.Name, v.Name, v, hex))
	}
	return out, nil
}

func (s *Conn) onSetVariableRequest(req *dap.SetVariableRequest) {
	j := s.currentJob(&req.Request)
	if j == nil {
		return
	}
	a := req.Arguments
	v, ok := s.handles.get(a.VariablesReference)
	ref, isRef := v.(*varRef)
	if !ok || !isRef {
		s.sendError(&req.Request, errSetVariable, fmt.Sprintf("setVariable: reference %d is not valid at this stop", a.VariablesReference))
		return
	}
	if err := j.Frozen(); err != nil {
		s.sendError(&req.Request, errSetVariable, "setVariable: "+err.Error())
		return
	}
	hex := a.Format != nil && a.Format.Hex
	if ref.kind == varRegisters {
		s.setRegister(req, j, ref)
		return
	}
	target := a.Name
	if ref.kind == varValue {
		// Find the child's expression among the value's children.
		kids, _ := s.childVariables(j, ref, 0, 0, "", false)
		target = ""
		for _, k := range kids {
			if k.Name == a.Name {
				target = k.EvaluateName
			}
		}
		if target == "" {
			s.sendError(&req.Request, errSetVariable, fmt.Sprintf("setVariable: %s has no member %q", ref.expr, a.Name))
			return
		}
	}
	if i := strings.Index(target, " ("); i > 0 && ref.kind != varValue {
		target = target[:i] // a shadowed local: assign the innermost one
	}
	f := ref.frame.frame
	res, err := f.Eval("(" + target + ") = (" + a.Value + ")")
	if err != nil {
		s.sendError(&req.Request, errSetVariable, fmt.Sprintf("setVariable %s: %v", target, err))
		return
	}
	s.invalidateAfterWrite(j, ref.frame.thread)
	resp := &SetVariableResponse{Response: newResponse(&req.Request)}
	nv := s.variable(j, ref.frame, a.Name, target, res, hex)
	resp.Body.Value, resp.Body.Type = nv.Value, nv.Type
	resp.Body.VariablesReference = nv.VariablesReference
	resp.Body.NamedVariables, resp.Body.IndexedVariables = nv.NamedVariables, nv.IndexedVariables
	resp.Body.MemoryReference = nv.MemoryReference
	s.send(resp)
}

// setRegister writes one register of the innermost frame.
func (s *Conn) setRegister(req *dap.SetVariableRequest, j *debugger.Job, ref *varRef) {
	fr := ref.frame
	if fr.level != 0 {
		s.sendError(&req.Request, errSetVariable, "setVariable: only the innermost frame's registers can be written")
		return
	}
	val, err := strconv.ParseUint(strings.TrimSpace(req.Arguments.Value), 0, 64)
	if err != nil {
		if iv, ierr := strconv.ParseInt(strings.TrimSpace(req.Arguments.Value), 0, 64); ierr == nil {
			val, err = uint64(iv), nil
		}
	}
	if err != nil {
		s.sendError(&req.Request, errSetVariable, fmt.Sprintf("setVariable: %q is not an integer", req.Arguments.Value))
		return
	}
	ctx, cancel := context.WithTimeout(s.ctx, debugger.DefaultTimeout)
	err = j.SetRegister(ctx, fr.thread, fr.ts, req.Arguments.Name, val)
	cancel()
	if err != nil {
		s.sendError(&req.Request, errSetVariable, fmt.Sprintf("setVariable %s: %v", req.Arguments.Name, err))
		return
	}
	s.invalidateAfterWrite(j, fr.thread)
	resp := &dap.SetVariableResponse{Response: newResponse(&req.Request)}
	resp.Body.Value = fmt.Sprintf("%#x", val)
	s.send(resp)
}

// invalidateAfterWrite drops what the write may have changed and tells the client to refresh.
func (s *Conn) invalidateAfterWrite(j *debugger.Job, t *debugger.Thread) {
	t.DropStack()
	s.mu.Lock()
	inval := s.client.SupportsInvalidatedEvent
	s.mu.Unlock()
	if inval {
		s.sendEvent("invalidated", map[string]any{"areas": []string{"variables"}, "threadId": t.ID})
	}
}

func (s *Conn) onEvaluateRequest(req *dap.EvaluateRequest) {
	j := s.currentJob(&req.Request)
	if j == nil {
		return
	}
	a := req.Arguments
	expr := strings.TrimSpace(a.Expression)
	if expr == "" {
		s.sendError(&req.Request, errEvaluate, "evaluate: empty expression")
		return
	}
	var fr *frameRef
	if a.FrameId != 0 {
		if fr = s.frame(&req.Request, j, a.FrameId); fr == nil {
			return
		}
	}
	var val *symbols.Value
	var err error
	var calls *debugger.ThreadCaller
	var refuse error
	if !callsAllowed(a.Context) {
		refuse = errHoverCall
	}
	opts := func(t *debugger.Thread, p *symbols.Process) symbols.EvalOptions {
		var o symbols.EvalOptions
		o, calls = j.EvalOptions(t, p, refuse)
		return o
	}
	if fr != nil {
		val, err = fr.frame.EvalWith(expr, opts(fr.thread, fr.frame.Process()))
	} else {
		var p *symbols.Process
		var t *debugger.Thread
		p, t, err = j.GlobalScope()
		if err == nil {
			val, err = p.EvalWith(expr, opts(t, p))
			fr = &frameRef{thread: t}
		}
	}
	if err == nil {
		err = val.Fetch()
	}
	called := calls.MadeCall()
	if called && fr.thread != nil {
		s.invalidateAfterWrite(j, fr.thread) // the function may have changed what the client shows
	}
	if err != nil {
		s.sendError(&req.Request, errEvaluate, err.Error())
		return
	}
	if hasAssignment(expr) && fr.thread != nil && !called {
		s.invalidateAfterWrite(j, fr.thread)
	}
	hex := a.Format != nil && a.Format.Hex
	dv := s.variable(j, fr, expr, expr, val, hex)
	resp := &dap.EvaluateResponse{Response: newResponse(&req.Request)}
	resp.Body.Result = dv.Value
	if a.Context == "repl" || a.Context == "clipboard" {
		resp.Body.Result = val.PrintString()
		if hex {
			resp.Body.Result = dv.Value
		}
	}
	resp.Body.Type = dv.Type
	resp.Body.VariablesReference = dv.VariablesReference
	resp.Body.NamedVariables, resp.Body.IndexedVariables = dv.NamedVariables, dv.IndexedVariables
	resp.Body.MemoryReference = dv.MemoryReference
	s.send(resp)
}

// hasAssignment reports whether an expression assigns (=, +=, ...), outside string and
// character literals; comparisons (==, !=, <=, >=) do not count.
func hasAssignment(expr string) bool {
	quote := byte(0)
	for i := 0; i < len(expr); i++ {
		c := expr[i]
		switch {
		case quote != 0:
			if c == '\\' {
				i++
			} else if c == quote {
				quote = 0
			}
		case c == '"' || c == '\'':
			quote = c
		case c == '=':
			next := byte(0)
			if i+1 < len(expr) {
				next = expr[i+1]
			}
			prev := byte(0)
			if i > 0 {
				prev = expr[i-1]
			}
			if next == '=' {
				i++ // ==
				continue
			}
			if prev == '!' || prev == '<' || prev == '>' || prev == '=' {
				continue
			}
			return true
		}
	}
	return false
}

// callsAllowed says whether an evaluate request of DAP context ctx may call functions: not on
// hover, where merely pointing at a call in the editor must not run code.
func callsAllowed(ctx string) bool { return ctx != "hover" }

// errHoverCall is the answer to a call on hover.
var errHoverCall = errors.New("function calls are not evaluated on hover; evaluate the expression in the debug console or as a watch")
