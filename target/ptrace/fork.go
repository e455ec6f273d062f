//go:build linux && amd64

package ptrace

import (
	"fmt"
	"os"
	"time"

	"github.com/hpcdap/hpcdap/target"
	"golang.org/x/sys/unix"
)

func (o SpawnOptions) ptraceOptions() uintptr {
	opts := uintptr(seizeOptions)
	if o.FollowForks {
		opts |= unix.PTRACE_O_TRACEFORK | unix.PTRACE_O_TRACEVFORK
	}
	if o.ExitKill {
		opts |= unix.PTRACE_O_EXITKILL
	}
	return opts
}

// SpawnWith is Spawn with SpawnOptions.
func (t *Tracer) SpawnWith(argv, env []string, dir string, stdio []*os.File, opts SpawnOptions) (target.Process, error) {
	return t.spawn(argv, env, dir, stdio, opts)
}

// forked records a new process created by parent's process (which follows forks) and
// reports it on the parent's stream. The child's first stop may have been seen already
// (heldChild) or may come later.
func (t *Tracer) forked(parent *thread, child int) {
	p := parent.p
	if cp := t.procs[child]; cp == nil {
		cp = t.newHeld(child, p)
		th := cp.addThread(child, tsNew)
		th.cloneSeen = true
	}
	if p.phase == phaseLive {
		p.push(target.Event{Kind: target.EventFork, Tid: parent.tid, Child: child, PC: parent.pc()})
	}
}

// heldChild records a followed child whose first stop arrived before its parent's fork event.
func (t *Tracer) heldChild(pid int, parent *process) *process {
	cp := t.newHeld(pid, parent)
	cp.addThread(pid, tsNew)
	return cp
}

func (t *Tracer) newHeld(pid int, parent *process) *process {
	cp := newProcess(t, pid, phaseHeld)
	cp.follow = parent.follow
	t.procs[pid] = cp
	return cp
}

// Adopt takes over a child announced by EventFork: it waits for the child's first stop, sets
// its ptrace options (without PTRACE_O_EXITKILL: the child is not killed if the tracer dies),
// and returns it stopped at its first instruction, like a process from Spawn: no event is sent
// for that stop. Threads and memory work as for any process; Detach lets it go.
//
// A child the tracer has heard of (its parent's fork event) is waited for as long as it takes
// to reach its first stop, which the kernel always reports unless the child dies first: on a
// loaded machine a new child may wait seconds before it first runs. Only a pid the tracer
// knows nothing of is given up on, after a few seconds.
func (t *Tracer) Adopt(pid int, opts AdoptOptions) (target.Process, error) {
	options := uintptr(seizeOptions)
	if opts.FollowForks {
		options |= unix.PTRACE_O_TRACEFORK | unix.PTRACE_O_TRACEVFORK
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		var p *process
		var ready, known bool
		err := t.call(func() error {
			cp := t.procs[pid]
			if cp == nil {
				return nil // not reaped yet, or not a child of a followed process
			}
			if cp.phase != phaseHeld {
				return fmt.Errorf("ptrace: adopt pid %d: not a held child: %w", pid, unix.EINVAL)
			}
			known = true
			th := cp.threads[pid]
			if th == nil || th.state != tsStopped {
				return nil // its first stop has not arrived yet
			}
			if err := ptraceRaw(unix.PTRACE_SETOPTIONS, pid, 0, options); err != nil {
				return wrapErr("adopt", "pid "+fmt.Sprint(pid), errClass(err, false, false), err)
			}
			cp.follow = opts.FollowForks
			cp.phase = phaseLive
			cp.openMem()
			cp.refreshInfo()
			p, ready = cp, true
			return nil
		})
		if err != nil {
			return nil, err
		}
		if ready {
			return p, nil
		}
		if !known && time.Now().After(deadline) {
			return nil, fmt.Errorf("ptrace: adopt pid %d: no held child by that pid: %w", pid, target.ErrNoThread)
		}
		time.Sleep(time.Millisecond)
	}
}
