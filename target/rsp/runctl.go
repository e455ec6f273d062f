package rsp

import (
	"fmt"
	"strings"
	"syscall"

	"github.com/hpcdap/hpcdap/ppc64"
	"github.com/hpcdap/hpcdap/target"
)

// Linux signal numbers and si_code values used here.
const (
	sigINT  = 2
	sigTRAP = 5
	sigKILL = 9

	trapBrkpt = 1 // TRAP_BRKPT
	trapTrace = 2 // TRAP_TRACE
	trapHwbkp = 4 // TRAP_HWBKPT

	siginfoSize = 128 // sizeof(siginfo_t) on Linux
)

// Resume lets a stopped thread run, delivering sig (0 for none). The stub is resumed once
// every thread the agent knows to be stopped has been resumed (or one is stepped); until then
// the thread stays stopped in fact. Use Commit to resume the stub while leaving some threads
// held.
func (p *Process) Resume(tid, sig int) error {
	p.req.Lock()
	defer p.req.Unlock()
	t, err := p.resumable("resume", tid, sig)
	if err != nil {
		return err
	}
	p.mu.Lock()
	t.action, t.sig = 'c', sig
	ready := true
	for _, o := range p.threads {
		if o.reported && o.action == 0 {
			ready = false
		}
	}
	p.mu.Unlock()
	if !ready {
		return nil
	}
	return p.flush()
}

// Commit resumes the stub with the resumptions asked for so far; threads the agent knows to
// be stopped and has not resumed stay stopped where the stub can hold them (gdbserver), while
// under QEMU user mode every thread runs (QEMU has no per-thread run state in user mode).
func (p *Process) Commit() error {
	p.req.Lock()
	defer p.req.Unlock()
	p.mu.Lock()
	any := false
	for _, t := range p.threads {
		if t.action != 0 {
			any = true
		}
	}
	running := p.running
	p.mu.Unlock()
	if running || !any {
		return nil
	}
	return p.flush()
}

// Step executes one instruction of a stopped thread, delivering sig first. It resumes the
// stub at once: the other threads resumed with Resume run too, the rest stay stopped (under
// QEMU user mode they run regardless).
func (p *Process) Step(tid, sig int) error {
	p.req.Lock()
	defer p.req.Unlock()
	t, err := p.resumable("step", tid, sig)
	if err != nil {
		return err
	}
	p.mu.Lock()
	t.action, t.sig = 's', sig
	p.mu.Unlock()
	return p.flush()
}

// resumable checks that the agent may resume tid with sig: it exists and is known to be
// stopped, and the protocol has a number for the signal.
func (p *Process) resumable(op string, tid, sig int) (*thread, error) {
	if sig < 0 || sig > 127 || toGDBSignal(sig) == gdbUnknown {
		return nil, fmt.Errorf("rsp: %s %s thread %d: signal %d: %w", op, p.obj(), tid, sig, target.ErrUnsupported)
	}
	t, err := p.stoppedThread(op, tid)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !t.reported {
		return nil, fmt.Errorf("rsp: %s %s thread %d: %w (no stop was reported for it)", op, p.obj(), tid, target.ErrRunning)
	}
	return t, nil
}

// flush resumes the stub with the pending actions, or reports a queued stop instead. The
// caller holds p.req.
func (p *Process) flush() error {
	p.mu.Lock()
	if len(p.pending) > 0 {
		// A stop reply is waiting: the program has not really been resumed since it came,
		// so report it now instead of resuming.
		pkt := p.pending[0]
		p.pending = p.pending[1:]
		p.takeActions()
		p.mu.Unlock()
		p.handleStop(pkt)
		return nil
	}
	cmd, steps, err := p.resumeCommand()
	if err != nil {
		for _, t := range p.threads { // nothing was resumed
			t.action, t.sig = 0, 0
		}
		p.mu.Unlock()
		return err
	}
	for _, tid := range steps {
		t := p.threads[tid]
		pc := uint64(0)
		if t.pcKnown {
			pc = t.pc
		}
		p.stepping[tid] = pc
	}
	p.takeActions()
	p.running = true
	p.lastResume = cmd
	p.mu.Unlock()
	return p.sendResume(cmd)
}

