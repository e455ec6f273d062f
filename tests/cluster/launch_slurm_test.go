package cluster

import (
	"context"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-dap"
	"github.com/hpcdap/hpcdap/cdti"
	"github.com/hpcdap/hpcdap/internal/testenv"
	"github.com/hpcdap/hpcdap/launch"
)

// slurmFrontend makes a launch front end for the cluster: the test's hpcdap binary as the
// agent, sessions in the nodes' private directory, agents calling back on loopback.
func slurmFrontend(t *testing.T, c *Cluster) *launch.Frontend {
	t.Helper()
	t.Setenv("SLURM_CONF", c.Conf)
	fe, err := launch.NewFrontend(launch.Options{WLM: "slurm", AgentPath: hpcdap(t), NodeTmpDir: c.LocalDir(),
		AdvertiseHost: "127.0.0.1", WorkDir: t.TempDir(), Timeout: 60 * time.Second})
	if err != nil {
		t.Fatalf("phase front end: %v", err)
	}
	t.Cleanup(func() {
		if err := fe.Close(); err != nil {
			t.Errorf("phase close: Frontend.Close: %v", err)
		}
	})
	return fe
}

// funcSymbols maps addresses of an executable to its function names (debug/elf's symbol
// table: the oracle for the executable's own frames).
type funcSymbols struct {
	entry uint64
	syms  []elf.Symbol
}

func readFuncSymbols(t *testing.T, path string) *funcSymbols {
	t.Helper()
	fs := &funcSymbols{entry: testenv.ELFEntry(t, path)}
	for _, s := range testenv.ELFSymbols(t, path) {
		if elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Value != 0 && s.Size != 0 {
			fs.syms = append(fs.syms, s)
		}
	}
	return fs
}

// name returns the function containing file address a, or "".
func (fs *funcSymbols) name(a uint64) string {
	for _, s := range fs.syms {
		if a >= s.Value && a < s.Value+s.Size {
			return s.Name
		}
	}
	return ""
}

// loadBias is a rank's executable load bias: its AT_ENTRY minus the file's entry point.
func loadBias(ctx context.Context, cl *cdti.Client, rank int, entry uint64) (uint64, error) {
	rs, err := cl.Query(ctx, uint32(rank), &cdti.GetAuxVectors{})
	if err != nil {
		return 0, err
	}
	a, ok := rs[0].Ack.(*cdti.GetAuxVectorsAck)
	if !ok || rs[0].Code != cdti.CmdSuccess {
		return 0, fmt.Errorf("auxv: %v", rs[0].Code)
	}
	for i := 0; i+1 < len(a.Words); i += 2 {
		if a.Words[i] == 9 { // AT_ENTRY
			return a.Words[i+1] - entry, nil
		}
	}
	return 0, fmt.Errorf("no AT_ENTRY")
}

