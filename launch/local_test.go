package launch

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hpcdap/hpcdap/cdti"
	"github.com/hpcdap/hpcdap/internal/testenv"
)

// driveRanks is what the adapter does with a held job: attach every rank through its node
// agent, plant a breakpoint on after_init, continue the ranks, release the launcher, check
// that every rank stops there with its own rank in the first argument register, continue them,
// and collect their exit codes. It reports every rank that failed, not only the first.
func driveRanks(t *testing.T, app *App, g *Agents, prog string, sigcont bool) map[int]int {
	t.Helper()
	rt := dialAgents(t, g)
	entry, fn := testenv.ELFEntry(t, prog), testenv.ELFSymbol(t, prog, "after_init").Value
	procs := app.Procs()
	var failed []string
	for _, p := range procs {
		// A rank held at exec is in a job-control stop: the agent does not report a SIGSTOP
		// sent to a process already stopped, so take control without stopping it; it cannot
		// run before its SIGCONT anyway.
		if err := rt.takeRank(p.Rank, !sigcont); err != nil {
			failed = append(failed, err.Error())
			continue
		}
		bias, err := rt.loadBias(p.Rank, entry)
		if err == nil {
			err = rt.update(p.Rank, &cdti.SetBreakpoint{Addr: bias + fn, Instruction: 0xCC})
		}
		if err == nil && sigcont {
			// Held at exec in a job-control stop: the traced rank needs its SIGCONT from us.
			err = rt.update(p.Rank, &cdti.SendSignalToProcess{Signal: uint32(syscall.SIGCONT)})
		}
		if err == nil && !sigcont {
			err = rt.update(p.Rank, &cdti.ContinueProcess{})
		}
		if err != nil {
			failed = append(failed, fmt.Sprintf("rank %d: %v", p.Rank, err))
		}
	}
	if len(failed) > 0 {
		app.Release(context.Background())
		t.Fatalf("%d of %d ranks attached and held; failures:\n%s", len(procs)-len(failed), len(procs), strings.Join(failed, "\n"))
	}
	t.Logf("all %d ranks attached and held", len(procs))
	if err := app.Release(context.Background()); err != nil {
		t.Fatalf("Release: %v", err)
	}
	for _, p := range procs {
		n, err := rt.next(p.Rank, 60*time.Second)
		if err == nil && (n.Kind != cdti.NotifyTypeSignal || n.Signal.Reason != cdti.SignalBreakpoint) {
			err = fmt.Errorf("rank %d: notification %+v, want the breakpoint", p.Rank, n)
		}
		if err == nil {
			var rdi uint64
			if rdi, err = rt.rdi(p.Rank, 0); err == nil && rdi != uint64(p.Rank) {
				err = fmt.Errorf("rank %d: after_init's argument is %d", p.Rank, rdi)
			}
		}
		if err == nil {
			err = rt.update(p.Rank, &cdti.ContinueProcess{})
		}
		if err != nil {
			failed = append(failed, err.Error())
		}
	}
	if len(failed) > 0 {
		t.Fatalf("%d of %d ranks stopped at after_init; failures:\n%s", len(procs)-len(failed), len(procs), strings.Join(failed, "\n"))
	}
	codes := map[int]int{}
	for _, p := range procs {
		n, err := rt.next(p.Rank, 60*time.Second)
		switch {
		case err != nil:
			failed = append(failed, err.Error())
		case n.Kind != cdti.NotifyTypeTermination:
			failed = append(failed, fmt.Sprintf("rank %d: notification %+v, want its end", p.Rank, n))
		default:
			codes[p.Rank] = n.Exit.ExitCode()
		}
	}
	if len(failed) > 0 {
		t.Errorf("%d of %d ranks ended; failures:\n%s", len(codes), len(procs), strings.Join(failed, "\n"))
	}
	return codes
}

