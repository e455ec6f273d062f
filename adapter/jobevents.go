package adapter

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"time"

	"github.com/google/go-dap"
	"github.com/hpcdap/hpcdap/debugger"
	"github.com/hpcdap/hpcdap/symbols"
)

// jobEvents turns what a job reports (Events) into the session's DAP events. gen is the
// job's number in the session: once a restart has replaced the job, what it still reports
// (its ranks' ends, its exit) is not the client's business and is dropped.
type jobEvents struct {
	s   *Conn
	gen int64
}

// events returns the events of the session's current job.
func (s *Conn) events() jobEvents { return jobEvents{s: s, gen: s.jobGen.Load()} }

// stale reports whether the job that reports has been replaced.
func (e jobEvents) stale() bool { return e.gen != e.s.jobGen.Load() }

// jobConfig is the configuration of the session's job, which reports to its share.
func (s *Conn) jobConfig() debugger.Config {
	s.mu.Lock()
	sh := s.share
	fanout, prio := s.fanout, s.priority
	s.mu.Unlock()
	return debugger.Config{Ctx: sh.ctx, Events: sh, Syms: s.srv.symbolCache(), CallTimeout: s.callLimit(), Fanout: fanout,
		ToolPriority: prio}
}

// callLimit is the session's bound on one function call.
func (s *Conn) callLimit() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.callTimeout > 0 {
		return s.callTimeout
	}
	return debugger.CallTimeout
}

// Output sends an output event; a rank's output carries the rank in its data ({"rank": 3}).
func (e jobEvents) Output(category, text string, rank int) {
	if e.stale() {
		return
	}
	if text == "" {
		return
	}
	ev := &dap.OutputEvent{Event: newEvent("output"), Body: dap.OutputEventBody{Category: category, Output: text}}
	if rank >= 0 {
		ev.Body.Data = json.RawMessage(fmt.Sprintf(`{"rank":%d}`, rank))
	}
	e.s.send(ev)
}

// Stopped sends the stopped event of a thread (to a client that joined the job, once it has
// caught up: see catchUp).
func (e jobEvents) Stopped(ev debugger.StopEvent) {
	if e.stale() || !e.s.catch.admit(ev) {
		return
	}
	e.send(ev)
}

// send sends the stopped event of a thread.
func (e jobEvents) send(ev debugger.StopEvent) {
	if ev.Other {
		e.s.send(&dap.StoppedEvent{Event: newEvent("stopped"), Body: dap.StoppedEventBody{Reason: ev.Reason,
			ThreadId: ev.ThreadID, PreserveFocusHint: true}})
		return
	}
	desc := ev.Text
	if desc == "" {
		desc = fmt.Sprintf("%s on rank %d", ev.Reason, ev.Rank)
	}
	e.s.send(&dap.StoppedEvent{Event: newEvent("stopped"), Body: dap.StoppedEventBody{Reason: ev.Reason,
		Description: desc, ThreadId: ev.ThreadID, AllThreadsStopped: ev.AllStopped, HitBreakpointIds: ev.HitBPs,
		Text: ev.Text, PreserveFocusHint: ev.Also}})
}

// Continued sends a continued event.
func (e jobEvents) Continued(threadID int) {
	if e.stale() {
		return
	}
	e.s.mu.Lock()
	j := e.s.job
	e.s.mu.Unlock()
	e.s.catch.continued(j, threadID, false)
	e.s.send(continuedEvent(threadID, false))
}

// Exited sends the exited event.
func (e jobEvents) Exited(code int) {
	if e.stale() {
		return
	}
	e.s.send(&dap.ExitedEvent{Event: newEvent("exited"), Body: dap.ExitedEventBody{ExitCode: code}})
}

// Terminated sends the terminated event.
func (e jobEvents) Terminated() {
	if !e.stale() {
		e.s.sendTerminated()
	}
}

// BreakpointChanged sends a breakpoint event.
func (e jobEvents) BreakpointChanged(bp *debugger.Breakpoint) {
	if e.stale() {
		return
	}
	ev := &BreakpointEvent{Event: newEvent("breakpoint")}
	ev.Body.Reason = "changed"
	ev.Body.Breakpoint = e.s.dapBreakpoint(bp)
	e.s.send(ev)
}

// RanksChanged sends the hpcdap/ranksChanged event.
func (e jobEvents) RanksChanged(ranks []debugger.RankStatus) {
	if e.stale() {
		return
	}
	e.s.sendEvent("hpcdap/ranksChanged", &RanksChangedBody{Ranks: wireRankStates(ranks)})
}

// wireRankStates turns the job's rank states into the RankStates of hpcdap/ranks and
// hpcdap/ranksChanged.
func wireRankStates(ranks []debugger.RankStatus) []RankState {
	out := make([]RankState, len(ranks))
	for i, r := range ranks {
		out[i] = RankState{Rank: r.Num, State: r.State.String(), Pid: r.Pid, Host: r.Host, ThreadID: r.ThreadID,
			ExitCode: r.ExitCode, Signal: r.Signal, StopReason: r.StopReason}
	}
	return out
}

// StopOver forgets the frame ids and variables references of the rank's stop.
func (e jobEvents) StopOver(rank int) {
	if !e.stale() {
		e.s.handles.dropRank(rank)
		e.s.catch.over(rank)
	}
}

// ModuleLoaded sends a module event.
func (e jobEvents) ModuleLoaded(m *symbols.Module) {
	if e.stale() {
		return
	}
	e.s.sendEvent("module", map[string]any{"reason": "new", "module": map[string]any{
		"id": m.Path, "name": filepath.Base(m.Path), "path": m.Path}})
}

// Logf writes to the server's log.
func (e jobEvents) Logf(format string, args ...any) { e.s.srv.logf(format, args...) }
