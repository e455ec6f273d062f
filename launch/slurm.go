package launch

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hpcdap/hpcdap/cdti"
)

func init() { RegisterWLM("slurm", func() WLM { return slurmWLM{} }) }

// slurmStep is the form of a Slurm job step id, JOBID.STEPID.
var slurmStep = regexp.MustCompile(`^[0-9]+\.[0-9]+$`)

// IsSlurmStep reports whether s is a Slurm job step id "JOBID.STEPID" (such as "1234.0").
func IsSlurmStep(s string) bool { return slurmStep.MatchString(s) }

// slurmWLM runs jobs with srun: launch through srun's MPIR interface (ranks held at exec),
// attach by an srun's pid or by a job step id, and reach the nodes with job steps that overlap
// the job's allocation (srun --overlap) and sbcast.
type slurmWLM struct{}

func (slurmWLM) Name() string { return "slurm" }

// Available checks for a working srun and a configuration to talk to a controller.
func (slurmWLM) Available() error {
	p, err := lookPath("srun")
	if err != nil {
		return fmt.Errorf("srun not found: %w", err)
	}
	out, err := exec.Command(p, "--version").Output()
	if err != nil || !strings.HasPrefix(string(out), "slurm") {
		return fmt.Errorf("%s --version: %q, %v", p, strings.TrimSpace(string(out)), err)
	}
	conf := os.Getenv("SLURM_CONF")
	if conf == "" {
		conf = "/etc/slurm/slurm.conf"
	}
	if _, err := os.Stat(conf); err != nil {
		return fmt.Errorf("no Slurm configuration: %w", err)
	}
	return nil
}

// Launch runs srun under MPIR: its tasks are held stopped at their first instruction until
// Release.
func (slurmWLM) Launch(ctx context.Context, fe *Frontend, spec LaunchSpec, barrier bool) (Job, error) {
	name := spec.Launcher
	if name == "" {
		name = "srun"
	}
	path, family, err := launcherPath(name)
	if err != nil {
		return nil, err
	}
	if family != "srun" {
		return nil, fmt.Errorf("launch: launcher %s: the slurm workload manager launches with srun", name)
	}
	if _, err := chooseProtocol(ctx, fe, path, family, spec.Protocol); err != nil {
		return nil, err
	}
	argv := append(append(append([]string{path}, spec.Args...), spec.Program), spec.ProgramArgs...)
	j, err := launchMPIR(ctx, fe, family, argv, spec)
	if err != nil {
		return nil, err
	}
	j.hold = HoldAtExec
	if err := j.slurmNodes(ctx); err != nil {
		j.Release(ctx)
		j.Close()
		return nil, err
	}
	if !barrier {
		if err := j.Release(ctx); err != nil {
			j.Close()
			return nil, err
		}
	}
	return j, nil
}

// slurmNodes reads srun's job and step ids and sets up the node operations.
func (j *mpirJob) slurmNodes(ctx context.Context) error {
	job, step, err := j.sess.JobID(ctx)
	if err != nil {
		return fmt.Errorf("launch: %s: %w", j.id, err)
	}
	if job == "" {
		return fmt.Errorf("launch: %s: srun did not fill totalview_jobid", j.id)
	}
	j.id = "slurm " + job + "." + step
	j.jobNodes = jobNodes{newSlurmNodes(j.fe, job, step, hostsOf(j.procs))}
	return nil
}

// hostsOf lists the distinct hosts of a table in rank order.
func hostsOf(procs []Proc) []string {
	return placementOf(procs).HostNames()
}

// Attach registers a running srun (by pid, through MPIR) or a job step by its id (ranks from
// scontrol listpids on each of the step's nodes).
func (slurmWLM) Attach(ctx context.Context, fe *Frontend, ref JobRef) (Job, error) {
	if ref.LauncherPid != 0 {
		j, err := attachMPIR(ctx, fe, ref.LauncherPid)
		if err != nil {
			return nil, err
		}
		if err := j.slurmNodes(ctx); err != nil {
			j.Close()
			return nil, err
		}
		return j, nil
	}
	return attachStep(ctx, fe, ref.SlurmJob)
}

