package launch

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hpcdap/hpcdap/cdti"
	"github.com/hpcdap/hpcdap/launch/mpir"
)

// launcherAgent is the `hpcdap agent` child that serves the launcher process, on this host.
type launcherAgent struct {
	*AgentProcess
	client *cdti.Client // the CDTI connection of an MPIR-driven launcher (nil when following)
	pid    int          // the launcher's pid
}

// launcherStart is how a launcher's agent, and so the launcher, is started.
type launcherStart struct {
	env    []string // "K=V" added to this process's environment
	unset  []string // names removed from it
	dir    string   // working directory ("" for this process's)
	noASLR bool     // no address-space randomisation for the agent and its descendants
}

// startLauncherAgent starts an agent that spawns argv held before its first instruction
// (attachPid 0) or that serves the running process attachPid, and connects to it over CDTI.
func startLauncherAgent(ctx context.Context, fe *Frontend, argv []string, ls launcherStart, output string, attachPid int) (*launcherAgent, error) {
	var args []string
	if attachPid != 0 {
		args = []string{"--attach", "0=" + strconv.Itoa(attachPid)}
	} else {
		// --launcher: no HPCDAP_RANK/HPCDAP_NP, which every MPI rank would inherit.
		args = append([]string{"--launcher", "--output", output, "--np", "1", "--"}, argv...)
	}
	la, err := startAgentProcess(ctx, fe, args, ls, attachPid)
	if err != nil {
		return nil, err
	}
	c, err := cdti.Dial(ctx, "tcp", la.Addr, cdti.ClientOptions{ToolID: 1, Token: []byte(la.Token), Timeout: fe.opts.Timeout})
	if err != nil {
		la.kill()
		return nil, fmt.Errorf("launch: launcher agent: %w%s", err, la.logTail(8))
	}
	la.client = c
	return la, nil
}

// startAgentProcess starts `hpcdap agent --listen 127.0.0.1:0` with mode (its arguments
// after the listener's) and a new token, and waits until it listens. Without attachPid the
// agent spawns the launcher before it listens, as its only child.
func startAgentProcess(ctx context.Context, fe *Frontend, mode []string, ls launcherStart, attachPid int) (*launcherAgent, error) {
	logPath, err := fe.workFile("launcher-agent-*.log")
	if err != nil {
		return nil, fmt.Errorf("launch: launcher agent log: %w", err)
	}
	// If the front end dies, the agent is told to go: it removes its traps and detaches, so
	// the launcher is never left stopped.
	ap, err := startAgent(ctx, agentStart{name: "launcher agent", exe: fe.opts.AgentPath, mode: mode,
		env: mergeEnv(withoutVars(os.Environ(), ls.unset...), ls.env), dir: ls.dir, noASLR: ls.noASLR,
		logPath: logPath, logLines: 8})
	if err != nil {
		return nil, err
	}
	la := &launcherAgent{AgentProcess: ap, pid: attachPid}
	if la.pid == 0 {
		kids := childPids(ap.Cmd.Process.Pid)
		if len(kids) != 1 {
			la.kill()
			return nil, fmt.Errorf("launch: launcher agent: the agent has %d children, want the launcher alone%s", len(kids), la.logTail(8))
		}
		la.pid = kids[0]
	}
	return la, nil
}

// childPids lists a process's children (/proc/PID/task/*/children).
func childPids(pid int) []int {
	var out []int
	dir := "/proc/" + strconv.Itoa(pid) + "/task"
	tasks, _ := os.ReadDir(dir)
	for _, t := range tasks {
		b, err := os.ReadFile(dir + "/" + t.Name() + "/children")
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if c, err := strconv.Atoi(f); err == nil {
				out = append(out, c)
			}
		}
	}
	return out
}

// stop asks the agent to go (it detaches from the launcher, which runs on) and waits for it.
func (la *launcherAgent) stop() {
	if la.client != nil {
		la.client.Close()
	}
	la.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-la.done:
	case <-time.After(10 * time.Second):
		la.kill()
	}
}

// kill ends the agent at once (SIGKILL), with its CDTI connection.
func (la *launcherAgent) kill() {
	if la.client != nil {
		la.client.Close()
	}
	la.AgentProcess.Kill()
}

// mpirJob is a job whose ranks come from its launcher's MPIR table, the launcher running
// under a local agent. Node operations are supplied by the workload manager (nodeOps).
type mpirJob struct {
	fe     *Frontend
	id     string
	family string
	hold   Hold
	la     *launcherAgent
	sess   *mpir.Starter
	procs  []Proc
	jobNodes

	mu       sync.Mutex  // serialises use of the CDTI session (its notifications)
	released atomic.Bool // the launcher has left MPIR_Breakpoint
	exited   atomic.Bool // Wait has seen the launcher end
	closed   bool
}

// nodeOps reach the nodes of a job.
type nodeOps interface {
	hosts() []string
	stage(ctx context.Context, dir string) (Staging, error)
	exec(ctx context.Context, hosts []string, argv []string) []NodeResult
	ship(ctx context.Context, hosts []string, src, dst string) error
	start(ctx context.Context, hosts []string, argv func(string) []string, env []string) (*DaemonSet, error)
	killRanks(ctx context.Context, procs []Proc, sig syscall.Signal) error
}

