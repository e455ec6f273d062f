package launch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hpcdap/hpcdap/cdti"
	"github.com/hpcdap/hpcdap/launch/pmix"
)

// pmixJob is a job reached through the PMIx tool interface: a tool process of its own
// (`hpcdap pmix-tool`, package launch/pmix) spawned the launcher or connected to it, read the
// rank table and holds the ranks until Release. Node operations are the workload manager's.
type pmixJob struct {
	fe          *Frontend
	id          string
	tool        *pmix.Tool
	nspace      string
	launcherPid int
	hold        Hold
	procs       []Proc
	output      string // the launcher's output file, for error messages
	jobNodes

	mu       sync.Mutex
	released bool
	closed   bool
}

// pmixHold chooses where the launcher holds the ranks of program: an MPI program (one that
// loads libmpi or libpmix) inside PMIx_Init, in MPI_Init, as Open MPI 4 holds them; any other
// program at its exec, before its first instruction (it never calls PMIx_Init). PRRTE's stop
// on exec would serve both, but it stalls past a few dozen ranks of a node (PRRTE 3.0.8: of
// 64 ranks 21 to 29 are ever started), while the hold in PMIx_Init scales.
func pmixHold(program, dir string, env []string) string {
	if !filepath.IsAbs(program) && dir != "" {
		program = filepath.Join(dir, program)
	}
	deps, err := NewResolver(env).Resolve(program)
	if err != nil {
		return pmix.HoldExec
	}
	for _, d := range deps {
		base := filepath.Base(d.Path)
		if strings.HasPrefix(base, "libmpi.") || strings.HasPrefix(base, "libpmix.") {
			return pmix.HoldInit
		}
	}
	return pmix.HoldExec
}

// holdOf turns a PMIx hold name into the job layer's Hold.
func holdOf(h string) Hold {
	switch h {
	case pmix.HoldExec:
		return HoldAtExec
	case pmix.HoldInit:
		return HoldInInit
	}
	return HoldNone
}

// startTool starts the PMIx tool process of a job with the launcher's output in output. The
// tool's own rendezvous files go to a temporary directory of its own (tmp "" makes one), so
// that no other session's is ever picked up; the launcher and the ranks keep the environment
// they are given. An attach looks where the running launcher put its files (tmp). noASLR
// starts the tool, and so the launcher and the ranks, without address-space randomisation.
func startTool(ctx context.Context, fe *Frontend, env []string, output, tmp string, noASLR bool) (*pmix.Tool, error) {
	if !pmix.Built {
		return nil, fmt.Errorf("launch: PMIx tool: %w", pmix.ErrNotBuilt)
	}
	if tmp == "" {
		// Under the front end's working directory, which Close removes.
		var err error
		if tmp, err = os.MkdirTemp(fe.opts.WorkDir, "pmix-*"); err != nil {
			return nil, fmt.Errorf("launch: PMIx tool directory: %w", err)
		}
	}
	var err error
	var out *os.File
	if output != "" {
		if out, err = os.OpenFile(output, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600); err != nil {
			return nil, fmt.Errorf("launch: output file: %w", err)
		}
		defer out.Close()
	}
	env = mergeEnv(env, []string{"TMPDIR=" + tmp, "PMIX_SYSTEM_TMPDIR=" + tmp})
	var t *pmix.Tool
	start := func() (err error) {
		t, err = pmix.StartTool(ctx, fe.opts.AgentPath, env, out, out)
		return err
	}
	if noASLR {
		// The launcher is the tool's child, the ranks its descendants: they inherit it.
		err = withNoASLR(start)
	} else {
		err = start()
	}
	if err != nil {
		return nil, fmt.Errorf("launch: PMIx tool: %w", err)
	}
	return t, nil
}

