package launch

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Without a launcher, the local workload manager's agents are the job: LocalSpawn has them
// spawn a program's ranks, LocalAttach has them attach to running processes of this host.
// Each agent is a child of this process (AgentEndpoint.Agent) and serves at most
// RanksPerAgent ranks.

// RanksPerAgent is how many ranks one local agent serves (an agent serves at most
// cdti.MaxRanksPerNode ranks).
const RanksPerAgent = 64

// localAgentWait bounds how long a local agent may take to say where it listens.
const localAgentWait = 60 * time.Second

// LocalSpawn starts NP ranks of a program on this host through local agents in spawn mode,
// the agents capturing the ranks' output.
type LocalSpawn struct {
	AgentPath string   // the hpcdap binary
	LogDir    string   // where the agents' logs go
	NP        int      // ranks
	Program   string   // absolute path
	Args      []string // the program's arguments
	AgentArgs []string // agent options before the spawn ones (an emulated back end)
	Env       []string // the ranks' whole environment ("K=V")
	Dir       string   // their working directory
	NoASLR    bool     // no address-space randomisation for the agents and the ranks
	// PerAgent is how many ranks each agent serves (0: RanksPerAgent, the most), so that a
	// job on one host can have as many agents as a job on many nodes.
	PerAgent int
}

// Start brings the agents up, concurrently, and returns them once every one listens; progress,
// if not nil, is called as each comes up. On error no agent is left.
func (l *LocalSpawn) Start(ctx context.Context, progress func(done, total int)) (*Agents, error) {
	per := l.PerAgent
	if per == 0 {
		per = RanksPerAgent
	}
	if per < 0 || per > RanksPerAgent {
		return nil, fmt.Errorf("launch: local spawn: %d ranks per agent (between 1 and %d)", per, RanksPerAgent)
	}
	groups := (l.NP + per - 1) / per
	token := newToken() // one session token for the job's agents
	eps := make([]AgentEndpoint, groups)
	errs := make([]error, groups)
	var wg sync.WaitGroup
	var mu sync.Mutex
	done := 0
	for g := range groups {
		first := g * per
		count := min(per, l.NP-first)
		ranks := make([]int, count)
		for i := range ranks {
			ranks[i] = first + i
		}
		mode := append(append([]string(nil), l.AgentArgs...), "--np", strconv.Itoa(count), "--first-rank", strconv.Itoa(first),
			"--job-size", strconv.Itoa(l.NP), "--capture-output", "--", l.Program)
		mode = append(mode, l.Args...)
		wg.Go(func() {
			eps[g], errs[g] = startLocalAgent(ctx, l.AgentPath, l.LogDir, mode, l.Env, l.Dir, l.NoASLR, ranks, token)
			mu.Lock()
			done++
			if progress != nil {
				progress(done, groups)
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	g := &Agents{Size: l.NP, Endpoints: eps}
	for _, err := range errs {
		if err != nil {
			g.Kill()
			return nil, err
		}
	}
	return g, nil
}

// LocalAttach attaches to running processes of this host through local agents in attach
// mode.
type LocalAttach struct {
	AgentPath string      // the hpcdap binary
	LogDir    string      // where the agents' logs go
	Pids      map[int]int // rank → pid
}

// Start brings the agents up, one after the other, and returns them once every one listens;
// progress, if not nil, is called as each comes up. On error no agent is left.
func (l *LocalAttach) Start(ctx context.Context, progress func(done, total int)) (*Agents, error) {
	if len(l.Pids) == 0 {
		return nil, fmt.Errorf("launch: attach: no process")
	}
	ranks := make([]int, 0, len(l.Pids))
	for r := range l.Pids {
		ranks = append(ranks, r)
	}
	sort.Ints(ranks)
	g := &Agents{Size: ranks[len(ranks)-1] + 1}
	total := (len(ranks) + RanksPerAgent - 1) / RanksPerAgent
	token := newToken() // one session token for the job's agents
	for i := 0; i < len(ranks); i += RanksPerAgent {
		group := ranks[i:min(i+RanksPerAgent, len(ranks))]
		var pairs []string
		for _, r := range group {
			pairs = append(pairs, fmt.Sprintf("%d=%d", r, l.Pids[r]))
		}
		ep, err := startLocalAgent(ctx, l.AgentPath, l.LogDir, []string{"--attach", strings.Join(pairs, ",")},
			os.Environ(), "/", false, group, token)
		if err != nil {
			g.Kill()
			return nil, err
		}
		g.Endpoints = append(g.Endpoints, ep)
		if progress != nil {
			progress(len(g.Endpoints), total)
		}
	}
	return g, nil
}

// startLocalAgent starts one local agent with mode and describes it as the endpoint of ranks.
func startLocalAgent(ctx context.Context, exe, logDir string, mode, env []string, dir string, noASLR bool, ranks []int, token string) (AgentEndpoint, error) {
	logf, err := os.CreateTemp(logDir, "agent-*.log")
	if err != nil {
		return AgentEndpoint{}, fmt.Errorf("launch: agent log: %w", err)
	}
	logPath := logf.Name()
	logf.Close()
	a, err := startAgent(ctx, agentStart{name: "agent", exe: exe, mode: mode, env: env, dir: dir, noASLR: noASLR,
		logPath: logPath, output: true, logLines: 5, limit: localAgentWait, token: token})
	if err != nil {
		return AgentEndpoint{}, err
	}
	return AgentEndpoint{Host: "localhost", Addr: a.Addr, Token: a.Token, Pid: a.Cmd.Process.Pid, Ranks: ranks,
		Agent: a, Output: a.output}, nil
}

// Kill ends the agent processes this front end started as its children (SIGKILL).
func (g *Agents) Kill() {
	for _, ep := range g.Endpoints {
		if ep.Agent != nil {
			ep.Agent.Kill()
		}
	}
}
