//go:build linux && amd64

package ptrace

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/hpcdap/hpcdap/target"
)

var errDetached = errors.New("ptrace: process detached")

type phase int

const (
	phaseAttaching phase = iota // seizing threads; Attach has not returned
	phaseLive                   // under the agent's control
	phaseDetaching              // stopping every thread so that it can be detached
	phaseHeld                   // a followed fork child, stopped, waiting for Adopt
)

// process is one traced process. It implements target.Process.
type process struct {
	t   *Tracer
	pid int

	mu   sync.Mutex // guards info
	info target.Info

	gone  atomic.Pointer[error] // why the process can no longer be used (exited, detached)
	memMu sync.RWMutex
	mem   *os.File // /proc/PID/mem of the current image; reopened after exec

	events *eventQueue

	// Owned by the tracer's thread.
	threads    map[int]*thread
	phase      phase
	pendingReq *request        // Attach or Detach waiting for every thread to stop
	pendingErr error           // a failed Attach: detach what was seized, then report this
	jobStopped bool            // a group (job-control) stop was in effect at the latest report
	follow     bool            // forks are followed (PTRACE_O_TRACEFORK|TRACEVFORK): see SpawnWith
	hook       target.TrapHook // decides breakpoint hits where they are reaped (SetTrapHook)
	pushed     uint64          // events queued so far
}

var _ target.Process = (*process)(nil)

func newProcess(t *Tracer, pid int, ph phase) *process {
	p := &process{t: t, pid: pid, phase: ph, threads: make(map[int]*thread)}
	if ph == phaseAttaching {
		p.events = newHeldEventQueue() // released into its channel when Attach completes
	} else {
		p.events = newEventQueue()
	}
	return p
}

// usable reports why the process cannot be used any more, or nil.
func (p *process) usable() error {
	if e := p.gone.Load(); e != nil {
		return *e
	}
	return nil
}

func (p *process) exited() bool {
	e := p.gone.Load()
	return e != nil && *e == target.ErrExited
}

func (p *process) addThread(tid int, st tstate) *thread {
	th := &thread{tid: tid, p: p, state: st}
	p.threads[tid] = th
	p.t.threads[tid] = th
	return th
}

func (p *process) openMem() error {
	f, err := os.OpenFile("/proc/"+strconv.Itoa(p.pid)+"/mem", os.O_RDWR, 0)
	if err != nil {
		f = nil // an old file would reach the old image: better none
	}
	p.memMu.Lock()
	old := p.mem
	p.mem = f
	p.memMu.Unlock()
	if old != nil {
		old.Close()
	}
	return err
}

func (p *process) closeMem() {
	p.memMu.Lock()
	if p.mem != nil {
		p.mem.Close()
		p.mem = nil
	}
	p.memMu.Unlock()
}

// refreshInfo reads what describes the current image: its path and ELF class and machine.
func (p *process) refreshInfo() {
	dir := "/proc/" + strconv.Itoa(p.pid)
	exe, _ := os.Readlink(dir + "/exe")
	info := target.Info{
		Machine:   archMachine,
		ByteOrder: binary.LittleEndian,
		PtrSize:   8,
		Pid:       p.pid,
		Exe:       exe,
		PageSize:  os.Getpagesize(),
		Arch:      archFacts,
	}
	if f, err := os.Open(dir + "/exe"); err == nil {
		var h [20]byte
		if _, err := f.ReadAt(h[:], 0); err == nil && string(h[:4]) == "\x7fELF" {
			if h[4] == 1 { // ELFCLASS32: a 32-bit program under the same kernel
				info.PtrSize = 4
			}
			info.Machine = elf.Machine(binary.LittleEndian.Uint16(h[18:]))
		}
		f.Close()
	}
	p.mu.Lock()
	p.info = info
	p.mu.Unlock()
}

// Info describes the process. Exe and Machine follow exec.
func (p *process) Info() target.Info {
	p.mu.Lock()
	info := p.info
	p.mu.Unlock()
	info.Arch.BreakInstr = append([]byte(nil), info.Arch.BreakInstr...)
	return info
}

// Events delivers the process's stops and state changes; see eventQueue for buffering.
func (p *process) Events() <-chan target.Event { return p.events.out }

func (p *process) push(ev target.Event) {
	p.pushed++
	p.events.push(ev)
}

// Auxv returns /proc/PID/auxv, the auxiliary vector the kernel gave the current image.
func (p *process) Auxv() ([]byte, error) {
	if err := p.usable(); err != nil {
		return nil, wrapErr("auxv", "pid "+strconv.Itoa(p.pid), nil, err)
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(p.pid) + "/auxv")
	if err != nil {
		var class error
		if p.exited() || errors.Is(err, os.ErrNotExist) {
			class = target.ErrExited
		}
		return nil, wrapErr("auxv", "pid "+strconv.Itoa(p.pid), class, err)
	}
	return b, nil
}

// Threads lists the threads reported to the agent (by Spawn, Attach or EventNewThread and not
// yet gone), leader first. While the process is stopped this equals /proc/PID/task.
func (p *process) Threads() ([]int, error) {
	var tids []int
	err := p.t.call(func() error {
		if err := p.usable(); err != nil {
			return err
		}
		for tid, th := range p.threads {
			if th.state != tsNew {
				tids = append(tids, tid)
			}
		}
		return nil
	})
	if err != nil {
		return nil, wrapErr("threads", "pid "+strconv.Itoa(p.pid), nil, err)
	}
	sortLeaderFirst(p.pid, tids)
	return tids, nil
}

func (p *process) obj(tid int) string { return fmt.Sprintf("pid %d tid %d", p.pid, tid) }

// thread finds a thread the agent knows. Runs on the tracer's thread.
func (p *process) thread(op string, tid int) (*thread, error) {
	if err := p.usable(); err != nil {
		return nil, wrapErr(op, p.obj(tid), nil, err)
	}
	th := p.threads[tid]
	if th == nil || th.state == tsNew {
		return nil, wrapErr(op, p.obj(tid), target.ErrNoThread, nil)
	}
	return th, nil
}

// stopped finds a thread the agent knows and that is in a ptrace stop.
func (p *process) stopped(op string, tid int) (*thread, error) {
	th, err := p.thread(op, tid)
	if err != nil {
		return nil, err
	}
	if th.state != tsStopped {
		return nil, wrapErr(op, p.obj(tid), target.ErrRunning, nil)
	}
	return th, nil
}

// fail wraps a kernel error from an operation on a thread.
func (p *process) fail(op string, tid int, err error) error {
	return wrapErr(op, p.obj(tid), errClass(err, p.exited(), false), err)
}
