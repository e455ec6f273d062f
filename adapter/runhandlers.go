package adapter

import (
	"context"
	"fmt"

	"github.com/google/go-dap"
	"github.com/hpcdap/hpcdap/debugger"
)

func (s *Conn) onContinueRequest(req *dap.ContinueRequest) {
	j := s.currentJob(&req.Request)
	if j == nil {
		return
	}
	if err := j.Frozen(); err != nil {
		s.sendError(&req.Request, errRunControl, "continue: "+err.Error())
		return
	}
	t := j.Thread(req.Arguments.ThreadId)
	if t == nil {
		s.sendError(&req.Request, errBadArguments, fmt.Sprintf("continue: unknown thread %d", req.Arguments.ThreadId))
		return
	}
	if err := j.Authority(t); err != nil {
		s.sendError(&req.Request, errRunControl, "continue: "+err.Error())
		return
	}
	if req.Arguments.SingleThread {
		s.continueSingleThread(req, j, t)
		return
	}
	// The answer goes out before any new stop of the continued ranks can be reported.
	j.ContinueFrom(t, func(resumed []*debugger.Thread, all bool, err error) {
		if err != nil {
			s.sendError(&req.Request, errRunControl, "continue: "+err.Error())
			return
		}
		resp := &dap.ContinueResponse{Response: newResponse(&req.Request)}
		resp.Body.AllThreadsContinued = all
		s.send(resp)
		if !all {
			s.sendContinued(resumed, t.ID)
			for _, o := range resumed {
				s.othersContinued(o.ID, false)
			}
			return
		}
		s.othersContinued(t.ID, true)
	})
}

// continueSingleThread resumes one thread, its rank's other threads held.
func (s *Conn) continueSingleThread(req *dap.ContinueRequest, j *debugger.Job, t *debugger.Thread) {
	ctx, cancel := context.WithTimeout(s.ctx, debugger.DefaultTimeout)
	defer cancel()
	r := t.Rank
	if st := j.StateOf(r); st != debugger.RankStopped {
		s.sendError(&req.Request, errRunning, fmt.Sprintf("continue: rank %d is %s", r.Num, st))
		return
	}
	if err := j.ContinueThread(ctx, t); err != nil {
		s.sendError(&req.Request, errRunControl, "continue: "+err.Error())
		return
	}
	resp := &dap.ContinueResponse{Response: newResponse(&req.Request)}
	s.send(resp)
	s.othersContinued(t.ID, false)
}

// step answers next, stepIn and stepOut; target, when not nil, is the call a stepIn enters.
func (s *Conn) step(r *dap.Request, threadID int, single bool, gran dap.SteppingGranularity, kind debugger.StepKind, target *debugger.StepTarget, respond func()) {
	j := s.currentJob(r)
	if j == nil {
		return
	}
	if err := j.Frozen(); err != nil {
		s.sendError(r, errRunControl, r.Command+": "+err.Error())
		return
	}
	if t := j.Thread(threadID); t != nil {
		if err := j.Authority(t); err != nil {
			s.sendError(r, errRunControl, r.Command+": "+err.Error())
			return
		}
	}
	t := s.stoppedThread(r, j, threadID)
	if t == nil {
		return
	}
	ctx, cancel := context.WithTimeout(s.ctx, debugger.DefaultTimeout)
	defer cancel()
	var err error
	if target != nil {
		err = j.StartStepInto(ctx, t, *target, single)
	} else {
		err = j.StartSteps(ctx, t, kind, gran == "instruction", single)
	}
	if err != nil {
		s.sendError(r, errRunControl, fmt.Sprintf("%s: %v", r.Command, err))
		return
	}
	respond()
	s.othersContinued(t.ID, false)
}

func (s *Conn) onNextRequest(req *dap.NextRequest) {
	a := req.Arguments
	s.step(&req.Request, a.ThreadId, a.SingleThread, a.Granularity, debugger.StepOver, nil, func() {
		s.send(&dap.NextResponse{Response: newResponse(&req.Request)})
	})
}

func (s *Conn) onStepInRequest(req *dap.StepInRequest) {
	a := req.Arguments
	var target *debugger.StepTarget
	if a.TargetId != 0 {
		ref, ok := s.stepInTarget(&req.Request, a.ThreadId, a.TargetId)
		if !ok {
			return
		}
		target = &ref.target
	}
	s.step(&req.Request, a.ThreadId, a.SingleThread, a.Granularity, debugger.StepInto, target, func() {
		s.send(&dap.StepInResponse{Response: newResponse(&req.Request)})
	})
}

func (s *Conn) onStepOutRequest(req *dap.StepOutRequest) {
	a := req.Arguments
	s.step(&req.Request, a.ThreadId, a.SingleThread, a.Granularity, debugger.StepOutOf, nil, func() {
		s.send(&dap.StepOutResponse{Response: newResponse(&req.Request)})
	})
}

func (s *Conn) onPauseRequest(req *dap.PauseRequest) {
	j := s.currentJob(&req.Request)
	if j == nil {
		return
	}
	if j.Frozen() != nil { // stopped for good
		s.send(&dap.PauseResponse{Response: newResponse(&req.Request)})
		return
	}
	t := j.Thread(req.Arguments.ThreadId)
	if err := j.Authority(t); err != nil {
		// Another tool controls the rank: nothing would stop it.
		s.sendError(&req.Request, errRunControl, "pause: "+err.Error())
		return
	}
	any := j.PauseFrom(t)
	s.send(&dap.PauseResponse{Response: newResponse(&req.Request)})
	if !any && t != nil {
		j.RestatePause(t)
	}
}

func (s *Conn) onRanksRequest(req *RanksRequest) {
	j := s.currentJob(&req.Request)
	if j == nil {
		return
	}
	ranks, focus := j.RankStates()
	sent, received := j.Messages()
	s.respond(&req.Request, RanksBody{Ranks: wireRankStates(ranks), Focus: focus.String(),
		Messages: &MessageCounts{Sent: sent, Received: received}})
}

func (s *Conn) onFocusRequest(req *FocusRequest) {
	j := s.currentJob(&req.Request)
	if j == nil {
		return
	}
	set, err := j.ParseRanks(req.Arguments.Ranks)
	if err != nil {
		s.sendError(&req.Request, errBadArguments, "hpcdap/focus: "+err.Error())
		return
	}
	j.SetFocus(set)
	s.respond(&req.Request, FocusBody{Focus: set.String(), Count: set.Len()})
}