// launchPMIx spawns the launcher from a PMIx tool process with the ranks held (pmixHold) and
// reads the rank table. On any failure the tool process is ended, which releases and
// ends what it started.
func launchPMIx(ctx context.Context, fe *Frontend, path string, spec LaunchSpec) (*pmixJob, error) {
	ctx, cancel := context.WithTimeout(ctx, fe.opts.Timeout)
	defer cancel()
	env := mergeEnv(withoutVars(os.Environ(), spec.Unset...), spec.Env)
	t, err := startTool(ctx, fe, env, spec.Output, "", spec.NoASLR)
	if err != nil {
		return nil, err
	}
	name := filepath.Base(path)
	fe.progressf("launch: %s: starting through the PMIx tool interface", name)
	ready, err := t.Launch(ctx, pmix.Request{Launcher: path, Args: spec.Args, Program: spec.Program,
		ProgramArgs: spec.ProgramArgs, Env: env, Dir: spec.Dir, Hold: pmixHold(spec.Program, spec.Dir, env)})
	if err != nil {
		t.Close()
		var ended *pmix.JobEndedError
		if errors.As(err, &ended) {
			// The job was not held: a rank ended before its hold.
			status := ""
			if ended.Ended {
				status = fmt.Sprintf("; the job ended with status %d", ended.Status)
			}
			return nil, &jobGoneError{fmt.Errorf("launch: %s pid %d: ranks ended before %s: %s%s (%w)%s",
				name, t.LauncherPid(), atHold, endedRanks(ended.Gone), status, err, outputTail(spec.Output))}
		}
		return nil, fmt.Errorf("launch: %s through PMIx: %w%s", name, err, outputTail(spec.Output))
	}
	j := newPMIxJob(fe, t, name, ready)
	j.output = spec.Output
	if err := j.goneError(atHold); err != nil {
		t.Close()
		return nil, err
	}
	fe.progressf("launch: %s: %d ranks in the PMIx proc table of %s, held %v", j.id, len(j.procs), j.nspace, j.hold)
	return j, nil
}

// The moments of a launch at which a PMIx job's ranks are found gone (goneError).
const (
	atHold     = "the launcher held them"          // the proc table read at the ready event
	atAgents   = "their node agents were in place" // a later step, the agents' start, failed
	atDebugger = "the debugger took them"          // the debugger's attach to the ranks failed
)

// goneError says which ranks of the job have ended, nil when none has, for an error of the
// launch at the moment when (atHold, atAgents, atDebugger). A rank that dies before its hold
// ends the job: PRRTE reports the job ready for debug once its ranks are launched, with what
// is left of the table or all of it, so the rank may still be alive when the table is read
// and end a moment later, together with the others the launcher then kills; the step that
// fails next (the agents' start) asks again. A rank of another host that dies while the job
// is held ends the job, and its agents with it, before they can say so: the launcher's report
// of the job's end, waited for after a later step failed, names it alone.
func (j *pmixJob) goneError(when string) error {
	gone := goneRanks(j.procs)
	if len(gone) == 0 && when == atHold {
		return nil
	}
	ended := false
	select {
	case <-j.tool.Ended():
		ended = true
	case <-time.After(2 * time.Second):
	}
	status, statusErr := j.tool.Status()
	if ended && statusErr == nil {
		if cause, said := j.tool.EndCause(); len(cause) > 0 {
			msg := fmt.Sprintf("launch: %s: ranks ended before %s: %s, whose end ended the job with status %d",
				j.id, when, endedRanks(cause), status)
			if said != "" {
				msg += " (the launcher: " + said + ")"
			}
			return &jobGoneError{errors.New(msg + outputTail(j.output))}
		}
	}
	if len(gone) == 0 {
		return nil
	}
	text := ""
	if ended && statusErr == nil {
		text = fmt.Sprintf("; the job ended with status %d", status)
	}
	return &jobGoneError{fmt.Errorf("launch: %s: ranks ended before %s: %s%s%s", j.id, when,
		strings.Join(gone, ", "), text, outputTail(j.output))}
}

// jobGoneError is the error of a job whose ranks ended before it could be debugged: nothing
// to fall back to.
type jobGoneError struct{ err error }

func (e *jobGoneError) Error() string { return e.err.Error() }
func (e *jobGoneError) Unwrap() error { return e.err }

// goneRanks names the ranks of a proc table read at the hold that have no process (pid 0)
// or whose process on this host has ended, with their hosts.
func goneRanks(procs []Proc) []string {
	here, _ := os.Hostname()
	var gone []string
	for _, p := range procs {
		switch {
		case p.Pid <= 0:
			gone = append(gone, fmt.Sprintf("rank %d on %s (no process)", p.Rank, p.Host))
		case p.Host == here && processEnded(p.Pid):
			gone = append(gone, fmt.Sprintf("rank %d on %s (pid %d, ended)", p.Rank, p.Host, p.Pid))
		}
	}
	return gone
}

// endedRanks names the ranks a launcher gave as the cause of its job's end, with their hosts
// and pids where its proc table gave them.
func endedRanks(procs []pmix.Proc) string {
	var names []string
	for _, p := range procs {
		host := p.Host
		if host == "" {
			host = "an unknown host"
		}
		if p.Pid > 0 {
			names = append(names, fmt.Sprintf("rank %d on %s (pid %d, ended)", p.Rank, host, p.Pid))
		} else {
			names = append(names, fmt.Sprintf("rank %d on %s (ended)", p.Rank, host))
		}
	}
	return strings.Join(names, ", ")
}