// Open MPI's mpirun -np 4 through the local workload manager: the table matches the process
// tree, the ranks are held in MPI_Init while the launcher sits in MPIR_Breakpoint, one agent
// serves them, all four stop at a breakpoint after MPI_Init once released, and each exits with
// its own code.
func TestLocalOpenMPIEndToEnd(t *testing.T) {
	prog := program(t, "ompi")
	testenv.NeedTool(t, "mpirun.openmpi", "openmpi-bin")
	fe := newFrontend(t, "local", "")
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	app, err := fe.LaunchBarrier(ctx, LaunchSpec{Launcher: "mpirun.openmpi", Args: []string{"-np", "4"}, Program: prog, Env: ompiEnv})
	if err != nil {
		t.Fatalf("LaunchBarrier: %v", err)
	}
	if app.Hold() != HoldInInit {
		t.Errorf("hold %v, want in MPI_Init", app.Hold())
	}
	host, _ := os.Hostname()
	tree := ranksRunning(t, prog, "OMPI_COMM_WORLD_RANK", nil)
	pl := app.Placement()
	if pl.Size != 4 || len(pl.Hosts) != 1 || pl.Hosts[0].Host != host || pl.Hosts[0].PEs() != 4 {
		t.Fatalf("placement %+v, want 4 ranks on %s", pl, host)
	}
	for _, p := range app.Procs() {
		if tree[p.Rank] != p.Pid {
			t.Errorf("rank %d: pid %d, the process tree says %d", p.Rank, p.Pid, tree[p.Rank])
		}
		if pp, _ := testenv.ProcStatus(p.Pid, "PPid"); pp != fmt.Sprint(app.LauncherPid()) {
			t.Errorf("rank %d: parent %s, launcher pid %d", p.Rank, pp, app.LauncherPid())
		}
	}
	g, err := app.StartAgents(ctx)
	if err != nil {
		app.Release(ctx)
		t.Fatalf("StartAgents: %v", err)
	}
	if len(g.Endpoints) != 1 || fmt.Sprint(g.Endpoints[0].Ranks) != "[0 1 2 3]" {
		t.Fatalf("agents %+v", g.Endpoints)
	}
	sessionDir := g.Session.Dir
	if _, err := os.Stat(filepath.Join(sessionDir, "bin", filepath.Base(program(t, "hpcdap")))); err != nil {
		t.Errorf("the agent binary is not staged: %v", err)
	}
	codes := driveRanks(t, app, g, prog, false)
	for r := range 4 {
		if codes[r] != 10+r {
			t.Errorf("rank %d exit code %d, want %d", r, codes[r], 10+r)
		}
	}
	st, err := app.Wait(ctx)
	// With orte_abort_on_non_zero_status off, mpirun reports success once every rank ended.
	if err != nil || !st.Exited() {
		t.Errorf("mpirun: %v, %v; want a normal exit", st, err)
	}
	if err := app.Deregister(); err != nil {
		t.Errorf("Deregister: %v", err)
	}
	if _, err := os.Stat(sessionDir); !os.IsNotExist(err) {
		t.Errorf("session directory %s still there after Deregister: %v", sessionDir, err)
	}
	out, _ := os.ReadFile(app.OutputPath())
	if n := strings.Count(string(out), "/4 on "); n != 4 {
		t.Errorf("%d rank lines in the launcher output:\n%s", n, out)
	}
}

