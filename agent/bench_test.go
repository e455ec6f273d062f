package agent

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/hpcdap/hpcdap/bpcode"
	"github.com/hpcdap/hpcdap/cdti"
	"github.com/hpcdap/hpcdap/internal/testenv"
)

// GetMemory of 8 bytes and of MaxMemorySize (65024) bytes over loopback TCP: one Query per
// operation, request and ack through the real agent and the ptrace back end.
func BenchmarkGetMemory8(b *testing.B)   { benchGetMemory(b, 8) }
func BenchmarkGetMemory64K(b *testing.B) { benchGetMemory(b, cdti.MaxMemorySize) }

func benchGetMemory(b *testing.B, n uint32) {
	h := newHarness(b, "")
	h.spawn(1, progBin, "loop", "1")
	tt := h.dial(1)
	tt.attach(0, 0, "bench")
	// The top of the stack mapping (arguments, environment) is larger than any single read.
	maps, err := readMaps(h.rankPid(0))
	if err != nil {
		b.Fatal(err)
	}
	var addr uint64
	for _, m := range maps {
		if m.path == "[stack]" {
			addr = m.end - uint64(cdti.MaxMemorySize)
		}
	}
	cmd := &cdti.GetMemory{Addr: addr, Length: n}
	b.SetBytes(int64(n))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		rs, err := tt.c.Query(ctx(), 0, cmd)
		if err != nil || rs[0].Code != cdti.CmdSuccess {
			b.Fatalf("GetMemory: %v %v", err, rs)
		}
	}
}

// Breakpoint hit and continue: the program calls hit() b.N times; each hit is a Notify and a
// ContinueProcess (with the step over the planted trap). Reported per hit, and as hits/s.
func BenchmarkBreakpointHitContinue(b *testing.B) {
	h := newHarness(b, "")
	h.spawn(1, progBin, "loop", strconv.Itoa(b.N))
	tt, _ := startStopped(b, h, 1)
	tt.setBreak(0, testenv.NMSymbol(b, progBin, "hit"))
	cont := &cdti.ContinueProcess{}
	b.ResetTimer()
	start := time.Now()
	tt.cont(0)
	hits := 0
	for {
		n := tt.notify()
		if n.Kind == cdti.NotifyTypeTermination {
			break
		}
		hits++
		if _, err := tt.c.Update(ctx(), 0, cont); err != nil {
			b.Fatal(err)
		}
	}
	el := time.Since(start)
	b.StopTimer()
	if hits != b.N {
		b.Fatalf("%d hits, want %d", hits, b.N)
	}
	b.ReportMetric(float64(hits)/el.Seconds(), "hits/s")
}

// The same loop under gdb: `break hit` with `commands silent; continue; end`. Each operation is
// one gdb run of gdbHits hits; gdb's start-up (a one-hit run, outside the timer) is subtracted
// for hits/s, the figure to compare with BenchmarkBreakpointHitContinue.
func BenchmarkGDBBreakpointHitContinue(b *testing.B) {
	needPrograms(b)
	gdb, err := exec.LookPath("gdb")
	if err != nil {
		b.Fatal("gdb not found: install the Debian package gdb")
	}
	script := filepath.Join(b.TempDir(), "cmds")
	os.WriteFile(script, []byte("set pagination off\nset confirm off\nset debuginfod enabled off\n"+
		"break hit\ncommands\nsilent\ncontinue\nend\nrun\n"), 0o644)
	run := func(n int) time.Duration {
		t0 := time.Now()
		out, err := exec.Command(gdb, "-nx", "-batch", "-x", script, "--args", progBin, "loop", strconv.Itoa(n)).CombinedOutput()
		if err != nil {
			b.Fatalf("gdb: %v\n%s", err, out)
		}
		return time.Since(t0)
	}
	const gdbHits = 2000
	var total time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		base := run(1)
		b.StartTimer()
		total += run(gdbHits) - base
	}
	if total > 0 {
		b.ReportMetric(float64(gdbHits*b.N)/total.Seconds(), "hits/s")
	}
}

// Attaching every thread of 64 running processes (5 threads each): one Attach(RanksInNode),
// which makes the agent trace each process and stop and resume all of its threads.
func BenchmarkAttach64Processes(b *testing.B) {
	h := newHarness(b, "")
	pids := map[uint32]int{}
	for r := 0; r < 64; r++ {
		cmd := exec.Command(threadsBin, "1", "forever")
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() {
			cmd.Process.Kill()
			cmd.Wait()
		})
		pids[uint32(r)] = cmd.Process.Pid
	}
	// Wait until every process runs its five threads.
	for _, pid := range pids {
		for countTasks(pid) < 5 {
			time.Sleep(time.Millisecond)
		}
	}
	if err := h.a.AttachRanks(pids); err != nil {
		b.Fatal(err)
	}
	tt := h.dial(1)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ack, err := tt.c.Attach(ctx(), 0, cdti.RanksInNode, cdti.NewTag("bench"), 1)
		if err != nil || len(ack.Ranks) != 64 {
			b.Fatalf("attach: %+v %v", ack, err)
		}
		b.StopTimer()
		if _, err := tt.c.Detach(ctx(), 0, cdti.RanksInNode); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.StopTimer()
	for _, pid := range pids {
		if st := procStatus(b, pid, "TracerPid"); st != "0" {
			b.Errorf("pid %d still traced", pid)
		}
	}
}

// BenchmarkFalseConditionHit: hit is called b.N times under a trap whose condition (hit's
// argument == -1) never holds, decided by the agent: no Notify, nothing over TCP until the
// process ends. "entry": the trap on hit's first instruction (push %rbp) and "frame": on its
// third (the store of its argument to its frame), which the agent emulates; "ripload": on its
// fourth (a RIP-relative load), which it runs out of line. One ptrace stop per hit in each.
func BenchmarkFalseConditionHit(b *testing.B) {
	for _, where := range []string{"entry", "frame", "ripload"} {
		b.Run(where, func(b *testing.B) {
			h := newHarness(b, "")
			h.spawn(1, progBin, "loop", strconv.Itoa(b.N))
			tt, _ := startStopped(b, h, 1)
			addr := testenv.NMSymbol(b, progBin, "hit")
			skip := map[string]int{"entry": 0, "frame": 2, "ripload": 3}[where]
			for range skip {
				addr = nextInstruction(b, progBin, "hit", addr)
			}
			tt.setBreak(0, addr)
			var bld bpcode.Builder
			bld.Reg(5)
			bld.Const(^uint64(0))
			bld.Emit(bpcode.OpEq)
			p, err := bld.Program(false)
			if err != nil {
				b.Fatal(err)
			}
			tt.mustUpdate(0, &cdti.SetTrapCondition{Address: addr, Site: (&bpcode.Site{Cond: p}).Encode()})
			b.ResetTimer()
			start := time.Now()
			tt.cont(0)
			if n := tt.notify(); n.Kind != cdti.NotifyTypeTermination {
				b.Fatalf("notification %+v before the end", n)
			}
			el := time.Since(start)
			b.StopTimer()
			b.ReportMetric(float64(b.N)/el.Seconds(), "hits/s")
		})
	}
}