// sendResume sends a resumption, which the stub answers with a stop reply later.
func (p *Process) sendResume(cmd string) error {
	if err := p.c.send([]byte(cmd)); err != nil {
		p.abandon(fmt.Errorf("send %s: %w", cmd, err))
		return p.lostErr()
	}
	return nil
}

// takeActions clears the pending actions of the threads being resumed. Caller holds p.mu.
func (p *Process) takeActions() {
	for _, t := range p.threads {
		if t.action != 0 {
			t.action, t.sig, t.reported = 0, 0, false
		}
		t.pcKnown = false
	}
}

// resumeCommand builds the vCont (or c/s) request for the pending actions. Caller holds p.mu.
func (p *Process) resumeCommand() (string, []int, error) {
	var b strings.Builder
	var steps, conts []int
	held := false
	b.WriteString("vCont")
	for _, tid := range p.tidOrder {
		t := p.threads[tid]
		if t == nil {
			continue
		}
		g := toGDBSignal(t.sig) // checked by resumable
		switch {
		case t.action == 's' && g != 0:
			fmt.Fprintf(&b, ";S%02x:%s", g, p.threadString(tid))
			steps = append(steps, tid)
		case t.action == 's':
			fmt.Fprintf(&b, ";s:%s", p.threadString(tid))
			steps = append(steps, tid)
		case t.action == 'c' && g != 0:
			fmt.Fprintf(&b, ";C%02x:%s", g, p.threadString(tid))
		case t.action == 'c':
			conts = append(conts, tid)
		case t.reported:
			held = true
		}
	}
	if held {
		for _, tid := range conts {
			fmt.Fprintf(&b, ";c:%s", p.threadString(tid))
		}
	} else {
		b.WriteString(";c") // every other thread, including ones not seen yet
	}
	if p.vcont['c'] && p.vcont['s'] {
		return b.String(), steps, nil
	}
	return p.legacyResume(steps)
}

// legacyResume builds Hc + c/s/C/S for a stub without vCont: one thread steps, or all run.
func (p *Process) legacyResume(steps []int) (string, []int, error) {
	var sig, sigTid int
	for _, t := range p.threads {
		if t.sig != 0 {
			if sig != 0 {
				return "", nil, fmt.Errorf("rsp: resume %s: signals for two threads need vCont: %w", p.obj(), target.ErrUnsupported)
			}
			sig, sigTid = toGDBSignal(t.sig), t.tid
		}
	}
	switch {
	case len(steps) > 1:
		return "", nil, fmt.Errorf("rsp: step %s: two threads at once need vCont: %w", p.obj(), target.ErrUnsupported)
	case len(steps) == 1 && sig != 0 && sigTid != steps[0]:
		return "", nil, fmt.Errorf("rsp: step %s: a signal for another thread needs vCont: %w", p.obj(), target.ErrUnsupported)
	case len(steps) == 1:
		// The step runs on the general thread of Hc; the reply must be read before stepping.
		if err := p.setContinueThread(steps[0]); err != nil {
			return "", nil, err
		}
		if sig != 0 {
			return fmt.Sprintf("S%02x", sig), steps, nil
		}
		return "s", steps, nil
	}
	if sig != 0 {
		return fmt.Sprintf("C%02x", sig), nil, nil
	}
	return "c", nil, nil
}

// setContinueThread sends Hc while p.mu is held (it is released around the request).
func (p *Process) setContinueThread(tid int) error {
	p.mu.Unlock()
	defer p.mu.Lock()
	return p.requestOK("select thread", "Hc"+p.threadString(tid))
}

