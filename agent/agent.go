package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hpcdap/hpcdap/cdti"
	"github.com/hpcdap/hpcdap/mgmt"
	"github.com/hpcdap/hpcdap/procimage"
	"github.com/hpcdap/hpcdap/target"
)

// Backend creates controlled processes: package target/ptrace's Tracer implements it.
type Backend interface {
	// Spawn starts argv held before its first instruction (see ptrace.Tracer.Spawn).
	Spawn(argv, env []string, dir string, stdio []*os.File) (target.Process, error)
	// Attach takes control of a running process, every thread stopped.
	Attach(pid int) (target.Process, error)
}

// Config configures an Agent.
type Config struct {
	// Token is the session token every connection must prove it holds (CDTI Hello, management
	// hello; by challenge and response).
	// New refuses an empty token.
	Token string
	// Backend controls the processes.
	Backend Backend
	// JobID is the job id CDTI messages must carry (0 accepts 0 only, like any other value).
	JobID uint64
	// Node is the node name reported to clients; "" means the host name.
	Node string
	// Version is the agent's build version, reported by hello.
	Version string
	// StagingDir is the session's staging directory, the only place the file commands
	// (GetFilenames, GetFileStatData, GetFileContents) read from; "" disables them.
	StagingDir string
	// Logger receives diagnostics; nil discards them.
	Logger *log.Logger
	// WaitTimeout bounds how long the agent waits for threads it has interrupted to stop
	// before a command fails with CmdTimeout; 0 means 10 s.
	WaitTimeout time.Duration
	// KillOnExit makes the agent kill what it spawned instead of letting it go when it ends
	// because its front end is gone: the last front-end connection closed (see lifeline.go).
	// With a back end that offers it (target/ptrace), spawned processes are also killed by
	// the kernel if the agent dies outright.
	KillOnExit bool
	// EndWithFrontEnd makes the agent end, detaching from every process, when the front
	// end's last connection closes: for an agent whose life the front end's does not bound
	// otherwise (a launcher's debugger daemon, not the front end's child). KillOnExit, when
	// also set, kills instead.
	EndWithFrontEnd bool
	// Journal, when set, receives a record of every trap before it is planted and after it
	// is removed (see journal.go), for a supervisor that undoes them if the agent dies.
	Journal io.Writer
	// RegisterTimeout bounds how long Register retries to reach the front end; 0 means 2 min,
	// longer than a front end waits for its agents.
	RegisterTimeout time.Duration
	// NoTrapConditions makes the agent answer SetTrapCondition with CmdInval, as a BG/Q CNK
	// does: the front end then decides every breakpoint hit itself.
	NoTrapConditions bool
	// CIOS, when set, makes the agent a Blue Gene/Q CIOS tool of that job (see cios.go): it
	// controls no process (Backend may be nil) and relays CDTI to the job's toolctld sockets.
	CIOS *CIOSJob
	// CNK makes the agent behave on the wire as a Blue Gene/Q Compute Node Kernel, which
	// speaks CDTI v6 and nothing else: every extension command of a Query or Update is
	// answered CmdInval (so NoTrapConditions is implied), every extension message (GatherStacks)
	// ErrorAck(UnsupportedType), and ack payloads come in a shuffled order, as the CNK's
	// hardware threads place them. The Hello handshake is still required: it authenticates
	// the agent's transport, not the CNK. A front end then works as it does against a real
	// BG/Q (see cdti.Server.CNK).
	CNK bool
}

