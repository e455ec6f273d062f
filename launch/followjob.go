package launch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hpcdap/hpcdap/cdti"
	"github.com/hpcdap/hpcdap/mgmt"
	"github.com/sourcegraph/jsonrpc2"
)

// A followJob is a job whose ranks are found by following its launcher's forks and execs
// (MPICH hydra, whose Debian build publishes no MPIR symbols): the launcher runs under a local
// agent started with --follow-exec, which holds every process that execs the program right
// after that exec, numbers it by PMI_RANK and serves it. That agent is also the job's node
// agent (StartAgents starts no other): a rank it holds starts when a tool takes control of
// it, or when its last tool leaves without doing so.
type followJob struct {
	fe    *Frontend
	id    string
	la    *launcherAgent
	mgmt  *jsonrpc2.Conn
	procs []Proc
	local *localNodes
	jobNodes

	released  atomic.Bool
	exited    atomic.Bool
	status    atomic.Int32 // the launcher's wait status once exited
	closeOnce sync.Once
}

// followRank is a rank as the agent's management plane describes it (package agent's
// RankInfo, read here from the wire).
type followRank struct {
	Rank       int    `json:"rank"`
	Pid        int    `json:"pid"`
	Executable string `json:"executable"`
	State      string `json:"state"`
	JobSize    int    `json:"jobSize"`
}

// followLauncher is the agent's description of the launcher (package agent's LauncherInfo).
type followLauncher struct {
	Pid        int  `json:"pid"`
	ExitStatus *int `json:"exitStatus"`
	Ranks      int  `json:"ranks"`
}

// rankWatch collects the "rank" notifications of ranks.subscribe.
type rankWatch struct {
	mu    sync.Mutex
	ranks map[int]followRank
	bad   []string // announcements that make no sense (a rank announced twice with other pids)
	news  chan struct{}
}

func (w *rankWatch) Handle(ctx context.Context, c *jsonrpc2.Conn, req *jsonrpc2.Request) {
	if !req.Notif {
		c.ReplyWithError(ctx, req.ID, &jsonrpc2.Error{Code: jsonrpc2.CodeMethodNotFound, Message: "the front end serves no calls"})
		return
	}
	if req.Method != "rank" || req.Params == nil {
		return
	}
	var r followRank
	if err := json.Unmarshal(*req.Params, &r); err != nil {
		return
	}
	w.mu.Lock()
	if old, dup := w.ranks[r.Rank]; dup && old.Pid != r.Pid {
		w.bad = append(w.bad, fmt.Sprintf("rank %d announced as pid %d and pid %d", r.Rank, old.Pid, r.Pid))
	} else {
		w.ranks[r.Rank] = r
	}
	w.mu.Unlock()
	select {
	case w.news <- struct{}{}:
	default:
	}
}