// Interrupt stops a running thread; an EventStopped follows. Under the protocol, a stop of any
// thread stops them all, so a thread that is already stopped without the agent having been told
// is reported stopped at once. How a running program is interrupted depends on the stub
// (Capabilities.Interrupt): gdbserver takes the interrupt byte; QEMU user mode ignores it and
// is sent a signal instead (SIGINT for QEMU 7.2; for QEMU ≥ 9 only Options.InterruptSignal,
// because those versions die of a signal the program does not handle).
func (p *Process) Interrupt(tid int) error {
	p.req.Lock()
	defer p.req.Unlock()
	p.mu.Lock()
	if p.done {
		p.mu.Unlock()
		return fmt.Errorf("rsp: interrupt %s thread %d: %w", p.obj(), tid, target.ErrExited)
	}
	t := p.threads[tid]
	if t == nil {
		p.mu.Unlock()
		return fmt.Errorf("rsp: interrupt %s thread %d: %w", p.obj(), tid, target.ErrNoThread)
	}
	if !p.running {
		if t.action != 0 || !t.reported {
			// Stopped in fact; the agent thinks it runs (or asked it to): report the stop.
			t.action, t.sig, t.reported = 0, 0, true
			ev := target.Event{Kind: target.EventStopped, Tid: tid}
			if t.pcKnown {
				ev.PC = t.pc
			}
			p.events.push(ev)
		}
		p.mu.Unlock()
		return nil
	}
	p.interrupts[tid] = true
	if p.interrupting {
		p.mu.Unlock()
		return nil
	}
	p.interrupting = true
	method := p.caps.Interrupt
	p.mu.Unlock()
	var err error
	switch method {
	case InterruptByte:
		err = p.c.interrupt()
	case InterruptSignal:
		err = p.signalEmulator(0, p.interruptSignal())
	default:
		err = fmt.Errorf("rsp: interrupt %s thread %d: the stub cannot be interrupted: %w", p.obj(), tid, target.ErrUnsupported)
	}
	if err != nil {
		p.mu.Lock()
		p.interrupting = false
		delete(p.interrupts, tid)
		p.mu.Unlock()
		return err
	}
	return nil
}

// Kill sends a signal to one thread or, with tid 0, to the process. It needs a launched
// emulator (host threads carry the program's threads); otherwise only SIGKILL of the whole
// process is possible, through the protocol's kill request. SIGSTOP is refused
// (target.ErrUnsupported): sent to the emulator it would stop QEMU itself, which the program
// never sees; Interrupt stops the program instead.
func (p *Process) Kill(tid, sig int) error {
	if sig == int(syscall.SIGSTOP) {
		return fmt.Errorf("rsp: kill %s thread %d with SIGSTOP: it would stop the emulator, not the program: %w", p.obj(), tid, target.ErrUnsupported)
	}
	if p.emu != nil {
		return p.signalEmulator(tid, syscall.Signal(sig))
	}
	if tid != 0 || sig != sigKILL {
		return fmt.Errorf("rsp: kill %s thread %d signal %d: %w", p.obj(), tid, sig, target.ErrUnsupported)
	}
	p.req.Lock()
	defer p.req.Unlock()
	cmd := "k"
	if p.multi {
		cmd = fmt.Sprintf("vKill;%x", p.pid)
	}
	p.mu.Lock()
	p.killed = true
	p.mu.Unlock()
	if err := p.c.send([]byte(cmd)); err != nil {
		return fmt.Errorf("rsp: kill %s: %w", p.obj(), err)
	}
	return nil
}

// Detach lets the process go: stub breakpoints this client placed are removed and the stub
// resumes every thread. QEMU user mode runs the program on without a debugger; a trap word
// left in its text then kills it. A running process is let go by closing the connection.
func (p *Process) Detach() error {
	p.req.Lock()
	defer p.req.Unlock()
	p.mu.Lock()
	if p.done {
		p.mu.Unlock()
		return fmt.Errorf("rsp: detach %s: %w", p.obj(), target.ErrExited)
	}
	running := p.running
	p.mu.Unlock()
	var err error
	if !running {
		err = p.removeStubState()
		cmd := "D"
		if p.multi {
			cmd = fmt.Sprintf("D;%x", p.pid)
		}
		if e := p.requestOK("detach", cmd); e != nil && cmd != "D" {
			e = p.requestOK("detach", "D")
			if err == nil {
				err = e
			}
		} else if err == nil {
			err = e
		}
	}
	p.mu.Lock()
	p.done = true
	p.mu.Unlock()
	p.c.close()
	p.events.end()
	return err
}

