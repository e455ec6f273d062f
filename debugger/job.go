package debugger

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hpcdap/hpcdap/cdti"
	"github.com/hpcdap/hpcdap/launch"
	"github.com/hpcdap/hpcdap/mgmt"
	"github.com/hpcdap/hpcdap/rankset"
	"github.com/hpcdap/hpcdap/symbols"
	"github.com/hpcdap/hpcdap/topology"
)

// RankState is where a rank stands (RankStatus, StateOf).
type RankState int

// The states of a rank, in the order a rank passes them.
const (
	RankStarting RankState = iota // launched, not yet held by the job
	RankRunning
	RankStopped
	RankExited
)

// String names the state as the ranks view shows it ("stopped").
func (s RankState) String() string {
	return [...]string{"starting", "running", "stopped", "exited"}[s]
}

// Rank is one process of the job. Fields after mu-guarded are read and written with the job's
// mutex held; the symbol state has its own lock (rankSymbols).
type Rank struct {
	job  *Job
	Num  int
	node *node
	Pid  int
	Exe  string
	// leader is the LWP of the rank's main thread: its pid, but behind a BG/Q CIOS agent,
	// where the pid is a compute node's id, 0 (CDTI's "the process leader") until the rank's
	// first stop names the thread. Guarded by job.mu.
	leader int

	evMu sync.Mutex // serialises the handling of this rank's notifications

	noRangeStep atomic.Bool // its agent refused StepRange: source steps go instruction by instruction

	// Guarded by job.mu.
	state       RankState
	notif       *cdti.NotifySignal // the notification in flight while stopped
	stopReason  string             // DAP reason of the last stop
	stopText    string             // its description
	stopBPs     []int
	exit        *cdti.ExitStatus
	lostTold    bool // named in a "lost k of N" line (onLost)
	cutOff      bool // ended by an operation's unreachable answer: its loss is still to be named
	sigstopSent bool // a SIGSTOP to stop it is on its way (agents without StopProcess)
	pauseReq    bool // a pause asked this rank to stop
	quietStop   bool // a collective reported its stop: the notification it stands for is on its way to onSignal
	stepHold    bool // a step waits to suspend the rank: a notification to pass on suspends it instead
	gen         int  // bumped at every resume: frames and variables of older stops are stale
	stepper     *stepper
	threads     []*Thread           // leader first, then by LWP
	threadsGen  int                 // gen the thread list was read at (-1: never)
	labels      map[int]threadLabel // the thread library's label of each LWP, once it has one
	hits        map[int]int
	started     chan struct{} // closed at the first stop after launch or attach
	startOnce   sync.Once
	endReported bool            // its exit has been reported to the client
	outEOF      map[string]bool // streams whose end the agent reported (per-rank output)
	// yieldedTo is the tool of higher priority this session gave control of the rank up to,
	// until it releases it (authority.go); nil while the session controls the rank.
	yieldedTo *cdti.NotifyControl
	// ctlGen counts the changes of control authority (yield, regain): a signal notification
	// read under an older one is about a control that is over (onSignal).
	ctlGen int
	// ctlQueue holds the Notify(Control) of the rank not yet handled, in the order they
	// came; ctlBusy is set while a goroutine works it off (queueControl).
	ctlQueue []*cdti.NotifyControl
	ctlBusy  bool
	// controlFree receives Notify(Control, Available) while the session waits to take control
	// from a lower-priority holder (takeControl).
	controlFree chan struct{}

	sym rankSymbols
}

