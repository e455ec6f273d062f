package adapter

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hpcdap/hpcdap/launch"
)

// A Launcher starts a job (or finds a running one) and the agents that serve its ranks, and
// reports where everything is. The local launcher is one implementation; launchers that go
// through mpirun, hydra or Slurm supply the same table from MPIR proctables or the workload
// manager.
type Launcher interface {
	// Start brings up the job's agents and returns the placement once every agent listens.
	// progress, if not nil, is called as agents come up.
	Start(ctx context.Context, progress func(done, total int)) (*Placement, error)
}

// Placement is the rank → (node agent, pid, host) table of a job.
type Placement struct {
	Size  int // ranks in the job (focus sets and "$max" are relative to it)
	Nodes []*NodeEndpoint
}

// NodeEndpoint is one agent and the ranks it serves.
type NodeEndpoint struct {
	Addr  string // host:port serving CDTI and the management plane
	Token string // the session token the agent requires
	Host  string // node name, for display (the agent's own name wins once connected)
	Ranks []int  // ranks served, known before connecting (the agent's list is authoritative)
	// Output, when not nil, carries the ranks' combined stdout and stderr (an agent without
	// per-rank output forwarding writes it to its own stderr).
	Output io.Reader
	// Agent is the agent process when the launcher started it (nil otherwise).
	Agent *AgentProcess
	// Owned: the agent belongs to the job layer (it also follows the job's launcher) and ends
	// with the job; the adapter closes its connections but never asks it to shut down.
	Owned bool
}

// AgentProcess is an agent the front end started as a child process.
type AgentProcess struct {
	Cmd     *exec.Cmd
	LogPath string
	done    chan struct{}
	err     error
}

// Wait waits up to d for the agent to exit; it reports whether it did.
func (a *AgentProcess) Wait(d time.Duration) bool {
	select {
	case <-a.done:
		return true
	case <-time.After(d):
		return false
	}
}

// Kill ends the agent process (SIGKILL) and waits for it.
func (a *AgentProcess) Kill() {
	if a.Cmd.Process != nil {
		a.Cmd.Process.Kill()
	}
	<-a.done
}

// logTail returns the last lines of the agent's log, for error messages.
func (a *AgentProcess) logTail() string {
	b, err := os.ReadFile(a.LogPath)
	if err != nil || len(b) == 0 {
		return ""
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 5 {
		lines = lines[len(lines)-5:]
	}
	return strings.Join(lines, "\n")
}

// newToken returns a random session token.
func newToken() string {
	var b [24]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand never fails on Linux
	}
	return hex.EncodeToString(b[:])
}

// agentSpec describes one agent child to start.
type agentSpec struct {
	exe    string   // the hpcdap binary
	args   []string // after "agent"
	env    []string // without the token
	dir    string
	noASLR bool
	logDir string
	ranks  []int
}

// startAgent starts `hpcdap agent --listen 127.0.0.1:0 ...` and waits for "listening on".
func startAgent(ctx context.Context, spec agentSpec) (*NodeEndpoint, error) {
	token := newToken()
	logf, err := os.CreateTemp(spec.logDir, "agent-*.log")
	if err != nil {
		return nil, fmt.Errorf("agent log: %w", err)
	}
	logPath := logf.Name()
	logf.Close()
	args := append([]string{"agent", "--listen", "127.0.0.1:0", "--log", logPath}, spec.args...)
	cmd := exec.Command(spec.exe, args...)
	cmd.Env = append(append([]string(nil), spec.env...), "HPCDAP_TOKEN="+token)
	cmd.Dir = spec.dir
	// The agent ends with the front end: it then detaches from every process, removing the
	// traps, as DESIGN decision 3 asks of a dropped tool.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM, Setpgid: true}
	// Plain pipes rather than exec's: Wait must not close the read ends while the ranks'
	// output (which the ranks write there too) is still being forwarded.
	stdout, stdoutW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	stderr, stderrW, err := os.Pipe()
	if err != nil {
		stdout.Close()
		stdoutW.Close()
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = stdoutW, stderrW
	err = startMaybeNoASLR(cmd, spec.noASLR)
	stdoutW.Close()
	stderrW.Close()
	if err != nil {
		stdout.Close()
		stderr.Close()
		return nil, fmt.Errorf("start agent %s: %w", spec.exe, err)
	}
	ap := &AgentProcess{Cmd: cmd, LogPath: logPath, done: make(chan struct{})}
	lines := make(chan string, 1)
	go func() {
		defer stdout.Close()
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default:
			}
		}
		close(lines)
	}()
	go func() {
		ap.err = cmd.Wait()
		close(ap.done)
	}()
	fail := func(err error) (*NodeEndpoint, error) {
		cmd.Process.Kill()
		<-ap.done
		stderr.Close()
		if tail := ap.logTail(); tail != "" {
			err = fmt.Errorf("%w\nagent log:\n%s", err, tail)
		}
		return nil, err
	}
	timer := time.NewTimer(60 * time.Second)
	defer timer.Stop()
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				<-ap.done
				return fail(fmt.Errorf("agent exited before listening: %v", ap.err))
			}
			if addr, found := strings.CutPrefix(l, "listening on "); found {
				return &NodeEndpoint{Addr: strings.TrimSpace(addr), Token: token, Host: "localhost",
					Ranks: spec.ranks, Output: stderr, Agent: ap}, nil
			}
		case <-ctx.Done():
			return fail(ctx.Err())
		case <-timer.C:
			return fail(errors.New("agent did not report its address within 60 s"))
		}
	}
}

