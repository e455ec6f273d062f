package adapter

import (
	"context"
	"fmt"
	"math/bits"
	"path/filepath"
	"sort"
	"strings"

	"github.com/google/go-dap"
	"github.com/hpcdap/hpcdap/debugger"
	"github.com/hpcdap/hpcdap/rankset"
	"github.com/hpcdap/hpcdap/symbols"
)

// dapBreakpoint reports a breakpoint's state: verified once it resolved and is planted on at
// least one rank; the message names the ranks where planting failed.
func (s *Conn) dapBreakpoint(bp *debugger.Breakpoint) Breakpoint {
	out := Breakpoint{Breakpoint: dap.Breakpoint{Id: bp.ID}}
	switch {
	case bp.Refused != "":
		out.Message, out.Reason = bp.Refused, "failed"
		if bp.Kind == debugger.BPSource {
			out.Source = &dap.Source{Name: filepath.Base(bp.Path), Path: bp.Path}
			out.Line = s.lineOut(bp.Line)
		}
		return out
	case bp.Kind == debugger.BPData:
		// Armed where the rank had a slot left; verified while at least one rank watches.
		out.Verified = len(bp.Failures) < bp.Ranks.Len()
		if len(bp.Failures) > 0 {
			out.Message = failureText(bp.Failures)
			if !out.Verified {
				out.Reason = "failed"
			}
		}
		return out
	case !bp.Resolved:
		out.Message = bp.Message
		out.Reason = "pending"
	case len(bp.Failures) > 0 && bp.Planted == 0:
		out.Message = failureText(bp.Failures)
		out.Reason = "failed"
	default:
		out.Verified = true
		if len(bp.Failures) > 0 {
			out.Message = failureText(bp.Failures)
		}
	}
	if bp.Resolved && bp.Actual.File != "" {
		file := s.sources.paths.toEditor(bp.Actual.File)
		out.Source = &dap.Source{Name: filepath.Base(file), Path: file}
		out.Line = s.lineOut(bp.Actual.Line)
	} else if bp.Kind == debugger.BPSource {
		out.Source = &dap.Source{Name: filepath.Base(bp.Path), Path: bp.Path}
		out.Line = s.lineOut(bp.Line)
	}
	if bp.Resolved && bp.Kind == debugger.BPInstruction {
		out.InstructionReference = fmt.Sprintf("%#x", bp.InstrRef)
	}
	return out
}

// failureText summarises planting failures by rank.
func failureText(f map[int]string) string {
	byMsg := map[string]rankset.Set{}
	for r, m := range f {
		byMsg[m] = byMsg[m].Add(r)
	}
	var parts []string
	for m, set := range byMsg {
		parts = append(parts, fmt.Sprintf("ranks %s: %s", set, m))
	}
	sort.Strings(parts)
	return "not planted on " + strings.Join(parts, "; ")
}

// breakpointsBody reports the breakpoints a set request ended with, in its order.
func (s *Conn) breakpointsBody(j *debugger.Job, list []*debugger.Breakpoint) BreakpointsBody {
	out := BreakpointsBody{Breakpoints: []Breakpoint{}}
	for _, bp := range j.Snapshots(list) {
		out.Breakpoints = append(out.Breakpoints, s.dapBreakpoint(bp))
	}
	return out
}

// bpSpec is one breakpoint of a set request as the client sent it: where (invalid: why it
// names no place), and its condition, hit condition and log message.
type bpSpec struct {
	at                *debugger.Breakpoint
	invalid           error
	cond, hit, logMsg string
}

// setAndAnswer runs a set request of n breakpoints through the engine's one path and answers
// it with its own response type (made by respond). Conditions, hit conditions and log messages
// are checked here, once: a bad one fails the whole request and changes nothing.
func (s *Conn) setAndAnswer(j *debugger.Job, req *dap.Request, set debugger.BPSet, n int, spec func(i int) bpSpec,
	respond func(dap.Response, BreakpointsBody) dap.Message) {
	reqs := make([]debugger.BPRequest, n)
	for i := range reqs {
		sp := spec(i)
		meta, err := debugger.NewBPMeta(sp.cond, sp.hit, sp.logMsg)
		if err != nil {
			s.sendError(req, errBreakpoints, req.Command+": "+err.Error())
			return
		}
		reqs[i] = debugger.BPRequest{At: sp.at, Meta: meta}
		if sp.invalid != nil {
			reqs[i].Invalid = sp.invalid.Error()
		}
	}
	ctx, cancel := context.WithTimeout(s.ctx, debugger.DefaultTimeout)
	defer cancel()
	set.Owner = s.id // the client's own list: other clients of a shared job keep theirs
	list := j.SetBreakpoints(ctx, set, reqs)
	body := s.breakpointsBody(j, list)
	s.send(respond(newResponse(req), body))
}

