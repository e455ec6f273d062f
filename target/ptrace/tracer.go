//go:build linux && amd64

package ptrace

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Tracer owns the one OS thread through which every ptrace request for its tracees is made: the
// kernel binds a tracee to the thread that attached it, not to the process. It can hold many
// processes (an agent traces every rank on its node) and is safe for concurrent use.
//
// Reaping. The tracer's goroutine is locked to its thread and waits on a Go select for either a
// request or a SIGCHLD (delivered through os/signal). On every wake-up it first drains the
// kernel's wait queue with wait4(-1, WNOHANG|__WALL|__WNOTHREAD) until nothing is left, then
// serves the request. __WNOTHREAD restricts the wait to children and tracees of this very
// thread, so the tracer never steals the exit status of a process another goroutine started
// with os/exec, and several Tracers in one program do not see each other's tracees. A request
// is therefore never blocked behind a wait, and a stop is noticed as soon as the SIGCHLD that
// the kernel sends for every ptrace stop arrives. SIGCHLD is a standard signal, so several may
// merge into one; draining until empty makes that harmless. A slow ticker drains as well, as a
// guard against another package resetting SIGCHLD's disposition. After a trap hook passed a
// hit (SetTrapHook), the loop polls the wait queue for a short while instead (spin): a thread
// in a loop is back at its trap sooner than SIGCHLD would wake the tracer.
//
// The alternative, a second thread blocked in waitid(WNOWAIT), was rejected: without
// __WNOTHREAD it sees every child of the program, and an unrelated zombie that its owner has
// not reaped yet would make it spin.
type Tracer struct {
	reqs      chan *request
	closing   chan struct{}
	done      chan struct{}
	closeOnce sync.Once
	self      int         // this program's pid: the sender of signals the tracer queues itself
	tid       int         // the tracer thread's id, which /proc/TID/status shows as TracerPid
	inHook    atomic.Bool // a trap hook runs on the tracer's thread: its requests run in place
	passed    bool        // a trap hook passed a hit since the loop last looked (owned by the loop)

	// Owned by the loop goroutine.
	threads map[int]*thread   // every traced thread, by tid
	procs   map[int]*process  // every process, by pid
	busy    map[*process]bool // processes attaching or detaching: waiting for their threads to stop
	sigch   chan os.Signal
	ready   chan struct{} // closed when the loop runs
}

// request is one operation run on the tracer's thread. finish is called exactly once, either by
// run itself or later by the event loop (Attach and Detach wait for threads to stop).
type request struct {
	run  func(r *request)
	done chan error
}

func (r *request) finish(err error) { r.done <- err }

// NewTracer starts a tracer and its thread.
func NewTracer() (*Tracer, error) {
	t := &Tracer{
		reqs:    make(chan *request),
		closing: make(chan struct{}),
		done:    make(chan struct{}),
		self:    os.Getpid(),
		threads: make(map[int]*thread),
		procs:   make(map[int]*process),
		busy:    make(map[*process]bool),
		sigch:   make(chan os.Signal, 1),
		ready:   make(chan struct{}),
	}
	// The loop needs an OS thread with no children of its own: __WNOTHREAD waits see the
	// children of the waiting thread, and a goroutine that ran earlier on the same thread may
	// have started one with os/exec, whose exit status the tracer would then steal. Threads
	// that fail the test are held until a good one is found (the runtime then makes a new
	// one), and given back afterwards.
	release := make(chan struct{})
	defer close(release)
	for try := 0; ; try++ {
		ok := make(chan bool)
		go func() {
			runtime.LockOSThread()
			if try < 64 && !freshThread() {
				ok <- false
				<-release
				runtime.UnlockOSThread()
				return
			}
			ok <- true
			t.loop()
		}()
		if <-ok {
			break
		}
	}
	<-t.ready
	return t, nil
}

// freshThread says whether the calling thread is not the main thread (which inherits orphans
// when other threads exit) and has no child processes.
func freshThread() bool {
	tid := unix.Gettid()
	if tid == os.Getpid() {
		return false
	}
	b, err := os.ReadFile("/proc/self/task/" + strconv.Itoa(tid) + "/children")
	if errors.Is(err, os.ErrNotExist) {
		return true // kernel without CONFIG_PROC_CHILDREN: cannot tell
	}
	return err == nil && len(bytes.TrimSpace(b)) == 0
}

// Close detaches every process still held (as Detach does) and ends the tracer's thread. A
// process whose threads do not all stop within a few seconds is left to the kernel, which
// detaches it when the thread ends. Children spawned by the tracer that outlive it are no
// longer reaped by it: they stay zombies until this program exits.
func (t *Tracer) Close() error {
	t.closeOnce.Do(func() { close(t.closing) })
	<-t.done
	return nil
}