// Agent serves the ranks of one node: the CDTI data plane with the Compute Node Kernel's
// semantics and the JSON-RPC management plane, both on one listener (see Serve).
type Agent struct {
	token     string
	backend   Backend
	jobID     uint64
	node      string
	version   string
	staging   string
	logger    *log.Logger
	waitLimit time.Duration
	journal   *journal
	// registerLimit is Config.RegisterTimeout.
	registerLimit time.Duration
	noTrapConds   bool // Config.NoTrapConditions
	cnk           bool // Config.CNK
	started       time.Time
	srv           *cdti.Server
	router        *cdti.Router // the tree overlay: relays to the agents below this one
	below         mgmt.Subtree // the tree overlay's management plane: the agents below (tree.go)
	cios          *ciosRelay   // Config.CIOS's relay, or nil
	done          chan struct{}
	doneOnce      sync.Once
	shutOnce      sync.Once
	shutdownWG    sync.WaitGroup
	output        *outputHub // the ranks' captured output (SpawnSpec.CaptureOutput)
	// parentGrace is how long a broken management connection from the agent above still
	// counts as the front end's (cdti.DefaultResumeGrace; tests shorten it).
	parentGrace time.Duration
	// treeTimeout is mgmt.TreeTimeout (tests shorten it).
	treeTimeout time.Duration

	mu    sync.Mutex
	procs map[uint32]*proc // by rank
	ranks []uint32         // sorted
	tools map[uint32]*toolConn
	// capturing is set once ranks were spawned with CaptureOutput: output.subscribe is served.
	capturing bool

	killOnExit bool
	endWithFE  bool         // EndWithFrontEnd
	life       lifeline     // front-end connections, for KillOnExit and EndWithFrontEnd
	launcher   *launcherRec // the launcher process (SpawnSpec.Launcher, FollowExec), or nil
	rankSubs   rankSubs     // management connections told of each new rank (ranks.subscribe)
	gone       []GoneRank   // ranks AttachLiveRanks found gone (guarded by mu)
	follow     *follower    // FollowExec's, or nil
	preAuth    atomic.Int32 // connections accepted and not yet authenticated
}

// New returns an Agent without ranks; add them with SpawnRanks or AttachRanks.
func New(cfg Config) (*Agent, error) {
	if cfg.Token == "" {
		return nil, errors.New("agent: no session token")
	}
	if cfg.Backend == nil && cfg.CIOS == nil {
		return nil, errors.New("agent: no back end")
	}
	node := cfg.Node
	if node == "" {
		node, _ = os.Hostname()
	}
	logger := cfg.Logger
	if logger == nil {
		logger = log.New(io.Discard, "", 0)
	}
	wait := cfg.WaitTimeout
	if wait <= 0 {
		wait = 10 * time.Second
	}
	a := &Agent{
		token: cfg.Token, backend: cfg.Backend, jobID: cfg.JobID, node: node, version: cfg.Version,
		staging: cfg.StagingDir, logger: logger, waitLimit: wait, started: time.Now(),
		done: make(chan struct{}), procs: make(map[uint32]*proc), tools: make(map[uint32]*toolConn),
		killOnExit: cfg.KillOnExit, endWithFE: cfg.EndWithFrontEnd, registerLimit: cfg.RegisterTimeout,
		noTrapConds: cfg.NoTrapConditions || cfg.CNK, cnk: cfg.CNK,
	}
	if cfg.Journal != nil {
		a.journal = &journal{w: cfg.Journal}
	}
	a.output = newOutputHub(a.logf)
	a.router = &cdti.Router{Local: (*handler)(a), Token: []byte(cfg.Token), Logf: a.logf}
	a.parentGrace, a.treeTimeout = cdti.DefaultResumeGrace, mgmt.TreeTimeout
	a.below = mgmt.Subtree{Token: cfg.Token, Client: mgmt.ClientAgent, Output: a.relayOutput, Logf: a.logf}
	a.srv = &cdti.Server{Handler: a.router, Token: []byte(cfg.Token), Node: node, ErrorLog: logger, CNK: cfg.CNK}
	if cfg.CIOS != nil {
		a.cios = newCIOSRelay(cfg.CIOS, a.logf, a.frontEndOpened, a.frontEndClosed)
		a.router.Local = a.cios // its ranks' frames go to toolctld, those of agents below it to them
		go cfg.CIOS.heartbeat(CIOSHeartbeat, a.done, a.logf)
	}
	return a, nil
}

