package rsp

import (
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hpcdap/hpcdap/target"
)

// Options adjusts Launch and Dial.
type Options struct {
	// Dir, Stdin, Stdout and Stderr are the emulator's working directory and standard files
	// (Launch only; nil files are inherited from this program).
	Dir    string
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
	// Exe is the path of the program's executable (Dial only; Launch finds it in args). It
	// gives Info.Exe and the byte order; without it they come from the stub and the MSR.
	Exe string
	// Timeout bounds each request's wait for its reply (default 10 s). A stub that does not
	// answer in time has lost the conversation: the connection is closed.
	Timeout time.Duration
	// ConnectTimeout bounds how long Dial and Launch retry connecting (default 10 s).
	ConnectTimeout time.Duration
	// InterruptSignal, if not 0, is the host signal Interrupt sends to a launched QEMU ≥ 9 to
	// stop the program. Those versions ignore the interrupt byte and die of a signal the
	// program does not handle, so set it only to a signal the program has a handler for.
	InterruptSignal os.Signal
	// Trace, if not nil, receives every packet sent and received.
	Trace io.Writer
}

// InterruptMethod is how Interrupt stops a running program.
type InterruptMethod int

// Ways of interrupting.
const (
	InterruptByte   InterruptMethod = iota // the protocol's 0x03 byte (gdbserver)
	InterruptSignal                        // a signal to the emulator process (QEMU user mode)
	InterruptNone                          // no way: Interrupt fails with target.ErrUnsupported
)

// String names the method.
func (m InterruptMethod) String() string {
	return [...]string{"interrupt byte", "signal to the emulator", "none"}[m]
}

// Capabilities is what was found out about the stub at run time.
type Capabilities struct {
	QEMU            bool   // the stub answered QEMU's own queries
	EmulatorVersion string // the launched emulator's version ("" if not launched)
	// TextWrites reports whether the stub writes program text (QEMU ≥ 9, gdbserver). When it
	// does not (QEMU 7.2), a 4-byte write of a trap word to text is carried out as a stub
	// breakpoint (Z0) at that address, and reads show the trap word there.
	TextWrites      bool
	StubBreakpoints bool // Z0 works
	Interrupt       InterruptMethod
	NoAck           bool
	PacketSize      int
	Watchpoints     int
}

// thread is the client's view of one thread.
type thread struct {
	tid      int
	reported bool   // the agent knows it is stopped: an event said so, or it was stopped at connect
	action   byte   // pending resumption: 0 none, 'c' continue, 's' step
	sig      int    // Linux signal to deliver with the action
	pc       uint64 // program counter at the current stop, if pcKnown
	pcKnown  bool
}

// virtualTrap is a trap word the stub could not write into text, carried out with Z0.
type virtualTrap struct {
	word uint32 // the trap word the agent wrote
	orig []byte // what memory really holds
}

