package adapter

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-dap"
	"github.com/hpcdap/hpcdap/examples"
	"github.com/hpcdap/hpcdap/rankset"
)

// ringProgram builds the demo's example job.
func ringProgram(t testing.TB) *program {
	t.Helper()
	needTool(t, "gcc")
	dir := t.TempDir()
	src := filepath.Join(dir, "ring.c")
	if err := os.WriteFile(src, examples.RingSource, 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "ring")
	if out, err := exec.Command("gcc", "-g", "-O0", "-o", bin, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc ring.c: %v\n%s", err, out)
	}
	p := &program{bin: bin, src: src, dir: dir, marks: map[string]int{}}
	for i, l := range strings.Split(string(examples.RingSource), "\n") {
		switch {
		case strings.Contains(l, "the last rank closes the ring"):
			p.marks["close"] = i + 1
		case strings.Contains(l, "double pi = ring_sum(local);"):
			p.marks["main-call"] = i + 1
		}
	}
	return p
}

// ringOracle runs ranks 0…np-2 of the ring as plain processes and the last rank under gdb,
// stopped at the line where it closes the ring: gdb's view of that rank.
func ringOracle(t *testing.T, p *program, np int) oracleDump {
	t.Helper()
	dir := t.TempDir()
	var others []*exec.Cmd
	for r := 0; r < np-1; r++ {
		cmd := exec.Command(p.bin, dir)
		cmd.Env = append(os.Environ(), fmt.Sprintf("HPCDAP_RANK=%d", r), fmt.Sprintf("HPCDAP_NP=%d", np))
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		others = append(others, cmd)
	}
	defer func() {
		for _, c := range others {
			c.Process.Kill()
			c.Wait()
		}
	}()
	d := gdbOracle(t, p, []string{fmt.Sprintf("HPCDAP_RANK=%d", np-1), fmt.Sprintf("HPCDAP_NP=%d", np)}, []string{dir},
		fmt.Sprintf("break ring.c:%d", p.line(t, "close")), "run", "oracle-dump", "kill")
	return d[0]
}

func TestLaunchFourRanksStopTogether(t *testing.T) {
	t.Parallel()
	for _, tr := range []transport{viaPipe, viaStdio} {
		t.Run(string(tr), func(t *testing.T) { testLaunchFourRanks(t, tr) })
	}
}