func (a *Agent) logf(format string, args ...any) { a.logger.Printf(format, args...) }

// Done is closed once Shutdown has finished.
func (a *Agent) Done() <-chan struct{} { return a.done }

// SpawnSpec describes the ranks SpawnRanks starts.
type SpawnSpec struct {
	Argv      []string
	Env       []string   // nil: the agent's environment, without HPCDAP_TOKEN
	Dir       string     // working directory ("" for the agent's)
	Stdio     []*os.File // standard files of every rank (index = fd; nil: /dev/null)
	FirstRank int        // rank of the first process
	Count     int        // processes to start
	JobSize   int        // the job's number of ranks, HPCDAP_NP (0: FirstRank+Count)
	// CaptureOutput gives each rank pipes of its own as stdout and stderr (stdin /dev/null,
	// Stdio ignored); the agent drains them and serves them through output.subscribe.
	CaptureOutput bool
	// Launcher marks the program as a job's launcher (mpirun, srun, mpiexec.hydra), not a
	// rank: it is spawned without HPCDAP_RANK and HPCDAP_NP (which its MPI ranks would
	// inherit), Count must be 1, and the management plane reports it as the launcher. On CDTI
	// it is served as any spawned process, as rank FirstRank.
	Launcher bool
}

// SpawnRanks starts spec.Count ranks, each held before its first instruction like a job that
// is loaded but not started. Rank r gets HPCDAP_RANK=r and HPCDAP_NP in its environment. The
// session token is never passed on.
func (a *Agent) SpawnRanks(spec SpawnSpec) error {
	if spec.Count <= 0 || spec.Count > cdti.MaxRanksPerNode {
		return fmt.Errorf("agent: spawn %d ranks: between 1 and %d per node", spec.Count, cdti.MaxRanksPerNode)
	}
	if len(spec.Argv) == 0 {
		return errors.New("agent: spawn: no program")
	}
	if spec.Launcher && spec.Count != 1 {
		return fmt.Errorf("agent: spawn launcher %s: one process, not %d", spec.Argv[0], spec.Count)
	}
	env := spec.Env
	if env == nil {
		env = os.Environ()
	}
	env = withoutVar(env, "HPCDAP_TOKEN")
	np := spec.JobSize
	if np == 0 {
		np = spec.FirstRank + spec.Count
	}
	for i := range spec.Count {
		rank := spec.FirstRank + i
		renv := withoutVar(withoutVar(env, "HPCDAP_RANK"), "HPCDAP_NP")
		if !spec.Launcher {
			renv = append(renv, "HPCDAP_RANK="+strconv.Itoa(rank), "HPCDAP_NP="+strconv.Itoa(np))
		}
		stdio := spec.Stdio
		var pipes *capturePipes
		if spec.CaptureOutput {
			var err error
			if pipes, err = newCapturePipes(rank); err != nil {
				return err
			}
			stdio = pipes.stdio()
			a.mu.Lock()
			a.capturing = true
			a.mu.Unlock()
		}
		tp, err := a.spawnOne(spec.Argv, renv, spec.Dir, stdio)
		if err != nil {
			if pipes != nil {
				pipes.close()
			}
			return fmt.Errorf("agent: spawn rank %d: %w", rank, err)
		}
		if pipes != nil {
			pipes.start(a.output)
		}
		p := newProc(a, uint32(rank), tp.Info().Pid, tp, true)
		if spec.Launcher {
			p.snap.Launcher = true
			a.setLauncher(&launcherRec{pid: p.pid, proc: p})
		}
		if err := a.addProc(p); err != nil {
			return err
		}
	}
	return nil
}

