package launch

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hpcdap/hpcdap/launch/mpir"
	"github.com/hpcdap/hpcdap/rankset"
)

func init() { RegisterWLM("bgq", func() WLM { return bgqWLM{} }) }

// bgqWLM is Blue Gene/Q's control system, reached through runjob (launchers.md §3.4): the
// job's ranks run on compute nodes, and the tool's daemons on the job's I/O nodes, started by
// runjob itself through MPIR's tool daemon launch. hpcdap's agent runs there as a CIOS tool
// (see package agent): it relays CDTI to the compute nodes' toolctld sockets. Where no runjob
// is installed, the emulated system's (EmulatedRunjob, beside the hpcdap binary) stands in.
type bgqWLM struct{}

// EmulatedRunjob is the emulated BG/Q's runjob beside the hpcdap binary: the process that holds
// runjob's MPIR symbols (hpcdap bgq runjob runs under it).
const EmulatedRunjob = "hpcdap-runjob"

func (bgqWLM) Name() string { return "bgq" }

// Available: whether a runjob is there depends on the agent's binary (beside which the
// emulated one is), which Launch knows.
func (bgqWLM) Available() error { return nil }

// bgqRunjob finds the runjob a launcher name means: a path as given; "runjob" the one on PATH,
// else the emulated system's beside agentPath (the hpcdap binary; "" this executable), which
// EmulatedRunjob names alone. emulated says which it is.
func bgqRunjob(launcher, agentPath string) (path string, emulated bool, err error) {
	if strings.Contains(launcher, "/") {
		if _, err := os.Stat(launcher); err != nil {
			return "", false, fmt.Errorf("launch: launcher %s: %w", launcher, err)
		}
		return launcher, filepath.Base(launcher) == EmulatedRunjob, nil
	}
	if launcher != EmulatedRunjob {
		if p, err := exec.LookPath("runjob"); err == nil {
			return p, false, nil
		}
	}
	if agentPath == "" {
		if agentPath, err = os.Executable(); err != nil {
			return "", false, err
		}
	}
	p := filepath.Join(filepath.Dir(agentPath), EmulatedRunjob)
	if _, err := os.Stat(p); err != nil {
		return "", false, fmt.Errorf("launch: no runjob on PATH, and no emulated BG/Q runjob (%s): %w", p, err)
	}
	return p, true, nil
}

// TakesSubset reports whether a launcher starts the tool for a subset of the job's ranks
// (BG/Q's runjob, MPIR_subset_attach), so that a launch names the ranks to debug to it.
func TakesSubset(launcher string) bool { return launcherNames[filepath.Base(launcher)] == "bgq" }

// bgqArgs are runjob's arguments for spec's program: --exe, and --args for each argument
// (runjob splits them at white space, so an argument cannot hold any).
func bgqArgs(spec LaunchSpec) ([]string, error) {
	args := append([]string(nil), spec.Args...)
	exe := spec.Program
	if !filepath.IsAbs(exe) {
		dir := spec.Dir
		if dir == "" {
			dir, _ = os.Getwd()
		}
		exe = filepath.Join(dir, exe)
	}
	args = append(args, "--exe", exe)
	for _, a := range spec.ProgramArgs {
		if a == "" || strings.ContainsAny(a, " \t\n") {
			return nil, fmt.Errorf("launch: runjob: program argument %q: runjob's --args splits at white space", a)
		}
		args = append(args, "--args", a)
	}
	if spec.Dir != "" {
		args = append(args, "--cwd", spec.Dir)
	}
	return args, nil
}

