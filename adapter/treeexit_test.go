package adapter

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestTreeExits launches 8 ranks on 4 local agents (2 ranks each) at fan-out 2, stops them
// all at a breakpoint's first hit, and continues them to their end, the breakpoint removed,
// each with the exit code rank % 3: their Termination reports come up the tree reduced
// (cdti.Exits, grouped by status), and every rank's own code must reach the client, once,
// before the session's end. (The count of messages is cdti's TestRouterReducesExits'.)
func TestTreeExits(t *testing.T) {
	t.Parallel()
	p := compileC(t, "exitcodes")
	d := newDAP(t, viaPipe)
	defer d.close()
	d.launch(map[string]any{"program": p.bin, "np": 8, "ranksPerAgent": 2, "fanout": 2})
	d.setBreakpoints(p.src, p.line(t, "ready"))
	d.call("configurationDone", nil, nil)
	st := d.stopped() // every rank stopped, the first at the breakpoint
	d.setBreakpoints(p.src)
	before := *d.ranks().Messages
	d.call("continue", map[string]any{"threadId": st.ThreadId}, nil)
	if _, err := d.c.WaitEvent("terminated", time.Minute, nil); err != nil {
		t.Fatalf("%v; ranks %+v\noutput:\n%s", err, d.ranks().Ranks, allOutput(d))
	}
	out := allOutput(d)
	for r := range 8 {
		want := fmt.Sprintf("rank %d exited with code %d\n", r, r%3)
		if n := strings.Count(out, want); n != 1 {
			t.Errorf("%q came %d times, want once; output:\n%s", want, n, out)
		}
	}
	after := *d.ranks().Messages
	t.Logf("the continue and the exits of 8 ranks: %d messages sent, %d received", after.Sent-before.Sent, after.Received-before.Received)
}

// BenchmarkExitAtScale launches np local ranks of exitcodes.c on agents of 64 ranks each at
// fan-out 4 and measures the job's end: from configurationDone (every rank released from its
// start) until the terminated event, and the CDTI messages the front end received meanwhile,
// which are the continue's answer and the exit reports.
//
//	go test -run '^$' -bench ExitAtScale -benchtime 3x ./adapter
func BenchmarkExitAtScale(b *testing.B) {
	p := compileC(b, "exitcodes")
	for _, np := range []int{256, 1024} {
		b.Run(fmt.Sprintf("np=%d", np), func(b *testing.B) {
			var took time.Duration
			var received uint64
			for b.Loop() {
				d := newDAP(b, viaPipe)
				d.launch(map[string]any{"program": p.bin, "np": np, "ranksPerAgent": 64, "fanout": 4})
				before := *d.ranks().Messages
				t0 := time.Now()
				d.call("configurationDone", nil, nil)
				if _, err := d.c.WaitEvent("terminated", time.Minute, nil); err != nil {
					b.Fatal(err)
				}
				took += time.Since(t0)
				received += d.ranks().Messages.Received - before.Received
				d.close()
			}
			n := float64(b.N)
			b.ReportMetric(float64(took.Microseconds())/1000/n, "end-ms")
			b.ReportMetric(float64(received)/n, "fe-received")
		})
	}
}
