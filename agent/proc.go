package agent

import (
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"sort"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/hpcdap/hpcdap/cdti"
	"github.com/hpcdap/hpcdap/target"
	"github.com/hpcdap/hpcdap/target/ptrace"
)

// proc is one rank's process and its CNK state. Everything below "owned by loop" is read and
// written only by the process's own goroutine (loop), or under mu by the back end's trap hook
// (trapHook); other goroutines reach it through do and
// post, which run a function on that goroutine. The snapshot fields, read by the management
// plane, are the exception and have their own lock.
type proc struct {
	a       *Agent
	rank    uint32
	pid     int
	spawned bool
	reqs    chan func()
	quit    chan struct{}
	ended   chan struct{} // closed when loop returns
	stopOne sync.Once
	// ending is closed when the agent begins to shut down: a function call in progress ends
	// then (its thread restored) instead of at its time limit, which may be far off.
	ending    chan struct{}
	endingOne sync.Once

	snapMu sync.Mutex
	snap   RankInfo
	access access // what Check needs, as of the last request or event

	// Owned by loop.
	tp        target.Process // nil while untraced (attach mode without tools)
	events    <-chan target.Event
	info      target.Info
	mach      *machine // nil when the agent has no support for the target's machine
	exited    bool
	status    int
	started   bool // false: spawned and held before its first instruction
	threads   map[int]*pthread
	leader    int
	tools     []*tool // by descending priority
	holder    *tool   // the tool with control authority
	ctl       controlSettings
	pending   []notif // signal notifications not yet sent, oldest first
	inflight  *notif  // the notification sent to the holder and not yet satisfied
	notifySeq uint32  // the number of the last notification put in flight (notif.seq)
	// quietFor is the tool whose StopProcess stops are reported by a collective instead of a
	// Notify (quiet.go); quietDone is closed when such a stop is complete.
	quietFor  *tool
	quietDone chan struct{}
	// suspended: the process is stopped as a whole (a notification is pending or in flight,
	// or a tool step is under way from one): no thread runs unless a tool steps it.
	suspended bool
	bps       map[uint64]*breakpoint
	conds     map[uint64]*trapCond // what the agent decides at a tool's trap (SetTrapCondition)
	propWatch []watchSpec          // watchpoints applied to every thread (WatchPropagate)
	stepOver  *stepOverOp          // a thread executing the original instruction under a lifted trap
	capture   int                  // tid whose next event an injection waits for (0: none)
	captured  *target.Event
	pins      map[int]int // threads a command keeps stopped
	prefs     prefs
	startSig  int    // a Control signal saved for delivery at the program's entry
	startBP   uint64 // the internal breakpoint at AT_ENTRY (0: none)
	acks      int    // Updates and Controls whose acks are not written yet
	// Out-of-line execution (outofline.go): the scratch pages mapped in the process, whether
	// mapping one failed (breakpoints are then stepped over), and how hits were passed.
	scratch      []*scratchPage
	scratchOff   bool
	scratchTries int  // injected mmap calls that failed
	mapping      bool // a scratch page is being mapped
	shstk        int  // the image runs with a shadow stack: 0 not known yet, 1 no, 2 yes
	passes       passCounts

	// mu is held by loop while it runs a request or handles an event. The one other
	// goroutine that touches what loop owns is the back end's, deciding a breakpoint hit
	// where it was reaped (trapHook): it does so only with mu taken by TryLock, and only when
	// loop has handled every event delivered before that hit (evSeen).
	mu     sync.Mutex
	evSeen uint64 // events of the back end handled (handleEvent)
	hooked bool   // trapHook is installed in the back end

	// biases are the modules' load biases by link-map name (moduleBiases), read while every
	// thread was stopped, after biasesAt-1 events of this back end: the link map cannot change
	// until a thread runs again, and no thread stops again without an event.
	biases   map[string]uint64
	biasesAt uint64
	// links is what walks of the link map learned that stays true while the program image
	// does (walkLinkMap), forgotten at an exec and a back end change.
	links linkCache
}

// access is the part of a process's state the message-level checks read (handler.Check), as
// published by the process's goroutine after each request and event. The goroutine checks
// again when it runs the message, so a stale copy can only delay a refusal, never skip one.
type access struct {
	exited bool
	tools  []toolKey
	holder toolKey
}

type toolKey struct {
	id uint32
	tc *toolConn
}