// attachPMIx connects a PMIx tool process to a running launcher of this host and reads the
// rank table of its job nspace ("": its one application job). The ranks are not held.
func attachPMIx(ctx context.Context, fe *Frontend, pid int, exe, nspace string) (*pmixJob, error) {
	ctx, cancel := context.WithTimeout(ctx, fe.opts.Timeout)
	defer cancel()
	t, err := startTool(ctx, fe, os.Environ(), "", launcherTmpDir(pid), false)
	if err != nil {
		return nil, fmt.Errorf("launch: attach to %s pid %d (no MPIR; PMIx): %w", filepath.Base(exe), pid, err)
	}
	ready, err := t.Attach(ctx, pid, nspace)
	if err != nil {
		t.Close()
		return nil, fmt.Errorf("launch: attach to %s pid %d through PMIx: %w", filepath.Base(exe), pid, err)
	}
	if ready.LauncherPid == 0 {
		ready.LauncherPid = pid
	}
	j := newPMIxJob(fe, t, filepath.Base(exe), ready)
	j.released = true
	fe.progressf("launch: %s: attached through PMIx, %d ranks in the proc table of %s", j.id, len(j.procs), j.nspace)
	return j, nil
}

// PMIxServerOf returns the pid of the PMIx server of this host that serves the job nspace —
// the launcher, or on a node of a job that spans several its node daemon — whose rendezvous
// files a tool attaches by: the parent of the job's processes here, which carry
// PMIX_NAMESPACE=nspace in their environment.
func PMIxServerOf(nspace string) (int, error) {
	if nspace == "" || strings.ContainsAny(nspace, "\x00\n") {
		return 0, fmt.Errorf("launch: PMIx namespace %q: not a namespace", nspace)
	}
	want := []byte("\x00PMIX_NAMESPACE=" + nspace + "\x00")
	pids, err := procPids()
	if err != nil {
		return 0, fmt.Errorf("launch: PMIx namespace %s: %w", nspace, err)
	}
	parents := map[int]int{} // process of the job → its parent
	for _, pid := range pids {
		env, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
		if err != nil || !bytes.Contains(append([]byte{0}, env...), want) {
			continue
		}
		if ppid, ok := parentOf(pid); ok {
			parents[pid] = ppid
		}
	}
	// A process whose parent is in the namespace too is a rank's child (system(), a wrapper
	// script): it inherited the variable. The server is the parent outside the namespace.
	servers := map[int][]int{} // server → its processes of the job
	for pid, ppid := range parents {
		if _, inJob := parents[ppid]; !inJob {
			servers[ppid] = append(servers[ppid], pid)
		}
	}
	switch len(servers) {
	case 0:
		return 0, fmt.Errorf("launch: PMIx namespace %s: no process of this host is in it", nspace)
	case 1:
		for s := range servers {
			return s, nil
		}
	}
	var list []string
	for s, procs := range servers {
		list = append(list, fmt.Sprintf("%d (parent of %v)", s, procs))
	}
	sort.Strings(list)
	return 0, fmt.Errorf("launch: PMIx namespace %s: its processes here have several parents, none of them its one server: %s",
		nspace, strings.Join(list, ", "))
}

// launcherTmpDir is the directory under which a running launcher keeps its PMIx rendezvous
// files: its PMIX_SYSTEM_TMPDIR, else its TMPDIR, else /tmp.
func launcherTmpDir(pid int) string {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	vars := map[string]string{}
	for _, kv := range strings.Split(string(b), "\x00") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			vars[k] = v
		}
	}
	for _, k := range []string{"PMIX_SYSTEM_TMPDIR", "TMPDIR"} {
		if v := vars[k]; strings.HasPrefix(v, "/") {
			return v
		}
	}
	return "/tmp"
}

func newPMIxJob(fe *Frontend, t *pmix.Tool, name string, r pmix.Ready) *pmixJob {
	j := &pmixJob{fe: fe, tool: t, nspace: r.Nspace, launcherPid: r.LauncherPid, hold: holdOf(r.Hold),
		id: fmt.Sprintf("%s pid %d", name, r.LauncherPid)}
	for _, p := range r.Procs {
		j.procs = append(j.procs, Proc{Rank: p.Rank, Host: p.Host, Pid: p.Pid, Executable: p.Executable})
	}
	return j
}

