package adapter

import (
	"context"
	"fmt"

	"github.com/google/go-dap"
	"github.com/hpcdap/hpcdap/debugger"
)

// stepTargetRef is what a step-in target's id stands for, until the rank's stop is over.
type stepTargetRef struct {
	thread *debugger.Thread
	target debugger.StepTarget
}

// onStepInTargetsRequest lists the calls of the frame's current line, in the order the code
// makes them; an outer frame (whose line is the call in progress) has none.
func (s *Conn) onStepInTargetsRequest(req *dap.StepInTargetsRequest) {
	j := s.currentJob(&req.Request)
	if j == nil {
		return
	}
	fr := s.frame(&req.Request, j, req.Arguments.FrameId)
	if fr == nil {
		return
	}
	resp := &dap.StepInTargetsResponse{Response: newResponse(&req.Request)}
	resp.Body.Targets = []dap.StepInTarget{}
	if fr.level == 0 {
		ctx, cancel := context.WithTimeout(s.ctx, debugger.DefaultTimeout)
		defer cancel()
		targets, err := j.StepInTargets(ctx, fr.thread)
		if err != nil {
			s.sendError(&req.Request, errRunControl, fmt.Sprintf("stepInTargets: rank %d: %v", fr.thread.Rank.Num, err))
			return
		}
		for _, tg := range targets {
			label := tg.Callee
			if label == "" {
				label = fmt.Sprintf("indirect call at %#x", tg.Site)
			}
			id := s.handles.add(fr.thread.Rank.Num, &stepTargetRef{thread: fr.thread, target: tg})
			t := dap.StepInTarget{Id: id, Label: label, Line: s.lineOut(tg.Line.Line)}
			if tg.Line.Column > 0 {
				t.Column = s.colOut(tg.Line.Column)
			}
			resp.Body.Targets = append(resp.Body.Targets, t)
		}
	}
	s.send(resp)
}

// stepInTarget returns the target a stepIn's targetId names for thread id, or answers with
// an error.
func (s *Conn) stepInTarget(r *dap.Request, threadID, targetID int) (*stepTargetRef, bool) {
	v, ok := s.handles.get(targetID)
	ref, isTarget := v.(*stepTargetRef)
	if !ok || !isTarget {
		s.sendError(r, errBadArguments, fmt.Sprintf("stepIn: target %d is not a step-in target of a current stop", targetID))
		return nil, false
	}
	if ref.thread.ID != threadID {
		s.sendError(r, errBadArguments, fmt.Sprintf("stepIn: target %d is one of thread %d, not of thread %d", targetID, ref.thread.ID, threadID))
		return nil, false
	}
	return ref, true
}