// pthread is the agent's view of one thread.
type pthread struct {
	tid          int
	stopped      bool   // in a ptrace stop
	interrupting bool   // Interrupt was sent and the stop has not been seen
	pc           uint64 // program counter at the last stop (0: unknown)
	sig          int    // signal delivered when the thread next runs (the continuation signal)
	held         bool   // HoldThread
	holder       uint32 // the tool that held it
	atBreak      bool   // stopped by a planted breakpoint at brk; pc was moved back to it
	brk          uint64
	stepReq      bool       // the tool asked StepThread and the step has not started
	toolStep     bool       // single-stepping for a tool: the next SIGTRAP is StepComplete
	rng          *rangeStep // StepRange: the tool's step goes on while the pc stays in the range
	watch        [watchPairs]*watchSpec
	ool          oolPass // the slot the thread was last sent through, until its next stop
}

// tool is one attached tool on one process.
type tool struct {
	id          uint32
	tag         cdti.Tag
	priority    uint8
	tc          *toolConn
	conflicting bool // refused control (or asked to hear of the next release)
	defaultTid  int  // the thread last notified to this tool
}

// controlSettings are the holder's Control fields.
type controlSettings struct {
	notifySet cdti.SignalSet
	dacTrap   cdti.DACTrapMode
	propagate bool
}

// prefs are the values of SetPreferences.
type prefs struct {
	breakMode cdti.FastBreakMode
	watchMode cdti.FastWatchMode
	dacMode   cdti.DACTrapMode
}

// notif is one signal notification.
type notif struct {
	tid    int
	sig    int
	reason cdti.NotifySignalReason
	inst   uint64
	data   uint64
	gone   bool   // the thread exited after it was notified
	quiet  bool   // a collective's quiet stop: not to be sent (quiet.go)
	unsent bool   // in flight without having been sent: a collective reported it
	seq    uint32 // its number among the rank's notifications, sent as the Notify's SequenceID
}

var errShutdown = errors.New("agent is shutting down")

func newProc(a *Agent, rank uint32, pid int, tp target.Process, spawned bool) *proc {
	p := &proc{
		a: a, rank: rank, pid: pid, spawned: spawned, reqs: make(chan func(), 64),
		quit: make(chan struct{}), ended: make(chan struct{}), ending: make(chan struct{}), threads: make(map[int]*pthread),
		bps: make(map[uint64]*breakpoint), pins: make(map[int]int), leader: pid,
		prefs: prefs{breakMode: cdti.FastBreakDisable, watchMode: cdti.FastWatchDisable},
	}
	p.snap = RankInfo{Rank: int(rank), Pid: pid, State: "running"}
	if tp != nil {
		// Spawned: held before the first instruction, the leader stopped.
		p.setBackend(tp)
		p.started = false
		p.suspended = false
		p.threads[pid] = &pthread{tid: pid, stopped: true}
	} else {
		p.started = true
		p.snap.Executable, _ = os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe")
	}
	p.publish()
	return p
}

func (p *proc) setBackend(tp target.Process) {
	p.tp = tp
	p.events = tp.Events()
	p.evSeen, p.hooked = 0, false
	p.biases, p.biasesAt = nil, 0
	p.links = linkCache{}
	p.info = tp.Info()
	p.mach = machineFor(p.info)
	p.snapMu.Lock()
	p.snap.Executable = p.info.Exe
	p.snapMu.Unlock()
}

// loop is the process's goroutine: it runs requests and handles the back end's events until
// stop is called.
func (p *proc) loop() {
	defer close(p.ended)
	for {
		select {
		case f := <-p.reqs:
			p.mu.Lock()
			p.guard("request", f)
		case ev, ok := <-p.events:
			p.mu.Lock()
			if !ok {
				p.events = nil
				p.mu.Unlock()
				continue
			}
			p.guard("event", func() { p.handleEvent(ev) })
		case <-p.quit:
			return
		}
		p.publish()
		p.mu.Unlock()
	}
}

// guard runs f, turning a panic into a log line: the last line of defence that keeps the other
// ranks (and this rank's next requests) served.
func (p *proc) guard(what string, f func()) {
	defer func() {
		if r := recover(); r != nil {
			p.a.logf("agent: rank %d: %s: internal error: %v\n%s", p.rank, what, r, debug.Stack())
		}
	}()
	f()
}

// do runs f on the process's goroutine and waits for it. It reports errShutdown if the
// goroutine has ended.
func (p *proc) do(f func()) error {
	done := make(chan struct{})
	wrapped := func() {
		defer close(done)
		f()
		p.publish() // before the caller goes on: its next message is checked against it
	}
	select {
	case p.reqs <- wrapped:
	case <-p.ended:
		return errShutdown
	}
	select {
	case <-done:
		return nil
	case <-p.ended:
		// The goroutine ended; it may still have run f, but nobody can rely on its effects.
		select {
		case <-done:
			return nil
		default:
			return errShutdown
		}
	}
}

