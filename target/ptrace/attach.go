//go:build linux && amd64

package ptrace

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/hpcdap/hpcdap/procimage"
	"github.com/hpcdap/hpcdap/target"
	"golang.org/x/sys/unix"
)

// Attach seizes every thread of a running process and stops them all. It returns once every
// thread is stopped and a fresh look at /proc/PID/task shows no thread it has not seized
// (threads created meanwhile are caught by PTRACE_O_TRACECLONE or by the next look). No event
// is sent for these stops: Threads lists them. A thread that was already in a signal-delivery
// stop reports its signal as EventSignal. A process in a job-control stop stays stopped when
// its threads are resumed, until SIGCONT.
//
// Guarantee: every event the attach produced (at most one per thread: the signals pending when
// the threads were seized) is already in the Events channel's buffer when Attach returns, in
// order, so that a caller can take them all with non-blocking receives and handle them before
// it resumes any thread; nothing is lost if it does not. The channel is made large enough for
// them (the queue holds them back until then, see eventQueue.release).
func (t *Tracer) Attach(pid int) (target.Process, error) {
	if pid <= 0 {
		return nil, fmt.Errorf("ptrace: attach pid %d: %w", pid, unix.EINVAL)
	}
	var p *process
	err := t.submit(func(r *request) {
		if t.procs[pid] != nil {
			r.finish(fmt.Errorf("ptrace: attach pid %d: already traced by this tracer: %w", pid, unix.EPERM))
			return
		}
		p = newProcess(t, pid, phaseAttaching)
		if err := p.openMem(); err != nil {
			p.events.end()
			r.finish(attachErr(pid, err))
			return
		}
		p.refreshInfo()
		t.procs[pid] = p
		t.busy[p] = true
		p.pendingReq = r
		if t.attachScan(p) == 0 && p.phase == phaseAttaching && len(p.threads) == 0 {
			t.abortAttach(p, wrapErr("attach", "pid "+strconv.Itoa(pid), target.ErrExited, nil))
		}
		t.progress(p)
	})
	if err != nil {
		return nil, err
	}
	return p, nil
}

func attachErr(pid int, err error) error {
	var class error
	if errors.Is(err, os.ErrNotExist) || errors.Is(err, unix.ESRCH) {
		class = target.ErrExited
	}
	if errors.Is(err, unix.EPERM) || errors.Is(err, os.ErrPermission) {
		if b, e := os.ReadFile("/proc/sys/kernel/yama/ptrace_scope"); e == nil && strings.TrimSpace(string(b)) != "0" {
			err = fmt.Errorf("%w (kernel.yama.ptrace_scope is %s)", err, strings.TrimSpace(string(b)))
		}
	}
	return wrapErr("attach", "pid "+strconv.Itoa(pid), class, err)
}

// attachScan seizes and interrupts every thread in /proc/PID/task not yet traced and returns
// how many it added. On a fatal error it turns the attach into a detach.
func (t *Tracer) attachScan(p *process) int {
	tids, err := taskList(p.pid)
	if err != nil {
		t.abortAttach(p, attachErr(p.pid, err))
		return 0
	}
	added := 0
	for _, tid := range tids {
		if p.threads[tid] != nil {
			continue
		}
		err := seize(tid)
		switch {
		case err == nil:
			th := p.addThread(tid, tsRunning)
			th.wantStop = true
			ptraceRaw(unix.PTRACE_INTERRUPT, tid, 0, 0) // if it fails the thread died: its exit follows
			added++
		case err == unix.ESRCH:
			// exited meanwhile
		case err == unix.EPERM:
			st, serr := procimage.ReadStatus(tid)
			switch {
			case serr != nil:
				// exited meanwhile
			case st.TracerPid == t.tid && st.Tgid == p.pid:
				// Created by a thread seized a moment ago: already ours through
				// PTRACE_O_TRACECLONE, its first stop is on the way.
				th := p.addThread(tid, tsNew)
				th.cloneSeen = true
				added++
			case st.State == 'Z' || st.State == 'X':
				if tid == p.pid {
					t.abortAttach(p, attachErr(p.pid, fmt.Errorf("thread group leader has exited: %w", target.ErrUnsupported)))
					return added
				}
			case st.TracerPid != 0:
				t.abortAttach(p, attachErr(p.pid, fmt.Errorf("tid %d already traced by thread %d: %w", tid, st.TracerPid, err)))
				return added
			default:
				t.abortAttach(p, attachErr(p.pid, fmt.Errorf("tid %d: %w", tid, err)))
				return added
			}
		default:
			t.abortAttach(p, attachErr(p.pid, fmt.Errorf("tid %d: %w", tid, err)))
			return added
		}
	}
	return added
}

// abortAttach lets go of what a failed Attach seized; Attach then returns err.
func (t *Tracer) abortAttach(p *process, err error) {
	p.pendingErr = err
	p.phase = phaseDetaching
}