// jobNodes gives a Job the methods that reach its nodes, through its workload manager's
// nodeOps.
type jobNodes struct{ ops nodeOps }

func (n jobNodes) Hosts() []string { return n.ops.hosts() }

func (n jobNodes) Stage(ctx context.Context, dir string) (Staging, error) {
	return n.ops.stage(ctx, dir)
}

func (n jobNodes) Exec(ctx context.Context, hosts []string, argv []string) []NodeResult {
	return n.ops.exec(ctx, hosts, argv)
}

func (n jobNodes) Ship(ctx context.Context, hosts []string, src, dst string) error {
	return n.ops.ship(ctx, hosts, src, dst)
}

func (n jobNodes) Start(ctx context.Context, hosts []string, argv func(string) []string, env []string) (*DaemonSet, error) {
	return n.ops.start(ctx, hosts, argv, env)
}

// launchMPIR starts argv under a launcher agent and runs MPIR launch mode until the table is
// filled. The launcher is left stopped at MPIR_Breakpoint; on any failure it is let go and
// ended, and the error says which phase failed.
func launchMPIR(ctx context.Context, fe *Frontend, family string, argv []string, spec LaunchSpec) (*mpirJob, error) {
	// Open MPI's mpirun serves its ranks' start-up from other threads than the one that calls
	// MPIR_Breakpoint, and its ranks wait at the end of MPI_Init for the release that follows
	// MPIR_Breakpoint: holding that one thread lets them start while the ranks are taken.
	return launchMPIRWith(ctx, fe, family, argv, spec, mpir.Options{HoldThread: family == "openmpi"})
}

// launchMPIRWith is launchMPIR with MPIR options (a tool daemon launch).
func launchMPIRWith(ctx context.Context, fe *Frontend, family string, argv []string, spec LaunchSpec, opts mpir.Options) (*mpirJob, error) {
	ctx, cancel := context.WithTimeout(ctx, fe.opts.Timeout)
	defer cancel()
	env := append([]string(nil), spec.Env...)
	if family == "openmpi" {
		env = append(env, "OMPI_MPIR_DO_NOT_WARN=1")
	}
	la, err := startLauncherAgent(ctx, fe, argv, launcherStart{env: env, unset: spec.Unset, dir: spec.Dir, noASLR: spec.NoASLR}, spec.Output, 0)
	if err != nil {
		return nil, err
	}
	j := &mpirJob{fe: fe, family: family, la: la, id: fmt.Sprintf("%s pid %d", filepath.Base(argv[0]), la.pid)}
	fe.progressf("launch: %s: started, waiting for its rank table", j.id)
	fail := func(phase string, err error) (*mpirJob, error) {
		if j.sess != nil {
			if aerr := j.sess.Abandon(); aerr != nil {
				fe.logf("launch: %s: resume the launcher: %v", j.id, aerr)
			}
		}
		// End the launcher: a failed launch must not leave a job behind.
		syscall.Kill(la.pid, syscall.SIGTERM)
		la.stop()
		return nil, fmt.Errorf("launch: %s: %s: %w%s", j.id, phase, err, outputTail(spec.Output))
	}
	j.sess, err = mpir.Launch(ctx, la.client, opts)
	if err != nil {
		return fail("MPIR set-up at the launcher's entry point", err)
	}
	procs, err := j.sess.WaitSpawned(ctx)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("MPIR_Breakpoint not reached within %v: %w", fe.opts.Timeout, err)
		}
		return fail("waiting for the rank table", err)
	}
	for _, p := range procs {
		j.procs = append(j.procs, Proc{Rank: p.Rank, Host: p.Host, Pid: p.Pid, Executable: p.Executable})
	}
	fe.progressf("launch: %s: %d ranks in the MPIR table (%v)", j.id, len(procs), j.sess.Timings)
	return j, nil
}

// attachMPIR runs MPIR attach mode on a running launcher of this host.
func attachMPIR(ctx context.Context, fe *Frontend, pid int) (*mpirJob, error) {
	return attachMPIRWith(ctx, fe, pid, mpir.Options{})
}

// attachMPIRWith is attachMPIR with MPIR options (the tool daemons of a BG/Q runjob).
func attachMPIRWith(ctx context.Context, fe *Frontend, pid int, opts mpir.Options) (*mpirJob, error) {
	ctx, cancel := context.WithTimeout(ctx, fe.opts.Timeout)
	defer cancel()
	exe, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe")
	if err != nil {
		return nil, fmt.Errorf("launch: attach to launcher pid %d: %w", pid, err)
	}
	_, family, _ := launcherPath(exe)
	la, err := startLauncherAgent(ctx, fe, nil, launcherStart{}, "", pid)
	if err != nil {
		return nil, err
	}
	j := &mpirJob{fe: fe, family: family, la: la, id: fmt.Sprintf("%s pid %d", filepath.Base(exe), pid)}
	opts.Exe = exe
	sess, procs, err := mpir.Attach(ctx, la.client, opts)
	j.sess = sess
	if err != nil {
		if sess != nil {
			sess.Abandon()
		}
		la.stop()
		return nil, fmt.Errorf("launch: attach to %s: %w", j.id, err)
	}
	for _, p := range procs {
		j.procs = append(j.procs, Proc{Rank: p.Rank, Host: p.Host, Pid: p.Pid, Executable: p.Executable})
	}
	fe.progressf("launch: %s: attached, %d ranks in the MPIR table", j.id, len(procs))
	// The ranks of a running job are not held: let the launcher go now.
	if err := j.Release(ctx); err != nil {
		return nil, err
	}
	return j, nil
}

