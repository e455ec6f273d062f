//go:build linux && amd64

package ptrace

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"

	"github.com/hpcdap/hpcdap/procimage"
	"github.com/hpcdap/hpcdap/target"
	"golang.org/x/sys/unix"
)

// Spawn starts argv[0] (looked up in PATH if it has no slash) with environment env (nil: this
// program's), working directory dir ("" for this program's) and open files stdio (index = fd;
// nil entries among 0, 1, 2 are /dev/null), and holds it before its first instruction: the PC
// is the entry point of the program's interpreter (ld.so), or of the program itself if it is
// static. Like a job loaded but not started, the leader is stopped; no event is sent for it.
//
// How the hold works. Go cannot run code between fork and exec, so the child is started with
// PTRACE_TRACEME (syscall.SysProcAttr.Ptrace), which makes the kernel stop it with SIGTRAP right
// after execve, before the new image runs anything. That legacy attachment is only a bridge:
// the tracer detaches with SIGSTOP (the child is now in a job-control stop, still before its
// first instruction), seizes it with PTRACE_SEIZE, sends SIGCONT to end the job-control stop
// and swallows the SIGCONT as it is about to be delivered. When Spawn returns the child is
// traced exactly as an attached process is, and stopped at its first instruction.
// No helper binary and no hook in the program's main function are needed.
func (t *Tracer) Spawn(argv, env []string, dir string, stdio []*os.File) (target.Process, error) {
	return t.spawn(argv, env, dir, stdio, SpawnOptions{})
}

func (t *Tracer) spawn(argv, env []string, dir string, stdio []*os.File, opts SpawnOptions) (target.Process, error) {
	if len(argv) == 0 {
		return nil, fmt.Errorf("ptrace: spawn: empty argv: %w", unix.EINVAL)
	}
	path := argv[0]
	if !strings.Contains(path, "/") {
		lp, err := exec.LookPath(path)
		if err != nil {
			return nil, fmt.Errorf("ptrace: spawn %s: %w", path, err)
		}
		path = lp
	}
	if env == nil {
		env = os.Environ()
	}
	n := max(3, len(stdio))
	files := make([]uintptr, n)
	var devnull *os.File
	for i := range files {
		var f *os.File
		if i < len(stdio) {
			f = stdio[i]
		}
		if f == nil && i < 3 {
			if devnull == nil {
				var err error
				if devnull, err = os.OpenFile(os.DevNull, os.O_RDWR, 0); err != nil {
					return nil, fmt.Errorf("ptrace: spawn %s: %w", path, err)
				}
				defer devnull.Close()
			}
			f = devnull
		}
		if f == nil {
			files[i] = ^uintptr(0) // closed in the child
		} else {
			files[i] = f.Fd()
		}
	}
	var p *process
	err := t.call(func() error {
		attr := &syscall.ProcAttr{Dir: dir, Env: env, Files: files, Sys: &syscall.SysProcAttr{Ptrace: true}}
		pid, err := syscall.ForkExec(path, argv, attr)
		if err != nil {
			return fmt.Errorf("ptrace: spawn %s: %w", path, err)
		}
		th, err := t.holdWith(pid, opts.ptraceOptions())
		if err != nil {
			unix.Kill(pid, unix.SIGKILL)
			var ws unix.WaitStatus
			unix.Wait4(pid, &ws, unix.WALL, nil)
			return fmt.Errorf("ptrace: spawn %s: pid %d: %w", path, pid, err)
		}
		p = newProcess(t, pid, phaseLive)
		p.follow = opts.FollowForks
		// Without /proc/PID/mem, memory still works through process_vm_readv and PTRACE_POKEDATA.
		p.openMem()
		p.refreshInfo()
		th.p = p
		p.threads[pid] = th
		t.threads[pid] = th
		t.procs[pid] = p
		if th.kind == stopSignal && !th.ourSig {
			th.stopPC = th.pc()
			p.push(target.Event{Kind: target.EventSignal, Tid: pid, Signal: th.sig, PC: th.stopPC})
		}
		return nil
	})
	runtime.KeepAlive(stdio)
	if err != nil {
		return nil, err
	}
	return p, nil
}

// holdWith turns the PTRACE_TRACEME child stopped after execve into a thread seized with the
// given ptrace options, stopped.
func (t *Tracer) holdWith(pid int, options uintptr) (*thread, error) {
	wait := func(flags int) (unix.WaitStatus, error) {
		var ws unix.WaitStatus
		for {
			_, err := unix.Wait4(pid, &ws, flags|unix.WALL, nil)
			if err != unix.EINTR {
				return ws, err
			}
		}
	}
	ws, err := wait(0)
	if err != nil {
		return nil, err
	}
	if !ws.Stopped() || ws.StopSignal() != unix.SIGTRAP {
		return nil, fmt.Errorf("after execve: wait status %#x", int(ws))
	}
	if err := ptraceRaw(unix.PTRACE_DETACH, pid, 0, uintptr(unix.SIGSTOP)); err != nil {
		return nil, fmt.Errorf("detach with SIGSTOP: %w", err)
	}
	if ws, err = wait(unix.WUNTRACED); err != nil || !ws.Stopped() {
		return nil, fmt.Errorf("job-control stop: wait status %#x: %v", int(ws), err)
	}
	if err := ptraceRaw(unix.PTRACE_SEIZE, pid, 0, options); err != nil {
		return nil, fmt.Errorf("seize: %w", err)
	}
	if ws, err = wait(0); err != nil || !ws.Stopped() {
		return nil, fmt.Errorf("seize stop: wait status %#x: %v", int(ws), err)
	}
	th := &thread{tid: pid, state: tsStopped}
	th.setStopped(stopGroup)
	if err := unix.Kill(pid, unix.SIGCONT); err != nil {
		return nil, err
	}
	// The kernel now reports the end of the group stop (PTRACE_EVENT_STOP with SIGTRAP), then
	// the SIGCONT itself as a signal-delivery stop, still before the first instruction. If the
	// program blocks SIGCONT it would run instead of dequeuing it: stop at the first report.
	for i := 0; i < 4; i++ {
		if th.kind == stopInterrupt {
			st, err := procimage.ReadStatus(pid)
			if err != nil {
				return nil, err
			}
			if st.SigBlk&(1<<(unix.SIGCONT-1)) != 0 {
				return th, nil
			}
		}
		if err := ptraceRaw(unix.PTRACE_CONT, pid, 0, 0); err != nil {
			return nil, fmt.Errorf("continue from hold: %w", err)
		}
		if ws, err = wait(0); err != nil {
			return nil, err
		}
		switch {
		case !ws.Stopped():
			return nil, fmt.Errorf("exited before its first instruction: wait status %#x", int(ws))
		case waitEvent(ws) == unix.PTRACE_EVENT_STOP && isStopSignal(int(ws.StopSignal())):
			th.setStopped(stopGroup)
		case waitEvent(ws) == unix.PTRACE_EVENT_STOP:
			th.setStopped(stopInterrupt)
		case waitEvent(ws) == 0:
			th.setStopped(stopSignal)
			th.sig = int(ws.StopSignal())
			if ws.StopSignal() == unix.SIGCONT {
				th.ourSig = true
			}
			return th, nil // a different signal is a real one: Spawn reports it
		default:
			return nil, fmt.Errorf("unexpected stop %#x", int(ws))
		}
	}
	return nil, fmt.Errorf("no stop before the first instruction after %d tries", 4)
}
