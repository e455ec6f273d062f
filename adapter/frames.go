package adapter

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"

	"github.com/google/go-dap"
	"github.com/hpcdap/hpcdap/debugger"
	"github.com/hpcdap/hpcdap/symbols"
)

// maxThreads caps the threads request (VS Code draws one row per thread); the stopped and
// main threads of every rank come first.
const maxThreads = 4096

func (s *Conn) onThreadsRequest(req *dap.ThreadsRequest) {
	s.mu.Lock()
	j := s.job
	s.mu.Unlock()
	var live []debugger.Thread
	if j != nil {
		live = j.LiveThreads(s.ctx, maxThreads)
	}
	s.sendThreads(req, live)
}

// answerInline answers m on the reading goroutine when it is a threads request that needs
// nothing read from the ranks (every stopped rank's list is current) and no request is
// queued or being handled, so answers keep their order; it saves the hand-over to the
// dispatcher, most of a repeated threads request's cost. false: m is for the dispatcher
// (also once the session ends, and after a panic here, which the dispatcher then meets and
// answers as an internal error).
func (s *Conn) answerInline(m dap.Message) (answered bool) {
	req, ok := m.(*dap.ThreadsRequest)
	if !ok || s.pending.Load() != 0 {
		return false
	}
	select {
	case <-s.done:
		return false
	default:
	}
	defer func() {
		if p := recover(); p != nil {
			s.srv.logf("adapter: threads on the reader: internal error: %v\n%s", p, debug.Stack())
			answered = false
		}
	}()
	s.mu.Lock()
	initialized, j := s.initialized, s.job
	s.mu.Unlock()
	if !initialized {
		return false
	}
	var live []debugger.Thread
	if j != nil {
		if live, ok = j.KnownThreads(maxThreads); !ok {
			return false
		}
	}
	if s.cancelledBeforeStart(req.Seq) {
		s.sendCancelled(&req.Request)
		return true
	}
	s.sendThreads(req, live)
	return true
}

// sendThreads answers a threads request with the threads live lists.
func (s *Conn) sendThreads(req *dap.ThreadsRequest, live []debugger.Thread) {
	resp := &dap.ThreadsResponse{Response: newResponse(&req.Request)}
	list := make([]dap.Thread, 0, len(live))
	for _, t := range live {
		list = append(list, dap.Thread{Id: t.ID, Name: t.Name})
	}
	resp.Body.Threads = list
	s.send(resp)
}

// stoppedThread returns the thread named by a request if its rank is stopped, else answers
// the request with an error.
func (s *Conn) stoppedThread(r *dap.Request, j *debugger.Job, id int) *debugger.Thread {
	t, err := j.StoppedThread(id)
	if err != nil {
		code := errBadArguments
		if errors.Is(err, debugger.ErrNotStopped) {
			code = errRunning
		}
		s.sendError(r, code, r.Command+": "+err.Error())
		return nil
	}
	return t
}

func (s *Conn) onStackTraceRequest(req *dap.StackTraceRequest) {
	j := s.currentJob(&req.Request)
	if j == nil {
		return
	}
	t := s.stoppedThread(&req.Request, j, req.Arguments.ThreadId)
	if t == nil {
		return
	}
	j.SetViewRank(t.Rank)
	ctx, cancel := context.WithTimeout(s.ctx, debugger.DefaultTimeout)
	defer cancel()
	ts, err := t.Rank.Stack(ctx, t.LWP)
	if err != nil {
		s.sendError(&req.Request, errStackTrace, fmt.Sprintf("stack of %s: %v", t.Name, err))
		return
	}
	resp := &dap.StackTraceResponse{Response: newResponse(&req.Request)}
	resp.Body.StackFrames = s.stackFrames(j, t, ts, req.Arguments.StartFrame, req.Arguments.Levels)
	resp.Body.TotalFrames = len(ts.Frames)
	s.send(resp)
}

// stackFrames builds DAP frames for a page of a thread's stack.
func (s *Conn) stackFrames(j *debugger.Job, t *debugger.Thread, ts *debugger.ThreadStack, start, levels int) []dap.StackFrame {
	out := []dap.StackFrame{}
	if start < 0 {
		start = 0
	}
	end := len(ts.Frames)
	if levels > 0 && start+levels < end {
		end = start + levels
	}
	for i := start; i < end; i++ {
		f := ts.Frames[i]
		id := s.handles.add(t.Rank.Num, &frameRef{thread: t, level: i, frame: f, ts: ts})
		out = append(out, s.dapFrame(id, f))
	}
	return out
}

// dapFrame converts one frame. A frame whose source file is not on this machine (libc's,
// whose debugging information names glibc's build tree) has no source and is subtle: clients
// show the first frame with a source when a thread stops, and must not pick one they cannot open.
func (s *Conn) dapFrame(id int, f *symbols.Frame) dap.StackFrame {
	df := dap.StackFrame{Id: id, Name: debugger.FrameName(f), InstructionPointerReference: fmt.Sprintf("%#x", f.PC)}
	if src := s.localSource(f); src != nil {
		df.Source = src
		df.Line = s.lineOut(f.Line.Line)
		df.Column = s.colOut(max(f.Line.Column, 1))
	} else {
		df.PresentationHint = "subtle"
	}
	if f.Kind == symbols.FrameSignal {
		df.PresentationHint = "label"
	}
	if f.Module != nil {
		df.ModuleId = f.Module.Path
	}
	return df
}

// localSource returns the source of a frame's line when its file is on this machine, nil
// when the frame has no line or its file is elsewhere.
func (s *Conn) localSource(f *symbols.Frame) *dap.Source {
	if !f.HasLine || f.Line.File == "" {
		return nil
	}
	if src := s.sources.source(f.Line.File); src.Path != "" {
		return src
	}
	return nil
}

// frame returns the frame a frame id stands for, or answers with an error.
func (s *Conn) frame(r *dap.Request, j *debugger.Job, id int) *frameRef {
	v, ok := s.handles.get(id)
	fr, isFrame := v.(*frameRef)
	if !ok || !isFrame {
		s.sendError(r, errStale, fmt.Sprintf("%s: frame %d is not a frame of a current stop", r.Command, id))
		return nil
	}
	return fr
}

func (s *Conn) onScopesRequest(req *dap.ScopesRequest) {
	j := s.currentJob(&req.Request)
	if j == nil {
		return
	}
	fr := s.frame(&req.Request, j, req.Arguments.FrameId)
	if fr == nil {
		return
	}
	r := fr.thread.Rank
	resp := &dap.ScopesResponse{Response: newResponse(&req.Request)}
	locals := s.handles.add(r.Num, &varRef{kind: varLocals, frame: fr})
	args := s.handles.add(r.Num, &varRef{kind: varArgs, frame: fr})
	regs := s.handles.add(r.Num, &varRef{kind: varRegisters, frame: fr})
	globals := s.handles.add(r.Num, &varRef{kind: varGlobals, frame: fr})
	scopes := []dap.Scope{
		{Name: "Locals", PresentationHint: "locals", VariablesReference: locals},
		{Name: "Arguments", PresentationHint: "arguments", VariablesReference: args},
		{Name: "Registers", PresentationHint: "registers", VariablesReference: regs, Expensive: true},
		{Name: "Globals", VariablesReference: globals, Expensive: true},
	}
	if f := fr.frame; f.HasLine && f.Line.File != "" {
		for i := range scopes[:2] {
			scopes[i].Source = s.sources.source(f.Line.File)
		}
	}
	resp.Body.Scopes = scopes
	s.send(resp)
}