// slurmNodes reach the nodes of a Slurm job.
type slurmNodes struct {
	fe        *Frontend
	job, step string
	hostList  []string
}

func newSlurmNodes(fe *Frontend, job, step string, hosts []string) *slurmNodes {
	return &slurmNodes{fe: fe, job: job, step: step, hostList: hosts}
}

func (n *slurmNodes) hosts() []string { return append([]string(nil), n.hostList...) }

// stepEnv is this process's environment without the variables that would give an enclosing
// job step's geometry to the steps the front end starts.
func stepEnv(extra []string) []string {
	env := withoutVars(os.Environ(), "SLURM_NTASKS", "SLURM_NPROCS", "SLURM_NNODES", "SLURM_JOB_NUM_NODES",
		"SLURM_CPUS_PER_TASK", "SLURM_DISTRIBUTION", "SLURM_NTASKS_PER_NODE", "SLURM_TASKS_PER_NODE",
		"SLURM_CPU_BIND", "SLURM_MEM_PER_CPU", "SLURM_MEM_PER_NODE", "SLURM_TASK_PROLOG", "SLURM_BCAST",
		"SLURM_SEND_LIBS", "SLURM_STEP_ID", "SLURM_STEPID", "SLURM_NODELIST", "SLURM_JOB_NODELIST",
		"SLURM_GRES", "SLURM_MPI_TYPE", "SLURM_OVERLAP", "SLURM_EXCLUSIVE")
	return mergeEnv(env, extra)
}

// stepArgs are the srun arguments of a step that runs one task on each of hosts inside the job's
// allocation, sharing its resources (--overlap: without it the step waits for the job's CPUs).
func (n *slurmNodes) stepArgs(hosts []string) []string {
	return []string{"--jobid=" + n.job, "--overlap", "-N", strconv.Itoa(len(hosts)), "--ntasks-per-node=1",
		"--nodelist=" + strings.Join(hosts, ","), "--mpi=none", "--kill-on-bad-exit=0", "--quiet"}
}

