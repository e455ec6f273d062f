package adapter

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/google/go-dap"
	"github.com/hpcdap/hpcdap/debugger"
)

// gotoTargetRef is what a gotoTargets id names: a line of a source, as the editor and the
// debugging information name the file. It does not depend on a stop: the goto request checks
// the line against the thread it moves.
type gotoTargetRef struct {
	path, debugPath string
	line            int
}

// onGotoTargetsRequest offers the requested line as the one target: where a thread can go is
// decided by goto, against the function the thread is in.
func (s *Conn) onGotoTargetsRequest(req *dap.GotoTargetsRequest) {
	if s.currentJob(&req.Request) == nil {
		return
	}
	a := req.Arguments
	path := a.Source.Path
	if path == "" {
		s.sendError(&req.Request, errBadArguments, "gotoTargets: the source has no path")
		return
	}
	if a.Line < 1 {
		s.sendError(&req.Request, errBadArguments, fmt.Sprintf("gotoTargets: line %d", a.Line))
		return
	}
	path = filepath.Clean(path)
	line := s.lineIn(a.Line)
	id := s.handles.add(-1, &gotoTargetRef{path: path, debugPath: s.sources.paths.toDebug(path), line: line})
	resp := &dap.GotoTargetsResponse{Response: newResponse(&req.Request)}
	resp.Body.Targets = []dap.GotoTarget{{Id: id, Label: fmt.Sprintf("%s:%d", filepath.Base(path), line), Line: a.Line}}
	s.send(resp)
}

// onGotoRequest sets the thread's pc to the target line of its function and reports the thread
// stopped there (reason "goto"); the rest of the job stays as it is.
func (s *Conn) onGotoRequest(req *dap.GotoRequest) {
	j := s.currentJob(&req.Request)
	if j == nil {
		return
	}
	v, ok := s.handles.get(req.Arguments.TargetId)
	ref, isTarget := v.(*gotoTargetRef)
	if !ok || !isTarget {
		s.sendError(&req.Request, errBadArguments, fmt.Sprintf("goto: no goto target %d", req.Arguments.TargetId))
		return
	}
	t := s.stoppedThread(&req.Request, j, req.Arguments.ThreadId)
	if t == nil {
		return
	}
	ctx, cancel := context.WithTimeout(s.ctx, debugger.DefaultTimeout)
	defer cancel()
	line, err := j.Goto(ctx, t, ref.debugPath, ref.line)
	if err != nil {
		s.sendError(&req.Request, errRunControl, fmt.Sprintf("goto: %s: %v", t.Name, err))
		return
	}
	s.handles.dropRank(t.Rank.Num)
	s.send(&dap.GotoResponse{Response: newResponse(&req.Request)})
	s.send(&dap.StoppedEvent{Event: newEvent("stopped"), Body: dap.StoppedEventBody{Reason: "goto",
		Description: fmt.Sprintf("goto line %d on rank %d", line, t.Rank.Num), ThreadId: t.ID}})
}