// enqueue queues f to run on the process's goroutine, after the requests already queued.
func (p *proc) enqueue(f func()) {
	select {
	case p.reqs <- f:
	case <-p.ended:
	}
}

// stop ends the goroutine.
func (p *proc) stop() { p.stopOne.Do(func() { close(p.quit) }) }

// beginEnding closes ending; any goroutine may call it.
func (p *proc) beginEnding() { p.endingOne.Do(func() { close(p.ending) }) }

// isEnding reports whether the agent is shutting down.
func (p *proc) isEnding() bool {
	select {
	case <-p.ending:
		return true
	default:
		return false
	}
}

// publish refreshes what other goroutines read: the management plane's snapshot and the state
// the message-level checks use.
func (p *proc) publish() {
	p.snapMu.Lock()
	defer p.snapMu.Unlock()
	s := &p.snap
	s.Threads = len(p.threads)
	switch {
	case p.exited:
		s.State = "exited"
		st := p.status
		s.ExitStatus = &st
		s.Threads = 0
	case p.tp == nil:
		s.State = "running"
	case !p.started:
		s.State = "loaded"
	case p.suspended || p.allStopped():
		s.State = "stopped"
	default:
		s.State = "running"
	}
	if p.tp == nil && !p.exited {
		s.Threads = countTasks(p.pid)
	}
	ac := &p.access
	ac.exited = p.exited
	ac.tools = ac.tools[:0]
	for _, t := range p.tools {
		ac.tools = append(ac.tools, toolKey{t.id, t.tc})
	}
	ac.holder = toolKey{}
	if p.holder != nil {
		ac.holder = toolKey{p.holder.id, p.holder.tc}
	}
}

// checkPublished applies the message-level checks of proc.check to the published state.
func (p *proc) checkPublished(tc *toolConn, id uint32, update bool) cdti.ReturnCode {
	p.snapMu.Lock()
	defer p.snapMu.Unlock()
	ac := &p.access
	if ac.exited {
		return cdti.ToolProcessExiting
	}
	for _, k := range ac.tools {
		if k.id == id && k.tc == tc {
			if update && ac.holder != k {
				return cdti.ToolControlRequired
			}
			return cdti.Success
		}
	}
	return cdti.ToolIdError
}

func (p *proc) snapshot() RankInfo {
	p.snapMu.Lock()
	defer p.snapMu.Unlock()
	s := p.snap
	if s.ExitStatus != nil {
		st := *s.ExitStatus
		s.ExitStatus = &st
	}
	return s
}

func (p *proc) toolCount() int {
	p.snapMu.Lock()
	defer p.snapMu.Unlock()
	return len(p.access.tools)
}

// sortedTids lists the threads, leader first.
func (p *proc) sortedTids() []int {
	tids := make([]int, 0, len(p.threads))
	for tid := range p.threads {
		tids = append(tids, tid)
	}
	sort.Slice(tids, func(i, j int) bool {
		if (tids[i] == p.leader) != (tids[j] == p.leader) {
			return tids[i] == p.leader
		}
		return tids[i] < tids[j]
	})
	return tids
}

func (p *proc) allStopped() bool {
	for _, th := range p.threads {
		if !th.stopped {
			return false
		}
	}
	return true
}

// findTool returns the tool with id attached to this process through tc, or nil.
func (p *proc) findTool(id uint32, tc *toolConn) *tool {
	for _, t := range p.tools {
		if t.id == id && (tc == nil || t.tc == tc) {
			return t
		}
	}
	return nil
}

// trace starts tracing an untraced process (attach mode): every thread is stopped by the back
// end, then let run again.
func (p *proc) trace() error {
	tp, err := p.a.backend.Attach(p.pid)
	if err != nil {
		return err
	}
	p.setBackend(tp)
	tids, err := tp.Threads()
	if err != nil {
		tp.Detach()
		p.tp, p.events = nil, nil
		return err
	}
	p.threads = make(map[int]*pthread, len(tids))
	for _, tid := range tids {
		p.threads[tid] = &pthread{tid: tid, stopped: true}
	}
	p.started = true
	p.suspended = false
	// A signal that was pending when the threads were seized arrives as an event already
	// queued; handle it before anything runs so that it is delivered, not lost.
	for drained := false; !drained; {
		select {
		case ev, ok := <-p.events:
			if !ok {
				p.events = nil
				drained = true
				break
			}
			p.handleEvent(ev)
		default:
			drained = true
		}
	}
	p.advance()
	return nil
}