// MPICH's mpiexec.hydra (no usable MPIR symbols) by fork/exec following: the table matches
// the process tree (PMI_RANK), every rank is held right after its exec (stopped, traced, not
// yet past ld.so), the following agent is the job's node agent, and the ranks all reach
// after_init once a tool starts them, each exiting with its own code.
func TestLocalHydraEndToEnd(t *testing.T) {
	prog := program(t, "mpich")
	testenv.NeedTool(t, "mpiexec.hydra", "mpich")
	fe := newFrontend(t, "local", "")
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	app, err := fe.LaunchBarrier(ctx, LaunchSpec{Launcher: "mpiexec.hydra", Args: append([]string{"-n", "4"}, hydraArgs...), Program: prog,
		Env: []string{"UCX_HANDLE_ERRORS=none"}})
	if err != nil {
		t.Fatalf("LaunchBarrier: %v", err)
	}
	if app.Hold() != HoldByAgent {
		t.Errorf("hold %v, want %v", app.Hold(), HoldByAgent)
	}
	tree := ranksRunning(t, prog, "PMI_RANK", nil)
	for _, p := range app.Procs() {
		if tree[p.Rank] != p.Pid {
			t.Errorf("rank %d: pid %d, the process tree says %d", p.Rank, p.Pid, tree[p.Rank])
		}
		// Held at the exec: in a tracing stop, one thread, nothing of the program run yet
		// (no MPI library mapped).
		if st, _ := testenv.ProcStatus(p.Pid, "State"); !strings.HasPrefix(st, "t") {
			t.Errorf("rank %d: state %q, want t (traced, held at its exec)", p.Rank, st)
		}
		if tr, _ := testenv.ProcStatus(p.Pid, "TracerPid"); tr == "0" || tr == "" {
			t.Errorf("rank %d: TracerPid %q, want the agent", p.Rank, tr)
		}
		if maps, _ := os.ReadFile(fmt.Sprintf("/proc/%d/maps", p.Pid)); strings.Contains(string(maps), "libmpi") {
			t.Errorf("rank %d: the MPI library is mapped: the rank ran before it was caught", p.Rank)
		}
	}
	if len(app.Procs()) != 4 {
		t.Fatalf("%d ranks", len(app.Procs()))
	}
	g, err := app.StartAgents(ctx)
	if err != nil {
		app.Release(ctx)
		t.Fatalf("StartAgents: %v", err)
	}
	if len(g.Endpoints) != 1 || !g.Endpoints[0].Owned || fmt.Sprint(g.Endpoints[0].Ranks) != "[0 1 2 3]" ||
		tracerProcess(app.Procs()[0].Pid) != g.Endpoints[0].Pid {
		t.Errorf("agents %+v: want the following agent (the ranks' tracer), owned, serving ranks 0-3", g.Endpoints)
	}
	codes := driveRanks(t, app, g, prog, false)
	for r := range 4 {
		if codes[r] != 10+r {
			t.Errorf("rank %d exit code %d, want %d", r, codes[r], 10+r)
		}
	}
	if _, err := app.Wait(ctx); err != nil {
		t.Errorf("Wait: %v", err)
	}
}

// Attach to a running mpirun by pid: the table is read without a breakpoint (mpirun fills it
// on every launch) and equals the process tree; the job is left running.
func TestLocalAttachMpirun(t *testing.T) {
	prog := program(t, "ompi")
	mpirun := testenv.NeedTool(t, "mpirun.openmpi", "openmpi-bin")
	out := filepath.Join(t.TempDir(), "out")
	f, _ := os.Create(out)
	cmd := exec.Command(mpirun, "-np", "3", prog, "30")
	cmd.Env = append(os.Environ(), ompiEnv...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Signal(syscall.SIGTERM); cmd.Wait(); f.Close() })
	// The table is complete once every rank exists and has registered with mpirun.
	deadline := time.Now().Add(30 * time.Second)
	for len(ranksRunning(t, prog, "OMPI_COMM_WORLD_RANK", nil)) < 3 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // let mpirun register them (REGISTERED state)
	fe := newFrontend(t, "local", "")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	app, err := fe.Attach(ctx, JobRef{LauncherPid: cmd.Process.Pid})
	if err != nil {
		t.Fatalf("Attach: %v", err)
	}
	tree := ranksRunning(t, prog, "OMPI_COMM_WORLD_RANK", nil)
	if len(app.Procs()) != 3 {
		t.Fatalf("%d ranks: %+v", len(app.Procs()), app.Procs())
	}
	for _, p := range app.Procs() {
		if tree[p.Rank] != p.Pid {
			t.Errorf("rank %d: pid %d, the process tree says %d", p.Rank, p.Pid, tree[p.Rank])
		}
	}
	if err := app.Deregister(); err != nil {
		t.Errorf("Deregister: %v", err)
	}
	// Deregister leaves an attached job running, the launcher untraced.
	if st, _ := testenv.ProcStatus(cmd.Process.Pid, "TracerPid"); st != "0" {
		t.Errorf("mpirun TracerPid %q after Deregister, want 0", st)
	}
	if err := syscall.Kill(cmd.Process.Pid, 0); err != nil {
		t.Errorf("mpirun gone after Deregister: %v", err)
	}
}

