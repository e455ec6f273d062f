//go:build linux && amd64

package ptrace

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hpcdap/hpcdap/amd64"
	"github.com/hpcdap/hpcdap/internal/testenv"
	"github.com/hpcdap/hpcdap/target"
	"golang.org/x/sys/unix"
)

func benchmarkRead(b *testing.B, size int) {
	tr := newTracer(b)
	p := spawn(b, tr, "count", "-1")
	addr := symAddr(b, p.Info().Pid, progPath, "big_buffer")
	buf := make([]byte, size)
	b.SetBytes(int64(size))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if n, err := p.ReadMemory(addr, buf); err != nil || n != size {
			b.Fatal(n, err)
		}
	}
}

// BenchmarkReadMemory8 and BenchmarkReadMemory64K: latency and throughput of ReadMemory.
func BenchmarkReadMemory8(b *testing.B)   { benchmarkRead(b, 8) }
func BenchmarkReadMemory64K(b *testing.B) { benchmarkRead(b, 64<<10) }

// BenchmarkBreakpointCycle: one iteration is a breakpoint hit handled the way the agent does
// it: the hit is reported, the original byte restored, the PC moved back, one instruction
// stepped, the int3 re-inserted and the thread resumed.
func BenchmarkBreakpointCycle(b *testing.B) {
	tr := newTracer(b)
	p := spawn(b, tr, "count", "-1")
	pid := p.Info().Pid
	addr := symAddr(b, pid, progPath, "target_fn")
	orig := make([]byte, 1)
	p.ReadMemory(addr, orig)
	p.WriteMemory(addr, []byte{0xcc})
	p.Resume(pid, 0)
	trap := []byte{0xcc}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ev := <-p.Events()
		if ev.Trap != target.TrapBreakpoint {
			b.Fatalf("event %+v", ev)
		}
		p.WriteMemory(addr, orig)
		p.SetPC(pid, addr)
		p.Step(pid, 0)
		if ev = <-p.Events(); ev.Trap != target.TrapStep {
			b.Fatalf("event %+v", ev)
		}
		p.WriteMemory(addr, trap)
		p.Resume(pid, 0)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "hits/s")
}

// BenchmarkStopResumeCycle: the floor of a breakpoint hit that does not stop, one ptrace stop
// and one resume: the hit is reported, the trapped instruction (target_fn's first: push %rbp,
// or endbr64) is emulated with one register read, one register write and (for the push) one
// memory write, as the agent does when it can, and the thread resumed. No single step.
func BenchmarkStopResumeCycle(b *testing.B) {
	tr := newTracer(b)
	p := spawn(b, tr, "count", "-1")
	pid := p.Info().Pid
	addr := symAddr(b, pid, progPath, "target_fn")
	orig := make([]byte, 4)
	p.ReadMemory(addr, orig)
	push := orig[0] == 0x55
	if !push && !bytes.Equal(orig, []byte{0xf3, 0x0f, 0x1e, 0xfa}) {
		b.Skipf("target_fn starts with % x, neither push %%rbp nor endbr64", orig)
	}
	p.WriteMemory(addr, []byte{0xcc})
	p.Resume(pid, 0)
	le := binary.LittleEndian
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ev := <-p.Events()
		if ev.Trap != target.TrapBreakpoint {
			b.Fatalf("event %+v", ev)
		}
		regs, err := p.Registers(pid, target.RegsGeneral)
		if err != nil {
			b.Fatal(err)
		}
		if push {
			sp := le.Uint64(regs[amd64.OffRSP:]) - 8
			p.WriteMemory(sp, regs[amd64.OffRBP:amd64.OffRBP+8])
			le.PutUint64(regs[amd64.OffRSP:], sp)
			le.PutUint64(regs[amd64.OffRIP:], addr+1)
		} else {
			le.PutUint64(regs[amd64.OffRIP:], addr+4)
		}
		if err := p.SetRegisters(pid, target.RegsGeneral, regs); err != nil {
			b.Fatal(err)
		}
		p.Resume(pid, 0)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "hits/s")
}

