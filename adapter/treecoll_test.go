package adapter

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-dap"
)

// TestTreeCollectives runs 8 ranks of a program that never ends on 4 local agents (2 ranks
// each) at fan-out 2, so that the front end holds the root's connection alone, and counts the
// CDTI messages the front end sends and receives (hpcdap/ranks' messages):
//   - the pause of every rank is one request and one reduced answer (a quiet collective stop:
//     no Notify per rank), and every rank is then stopped;
//   - the continue of every rank is one request and one answer, and every rank runs;
//   - the thread lists at the next stop are one request;
//   - a breakpoint moved on every rank is two collectives (the originals read, one list that
//     plants and removes) and every rank then hits it; removing it is two collectives;
//   - after kill -9 of interior agent 1, its own ranks (2-3) are named lost, and the others,
//     those of agent 3 below it included, still hit the breakpoint, pause and continue; the
//     lost ones are neither stopped nor trapped;
//   - the end of the session kills the 6 ranks left with one collective.
func TestTreeCollectives(t *testing.T) {
	t.Parallel()
	p := compileC(t, "spin")
	d, w := newDAPKeepingLog(t, viaPipe)
	defer d.close()
	d.launch(map[string]any{"program": p.bin, "np": 8, "ranksPerAgent": 2, "fanout": 2})
	d.call("configurationDone", nil, nil)
	ranks := d.ranks()
	tid := ranks.Ranks[0].ThreadID
	messages := func() MessageCounts { return *d.ranks().Messages }
	states := func(want string) {
		t.Helper()
		for _, r := range d.ranks().Ranks {
			if r.State != want {
				t.Fatalf("rank %d %s, want %s", r.Rank, r.State, want)
			}
		}
	}
	exchanged := func(what string, before MessageCounts, sent, received uint64) {
		t.Helper()
		after := messages()
		if got := [2]uint64{after.Sent - before.Sent, after.Received - before.Received}; got != [2]uint64{sent, received} {
			t.Errorf("%s of 8 ranks: %d messages sent, %d received; want %d and %d", what, got[0], got[1], sent, received)
		}
	}
	waitFor(t, "every rank running", func() bool {
		for _, r := range d.ranks().Ranks {
			if r.State != "running" {
				return false
			}
		}
		return true
	})

	before := messages()
	d.call("pause", map[string]any{"threadId": tid}, nil)
	if st := d.stopped(); st.Reason != "pause" || !st.AllThreadsStopped {
		t.Fatalf("pause: stopped %+v", st)
	}
	states("stopped")
	exchanged("pause", before, 1, 1)
	d.call("threads", nil, nil) // the threads named: what the thread library says is read once

	before = messages()
	d.call("continue", map[string]any{"threadId": tid}, nil)
	states("running")
	exchanged("continue", before, 1, 1)

	d.call("pause", map[string]any{"threadId": tid}, nil)
	d.stopped()
	// The thread lists of the stop: one collective, one answer.
	before = messages()
	var threads dap.ThreadsResponseBody
	d.call("threads", nil, &threads)
	if len(threads.Threads) != 8 {
		t.Errorf("the threads of 8 stopped ranks: %d threads", len(threads.Threads))
	}
	exchanged("the threads of a stop", before, 1, 1)
	// A new breakpoint after the ranks ran has their link maps read again, rank by rank (the
	// libraries may have changed; one Query a rank, its state with it): done here by a first
	// breakpoint, at the sleep. Moving it to the tick at the same stop is then two collectives
	// (the originals under the trap that goes, and the one list that plants one trap and
	// removes the other), and nothing per rank.
	before = messages()
	d.setBreakpoints(p.src, p.line(t, "sleep"))
	if after := messages(); after.Sent-before.Sent > 2+8 || after.Received-before.Received > 2+8 {
		t.Errorf("a first breakpoint after a run of 8 ranks: %d messages sent, %d received; want at most 2 collectives and 1 per rank",
			after.Sent-before.Sent, after.Received-before.Received)
	}
	before = messages()
	bps := d.setBreakpoints(p.src, p.line(t, "tick"))
	if !bps[0].Verified {
		t.Fatalf("breakpoint %+v", bps[0])
	}
	exchanged("move a breakpoint", before, 2, 2)
	hit := map[int]bool{}
	for tries := 0; len(hit) < 8; tries++ {
		if tries > 20 {
			t.Fatalf("ranks %v hit the breakpoint after %d continues, want all 8", hit, tries)
		}
		d.call("continue", map[string]any{"threadId": tid}, nil)
		d.stopped()
		for _, r := range d.ranks().Ranks {
			if r.StopReason == "breakpoint" {
				hit[r.Rank] = true
			}
		}
	}
	before = messages()
	d.setBreakpoints(p.src)
	exchanged("remove a breakpoint (the originals read, the traps reset)", before, 2, 2)

	d.setBreakpoints(p.src, p.line(t, "tick"))

	// kill -9 of interior agent 1 (ranks 2 and 3; agent 3 below it serves 6 and 7), the
	// breakpoint planted and the job running.
	agent := parentPid(t, ranks.Ranks[2].Pid)
	d.call("continue", map[string]any{"threadId": tid}, nil)
	if err := syscall.Kill(agent, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitForExit(t, agent)
	waitOutput(t, d, "lost 2 of 8 ranks (an agent on the way to them is gone): 2-3;")
	lost := map[int]bool{2: true, 3: true}
	check := func(when, live string) {
		t.Helper()
		for _, r := range d.ranks().Ranks {
			if want := map[bool]string{true: "exited", false: live}[lost[r.Rank]]; r.State != want {
				t.Errorf("%s: rank %d %s, want %s", when, r.Rank, r.State, want)
			}
		}
	}
	d.stopped() // the breakpoint, hit by the ranks still in the session
	check("stopped after the loss", "stopped")
	d.setBreakpoints(p.src)
	d.call("continue", map[string]any{"threadId": tid}, nil)
	check("continued after the loss", "running")
	d.call("pause", map[string]any{"threadId": tid}, nil)
	d.stopped()
	check("paused after the loss", "stopped")
	// Ranks 2 and 3, of the lost agent, are not left stopped or trapped (they run on, or died
	// with the pipes of their agent).
	for _, r := range []int{2, 3} {
		if st := procStatus(ranks.Ranks[r].Pid, "State"); strings.HasPrefix(st, "t") || strings.HasPrefix(st, "T") {
			t.Errorf("lost rank %d: state %s", r, st)
		}
	}
	out := allOutput(d)
	if strings.Count(out, "lost 2 of 8") != 1 {
		t.Errorf("the loss is not reported once:\n%s", out)
	}
	d.call("disconnect", map[string]any{"terminateDebuggee": true}, nil)
	for _, r := range ranks.Ranks {
		if !lost[r.Rank] {
			waitForExit(t, r.Pid)
		}
	}
	if !strings.Contains(w.text(), "job: collective SendSignalToProcess on 6 ranks: 1 outcomes, 0 unreachable") {
		t.Errorf("no collective kill of the 6 ranks left in the log (above)")
	}
}

// forCollectiveModes runs bench at 256 and 1,024 ranks, with collectives and rank by rank
// (HPCDAP_COLLECTIVES=0), as the sub-benchmarks "np=N/collective" and "np=N/per-rank".
func forCollectiveModes(b *testing.B, bench func(b *testing.B, np int)) {
	for _, np := range []int{256, 1024} {
		for _, how := range []string{"collective", "per-rank"} {
			b.Run(fmt.Sprintf("np=%d/%s", np, how), func(b *testing.B) {
				if how == "per-rank" {
					b.Setenv("HPCDAP_COLLECTIVES", "0")
				}
				bench(b, np)
			})
		}
	}
}

// BenchmarkCollectivePauseContinue launches np local ranks of a sleeping program on agents of
// 64 ranks each at fan-out 4 (a tree above 4 agents) and measures a pause of every rank (the
// request until the stopped event) and a continue of every rank (the request until its
// response), and the CDTI messages the front end exchanged for both: with collectives, and
// rank by rank (HPCDAP_COLLECTIVES=0).
//
//	go test -run '^$' -bench CollectivePauseContinue -benchtime 3x ./adapter
func BenchmarkCollectivePauseContinue(b *testing.B) {
	p := compileC(b, "nap")
	forCollectiveModes(b, func(b *testing.B, np int) {
		d := newDAP(b, viaPipe)
		defer d.close()
		d.launch(map[string]any{"program": p.bin, "np": np, "ranksPerAgent": 64, "fanout": 4})
		d.call("configurationDone", nil, nil)
		tid := d.ranks().Ranks[0].ThreadID
		var pause, cont time.Duration
		before := *d.ranks().Messages
		for b.Loop() {
			t0 := time.Now()
			d.call("pause", map[string]any{"threadId": tid}, nil)
			d.stopped()
			t1 := time.Now()
			d.call("continue", map[string]any{"threadId": tid}, nil)
			pause += t1.Sub(t0)
			cont += time.Since(t1)
		}
		after := *d.ranks().Messages
		n := float64(b.N)
		b.ReportMetric(float64(pause.Microseconds())/1000/n, "pause-ms")
		b.ReportMetric(float64(cont.Microseconds())/1000/n, "continue-ms")
		b.ReportMetric(float64(after.Sent-before.Sent+after.Received-before.Received)/n, "fe-msgs")
	})
}

// TestTreeDetach ends a session of 8 ranks on 4 local agents (2 ranks each) at fan-out 2,
// stopped at a breakpoint that their loop passes every 5 ms, with a detach: the release of
// control goes down the tree as collectives, and every rank then runs on untraced, its trap
// gone (a trap left behind would kill it with SIGTRAP within 5 ms). The front end's log must
// show the one ReleaseControl collective that reached all 8 ranks.
func TestTreeDetach(t *testing.T) {
	t.Parallel()
	p := compileC(t, "runctl")
	d, w := newDAPKeepingLog(t, viaPipe)
	defer d.close()
	d.launch(map[string]any{"program": p.bin, "args": []string{"spin"}, "np": 8, "ranksPerAgent": 2, "fanout": 2})
	d.setBreakpoints(p.src, p.line(t, "spin"))
	d.call("configurationDone", nil, nil)
	d.stopped()
	ranks := d.ranks().Ranks
	defer func() {
		for _, r := range ranks {
			syscall.Kill(r.Pid, syscall.SIGKILL)
		}
	}()
	// The main thread sleeps once per pass through the breakpoint's line: its voluntary
	// context switches count the passes.
	passes := func(pid int) int {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/status", pid, pid))
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "voluntary_ctxt_switches:"); ok {
				n, _ := strconv.Atoi(strings.TrimSpace(v))
				return n
			}
		}
		return -1
	}
	d.call("disconnect", map[string]any{"terminateDebuggee": false}, nil)
	before := map[int]int{}
	for _, r := range ranks {
		before[r.Pid] = passes(r.Pid)
		if tp := procStatus(r.Pid, "TracerPid"); tp != "0" {
			t.Errorf("rank %d (pid %d) still traced by %s after the detach", r.Rank, r.Pid, tp)
		}
	}
	// Every rank passes the line twice more (or dies there of a trap left behind).
	waitFor(t, "every rank to pass its loop's line after the detach", func() bool {
		for _, r := range ranks {
			if n := passes(r.Pid); n >= 0 && n < before[r.Pid]+2 {
				return false
			}
		}
		return true
	})
	for _, r := range ranks {
		switch st := procStatus(r.Pid, "State"); {
		case st == "" || strings.HasPrefix(st, "Z"):
			t.Errorf("rank %d (pid %d) died after the detach", r.Rank, r.Pid)
		case strings.HasPrefix(st, "t") || strings.HasPrefix(st, "T"):
			t.Errorf("rank %d (pid %d) is %s after the detach", r.Rank, r.Pid, st)
		}
	}
	if !strings.Contains(w.text(), "job: collective ReleaseControl on 8 ranks: 1 outcomes, 0 unreachable") {
		t.Errorf("no collective release of the 8 ranks in the log (above)")
	}
}

