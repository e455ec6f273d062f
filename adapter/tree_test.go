package adapter

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hpcdap/hpcdap/rankset"
)

// TestTreeOfAgents launches 8 ranks on 4 local agents (2 ranks each) at fan-out 2, so that
// the front end holds the root's connection alone and agents 0 and 1 are interior (0 → 1, 2;
// 1 → 3). The merged stacks, gathered in one collective reduced on the way up, equal the union
// of every rank's own stackTrace. After kill -9 of interior agent 1, the ranks behind it (its
// own, 2-3, and those of agent 3 below it, 6-7) are reported lost once and ended; parallel
// stacks give the others as before, a continue succeeds for them, and their next all-stop
// and the end of the session do not wait for the lost ones.
func TestTreeOfAgents(t *testing.T) {
	t.Parallel()
	p := compileC(t, "stacks")
	d := newDAP(t, viaPipe)
	defer d.close()
	d.launch(map[string]any{"program": p.bin, "np": 8, "ranksPerAgent": 2, "fanout": 2})
	d.setBreakpoints(p.src, p.line(t, "leaf-first"))
	d.call("configurationDone", nil, nil)
	d.stopped()
	ranks := d.ranks()
	before := checkParallelStacks(t, d, ranks)
	paths := stackPaths(t, before)
	if len(paths) != 8 {
		t.Fatalf("merged stacks of %d ranks, want 8", len(paths))
	}

	// Agent 1 serves ranks 2 and 3: their parent process.
	agent := parentPid(t, ranks.Ranks[2].Pid)
	if got := parentPid(t, ranks.Ranks[3].Pid); got != agent {
		t.Fatalf("ranks 2 and 3 have parents %d and %d, want one agent", agent, got)
	}
	if err := syscall.Kill(agent, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitForExit(t, agent)

	// The root tells the engine which ranks it lost: agent 1's own, and not those of agent 3
	// below it, which the root adopted. They are ended as lost.
	waitOutput(t, d, "lost 2 of 8 ranks (an agent on the way to them is gone): 2-3;")
	lost := map[int]bool{2: true, 3: true}
	waitFor(t, "ranks 2-3 exited", func() bool {
		for _, r := range d.ranks().Ranks {
			if lost[r.Rank] != (r.State == "exited") {
				return false
			}
		}
		return true
	})
	var after ParallelStacksBody
	d.call("hpcdap/parallelStacks", map[string]any{}, &after)
	got := stackPaths(t, after)
	for r := range 8 {
		if lost[r] {
			if _, ok := got[r]; ok {
				t.Errorf("lost rank %d in the parallel stacks", r)
			}
		} else if got[r] != paths[r] {
			t.Errorf("rank %d after the loss: %s, before: %s", r, got[r], paths[r])
		}
	}

	// A continue lets the others go, and the all-stop of their next hit waits for them alone;
	// the lost ranks stay ended.
	var cont struct {
		AllThreadsContinued bool `json:"allThreadsContinued"`
	}
	d.call("continue", map[string]any{"threadId": ranks.Ranks[0].ThreadID}, &cont)
	st := d.stopped()
	for _, r := range d.ranks().Ranks {
		if want := map[bool]string{true: "exited", false: "stopped"}[lost[r.Rank]]; r.State != want {
			t.Errorf("after the continue (stop %s): rank %d %s, want %s", st.Reason, r.Rank, r.State, want)
		}
	}
	for stops := 0; ; stops++ { // each rank hits the breakpoint twice: continue to the end
		if stops > 8 {
			t.Fatalf("still stopping after %d continues; ranks %+v", stops, d.ranks().Ranks)
		}
		d.call("continue", map[string]any{"threadId": ranks.Ranks[0].ThreadID}, nil)
		m, err := d.c.WaitAny([]string{"stopped", "terminated"}, time.Minute, focusStop)
		if err != nil {
			t.Fatalf("%v; ranks %+v\noutput:\n%s", err, d.ranks().Ranks, allOutput(d))
		}
		if m.Event == "terminated" {
			break
		}
	}
	out := allOutput(d)
	if strings.Count(out, "lost 2 of 8") != 1 {
		t.Errorf("the loss is not reported once:\n%s", out)
	}
	for r := range lost {
		if strings.Contains(out, fmt.Sprintf("rank %d could not be stopped", r)) {
			t.Errorf("an all-stop waited for lost rank %d:\n%s", r, out)
		}
	}
	d.call("disconnect", map[string]any{"terminateDebuggee": true}, nil)
}

// TestFanoutArgument refuses a fan-out that makes no tree.
func TestFanoutArgument(t *testing.T) {
	t.Parallel()
	for _, req := range []string{"launch", "attach"} {
		for _, bad := range []int{1, 0, -4} {
			d := newDAP(t, viaPipe)
			d.initialize()
			args := map[string]any{"program": "/bin/true", "fanout": bad}
			if req == "attach" {
				args = map[string]any{"pid": os.Getpid(), "fanout": bad}
			}
			msg := d.callErr(req, args)
			if want := fmt.Sprintf(`"fanout" must be at least 2 (a tree, not a chain), not %d`, bad); !strings.Contains(msg, want) {
				t.Errorf("%s with fanout %d: %q, want %q", req, bad, msg, want)
			}
			d.close()
		}
	}
	d := newDAP(t, viaPipe)
	defer d.close()
	d.initialize()
	if msg := d.callErr("launch", map[string]any{"program": "/bin/true", "ranksPerAgent": 65}); !strings.Contains(msg, `"ranksPerAgent" must be between 1 and 64, not 65`) {
		t.Errorf("ranksPerAgent 65: %q", msg)
	}
	if msg := d.callErr("attach", map[string]any{"pid": os.Getpid(), "ranksPerAgent": 2}); !strings.Contains(msg, `"ranksPerAgent" applies to an attach through a launcher`) {
		t.Errorf("attach by pid with ranksPerAgent: %q", msg)
	}
}

// stackPaths reads a parallel-stacks tree back as one line per rank: its frames from the
// outermost, by name and line.
func stackPaths(t *testing.T, ps ParallelStacksBody) map[int]string {
	t.Helper()
	out := map[int]string{}
	var walk func(n *StackNode, path string)
	walk = func(n *StackNode, path string) {
		path += fmt.Sprintf("/%s:%d", n.Name, n.Line)
		set, err := rankset.Parse(n.Ranks, -1)
		if err != nil {
			t.Fatalf("node %s: ranks %q: %v", n.Name, n.Ranks, err)
		}
		ends := set
		for _, c := range n.Children {
			cs, _ := rankset.Parse(c.Ranks, -1)
			ends = ends.Minus(cs)
			walk(c, path)
		}
		for _, r := range ends.Ranks() {
			out[r] = path
		}
	}
	for _, n := range ps.Roots {
		walk(n, "")
	}
	return out
}

// parentPid reads a process's parent from /proc.
func parentPid(t testing.TB, pid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	ppid, err := strconv.Atoi(f[1])
	if err != nil {
		t.Fatal(err)
	}
	return ppid
}

// BenchmarkTreeOfAgents launches np local ranks on agents of 4 ranks each and compares the
// tree of agents (fan-out 8: np/4 agents below one root) with direct connections (fan-out 64,
// no tree at np/4 ≤ 64 agents): the time from launch to every rank stopped at a breakpoint,
// and one hpcdap/parallelStacks request; front-end-conns counts the TCP connections the front
// end holds to the agents once every rank is stopped.
//
//	go test -run '^$' -bench TreeOfAgents -benchtime 3x ./adapter
func BenchmarkTreeOfAgents(b *testing.B) {
	p := compileC(b, "stacks")
	line := p.line(b, "leaf-first")
	for _, np := range []int{64, 256} {
		for _, fanout := range []int{8, 64} {
			b.Run(fmt.Sprintf("np=%d/agents=%d/fanout=%d", np, np/4, fanout), func(b *testing.B) {
				var ready, stacks time.Duration
				conns := 0
				for range b.N {
					d := newDAP(b, viaPipe)
					d.initialize()
					t0 := time.Now()
					d.call("launch", map[string]any{"program": p.bin, "np": np, "ranksPerAgent": 4, "fanout": fanout}, nil)
					d.event("initialized")
					d.setBreakpoints(p.src, line)
					d.call("configurationDone", nil, nil)
					d.stopped()
					ready += time.Since(t0)
					conns += agentConnections(b, d)
					t1 := time.Now()
					var ps ParallelStacksBody
					d.call("hpcdap/parallelStacks", map[string]any{}, &ps)
					stacks += time.Since(t1)
					if ps.Total != np {
						b.Fatalf("parallel stacks of %d ranks, want %d", ps.Total, np)
					}
					d.close()
				}
				b.ReportMetric(float64(ready.Milliseconds())/float64(b.N), "ms-to-all-stopped")
				b.ReportMetric(float64(stacks.Microseconds())/1000/float64(b.N), "ms-parallel-stacks")
				b.ReportMetric(float64(conns)/float64(b.N), "front-end-conns")
			})
		}
	}
}
