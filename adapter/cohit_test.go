package adapter

import (
	"strconv"
	"testing"
	"time"

	"github.com/google/go-dap"
)

// TestSimultaneousHitsAllReported: ranks that hit a breakpoint at the same instant, while the
// first hit stops the job (stop mode all), each have their hit reported (a stopped event with
// the breakpoint's id, the focus left on the first); none is lost when the job continues.
// Every rank passes the breakpoint once: each must be reported exactly once.
func TestSimultaneousHitsAllReported(t *testing.T) {
	t.Parallel()
	p := compileC(t, "cohit")
	const np = 8
	wake := time.Now().Add(3 * time.Second).UnixMilli()
	d := matrixLaunch(t, p, np, "all", "", map[string]any{"env": map[string]any{
		"WAKE_MS": strconv.FormatInt(wake, 10)}})
	bps := d.setBreakpoints(p.src, p.line(t, "cohit"))
	d.call("configurationDone", nil, nil)
	rankOf := map[int]int{}
	for r, tid := range rankThreads(d) {
		rankOf[tid] = r
	}
	reported := map[int]int{}
	stops := 0
	for {
		m, err := d.c.WaitAny([]string{"stopped", "terminated"}, time.Minute, nil)
		if err != nil {
			t.Fatalf("%v; reported %v; ranks %+v", err, reported, d.ranks().Ranks)
		}
		if m.Event == "terminated" {
			break
		}
		var st dap.StoppedEventBody
		if err := m.Decode(&st); err != nil {
			t.Fatal(err)
		}
		if st.Reason != "breakpoint" || len(st.HitBreakpointIds) != 1 || st.HitBreakpointIds[0] != bps[0].Id {
			t.Fatalf("stopped %+v, want the breakpoint %d", st, bps[0].Id)
		}
		r, ok := rankOf[st.ThreadId]
		if !ok {
			t.Fatalf("stopped on thread %d, not a rank's main thread %v", st.ThreadId, rankOf)
		}
		reported[r]++
		if st.PreserveFocusHint {
			continue // another rank's hit, reported with the job's stop
		}
		stops++
		d.call("continue", map[string]any{"threadId": st.ThreadId}, nil)
	}
	for r := range np {
		if reported[r] != 1 {
			t.Errorf("rank %d: hit reported %d times, want once (all: %v, %d stops)", r, reported[r], reported, stops)
		}
	}
	// The ranks woke at the same instant: some reached the breakpoint while another's hit
	// stopped the job, which is what this test is about.
	if stops >= np {
		t.Errorf("%d ranks' hits in %d stops of the job: no two ranks hit at once", np, stops)
	}
	t.Logf("%d ranks' hits in %d stops of the job", np, stops)
}