// BenchmarkDetach measures the end of a session that leaves its ranks running, as `hpcdap
// stacks` ends: nap.c launched on local agents of 64 ranks at fan-out 4, every rank paused,
// then the disconnect request (terminateDebuggee false) to its response, after which every
// rank must be running untraced; rank by rank with HPCDAP_COLLECTIVES=0.
func BenchmarkDetach(b *testing.B) {
	p := compileC(b, "nap")
	forCollectiveModes(b, func(b *testing.B, np int) {
		var took time.Duration
		for b.Loop() {
			d := newDAP(b, viaPipe)
			d.launch(map[string]any{"program": p.bin, "np": np, "ranksPerAgent": 64, "fanout": 4})
			d.call("configurationDone", nil, nil)
			ranks := d.ranks().Ranks
			d.call("pause", map[string]any{"threadId": ranks[0].ThreadID}, nil)
			d.stopped()
			t0 := time.Now()
			d.call("disconnect", map[string]any{"terminateDebuggee": false}, nil)
			took += time.Since(t0)
			for _, r := range ranks {
				tp, st := procStatus(r.Pid, "TracerPid"), procStatus(r.Pid, "State")
				if tp != "0" || strings.HasPrefix(st, "t") || strings.HasPrefix(st, "T") {
					b.Errorf("rank %d (pid %d) after the detach: tracer %q, state %q", r.Rank, r.Pid, tp, st)
				}
				syscall.Kill(r.Pid, syscall.SIGKILL)
			}
			d.close()
		}
		b.ReportMetric(float64(took.Microseconds())/1000/float64(b.N), "detach-ms")
	})
}