// stagingScript runs as one task per node for as long as a staging directory lives: it makes
// the directory, says so, and removes it when signalled, by the front end (SIGUSR1, which srun
// forwards to its tasks) or by slurmstepd when the job ends (SIGTERM, KillWait seconds before
// SIGKILL). So the directory goes with the job even if the front end is gone. The task waits
// in sleeps that the trap ends (it kills $!). A signal that comes while the shell starts a
// sleep can still leave that sleep behind, reparented and so no longer the step's in Slurm's
// eyes where it tracks processes by parentage; with the step's output open it kept the step,
// and the job's nodes, busy for Slurm's 60 s output timeout. So each sleep is short (1 s) and
// has no stdio of the step: one left behind ends within a second and holds nothing.
//
// The directory may be on a file system the nodes share (a /tmp on NFS, a parallel file
// system): the task whose mkdir succeeds creates it and writes a mark naming the step and its
// node; a task whose mkdir finds the directory already there waits (up to 10 s) for a mark of
// its own step in a directory it owns, and then shares it ("staged NODE in CREATOR"). Only the
// creator removes the directory. A task that cannot stage says why ("failed NODE: reason")
// before it exits, so that the front end can answer at once. A signal that comes while mkdir
// runs finds the task not knowing whether the directory is its own: it removes the directory
// if it is one it owns with no mark, or its own step's. The trap ignores further signals, so
// that the front end's repeated ones (see abandon) cannot cut its removal short.
const stagingScript = `echo "step $SLURM_JOB_ID.$SLURM_STEP_ID"
umask 077
node=$SLURMD_NODENAME
mark="$0/.hpcdap-staging"
step=$SLURM_JOB_ID.$SLURM_STEP_ID
owner=0
mine() { [ -d "$0" ] && [ ! -L "$0" ] && [ -O "$0" ] && { read -r s c <"$mark" 2>/dev/null || s=$step; [ "$s" = "$step" ]; }; }
removed() {
	trap '' TERM INT HUP USR1
	kill $! 2>/dev/null
	{ [ $owner = 1 ] || { [ $owner = maybe ] && mine; }; } && rm -rf --one-file-system "$0"
	echo "removed $node"
	exit 0
}
trap removed TERM INT HUP USR1
fail() { printf 'failed %s: %s\n' "$node" "$(printf '%s' "$*" | tr '\n' ' ')"; exit 1; }
owner=maybe
if err=$(mkdir "$0" 2>&1); then
	owner=1
	err=$(mkdir "$0/bin" "$0/lib" "$0/tmp" 2>&1 && echo "$step $node" >"$mark.new" 2>&1 &&
		mv "$mark.new" "$mark" 2>&1) || { rm -rf --one-file-system "$0"; owner=0; fail "$err"; }
	echo "staged $node"
else
	owner=0
	[ -d "$0" ] && [ ! -L "$0" ] && [ -O "$0" ] || fail "$err"
	i=0
	until read -r s creator <"$mark" 2>/dev/null && [ "$s" = "$step" ]; do
		i=$((i + 1))
		[ $i -le 100 ] || fail "$err, and no other node of step $step made it"
		sleep 0.1 </dev/null >/dev/null 2>&1 & wait $!
	done
	echo "staged $node in $creator"
fi
while :; do sleep 1 </dev/null >/dev/null 2>&1 & wait $!; done`

// slurmStaging is a staging directory kept by one step of the job.
type slurmStaging struct {
	d      *DaemonSet
	hosts  []string
	dir    string
	stores [][]string
}

// stageLine is what a staging task says about its node: "TASK: staged NODE", "TASK: staged
// NODE in CREATOR" (a directory another node made, on a shared file system) or "TASK: failed
// NODE: REASON"; srun's own "srun: error: NODE: task N: REASON" says a task ended.
var stageLine = regexp.MustCompile(`(?m)^(?:\d+: (staged|failed) (\S+?)(?: in (\S+)|: (.*))?|srun: error: (\S+): task \d+: (.*))$`)

// stageReport is what the staging tasks have said so far.
type stageReport struct {
	creator map[string]string // node → the node that made its directory (itself, or another)
	failed  map[string]string // node → why staging failed there
	// unsaid lists the failed nodes known only from srun's report of their task's end: the
	// task's own "failed" line, forwarded on another path, can still be on its way.
	unsaid map[string]bool
}

func parseStaging(log string) stageReport {
	r := stageReport{creator: map[string]string{}, failed: map[string]string{}, unsaid: map[string]bool{}}
	for _, m := range stageLine.FindAllStringSubmatch(log, -1) {
		switch {
		case m[1] == "staged" && m[3] != "":
			r.creator[m[2]] = m[3]
		case m[1] == "staged":
			r.creator[m[2]] = m[2]
		case m[1] == "failed":
			r.failed[m[2]] = m[4]
			delete(r.unsaid, m[2])
		case m[5] != "":
			if _, said := r.failed[m[5]]; !said {
				r.failed[m[5]] = "staging task: " + m[6]
				r.unsaid[m[5]] = true
			}
		}
	}
	return r
}