func testLaunchFourRanks(t *testing.T, tr transport) {
	p := ringProgram(t)
	oracle := ringOracle(t, p, 4)
	d := newDAP(t, tr)
	defer d.close()
	jobDir := t.TempDir()
	d.launch(map[string]any{"program": p.bin, "args": []string{jobDir}, "np": 4, "cwd": jobDir})
	bps := d.setBreakpoints(p.src, p.line(t, "close"))
	if len(bps) != 1 || !bps[0].Verified || bps[0].Line != p.line(t, "close") {
		t.Fatalf("breakpoint: %+v", bps)
	}
	d.call("configurationDone", nil, nil)
	st := d.stopped()
	ranks := d.ranks()
	if len(ranks.Ranks) != 4 || ranks.Focus != "0-3" {
		t.Fatalf("hpcdap/ranks: %+v", ranks)
	}
	if st.Reason != "breakpoint" || !st.AllThreadsStopped || st.ThreadId != ranks.Ranks[3].ThreadID {
		t.Fatalf("stopped %+v, want a breakpoint stop of rank 3 (thread %d), all threads stopped", st, ranks.Ranks[3].ThreadID)
	}
	if len(st.HitBreakpointIds) != 1 || st.HitBreakpointIds[0] != bps[0].Id {
		t.Errorf("hitBreakpointIds %v, want [%d]", st.HitBreakpointIds, bps[0].Id)
	}
	for _, r := range ranks.Ranks {
		if r.State != "stopped" || r.Pid <= 0 || r.ThreadID != r.Rank+1 {
			t.Errorf("rank %+v: want stopped with a pid and thread id %d", r, r.Rank+1)
		}
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", r.Pid)); err != nil {
			t.Errorf("rank %d: pid %d is not a process", r.Rank, r.Pid)
		}
	}
	if ranks.Ranks[3].StopReason != "breakpoint" {
		t.Errorf("rank 3 stop reason %q", ranks.Ranks[3].StopReason)
	}
	// Threads are named after rank, role and LWP.
	var threads dap.ThreadsResponseBody
	d.call("threads", nil, &threads)
	if len(threads.Threads) != 4 {
		t.Fatalf("threads: %+v", threads.Threads)
	}
	for i, th := range threads.Threads {
		want := fmt.Sprintf("rank %d · main (LWP %d)", i, ranks.Ranks[i].Pid)
		if !strings.HasPrefix(th.Name, want) || th.Id != ranks.Ranks[i].ThreadID {
			t.Errorf("thread %d: %d %q, want %d %q", i, th.Id, th.Name, ranks.Ranks[i].ThreadID, want)
		}
	}
	// Rank 3's stack and variables agree with gdb.
	frames := d.stackTrace(st.ThreadId)
	compareFrames(t, frames, oracle.Frames)
	locals := d.scopeVars(frames[0].Id, "Locals")
	args := d.scopeVars(frames[0].Id, "Arguments")
	for _, name := range []string{"partial", "right", "in"} {
		if got, want := locals[name].Value, oracle.Locals[name]; got != want || want == "" {
			t.Errorf("local %s = %q, gdb says %q", name, got, want)
		}
	}
	if got, want := args["local"].Value, oracle.Args["local"]; got != want || want == "" {
		t.Errorf("argument local = %q, gdb says %q", got, want)
	}
	if locals["partial"].Type != "double" {
		t.Errorf("partial has type %q", locals["partial"].Type)
	}
	// Merged stacks: consistent with every rank's stackTrace.
	checkParallelStacks(t, d, ranks)
	// maxFrames keeps each rank's innermost frames; ranks narrows the tree.
	var ps ParallelStacksBody
	d.call("hpcdap/parallelStacks", map[string]any{"ranks": "3", "maxFrames": 1}, &ps)
	if ps.Total != 1 || len(ps.Roots) != 1 || ps.Roots[0].Name != "ring_sum" || ps.Roots[0].Ranks != "3" ||
		ps.Roots[0].Line != p.line(t, "close") || len(ps.Roots[0].Children) != 0 {
		t.Errorf("parallelStacks of rank 3, one frame: %+v", ps)
	}
	// One variable across the ranks.
	var cmp CompareBody
	d.call("hpcdap/compareExpression", map[string]any{"expression": "local"}, &cmp)
	if len(cmp.Groups) != 4 || len(cmp.Errors) != 0 {
		t.Fatalf("compareExpression: %+v", cmp)
	}
	for _, g := range cmp.Groups {
		r := rankset.MustParse(g.Ranks, 4).Min()
		want := evalInFrameOf(t, d, ranks.Ranks[r].ThreadID, "ring_sum", "local")
		if g.Count != 1 || g.Value != want {
			t.Errorf("rank %d: compareExpression says %q, evaluate in ring_sum says %q", r, g.Value, want)
		}
	}
	// Run to the end: every rank prints pi and exits 0.
	d.setBreakpoints(p.src)
	var cont dap.ContinueResponseBody
	d.call("continue", map[string]any{"threadId": st.ThreadId}, &cont)
	if !cont.AllThreadsContinued {
		t.Errorf("continue did not continue every thread")
	}
	var exited dap.ExitedEventBody
	d.event("exited").Decode(&exited)
	d.event("terminated")
	if exited.ExitCode != 0 {
		t.Errorf("exit code %d", exited.ExitCode)
	}
	out := allOutput(d)
	for r := 0; r < 4; r++ {
		if !strings.Contains(out, fmt.Sprintf("[%d] rank %d of 4: my slice", r, r)) || !strings.Contains(out, "pi = 3.141592653590") {
			t.Errorf("output lacks rank %d's result:\n%s", r, out)
		}
		if !strings.Contains(out, fmt.Sprintf("rank %d exited with code 0", r)) {
			t.Errorf("output lacks rank %d's exit:\n%s", r, out)
		}
	}
	final := d.ranks()
	for _, r := range final.Ranks {
		if r.State != "exited" || r.ExitCode == nil || *r.ExitCode != 0 {
			t.Errorf("rank %d at the end: %+v", r.Rank, r)
		}
	}
	if len(d.c.Events("hpcdap/ranksChanged")) == 0 {
		t.Errorf("no hpcdap/ranksChanged event")
	}
}

// compareFrames checks DAP frames against gdb's: same functions, files and lines.
func compareFrames(t *testing.T, got []dap.StackFrame, want []oracleFrame) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%d frames, gdb has %d:\n got %s\nwant %s", len(got), len(want), frameList(got), oracleList(want))
		return
	}
	for i := range got {
		g, w := got[i], want[i]
		file := ""
		if g.Source != nil {
			file = filepath.Base(g.Source.Path)
		} else if _, err := os.Stat(w.File); w.File != "" && err != nil {
			// A file that is not on this machine (libc's): the frame has no source and no
			// line (TestPauseInLibcFrames); only its function is compared.
			w.File, w.Line = "", 0
		}
		wfile := ""
		if w.File != "" {
			wfile = filepath.Base(w.File)
		}
		if g.Name != w.Name || g.Line != w.Line || file != wfile {
			t.Errorf("frame %d: %s %s:%d, gdb says %s %s:%d", i, g.Name, file, g.Line, w.Name, wfile, w.Line)
		}
	}
}

func frameList(fs []dap.StackFrame) string {
	var b []string
	for _, f := range fs {
		b = append(b, fmt.Sprintf("%s:%d", f.Name, f.Line))
	}
	return strings.Join(b, " ")
}

func oracleList(fs []oracleFrame) string {
	var b []string
	for _, f := range fs {
		b = append(b, fmt.Sprintf("%s:%d", f.Name, f.Line))
	}
	return strings.Join(b, " ")
}

