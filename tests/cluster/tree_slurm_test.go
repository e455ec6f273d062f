package cluster

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hpcdap/hpcdap/rankset"
	"github.com/hpcdap/hpcdap/topology"
)

// submitHung submits a batch job whose step 0 runs testdata/hung.c as n tasks on the four
// nodes (n/4 per node, overcommitting their CPUs: the ranks only block) and waits until every
// rank has said it blocks. It returns the job id; the job is cancelled when the test ends.
func submitHung(t testing.TB, c *Cluster, prog string, n int) string {
	t.Helper()
	dir := t.TempDir()
	outFile := filepath.Join(dir, "job.out")
	script := fmt.Sprintf("#!/bin/sh\nexec srun --mpi=none --overcommit %s\n", prog)
	scriptFile := filepath.Join(dir, "job.sh")
	if err := os.WriteFile(scriptFile, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := c.Command("sbatch", "--parsable", "-N4", "-n"+strconv.Itoa(n), "--overcommit", "--output="+outFile,
		"--chdir="+dir, scriptFile)
	sb, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("phase submit: sbatch: %v\n%s", err, sb)
	}
	job := strings.TrimSpace(string(sb))
	if _, err := strconv.Atoi(job); err != nil {
		t.Fatalf("phase submit: sbatch --parsable said %q", sb)
	}
	t.Cleanup(func() { c.Command("scancel", job).Run() })
	deadline := time.Now().Add(120 * time.Second)
	for {
		out, _ := os.ReadFile(outFile)
		if strings.Count(string(out), " blocking\n") == n {
			return job
		}
		if time.Now().After(deadline) {
			q, _ := c.Command("squeue", "-s").CombinedOutput()
			t.Fatalf("phase submit: job %s: %d of %d ranks block after 120 s:\n%s\nsqueue -s:\n%s\n%s", job,
				strings.Count(string(out), " blocking\n"), n, tail(string(out), 20), q, c.Logs())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// psNode is one node of hpcdap/parallelStacks' tree.
type psNode struct {
	Name     string    `json:"name"`
	Line     int       `json:"line"`
	Ranks    string    `json:"ranks"`
	Count    int       `json:"count"`
	Children []*psNode `json:"children"`
}

// psBody is hpcdap/parallelStacks' answer.
type psBody struct {
	Total int       `json:"total"`
	Roots []*psNode `json:"roots"`
}

// parallelStacks asks for the merged stacks and reads them back as one path per rank: its
// frames from the outermost, "name:line/...".
func (d *dapRun) parallelStacks() map[int]string {
	d.t.Helper()
	var b psBody
	d.call("hpcdap/parallelStacks", map[string]any{}, &b)
	out := map[int]string{}
	var walk func(n *psNode, path string)
	walk = func(n *psNode, path string) {
		path += fmt.Sprintf("/%s:%d", n.Name, n.Line)
		set, err := rankset.Parse(n.Ranks, -1)
		if err != nil {
			d.fatalf("parallel stacks: node %s: ranks %q: %v", n.Name, n.Ranks, err)
		}
		if set.Len() != n.Count {
			d.errorf("parallel stacks: node %s: ranks %q are %d, count says %d", n.Name, n.Ranks, set.Len(), n.Count)
		}
		ends := set
		for _, c := range n.Children {
			cs, _ := rankset.Parse(c.Ranks, -1)
			ends = ends.Minus(cs)
			walk(c, path)
		}
		for _, r := range ends.Ranks() {
			if _, dup := out[r]; dup {
				d.errorf("parallel stacks: rank %d ends in two places", r)
			}
			out[r] = path
		}
	}
	for _, n := range b.Roots {
		walk(n, "")
	}
	if b.Total != len(out) {
		d.errorf("parallel stacks: total %d, but %d ranks in the tree", b.Total, len(out))
	}
	return out
}

// stackPath is a rank's own stackTrace as a parallel-stacks path.
func (d *dapRun) stackPath(tid int) string {
	d.t.Helper()
	fs := d.stackTrace(tid)
	var b strings.Builder
	for i := len(fs) - 1; i >= 0; i-- {
		fmt.Fprintf(&b, "/%s:%d", fs[i].Name, fs[i].Line)
	}
	return b.String()
}

// hungCall is the function each rank of testdata/hung.c waits under.
func hungCall(rank int) string {
	return [...]string{"wait_for_peer", "wait_for_signal", "wait_for_event", "spin_on_lock"}[(rank/2)%4]
}

// agentProc is an hpcdap agent worker found on the machine: its pid and the ranks of its
// --attach list.
type agentProc struct {
	pid   int
	ranks []int
}

// agentWorkers lists the agent workers (not their supervisors, nor a node's splitter) that
// serve ranks of the job, by their first rank.
func agentWorkers(job string) []agentProc {
	var out []agentProc
	for _, pid := range pidsWithEnv("SLURM_JOB_ID=" + job) {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		if len(args) < 2 || args[1] != "agent" || slices.Contains(args, "--supervise") {
			continue
		}
		i := slices.Index(args, "--attach")
		if i < 0 || i+1 >= len(args) {
			continue
		}
		var a agentProc
		a.pid = pid
		for _, pair := range strings.Split(args[i+1], ",") {
			r, _, _ := strings.Cut(pair, "=")
			if n, err := strconv.Atoi(r); err == nil {
				a.ranks = append(a.ranks, n)
			}
		}
		out = append(out, a)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ranks[0] < out[j].ranks[0] })
	return out
}

// pidsWithEnv lists the processes whose environment holds kv ("K=V").
func pidsWithEnv(kv string) []int {
	envs, _ := filepath.Glob("/proc/[0-9]*/environ")
	var out []int
	for _, e := range envs {
		pid, err := strconv.Atoi(filepath.Base(filepath.Dir(e)))
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(e)
		if err != nil {
			continue
		}
		for _, v := range strings.Split(string(b), "\x00") {
			if v == kv {
				out = append(out, pid)
				break
			}
		}
	}
	return out
}

// waitOutput waits for text in the adapter's output events.
func (d *dapRun) waitOutput(text string, limit time.Duration) string {
	d.t.Helper()
	deadline := time.Now().Add(limit)
	for {
		out := d.output()
		if strings.Contains(out, text) {
			return out
		}
		if time.Now().After(deadline) {
			d.fatalf("no output %q within %v; output:\n%s", text, limit, tail(out, 20))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// 1,024 ranks (256 on each of the four nodes) of a hung job, attached by step id through
// `hpcdap dap` at fan-out 2. A node's 256 ranks take four agents (an agent serves at most 64),
// so the 16 agents make a tree four levels deep. Paused, the merged stacks equal the union of
// every rank's own stackTrace, and each rank waits where the program says. Then kill -9 of
// interior agent 1 (ranks 64-127, on node1): the root adopts the agents below it, the next
// operation reports agent 1's own ranks lost, by number, and no other, and the rest, those
// below agent 1 included, go on: their stacks as before, a continue and a pause. Then kill -9
// of the root, agent 0 (ranks 0-63): the front end adopts the agents below it, and the same
// holds with the root's ranks lost too.
// After the disconnect no rank of any node is left stopped or traced, and no agent is left.
func TestDAPSlurmTree1024(t *testing.T) {
	hpcdap(t)
	p := buildC(t, "hung", "gcc", "gcc")
	c := slurm.Need(t)
	cancelJobs(t, c)
	const n, fanout = 1024, 2
	job := submitHung(t, c, p.bin, n)
	step := job + ".0"
	t0 := time.Now()
	d := startDAP(t, c, 540*time.Second)
	d.initialize()
	d.in("attach " + step)
	d.call("attach", map[string]any{"slurmJob": step, "program": p.bin, "fanout": fanout}, nil)
	d.event("initialized", 240*time.Second)
	ranks := d.rankTable()
	checkRankTable(d, ranks, n, c.Nodes)
	workers := agentWorkers(job)
	if len(workers) != n/64 {
		d.fatalf("%d agents serve the job, want %d (64 ranks each): %v", len(workers), n/64, workers)
	}
	for i, w := range workers {
		if want := rankset.Range(64*i, 64*i+63); fmt.Sprint(w.ranks) != fmt.Sprint(want.Ranks()) {
			d.errorf("agent %d (pid %d) serves ranks %v, want %s", i, w.pid, w.ranks, want)
		}
	}
	t.Logf("%d ranks attached through %d agents (%v)", len(ranks), len(workers), time.Since(t0).Round(time.Millisecond))
	d.call("configurationDone", nil, nil)

	d.in("pause")
	d.call("pause", map[string]any{"threadId": ranks[0].ThreadID}, nil)
	ranks = d.waitRanks(120*time.Second, "stopped by the pause", func(r rankState) bool { return r.State == "stopped" })

	d.in("parallel stacks against each rank's stackTrace")
	merged := d.parallelStacks()
	if len(merged) != n {
		d.fatalf("parallel stacks of %d ranks, want %d", len(merged), n)
	}
	for _, r := range ranks {
		own := d.stackPath(r.ThreadID)
		if merged[r.Rank] != own {
			d.errorf("rank %d: merged stack %s, its own stackTrace %s", r.Rank, merged[r.Rank], own)
		}
		if want := "/" + hungCall(r.Rank) + ":"; !strings.Contains(own, "/main:") || !strings.Contains(own, want) {
			d.errorf("rank %d: stack %s, want main ... %s", r.Rank, own, hungCall(r.Rank))
		}
	}

	d.in("compare main's rank across the ranks")
	d.compareRanks(n, rankset.Set{})

	d.in("kill -9 interior agent 1")
	tree, err := topology.New(len(workers), fanout)
	if err != nil {
		d.fatalf("%v", err)
	}
	if !tree.Interior(1) {
		d.fatalf("agent 1 of %d is not interior at fan-out %d", len(workers), fanout)
	}
	var lost rankset.Set // agent 1's own ranks: the agents below it are adopted
	for _, r := range workers[1].ranks {
		lost = lost.Add(r)
	}
	if err := syscall.Kill(workers[1].pid, syscall.SIGKILL); err != nil {
		d.fatalf("kill agent 1 (pid %d): %v", workers[1].pid, err)
	}
	// The operation after the loss (the stacks) reports the lost ranks by number.
	d.parallelStacks()
	t.Logf("agent 1 (pid %d) killed; it served ranks %s; agents %v below it are adopted", workers[1].pid, lost, tree.Subtree(1)[1:])
	d.waitOutput(fmt.Sprintf("lost %d of %d ranks (an agent on the way to them is gone): %s", lost.Len(), n, lost), 30*time.Second)
	d.in("the rest after the loss")
	// The engine ends the lost ranks as it reports them: wait until it has ended them all.
	d.waitRanks(30*time.Second, "ended if lost, else stopped", func(r rankState) bool {
		return r.State == map[bool]string{true: "exited", false: "stopped"}[lost.Contains(r.Rank)]
	})
	after := d.parallelStacks()
	for r := range n {
		got, ok := after[r]
		switch {
		case lost.Contains(r) && ok:
			d.errorf("lost rank %d in the parallel stacks", r)
		case !lost.Contains(r) && got != merged[r]:
			d.errorf("rank %d after the loss: %s, before: %s", r, got, merged[r])
		}
	}
	d.compareRanks(n, lost)
	d.in("continue and pause the rest")
	d.call("continue", map[string]any{"threadId": ranks[0].ThreadID}, nil)
	d.waitRanks(60*time.Second, "running", func(r rankState) bool { return r.State == "running" || lost.Contains(r.Rank) })
	d.call("pause", map[string]any{"threadId": ranks[0].ThreadID}, nil)
	d.waitRanks(60*time.Second, "stopped again", func(r rankState) bool { return r.State == "stopped" || lost.Contains(r.Rank) })
	if again := d.parallelStacks(); len(again) != n-lost.Len() {
		d.errorf("parallel stacks after the second pause: %d ranks, want %d", len(again), n-lost.Len())
	}

	d.in("kill -9 the root agent")
	var root rankset.Set // agent 0's own ranks: the front end adopts the agents below it
	for _, r := range workers[0].ranks {
		root = root.Add(r)
	}
	if err := syscall.Kill(workers[0].pid, syscall.SIGKILL); err != nil {
		d.fatalf("kill agent 0 (pid %d): %v", workers[0].pid, err)
	}
	d.parallelStacks()
	d.waitOutput(fmt.Sprintf("lost %d of %d ranks (an agent on the way to them is gone): %s", root.Len(), n, root), 30*time.Second)
	lost = lost.Union(root)
	d.waitRanks(30*time.Second, "ended if lost, else stopped", func(r rankState) bool {
		return r.State == map[bool]string{true: "exited", false: "stopped"}[lost.Contains(r.Rank)]
	})
	after = d.parallelStacks()
	for r := range n {
		got, ok := after[r]
		switch {
		case lost.Contains(r) && ok:
			d.errorf("lost rank %d in the parallel stacks after the root's loss", r)
		case !lost.Contains(r) && got != merged[r]:
			d.errorf("rank %d after the root's loss: %s, before: %s", r, got, merged[r])
		}
	}
	alive := ranks[len(ranks)-1].ThreadID // a rank of the last agent, neither lost
	d.call("continue", map[string]any{"threadId": alive}, nil)
	d.waitRanks(60*time.Second, "running after the root's loss", func(r rankState) bool { return r.State == "running" || lost.Contains(r.Rank) })
	d.call("pause", map[string]any{"threadId": alive}, nil)
	d.waitRanks(60*time.Second, "stopped after the root's loss", func(r rankState) bool { return r.State == "stopped" || lost.Contains(r.Rank) })

	d.in("disconnect without terminating")
	d.call("disconnect", map[string]any{"terminateDebuggee": false}, nil)
	d.checkLetGo(ranks, 30*time.Second)
	deadline := time.Now().Add(30 * time.Second)
	for left := agentWorkers(job); len(left) > 0; left = agentWorkers(job) {
		if time.Now().After(deadline) {
			d.errorf("%d agents left 30 s after the disconnect: %v", len(left), left)
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	d.ranks = nil // the job's ranks are not the session's to kill; the cleanup cancels the job
}

// An attach by step id with "ranksPerAgent": 2 gives a node of 8 ranks four agents, the job
// of 32 ranks 16 (a tree four levels deep at fan-out 2), each serving its two ranks; the
// merged stacks equal every rank's own stackTrace, and the disconnect leaves no rank stopped
// or traced and no agent running.
func TestDAPSlurmRanksPerAgent(t *testing.T) {
	hpcdap(t)
	p := buildC(t, "hung", "gcc", "gcc")
	c := slurm.Need(t)
	cancelJobs(t, c)
	const n, per = 32, 2
	job := submitHung(t, c, p.bin, n)
	d := startDAP(t, c, 240*time.Second)
	d.initialize()
	d.in("attach")
	d.call("attach", map[string]any{"slurmJob": job + ".0", "program": p.bin, "fanout": 2, "ranksPerAgent": per}, nil)
	d.event("initialized", 120*time.Second)
	ranks := d.rankTable()
	checkRankTable(d, ranks, n, c.Nodes)
	workers := agentWorkers(job)
	if len(workers) != n/per {
		d.fatalf("%d agents, want %d: %v", len(workers), n/per, workers)
	}
	for i, w := range workers {
		if fmt.Sprint(w.ranks) != fmt.Sprint([]int{per * i, per*i + 1}) {
			d.errorf("agent %d (pid %d) serves ranks %v, want %d-%d", i, w.pid, w.ranks, per*i, per*i+1)
		}
	}
	d.call("configurationDone", nil, nil)
	d.in("pause")
	d.call("pause", map[string]any{"threadId": ranks[0].ThreadID}, nil)
	ranks = d.waitRanks(60*time.Second, "stopped by the pause", func(r rankState) bool { return r.State == "stopped" })
	merged := d.parallelStacks()
	for _, r := range ranks {
		if own := d.stackPath(r.ThreadID); merged[r.Rank] != own || !strings.Contains(own, "/"+hungCall(r.Rank)+":") {
			d.errorf("rank %d: merged %s, own %s, want it under %s", r.Rank, merged[r.Rank], own, hungCall(r.Rank))
		}
	}
	d.in("disconnect")
	d.call("disconnect", map[string]any{"terminateDebuggee": false}, nil)
	d.checkLetGo(ranks, 30*time.Second)
	deadline := time.Now().Add(30 * time.Second)
	for left := agentWorkers(job); len(left) > 0; left = agentWorkers(job) {
		if time.Now().After(deadline) {
			d.errorf("%d agents left 30 s after the disconnect: %v", len(left), left)
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	d.ranks = nil
}

// compareRanks compares main's rank across every rank of the hung job (the agents evaluate it
// in the frame of main, above the C library's, each rank's modules wherever randomisation put
// them): each live rank's value is its number, alone in its group, and each lost rank is an
// error. The values come back through the tree grouped: the comparison costs the front end
// fewer CDTI messages than there are ranks.
func (d *dapRun) compareRanks(n int, lost rankset.Set) {
	d.t.Helper()
	var cmp struct {
		Groups []struct {
			Value, Ranks string
			Count        int
		}
		Errors []struct{ Message, Ranks string }
	}
	m0, t0 := d.messages(), time.Now()
	d.call("hpcdap/compareExpression", map[string]any{"expression": "rank"}, &cmp)
	took, msgs := time.Since(t0), d.messages()-m0
	d.t.Logf("compare rank across %d ranks: %d groups, %d errors, %v, %d CDTI messages", n, len(cmp.Groups),
		len(cmp.Errors), took.Round(time.Millisecond), msgs)
	if msgs >= uint64(n) {
		d.errorf("compare rank across %d ranks took %d CDTI messages", n, msgs)
	}
	if len(cmp.Groups) != n-lost.Len() {
		d.errorf("compare rank: %d groups, want %d; errors %+v", len(cmp.Groups), n-lost.Len(), cmp.Errors)
	}
	for _, g := range cmp.Groups {
		if g.Value != g.Ranks || g.Count != 1 {
			d.errorf("compare rank: ranks %s (%d) have %s", g.Ranks, g.Count, g.Value)
		}
	}
	var failed rankset.Set
	for _, e := range cmp.Errors {
		rs, err := rankset.Parse(e.Ranks, n)
		if err != nil {
			d.errorf("compare rank: error ranks %q: %v", e.Ranks, err)
		}
		failed = failed.Union(rs)
	}
	if failed.String() != lost.String() {
		d.errorf("compare rank: errors for ranks %s, want the lost %s: %+v", failed, lost, cmp.Errors)
	}
}

// messages is the count of CDTI messages the front end has exchanged with the job's agents.
func (d *dapRun) messages() uint64 {
	d.t.Helper()
	var b struct {
		Messages struct{ Sent, Received uint64 } `json:"messages"`
	}
	d.call("hpcdap/ranks", map[string]any{}, &b)
	return b.Messages.Sent + b.Messages.Received
}