// BenchmarkCompareAtScale measures hpcdap/compareExpression over every rank of nap.c, paused
// in libc's sleep (local agents of 64 ranks at fan-out 4): a local of main and a global, each
// holding the rank, and one value every rank shares; the first compare of a stop (the stacks
// unwound) apart from the later ones.
func BenchmarkCompareAtScale(b *testing.B) {
	p := compileC(b, "nap")
	for _, np := range []int{256, 1024} {
		b.Run(fmt.Sprintf("np=%d", np), func(b *testing.B) {
			d := newDAP(b, viaPipe)
			defer d.close()
			d.launch(map[string]any{"program": p.bin, "np": np, "ranksPerAgent": 64, "fanout": 4})
			d.call("configurationDone", nil, nil)
			tid := d.ranks().Ranks[0].ThreadID
			var first, again time.Duration
			var msgs uint64
			for b.Loop() {
				d.call("pause", map[string]any{"threadId": tid}, nil)
				d.stopped()
				m0 := *d.ranks().Messages
				for i, c := range []struct {
					expr   string
					groups int
				}{{"rank", np}, {"rank_id", np}, {"rank_id - rank", 1}} {
					t0 := time.Now()
					var cmp CompareBody
					d.call("hpcdap/compareExpression", map[string]any{"expression": c.expr}, &cmp)
					if i == 0 {
						first += time.Since(t0)
					} else {
						again += time.Since(t0)
					}
					n := 0
					for _, g := range cmp.Groups {
						n += g.Count
					}
					if n != np || len(cmp.Groups) != c.groups || len(cmp.Errors) > 0 {
						b.Fatalf("compare %s: %d groups of %d ranks, errors %+v", c.expr, len(cmp.Groups), n, cmp.Errors)
					}
				}
				m1 := *d.ranks().Messages
				msgs += m1.Sent - m0.Sent + m1.Received - m0.Received
				d.call("continue", map[string]any{"threadId": tid}, nil)
			}
			n := float64(b.N)
			b.ReportMetric(float64(first.Microseconds())/1000/n, "first-ms")
			b.ReportMetric(float64(again.Microseconds())/1000/n/2, "again-ms")
			b.ReportMetric(float64(msgs)/n, "fe-msgs")
		})
	}
}