// evalInFrameOf evaluates expr in the first frame of thread tid named fn.
func evalInFrameOf(t *testing.T, d *dapSession, tid int, fn, expr string) string {
	t.Helper()
	for _, f := range d.stackTrace(tid) {
		if f.Name == fn {
			var ev dap.EvaluateResponseBody
			d.call("evaluate", map[string]any{"expression": expr, "frameId": f.Id, "context": "watch"}, &ev)
			return ev.Result
		}
	}
	t.Fatalf("thread %d has no frame %s", tid, fn)
	return ""
}

// allOutput concatenates every output event's text.
func allOutput(d *dapSession) string {
	var b strings.Builder
	for _, m := range d.c.Events("output") {
		var o dap.OutputEventBody
		m.Decode(&o)
		b.WriteString(o.Output)
	}
	return b.String()
}

// checkParallelStacks verifies hpcdap/parallelStacks against the ranks' own stack traces: the
// tree must be the merge of every stopped rank's stackTrace (outermost first), and each node's
// representative frame must be that frame.
func checkParallelStacks(t *testing.T, d *dapSession, ranks RanksBody) ParallelStacksBody {
	t.Helper()
	checkParallelStacksBy(t, d, ranks, true)
	return checkParallelStacksBy(t, d, ranks, false)
}

// checkParallelStacksBy is checkParallelStacks for one merge: by frame, or (byFunction) by
// function whatever the line, where no two siblings may name the same function.
func checkParallelStacksBy(t *testing.T, d *dapSession, ranks RanksBody, byFunction bool) ParallelStacksBody {
	t.Helper()
	var ps ParallelStacksBody
	d.call("hpcdap/parallelStacks", map[string]any{"byFunction": byFunction}, &ps)
	type fkey struct {
		name, path string
		line       int
	}
	stacks := map[int][]fkey{}
	byThread := map[int]int{}
	stopped := 0
	for _, r := range ranks.Ranks {
		byThread[r.ThreadID] = r.Rank
		if r.State != "stopped" {
			continue
		}
		stopped++
		for _, f := range d.stackTrace(r.ThreadID) {
			k := fkey{name: f.Name, line: f.Line}
			if f.Source != nil {
				k.path = f.Source.Path
			}
			if byFunction {
				k.line = 0
			}
			stacks[r.Rank] = append(stacks[r.Rank], k)
		}
	}
	if ps.Total != stopped {
		t.Errorf("parallelStacks total %d, %d ranks are stopped", ps.Total, stopped)
	}
	// Every path from the root to a leaf, read back per rank, must be that rank's stack.
	got := map[int][]fkey{}
	var walk func(n *StackNode, path []fkey)
	walk = func(n *StackNode, path []fkey) {
		k := fkey{name: n.Name, line: n.Line}
		if n.Source != nil {
			k.path = n.Source.Path
		}
		if byFunction {
			k.line = 0
		}
		path = append(append([]fkey(nil), path...), k)
		set, err := rankset.Parse(n.Ranks, -1)
		if err != nil || set.Len() != n.Count {
			t.Errorf("node %d %s: ranks %q count %d", n.ID, n.Name, n.Ranks, n.Count)
		}
		// The representative frame is that thread's frame at frameLevel.
		rep := byThread[n.ThreadID]
		if !set.Contains(rep) {
			t.Errorf("node %d %s: representative thread %d (rank %d) not in ranks %s", n.ID, n.Name, n.ThreadID, rep, n.Ranks)
		} else if st := stacks[rep]; n.FrameLevel >= len(st) || st[n.FrameLevel] != k {
			t.Errorf("node %d %s: frame %d of rank %d is not this frame", n.ID, n.Name, n.FrameLevel, rep)
		}
		childRanks := rankset.Set{}
		seen := map[fkey]bool{}
		for _, c := range n.Children {
			ck := fkey{name: c.Name}
			if c.Source != nil {
				ck.path = c.Source.Path
			}
			if byFunction && seen[ck] {
				t.Errorf("node %d: two children for %s", n.ID, c.Name)
			}
			seen[ck] = true
			cs, _ := rankset.Parse(c.Ranks, -1)
			if !cs.Intersect(childRanks).Empty() {
				t.Errorf("node %d: children share ranks", n.ID)
			}
			childRanks = childRanks.Union(cs)
			walk(c, path)
		}
		for _, r := range set.Minus(childRanks).Ranks() {
			rev := make([]fkey, len(path))
			for i := range path {
				rev[len(path)-1-i] = path[i]
			}
			got[r] = rev
		}
	}
	for _, n := range ps.Roots {
		walk(n, nil)
	}
	var rs []int
	for r := range stacks {
		rs = append(rs, r)
	}
	sort.Ints(rs)
	for _, r := range rs {
		a, _ := json.Marshal(got[r])
		b, _ := json.Marshal(stacks[r])
		if string(a) != string(b) {
			t.Errorf("rank %d: tree path %s, stackTrace %s", r, a, b)
		}
	}
	return ps
}