// withoutVar returns env without the variable name.
func withoutVar(env []string, name string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		if !strings.HasPrefix(kv, name+"=") {
			out = append(out, kv)
		}
	}
	return out
}

// AttachRanks registers running processes (rank → pid, as a launcher's proctable gives them).
// The agent traces a process only while a tool is attached to it: here it checks that each
// process exists.
func (a *Agent) AttachRanks(pids map[uint32]int) error {
	ranks := make([]uint32, 0, len(pids))
	for r := range pids {
		ranks = append(ranks, r)
	}
	sort.Slice(ranks, func(i, j int) bool { return ranks[i] < ranks[j] })
	if len(ranks) > cdti.MaxRanksPerNode {
		return fmt.Errorf("agent: attach %d ranks: at most %d per node", len(ranks), cdti.MaxRanksPerNode)
	}
	for _, r := range ranks {
		pid := pids[r]
		if why := processGone(pid); why != "" {
			return fmt.Errorf("agent: attach rank %d: pid %d: %s", r, pid, why)
		}
		if err := a.addProc(newProc(a, r, pid, nil, false)); err != nil {
			return err
		}
	}
	return nil
}

// GoneRank is a rank given to AttachLiveRanks whose process was not there.
type GoneRank struct {
	Rank  int    `json:"rank"`
	Pid   int    `json:"pid"`
	Error string `json:"error"`
}

// AttachLiveRanks is AttachRanks for an agent a workload manager started for a job whose
// ranks may have died meanwhile: the ranks whose process is gone are not served but recorded
// (Gone, and the gone list of agent.register), so that the front end can say which rank died
// instead of waiting for an agent that gave up.
func (a *Agent) AttachLiveRanks(pids map[uint32]int) error {
	live := map[uint32]int{}
	var gone []GoneRank
	for r, pid := range pids {
		if why := processGone(pid); why != "" {
			gone = append(gone, GoneRank{Rank: int(r), Pid: pid, Error: why})
			continue
		}
		live[r] = pid
	}
	sort.Slice(gone, func(i, j int) bool { return gone[i].Rank < gone[j].Rank })
	for _, g := range gone {
		a.logf("agent: attach rank %d: pid %d: %s", g.Rank, g.Pid, g.Error)
	}
	a.mu.Lock()
	a.gone = append(a.gone, gone...)
	a.mu.Unlock()
	return a.AttachRanks(live)
}

// processGone says why pid is no process to attach: "" when it runs on this host, "no such
// process", "ended" for a zombie its parent has not reaped yet (a launcher's node daemon
// that is ending the job, or stalled, can leave a dead rank so), or why its status could
// not be read.
func processGone(pid int) string {
	if pid <= 0 {
		return "no such process"
	}
	st, err := procimage.ReadStatus(pid)
	switch {
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ESRCH):
		return "no such process"
	case err != nil:
		return err.Error()
	case st.State == 'Z' || st.State == 'X':
		return "ended (a zombie its parent has not reaped)"
	}
	return ""
}

// Gone lists the ranks AttachLiveRanks found gone.
func (a *Agent) Gone() []GoneRank {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]GoneRank(nil), a.gone...)
}

func (a *Agent) addProc(p *proc) error {
	// Subscribers of ranks.subscribe hear of the rank exactly once: the subscription lock
	// orders this addition with their snapshot of the current ranks.
	a.rankSubs.mu.Lock()
	defer a.rankSubs.mu.Unlock()
	if err := a.insertProc(p); err != nil {
		return err
	}
	a.rankSubs.announceLocked(p.snapshot())
	return nil
}

func (a *Agent) insertProc(p *proc) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, dup := a.procs[p.rank]; dup {
		p.stop()
		return fmt.Errorf("agent: rank %d given twice", p.rank)
	}
	if len(a.procs) >= cdti.MaxRanksPerNode {
		p.stop()
		return fmt.Errorf("agent: rank %d: at most %d ranks per node", p.rank, cdti.MaxRanksPerNode)
	}
	a.procs[p.rank] = p
	a.ranks = append(a.ranks, p.rank)
	sort.Slice(a.ranks, func(i, j int) bool { return a.ranks[i] < a.ranks[j] })
	go p.loop()
	return nil
}