// outputTail returns the end of the launcher's output file, for error messages.
func outputTail(path string) string {
	if path == "" {
		return ""
	}
	b, err := os.ReadFile(path)
	if err != nil || len(b) == 0 {
		return ""
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 10 {
		lines = lines[len(lines)-10:]
	}
	return "\nlauncher output:\n" + strings.Join(lines, "\n")
}

// The Job methods of an MPIR-driven job.

func (j *mpirJob) ID() string       { return j.id }
func (j *mpirJob) Procs() []Proc    { return append([]Proc(nil), j.procs...) }
func (j *mpirJob) Hold() Hold       { return j.hold }
func (j *mpirJob) LauncherPid() int { return j.la.pid }

// Release continues the launcher out of MPIR_Breakpoint.
func (j *mpirJob) Release(ctx context.Context) error {
	if j.released.Load() {
		return nil // without the lock: a Wait in progress holds it
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.released.Load() {
		return nil
	}
	if err := j.sess.Release(ctx); err != nil {
		if _, gone := j.sess.Exited(); !gone {
			return fmt.Errorf("launch: release %s: %w", j.id, err)
		}
	}
	j.released.Store(true)
	return nil
}

// Kill signals the ranks first and then ends the launcher: a launcher killed while it sits
// in MPIR_Breakpoint would orphan ranks blocked in their start-up.
func (j *mpirJob) Kill(ctx context.Context, sig syscall.Signal) error {
	if j.exited.Load() {
		return nil // the job ended with its launcher
	}
	err := j.ops.killRanks(ctx, j.procs, sig)
	if rerr := j.Release(ctx); rerr != nil && err == nil {
		err = rerr
	}
	if lerr := endLauncher(ctx, j.la.pid, launcherGrace(j.family), j.exited.Load); lerr != nil && err == nil {
		err = lerr
	}
	return err
}

// endLauncher ends a launcher of this host whose ranks were killed: it is given grace to end
// by itself, then SIGTERM.
func endLauncher(ctx context.Context, pid int, grace time.Duration, exited func() bool) error {
	for deadline := time.Now().Add(grace); time.Now().Before(deadline) && ctx.Err() == nil &&
		!exited() && !processEnded(pid); {
		time.Sleep(50 * time.Millisecond)
	}
	if !exited() && !processEnded(pid) {
		if err := syscall.Kill(pid, syscall.SIGTERM); err != nil && err != syscall.ESRCH {
			return fmt.Errorf("launch: kill launcher pid %d: %w", pid, err)
		}
	}
	return nil
}

// Wait waits for the launcher to exit.
func (j *mpirJob) Wait(ctx context.Context) (cdti.ExitStatus, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if st, ok := j.sess.Exited(); ok {
		return st, nil
	}
	if !j.released.Load() {
		return 0, fmt.Errorf("launch: wait for %s: the ranks are still held (Release first)", j.id)
	}
	st, err := j.sess.Wait(ctx)
	if err != nil {
		return 0, fmt.Errorf("launch: wait for %s: %w", j.id, err)
	}
	j.exited.Store(true)
	return st, nil
}

// Close releases a launcher still held and lets the launcher agent go.
func (j *mpirJob) Close() error {
	j.mu.Lock()
	if j.closed {
		j.mu.Unlock()
		return nil
	}
	j.closed = true
	released := j.released.Load()
	j.mu.Unlock()
	var err error
	if !released {
		err = j.sess.Abandon()
	}
	j.la.stop()
	return err
}

// launcherGrace is how long Kill waits for a launcher of family to end by itself once its
// ranks are gone, before it sends SIGTERM. srun ends by itself once its step's tasks are
// gone, while signalling it makes Slurm kill the step and hold the job, and its nodes, for a
// minute: it gets 15 s. Open MPI's mpirun ends its job on SIGTERM, and does not end by
// itself at all once its ranks are killed when the job runs with
// orte_abort_on_non_zero_status=0: it gets none. Other launchers get a second to report
// their ranks' end themselves.
func launcherGrace(family string) time.Duration {
	switch family {
	case "srun":
		return 15 * time.Second
	case "openmpi":
		return 0
	}
	return time.Second
}

// processEnded reports whether a process of this host has exited (gone, or a zombie).
func processEnded(pid int) bool {
	f := statFields(pid)
	return len(f) == 0 || f[0] == "Z" || f[0] == "X"
}