// Process is a program under a GDB remote-protocol stub (QEMU user mode or gdbserver),
// implementing target.Process.
//
// Run control. The protocol, as QEMU and gdbserver speak it here, is all-stop: after a stop
// reply the stub takes requests until it is resumed as a whole. Process maps the per-thread
// calls of target.Process onto that: Resume marks a thread to be resumed, and the stub is
// resumed (one vCont) once every thread the agent knows to be stopped has been marked; Step
// resumes at once, stepping its thread. A stop reply stops every thread from the protocol's
// point of view; the event names the thread that stopped, and Interrupt of any other thread
// then reports it stopped at once (EventStopped). Under QEMU user mode the other threads keep
// running while one is stopped (ppc64.md §4.11), and several threads can report stops for one
// resume: the extra stop replies are queued and reported, one per resume, without resuming.
type Process struct {
	c       *conn
	opts    Options
	td      *tdesc
	order   binary.ByteOrder
	info    target.Info
	caps    Capabilities
	notes   []string
	pcReg   *register
	vcont   map[byte]bool // vCont actions the stub supports
	multi   bool          // multiprocess thread ids
	pktSize int
	xfer    map[string]bool // qXfer objects the stub offers
	pid     int             // the pid part of thread ids
	timeout time.Duration

	emu     *exec.Cmd     // the launched emulator, or nil
	emuDone chan struct{} // closed when it has exited

	req   sync.Mutex  // held for a request and its reply, and by anything that sends
	reply chan []byte // the answer to the request in flight
	stops chan []byte // stop replies for the stop worker

	mu           sync.Mutex // guards everything below
	running      bool
	inflight     bool // a request waits for its reply
	inflightStop bool // ... and the reply is a stop reply ('?')
	pending      [][]byte
	threads      map[int]*thread
	tidOrder     []int
	gThread      int // the thread Hg selected
	lastResume   string
	interrupts   map[int]bool // threads Interrupt was asked to stop
	interrupting bool
	stray        int               // interrupt signals that may still arrive
	stepping     map[int]uint64    // threads being stepped, with their pc before the step
	words        map[uint64]uint32 // instruction words this client wrote, by address
	virt         map[uint64]virtualTrap
	watch        map[int]watchpoint
	done         bool  // the process exited or was detached
	killed       bool  // a kill request was sent
	lost         error // why the connection ended, if it did
	events       *eventQueue
}

// watchpoint is an armed watchpoint slot.
type watchpoint struct {
	addr uint64
	size int
	kind target.WatchKind
}

var _ target.Process = (*Process)(nil)

// obj names the process in errors.
func (p *Process) obj() string {
	if p.pid > 0 {
		return fmt.Sprintf("pid %d", p.pid)
	}
	return "process"
}

// Info describes the process.
func (p *Process) Info() target.Info { return p.info }

// Capabilities reports what the stub was found to support.
func (p *Process) Capabilities() Capabilities {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.caps
}

// Notes returns remarks on how this back end works around its stub (for example that trap
// words in text are carried out as stub breakpoints), for the agent to log.
func (p *Process) Notes() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.notes...)
}

// Events delivers stops and state changes. It is closed after EventExit or Detach, or when
// the connection to the stub is lost (Err then says why).
func (p *Process) Events() <-chan target.Event { return p.events.out }

// Err returns why the connection to the stub ended, or nil.
func (p *Process) Err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lost
}

// route takes every packet from the stub (on the connection's reader): stop replies while
// running go to the stop worker, answers to the request in flight, and extra stop replies to
// the pending queue. It never blocks: reply holds one packet and only one request is in
// flight; stops holds more than the stub can send between two resumptions.
func (p *Process) route(pkt []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	{
		switch {
		case p.running && isConsoleOutput(pkt):
			// Program output relayed by the stub; the program's own stdout carries it too.
		case p.running && isStopReply(pkt):
			p.running = false
			p.stops <- pkt
		case p.inflight && (p.inflightStop || !isStopReply(pkt)):
			p.inflight = false
			p.reply <- pkt
		case isStopReply(pkt):
			// Another thread stopped (QEMU lets several report for one resume).
			p.pending = append(p.pending, pkt)
		default:
			p.c.logf("unexpected packet %q dropped", pkt)
		}
	}
}

// isConsoleOutput reports an `O` packet: hex-encoded output of the program.
func isConsoleOutput(b []byte) bool {
	if len(b) < 3 || b[0] != 'O' || len(b)%2 != 1 {
		return false
	}
	for _, c := range b[1:] {
		if !isHex(c) {
			return false
		}
	}
	return true
}

// stopWorker handles stop replies that arrive while the program runs, until the connection
// ends.
func (p *Process) stopWorker() {
	for {
		select {
		case pkt := <-p.stops:
			p.req.Lock()
			p.handleStop(pkt)
			p.req.Unlock()
		case <-p.c.done:
			for len(p.stops) > 0 { // the exit reply, sent just before the stub closed
				pkt := <-p.stops
				p.req.Lock()
				p.handleStop(pkt)
				p.req.Unlock()
			}
			p.connectionEnded()
			return
		}
	}
}