// proc returns the process of a rank, or nil.
func (a *Agent) proc(rank uint32) *proc {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.procs[rank]
}

// allProcs returns every process, by rank.
func (a *Agent) allProcs() []*proc {
	a.mu.Lock()
	defer a.mu.Unlock()
	ps := make([]*proc, 0, len(a.ranks))
	for _, r := range a.ranks {
		ps = append(ps, a.procs[r])
	}
	return ps
}

// RankInfos describes every rank, by rank.
func (a *Agent) RankInfos() []RankInfo {
	if a.cios != nil {
		return a.cios.rankInfos()
	}
	ps := a.allProcs()
	out := make([]RankInfo, 0, len(ps))
	for _, p := range ps {
		out = append(out, p.snapshot())
	}
	return out
}

// Health reports the agent's condition.
func (a *Agent) Health() HealthResult {
	h := HealthResult{UptimeSeconds: a.uptime().Seconds()}
	for _, p := range a.allProcs() {
		s := p.snapshot()
		h.Ranks++
		if s.State != "exited" {
			h.Alive++
		}
		h.Tools += p.toolCount()
	}
	return h
}

// Shutdown ends the agent: every tool is detached (its breakpoints and watchpoints removed,
// held threads released, a suspended process continued) and every process is let go running
// (kill false) or killed with SIGKILL (kill true). It closes every connection and then Done.
// It is safe to call more than once; later calls wait for the first.
func (a *Agent) Shutdown(kill bool) {
	a.shutOnce.Do(func() {
		a.router.StopHealing() // the agents below are ending, or dropped with this one
		for _, p := range a.allProcs() {
			p.beginEnding() // a call in progress would hold the process until its time limit
		}
		// The agents below end as this one does, told on the management plane (parents
		// first: this one heals nothing any more), while it ends its own connections.
		var wg sync.WaitGroup
		wg.Go(func() { a.below.Shutdown(kill) })
		a.srv.Close()
		procs := a.allProcs()
		for _, p := range procs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				p.shutdown(kill)
			}()
		}
		wg.Wait()
		how := "detached from"
		if kill {
			how = "ended"
		}
		a.logf("agent: shut down: %s %d process(es)", how, len(procs))
		a.mu.Lock()
		f := a.follow
		a.mu.Unlock()
		if f != nil {
			f.stop(kill) // after the ranks: a launcher killed first would orphan them
		}
		a.doneOnce.Do(func() { close(a.done) })
	})
	<-a.done
}

// serveCDTI serves one CDTI connection whose first byte has been seen.
func (a *Agent) serveCDTI(ctx context.Context, conn *peekedConn) {
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	a.srv.ServeConn(conn)
}

// ParseAttachList parses a rank↔pid list as --attach takes it: "0=4242,1=4243".
func ParseAttachList(s string) (map[uint32]int, error) {
	out := make(map[uint32]int)
	for _, pair := range strings.Split(s, ",") {
		r, p, ok := strings.Cut(strings.TrimSpace(pair), "=")
		if !ok {
			return nil, fmt.Errorf("agent: attach list: %q is not RANK=PID", pair)
		}
		rank, err := strconv.ParseUint(r, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("agent: attach list: rank %q: %w", r, err)
		}
		pid, err := strconv.Atoi(p)
		if err != nil || pid <= 0 {
			return nil, fmt.Errorf("agent: attach list: pid %q is not a process id", p)
		}
		if _, dup := out[uint32(rank)]; dup {
			return nil, fmt.Errorf("agent: attach list: rank %d given twice", rank)
		}
		out[uint32(rank)] = pid
	}
	return out, nil
}
