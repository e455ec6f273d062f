package adapter

import (
	"os"
	"strings"
	"testing"

	"github.com/google/go-dap"
)

// TestStepOverRingFromElsewhere: the bundled ring program, 4 ranks, stop mode all. Every rank
// is let reach a breakpoint on `pi = ring_sum(local)` in turn; the ranks that got there first
// wait inside ring_sum for the last. `next` on the last must end on the following line: the
// ranks standing elsewhere run free during the step (stepped from where they are, one would
// finish its own line first and stay stopped before the message the stepped rank waits for).
func TestStepOverRingFromElsewhere(t *testing.T) {
	t.Parallel()
	p := compileC(t, "../../examples/ring/ring")
	src, err := os.ReadFile(p.src)
	if err != nil {
		t.Fatal(err)
	}
	bpLine := 0
	for i, l := range strings.Split(string(src), "\n") {
		if strings.Contains(l, "double pi = ring_sum(local);") {
			bpLine = i + 1
		}
	}
	d := matrixLaunch(t, p, 4, "all", t.TempDir(), nil)
	d.setBreakpoints(p.src, bpLine)
	d.call("configurationDone", nil, nil)
	hit := map[int]bool{}
	var last dap.StoppedEventBody
	for len(hit) < 4 {
		last = d.stopped()
		// The ranks at the breakpoint in this stop of the job.
		for _, r := range d.ranks().Ranks {
			if r.State == "stopped" && r.StopReason == "breakpoint" {
				hit[r.Rank] = true
			}
		}
		if len(hit) < 4 {
			d.call("continue", map[string]any{"threadId": last.ThreadId}, nil)
		}
	}
	for _, r := range d.ranks().Ranks {
		t.Logf("before the step: rank %d %s (%s)", r.Rank, r.State, r.StopReason)
	}
	d.call("next", map[string]any{"threadId": last.ThreadId}, nil)
	st := d.stopped()
	if st.Reason != "step" || st.ThreadId != last.ThreadId {
		t.Fatalf("after next: stopped %+v, want the step of thread %d", st, last.ThreadId)
	}
	if f := d.stackTrace(st.ThreadId); f[0].Name != "main" || f[0].Line != bpLine+1 {
		t.Fatalf("after next: at %s:%d, want main:%d", f[0].Name, f[0].Line, bpLine+1)
	}
	d.setBreakpoints(p.src)
	d.call("continue", map[string]any{"threadId": st.ThreadId}, nil)
	d.event("terminated")
	checkExits(t, d, func(int) int { return 0 })
}