// A launcher that is not one (the program itself) is refused before anything runs, and so is
// srun without Slurm.
func TestLocalLaunchErrors(t *testing.T) {
	fe := newFrontend(t, "local", "")
	ctx := context.Background()
	if _, err := fe.LaunchBarrier(ctx, LaunchSpec{Launcher: program(t, "serial"), Program: program(t, "serial")}); err == nil ||
		!strings.Contains(err.Error(), "not a launcher") {
		t.Errorf("launch with a non-launcher: %v", err)
	}
	if _, err := fe.LaunchBarrier(ctx, LaunchSpec{Launcher: "srun", Program: program(t, "serial")}); err == nil ||
		!strings.Contains(err.Error(), "slurm") {
		t.Errorf("srun under the local WLM: %v", err)
	}
}

// A hydra job of which only part execs the program (MPMD: ranks 2 and 3 run /bin/true):
// the launch fails instead of hanging, the error says how many ranks were caught and which
// are missing, and nothing of the job is left.
func TestLocalHydraPartial(t *testing.T) {
	prog := program(t, "mpich")
	testenv.NeedTool(t, "mpiexec.hydra", "mpich")
	fe := newFrontend(t, "local", "")
	fe.opts.Timeout = 10 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, err := fe.LaunchBarrier(ctx, LaunchSpec{Launcher: "mpiexec.hydra",
		Args: []string{"-n", "2"}, Program: prog, ProgramArgs: []string{":", "-n", "2", "/bin/true"}})
	if err == nil {
		t.Fatal("a job of which two ranks never run the program was launched")
	}
	t.Logf("launch error: %v", err)
	if !strings.Contains(err.Error(), "2 of 4 ranks caught at their exec (missing: 2, 3)") {
		t.Errorf("error %q does not say which ranks are missing", err)
	}
	if left := ranksRunning(t, prog, "PMI_RANK", nil); len(left) != 0 {
		t.Errorf("ranks left running after the failed launch: %v", left)
	}
}