// connectionEnded runs when the stub's connection is gone: the event stream ends.
func (p *Process) connectionEnded() {
	err := p.c.closed()
	p.mu.Lock()
	done := p.done
	if !done && p.lost == nil {
		p.lost = fmt.Errorf("rsp: %s: connection to the stub lost: %w", p.obj(), err)
	}
	p.done = true
	p.mu.Unlock()
	if done {
		return
	}
	// A launched emulator that exits closes the connection; its exit status is the program's.
	// A stub told to kill closes it without a reply.
	p.mu.Lock()
	killed := p.killed
	p.mu.Unlock()
	if p.emu == nil && killed {
		p.events.push(target.Event{Kind: target.EventExit, Tid: p.pid, Status: sigKILL})
	}
	if p.emu != nil {
		select {
		case <-p.emuDone:
			if ws, ok := waitStatus(p.emu); ok {
				p.events.push(target.Event{Kind: target.EventExit, Tid: p.pid, Status: ws})
			}
		case <-time.After(2 * time.Second):
		}
	}
	p.events.end()
}

// request sends cmd and returns the stub's reply. The caller holds p.req.
func (p *Process) request(cmd string) ([]byte, error) { return p.exchange(cmd, false) }

func (p *Process) exchange(cmd string, wantStop bool) ([]byte, error) {
	p.mu.Lock()
	if p.lost != nil || p.c.closed() != nil {
		p.mu.Unlock()
		return nil, p.lostErr()
	}
	if p.running {
		p.mu.Unlock()
		return nil, target.ErrRunning
	}
	p.inflight, p.inflightStop = true, wantStop
	p.mu.Unlock()
	if err := p.c.send([]byte(cmd)); err != nil {
		p.abandon(fmt.Errorf("send %s: %w", short(cmd), err))
		return nil, p.lostErr()
	}
	t := time.NewTimer(p.timeout)
	defer t.Stop()
	select {
	case r := <-p.reply:
		return r, nil
	case <-p.c.done:
		return nil, p.lostErr()
	case <-t.C:
		p.abandon(fmt.Errorf("%s: no reply within %v", short(cmd), p.timeout))
		return nil, p.lostErr()
	}
}

// abandon closes a connection whose conversation is out of step.
func (p *Process) abandon(err error) {
	p.mu.Lock()
	if p.lost == nil {
		p.lost = fmt.Errorf("rsp: %s: %w", p.obj(), err)
	}
	p.mu.Unlock()
	p.c.close()
}

func (p *Process) lostErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.lost != nil {
		if p.done {
			return fmt.Errorf("%w (%w)", target.ErrExited, p.lost)
		}
		return p.lost
	}
	if err := p.c.closed(); err != nil {
		return fmt.Errorf("rsp: %s: connection closed: %w", p.obj(), err)
	}
	return fmt.Errorf("rsp: %s: connection closed", p.obj())
}

// short abbreviates a long request for error messages.
func short(cmd string) string {
	if len(cmd) > 40 {
		return cmd[:40] + "..."
	}
	return cmd
}

// stubError is an error reply: Exx, or E.text.
type stubError struct {
	code string // the two characters after E
	text string
}

// Error spells the reply.
func (e *stubError) Error() string {
	if e.text != "" {
		return "stub error " + e.text
	}
	return "stub error E" + e.code
}

// codeEFAULT is how QEMU reports a bad address: E14, errno 14 (EFAULT) in decimal. The
// protocol leaves the meaning of the number to the stub.
const (
	codeEFAULT = "14"
	codeEINVAL = "22"
)