// launchFollow starts argv under an agent that follows its forks for processes that exec
// spec.Program, and waits until it has caught the whole job (as many ranks as PMI_SIZE says).
// On any failure the launcher and what it started are ended, and the error names the ranks
// caught and the ones missing.
func launchFollow(ctx context.Context, fe *Frontend, argv []string, spec LaunchSpec) (*followJob, error) {
	ctx, cancel := context.WithTimeout(ctx, fe.opts.Timeout)
	defer cancel()
	mode := append([]string{"--output", spec.Output, "--follow-exec", spec.Program, "--"}, argv...)
	la, err := startAgentProcess(ctx, fe, mode, launcherStart{env: spec.Env, unset: spec.Unset, dir: spec.Dir, noASLR: spec.NoASLR}, 0)
	if err != nil {
		return nil, err
	}
	j := &followJob{fe: fe, la: la, id: fmt.Sprintf("%s pid %d", filepath.Base(argv[0]), la.pid)}
	fail := func(phase string, err error) (*followJob, error) {
		j.shutdown(true)
		return nil, fmt.Errorf("launch: %s: %s: %w%s%s", j.id, phase, err, outputTail(spec.Output), la.logTail(8))
	}
	w := &rankWatch{ranks: map[int]followRank{}, news: make(chan struct{}, 1)}
	// A connection that fails because the agent has ended says so (its log, quoted, tells
	// what it had caught).
	agentEnded := func(err error) error {
		select {
		case <-la.done:
			return fmt.Errorf("the agent following it ended (%v) before the front end reached it: %w", la.Cmd.ProcessState, err)
		case <-time.After(2 * time.Second):
			return err
		}
	}
	if j.mgmt, err = mgmt.Dial(ctx, la.Addr, la.Token, "hpcdap-launch", w, nil); err != nil {
		return fail("connect to the following agent", agentEnded(err))
	}
	if err := j.mgmt.Call(ctx, "ranks.subscribe", struct{}{}, nil); err != nil {
		return fail("ranks.subscribe", agentEnded(err))
	}
	t0 := time.Now()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		w.mu.Lock()
		caught := make([]followRank, 0, len(w.ranks))
		for _, r := range w.ranks {
			caught = append(caught, r)
		}
		bad := strings.Join(w.bad, "; ")
		w.mu.Unlock()
		sort.Slice(caught, func(a, b int) bool { return caught[a].Rank < caught[b].Rank })
		if bad != "" {
			return fail("following the launcher", errors.New(bad))
		}
		size, err := jobSize(caught)
		if err != nil {
			return fail("following the launcher", err)
		}
		if size > 0 && len(caught) == size {
			for _, r := range caught {
				if r.Rank >= size {
					return fail("following the launcher", fmt.Errorf("rank %d (pid %d) in a job of %d ranks", r.Rank, r.Pid, size))
				}
				j.procs = append(j.procs, Proc{Rank: r.Rank, Host: "", Pid: r.Pid, Executable: r.Executable})
			}
			break
		}
		select {
		case <-w.news:
		case <-tick.C:
			// A launcher that ends (bad arguments, a program it cannot start) catches no more.
			var li followLauncher
			if err := j.mgmt.Call(ctx, "launcher", nil, &li); err == nil && li.ExitStatus != nil {
				return fail("following the launcher", fmt.Errorf("the launcher ended (%s) with %s",
					cdti.ExitStatus(*li.ExitStatus), caughtSummary(caught, size)))
			}
		case <-la.done:
			// The agent that follows the launcher is gone: nothing more will be caught.
			return fail("following the launcher", fmt.Errorf("the agent following it ended (%v) with %s",
				la.Cmd.ProcessState, caughtSummary(caught, size)))
		case <-ctx.Done():
			return fail("following the launcher", fmt.Errorf("%s within %v", caughtSummary(caught, size), fe.opts.Timeout))
		}
	}
	ln, err := newLocalNodes(fe)
	if err != nil {
		return fail("host name", err)
	}
	j.local, j.jobNodes = ln, jobNodes{ln}
	for i := range j.procs {
		j.procs[i].Host = ln.host
	}
	fe.progressf("launch: %s: %d ranks caught at their exec in %v", j.id, len(j.procs), time.Since(t0))
	return j, nil
}

// jobSize is the job size the caught ranks agree on (0 while none says).
func jobSize(caught []followRank) (int, error) {
	size := 0
	for _, r := range caught {
		switch {
		case r.JobSize == 0:
		case size == 0:
			size = r.JobSize
		case r.JobSize != size:
			return 0, fmt.Errorf("ranks disagree on the job size (%d and %d)", size, r.JobSize)
		}
	}
	return size, nil
}

// caughtSummary says how many ranks were caught and which are missing.
func caughtSummary(caught []followRank, size int) string {
	if size == 0 {
		return fmt.Sprintf("%d ranks caught (job size not known yet)", len(caught))
	}
	have := map[int]bool{}
	for _, r := range caught {
		have[r.Rank] = true
	}
	var missing []string
	for r := 0; r < size; r++ {
		if !have[r] {
			missing = append(missing, fmt.Sprint(r))
		}
	}
	return fmt.Sprintf("%d of %d ranks caught at their exec (missing: %s)", len(caught), size, strings.Join(missing, ", "))
}

// The Job methods of a followed job.

func (j *followJob) ID() string       { return j.id }
func (j *followJob) Procs() []Proc    { return append([]Proc(nil), j.procs...) }
func (j *followJob) Hold() Hold       { return HoldByAgent }
func (j *followJob) LauncherPid() int { return j.la.pid }

// nodeAgents is the following agent as the job's only node agent.
func (j *followJob) nodeAgents() []AgentEndpoint {
	ep := AgentEndpoint{Host: j.local.host, Addr: j.la.Addr, Token: j.la.Token, Pid: j.la.Cmd.Process.Pid, Owned: true}
	for _, p := range j.procs {
		ep.Ranks = append(ep.Ranks, p.Rank)
	}
	return []AgentEndpoint{ep}
}