func (n *slurmNodes) stage(ctx context.Context, dir string) (Staging, error) {
	args := append(n.stepArgs(n.hostList), "--label", "sh", "-c", stagingScript, dir)
	cmd := exec.Command("srun", args...)
	cmd.Env = stepEnv(nil)
	// No parent-death signal: if the front end dies, this step lives on until the job ends
	// and then removes the directory.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	logPath, err := n.fe.workFile("staging-*.log")
	if err != nil {
		return nil, err
	}
	d, err := startDaemonCmds(n.hostList, []*exec.Cmd{cmd}, logPath)
	if err != nil {
		return nil, err
	}
	d.terminate = scancelStep(d, "USR1")
	n.fe.progressf("launch: making staging directory %s on %d node(s)", dir, len(n.hostList))
	st := &slurmStaging{d: d, hosts: n.hosts(), dir: dir}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		r := parseStaging(d.Log())
		if len(r.unsaid) > 0 {
			// srun reports a task's end on its own path, which can overtake the task's last
			// words: give them a moment to arrive, so that the error says why.
			d.settle(300*time.Millisecond, 2*time.Second)
			r = parseStaging(d.Log())
		}
		var missing, failed []string
		for _, h := range st.hosts {
			if why, ok := r.failed[h]; ok {
				failed = append(failed, h+": "+why)
			} else if _, ok := r.creator[h]; !ok {
				missing = append(missing, h)
			}
		}
		if len(failed) > 0 {
			// A node that failed fails the staging now: the others' directories go with the step.
			abandon(d, 10*time.Second)
			return nil, stageError(dir, failed, missing)
		}
		if len(missing) == 0 {
			st.stores = storesOf(st.hosts, r.creator)
			n.fe.progressf("launch: staging directory %s on %d nodes in %d store(s)", dir, len(st.hosts), len(st.stores))
			return st, nil
		}
		select {
		case <-d.Done():
			return nil, fmt.Errorf("launch: staging directory %s: not created on %v: the staging step ended:\n%s", dir, missing, tail(d.Log(), 20))
		case <-ctx.Done():
			abandon(d, 10*time.Second)
			return nil, fmt.Errorf("launch: staging directory %s: not created on %v: %w", dir, missing, ctx.Err())
		case <-tick.C:
		}
	}
}

// abandon ends a staging step before all its tasks have answered. A task that starts after
// the step was signalled would make its directory and keep it until the job ends, so the
// signal is sent again each second until the step has ended (at most grace), then Stop ends
// what is left. scancel's failure is no reason to stop: it fails when a node's task has
// already ended (the node that failed), though it signals the others.
func abandon(d *DaemonSet, grace time.Duration) {
	deadline := time.NewTimer(grace)
	defer deadline.Stop()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		d.terminate()
		select {
		case <-d.Done():
			return
		case <-deadline.C:
			d.Stop(grace)
			return
		case <-tick.C:
		}
	}
}

// stageError names the nodes where staging failed, each with its reason, and those that had
// not answered yet.
func stageError(dir string, failed, missing []string) error {
	msg := fmt.Sprintf("launch: staging directory %s: failed on %d node(s): %s", dir, len(failed), strings.Join(failed, "; "))
	if len(missing) > 0 {
		msg += fmt.Sprintf(" (no answer yet from %v)", missing)
	}
	return errors.New(msg)
}

// storesOf groups hosts by the node that created the directory they see, in host order.
func storesOf(hosts []string, creator map[string]string) [][]string {
	var out [][]string
	at := map[string]int{}
	for _, h := range hosts {
		c := creator[h]
		i, ok := at[c]
		if !ok {
			i = len(out)
			at[c] = i
			out = append(out, nil)
		}
		out[i] = append(out[i], h)
	}
	return out
}

// Stores groups the hosts by the directory they see.
func (st *slurmStaging) Stores() [][]string { return st.stores }

// missing lists the hosts whose task has not printed "what HOST".
func (st *slurmStaging) missing(what string) []string {
	log := st.d.Log()
	var out []string
	for _, h := range st.hosts {
		if !strings.Contains(log, what+" "+h+"\n") {
			out = append(out, h)
		}
	}
	return out
}