// removeStubState removes the stub breakpoints and watchpoints this client placed.
func (p *Process) removeStubState() error {
	var first error
	for addr := range p.virt {
		if err := p.requestOK("remove breakpoint", fmt.Sprintf("z0,%x,4", addr)); err != nil && first == nil {
			first = err
		}
		delete(p.virt, addr)
	}
	for slot, w := range p.watch {
		if err := p.requestOK("remove watchpoint", fmt.Sprintf("z%d,%x,%x", zKind(w.kind), w.addr, w.size)); err != nil && first == nil {
			first = err
		}
		delete(p.watch, slot)
	}
	return first
}

// handleStop turns a stop reply into events. The caller holds p.req; p.running is false.
func (p *Process) handleStop(pkt []byte) {
	sr, err := parseStop(pkt)
	if err != nil {
		p.abandon(fmt.Errorf("bad stop reply: %w", err))
		return
	}
	if sr.Kind == 'W' || sr.Kind == 'X' {
		p.exited(sr)
		return
	}
	tid, err := p.stopThread(sr)
	if err != nil {
		p.abandon(err)
		return
	}
	p.mu.Lock()
	t := p.threads[tid]
	p.mu.Unlock()
	if t == nil {
		if err := p.refreshThreadsExcept(tid); err != nil {
			p.abandon(err)
			return
		}
		p.mu.Lock()
		t = p.threads[tid]
		if t == nil {
			t = &thread{tid: tid}
			p.threads[tid] = t
			p.tidOrder = append(p.tidOrder, tid)
		}
		p.mu.Unlock()
	}
	sig := toLinuxSignal(sr.Signal)
	p.mu.Lock()
	step, stepping := p.stepping[tid] // cleared below, unless the stop is a stray interrupt
	// A step from an instruction known not to be a trap cannot have stopped at a trap there:
	// the pc is not needed to tell what happened, and is read only when asked for.
	w, known := p.words[step]
	plainStep := stepping && sig == sigTRAP && sr.Watch == "" && step != 0 && known && !ppc64.IsTrap(w)
	t.reported, t.action, t.sig = true, 0, 0
	p.mu.Unlock()
	var pc uint64
	if !plainStep {
		var pcErr error
		pc, pcErr = p.stopPC(tid, sr)
		p.mu.Lock()
		if pcErr == nil {
			t.pc, t.pcKnown = pc, true
		}
		p.mu.Unlock()
	}
	p.mu.Lock()
	if p.caps.QEMU {
		p.gThread = tid // QEMU makes the stopped thread the general one
	} else {
		p.gThread = 0
	}
	isig := p.interruptStopSignal()
	interrupted := p.interrupting && sig == isig && p.caps.Interrupt != InterruptNone
	if !p.interrupting && sig == isig && p.stray > 0 {
		// A late interrupt signal from an earlier Interrupt: nobody waits for it.
		p.stray--
		t.reported = false
		cmd := p.lastResume
		p.running = true
		p.mu.Unlock()
		_ = p.sendResume(cmd) // the same resume: a step resent is still a step
		return
	}
	clear(p.stepping)
	var evs []target.Event
	if interrupted && !p.interrupts[tid] {
		t.reported = false // stopped for another thread's interrupt; the agent thinks it runs
	}
	if !interrupted {
		ev := target.Event{Kind: target.EventSignal, Tid: tid, Signal: sig, PC: pc}
		p.mu.Unlock()
		p.classify(&ev, sr, stepping, step)
		p.mu.Lock()
		evs = append(evs, ev)
		delete(p.interrupts, tid)
		if p.interrupting && p.caps.Interrupt == InterruptSignal {
			p.stray++ // the signal sent to interrupt has not shown itself yet
		}
	}
	// Threads Interrupt was asked about are stopped now too.
	for _, other := range p.tidOrder {
		if !p.interrupts[other] {
			continue
		}
		o := p.threads[other]
		o.reported = true
		ev := target.Event{Kind: target.EventStopped, Tid: other}
		if o.pcKnown {
			ev.PC = o.pc
		}
		evs = append(evs, ev)
	}
	clear(p.interrupts)
	p.interrupting = false
	p.mu.Unlock()
	for _, ev := range evs {
		p.events.push(ev)
	}
}