// untrace lets an attach-mode process go once no tool is attached: it runs as if never
// touched. Its breakpoints and watchpoints were removed with the tools that set them.
func (p *proc) untrace() {
	if p.tp == nil || p.exited {
		return
	}
	// A SIGSTOP a tool sent (an all-stop) that the process has not yet taken would stop it
	// for good once untraced, with nobody left to continue it: cancel it after the detach.
	// Looked at before anything resumes a thread: once dequeued, a detach may deliver it.
	stopPending := p.pid > 0 && ptrace.SignalPending(p.pid, syscall.SIGSTOP)
	p.clearTraps()
	p.pending, p.inflight = nil, nil
	p.suspended = false
	clear(p.pins)
	for _, th := range p.threads {
		th.held, th.stepReq, th.rng = false, false, nil
	}
	p.capture = 0
	// A single step in flight must end first: a thread interrupted before it has taken the
	// step's SIGTRAP would receive that SIGTRAP once detached, and die of it.
	if err := p.pump(func() bool { return p.stepOver == nil && !p.stepping() }); err != nil {
		p.a.logf("agent: rank %d: waiting for a step before detaching: %v", p.rank, err)
	}
	if p.exited || p.tp == nil {
		return
	}
	p.advance()
	if err := p.tp.Detach(); err != nil && !errors.Is(err, target.ErrExited) {
		p.a.logf("agent: rank %d: detach pid %d: %v", p.rank, p.pid, err)
	}
	if stopPending {
		p.a.logf("agent: rank %d: SIGSTOP pending at detach: SIGCONT", p.rank)
		syscall.Kill(p.pid, syscall.SIGCONT)
	}
	// The event stream ends with the detach; what it still holds no longer matters.
	for range p.events {
	}
	p.tp, p.events, p.mach = nil, nil, nil
	p.threads = make(map[int]*pthread)
	// The scratch pages stay mapped (a thread may still be on its way out of its slot); a
	// later trace maps its own.
	p.scratch, p.scratchOff, p.scratchTries = nil, false, 0
}

// stepping reports whether a thread is single-stepping for a tool.
func (p *proc) stepping() bool {
	for _, th := range p.threads {
		if th.toolStep && !th.stopped {
			return true
		}
	}
	return false
}

// shutdown detaches every tool and lets the process go (or kills it), then ends the goroutine.
func (p *proc) shutdown(kill bool) {
	err := p.do(func() {
		for len(p.tools) > 0 {
			p.removeTool(p.tools[0], true)
		}
		if p.exited {
			return
		}
		if kill {
			if p.tp != nil {
				if p.snapshot().Launcher {
					// A launcher told to end ends its job too; SIGKILL would orphan it.
					p.tp.Kill(0, int(syscall.SIGTERM))
					p.waitExit(5 * time.Second)
				}
				if !p.exited {
					p.tp.Kill(0, int(syscall.SIGKILL))
					p.waitExit(5 * time.Second)
				}
			} else {
				syscall.Kill(p.pid, syscall.SIGKILL)
			}
			return
		}
		if !p.started {
			p.start(0, cdti.DynamicNotifyDLoader)
		}
		if p.tp != nil {
			p.untrace()
		}
	})
	if err != nil {
		p.a.logf("agent: rank %d: shutdown: %v", p.rank, err)
	}
	p.stop()
	<-p.ended
}

// waitExit consumes events until the process has exited or d has passed.
func (p *proc) waitExit(d time.Duration) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	for !p.exited && p.events != nil {
		select {
		case ev, ok := <-p.events:
			if !ok {
				p.events = nil
				return
			}
			p.handleEvent(ev)
		case <-timer.C:
			return
		}
	}
}

// countTasks counts /proc/PID/task entries (0 if the process is gone).
func countTasks(pid int) int {
	ents, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	if err != nil {
		return 0
	}
	return len(ents)
}

// errTimeout: threads the agent interrupted did not stop in time.
var errTimeout = errors.New("threads did not stop in time")

// pump handles events until cond holds, the process exits, or the agent's wait limit passes.
// Commands use it when they need a running thread stopped.
func (p *proc) pump(cond func() bool) error {
	err := p.pumpUntil(cond, p.a.waitLimit, nil)
	switch {
	case errors.Is(err, target.ErrExited):
		return fmt.Errorf("rank %d: %w", p.rank, err)
	case err == errShutdown && p.events == nil:
		return fmt.Errorf("rank %d: no event stream", p.rank)
	}
	return err
}
