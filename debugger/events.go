package debugger

import (
	"context"
	"fmt"
	"maps"
	"runtime/debug"
	"time"

	"github.com/hpcdap/hpcdap/symbols"
)

// Events is what a job reports to its user while it runs: output, stops, threads running
// again, its end, breakpoints and ranks whose state changed, new modules, and diagnostics for
// the log. The DAP session implements it; the job formats no protocol message itself. The
// methods are called from the job's goroutines and from the requests that drive it, and must
// not call back into the job.
type Events interface {
	// Output reports text for the user in a category ("console", "stdout", "stderr",
	// "important"); rank is the rank that wrote it, or -1 when no rank did.
	Output(category, text string, rank int)
	// Stopped reports a stop of one thread.
	Stopped(ev StopEvent)
	// Continued reports that a thread the user did not resume runs again.
	Continued(threadID int)
	// Exited reports the end of the job with its exit code; Terminated follows it.
	Exited(code int)
	// Terminated reports that the job is over.
	Terminated()
	// BreakpointChanged reports a breakpoint that resolved meanwhile (a copy of it, which the
	// job no longer changes).
	BreakpointChanged(bp *Breakpoint)
	// RanksChanged reports the new state of ranks that changed, in rank order.
	RanksChanged(ranks []RankStatus)
	// StopOver reports that the stop of a rank is over (it runs again, or it ended): what
	// was read at that stop (frames, scopes, variables) no longer holds. It is called with
	// the job's lock held, before the rank runs, and must return at once.
	StopOver(rank int)
	// ModuleLoaded reports a library a rank loaded.
	ModuleLoaded(m *symbols.Module)
	// Logf writes a diagnostic line to the log.
	Logf(format string, args ...any)
}

// StopEvent is one stopped thread.
type StopEvent struct {
	ThreadID int
	Rank     int
	Reason   string // "breakpoint", "step", "pause", "exception", "entry", ...
	Text     string // description, if any
	HitBPs   []int  // ids of the breakpoints hit
	// AllStopped says that every thread of the job stopped with it.
	AllStopped bool
	// Other marks another thread of a rank that stopped: it is shown stopped without the
	// focus moving to it.
	Other bool
	// Also marks another rank's own stop (a breakpoint hit, a signal) that came with the
	// job's stop, reported after it: shown with its reason and breakpoints, the focus staying
	// where the job's stop put it.
	Also bool
}

// RankStatus is the state of one rank as the job reports it (RanksChanged, RankStates).
type RankStatus struct {
	Num        int
	State      RankState
	Pid        int
	Host       string
	ThreadID   int    // the thread id of its main thread (0: none known yet)
	ExitCode   *int   // its shell-style exit code, once it has exited (128+signal when killed)
	Signal     string // the signal that killed it, or the fatal signal it is stopped with
	StopReason string // why it stopped, while it is stopped
}

// Config is what a job takes from the session that runs it.
type Config struct {
	// Ctx is the session's: work done for a request derives from it.
	Ctx    context.Context
	Events Events
	Syms   *symbols.Cache
	// CallTimeout bounds one function call in an expression.
	CallTimeout time.Duration
	// Fanout is the fan-out of the agents' tree overlay (0: topology.DefaultFanout; below 2
	// is refused). A job of more agents than the fan-out is connected through the tree.
	Fanout int
	// ToolPriority is the CDTI priority the session attaches to the ranks with (1–99; 0:
	// DefaultToolPriority): among the tools of a rank, the higher priority takes control
	// authority (authority.go).
	ToolPriority uint8
}

// recoverPanic, deferred at the top of a goroutine of the job, stops a panic there from
// ending the server and every session: it is reported as an internal error, and the job goes
// on. what names the goroutine's work ("exit of rank 3").
func (j *Job) recoverPanic(what string) {
	if p := recover(); p != nil {
		ReportPanic(j.ev, what, p)
	}
}

// ReportPanic logs a recovered panic with its stack and reports it to the user as an error
// output.
func ReportPanic(ev Events, what string, p any) {
	ev.Logf("adapter: %s: internal error: %v\n%s", what, p, debug.Stack())
	ev.Output("important", fmt.Sprintf("hpcdap: internal error in %s: %v (the session may be inconsistent; restart it if it misbehaves)\n", what, p), -1)
}

// output reports text that no rank wrote.
func (j *Job) output(category, text string) { j.ev.Output(category, text, -1) }

// logf writes a diagnostic line to the log.
func (j *Job) logf(format string, args ...any) { j.ev.Logf("job: "+format, args...) }

// snapshot copies a breakpoint for an event, with bps.mu held.
func (bp *Breakpoint) snapshot() *Breakpoint {
	c := *bp
	c.Failures = maps.Clone(bp.Failures)
	return &c
}