// checkReply turns an error or empty reply into an error naming the operation: Exx becomes a
// stubError (E14 also target.ErrAddress when memory is involved), an empty reply
// target.ErrUnsupported.
func (p *Process) checkReply(op string, r []byte, memory bool) error {
	switch {
	case len(r) == 0:
		return fmt.Errorf("rsp: %s %s: %w", op, p.obj(), target.ErrUnsupported)
	case r[0] == 'E' && len(r) >= 2 && r[1] == '.':
		return fmt.Errorf("rsp: %s %s: %w", op, p.obj(), &stubError{text: string(r[2:])})
	case r[0] == 'E' && len(r) == 3 && isHex(r[1]) && isHex(r[2]):
		se := &stubError{code: string(r[1:])}
		// Memory requests fail for bad addresses: E14 (EFAULT) from QEMU, E01 or others from
		// gdbserver. E22 (EINVAL) is QEMU's answer to a request too large.
		if memory && se.code != codeEINVAL {
			return fmt.Errorf("rsp: %s %s: %w (%w)", op, p.obj(), target.ErrAddress, se)
		}
		return fmt.Errorf("rsp: %s %s: %w", op, p.obj(), se)
	}
	return nil
}

// requestOK sends cmd and expects OK.
func (p *Process) requestOK(op, cmd string) error {
	r, err := p.request(cmd)
	if err != nil {
		return fmt.Errorf("rsp: %s %s: %w", op, p.obj(), err)
	}
	if err := p.checkReply(op, r, false); err != nil {
		return err
	}
	if string(r) != "OK" {
		return fmt.Errorf("rsp: %s %s: unexpected reply %q", op, p.obj(), short(string(r)))
	}
	return nil
}

// threadString formats a thread id for the stub.
func (p *Process) threadString(tid int) string {
	if p.multi {
		return fmt.Sprintf("p%x.%x", p.pid, tid)
	}
	return fmt.Sprintf("%x", tid)
}

// selectThread makes tid the stub's general thread (Hg) for register access.
func (p *Process) selectThread(tid int) error {
	if p.gThread == tid {
		return nil
	}
	if err := p.requestOK("select thread", "Hg"+p.threadString(tid)); err != nil {
		return err
	}
	p.gThread = tid
	return nil
}

// stoppedThread checks that tid exists and the process is stopped (under the protocol).
// The caller holds p.req.
func (p *Process) stoppedThread(op string, tid int) (*thread, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done {
		return nil, fmt.Errorf("rsp: %s %s thread %d: %w", op, p.obj(), tid, target.ErrExited)
	}
	t := p.threads[tid]
	if t == nil {
		return nil, fmt.Errorf("rsp: %s %s thread %d: %w", op, p.obj(), tid, target.ErrNoThread)
	}
	if p.running || t.action != 0 {
		return nil, fmt.Errorf("rsp: %s %s thread %d: %w", op, p.obj(), tid, target.ErrRunning)
	}
	return t, nil
}

// Threads lists the threads, leader first. While the program runs it returns the list as of
// the last stop (the stub cannot be asked then).
func (p *Process) Threads() ([]int, error) {
	p.req.Lock()
	defer p.req.Unlock()
	p.mu.Lock()
	running, done := p.running, p.done
	p.mu.Unlock()
	if done {
		return nil, fmt.Errorf("rsp: threads %s: %w", p.obj(), target.ErrExited)
	}
	if !running {
		if err := p.refreshThreads(); err != nil {
			return nil, err
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]int(nil), p.tidOrder...), nil
}

// listThreads asks the stub for its thread list (qfThreadInfo, qsThreadInfo...).
func (p *Process) listThreads() ([]int, error) {
	var tids []int
	seen := make(map[int]bool)
	cmd := "qfThreadInfo"
	for i := 0; ; i++ {
		r, err := p.request(cmd)
		if err != nil {
			return nil, fmt.Errorf("rsp: list threads %s: %w", p.obj(), err)
		}
		if err := p.checkReply("list threads", r, false); err != nil {
			return nil, err
		}
		if r[0] == 'l' {
			break
		}
		if r[0] != 'm' || i > 1<<16 {
			return nil, fmt.Errorf("rsp: list threads %s: unexpected reply %q", p.obj(), short(string(r)))
		}
		for _, s := range strings.Split(string(r[1:]), ",") {
			id, err := parseThreadID(s)
			if err != nil {
				return nil, fmt.Errorf("rsp: list threads %s: %w", p.obj(), err)
			}
			if id.pid > 0 && p.pid == 0 {
				p.pid = id.pid
			}
			// QEMU sometimes lists a thread twice (ppc64.md §4.11).
			if !seen[id.tid] {
				seen[id.tid] = true
				tids = append(tids, id.tid)
			}
		}
		cmd = "qsThreadInfo"
	}
	// Leader first: the thread whose id is the process id, if there is one.
	sort.SliceStable(tids, func(i, j int) bool { return tids[i] == p.pid && tids[j] != p.pid })
	return tids, nil
}