// Launch starts runjob with hpcdap's agent as its tool (MPIR_executable_path, with
// MPIR_server_arguments telling it where this front end waits and where the session token
// is), and returns once every I/O node's agent has registered, the ranks held by the control
// system until Release continues runjob (which then starts the job).
func (bgqWLM) Launch(ctx context.Context, fe *Frontend, spec LaunchSpec, barrier bool) (Job, error) {
	if spec.Protocol != "" && spec.Protocol != ProtocolMPIR {
		return nil, fmt.Errorf("launch: runjob: protocol %q: BG/Q's runjob speaks MPIR only", spec.Protocol)
	}
	path, emulated, err := bgqRunjob(spec.Launcher, fe.opts.AgentPath)
	if err != nil {
		return nil, err
	}
	if emulated {
		fe.progressf("launch: no runjob on PATH: the emulated BG/Q's (%s)", path)
	}
	args, err := bgqArgs(spec)
	if err != nil {
		return nil, err
	}
	tool, err := newBGQTool(fe, emulated, spec.Subset)
	if err != nil {
		return nil, err
	}
	defer tool.rv.close()
	argv := append([]string{path}, args...)
	mj, err := launchMPIRWith(ctx, fe, "bgq", argv, spec, mpir.Options{Daemons: tool.daemons})
	if err != nil {
		os.Remove(tool.tokenFile)
		return nil, err
	}
	j := &bgqJob{mpirJob: mj, tokenFile: tool.tokenFile}
	j.hold = HoldByAgent
	j.jobNodes = jobNodes{bgqNodes{procs: mj.procs}}
	if j.agents, err = waitCIOSAgents(ctx, fe, tool.rv, mj.id, mj.procs, tool.token, spec.Subset, spec.Output); err != nil {
		j.Kill(ctx, syscall.SIGKILL)
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

// Attach attaches to a running runjob of this host by its pid: the tool arrays written and
// MPIR_being_debugged set, runjob (which polls it every second) starts the agents on the job's
// I/O nodes once it runs again; the job runs on meanwhile. A runjob that another tool traces
// already is joined as a further tool of its job, through start_tool (attachByStartTool).
func (bgqWLM) Attach(ctx context.Context, fe *Frontend, ref JobRef) (Job, error) {
	if ref.LauncherPid == 0 || ref.Nspace != "" || ref.SlurmJob != "" {
		return nil, errors.New("launch: a runjob is attached by its pid only")
	}
	exe, err := os.Readlink("/proc/" + strconv.Itoa(ref.LauncherPid) + "/exe")
	if err != nil {
		return nil, fmt.Errorf("launch: attach to runjob pid %d: %w", ref.LauncherPid, err)
	}
	emulated := filepath.Base(exe) == EmulatedRunjob
	if tracer := tracedBy(ref.LauncherPid); tracer != 0 {
		return attachByStartTool(ctx, fe, ref.LauncherPid, tracer, exe, emulated)
	}
	tool, err := newBGQTool(fe, emulated, "")
	if err != nil {
		return nil, err
	}
	defer tool.rv.close()
	mj, err := attachMPIRWith(ctx, fe, ref.LauncherPid, mpir.Options{Daemons: tool.daemons})
	if err != nil {
		os.Remove(tool.tokenFile)
		return nil, err
	}
	j := &bgqJob{mpirJob: mj, tokenFile: tool.tokenFile}
	j.jobNodes = jobNodes{bgqNodes{procs: mj.procs}}
	if j.agents, err = waitCIOSAgents(ctx, fe, tool.rv, mj.id, mj.procs, tool.token, "", ""); err != nil {
		j.Close()
		return nil, err
	}
	return j, nil
}

// bgqTool is what runjob is given to start hpcdap's agent as its tool: the session token in a
// file of the user's (jobctld passes the tool no environment) named in the agent's arguments,
// and the listener the agents register with.
type bgqTool struct {
	token, tokenFile string
	rv               *rendezvous
	daemons          *mpir.ToolDaemons
}

func newBGQTool(fe *Frontend, emulated bool, subset string) (*bgqTool, error) {
	t := &bgqTool{token: newToken()}
	var err error
	t.tokenFile, err = fe.workFile("bgq-token-*")
	if err == nil {
		err = os.WriteFile(t.tokenFile, []byte(t.token+"\n"), 0o600)
	}
	if err != nil {
		return nil, fmt.Errorf("launch: runjob: session token file: %w", err)
	}
	host := "127.0.0.1" // the emulated I/O nodes are this host
	if !emulated {
		if host, err = fe.advertiseHost(nil); err != nil {
			os.Remove(t.tokenFile)
			return nil, err
		}
	}
	if t.rv, err = listenRendezvous(t.token); err != nil {
		os.Remove(t.tokenFile)
		return nil, err
	}
	t.daemons = &mpir.ToolDaemons{Path: fe.opts.AgentPath, Subset: subset,
		Args: []string{"agent", "--connect", net.JoinHostPort(host, strconv.Itoa(t.rv.port())), "--token-file", t.tokenFile}}
	return t, nil
}

// bgqJob is a job runjob runs: an MPIR job whose node agents runjob started, one per I/O node.
type bgqJob struct {
	*mpirJob
	tokenFile string
	agents    []AgentEndpoint
}

// nodeAgents are the CIOS agents runjob started: they end when the debugger's connections
// to them close (they give the ranks back first).
func (j *bgqJob) nodeAgents() []AgentEndpoint { return j.agents }

// Kill ends runjob with sig, which ends the job with it (runjob passes a signal on to the
// job's ranks), and waits a little for it to go.
func (j *bgqJob) Kill(ctx context.Context, sig syscall.Signal) error {
	if j.exited.Load() {
		return nil
	}
	if err := syscall.Kill(j.la.pid, sig); err != nil && err != syscall.ESRCH {
		return fmt.Errorf("launch: kill %s: %w", j.id, err)
	}
	if err := j.Release(ctx); err != nil && !processEnded(j.la.pid) {
		return err
	}
	return nil
}

// Close lets the job go and removes the session token's file.
func (j *bgqJob) Close() error {
	os.Remove(j.tokenFile)
	return j.mpirJob.Close()
}

// waitCIOSAgents waits for the agent of each I/O node of the job that serves a rank of subset
// ("": every I/O node) to register, and matches it to its I/O node by the ranks it serves (on
// BG/Q an I/O node's name is runjob's, which the agent does not learn).
func waitCIOSAgents(ctx context.Context, fe *Frontend, rv *rendezvous, id string, procs []Proc, token, subset, output string) ([]AgentEndpoint, error) {
	set, err := rankset.Parse(subset, len(procs))
	if err != nil {
		return nil, fmt.Errorf("launch: %s: rank subset %q: %w", id, subset, err)
	}
	byHost := map[string][]int{}
	wanted := map[string]bool{}
	for _, p := range procs {
		byHost[p.Host] = append(byHost[p.Host], p.Rank)
		wanted[p.Host] = wanted[p.Host] || subset == "" || set.Contains(p.Rank)
	}
	for h := range byHost {
		if !wanted[h] {
			delete(byHost, h) // runjob starts no tool there
		}
	}
	hosts := make([]string, 0, len(byHost))
	for h := range byHost {
		sort.Ints(byHost[h])
		hosts = append(hosts, h)
	}
	sort.Strings(hosts)
	got := map[string]AgentEndpoint{}
	deadline := time.NewTimer(fe.opts.Timeout)
	defer deadline.Stop()
	for len(got) < len(hosts) {
		select {
		case reg := <-rv.regs:
			var ranks []int
			for _, r := range reg.Ranks {
				ranks = append(ranks, r.Rank)
			}
			sort.Ints(ranks)
			host := ""
			for _, h := range hosts {
				if slices.Equal(byHost[h], ranks) {
					host = h
				}
			}
			if host == "" {
				fe.logf("launch: %s: an agent registered from %s for ranks %v, which no I/O node of the job runs", id, reg.Node, ranks)
				continue
			}
			got[host] = AgentEndpoint{Host: host, Addr: reg.Address, Token: token, Pid: reg.Pid, Ranks: ranks, Owned: true,
				ToolID: reg.ToolID, JobID: reg.JobID}
			fe.progressf("launch: %s: the agent of I/O node %s registered (%d of %d)", id, host, len(got), len(hosts))
		case <-deadline.C:
			return nil, fmt.Errorf("launch: %s: %d of %d I/O node agents registered within %v%s", id, len(got), len(hosts),
				fe.opts.Timeout, outputTail(output))
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	out := make([]AgentEndpoint, 0, len(hosts))
	for _, h := range hosts {
		ep := got[h]
		if subset != "" {
			var extra []int
			ep.Ranks, extra = subsetRanks(procs, h, set)
			if len(extra) > 0 {
				fe.progressf("launch: %s: ranks %v of I/O node %s are outside the subset %q, yet held with it: a tool attaches one rank of a compute node, or all of them",
					id, extra, h, subset)
			}
		}
		out = append(out, ep)
	}
	return out, nil
}

// subsetRanks are the ranks of I/O node host that a session of the rank subset set holds,
// ascending: on each compute node of the I/O node (a Proc's Pid on BG/Q), the subset's ranks
// when they are one or all of the node's ranks, else every rank of the node, the others
// returned as extra. toolctld takes one Attach per tool and socket (cdti-v6.md §9.1): one rank
// (RankInHeader) or every rank of the compute node (RanksInNode). The other ranks of the I/O
// node run untouched by the session.
func subsetRanks(procs []Proc, host string, set rankset.Set) (held, extra []int) {
	byNode := map[int][]int{}
	for _, p := range procs {
		if p.Host == host {
			byNode[p.Pid] = append(byNode[p.Pid], p.Rank)
		}
	}
	for _, ranks := range byNode {
		var in []int
		for _, r := range ranks {
			if set.Contains(r) {
				in = append(in, r)
			}
		}
		switch {
		case len(in) <= 1 || len(in) == len(ranks):
			held = append(held, in...)
		default:
			held = append(held, ranks...)
			for _, r := range ranks {
				if !set.Contains(r) {
					extra = append(extra, r)
				}
			}
		}
	}
	sort.Ints(held)
	sort.Ints(extra)
	return held, extra
}

// bgqNodes are a BG/Q job's I/O nodes. Nothing is started, shipped or run on them but the
// tool runjob starts; the ranks end with runjob.
type bgqNodes struct{ procs []Proc }

var errBGQNodes = errors.New("launch: on BG/Q, the I/O nodes run only the tool runjob starts")

func (n bgqNodes) hosts() []string {
	var out []string
	for _, p := range n.procs {
		if !slices.Contains(out, p.Host) {
			out = append(out, p.Host)
		}
	}
	return out
}

func (bgqNodes) stage(context.Context, string) (Staging, error) { return nil, errBGQNodes }

func (bgqNodes) exec(_ context.Context, hosts []string, _ []string) []NodeResult {
	out := make([]NodeResult, len(hosts))
	for i, h := range hosts {
		out[i] = NodeResult{Host: h, Err: errBGQNodes}
	}
	return out
}

func (bgqNodes) ship(context.Context, []string, string, string) error { return errBGQNodes }

func (bgqNodes) start(context.Context, []string, func(string) []string, []string) (*DaemonSet, error) {
	return nil, errBGQNodes
}

// killRanks has nothing to do: the ranks end with runjob, which Kill ends next.
func (bgqNodes) killRanks(context.Context, []Proc, syscall.Signal) error { return nil }