// Job is the whole debugged job of one session: its ranks, the agents that serve them, the
// threads, breakpoints and run-control state.
type Job struct {
	ev Events
	// ctx is the session's: the work a request starts derives from it (and ends when the
	// client goes). What may also run for the job's own events or its teardown — memory reads
	// of the page cache, thread lists, planting and removing traps' contexts given by their
	// callers — does not.
	ctx context.Context
	// libWatchMu serialises updateLibraryWatch, so that a rank's link-map trap is planted once.
	libWatchMu sync.Mutex
	// labelPlans are what labelling a rank's threads reads, by the layout of the rank's
	// modules (threadnames.go).
	labelMu    sync.Mutex
	labelPlans map[uint64]*labelPlan
	size       int
	priority   uint8 // the CDTI priority the session attaches with (Config.ToolPriority)
	labelRanks bool  // more than one rank: output lines are labelled "[rank] " (fixed at creation)
	mode       StopMode
	ranks      []*Rank       // by rank number
	byNum      map[int]*Rank // rank number → rank
	nodes      []*node
	tree       *topology.Tree // the agents' tree overlay, nil when each node is connected directly
	below      *mgmt.Subtree  // with the tree, the management plane: the root's connection (tree.go)
	// noCollective: an agent refused a cdti.Collective; run control goes rank by rank.
	noCollective atomic.Bool
	syms         *symbols.Cache
	bps          *breakpoints
	back         backend // live ranks, or a core file (post-mortem)
	noStop       bool    // noDebug: run without stopping
	// CallTimeout bounds one function call in an expression.
	callTimeout time.Duration
	// wlm is the workload manager's launcher once released (nil for local jobs).
	wlm *WLMJob

	mu         sync.Mutex
	focus      rankset.Set
	threads    map[int]*Thread
	nextThread int
	collect    *collector
	stops      int // all-stops begun: a continue overtaken by one leaves its ranks stopped
	steps      *stepGroup
	stepMu     sync.Mutex     // held while a step sets out: one at a time (Job.startSteps)
	entryWait  map[*Rank]bool // stopAtEntry: ranks not yet at main
	viewRank   *Rank          // the rank whose stack the client read last
	changed    map[*Rank]bool
	flushTimer *time.Timer
	exited     bool // every rank has exited and the exited event was sent
	stopAll    bool // terminating: notifications no longer stop anything
	signalStop bool // setExceptionBreakpoints: stop on signals
	lineBuf    lineBuffer
	outputs    []*outputStream
}