// refreshThreads updates the thread table from the stub, reporting threads that appeared
// (EventNewThread) and disappeared (EventThreadExit) since the last look. Caller holds p.req.
func (p *Process) refreshThreads() error { return p.refreshThreadsExcept(0) }

// refreshThreadsExcept is refreshThreads without the EventNewThread of thread quiet: the
// thread whose stop reply is being handled, which its stop event introduces. Reported as new
// first, it would be resumed by the agent (as a new thread is) and, being the only thread
// known stopped, resume the whole stub before its stop was even seen.
func (p *Process) refreshThreadsExcept(quiet int) error {
	tids, err := p.listThreads()
	if err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	live := make(map[int]bool, len(tids))
	for _, tid := range tids {
		live[tid] = true
		if p.threads[tid] == nil {
			// New threads are stopped, like every thread while the stub takes requests.
			p.threads[tid] = &thread{tid: tid, reported: true}
			if p.tidOrder != nil && tid != quiet {
				p.events.push(target.Event{Kind: target.EventNewThread, Tid: tid})
			}
		}
	}
	for tid := range p.threads {
		if !live[tid] {
			delete(p.threads, tid)
			delete(p.interrupts, tid)
			if p.gThread == tid {
				p.gThread = 0
			}
			p.events.push(target.Event{Kind: target.EventThreadExit, Tid: tid})
		}
	}
	p.tidOrder = tids
	return nil
}

// Auxv returns the auxiliary vector (qXfer:auxv:read).
func (p *Process) Auxv() ([]byte, error) {
	p.req.Lock()
	defer p.req.Unlock()
	if !p.xfer["auxv"] {
		return nil, fmt.Errorf("rsp: read auxv %s: %w", p.obj(), target.ErrUnsupported)
	}
	return p.readXfer("auxv", "")
}

// readXfer reads a whole qXfer object. Caller holds p.req.
func (p *Process) readXfer(object, annex string) ([]byte, error) {
	chunk := p.pktSize - 16
	if chunk < 64 {
		chunk = 64
	}
	return p.readXferChunks(object, annex, chunk)
}

// readXferChunks reads a qXfer object chunk bytes at a time.
func (p *Process) readXferChunks(object, annex string, chunk int) ([]byte, error) {
	var out []byte
	for {
		cmd := fmt.Sprintf("qXfer:%s:read:%s:%x,%x", object, annex, len(out), chunk)
		r, err := p.request(cmd)
		if err != nil {
			return nil, fmt.Errorf("rsp: read %s %s: %w", object, annex, err)
		}
		if err := p.checkReply("read "+object+" "+annex, r, false); err != nil {
			return nil, err
		}
		if r[0] != 'm' && r[0] != 'l' {
			return nil, fmt.Errorf("rsp: read %s %s: unexpected reply %q", object, annex, short(string(r)))
		}
		data, err := unescapeBinary(r[1:])
		if err != nil {
			return nil, fmt.Errorf("rsp: read %s %s: %w", object, annex, err)
		}
		out = append(out, data...)
		if r[0] == 'l' {
			return out, nil
		}
		if len(data) == 0 || len(out) > 64<<20 {
			return nil, fmt.Errorf("rsp: read %s %s: stub sends no end", object, annex)
		}
	}
}

// waitStatus returns the POSIX wait status of an exited emulator.
func waitStatus(cmd *exec.Cmd) (int, bool) {
	if cmd.ProcessState == nil {
		return 0, false
	}
	ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
	return int(ws), ok
}