func (s *Conn) onSetBreakpointsRequest(req *dap.SetBreakpointsRequest) {
	j := s.currentJob(&req.Request)
	if j == nil {
		return
	}
	a := req.Arguments
	path := a.Source.Path
	if path == "" {
		path = a.Source.Name
	}
	if path == "" {
		s.sendError(&req.Request, errBadArguments, "setBreakpoints: the source has no path")
		return
	}
	sbs := a.Breakpoints
	if sbs == nil {
		for _, l := range a.Lines {
			sbs = append(sbs, dap.SourceBreakpoint{Line: l})
		}
	}
	s.setAndAnswer(j, &req.Request, debugger.BPSet{Kind: debugger.BPSource, File: filepath.Clean(path)}, len(sbs),
		func(i int) bpSpec {
			sb := sbs[i]
			return bpSpec{at: &debugger.Breakpoint{Kind: debugger.BPSource, Path: path, DebugPath: s.sources.paths.toDebug(path), Line: s.lineIn(sb.Line)}, cond: sb.Condition, hit: sb.HitCondition, logMsg: sb.LogMessage}
		},
		func(r dap.Response, b BreakpointsBody) dap.Message {
			return &SetBreakpointsResponse{Response: r, Body: b}
		})
}

func (s *Conn) onSetFunctionBreakpointsRequest(req *dap.SetFunctionBreakpointsRequest) {
	j := s.currentJob(&req.Request)
	if j == nil {
		return
	}
	fbs := req.Arguments.Breakpoints
	s.setAndAnswer(j, &req.Request, debugger.BPSet{Kind: debugger.BPFunction}, len(fbs),
		func(i int) bpSpec {
			fb := fbs[i]
			return bpSpec{at: &debugger.Breakpoint{Kind: debugger.BPFunction, Fn: strings.TrimSpace(fb.Name)}, cond: fb.Condition, hit: fb.HitCondition}
		},
		func(r dap.Response, b BreakpointsBody) dap.Message {
			return &SetFunctionBreakpointsResponse{Response: r, Body: b}
		})
}

func (s *Conn) onSetInstructionBreakpointsRequest(req *dap.SetInstructionBreakpointsRequest) {
	j := s.currentJob(&req.Request)
	if j == nil {
		return
	}
	ctx, cancel := context.WithTimeout(s.ctx, debugger.DefaultTimeout)
	defer cancel()
	ibs := req.Arguments.Breakpoints
	s.setAndAnswer(j, &req.Request, debugger.BPSet{Kind: debugger.BPInstruction}, len(ibs),
		func(i int) bpSpec {
			ib := ibs[i]
			at, invalid := j.InstructionAt(ctx, ib.InstructionReference, ib.Offset)
			if invalid != nil {
				at = &debugger.Breakpoint{Kind: debugger.BPInstruction}
			}
			return bpSpec{at: at, invalid: invalid, cond: ib.Condition, hit: ib.HitCondition}
		},
		func(r dap.Response, b BreakpointsBody) dap.Message {
			return &SetInstructionBreakpointsResponse{Response: r, Body: b}
		})
}

func (s *Conn) onSetDataBreakpointsRequest(req *SetDataBreakpointsRequest) {
	j := s.currentJob(&req.Request)
	if j == nil {
		return
	}
	dbs := req.Arguments.Breakpoints
	s.setAndAnswer(j, &req.Request, debugger.BPSet{Kind: debugger.BPData}, len(dbs),
		func(i int) bpSpec {
			db := dbs[i]
			d, invalid := debugger.ParseDataID(db.DataId)
			if invalid == nil {
				d.Access, invalid = debugger.ParseAccessType(db.AccessType)
			}
			return bpSpec{at: &debugger.Breakpoint{Kind: debugger.BPData, Data: d}, invalid: invalid, cond: db.Condition, hit: db.HitCondition}
		},
		func(r dap.Response, b BreakpointsBody) dap.Message {
			return &SetDataBreakpointsResponse{Response: r, Body: b}
		})
}

func (s *Conn) onSetExceptionBreakpointsRequest(req *dap.SetExceptionBreakpointsRequest) {
	j := s.currentJob(&req.Request)
	stop := false
	for _, f := range req.Arguments.Filters {
		if f == "signals" {
			stop = true
		}
	}
	for _, fo := range req.Arguments.FilterOptions {
		if fo.FilterId == "signals" {
			stop = true
		}
	}
	if j != nil {
		j.SetSignalStop(stop)
	} else {
		return
	}
	resp := &dap.SetExceptionBreakpointsResponse{Response: newResponse(&req.Request)}
	resp.Body.Breakpoints = []dap.Breakpoint{}
	for range req.Arguments.Filters {
		resp.Body.Breakpoints = append(resp.Body.Breakpoints, dap.Breakpoint{Verified: true})
	}
	s.send(resp)
}