// Remove signals the keeping step; each task removes the directory on its node.
func (st *slurmStaging) Remove(ctx context.Context) error {
	select {
	case <-st.d.Done():
		return nil // the job ended: slurmstepd had the tasks remove the directory
	default:
	}
	if err := st.d.terminate(); err != nil {
		// The job is gone (its end made the tasks remove the directory) or the step id is
		// unknown: let srun end on its own.
		st.d.Stop(10 * time.Second)
		return nil
	}
	select {
	case <-st.d.Done():
	case <-ctx.Done():
		return fmt.Errorf("launch: remove %s: %w", st.dir, ctx.Err())
	}
	if missing := st.missing("removed"); len(missing) > 0 {
		return fmt.Errorf("launch: remove %s: not confirmed on %v:\n%s", st.dir, missing, tail(st.d.Log(), 20))
	}
	return nil
}

// exec runs argv on each host with its own one-task step, 16 at a time.
func (n *slurmNodes) exec(ctx context.Context, hosts []string, argv []string) []NodeResult {
	out := make([]NodeResult, len(hosts))
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for i, h := range hosts {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			args := append(n.stepArgs([]string{h}), argv...)
			cmd := exec.CommandContext(ctx, "srun", args...)
			cmd.Env = stepEnv(nil)
			b, err := cmd.CombinedOutput()
			out[i] = NodeResult{Host: h, Output: string(b)}
			if err != nil {
				out[i].Err = fmt.Errorf("srun %s on %s: %w", argv[0], h, err)
			}
		})
	}
	wg.Wait()
	return out
}

// ship broadcasts a file to every node of the job with sbcast (one copy per node), or, for
// some of the nodes (one per shared store), streams it to each through a one-task step.
func (n *slurmNodes) ship(ctx context.Context, hosts []string, src, dst string) error {
	if hosts == nil {
		cmd := exec.CommandContext(ctx, "sbcast", "--jobid="+n.job, "-f", src, dst)
		cmd.Env = stepEnv([]string{"SBCAST_SEND_LIBS=no"})
		if b, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("launch: sbcast %s to %s in job %s: %w: %s", src, dst, n.job, err, strings.TrimSpace(string(b)))
		}
		return nil
	}
	var errs []error
	for _, h := range hosts {
		if err := n.shipTo(ctx, h, src, dst); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// shipTo copies src to dst on host through the standard input of a one-task step.
func (n *slurmNodes) shipTo(ctx context.Context, host, src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("launch: ship %s: %w", src, err)
	}
	defer in.Close()
	args := append(n.stepArgs([]string{host}), "sh", "-c", `cat >"$0"`, dst)
	cmd := exec.CommandContext(ctx, "srun", args...)
	cmd.Env = stepEnv(nil)
	cmd.Stdin = in
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("launch: ship %s to %s on %s: %w: %s", src, dst, host, err, strings.TrimSpace(string(b)))
	}
	return nil
}

// shellQuote quotes a word for sh.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// start runs one daemon per host as the tasks of one step. Per-host arguments are chosen by a
// small sh script on $SLURMD_NODENAME, the name slurmd gives each task's node.
func (n *slurmNodes) start(ctx context.Context, hosts []string, argv func(string) []string, env []string) (*DaemonSet, error) {
	if len(hosts) == 0 {
		return nil, errors.New("launch: start daemons: no hosts")
	}
	cmd := n.daemonStep(hosts, argv, env)
	logPath, err := n.fe.workFile("daemons-*.log")
	if err != nil {
		return nil, err
	}
	d, err := startDaemonCmds(hosts, []*exec.Cmd{cmd}, logPath)
	if err != nil {
		return nil, err
	}
	d.terminate = scancelStep(d, "TERM")
	d.endedFrom = endedTasks
	return d, nil
}

