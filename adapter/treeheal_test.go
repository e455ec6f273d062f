package adapter

import (
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-dap"
)

// TestTreeHeals runs 8 ranks of a program that never ends on 8 local agents (one rank each)
// at fan-out 2, a tree three levels deep below the root:
//
//	0 → 1 → 3 → 7
//	      → 4
//	  → 2 → 5
//	      → 6
//
// kill -9 of interior agent 1 loses rank 1 alone: the root adopts agents 3 and 4, and ranks
// 3, 4 and 7 (below the lost agent) still pause, give their stacks, hit a breakpoint and
// continue. Then kill -9 of agent 3, adopted by the root and itself interior, loses rank 3
// alone: agent 7 is adopted in turn and rank 7 still stops and continues. Last, kill -9 of
// the root loses rank 0 alone: the front end adopts agents 2, 4 and 7, and ranks 2, 4, 5, 6
// and 7 still stop, give their stacks, hit a breakpoint and continue. Each loss is reported
// once, by number. The disconnect leaves no rank traced or stopped.
func TestTreeHeals(t *testing.T) {
	t.Parallel()
	p := compileC(t, "spin")
	d := newDAP(t, viaPipe)
	defer d.close()
	d.launch(map[string]any{"program": p.bin, "np": 8, "ranksPerAgent": 1, "fanout": 2})
	d.call("configurationDone", nil, nil)
	ranks := d.ranks()
	pids, tids := map[int]int{}, map[int]int{}
	for _, r := range ranks.Ranks {
		pids[r.Rank], tids[r.Rank] = r.Pid, r.ThreadID
	}
	t.Cleanup(func() { // the ranks the disconnect lets go, and those of the lost agents
		for _, pid := range pids {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	lost := map[int]bool{}
	tid := func() int { // the thread run control is asked on: one of a rank still in the session
		for r := range 8 {
			if !lost[r] {
				return tids[r]
			}
		}
		t.Fatal("every rank lost")
		return 0
	}
	states := func(when, live string) {
		t.Helper()
		waitFor(t, fmt.Sprintf("%s: lost ranks exited, the others %s", when, live), func() bool {
			for _, r := range d.ranks().Ranks {
				if want := map[bool]string{true: "exited", false: live}[lost[r.Rank]]; r.State != want {
					return false
				}
			}
			return true
		})
	}
	states("launched", "running")
	for r := range 8 { // each in its loop, so that its stack goes through main
		waitFor(t, fmt.Sprintf("rank %d ticking", r), func() bool {
			return strings.Contains(allOutput(d), fmt.Sprintf("[%d] tick", r))
		})
	}

	// kill kills the agent of rank r (its parent process) and waits for the loss's report.
	kill := func(r int) {
		t.Helper()
		agent := parentPid(t, pids[r])
		t0 := time.Now()
		if err := syscall.Kill(agent, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		waitForExit(t, agent)
		lost[r] = true
		waitOutput(t, d, fmt.Sprintf("lost 1 of 8 ranks (an agent on the way to them is gone): %d;", r))
		t.Logf("agent of rank %d killed: loss reported and tree healed after %v", r, time.Since(t0).Round(time.Millisecond))
	}
	// pauseAll pauses the job and checks that every rank but the lost ones stopped and gives
	// its stack, main at the bottom.
	pauseAll := func(when string) {
		t.Helper()
		d.call("pause", map[string]any{"threadId": tid()}, nil)
		d.stopped()
		states(when, "stopped")
		for _, r := range d.ranks().Ranks {
			if lost[r.Rank] {
				continue
			}
			frames := d.stackTrace(r.ThreadID)
			if len(frames) == 0 || !slices.ContainsFunc(frames, func(f dap.StackFrame) bool { return f.Name == "main" }) {
				t.Errorf("%s: rank %d: stack %+v, want main in it", when, r.Rank, frames)
			}
		}
		var ps ParallelStacksBody
		d.call("hpcdap/parallelStacks", map[string]any{}, &ps)
		got := stackPaths(t, ps)
		for r := range 8 {
			if _, ok := got[r]; ok == lost[r] {
				t.Errorf("%s: rank %d in the parallel stacks: %v, lost: %v", when, r, ok, lost[r])
			}
		}
	}
	// hitAll plants a breakpoint at tick and continues until every rank still in the session
	// has hit it, then removes it and lets them run.
	hitAll := func(when string) {
		t.Helper()
		d.setBreakpoints(p.src, p.line(t, "tick"))
		hit := map[int]bool{}
		for tries := 0; len(hit) < 8-len(lost); tries++ {
			if tries > 20 {
				t.Fatalf("%s: ranks %v hit the breakpoint after %d continues, want every rank but %v", when, hit, tries, lost)
			}
			d.call("continue", map[string]any{"threadId": tid()}, nil)
			d.stopped()
			for _, r := range d.ranks().Ranks {
				if r.StopReason == "breakpoint" {
					hit[r.Rank] = true
				}
			}
		}
		d.setBreakpoints(p.src)
		d.call("continue", map[string]any{"threadId": tid()}, nil)
		states(when+": continued", "running")
	}

	pauseAll("before the losses")
	d.call("continue", map[string]any{"threadId": tid()}, nil)
	states("continued", "running")

	kill(1) // interior: agents 3 (above 7) and 4 are adopted by the root
	pauseAll("after the loss of agent 1")
	hitAll("after the loss of agent 1")

	kill(3) // adopted by the root, interior: agent 7 is adopted in turn
	pauseAll("after the loss of agent 3")
	hitAll("after the loss of agent 3")

	kill(0) // the root: agents 2, 4 and 7 are adopted by the front end
	pauseAll("after the loss of the root")
	hitAll("after the loss of the root")

	out := allOutput(d)
	for _, r := range []int{1, 3, 0} {
		if n := strings.Count(out, fmt.Sprintf("gone): %d;", r)); n != 1 {
			t.Errorf("the loss of rank %d is reported %d times:\n%s", r, n, out)
		}
	}
	if n := strings.Count(out, "lost 1 of 8 ranks"); n != 3 {
		t.Errorf("%d losses reported, want 3:\n%s", n, out)
	}

	// The agents that adopted the lost agents' children logged their heals (the root's own
	// loss is healed by the front end, whose Router does not log).
	if n := strings.Count(d.agentLogs(), "tree healed"); n != 2 {
		t.Errorf("the agents logged %d heals, want 2 (agents 1 and 3 lost):\n%s", n, d.agentLogs())
	}
	// So did their management planes.
	if n := strings.Count(d.agentLogs(), "management: lost agent"); n != 2 {
		t.Errorf("the agents logged %d management heals, want 2 (agents 1 and 3 lost):\n%s", n, d.agentLogs())
	}
	d.call("disconnect", map[string]any{"terminateDebuggee": false}, nil)
	// The front end asks the agents it adopted to end (2, 4 and 7), and agent 2 asks 5 and
	// 6: each of the five live agents detaches from its rank and ends.
	waitFor(t, "the five live agents' ends in their logs", func() bool {
		return strings.Count(d.agentLogs(), "agent: shut down: detached from 1 process(es)") == 5
	})
	for r, pid := range pids {
		waitFor(t, fmt.Sprintf("rank %d (pid %d) untraced and not stopped after the disconnect", r, pid), func() bool {
			st := procStatus(pid, "State")
			gone := st == "" || strings.HasPrefix(st, "Z")
			return gone || procStatus(pid, "TracerPid") == "0" && !strings.HasPrefix(st, "t") && !strings.HasPrefix(st, "T")
		})
	}
}

// TestTreeEndHealsNothing: a session's end is no loss. 8 ranks, one agent each, at fan-out 2
// (three levels of agents): paused, their stacks read, then the session ends; no agent takes
// another's end for a loss and heals the tree (each heal is in an agent's log).
func TestTreeEndHealsNothing(t *testing.T) {
	t.Parallel()
	p := compileC(t, "spin")
	d := newDAP(t, viaPipe)
	d.launch(map[string]any{"program": p.bin, "np": 8, "ranksPerAgent": 1, "fanout": 2})
	d.call("configurationDone", nil, nil)
	ranks := d.ranks().Ranks
	if len(ranks) != 8 {
		t.Fatalf("ranks %+v, want 8", ranks)
	}
	d.call("pause", map[string]any{"threadId": ranks[0].ThreadID}, nil)
	d.stopped()
	for _, r := range ranks {
		if frames := d.stackTrace(r.ThreadID); len(frames) == 0 {
			t.Fatalf("rank %d: no stack", r.Rank)
		}
	}
	d.call("disconnect", map[string]any{"terminateDebuggee": true}, nil)
	d.end()
	logs := d.agentLogs()
	if !strings.Contains(logs, "agent: shut down") {
		t.Fatalf("the agents' logs say nothing of their end:\n%s", logs)
	}
	if n := strings.Count(logs, "tree healed"); n != 0 {
		t.Errorf("the session's end made agents heal the tree %d times:\n%s", n, logs)
	}
	if n := strings.Count(logs, "management: lost agent"); n != 0 {
		t.Errorf("the session's end made agents heal their management plane %d times:\n%s", n, logs)
	}
}

// TestTreeLogPointsAcrossHeal runs 4 ranks of spin.c on 4 local agents (one rank each) at
// fan-out 2 (0 → 1 → 3, 0 → 2) with a log point at tick, planted before the job starts, and
// kills interior agent 1 (kill -9): rank 3, below it, is adopted by the root, and the log
// point goes on printing for ranks 0, 2 and 3 with no stop, its hits (each a stop the front
// end continues) reaching the front end through the healed tree.
func TestTreeLogPointsAcrossHeal(t *testing.T) {
	t.Parallel()
	p := compileC(t, "spin")
	d := newDAP(t, viaPipe)
	defer d.close()
	d.launch(map[string]any{"program": p.bin, "np": 4, "ranksPerAgent": 1, "fanout": 2})
	var sb SetBreakpointsResponseBodyExt
	d.call("setBreakpoints", map[string]any{"source": map[string]any{"path": p.src}, "breakpoints": []map[string]any{
		{"line": p.line(t, "tick"), "logMessage": "logged ticks={ticks}"}}}, &sb)
	if len(sb.Breakpoints) != 1 || !sb.Breakpoints[0].Verified {
		t.Fatalf("log point: %+v", sb)
	}
	d.call("configurationDone", nil, nil)
	ranks := d.ranks().Ranks
	t.Cleanup(func() {
		for _, r := range ranks {
			syscall.Kill(r.Pid, syscall.SIGKILL)
		}
	})
	logged := func(r int) int { return strings.Count(allOutput(d), fmt.Sprintf("[%d] logged ticks=", r)) }
	for r := range 4 {
		waitFor(t, fmt.Sprintf("rank %d's log point", r), func() bool { return logged(r) > 0 })
	}
	agent := parentPid(t, ranks[1].Pid)
	if err := syscall.Kill(agent, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitForExit(t, agent)
	waitOutput(t, d, "lost 1 of 4 ranks (an agent on the way to them is gone): 1;")
	for _, r := range []int{0, 2, 3} {
		n := logged(r)
		waitFor(t, fmt.Sprintf("rank %d's log point after the heal", r), func() bool { return logged(r) >= n+3 })
	}
	waitFor(t, "rank 1 exited, the others running", func() bool {
		for _, r := range d.ranks().Ranks {
			if want := map[bool]string{true: "exited", false: "running"}[r.Rank == 1]; r.State != want {
				return false
			}
		}
		return true
	})
	if _, err := d.c.WaitEvent("stopped", 0, nil); err == nil {
		t.Error("a log point stopped the session")
	}
	if out := allOutput(d); strings.Count(out, "lost 1 of 4") != 1 {
		t.Errorf("the loss is not reported once:\n%s", out)
	}
	d.call("disconnect", map[string]any{"terminateDebuggee": true}, nil)
}