// Detach lets the process go with every thread running. It stops the threads still running,
// clears the debug registers the tracer set, and detaches each thread delivering only what the
// program itself would have received: a pending real signal is delivered; the SIGTRAP of a
// single step or watchpoint is not; the SIGTRAP of a breakpoint whose trap instruction has since
// been removed is not either, and the PC is moved back to re-execute the restored instruction.
// Breakpoints are the agent's: Detach writes no memory. A process in a job-control stop gets
// SIGCONT after the detach, so that it ends up running. The events channel is closed after
// Detach.
func (p *process) Detach() error {
	err := p.t.submit(func(r *request) {
		if err := p.usable(); err != nil {
			r.finish(err)
			return
		}
		if p.phase != phaseLive {
			r.finish(errors.New("detach already in progress"))
			return
		}
		p.t.startDetach(p, r)
	})
	if err != nil {
		return wrapErr("detach", "pid "+strconv.Itoa(p.pid), nil, err)
	}
	return nil
}

func (t *Tracer) startDetach(p *process, r *request) {
	p.phase = phaseDetaching
	p.pendingReq = r
	t.busy[p] = true
	for _, th := range p.threads {
		if (th.state == tsRunning || th.state == tsListening) && !th.wantStop {
			if ptraceRaw(unix.PTRACE_INTERRUPT, th.tid, 0, 0) == nil {
				th.wantStop = true
			}
		}
	}
	t.progress(p)
}

// progress completes an Attach or Detach once every thread of p is stopped.
func (t *Tracer) progress(p *process) {
	for _, th := range p.threads {
		if th.state != tsStopped {
			return
		}
	}
	switch p.phase {
	case phaseAttaching:
		if t.attachScan(p) > 0 || p.phase != phaseAttaching {
			return // new threads: wait for their stops
		}
		p.phase = phaseLive
		delete(t.busy, p)
		p.events.release()
		if r := p.pendingReq; r != nil {
			p.pendingReq = nil
			r.finish(nil)
		}
	case phaseDetaching:
		if t.drainTraps(p) {
			return // wait for the step traps
		}
		t.finishDetach(p)
	}
}

// drainTraps continues every thread that has been stopped by the detach's interrupt and still
// has a SIGTRAP of its own pending — from a single step, or from a breakpoint it hit as the
// interrupt came: the kernel reports PTRACE_EVENT_STOP before it dequeues that trap, and once
// detached the thread would take the SIGTRAP with the default action and kill the process.
// Continued, the thread dequeues the trap first (synchronous signals go first) and stops for
// it; detachSignal then drops it (a breakpoint's only once the agent has removed it). It
// reports whether any thread was continued.
func (t *Tracer) drainTraps(p *process) bool {
	drained := false
	for _, th := range p.threads {
		if th.kind == stopSignal {
			continue
		}
		th.step = false
		// A blocked SIGTRAP (sent, not a trap: traps unblock it) would not stop the thread.
		st, err := procimage.ReadStatus(th.tid)
		trap := uint64(1) << (unix.SIGTRAP - 1)
		if err != nil || st.SigPnd&trap == 0 || st.SigBlk&trap != 0 {
			continue
		}
		if ptraceRaw(unix.PTRACE_CONT, th.tid, 0, 0) == nil {
			th.state = tsRunning
			th.regsOK = false
			drained = true
		}
	}
	return drained
}

func (t *Tracer) finishDetach(p *process) {
	for _, th := range p.threads {
		th.clearAllWatch()
		sig := t.detachSignal(th)
		ptraceRaw(unix.PTRACE_DETACH, th.tid, 0, uintptr(sig))
	}
	if p.jobStopped {
		// The kernel puts a detached thread back into the group stop; "running" is the promise.
		unix.Kill(p.pid, unix.SIGCONT)
	}
	t.forget(p, errDetached)
	if r := p.pendingReq; r != nil {
		p.pendingReq = nil
		r.finish(p.pendingErr)
	}
}

// detachSignal chooses the signal a stopped thread is detached with.
func (t *Tracer) detachSignal(th *thread) int {
	if th.kind != stopSignal || th.ourSig {
		return 0
	}
	if th.sig != int(unix.SIGTRAP) {
		return th.sig
	}
	switch th.trap {
	case target.TrapStep, target.TrapWatch:
		return 0
	case target.TrapBreakpoint:
		pc := th.pc()
		if pc == 0 || pc != th.stopPC {
			return 0 // the agent has moved the thread on
		}
		at := pc - archFacts.PCAfterBreak
		cur := make([]byte, len(archFacts.BreakInstr))
		if n, _ := th.p.readMem(at, cur); n == len(cur) && string(cur) == string(archFacts.BreakInstr) {
			return int(unix.SIGTRAP) // still a trap instruction: the program's own, or one left planted
		}
		regs := th.regs
		setRegsPC(regs[:], at)
		setRegs(th.tid, target.RegsGeneral, regs[:])
		th.regsOK = false
		return 0
	}
	return th.sig
}