// BenchmarkBreakpointCycleGDB: the same loop under gdb (break target_fn with commands silent;
// continue). One iteration is one hit; gdb's start-up and the program's run without hits are
// measured separately and subtracted. Use a fixed -benchtime (e.g. 2000x): each run starts gdb.
func BenchmarkBreakpointCycleGDB(b *testing.B) {
	needPrograms(b)
	gdb := testenv.NeedTool(b, "gdb", "gdb")
	script := filepath.Join(b.TempDir(), "cycle.gdb")
	os.WriteFile(script, []byte("set startup-with-shell off\nbreak target_fn\ncommands\nsilent\ncontinue\nend\nrun\n"), 0o644)
	run := func(n int) time.Duration {
		start := time.Now()
		out, err := exec.Command(gdb, "-batch", "-nx", "-x", script, "--args", progPath, "count", fmt.Sprint(n)).CombinedOutput()
		if err != nil {
			b.Fatalf("gdb: %v\n%s", err, out)
		}
		return time.Since(start)
	}
	b.StopTimer()
	base := run(0)
	b.StartTimer()
	total := run(b.N)
	b.StopTimer()
	per := (total - base).Seconds() / float64(b.N)
	b.ReportMetric(per*1e9, "ns/hit")
	b.ReportMetric(1/per, "hits/s")
}

// BenchmarkAttach64: time to attach every thread of 64 processes (4 threads each, blocked in
// pause()), one goroutine per process on one Tracer, until all 64 Attach calls have returned.
func BenchmarkAttach64(b *testing.B) {
	needPrograms(b)
	const n = 64
	cmds := make([]*exec.Cmd, n)
	for i := range cmds {
		cmds[i] = exec.Command(progPath, "idle", "4")
		if err := cmds[i].Start(); err != nil {
			b.Fatal(err)
		}
	}
	defer func() {
		for _, c := range cmds {
			c.Process.Kill()
			c.Wait()
		}
	}()
	for _, c := range cmds {
		for {
			tids, _ := taskList(c.Process.Pid)
			if len(tids) == 4 {
				break
			}
			time.Sleep(time.Millisecond)
		}
	}
	tr := newTracer(b)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		procs := make([]target.Process, n)
		var wg sync.WaitGroup
		for j, c := range cmds {
			wg.Add(1)
			go func() {
				defer wg.Done()
				p, err := tr.Attach(c.Process.Pid)
				if err != nil {
					b.Error(err)
					return
				}
				procs[j] = p
			}()
		}
		wg.Wait()
		b.StopTimer()
		for _, p := range procs {
			if p == nil {
				b.FailNow()
			}
			if tids, _ := p.Threads(); len(tids) != 4 {
				b.Fatalf("%d threads", len(tids))
			}
			if err := p.Detach(); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
	}
}