// call runs fn on the tracer's thread and returns its result.
func (t *Tracer) call(fn func() error) error {
	return t.submit(func(r *request) { r.finish(fn()) })
}

// submit runs run on the tracer's thread and waits until the request is finished.
func (t *Tracer) submit(run func(r *request)) error {
	r := &request{run: run, done: make(chan error, 1)}
	if t.inHook.Load() && unix.Gettid() == t.tid {
		// Called by a trap hook (SetTrapHook), on the tracer's thread itself.
		run(r)
		return <-r.done
	}
	select {
	case t.reqs <- r:
	case <-t.done:
		return errClosed
	}
	return <-r.done
}

func (t *Tracer) loop() {
	// Locked by NewTracer and never unlocked: when the loop returns, the goroutine exits locked
	// and the runtime ends the thread, which makes the kernel detach anything still traced.
	t.tid = unix.Gettid()
	signal.Notify(t.sigch, unix.SIGCHLD)
	defer signal.Stop(t.sigch)
	defer close(t.done)
	close(t.ready)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case r := <-t.reqs:
			t.reap()
			r.run(r)
		case <-t.sigch:
			t.reap()
		case <-tick.C:
			t.reap()
		case <-t.closing:
			t.shutdown()
			return
		}
		t.spin()
	}
}

// reap handles every wait status the kernel holds for this thread, then lets attaching and
// detaching processes make progress. It reports whether there was any.
func (t *Tracer) reap() bool {
	any := false
	for {
		var ws unix.WaitStatus
		tid, err := unix.Wait4(-1, &ws, unix.WNOHANG|unix.WALL|unix.WNOTHREAD, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil || tid <= 0 {
			break
		}
		any = true
		t.dispatch(tid, ws)
	}
	for p := range t.busy {
		t.progress(p)
	}
	return any
}

// spinWindow is how long the tracer's thread keeps polling for the next stop after a trap
// hook passed a hit (see spin).
const spinWindow = 50 * time.Microsecond

// spin polls for stops, serving requests meanwhile, for as long as trap hooks keep passing
// hits no more than spinWindow apart. A thread passed by a hook is often back at a trap
// within microseconds (a conditional breakpoint in a loop); polling finds its stop as soon
// as the kernel reports it, where waiting for SIGCHLD costs the signal's way through
// os/signal and two goroutine wake-ups, several times the ptrace calls of the hit. Each empty
// poll yields the processor, to the traced thread first of all when it waits for this one.
// What a window without a stop costs is bounded: spinWindow per passed hit.
func (t *Tracer) spin() {
	if !t.passed {
		return
	}
	t.passed = false
	// Nobody waits for SIGCHLD meanwhile: each would still wake the signal's goroutine and
	// this one's channel. A stop that comes between the last poll and Notify sends none
	// that reaches the channel, hence the last reap.
	signal.Stop(t.sigch)
	defer func() {
		signal.Notify(t.sigch, unix.SIGCHLD)
		t.reap()
	}()
	deadline := time.Now().Add(spinWindow)
	for time.Now().Before(deadline) {
		select {
		case r := <-t.reqs:
			t.reap()
			r.run(r)
		case <-t.closing:
			return // the loop sees it too
		default:
		}
		if t.reap() && t.passed {
			t.passed = false
			deadline = time.Now().Add(spinWindow)
			continue
		}
		// The thread this loop waits for may want this very processor (two cores, many
		// ranks): polling must not keep it from running.
		schedYield()
	}
}

// shutdown detaches every process, waiting a bounded time for their threads to stop.
func (t *Tracer) shutdown() {
	for _, p := range t.procs {
		switch p.phase {
		case phaseLive, phaseHeld:
			t.startDetach(p, nil)
		case phaseAttaching:
			t.abortAttach(p, fmt.Errorf("ptrace: attach pid %d: %w", p.pid, errClosed))
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(t.procs) > 0 && time.Now().Before(deadline) {
		t.reap()
		if len(t.procs) == 0 {
			break
		}
		select {
		case <-t.sigch:
		case <-time.After(20 * time.Millisecond):
		}
	}
	// Whatever did not stop in time is left to the kernel, which detaches it when this thread
	// exits.
	for _, p := range t.procs {
		t.forget(p, errDetached)
		if r := p.pendingReq; r != nil {
			p.pendingReq = nil
			r.finish(fmt.Errorf("ptrace: pid %d: %w", p.pid, errClosed))
		}
	}
}
