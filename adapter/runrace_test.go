package adapter

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-dap"
)

// Races between a stop of the whole job (or of a rank for a step) and a notification of the
// same rank that the adapter is passing on at that moment.

// TestAllStopWhilePassingOn: rank 0 hits a breakpoint just as rank 1's hit of a breakpoint
// whose condition does not hold is being passed on, round after round; every all-stop must
// complete (rank 1 is stopped either way), and the job must end.
func TestAllStopWhilePassingOn(t *testing.T) {
	t.Parallel()
	p := compileC(t, "lockstep")
	const rounds = 150
	d := matrixLaunch(t, p, 2, "all", "", map[string]any{"env": map[string]any{
		"SYNC_FILE": filepath.Join(t.TempDir(), "sync"), "ITERS": "150"}})
	var resp dap.SetBreakpointsResponseBody
	d.call("setBreakpoints", map[string]any{"source": map[string]any{"path": p.src},
		"breakpoints": []map[string]any{{"line": p.line(t, "hit")}, {"line": p.line(t, "cond"), "condition": "v < 0"}}}, &resp)
	d.call("configurationDone", nil, nil)
	for i := range rounds {
		m, err := d.c.WaitAny([]string{"stopped", "terminated"}, time.Minute, focusStop)
		if err != nil {
			t.Fatalf("round %d: %v; ranks %+v", i, err, d.ranks().Ranks)
		}
		if m.Event == "terminated" {
			t.Fatalf("the job ended after %d of %d stops", i, rounds)
		}
		var st dap.StoppedEventBody
		if err := m.Decode(&st); err != nil {
			t.Fatal(err)
		}
		if st.Reason != "breakpoint" || !st.AllThreadsStopped {
			t.Fatalf("round %d: stopped %+v, want the breakpoint in hit()", i, st)
		}
		for _, r := range d.ranks().Ranks {
			if r.State != "stopped" {
				t.Fatalf("round %d: rank %d is %s at the all-stop", i, r.Rank, r.State)
			}
		}
		d.call("continue", map[string]any{"threadId": st.ThreadId}, nil)
	}
	d.event("terminated")
}

// TestThreadModeStepWhilePassingOn: in stop mode thread, main is stepped again and again while
// another thread keeps passing a breakpoint whose condition does not hold; every step ends
// with main's step.
func TestThreadModeStepWhilePassingOn(t *testing.T) {
	t.Parallel()
	p := compileC(t, "busystep")
	d := matrixLaunch(t, p, 1, "thread", "", nil)
	var resp dap.SetBreakpointsResponseBody
	d.call("setBreakpoints", map[string]any{"source": map[string]any{"path": p.src},
		"breakpoints": []map[string]any{{"line": p.line(t, "hit")}, {"line": p.line(t, "cond"), "condition": "v < 0"}}}, &resp)
	d.call("configurationDone", nil, nil)
	st := d.stopped()
	for i := range 40 {
		d.call("next", map[string]any{"threadId": st.ThreadId}, nil)
		b := d.stopped()
		if b.Reason != "step" || b.ThreadId != st.ThreadId {
			t.Fatalf("next %d: stopped %+v, want main's step", i, b)
		}
	}
	d.call("disconnect", map[string]any{"terminateDebuggee": true}, nil)
}

// TestSetBreakpointsWhilePassingOn: function breakpoints are set again and again while a
// thread keeps passing a breakpoint whose condition does not hold (each pass reads every
// breakpoint's locations); every new breakpoint is resolved and answered, and none stops the
// job. Under the race detector this also checks that resolving a breakpoint does not write
// what a concurrent hit reads.
func TestSetBreakpointsWhilePassingOn(t *testing.T) {
	t.Parallel()
	p := compileC(t, "busystep")
	d := matrixLaunch(t, p, 1, "thread", "", nil)
	var resp dap.SetBreakpointsResponseBody
	d.call("setBreakpoints", map[string]any{"source": map[string]any{"path": p.src},
		"breakpoints": []map[string]any{{"line": p.line(t, "hit")}, {"line": p.line(t, "cond"), "condition": "v < 0"}}}, &resp)
	d.call("configurationDone", nil, nil)
	st := d.stopped()
	for i := range 40 {
		name := fmt.Sprintf("no_such_function_%d", i)
		var fb dap.SetFunctionBreakpointsResponseBody
		d.call("setFunctionBreakpoints", map[string]any{"breakpoints": []map[string]any{{"name": name}}}, &fb)
		if len(fb.Breakpoints) != 1 || fb.Breakpoints[0].Verified || !strings.Contains(fb.Breakpoints[0].Message, name) {
			t.Fatalf("setFunctionBreakpoints %s: %+v, want one unverified breakpoint that names it", name, fb.Breakpoints)
		}
	}
	var threads dap.ThreadsResponseBody
	d.call("threads", nil, &threads)
	if len(threads.Threads) != 2 {
		t.Fatalf("threads %+v, want main and the busy thread", threads.Threads)
	}
	d.call("stackTrace", map[string]any{"threadId": st.ThreadId}, nil)
	d.call("disconnect", map[string]any{"terminateDebuggee": true}, nil)
}