// daemonStep is the srun command of start. The daemons' variables (the session token among
// them) travel in its environment, never in its arguments, and --export names them, so that a
// user's SLURM_EXPORT_ENV cannot keep them from the tasks.
func (n *slurmNodes) daemonStep(hosts []string, argv func(string) []string, env []string) *exec.Cmd {
	var script strings.Builder
	// The step id lets Stop signal the daemons through Slurm; the node name maps the task
	// labels of the output to nodes.
	script.WriteString(`echo "step $SLURM_JOB_ID.$SLURM_STEP_ID"; echo "node $SLURMD_NODENAME"` + "\n" + `case "$SLURMD_NODENAME" in` + "\n")
	for _, h := range hosts {
		words := argv(h)
		q := make([]string, len(words))
		for i, w := range words {
			q[i] = shellQuote(w)
		}
		fmt.Fprintf(&script, "%s) exec %s ;;\n", shellQuote(h), strings.Join(q, " "))
	}
	script.WriteString(`*) echo "no daemon for node $SLURMD_NODENAME" >&2; exit 1 ;;` + "\nesac\n")
	args := append(n.stepArgs(hosts), exportFlag(os.Getenv("SLURM_EXPORT_ENV"), env), "--label", "sh", "-c", script.String())
	cmd := exec.Command("srun", args...)
	cmd.Env = stepEnv(env)
	return cmd
}

// taskLine is a labelled line of a step's output, "TASK: text"; taskNode is the line in
// which a daemon task names its node; taskEnd is srun's report of a task that ended badly,
// "srun: error: NODE: task N: Exited with exit code 3".
var (
	taskLine = regexp.MustCompile(`(?m)^(\d+): (.*)$`)
	taskNode = regexp.MustCompile(`(?m)^(\d+): node (\S+)$`)
	taskEnd  = regexp.MustCompile(`(?m)^srun: error: (\S+): task (\d+): (.*)$`)
)

// endedTasks reads from a daemon step's output which nodes' daemons ended badly, each with
// srun's report and the last lines its task wrote.
func endedTasks(log string) map[string]string {
	out := map[string]string{}
	for _, m := range taskEnd.FindAllStringSubmatch(log, -1) {
		out[m[1]] = m[3]
	}
	if len(out) == 0 {
		return out
	}
	node := map[string]string{}
	for _, m := range taskNode.FindAllStringSubmatch(log, -1) {
		node[m[1]] = m[2]
	}
	said := map[string][]string{}
	for _, m := range taskLine.FindAllStringSubmatch(log, -1) {
		if n, ok := node[m[1]]; ok && !strings.HasPrefix(m[2], "step ") && m[2] != "node "+n {
			said[n] = append(said[n], m[2])
		}
	}
	for n, why := range out {
		if lines := said[n]; len(lines) > 0 {
			if len(lines) > 3 {
				lines = lines[len(lines)-3:]
			}
			out[n] = why + ": " + strings.Join(lines, " / ")
		}
	}
	return out
}

