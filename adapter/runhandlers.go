package adapter

import (
	"context"
	"fmt"

	"github.com/google/go-dap"
)

func (s *Session) onContinueRequest(req *dap.ContinueRequest) {
	j := s.currentJob(&req.Request)
	if j == nil {
		return
	}
	if err := j.back.frozen(); err != nil {
		s.sendError(&req.Request, errRunControl, "continue: "+err.Error())
		return
	}
	t := j.thread(req.Arguments.ThreadId)
	if t == nil {
		s.sendError(&req.Request, errBadArguments, fmt.Sprintf("continue: unknown thread %d", req.Arguments.ThreadId))
		return
	}
	ranks := j.runTargets(t, req.Arguments.SingleThread)
	if req.Arguments.SingleThread {
		s.continueSingleThread(req, j, t)
		return
	}
	var own *Rank
	if len(ranks) == 1 {
		// One rank (stop modes rank and thread): no stop of it is half handled while it is
		// continued (in stop mode thread, a thread that stopped meanwhile is held, and its rank
		// running again, before this continue looks at it).
		own = ranks[0]
		own.evMu.Lock()
		defer own.evMu.Unlock()
	}
	if j.heldAlone(t) {
		if err := j.releaseThread(t); err != nil {
			s.sendError(&req.Request, errRunControl, "continue: "+err.Error())
			return
		}
		s.send(&dap.ContinueResponse{Response: newResponse(&req.Request)})
		return
	}
	resumed, err := j.continueRanks(ranks, own)
	if err != nil {
		s.sendError(&req.Request, errRunControl, "continue: "+err.Error())
		return
	}
	all := len(ranks) == len(j.ranks)
	resp := &dap.ContinueResponse{Response: newResponse(&req.Request)}
	resp.Body.AllThreadsContinued = all
	s.send(resp)
	if !all {
		s.sendContinued(resumed, t.ID)
	}
}

// continueSingleThread resumes one thread, its rank's other threads held.
func (s *Session) continueSingleThread(req *dap.ContinueRequest, j *Job, t *Thread) {
	ctx, cancel := context.WithTimeout(s.ctx, defaultTimeout)
	defer cancel()
	r := t.Rank
	if st := j.stateOf(r); st != rankStopped {
		s.sendError(&req.Request, errRunning, fmt.Sprintf("continue: rank %d is %s", r.Num, st))
		return
	}
	if err := j.continueThread(ctx, t); err != nil {
		s.sendError(&req.Request, errRunControl, "continue: "+err.Error())
		return
	}
	resp := &dap.ContinueResponse{Response: newResponse(&req.Request)}
	s.send(resp)
}

// step answers next, stepIn and stepOut.
func (s *Session) step(r *dap.Request, threadID int, single bool, gran dap.SteppingGranularity, kind stepKind, respond func()) {
	j := s.currentJob(r)
	if j == nil {
		return
	}
	if err := j.back.frozen(); err != nil {
		s.sendError(r, errRunControl, r.Command+": "+err.Error())
		return
	}
	t := s.stoppedThread(r, j, threadID)
	if t == nil {
		return
	}
	ctx, cancel := context.WithTimeout(s.ctx, defaultTimeout)
	defer cancel()
	if err := j.startSteps(ctx, t, kind, gran == "instruction", single); err != nil {
		s.sendError(r, errRunControl, fmt.Sprintf("%s: %v", r.Command, err))
		return
	}
	respond()
}

func (s *Session) onNextRequest(req *dap.NextRequest) {
	a := req.Arguments
	s.step(&req.Request, a.ThreadId, a.SingleThread, a.Granularity, stepOver, func() {
		s.send(&dap.NextResponse{Response: newResponse(&req.Request)})
	})
}

func (s *Session) onStepInRequest(req *dap.StepInRequest) {
	a := req.Arguments
	s.step(&req.Request, a.ThreadId, a.SingleThread, a.Granularity, stepInto, func() {
		s.send(&dap.StepInResponse{Response: newResponse(&req.Request)})
	})
}

func (s *Session) onStepOutRequest(req *dap.StepOutRequest) {
	a := req.Arguments
	s.step(&req.Request, a.ThreadId, a.SingleThread, a.Granularity, stepOutOf, func() {
		s.send(&dap.StepOutResponse{Response: newResponse(&req.Request)})
	})
}

func (s *Session) onPauseRequest(req *dap.PauseRequest) {
	j := s.currentJob(&req.Request)
	if j == nil {
		return
	}
	if j.back.frozen() != nil { // stopped for good
		s.send(&dap.PauseResponse{Response: newResponse(&req.Request)})
		return
	}
	t := j.thread(req.Arguments.ThreadId)
	var ranks []*Rank
	if t != nil {
		ranks = j.runTargets(t, false)
	} else {
		ranks = j.focusRanks()
	}
	any := j.pause(ranks)
	s.send(&dap.PauseResponse{Response: newResponse(&req.Request)})
	if !any && t != nil {
		// Nothing was running: the client still expects to hear that the thread is stopped.
		if j.stateOf(t.Rank) == rankStopped {
			j.sendStopped(t, stopInfo{reason: "pause", tid: t.LWP}, j.mode == stopAll)
		}
	}
}

func (s *Session) onRanksRequest(req *RanksRequest) {
	j := s.currentJob(&req.Request)
	if j == nil {
		return
	}
	ranks, focus := j.rankStates()
	s.respond(&req.Request, RanksBody{Ranks: wireRankStates(ranks), Focus: focus.String()})
}

func (s *Session) onFocusRequest(req *FocusRequest) {
	j := s.currentJob(&req.Request)
	if j == nil {
		return
	}
	set, err := j.parseRanks(req.Arguments.Ranks)
	if err != nil {
		s.sendError(&req.Request, errBadArguments, "hpcdap/focus: "+err.Error())
		return
	}
	j.setFocus(set)
	s.respond(&req.Request, FocusBody{Focus: set.String(), Count: set.Len()})
}
