package adapter

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/google/go-dap"
	"github.com/hpcdap/hpcdap/debugger"
)

// onRestartRequest ends the launched job and launches it again — with the launch arguments
// the request carries, else the first launch's — keeping the source, function and instruction
// breakpoints (same ids) and the exception filter. A job the session attached to is refused:
// the session did not start its processes and cannot start them again.
func (s *Conn) onRestartRequest(req *dap.RestartRequest) {
	j := s.currentJob(&req.Request)
	if j == nil {
		return
	}
	s.mu.Lock()
	launched, raw, configDone, joined, old := s.launchedJob, s.launchArgs, s.configDone, s.joined, s.share
	s.mu.Unlock()
	if joined || old.memberCount() > 1 {
		s.sendError(&req.Request, errBadArguments, "restart: other clients share this job: end it (disconnect with terminateDebuggee) and launch anew")
		return
	}
	if !launched {
		s.sendError(&req.Request, errBadArguments, "restart: this session attached to running processes, which it cannot start again: disconnect and attach anew")
		return
	}
	if err := j.Frozen(); err != nil {
		s.sendError(&req.Request, errBadArguments, "restart: a core file cannot be run again: "+err.Error())
		return
	}
	if len(req.Arguments) > 0 {
		var a struct {
			Arguments json.RawMessage `json:"arguments"`
		}
		if err := json.Unmarshal(req.Arguments, &a); err != nil {
			s.sendError(&req.Request, errBadArguments, "restart: arguments: "+err.Error())
			return
		}
		if len(a.Arguments) > 0 && string(a.Arguments) != "null" {
			raw = a.Arguments
		}
	}
	plan, err := planLaunch(raw)
	if err == nil && plan.coreFile != "" {
		err = fmt.Errorf("coreFile: a restart runs the program: launch a core file in a new session")
	}
	if err != nil {
		s.sendError(&req.Request, argError(err), "restart: "+err.Error())
		return
	}

	// The old job goes first, its events no longer the client's.
	s.jobGen.Add(1)
	s.mu.Lock()
	s.job = nil
	s.mu.Unlock()
	nsh := s.newShare("", true)
	old.handOver(nsh)
	j.End(true)
	s.handles.dropAll()
	s.sources.paths = plan.paths
	s.mu.Lock()
	s.callTimeout = plan.callTimeout
	s.fanout = plan.fanout
	s.priority = plan.priority
	s.mu.Unlock()

	nj, inPlace, err := s.launchJob(&req.Request, plan)
	if err != nil {
		// Nothing runs any more: the session is over.
		nsh.abandon()
		s.sendError(&req.Request, errFailedToLaunch, "restart: "+err.Error())
		s.sendTerminated()
		return
	}
	nsh.started(nj, plan.program)
	ctx, cancel := context.WithTimeout(s.ctx, debugger.DefaultTimeout)
	carried, dropped := nj.AdoptBreakpoints(ctx, j)
	cancel()
	s.mu.Lock()
	s.job = nj
	s.launchArgs = raw
	s.entryStop = plan.stopAtEntry
	s.entryInPlace = inPlace
	s.mu.Unlock()
	s.send(&dap.ProcessEvent{Event: newEvent("process"), Body: dap.ProcessEventBody{Name: plan.program,
		SystemProcessId: nj.Ranks()[0].Pid, IsLocalProcess: true, StartMethod: "launch", PointerSize: 64}})
	respond := func() { s.send(&dap.RestartResponse{Response: newResponse(&req.Request)}) }
	for _, bp := range nj.Snapshots(carried) {
		s.events().BreakpointChanged(bp)
	}
	for _, bp := range dropped {
		// A data breakpoint watched the old processes' memory: the client is told it is gone.
		ev := &BreakpointEvent{Event: newEvent("breakpoint")}
		ev.Body.Reason = "removed"
		ev.Body.Breakpoint = Breakpoint{Breakpoint: dap.Breakpoint{Id: bp.ID}}
		s.send(ev)
	}
	if !configDone {
		respond() // the client's configurationDone lets the ranks go, as after a launch
		return
	}
	s.runConfigured(nj, plan.stopAtEntry, inPlace, respond)
}
