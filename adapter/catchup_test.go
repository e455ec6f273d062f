package adapter

import (
	"testing"
	"time"

	"github.com/google/go-dap"
)

// TestJoinerToldOfEachStopOnce: B joins a shared 2-rank job that A has stopped at a breakpoint,
// and before B's configurationDone A continues and the job stops again. B is told each stop
// that holds exactly once — in the account its configurationDone gives — and not also live.
func TestJoinerToldOfEachStopOnce(t *testing.T) {
	t.Parallel()
	p := compileC(t, "rounds")
	addr := serveShared(t, false, false)
	a := dialShared(t, addr)
	defer a.close()
	a.launch(map[string]any{"program": p.bin, "np": 2, "env": map[string]any{"ROUNDS": "4"}, "sessionName": "once"})
	a.setBreakpoints(p.src, p.line(t, "first"))
	a.call("configurationDone", nil, nil)
	ast := a.stopped()
	a.ranks() // the ranks are reaped if the test fails

	b := dialShared(t, addr)
	defer b.close()
	b.initialize()
	b.call("attach", map[string]any{"joinSession": "once"}, nil)
	b.event("initialized")
	// The job resumes and stops again while B has joined but not finished its configuration.
	a.call("continue", map[string]any{"threadId": ast.ThreadId}, nil)
	ast = a.stopped()
	stopped := 0
	for _, r := range a.ranks().Ranks {
		if r.State == "stopped" {
			stopped++
		}
	}
	b.call("configurationDone", nil, nil)
	told := map[int]int{}
	for range stopped {
		m, err := b.c.WaitEvent("stopped", time.Minute, nil)
		if err != nil {
			t.Fatal(err)
		}
		var st dap.StoppedEventBody
		if err := m.Decode(&st); err != nil {
			t.Fatal(err)
		}
		told[st.ThreadId]++
	}
	if told[ast.ThreadId] == 0 {
		t.Errorf("B was not told of thread %d's stop (told %v)", ast.ThreadId, told)
	}
	// B's next request is answered after everything its configurationDone sent.
	var threads dap.ThreadsResponseBody
	b.call("threads", nil, &threads)
	all := b.c.Events("stopped")
	if len(all) != stopped {
		t.Errorf("B got %d stopped events for %d stopped ranks:", len(all), stopped)
		for _, m := range all {
			t.Logf("  %s", m.Body)
		}
	}
}
