//go:build linux && amd64

package threaddb_test

import (
	"fmt"
	"runtime"
	"syscall"
	"testing"
)

const (
	ptraceSeize     = 0x4206
	ptraceInterrupt = 0x4207
)

// tracer stops every thread of a process with PTRACE_SEIZE and PTRACE_INTERRUPT and reads each
// thread's FS base (the x86_64 thread pointer). ptrace requests must all come from the thread
// that attached, so they run on one locked goroutine. It implements threaddb.Threads.
type tracer struct {
	pid  int
	reqs chan func()
	tids map[int]bool
}

func (tr *tracer) do(f func()) {
	done := make(chan struct{})
	tr.reqs <- func() { f(); close(done) }
	<-done
}

// seizeAll stops every thread of pid; the threads stay stopped until the test ends (or detach).
func seizeAll(t testing.TB, pid int) *tracer {
	t.Helper()
	tr := &tracer{pid: pid, reqs: make(chan func()), tids: map[int]bool{}}
	go func() {
		runtime.LockOSThread()
		for f := range tr.reqs {
			f()
		}
	}()
	var err error
	tr.do(func() { err = tr.attach() })
	if err != nil {
		tr.detach()
		t.Fatalf("ptrace process %d: %v", pid, err)
	}
	t.Cleanup(tr.detach)
	return tr
}

// attach seizes and interrupts threads until a pass finds no new ones.
func (tr *tracer) attach() error {
	for {
		lwps, err := procLWPs(tr.pid)
		if err != nil {
			return err
		}
		added := false
		for _, tid := range lwps {
			if tr.tids[tid] {
				continue
			}
			if _, _, e := syscall.Syscall6(syscall.SYS_PTRACE, ptraceSeize, uintptr(tid), 0, 0, 0, 0); e != 0 {
				return fmt.Errorf("PTRACE_SEIZE %d: %v", tid, e)
			}
			tr.tids[tid] = true
			if _, _, e := syscall.Syscall6(syscall.SYS_PTRACE, ptraceInterrupt, uintptr(tid), 0, 0, 0, 0); e != 0 {
				return fmt.Errorf("PTRACE_INTERRUPT %d: %v", tid, e)
			}
			var ws syscall.WaitStatus
			if _, err := syscall.Wait4(tid, &ws, syscall.WALL, nil); err != nil {
				return fmt.Errorf("wait %d: %v", tid, err)
			}
			added = true
		}
		if !added {
			return nil
		}
	}
}

func (tr *tracer) detach() {
	if tr.tids == nil {
		return
	}
	tr.do(func() {
		for tid := range tr.tids {
			syscall.PtraceDetach(tid)
		}
	})
	tr.tids = nil
	close(tr.reqs)
}

// LWPs lists the stopped process's threads.
func (tr *tracer) LWPs() ([]int, error) { return procLWPs(tr.pid) }

// ThreadPointer returns an LWP's FS base from PTRACE_GETREGS.
func (tr *tracer) ThreadPointer(lwp int) (uint64, error) {
	var regs syscall.PtraceRegs
	var err error
	tr.do(func() { err = syscall.PtraceGetRegs(lwp, &regs) })
	if err != nil {
		return 0, fmt.Errorf("PTRACE_GETREGS %d: %w", lwp, err)
	}
	return regs.Fs_base, nil
}