// startMaybeNoASLR starts cmd, with address-space randomisation disabled for it and its
// children when asked.
func startMaybeNoASLR(cmd *exec.Cmd, noASLR bool) error {
	if !noASLR {
		return cmd.Start()
	}
	return launch.StartNoASLR(cmd)
}

// localLauncher starts np ranks of a program on this host through local agents in spawn
// mode, one agent per 64 ranks (an agent serves at most cdti.MaxRanksPerNode ranks).
type localLauncher struct {
	agentExe string
	plan     *launchPlan
	logDir   string
}

// ranksPerAgent is how many ranks one local agent spawns.
const ranksPerAgent = 64

func (l *localLauncher) Start(ctx context.Context, progress func(done, total int)) (*Placement, error) {
	p := l.plan
	groups := (p.np + ranksPerAgent - 1) / ranksPerAgent
	eps := make([]*NodeEndpoint, groups)
	errs := make([]error, groups)
	var wg sync.WaitGroup
	var mu sync.Mutex
	done := 0
	for g := range groups {
		first := g * ranksPerAgent
		count := min(ranksPerAgent, p.np-first)
		ranks := make([]int, count)
		for i := range ranks {
			ranks[i] = first + i
		}
		args := []string{"--np", strconv.Itoa(count), "--first-rank", strconv.Itoa(first),
			"--job-size", strconv.Itoa(p.np), "--capture-output", "--", p.program}
		args = append(emulatorAgentArgs(p), args...)
		args = append(args, p.args...)
		wg.Go(func() {
			eps[g], errs[g] = startAgent(ctx, agentSpec{exe: l.agentExe, args: args, env: p.env, dir: p.cwd,
				noASLR: p.noASLR, logDir: l.logDir, ranks: ranks})
			mu.Lock()
			done++
			if progress != nil {
				progress(done, groups)
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			for _, ep := range eps {
				if ep != nil && ep.Agent != nil {
					ep.Agent.Kill()
				}
			}
			return nil, err
		}
	}
	return &Placement{Size: p.np, Nodes: eps}, nil
}

// pidLauncher attaches to running processes of this host (rank → pid) through local agents in
// attach mode.
type pidLauncher struct {
	agentExe string
	pids     map[int]int
	logDir   string
}

func (l *pidLauncher) Start(ctx context.Context, progress func(done, total int)) (*Placement, error) {
	ranks := make([]int, 0, len(l.pids))
	for r := range l.pids {
		ranks = append(ranks, r)
	}
	sort.Ints(ranks)
	size := ranks[len(ranks)-1] + 1
	var eps []*NodeEndpoint
	for i := 0; i < len(ranks); i += ranksPerAgent {
		group := ranks[i:min(i+ranksPerAgent, len(ranks))]
		var pairs []string
		for _, r := range group {
			pairs = append(pairs, fmt.Sprintf("%d=%d", r, l.pids[r]))
		}
		ep, err := startAgent(ctx, agentSpec{exe: l.agentExe, args: []string{"--attach", strings.Join(pairs, ",")},
			env: mergeEnv(os.Environ(), nil), dir: "/", logDir: l.logDir, ranks: group})
		if err != nil {
			for _, e := range eps {
				e.Agent.Kill()
			}
			return nil, err
		}
		eps = append(eps, ep)
		if progress != nil {
			progress(len(eps), (len(ranks)+ranksPerAgent-1)/ranksPerAgent)
		}
	}
	return &Placement{Size: size, Nodes: eps}, nil
}

// defaultAgentExe is the hpcdap binary that serves as the agent: this very executable.
func defaultAgentExe() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("find the hpcdap executable for the agent: %w", err)
	}
	return filepath.EvalSymlinks(exe)
}