// releaseToolID is the CDTI tool id Release uses, apart from a debugger's.
const releaseToolID = 7

// Release starts the ranks no tool has taken control of: attaching to a held rank and leaving
// it again without taking control starts it (a rank a debugger controls is not touched).
func (j *followJob) Release(ctx context.Context) error {
	if j.released.Load() {
		return nil
	}
	c, err := cdti.Dial(ctx, "tcp", j.la.Addr, cdti.ClientOptions{ToolID: releaseToolID, Token: []byte(j.la.Token), Timeout: j.fe.opts.Timeout})
	if err != nil {
		return fmt.Errorf("launch: release %s: %w", j.id, err)
	}
	defer c.Close()
	var errs []error
	for _, p := range j.procs {
		if _, err := c.Attach(ctx, uint32(p.Rank), cdti.RankInHeader, cdti.NewTag("hpcdap-launch"), 0); err != nil {
			if !processEnded(p.Pid) {
				errs = append(errs, fmt.Errorf("rank %d (pid %d): attach: %w", p.Rank, p.Pid, err))
			}
			continue
		}
		if _, err := c.Detach(ctx, uint32(p.Rank), cdti.RankInHeader); err != nil && !processEnded(p.Pid) {
			errs = append(errs, fmt.Errorf("rank %d (pid %d): detach: %w", p.Rank, p.Pid, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("launch: release %s: %w", j.id, err)
	}
	j.released.Store(true)
	return nil
}

// Kill signals the ranks and ends the launcher. Ranks still held at their exec, which have run
// none of their code, are sent SIGKILL whatever sig is: they could not act on another signal
// before a tool starts them.
func (j *followJob) Kill(ctx context.Context, sig syscall.Signal) error {
	if j.exited.Load() {
		return nil
	}
	if !j.released.Load() {
		sig = syscall.SIGKILL
	}
	err := j.ops.killRanks(ctx, j.procs, sig)
	if lerr := endLauncher(ctx, j.la.pid, launcherGrace(""), j.launcherExited); lerr != nil && err == nil {
		err = lerr
	}
	return err
}

// launcherExited asks the agent whether the launcher has ended, and records its status.
func (j *followJob) launcherExited() bool {
	if j.exited.Load() {
		return true
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var li followLauncher
	if err := j.mgmt.Call(ctx, "launcher", nil, &li); err != nil || li.ExitStatus == nil {
		return false
	}
	j.status.Store(int32(*li.ExitStatus))
	j.exited.Store(true)
	return true
}

// Wait waits for the launcher to exit; the agent that follows it reports its status.
func (j *followJob) Wait(ctx context.Context) (cdti.ExitStatus, error) {
	for !j.launcherExited() {
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("launch: wait for %s: %w", j.id, ctx.Err())
		case <-j.mgmt.DisconnectNotify():
			return 0, fmt.Errorf("launch: wait for %s: the agent following the launcher is gone%s", j.id, j.la.logTail(8))
		case <-time.After(100 * time.Millisecond):
		}
	}
	return cdti.ExitStatus(j.status.Load()), nil
}

// Close lets the job go: the agent lets the launcher and every rank go untraced and ends
// (held ranks start).
func (j *followJob) Close() error {
	j.shutdown(false)
	return nil
}

// shutdown asks the agent to end, killing what it follows or letting it go, and waits for it.
func (j *followJob) shutdown(kill bool) {
	j.closeOnce.Do(func() {
		if kill && !processEnded(j.la.pid) && j.mgmt == nil {
			// No management connection to ask the agent with: the launcher ends its job.
			syscall.Kill(j.la.pid, syscall.SIGTERM)
		}
		if j.mgmt == nil {
			j.la.stop()
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := j.mgmt.Call(ctx, "shutdown", map[string]bool{"kill": kill}, nil)
		cancel()
		j.mgmt.Close()
		if err != nil && kill && !processEnded(j.la.pid) {
			syscall.Kill(j.la.pid, syscall.SIGTERM)
		}
		select {
		case <-j.la.done:
		case <-time.After(10 * time.Second):
			j.la.stop()
		}
	})
}