// The agent that follows hydra's forks is killed (SIGKILL) while it holds part of the job
// (ranks 0 and 1; ranks 2 and 3 run /bin/true and are never caught): the launch fails as soon
// as the agent is gone, saying so and how many ranks it had caught, not at the phase's time
// limit — in whichever phase the front end was — and the launcher, told to end, takes the
// ranks with it.
func TestLocalHydraAgentKilled(t *testing.T) {
	prog := program(t, "mpich")
	testenv.NeedTool(t, "mpiexec.hydra", "mpich")
	fe := newFrontend(t, "local", "")
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	mark := map[string]string{"HPCDAP_TEST_JOB": newToken()[:12]}
	killed := make(chan int, 1)
	go func() {
		defer close(killed)
		// Held ranks are traced by the agent: their tracer is the one to kill, once its log
		// says it has caught both (a rank can be seen at its exec before the agent has taken
		// in that event).
		for ctx.Err() == nil {
			held := ranksRunning(t, prog, "PMI_RANK", mark)
			if len(held) == 2 && agentLogCount(fe, "held at its exec") == 2 {
				tr, _ := testenv.ProcStatus(held[0], "TracerPid")
				if pid, err := strconv.Atoi(tr); err == nil && pid > 0 {
					syscall.Kill(pid, syscall.SIGKILL)
					killed <- pid
					return
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	app, err := fe.LaunchBarrier(ctx, LaunchSpec{Launcher: "mpiexec.hydra", Args: []string{"-n", "2"}, Program: prog,
		ProgramArgs: []string{":", "-n", "2", "/bin/true"}, Env: []string{"HPCDAP_TEST_JOB=" + mark["HPCDAP_TEST_JOB"]}})
	if err == nil {
		app.Deregister()
		t.Fatal("a job whose following agent was killed was launched")
	}
	agent, ok := <-killed
	if !ok {
		t.Fatalf("the two held ranks were not seen: %v", err)
	}
	t.Logf("killed agent pid %d; launch error: %v", agent, err)
	msg := err.Error()
	// Killed after the front end subscribed, the agent's end is reported with the ranks
	// caught; killed before, the error says so, and the agent's log it quotes tells what it
	// had caught.
	caught := strings.Contains(msg, "2 of 4 ranks caught") ||
		strings.Contains(msg, "before the front end reached it") && strings.Count(msg, "held at its exec") == 2
	if !strings.Contains(msg, "the agent following it ended (signal: killed)") || !caught {
		t.Errorf("error does not say the agent was killed and what it had caught: %v", err)
	}
	if errors.Is(err, context.DeadlineExceeded) || strings.Contains(msg, "within") {
		t.Errorf("the launch waited for its time limit: %v", err)
	}
	// The launcher, told to end, takes its ranks with it.
	deadline := time.Now().Add(10 * time.Second)
	for len(ranksRunning(t, prog, "PMI_RANK", mark)) > 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if left := ranksRunning(t, prog, "PMI_RANK", mark); len(left) != 0 {
		t.Errorf("ranks left after the failed launch: %v", left)
		for _, pid := range left {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// Deregistering a launched hydra job whose ranks are still held at their exec ends it: no
// rank runs the program afterwards and the launcher is gone.
func TestLocalHydraDeregisterHeld(t *testing.T) {
	prog := program(t, "mpich")
	testenv.NeedTool(t, "mpiexec.hydra", "mpich")
	fe := newFrontend(t, "local", "")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	app, err := fe.LaunchBarrier(ctx, LaunchSpec{Launcher: "mpiexec.hydra", Args: []string{"-n", "3"}, Program: prog})
	if err != nil {
		t.Fatalf("LaunchBarrier: %v", err)
	}
	launcher := app.LauncherPid()
	if err := app.Deregister(); err != nil {
		t.Errorf("Deregister: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(ranksRunning(t, prog, "PMI_RANK", nil)) > 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if left := ranksRunning(t, prog, "PMI_RANK", nil); len(left) != 0 {
		t.Errorf("ranks left after Deregister: %v", left)
	}
	if !processEnded(launcher) {
		t.Errorf("launcher pid %d still there after Deregister", launcher)
	}
}

// A launcher that fails (the program does not exist) fails the launch as soon as it has
// ended, not at the phase's time limit, and the error names the launcher's end and what it
// said about the program: Open MPI's mpirun under MPIR, MPICH's hydra followed through its
// forks.
func TestLocalLaunchMissingProgram(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no-such-program")
	for _, tc := range []struct{ launcher, pkg string }{{"mpirun.openmpi", "openmpi-bin"}, {"mpiexec.hydra", "mpich"}} {
		t.Run(tc.launcher, func(t *testing.T) {
			testenv.NeedTool(t, tc.launcher, tc.pkg)
			fe := newFrontend(t, "local", "")
			ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
			defer cancel()
			app, err := fe.LaunchBarrier(ctx, LaunchSpec{Launcher: tc.launcher, Args: []string{"-n", "2"}, Program: missing,
				Env: ompiEnv, Dir: t.TempDir()})
			if err == nil {
				app.Kill(ctx, syscall.SIGKILL)
				app.Deregister()
				t.Fatalf("launch of %s: no error", missing)
			}
			t.Logf("error: %v", err)
			msg := err.Error()
			if !strings.Contains(msg, "no-such-program") || !strings.Contains(msg, "exit") {
				t.Errorf("error names neither the program nor the launcher's end: %v", err)
			}
			if errors.Is(err, context.DeadlineExceeded) || strings.Contains(msg, "deadline") || strings.Contains(msg, "within") {
				t.Errorf("the launch waited for its time limit: %v", err)
			}
		})
	}
}

// agentLogCount counts the lines of the front end's launcher-agent logs that contain what.
func agentLogCount(fe *Frontend, what string) int {
	logs, _ := filepath.Glob(filepath.Join(fe.opts.WorkDir, "launcher-agent-*.log"))
	n := 0
	for _, l := range logs {
		b, _ := os.ReadFile(l)
		n += strings.Count(string(b), what)
	}
	return n
}
