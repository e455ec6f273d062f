//go:build linux && amd64

package ptrace

import (
	"errors"
	"os/exec"
	"sync"
	"syscall"
	"testing"

	"github.com/hpcdap/hpcdap/internal/testenv"
	"github.com/hpcdap/hpcdap/target"
)

// TestVanishedProcess: the process is SIGKILLed behind the tracer's back while goroutines keep
// using it; every call returns (a target error), none panics, and EventExit reports the kill.
func TestVanishedProcess(t *testing.T) {
	tr := newTracer(t)
	p := spawn(t, tr, "spin", "3")
	pid := p.Info().Pid
	p.Resume(pid, 0)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 64)
			for {
				select {
				case <-stop:
					return
				default:
				}
				tids, _ := p.Threads()
				for _, tid := range tids {
					p.Interrupt(tid)
					p.PC(tid)
					p.Registers(tid, target.RegsFloat)
					p.SetWatchpoint(tid, 0, 0x1000, 8, target.WatchWrite)
					p.Resume(tid, 0)
				}
				p.ReadMemory(0x1000, buf)
				p.Auxv()
			}
		}()
	}
	var news []int
	for len(news) < 2 {
		ev := nextEvent(t, p)
		if ev.Kind == target.EventNewThread {
			news = append(news, ev.Tid)
			p.Resume(ev.Tid, 0)
		}
	}
	syscall.Kill(pid, syscall.SIGKILL)
	for {
		ev := nextEvent(t, p)
		if ev.Kind == target.EventExit {
			if ev.Status != int(syscall.SIGKILL) {
				t.Fatalf("exit status %#x", ev.Status)
			}
			break
		}
	}
	close(stop)
	wg.Wait()
	if _, err := p.PC(pid); !errors.Is(err, target.ErrExited) {
		t.Fatalf("PC after kill: %v", err)
	}
	if _, err := p.Auxv(); !errors.Is(err, target.ErrExited) {
		t.Fatalf("Auxv after kill: %v", err)
	}
}

// TestConcurrentUse: several goroutines read memory and registers of the stopped threads of
// one process at once and agree.
func TestConcurrentUse(t *testing.T) {
	tr := newTracer(t)
	p := spawn(t, tr, "count", "1")
	pid := p.Info().Pid
	addr := symAddr(t, pid, progPath, "target_fn")
	want := testenv.ELFBytes(t, progPath, testenv.NMSymbol(t, progPath, "target_fn"), 32)
	pc0, err := p.PC(pid)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 32)
			for i := 0; i < 200; i++ {
				if _, err := p.ReadMemory(addr, buf); err != nil || string(buf) != string(want) {
					errs <- err
					return
				}
				if pc, err := p.PC(pid); err != nil || pc != pc0 {
					errs <- err
					return
				}
				if _, err := p.Registers(pid, target.RegsGeneral); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("concurrent use: %v", err)
	}
}

// TestCloseDetaches: closing the tracer lets attached processes go; they complete normally.
func TestCloseDetaches(t *testing.T) {
	needPrograms(t)
	cmd := exec.Command(progPath, "run", "200")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	tr, err := NewTracer()
	if err != nil {
		t.Fatal(err)
	}
	p, err := tr.Attach(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	if _, ok := <-p.Events(); ok {
		t.Fatal("events open after Close")
	}
	if _, err := tr.Attach(cmd.Process.Pid); err == nil {
		t.Fatal("Attach after Close succeeded")
	}
	cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != 3 {
		t.Fatalf("after Close: %v, want exit 3", cmd.ProcessState)
	}
}