func (s *Conn) onBreakpointLocationsRequest(req *dap.BreakpointLocationsRequest) {
	j := s.currentJob(&req.Request)
	if j == nil {
		return
	}
	a := req.Arguments
	ctx, cancel := context.WithTimeout(s.ctx, debugger.DefaultTimeout)
	defer cancel()
	bins := j.Binaries(ctx)
	first := s.lineIn(a.Line)
	last := first
	if a.EndLine > 0 {
		last = s.lineIn(a.EndLine)
	}
	if last-first > 10000 {
		last = first + 10000
	}
	seen := map[int]bool{}
	resp := &dap.BreakpointLocationsResponse{Response: newResponse(&req.Request)}
	resp.Body.Breakpoints = []dap.BreakpointLocation{}
	for line := first; line <= last; line++ {
		for _, b := range bins {
			locs, err := b.LineBreakpoints(s.sources.paths.toDebug(a.Source.Path), line)
			if err != nil {
				continue
			}
			for _, l := range locs {
				if l.Line == line && !seen[line] {
					seen[line] = true
					resp.Body.Breakpoints = append(resp.Body.Breakpoints, dap.BreakpointLocation{Line: s.lineOut(line)})
				}
			}
		}
	}
	s.send(resp)
}

func (s *Conn) onDataBreakpointInfoRequest(req *DataBreakpointInfoRequest) {
	j := s.currentJob(&req.Request)
	if j == nil {
		return
	}
	a := req.Arguments
	resp := &dap.DataBreakpointInfoResponse{Response: newResponse(&req.Request)}
	resp.Command = "dataBreakpointInfo"
	fail := func(why string) {
		resp.Body.DataId = nil
		resp.Body.Description = why
		s.send(resp)
	}
	if err := j.Frozen(); err != nil {
		fail(err.Error())
		return
	}
	var r *debugger.Rank
	var addr uint64
	var size int
	var mods []*symbols.Module
	ctx, cancel := context.WithTimeout(s.ctx, debugger.DefaultTimeout)
	defer cancel()
	switch {
	case a.AsAddress:
		r = j.ReferenceRank()
		v, err := debugger.ParseAddress(a.Name, 0)
		if err != nil {
			fail(err.Error())
			return
		}
		addr, size = v, max(a.Bytes, 1)
	default:
		val, fr, err := s.dataValue(j, a)
		if err != nil {
			fail(err.Error())
			return
		}
		ad, ok := val.Address()
		if !ok {
			fail(fmt.Sprintf("%s is not in memory (a register or a computed value): it cannot be watched", a.Name))
			return
		}
		r, addr, size = fr.thread.Rank, ad, int(val.Type.Size)
		if a.Bytes > 0 {
			size = a.Bytes
		}
	}
	if r == nil {
		fail("no rank is stopped")
		return
	}
	if size <= 0 || size > 8 || bits.OnesCount(uint(size)) != 1 || addr%uint64(size) != 0 {
		fail(fmt.Sprintf("%s: %d bytes at %#x: hardware watchpoints need 1, 2, 4 or 8 aligned bytes", a.Name, size, addr))
		return
	}
	mods, _ = r.Modules(ctx)
	id := fmt.Sprintf("a:%d:%x:%d:%s", r.Num, addr, size, a.Name)
	for _, m := range mods {
		if m.Contains(addr) {
			id = fmt.Sprintf("m:%s:%x:%d:%s", m.Path, addr-m.Bias, size, a.Name)
			break
		}
	}
	resp.Body.DataId = id
	resp.Body.Description = fmt.Sprintf("%s (%d bytes)", a.Name, size)
	if !strings.HasPrefix(id, "m:") {
		resp.Body.Description += fmt.Sprintf(" on rank %d", r.Num)
	}
	resp.Body.AccessTypes = []dap.DataBreakpointAccessType{"write", "readWrite"}
	s.send(resp)
}

// dataValue finds the value a dataBreakpointInfo request names.
func (s *Conn) dataValue(j *debugger.Job, a DataBreakpointInfoArguments) (*symbols.Value, *frameRef, error) {
	if a.VariablesReference != 0 {
		v, ok := s.handles.get(a.VariablesReference)
		ref, isRef := v.(*varRef)
		if !ok || !isRef {
			return nil, nil, fmt.Errorf("variables reference %d is not valid at this stop", a.VariablesReference)
		}
		expr := a.Name
		if ref.kind == varValue {
			kids, err := s.childVariables(j, ref, 0, 0, "", false)
			if err != nil {
				return nil, nil, err
			}
			expr = ""
			for _, k := range kids {
				if k.Name == a.Name {
					expr = k.EvaluateName
				}
			}
			if expr == "" {
				return nil, nil, fmt.Errorf("%s has no member %q", ref.expr, a.Name)
			}
		}
		val, err := ref.frame.frame.Eval(expr)
		return val, ref.frame, err
	}
	if a.FrameId != 0 {
		v, ok := s.handles.get(a.FrameId)
		fr, isFrame := v.(*frameRef)
		if !ok || !isFrame {
			return nil, nil, fmt.Errorf("frame %d is not a frame of a current stop", a.FrameId)
		}
		val, err := fr.frame.Eval(a.Name)
		return val, fr, err
	}
	p, t, err := j.GlobalScope()
	if err != nil {
		return nil, nil, err
	}
	val, err := p.Eval(a.Name)
	return val, &frameRef{thread: t}, err
}