// scancelStep returns a function that sends sig to the tasks of the step a daemon set runs
// (its id is the first line the tasks print), through slurmctld rather than to srun.
func scancelStep(d *DaemonSet, sig string) func() error {
	return func() error {
		m := stepLine.FindStringSubmatch(d.Log())
		if m == nil {
			return errors.New("step id not known")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c := exec.CommandContext(ctx, "scancel", "--signal="+sig, m[1])
		c.Env = stepEnv(nil)
		if b, err := c.CombinedOutput(); err != nil {
			return fmt.Errorf("scancel --signal=%s %s: %w: %s", sig, m[1], err, strings.TrimSpace(string(b)))
		}
		return nil
	}
}

// stepLine is the line the daemon script prints first: "TASK: step JOB.STEP".
var stepLine = regexp.MustCompile(`(?m)^\d+: step (\d+\.\d+)$`)

// killRanks signals the job step; termination signals end the step.
func (n *slurmNodes) killRanks(ctx context.Context, _ []Proc, sig syscall.Signal) error {
	step := n.job + "." + n.step
	cmd := exec.CommandContext(ctx, "scancel", "--signal="+strconv.Itoa(int(sig)), step)
	cmd.Env = stepEnv(nil)
	if b, err := cmd.CombinedOutput(); err != nil {
		if strings.Contains(string(b), "Invalid job id") {
			return nil // the step has ended already
		}
		return fmt.Errorf("launch: scancel --signal=%d %s: %w: %s", sig, step, err, strings.TrimSpace(string(b)))
	}
	if sig == syscall.SIGKILL || sig == syscall.SIGTERM {
		cmd := exec.CommandContext(ctx, "scancel", step)
		cmd.Env = stepEnv(nil)
		if b, err := cmd.CombinedOutput(); err != nil && !strings.Contains(string(b), "Invalid job id") {
			return fmt.Errorf("launch: scancel %s: %w: %s", step, err, strings.TrimSpace(string(b)))
		}
	}
	return nil
}

// stepJob is a job step found by its id: no launcher of ours, no hold.
type stepJob struct {
	id    string
	procs []Proc
	nodes *slurmNodes
	jobNodes
}

// attachStep finds a step's nodes (scontrol show step) and its tasks on each node (scontrol
// listpids J.S NODE: PID JOBID STEPID LOCALID GLOBALID).
func attachStep(ctx context.Context, fe *Frontend, ref string) (*stepJob, error) {
	job, step, ok := strings.Cut(ref, ".")
	if !ok || job == "" || step == "" {
		return nil, fmt.Errorf("launch: Slurm job step %q: want JOB.STEP", ref)
	}
	ctx, cancel := context.WithTimeout(ctx, fe.opts.Timeout)
	defer cancel()
	out, err := slurmOutput(ctx, "scontrol", "show", "step", ref)
	if err != nil {
		return nil, err
	}
	nodeList, err := stepNodeList(out, ref)
	if err != nil {
		return nil, fmt.Errorf("launch: Slurm job step %s: %w", ref, err)
	}
	out, err = slurmOutput(ctx, "scontrol", "show", "hostnames", nodeList)
	if err != nil {
		return nil, err
	}
	hosts := strings.Fields(out)
	// The nodes are asked in parallel; a node whose tasks are still starting (pid -1) is
	// asked again until they run or the time limit ends.
	perHost := make([][]Proc, len(hosts))
	errs := make([]error, len(hosts))
	var wg sync.WaitGroup
	for i, h := range hosts {
		wg.Go(func() { perHost[i], errs[i] = nodeTasks(ctx, ref, h) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	var procs []Proc
	for _, ps := range perHost {
		procs = append(procs, ps...)
	}
	sort.Slice(procs, func(i, k int) bool { return procs[i].Rank < procs[k].Rank })
	for i, p := range procs {
		if p.Rank != i {
			return nil, fmt.Errorf("launch: Slurm job step %s: ranks %v are not 0..%d", ref, ranksOf(procs), len(procs)-1)
		}
	}
	if len(procs) == 0 {
		return nil, fmt.Errorf("launch: Slurm job step %s: no tasks", ref)
	}
	sn := newSlurmNodes(fe, job, step, hosts)
	fe.progressf("launch: Slurm job step %s: %d ranks on %d node(s)", ref, len(procs), len(hosts))
	return &stepJob{id: "slurm " + ref, procs: procs, nodes: sn, jobNodes: jobNodes{sn}}, nil
}

// nodeTasks lists step ref's tasks on host, waiting while some have no pid yet.
func nodeTasks(ctx context.Context, ref, host string) ([]Proc, error) {
	for {
		out, err := slurmOutput(ctx, "scontrol", "listpids", ref, host)
		if err != nil {
			return nil, err
		}
		ps, starting, err := parseListPids(out, host)
		if err != nil {
			return nil, fmt.Errorf("launch: Slurm job step %s on %s: %w", ref, host, err)
		}
		if starting == 0 {
			return ps, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("launch: Slurm job step %s on %s: %d tasks still starting (no pid): %w", ref, host, starting, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func ranksOf(procs []Proc) []int {
	out := make([]int, len(procs))
	for i, p := range procs {
		out[i] = p.Rank
	}
	return out
}

// stepNodeList reads the node list (Slurm's compressed form, "node[1-4]") of step ref from
// `scontrol show step ref`, checking that the record is that step's.
func stepNodeList(out, ref string) (string, error) {
	var id, nodes string
	for _, f := range strings.Fields(out) {
		if v, ok := strings.CutPrefix(f, "StepId="); ok && id == "" {
			id = v
		}
		if v, ok := strings.CutPrefix(f, "NodeList="); ok && nodes == "" {
			nodes = v
		}
	}
	switch {
	case id == "":
		return "", fmt.Errorf("scontrol show step gives no step id (want %s)", ref)
	case id != ref:
		return "", fmt.Errorf("scontrol show step describes step %q, not %s", id, ref)
	case nodes == "" || nodes == "(null)":
		return "", fmt.Errorf("scontrol show step gives no node list (%q)", nodes)
	}
	return nodes, nil
}

// parseListPids reads `scontrol listpids J.S host` (columns PID JOBID STEPID LOCALID
// GLOBALID), keeping the task processes: those with a global task id ("-" marks the step's
// other processes). Tasks listed with pid -1 have not started yet: they are counted in
// starting, not returned. A malformed line or a rank listed twice is an error.
func parseListPids(out, host string) (procs []Proc, starting int, err error) {
	seen := map[int]bool{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for n := 1; sc.Scan(); n++ {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || f[0] == "PID" {
			continue
		}
		if len(f) != 5 {
			return nil, 0, fmt.Errorf("scontrol listpids line %d: %d columns, want 5: %q", n, len(f), sc.Text())
		}
		if f[4] == "-" {
			continue
		}
		pid, err1 := strconv.Atoi(f[0])
		rank, err2 := strconv.Atoi(f[4])
		if err1 != nil || err2 != nil || (pid <= 0 && pid != -1) || rank < 0 {
			return nil, 0, fmt.Errorf("scontrol listpids line %d: pid %q, global task id %q", n, f[0], f[4])
		}
		if seen[rank] {
			return nil, 0, fmt.Errorf("scontrol listpids line %d: task %d listed twice", n, rank)
		}
		seen[rank] = true
		if pid == -1 {
			starting++
			continue
		}
		procs = append(procs, Proc{Rank: rank, Host: host, Pid: pid})
	}
	return procs, starting, nil
}

func slurmOutput(ctx context.Context, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = stepEnv(nil)
	b, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("launch: %s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(b)))
	}
	return string(b), nil
}

// The Job methods of a step found by its id.

func (j *stepJob) ID() string                    { return j.id }
func (j *stepJob) Procs() []Proc                 { return append([]Proc(nil), j.procs...) }
func (j *stepJob) Hold() Hold                    { return HoldNone }
func (j *stepJob) Release(context.Context) error { return nil }
func (j *stepJob) Close() error                  { return nil }

func (j *stepJob) Kill(ctx context.Context, sig syscall.Signal) error {
	return j.nodes.killRanks(ctx, j.procs, sig)
}

// Wait polls until the step has left the queue.
func (j *stepJob) Wait(ctx context.Context) (cdti.ExitStatus, error) {
	step := j.nodes.job + "." + j.nodes.step
	for {
		cmd := exec.CommandContext(ctx, "squeue", "-h", "-s", "-o", "%i")
		cmd.Env = stepEnv(nil)
		out, err := cmd.Output()
		if err == nil && !containsLine(string(out), step) {
			return 0, nil
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("launch: wait for %s: %w", j.id, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func containsLine(s, line string) bool {
	for _, l := range strings.Split(s, "\n") {
		if strings.TrimSpace(l) == line {
			return true
		}
	}
	return false
}