// daemonSpawner is a job whose launcher may start tool daemons itself, one on each node of
// the job (a PMIx launcher's debugger daemons), where the workload manager's Start would.
type daemonSpawner interface {
	// spawnDaemons starts argv with the extra environment env on each of hosts (the job's
	// nodes), their output going to logPath; an error says why the launcher did not.
	spawnDaemons(ctx context.Context, hosts, argv, env []string, logPath string) (*DaemonSet, error)
}

// spawnDaemons has the launcher start argv as the job's debugger daemons. The set ends when the
// launcher reports their job's end (or the tool process is gone); it is signalled through the
// launcher.
func (j *pmixJob) spawnDaemons(ctx context.Context, hosts, argv, env []string, logPath string) (*DaemonSet, error) {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("launch: daemon log: %w", err)
	}
	f.Close()
	ns, err := j.tool.SpawnDaemons(ctx, argv, env)
	if err != nil {
		if gerr := j.goneError(atAgents); gerr != nil {
			return nil, gerr
		}
		return nil, fmt.Errorf("launch: %s: start the agents as PMIx debugger daemons: %w", j.id, err)
	}
	d := &DaemonSet{Hosts: hosts, LogPath: logPath, done: make(chan struct{}), ended: map[string]string{},
		targetEnded: j.tool.Ended()}
	d.signal = func(sig syscall.Signal) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := j.tool.SignalDaemons(ctx, ns, sig); err != nil {
			j.fe.logf("launch: %s: signal %v to the debugger daemons %s: %v", j.id, sig, ns, err)
		}
	}
	go func() {
		<-j.tool.DaemonsEnded()
		close(d.done)
	}()
	return d, nil
}

// The Job methods of a PMIx job.

func (j *pmixJob) ID() string       { return j.id }
func (j *pmixJob) Procs() []Proc    { return append([]Proc(nil), j.procs...) }
func (j *pmixJob) Hold() Hold       { return j.hold }
func (j *pmixJob) LauncherPid() int { return j.launcherPid }

// Release sends the debugger release to the job's namespace.
func (j *pmixJob) Release(ctx context.Context) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.released {
		return nil
	}
	if err := j.tool.Release(ctx); err != nil {
		return fmt.Errorf("launch: release %s: %w", j.id, err)
	}
	j.released = true
	return nil
}

// Kill signals every rank through the launcher (the ranks of this host directly as well, in
// case the launcher is gone), which then ends.
func (j *pmixJob) Kill(ctx context.Context, sig syscall.Signal) error {
	select {
	case <-j.tool.Ended():
		return nil
	default:
	}
	// The ranks are signalled both through the launcher and, in case it is gone, directly on
	// this host: the kill fails only when neither way reached them.
	err := j.tool.Kill(ctx, sig)
	if kerr := j.ops.killRanks(ctx, j.procs, sig); err != nil && kerr != nil {
		return fmt.Errorf("launch: kill %s: %w", j.id, errors.Join(err, kerr))
	}
	if rerr := j.Release(ctx); rerr != nil && !errors.Is(rerr, context.Canceled) {
		j.fe.logf("launch: %s: release after kill: %v", j.id, rerr)
	}
	return nil
}

// Wait waits for the job to end and returns its exit status as a wait status.
func (j *pmixJob) Wait(ctx context.Context) (cdti.ExitStatus, error) {
	select {
	case <-j.tool.Ended():
	case <-ctx.Done():
		return 0, fmt.Errorf("launch: wait for %s: %w", j.id, ctx.Err())
	}
	st, err := j.tool.Status()
	if err != nil {
		return 0, fmt.Errorf("launch: wait for %s: %w", j.id, err)
	}
	return pmixStatus(st), nil
}

// pmixStatus turns a PMIx job's exit status into a wait status: the status as an exit code
// (the launcher reports a rank killed by signal N as 128+N, as a shell does, and so does this
// wait status), and a negative status (a PMIx error code: the job was ended by the runtime)
// as 255.
func pmixStatus(st int) cdti.ExitStatus {
	if st < 0 || st > 255 {
		st = 255
	}
	return cdti.ExitStatus(st << 8)
}

// Close lets the job go: a job still held is released, and the tool process ends.
func (j *pmixJob) Close() error {
	j.mu.Lock()
	if j.closed {
		j.mu.Unlock()
		return nil
	}
	j.closed = true
	j.mu.Unlock()
	if err := j.tool.Close(); err != nil {
		return fmt.Errorf("launch: close %s: %w", j.id, err)
	}
	return nil
}