// The launch layer alone, on a deadlocked batch job: registering step J.0 finds every task
// (scontrol listpids per node), one agent per node starts inside the job's allocation
// (srun --overlap) and serves its node's ranks; a tool stops each rank through its node's
// agent and the agent's traceback shows where the rank blocks (the executable's own frames
// named by its ELF symbol table). Letting go detaches: the job runs on, untraced.
func TestLaunchSlurmAttachDeadlock(t *testing.T) {
	hpcdap(t)
	p := buildC(t, "deadlock", "mpicc.openmpi", "libopenmpi-dev")
	syms := readFuncSymbols(t, p.bin)
	c := slurm.Need(t)
	const n = 4
	job := submitDeadlock(t, c, p.bin, n)
	step := job + ".0"
	fe := slurmFrontend(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()

	app, g, err := launch.Start(ctx, fe, launch.Request{SlurmJob: step})
	if err != nil {
		if app != nil {
			app.Deregister()
		}
		t.Fatalf("phase attach %s: %v", step, err)
	}
	procs := app.Procs()
	if len(procs) != n {
		t.Fatalf("phase attach: %d ranks, want %d: %+v", len(procs), n, procs)
	}
	on := map[string]bool{}
	for _, pr := range procs {
		o, err := taskOf(pr.Pid)
		if err != nil || o.Rank != pr.Rank || o.Node != pr.Host || o.Step != step {
			t.Errorf("phase attach: rank %d on %s pid %d; the task says %+v (%v)", pr.Rank, pr.Host, pr.Pid, o, err)
		}
		on[pr.Host] = true
	}
	for _, node := range c.Nodes {
		if !on[node] {
			t.Errorf("phase attach: no rank on %s: %+v", node, procs)
		}
	}

	want := func(rank int) string {
		if rank == 0 {
			return "wait_for_token"
		}
		return "wait_at_barrier"
	}
	for _, ep := range g.Endpoints {
		dctx, dcancel := context.WithTimeout(ctx, 20*time.Second)
		cl, err := cdti.Dial(dctx, "tcp", ep.Addr, cdti.ClientOptions{ToolID: 2, Token: []byte(ep.Token), Timeout: 30 * time.Second})
		dcancel()
		if err != nil {
			t.Errorf("phase stacks: dial the agent of %s at %s: %v", ep.Host, ep.Addr, err)
			continue
		}
		for _, rank := range ep.Ranks {
			names, err := rankStack(ctx, cl, rank, syms)
			if err != nil {
				t.Errorf("phase stacks: rank %d on %s: %v", rank, ep.Host, err)
				continue
			}
			t.Logf("rank %d on %s: %v", rank, ep.Host, names)
			i := slices.Index(names, want(rank))
			if i < 1 || !slices.Contains(names[i:], "main") {
				t.Errorf("phase stacks: rank %d on %s: frames %v, want library frames under %s ... main", rank, ep.Host, names, want(rank))
			}
			if _, err := cl.Detach(ctx, uint32(rank), cdti.RankInHeader); err != nil {
				t.Errorf("phase detach: rank %d on %s: %v", rank, ep.Host, err)
			}
		}
		cl.Close()
	}

	// An attached job is let go by Deregister: the agents go, the job stays.
	g.Stop()
	if err := app.Deregister(); err != nil {
		t.Errorf("phase deregister: %v", err)
	}
	out, err := run(t, c, 10*time.Second, "squeue", "-h", "-j", job, "-o", "%T")
	if err != nil || strings.TrimSpace(out) != "RUNNING" {
		t.Errorf("phase after deregister: squeue -j %s: %q, %v; want RUNNING", job, out, err)
	}
	for _, pr := range procs {
		if tr, st := status(pr.Pid, "TracerPid"), status(pr.Pid, "State"); tr != "0" || strings.HasPrefix(st, "T") || strings.HasPrefix(st, "t") {
			t.Errorf("phase after deregister: rank %d on %s (pid %d): TracerPid %q, state %q; want untraced and not stopped",
				pr.Rank, pr.Host, pr.Pid, tr, st)
		}
	}
}

// rankStack stops a running rank through its agent and names, innermost first, where its
// main thread is: frame 0 from the agent's traceback, then every return address into the
// executable found on the stack above the stack pointer (a scan: the MPI and C libraries
// below the program's own frames carry no frame pointers, which the agent's walk needs, and
// no symbols to unwind with here). A word counts as a return address when the instruction
// before it is a direct call. Names outside the executable are "?".
func rankStack(ctx context.Context, cl *cdti.Client, rank int, syms *funcSymbols) ([]string, error) {
	if _, err := cl.Attach(ctx, uint32(rank), cdti.RankInHeader, cdti.NewTag("cluster"), 50); err != nil {
		return nil, fmt.Errorf("attach: %w", err)
	}
	if _, err := cl.Control(ctx, uint32(rank), cdti.Control{NotifySet: cdti.Signals(int(syscall.SIGTRAP), int(syscall.SIGSTOP)),
		SendSignal: uint32(syscall.SIGSTOP)}); err != nil {
		return nil, fmt.Errorf("control: %w", err)
	}
	deadline := time.After(30 * time.Second)
	for stopped := false; !stopped; {
		select {
		case nt, ok := <-cl.Notifications():
			if !ok {
				return nil, fmt.Errorf("connection closed: %v", cl.Err())
			}
			stopped = int(nt.Rank) == rank && nt.Kind == cdti.NotifyTypeSignal && nt.Signal.Signal == uint32(syscall.SIGSTOP)
		case <-deadline:
			return nil, fmt.Errorf("no SIGSTOP notification within 30 s")
		}
	}
	info, err := cl.TargetInfo(ctx, uint32(rank))
	if err != nil {
		return nil, fmt.Errorf("target info: %w", err)
	}
	tid := info.Pid
	bias, err := loadBias(ctx, cl, rank, syms.entry)
	if err != nil {
		return nil, err
	}
	frames, err := cl.Traceback(ctx, uint32(rank), tid, 1)
	if err != nil || len(frames) == 0 {
		return nil, fmt.Errorf("traceback: %v", err)
	}
	name := func(a uint64) string {
		if n := syms.name(a - bias); n != "" {
			return n
		}
		return "?"
	}
	names := []string{name(frames[0].PC)}
	regs, err := cl.RegisterSet(ctx, uint32(rank), tid, cdti.RegSetGeneral)
	if err != nil || len(regs) < (x86RSP+1)*8 {
		return nil, fmt.Errorf("registers: %d bytes, %v", len(regs), err)
	}
	sp := binary.LittleEndian.Uint64(regs[x86RSP*8:])
	// Page by page up to the end of the stack mapping (a read across it fails whole).
	var stack []byte
	for a := sp; a < sp+64<<10; a = (a + 4096) &^ 4095 {
		b, err := cl.ReadMemory(ctx, uint32(rank), tid, a, int((a+4096)&^4095-a), cdti.SpecAccessUseThreadState)
		if err != nil {
			break
		}
		stack = append(stack, b...)
	}
	if len(stack) < 256 {
		return nil, fmt.Errorf("stack at %#x: only %d bytes readable", sp, len(stack))
	}
	for off := 0; off+8 <= len(stack); off += 8 {
		ra := binary.LittleEndian.Uint64(stack[off:])
		if syms.name(ra-bias-1) == "" {
			continue
		}
		call, err := cl.ReadMemory(ctx, uint32(rank), tid, ra-5, 1, cdti.SpecAccessUseThreadState)
		if err == nil && len(call) == 1 && call[0] == 0xe8 {
			names = append(names, syms.name(ra-bias-1))
		}
	}
	if _, err := cl.Update(ctx, uint32(rank), &cdti.ReleaseControl{}); err != nil {
		return names, fmt.Errorf("release control: %w", err)
	}
	return names, nil
}

// x86RSP is the index of rsp in x86-64's user_regs_struct.
const x86RSP = 19

// Kill -9 of `hpcdap dap` while every rank of an srun job is stopped at a breakpoint: the node
// agents see their front end's connections drop, take their breakpoints out and let the ranks
// go; the launcher's agent lets srun go; the job runs to its end and the nodes are idle again.
func TestDAPSrunFrontEndKilled(t *testing.T) {
	hpcdap(t)
	p := buildC(t, "ranks", "mpicc.openmpi", "libopenmpi-dev")
	c := slurm.Need(t)
	cancelJobs(t, c)
	var d *dapRun
	var ranks []rankState
	for attempt := 1; ; attempt++ {
		var ok bool
		if d, ranks, ok = srunToBreakpoint(t, c, p, c.LocalDir(), attempt == srunAttempts); ok {
			break
		}
		t.Logf("attempt %d: a rank crashed in Open MPI's start-up before the breakpoint: running the job again", attempt)
	}
	d.in("kill -9 of hpcdap dap")
	if err := d.cmd.Process.Kill(); err != nil {
		d.fatalf("kill: %v", err)
	}
	<-d.done
	d.in("the ranks after the front end died")
	d.checkLetGo(ranks, 60*time.Second)
	if d.t.Failed() {
		d.t.FailNow()
	}
	d.in("the job's end")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if resumed, err := c.WaitIdle(ctx); err != nil || len(resumed) > 0 {
		q, _ := c.Command("squeue", "-h", "-s", "-o", "%i %j %N").CombinedOutput()
		d.fatalf("%v; drained nodes: %v\nsteps:\n%s\nprocesses of the job:\n%s", err, resumed, q, c.Processes())
	}
	for _, r := range ranks {
		if st := status(r.Pid, "State"); st != "" && !strings.HasPrefix(st, "Z") {
			d.errorf("rank %d (pid %d) still exists after the job ended: %s", r.Rank, r.Pid, st)
		}
	}
}

// `hpcdap dap` launches `srun --mpi=pmix -N4 -n8` under MPIR: srun's tasks are held at exec,
// agents start on each node through `srun --overlap`, and every rank stops at the breakpoint
// (stopMode rank, so each rank's own stop is seen). The ranks are where the tasks' own
// environments say, stacks of every rank include main, and continuing runs every rank to its
// exit code (10 + rank). Then every step of the job must end and the nodes be idle again (this
// check found a staging step kept alive for a minute by an orphaned sleep).
//
// A job that loses a rank before the breakpoint is run again (see srunAttempts).
func TestDAPSrunLaunch(t *testing.T) {
	hpcdap(t)
	p := buildC(t, "ranks", "mpicc.openmpi", "libopenmpi-dev")
	c := slurm.Need(t)
	cancelJobs(t, c)
	for attempt := 1; ; attempt++ {
		if _, ok := srunLaunch(t, c, p, c.LocalDir(), attempt == srunAttempts); ok {
			break
		}
		t.Logf("attempt %d: a rank crashed in Open MPI's start-up before the breakpoint: running the job again", attempt)
	}
}

// srunAttempts bounds how often a debugged srun job is run again when a rank dies before the
// breakpoint. Open MPI 4.1.4 under `srun --mpi=pmix` now and then kills a rank with SIGSEGV at
// pc 0 in MPI_Init: main → PMPI_Init → ompi_mpi_init → opal_progress → event_base_loop → an
// event callback that is a null pointer, the progress threads in their own event loops. Seen
// in about 1 of 8 debugged runs on a loaded machine, none in 28 on an idle one, none in 20 plain
// runs on an idle one, but also in plain jobs on a loaded machine, before any debugger was near
// (the deadlocked job submitDeadlock starts is submitted again too). The cause is not found.
const srunAttempts = 5

// srunToBreakpoint launches `srun -N4 -n8` of p through `hpcdap dap` with a breakpoint in
// at_breakpoint and waits until every rank stopped there, the adapter staging its agents
// under nodeTmp (see startDAPStaging). Unless last, it reports false (the
// session ended) when a rank stopped for a signal before every rank reached the breakpoint:
// Open MPI 4.1.4 under srun --mpi=pmix now and then crashes a rank in its start-up.
func srunToBreakpoint(t *testing.T, c *Cluster, p *cprog, nodeTmp string, last bool) (*dapRun, []rankState, bool) {
	d := startDAPStaging(t, c, 240*time.Second, nodeTmp)
	d.initialize()
	d.in("launch")
	dir := t.TempDir()
	d.call("launch", map[string]any{"program": p.bin, "cwd": dir, "launcher": "srun",
		"launcherArgs": []string{"--mpi=pmix", "-N4"}, "np": 8, "stopMode": "rank",
		"env": map[string]string{"OMPI_MCA_mpi_yield_when_idle": "1"}}, nil)
	d.event("initialized", 120*time.Second)
	ranks := d.rankTable()
	checkRankTable(d, ranks, 8, c.Nodes)

	d.in("breakpoints")
	line := p.line(t, "bp")
	var bps struct{ Breakpoints []dap.Breakpoint }
	d.call("setBreakpoints", map[string]any{"source": map[string]any{"path": p.src},
		"breakpoints": []map[string]any{{"line": line}}}, &bps)
	if len(bps.Breakpoints) != 1 || !bps.Breakpoints[0].Verified || bps.Breakpoints[0].Line != line {
		d.fatalf("setBreakpoints at line %d: %+v", line, bps.Breakpoints)
	}
	d.call("configurationDone", nil, nil)

	d.in("run to the breakpoint")
	for deadline := time.Now().Add(120 * time.Second); !last && time.Now().Before(deadline); {
		rs := d.rankTable()
		if i := slices.IndexFunc(rs, func(r rankState) bool { return r.StopReason == "exception" }); i >= 0 {
			r := rs[i]
			var stacks []string
			for _, th := range d.threads() {
				if strings.HasPrefix(th.Name, fmt.Sprintf("rank %d ", r.Rank)) {
					stacks = append(stacks, fmt.Sprintf("%s: %v", th.Name, frameNames(d.stackTrace(th.Id))))
				}
			}
			t.Logf("rank %d on %s stopped for %s before the breakpoint (thread %d); threads:\n%s", r.Rank, r.Host,
				r.Signal, r.ThreadID, strings.Join(stacks, "\n"))
			d.call("disconnect", map[string]any{"terminateDebuggee": true}, nil)
			d.close()
			return nil, nil, false
		}
		if !slices.ContainsFunc(rs, func(r rankState) bool { return r.State != "stopped" || r.StopReason != "breakpoint" }) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	ranks = d.waitRanks(120*time.Second, "stopped at the breakpoint", func(r rankState) bool {
		return r.State == "stopped" && r.StopReason == "breakpoint"
	})
	return d, ranks, true
}

// srunLaunch runs TestDAPSrunLaunch's job once and returns its adapter; false: see
// srunToBreakpoint.
func srunLaunch(t *testing.T, c *Cluster, p *cprog, nodeTmp string, last bool) (*dapRun, bool) {
	d, ranks, ok := srunToBreakpoint(t, c, p, nodeTmp, last)
	if !ok {
		return nil, false
	}
	line := p.line(t, "bp")
	d.in("stacks at the breakpoint")
	threads := d.threads()
	for _, r := range ranks {
		prefix := fmt.Sprintf("rank %d ", r.Rank)
		var own []dap.Thread
		for _, th := range threads {
			if strings.HasPrefix(th.Name, prefix) {
				own = append(own, th)
			}
		}
		if len(own) == 0 {
			d.errorf("rank %d on %s: no thread in %+v", r.Rank, r.Host, threads)
			continue
		}
		frames := d.stackTrace(r.ThreadID)
		names := frameNames(frames)
		if len(frames) == 0 || frames[0].Name != "at_breakpoint" || frames[0].Line != line || !slices.Contains(names, "main") {
			d.errorf("rank %d on %s: stack %v, want at_breakpoint:%d ... main", r.Rank, r.Host, names, line)
			continue
		}
		// The rank's argument is its rank: the adapter reads each rank's own memory.
		var ev dap.EvaluateResponseBody
		d.call("evaluate", map[string]any{"expression": "rank", "frameId": frames[0].Id, "context": "watch"}, &ev)
		if ev.Result != strconv.Itoa(r.Rank) {
			d.errorf("rank %d on %s: rank evaluates to %q", r.Rank, r.Host, ev.Result)
		}
		// Every thread of the rank can be unwound; the main thread's stack was checked above.
		for _, th := range own {
			if fs := d.stackTrace(th.Id); len(fs) == 0 {
				d.errorf("rank %d on %s: thread %q has no frames", r.Rank, r.Host, th.Name)
			}
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	d.in("continue to the exit")
	d.call("setBreakpoints", map[string]any{"source": map[string]any{"path": p.src}, "breakpoints": []any{}}, nil)
	for _, r := range ranks {
		d.call("continue", map[string]any{"threadId": r.ThreadID}, nil)
	}
	var ex dap.ExitedEventBody
	if err := d.event("exited", 120*time.Second).Decode(&ex); err != nil {
		d.fatalf("exited event: %v", err)
	}
	d.event("terminated", 60*time.Second)
	for _, r := range d.rankTable() {
		if r.State != "exited" || r.ExitCode == nil || *r.ExitCode != 10+r.Rank {
			d.errorf("rank %d on %s at the end: %+v, want exited with code %d", r.Rank, r.Host, r, 10+r.Rank)
		}
	}
	if ex.ExitCode == 0 {
		d.errorf("job exit code 0; every rank exited with a non-zero code")
	}
	if out := d.output(); strings.Count(out, "/8 on node") != 8 {
		t.Logf("the ranks' output lines did not all reach the client:\n%s", out)
	}
	for pid, rank := range d.ranks {
		if st := status(pid, "State"); st != "" && !strings.HasPrefix(st, "Z") {
			d.errorf("rank %d (pid %d) still exists after the job ended: %s", rank, pid, st)
		}
	}
	d.in("disconnect")
	d.call("disconnect", map[string]any{}, nil)
	// The job ended normally: every step of it ends, and the nodes are idle again.
	d.in("the job's steps end")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if resumed, err := c.WaitIdle(ctx); err != nil || len(resumed) > 0 {
		q, _ := c.Command("squeue", "-h", "-s", "-o", "%i %j %N").CombinedOutput()
		d.errorf("%v; drained nodes: %v\nsteps:\n%s\nprocesses of the job:\n%s", err, resumed, q, c.Processes())
	}
	return d, true
}