// stopThread returns the thread a T or S reply is about.
func (p *Process) stopThread(sr stopReply) (int, error) {
	if sr.HasThread {
		if sr.Thread.pid > 0 && p.pid == 0 {
			p.pid = sr.Thread.pid
		}
		return sr.Thread.tid, nil
	}
	r, err := p.request("qC")
	if err != nil {
		return 0, err
	}
	if len(r) > 2 && r[0] == 'Q' && r[1] == 'C' {
		id, err := parseThreadID(string(r[2:]))
		return id.tid, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.tidOrder) > 0 {
		return p.tidOrder[0], nil
	}
	return 0, fmt.Errorf("stop reply names no thread and qC says %q", r)
}

// stopPC returns the pc of the stopped thread: expedited in the reply, or read.
func (p *Process) stopPC(tid int, sr stopReply) (uint64, error) {
	if raw, ok := sr.Regs[p.pcReg.Num]; ok && len(raw) == p.pcReg.Size() {
		return p.order.Uint64(raw), nil
	}
	if p.caps.QEMU {
		p.gThread = tid
	} else {
		p.gThread = 0
	}
	return p.readPC(tid)
}

// classify fills in why a thread stopped with a signal: for SIGTRAP, a breakpoint (a trap word
// or stub breakpoint at the pc), a completed step, or a watchpoint; for other signals, si_code
// and the fault address from the stub's siginfo when it offers it.
func (p *Process) classify(ev *target.Event, sr stopReply, stepping bool, stepFrom uint64) {
	if ev.Signal != sigTRAP {
		p.siginfo(ev)
		return
	}
	switch {
	case sr.Watch != "":
		ev.Trap, ev.Code, ev.Addr = target.TrapWatch, trapHwbkp, sr.WatchAddr
		p.mu.Lock()
		for slot, w := range p.watch {
			if sr.WatchAddr >= w.addr && sr.WatchAddr < w.addr+uint64(w.size) {
				ev.Slot = slot
			}
		}
		p.mu.Unlock()
	case stepping && (ev.PC == 0 || !(ev.PC == stepFrom && p.trapAt(ev.PC))):
		ev.Trap, ev.Code = target.TrapStep, trapTrace
	case sr.SWBreak || sr.HWBreak || p.trapAt(ev.PC):
		ev.Trap, ev.Code = target.TrapBreakpoint, trapBrkpt
	default:
		ev.Trap = target.TrapOther
	}
}

// trapAt reports whether a trap instruction (or a stub breakpoint standing for one) is at pc.
func (p *Process) trapAt(pc uint64) bool {
	p.mu.Lock()
	_, virt := p.virt[pc]
	w, known := p.words[pc]
	p.mu.Unlock()
	if virt {
		return true
	}
	if known {
		return ppc64.IsTrap(w)
	}
	var b [4]byte
	if _, err := p.readMemory(pc, b[:]); err != nil {
		return false
	}
	return ppc64.IsTrap(p.order.Uint32(b[:]))
}

// siginfo fills si_code and si_addr from qXfer:siginfo:read, when the stub offers it.
func (p *Process) siginfo(ev *target.Event) {
	if !p.xfer["siginfo"] {
		return
	}
	// siginfo_t is 128 bytes; QEMU refuses a longer request (E01).
	b, err := p.readXferChunks("siginfo", "", siginfoSize)
	if err != nil || len(b) < 24 {
		return
	}
	ev.Code = int(int32(p.order.Uint32(b[8:])))
	if ev.Code > 0 { // kernel-generated: the union holds si_addr
		ev.Addr = p.order.Uint64(b[16:])
	}
}

// exited reports the end of the process from a W or X reply.
func (p *Process) exited(sr stopReply) {
	status := sr.Status << 8
	if sr.Kind == 'X' {
		status = toLinuxSignal(sr.Signal) & 0x7f
	}
	p.mu.Lock()
	p.done = true
	leader := p.pid
	if len(p.tidOrder) > 0 {
		leader = p.tidOrder[0]
	}
	p.mu.Unlock()
	p.events.push(target.Event{Kind: target.EventExit, Tid: leader, Status: status})
	p.events.end()
	p.c.close()
}