// BenchmarkRawStopResumeCycle is the machine's floor for a breakpoint hit that does not stop,
// without the back end: one OS thread (the tracer) that waits for the int3 stop, reads the
// registers, emulates the trapped push %rbp (one memory write), writes the registers and
// continues the process, with nothing between the system calls. The difference to
// BenchmarkStopResumeCycle is what the back end's goroutines and channels cost.
func BenchmarkRawStopResumeCycle(b *testing.B) {
	needPrograms(b)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	cmd := exec.Command(progPath, "count", "-1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Ptrace: true}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	pid := cmd.Process.Pid
	defer func() {
		unix.Kill(pid, unix.SIGKILL)
		var ws unix.WaitStatus
		unix.Wait4(pid, &ws, 0, nil)
	}()
	var ws unix.WaitStatus
	if _, err := unix.Wait4(pid, &ws, 0, nil); err != nil || !ws.Stopped() {
		b.Fatalf("first stop: %v %v", ws, err)
	}
	addr := symAddr(b, pid, progPath, "target_fn")
	orig := make([]byte, 1)
	if _, err := unix.PtracePeekData(pid, uintptr(addr), orig); err != nil || orig[0] != 0x55 {
		b.Skipf("target_fn starts with % x (%v), not push %%rbp", orig, err)
	}
	if _, err := unix.PtracePokeData(pid, uintptr(addr), []byte{0xcc}); err != nil {
		b.Fatal(err)
	}
	if err := unix.PtraceCont(pid, 0); err != nil {
		b.Fatal(err)
	}
	var regs unix.PtraceRegs
	word := make([]byte, 8)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := unix.Wait4(pid, &ws, 0, nil); err != nil || !ws.Stopped() || ws.StopSignal() != unix.SIGTRAP {
			b.Fatalf("stop %d: %v %v", i, ws, err)
		}
		if err := unix.PtraceGetRegs(pid, &regs); err != nil {
			b.Fatal(err)
		}
		regs.Rsp -= 8
		binary.LittleEndian.PutUint64(word, regs.Rbp)
		if _, err := unix.PtracePokeData(pid, uintptr(regs.Rsp), word); err != nil {
			b.Fatal(err)
		}
		regs.Rip = addr + 1
		if err := unix.PtraceSetRegs(pid, &regs); err != nil {
			b.Fatal(err)
		}
		if err := unix.PtraceCont(pid, 0); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "hits/s")
}

// BenchmarkThreadCreate: the traced program creates and joins b.N threads one after another,
// the tracer resuming each new thread at its announcement (as the agent does); untraced, the
// same program for comparison. Under the tracer each creation costs the clone event's stop of
// the creator, held until the new thread's first stop is seen, and that first stop.
//
//	go test -run '^$' -bench ThreadCreate -benchtime 2000x ./target/ptrace
func BenchmarkThreadCreate(b *testing.B) {
	needPrograms(b)
	b.Run("traced", func(b *testing.B) {
		tr := newTracer(b)
		p := spawn(b, tr, "create", strconv.Itoa(b.N))
		pid := p.Info().Pid
		b.ResetTimer()
		if err := p.Resume(pid, 0); err != nil {
			b.Fatal(err)
		}
		for ev := range p.Events() {
			switch ev.Kind {
			case target.EventNewThread, target.EventStopped:
				p.Resume(ev.Tid, 0)
			case target.EventSignal:
				p.Resume(ev.Tid, ev.Signal)
			}
		}
		b.StopTimer()
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "threads/s")
	})
	b.Run("untraced", func(b *testing.B) {
		b.ResetTimer()
		if out, err := exec.Command(progPath, "create", strconv.Itoa(b.N)).CombinedOutput(); err != nil {
			b.Fatalf("%v: %s", err, out)
		}
		b.StopTimer()
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "threads/s")
	})
}

// BenchmarkSingleStep: ns/op is one instruction of tight()'s loop single-stepped, either
// through Step and its event, one at a time (how=step), or inside one StepRange of 1,000
// steps that the tracer's thread takes alone (how=range).
func BenchmarkSingleStep(b *testing.B) {
	for _, how := range []string{"step", "range"} {
		b.Run("how="+how, func(b *testing.B) {
			tr := newTracer(b)
			p := spawn(b, tr, "tight")
			pid := p.Info().Pid
			fn := symAddr(b, pid, progPath, "tight")
			runTo(b, p, pid, fn)
			loop := target.StepRange{Lo: fn, Hi: fn + 0x100, Max: 1000}
			b.ResetTimer()
			for done := 0; done < b.N; {
				if how == "step" {
					p.Step(pid, 0)
					done++
				} else {
					r := loop
					r.Max = min(1000, b.N-done)
					p.(target.RangeStepper).StepRange(pid, 0, r)
					done += r.Max
				}
				if ev := <-p.Events(); ev.Trap != target.TrapStep {
					b.Fatalf("event %+v", ev)
				}
			}
		})
	}
}