// drainOutput waits (briefly) until rank r's output has been sent, so that a rank's last
// lines come before the events that report its end: with per-rank output, until the agent
// reported the end of both its streams; otherwise until the shared pipe is drained.
func (j *Job) drainOutput(r *Rank, limit time.Duration) {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		done := true
		if r.node.output {
			j.mu.Lock()
			done = r.outEOF["stdout"] && r.outEOF["stderr"]
			j.mu.Unlock()
		} else {
			for _, o := range j.outputs {
				done = done && o.drained()
			}
		}
		if done {
			return
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// NewJob connects to every agent of a job and builds the rank table.
func NewJob(ctx context.Context, cfg Config, g *launch.Agents, mode StopMode, focus string) (*Job, error) {
	j := &Job{ev: cfg.Events, ctx: cfg.Ctx, callTimeout: cfg.CallTimeout, size: g.Size, labelRanks: g.Size > 1, mode: mode, byNum: map[int]*Rank{}, threads: map[int]*Thread{},
		syms: cfg.Syms, changed: map[*Rank]bool{}, signalStop: true, priority: cfg.ToolPriority}
	if j.priority == 0 {
		j.priority = DefaultToolPriority
	}
	j.back = liveBackend{j}
	j.bps = newBreakpoints(j)
	// HPCDAP_COLLECTIVES=0 sends run control rank by rank, for comparison (BENCHMARKS.md).
	j.noCollective.Store(os.Getenv("HPCDAP_COLLECTIVES") == "0")
	tree, err := treeFor(len(g.Endpoints), cfg.Fanout)
	if err != nil {
		return nil, err
	}
	// Every agent is connected at once (a job of many nodes waits for the slowest, not for
	// their sum). With a tree, the front end connects to the root alone, which tells the
	// agents below it their children and answers with every agent's ranks (discoverTree).
	var conns []dialed
	if tree != nil {
		conns = j.discoverTree(ctx, g, tree)
	} else {
		conns = make([]dialed, len(g.Endpoints))
		ForEach(len(g.Endpoints), func(i int) {
			c := &conns[i]
			c.n, c.infos, c.err = dialNode(ctx, &g.Endpoints[i], j.onRankOutput, true)
		})
	}
	var dialErr error
	for _, c := range conns {
		if c.err != nil && dialErr == nil {
			dialErr = c.err
		}
		if c.n != nil {
			j.nodes = append(j.nodes, c.n)
		}
	}
	if dialErr != nil {
		j.CloseNodes(true)
		return nil, dialErr
	}
	for i := range g.Endpoints {
		ep := &g.Endpoints[i]
		n, infos := conns[i].n, conns[i].infos
		if ep.ToolID != 0 {
			infos = n.subset(infos)
		}
		for _, ri := range infos {
			j.mu.Lock()
			_, dup := j.byNum[ri.Rank]
			j.mu.Unlock()
			if dup {
				j.CloseNodes(true)
				return nil, fmt.Errorf("rank %d is served by two agents", ri.Rank)
			}
			r := &Rank{job: j, Num: ri.Rank, node: n, Pid: ri.Pid, Exe: ri.Executable, threadsGen: -1,
				hits: map[int]int{}, started: make(chan struct{}), leader: ri.Pid, controlFree: make(chan struct{}, 1)}
			if ep.ToolID != 0 {
				r.leader = 0 // a compute node's id: the thread is learnt at the first stop
			}
			r.sym.rank = r
			n.ranks = append(n.ranks, r)
			j.mu.Lock() // the agents' output may come meanwhile (onRankOutput)
			j.byNum[r.Num] = r
			j.mu.Unlock()
			j.ranks = append(j.ranks, r)
		}
		if ep.Output != nil {
			o := &outputStream{r: ep.Output}
			if n.output {
				// The ranks' output comes per rank on the management plane; the agent's own
				// stderr only carries what it could not log (a crash): show it as such.
				host := n.host
				go func() {
					defer j.recoverPanic("output of the agent on " + host)
					o.forward(func(text string) { j.output("console", "agent on "+host+": "+text) })
				}()
			} else {
				j.outputs = append(j.outputs, o)
				go func() {
					defer j.recoverPanic("output of the agent on " + n.host)
					o.forward(func(text string) { j.output("stdout", text) })
				}()
			}
		}
	}
	sort.Slice(j.ranks, func(a, b int) bool { return j.ranks[a].Num < j.ranks[b].Num })
	if len(j.ranks) == 0 {
		j.CloseNodes(true)
		return nil, errors.New("the agents serve no rank")
	}
	if max := j.ranks[len(j.ranks)-1].Num + 1; max > j.size {
		j.size = max
	}
	if tree != nil {
		if err := j.configureTree(ctx, tree); err != nil {
			j.CloseNodes(true)
			return nil, err
		}
	}
	if j.focus, err = j.ParseRanks(focus); err != nil {
		j.CloseNodes(true)
		return nil, err
	}
	// Main threads get the ids 1…N in rank order, so a rank's thread id is predictable.
	for _, r := range j.ranks {
		j.addThread(r, r.leader)
	}
	return j, nil
}

// ParseRanks reads a rank set of this job ("" is every rank), keeping only ranks that exist.
func (j *Job) ParseRanks(s string) (rankset.Set, error) {
	set, err := ParseFocus(s, j.size)
	if err != nil {
		return set, err
	}
	var have rankset.Set
	for _, r := range j.ranks {
		have = have.Add(r.Num)
	}
	set = set.Intersect(have)
	if set.Empty() {
		return set, fmt.Errorf("ranks %q names no rank of this job", s)
	}
	return set, nil
}

// rank returns the rank with number n, or nil.
func (j *Job) rank(n int) *Rank { return j.byNum[n] }

// rankStatusLocked returns the state of r; j.mu must be held.
func (j *Job) rankStatusLocked(r *Rank) RankStatus {
	rs := RankStatus{Num: r.Num, State: r.state, Pid: r.Pid, Host: r.node.host}
	if t := r.mainThread(); t != nil {
		rs.ThreadID = t.ID
	}
	if r.state == RankStopped {
		rs.StopReason = r.stopReason
	}
	if r.exit != nil {
		code := exitCode(*r.exit)
		rs.ExitCode = &code
		if r.exit.Signaled() {
			rs.Signal = SignalName(r.exit.Signal())
		}
	}
	if r.state == RankStopped && r.notif != nil && isFatal(int(r.notif.Signal)) {
		rs.Signal = SignalName(int(r.notif.Signal))
	}
	return rs
}

// exitCode turns a wait status into a shell-style exit code (128+signal when killed).
func exitCode(s cdti.ExitStatus) int {
	if s.Signaled() {
		return 128 + s.Signal()
	}
	return s.ExitCode()
}

// markChanged queues r for the next coalesced hpcdap/ranksChanged event; j.mu must be held.
func (j *Job) markChanged(r *Rank) {
	j.changed[r] = true
	if j.flushTimer == nil {
		j.flushTimer = time.AfterFunc(20*time.Millisecond, j.FlushChanged)
	}
}

// FlushChanged sends the queued hpcdap/ranksChanged event now.
func (j *Job) FlushChanged() {
	j.mu.Lock()
	body := j.takeChangedLocked()
	j.mu.Unlock()
	if body != nil {
		j.ev.RanksChanged(body)
	}
}

// takeChangedLocked returns the state of the ranks queued by markChanged, in rank order, and
// empties the queue; j.mu must be held.
func (j *Job) takeChangedLocked() []RankStatus {
	if j.flushTimer != nil {
		j.flushTimer.Stop()
		j.flushTimer = nil
	}
	if len(j.changed) == 0 {
		return nil
	}
	var ranks []RankStatus
	for r := range j.changed {
		ranks = append(ranks, j.rankStatusLocked(r))
	}
	clear(j.changed)
	sort.Slice(ranks, func(a, b int) bool { return ranks[a].Num < ranks[b].Num })
	return ranks
}

// RankStates returns the state of every rank, in rank order, and the focus.
func (j *Job) RankStates() ([]RankStatus, rankset.Set) {
	j.mu.Lock()
	defer j.mu.Unlock()
	states := make([]RankStatus, 0, len(j.ranks))
	for _, r := range j.ranks {
		states = append(states, j.rankStatusLocked(r))
	}
	return states, j.focus
}

// StateOf returns the state of rank r.
func (j *Job) StateOf(r *Rank) RankState {
	j.mu.Lock()
	defer j.mu.Unlock()
	return r.state
}

// SetFocus makes set the focus set (hpcdap/focus).
func (j *Job) SetFocus(set rankset.Set) {
	j.mu.Lock()
	j.focus = set
	j.mu.Unlock()
}

// SetSignalStop says whether a signal the program may handle stops it
// (setExceptionBreakpoints).
func (j *Job) SetSignalStop(stop bool) {
	j.mu.Lock()
	j.signalStop = stop
	j.mu.Unlock()
}

// SetViewRank records r as the rank whose stack the client read last.
func (j *Job) SetViewRank(r *Rank) {
	j.mu.Lock()
	j.viewRank = r
	j.mu.Unlock()
}

// RanksIn returns the ranks of set, in rank order.
func (j *Job) RanksIn(set rankset.Set) []*Rank {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.ranksInLocked(set)
}

// focusRanks returns the ranks of the focus set, in rank order.
func (j *Job) focusRanks() []*Rank {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.ranksInLocked(j.focus)
}

func (j *Job) ranksInLocked(set rankset.Set) []*Rank {
	var out []*Rank
	for _, r := range j.ranks {
		if set.Contains(r.Num) {
			out = append(out, r)
		}
	}
	return out
}

// onRankOutput turns a chunk of a rank's output into output events, one prefix per line.
func (j *Job) onRankOutput(p outputParams) {
	if p.EOF {
		j.mu.Lock()
		if r := j.byNum[p.Rank]; r != nil {
			if r.outEOF == nil {
				r.outEOF = map[string]bool{}
			}
			r.outEOF[p.Stream] = true
		}
		j.mu.Unlock()
	}
	key := fmt.Sprintf("%d/%s", p.Rank, p.Stream)
	text := j.lineBuf.add(key, p.Text, p.EOF)
	if text == "" {
		return
	}
	cat := "stdout"
	switch p.Stream {
	case "stderr":
		cat = "stderr"
	case "log": // log-point messages the agent formatted
		cat = "console"
	}
	j.sendRankOutput(cat, p.Rank, text)
}

// sendRankOutput sends lines of one rank as an output event that carries the rank in its data
// ({"rank": 3}); in a job of more than one rank each line is also labelled "[3] ". The output
// of a single process arrives as the program wrote it.
func (j *Job) sendRankOutput(category string, rank int, text string) {
	if text == "" {
		return
	}
	if j.labelRanks {
		var b strings.Builder
		for _, line := range strings.SplitAfter(text, "\n") {
			if line != "" {
				fmt.Fprintf(&b, "[%d] %s", rank, line)
			}
		}
		text = b.String()
	}
	j.ev.Output(category, text, rank)
}

// CloseNodes drops every agent connection; with shutdown, asks the agents to end first
// (killing the ranks when kill). A tree's one CDTI connection is closed before any agent is
// asked to end: the session ends first, so that the front end's Router takes the root's end
// that follows for what it is, not for a loss whose ranks it would adopt (cdti.DialTree).
// For the same reason an interior agent is asked to end before its children: it stops
// healing when it is asked (cdti.Router.StopHealing), and an agent is asked only once its
// parent has answered, so that no agent takes a child's end for a loss.
func (j *Job) CloseNodes(kill bool) {
	if j.tree != nil {
		j.nodes[0].client.Close()
	}
	if j.below != nil {
		// The tree's management plane: the root is asked to end, and asks the agents below
		// it in turn (an agent owned by the job ends once its front end's connections close).
		if j.nodes[0].ep.Owned {
			j.below.Close()
		} else {
			j.below.Shutdown(kill)
		}
	}
	asked := make([]chan struct{}, len(j.nodes)) // closed once agent i was asked to end (or failed to be)
	for i := range asked {
		asked[i] = make(chan struct{})
	}
	var wg sync.WaitGroup
	for i, n := range j.nodes {
		wg.Go(func() {
			done := sync.OnceFunc(func() { close(asked[i]) })
			defer done()
			defer j.recoverPanic("shutdown of the agent on " + n.host)
			if j.tree != nil {
				if p := j.tree.Parent(i); p >= 0 {
					<-asked[p]
				}
			}
			n.shutdown(kill, done)
		})
	}
	wg.Wait()
}

// SignalName names a Linux signal ("SIGSEGV").
func SignalName(sig int) string {
	if n, ok := sigNames[sig]; ok {
		return n
	}
	return fmt.Sprintf("signal %d", sig)
}

var sigNames = map[int]string{
	1: "SIGHUP", 2: "SIGINT", 3: "SIGQUIT", 4: "SIGILL", 5: "SIGTRAP", 6: "SIGABRT", 7: "SIGBUS",
	8: "SIGFPE", 9: "SIGKILL", 10: "SIGUSR1", 11: "SIGSEGV", 12: "SIGUSR2", 13: "SIGPIPE",
	14: "SIGALRM", 15: "SIGTERM", 16: "SIGSTKFLT", 17: "SIGCHLD", 18: "SIGCONT", 19: "SIGSTOP",
	20: "SIGTSTP", 21: "SIGTTIN", 22: "SIGTTOU", 23: "SIGURG", 24: "SIGXCPU", 25: "SIGXFSZ",
	26: "SIGVTALRM", 27: "SIGPROF", 28: "SIGWINCH", 29: "SIGIO", 30: "SIGPWR", 31: "SIGSYS",
}

// isFatal reports the signals whose default action kills the program with a fault: they are
// reported as exceptions.
func isFatal(sig int) bool {
	switch syscall.Signal(sig) {
	case syscall.SIGSEGV, syscall.SIGBUS, syscall.SIGFPE, syscall.SIGILL, syscall.SIGABRT, syscall.SIGSYS:
		return true
	}
	return false
}

// notifySet is the set of signals that stop a rank and reach the adapter: traps and the
// adapter's SIGSTOP, faults, and the signals a user sends to interrupt. Timer, child and
// glibc-internal real-time signals pass through untouched, as gdb passes them.
var notifySet = cdti.Signals(
	int(syscall.SIGTRAP), int(syscall.SIGSTOP), int(syscall.SIGSEGV), int(syscall.SIGBUS),
	int(syscall.SIGFPE), int(syscall.SIGILL), int(syscall.SIGABRT), int(syscall.SIGSYS),
	int(syscall.SIGINT), int(syscall.SIGQUIT), int(syscall.SIGHUP), int(syscall.SIGTERM),
	int(syscall.SIGUSR1), int(syscall.SIGUSR2), int(syscall.SIGPIPE), int(syscall.SIGXCPU),
	int(syscall.SIGXFSZ),
)

// Where names the rank's node for messages (" on host node3"), or is empty when unknown.
func (r *Rank) Where() string {
	if r.node == nil || r.node.host == "" {
		return ""
	}
	return " on host " + r.node.host
}

// ParseFocus reads a focus set; "" means every rank.
func ParseFocus(s string, size int) (rankset.Set, error) {
	if s == "" {
		return rankset.All(size), nil
	}
	set, err := rankset.Parse(s, size)
	if err != nil {
		return rankset.Set{}, fmt.Errorf("ranks %q: %v", s, err)
	}
	if set.Empty() {
		return rankset.Set{}, fmt.Errorf("ranks %q names no rank", s)
	}
	return set, nil
}

// DefaultTimeout bounds one request's CDTI work.
const DefaultTimeout = 60 * time.Second

// RanksArg resolves an optional rank set argument ("" is the whole job).
func (j *Job) RanksArg(s string) (rankset.Set, error) {
	if s == "" {
		var all rankset.Set
		for _, r := range j.ranks {
			all = all.Add(r.Num)
		}
		return all, nil
	}
	return j.ParseRanks(s)
}

// SetNoDebug makes the job run as if nobody watched (noDebug): no breakpoint is planted and
// signals reach the program.
func (j *Job) SetNoDebug() {
	j.noStop = true
	j.signalStop = false
}

// Ranks returns the job's ranks in rank order; the table is fixed once the job started.
func (j *Job) Ranks() []*Rank { return j.ranks }
