package bgq

import (
	"context"
	"debug/elf"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/hpcdap/hpcdap/cdti"
	"github.com/hpcdap/hpcdap/ppc64"
)

// fastTrapRuns is how many times the test program reaches its fast trap in each phase.
const fastTrapRuns = 500

// TestFastTraps is the Redbook's fast trap (ppc64.md §2.4) through a toolctld: the tool installs
// the program's SIGTRAP handler (InstallTrapHandler takes its ELFv1 function descriptor),
// enables fast breakpoints and plants the fast-trap word `twi 14,r31,0x8000|n` on a no-op the
// program runs 500 times. The handler runs every time and the tool hears nothing: its next
// notification is an ordinary breakpoint after the loop. With fast breakpoints disabled there,
// the same word notifies the tool as a breakpoint; it is removed and the program ends, its
// handler having run exactly 500 times. A handler address outside the program is refused.
func TestFastTraps(t *testing.T) {
	s := startFastTrapJob(t, fastTrapRuns)
	c, exe, site, work, out := s.c, s.exe, s.site, s.work, s.out
	ctx := context.Background()
	// Bad input changes nothing: a handler address the program does not map.
	for _, bad := range []uint64{0, 8} {
		rs, err := c.Update(ctx, 0, &cdti.InstallTrapHandler{Handler: bad})
		if err != nil || rs[0].Code != cdti.CmdAddrErr {
			t.Fatalf("InstallTrapHandler(%#x): %v %+v, want CmdAddrErr", bad, err, rs)
		}
	}
	orig := originalAt(t, exe, site)
	update(t, c, 0, &cdti.SetPreferences{BreakpointMode: cdti.FastBreakEnable})
	rs, err := c.Query(ctx, 0, &cdti.GetPreferences{})
	if err != nil || rs[0].Ack.(*cdti.GetPreferencesAck).BreakpointMode != cdti.FastBreakEnable {
		t.Fatalf("GetPreferences: %v %+v", err, rs)
	}
	update(t, c, 0, &cdti.SetContinuationSignal{}, &cdti.ContinueProcess{})

	// Every fast trap went to the program: the first notification is the ordinary breakpoint.
	n := nextNotify(t, c)
	if n.Kind != cdti.NotifyTypeSignal || n.Signal.Reason != cdti.SignalBreakpoint || n.Signal.InstAddress != work {
		t.Fatalf("after the fast traps: %+v %+v, want the breakpoint at work %#x", n, n.Signal, work)
	}
	if b, _ := os.ReadFile(out); !strings.Contains(string(b), fmt.Sprintf("rank 0 fast %d handled %d\n", fastTrapRuns, fastTrapRuns)) {
		t.Fatalf("output %q: the handler did not run once per fast trap", b)
	}

	// Disabled, the same word is an ordinary breakpoint.
	update(t, c, 0, &cdti.SetPreferences{BreakpointMode: cdti.FastBreakDisable},
		&cdti.ResetBreakpoint{Addr: work, Instruction: originalAt(t, exe, work)})
	update(t, c, 0, &cdti.SetContinuationSignal{}, &cdti.ContinueProcess{})
	n = nextNotify(t, c)
	if n.Kind != cdti.NotifyTypeSignal || n.Signal.Reason != cdti.SignalBreakpoint || n.Signal.InstAddress != site {
		t.Fatalf("fast breakpoints disabled: %+v %+v, want a breakpoint notification at %#x", n, n.Signal, site)
	}
	update(t, c, 0, &cdti.ResetBreakpoint{Addr: site, Instruction: orig}, &cdti.RemoveTrapHandler{})
	update(t, c, 0, &cdti.SetContinuationSignal{}, &cdti.ContinueProcess{})
	if n := nextNotify(t, c); n.Kind != cdti.NotifyTypeTermination || !n.Exit.Exited() || n.Exit.ExitCode() != 0 {
		t.Fatalf("at the end: %+v, want a normal exit", n)
	}
	if got := waitOutput(t, s.j, out); !strings.Contains(got, fmt.Sprintf("rank 0 then handled %d\n", fastTrapRuns)) {
		t.Errorf("output %q: the handler ran after fast breakpoints were disabled", got)
	}
}

// fastTrapJob is one rank of testdata/ranks.c running "fast", stopped at its start by a tool
// in control that has installed its trap_handler and planted fast trap 7 at fast_nop and an
// ordinary breakpoint at work.
type fastTrapJob struct {
	j                   *Job
	c                   *cdti.Client
	exe, out            string
	site, work, handler uint64
}

func startFastTrapJob(t testing.TB, runs int) fastTrapJob {
	t.Helper()
	j, out := testJob(t, 1, 1, 1, nil, "fast", fmt.Sprint(runs))
	_, exe := built(t)
	s := fastTrapJob{j: j, exe: exe, out: out, work: workEntry(t, exe), site: symbolValue(t, exe, "fast_nop"),
		handler: symbolValue(t, exe, "trap_handler")}
	ctx := context.Background()
	s.c, _ = dialTool(t, nodePath(j, 0, 0), 1, j.ID())
	if ack, err := s.c.Attach(ctx, 0, cdti.RanksInNode, cdti.NewTag("fast"), 50); err != nil || ack.ReturnCode != cdti.Success {
		t.Fatalf("attach: %v %+v", err, ack)
	}
	ca, err := s.c.Control(ctx, 0, cdti.Control{NotifySet: cdti.Signals(int(syscall.SIGTRAP), int(syscall.SIGSTOP)),
		SendSignal: uint32(syscall.SIGSTOP), DynamicNotify: cdti.DynamicNotifyStart})
	if err != nil || ca.ReturnCode != cdti.Success {
		t.Fatalf("control: %v %+v", err, ca)
	}
	if err := j.Start(); err != nil {
		t.Fatal(err)
	}
	if n := nextNotify(t, s.c); n.Kind != cdti.NotifyTypeSignal || n.Signal.Signal != uint32(syscall.SIGSTOP) {
		t.Fatalf("at start: %+v, want the SIGSTOP", n)
	}
	update(t, s.c, 0, &cdti.InstallTrapHandler{Handler: s.handler},
		&cdti.SetBreakpoint{Addr: s.site, Instruction: ppc64.FastTrapBase | 7},
		&cdti.SetBreakpoint{Addr: s.work, Instruction: ppc64.TrapWordCNK})
	return s
}

// BenchmarkTrapHits measures one hit of a trap the program reaches in a loop, through a
// toolctld: "fast", a fast trap delivered to the program's own SIGTRAP handler with no
// notification, and "notify", the same word with fast breakpoints disabled: a Notify to the
// tool and its ContinueProcess back at each hit.
func BenchmarkTrapHits(b *testing.B) {
	for _, mode := range []cdti.FastBreakMode{cdti.FastBreakEnable, cdti.FastBreakDisable} {
		name := map[cdti.FastBreakMode]string{cdti.FastBreakEnable: "fast", cdti.FastBreakDisable: "notify"}[mode]
		b.Run(name, func(b *testing.B) {
			s := startFastTrapJob(b, b.N)
			update(b, s.c, 0, &cdti.SetPreferences{BreakpointMode: mode})
			b.ResetTimer()
			for {
				update(b, s.c, 0, &cdti.SetContinuationSignal{}, &cdti.ContinueProcess{})
				if n := nextNotify(b, s.c); n.Kind != cdti.NotifyTypeSignal || n.Signal.InstAddress == s.work {
					break
				}
			}
			b.StopTimer()
		})
	}
}

// symbolValue is the value of the ELF symbol name in exe (under ELFv1 a function's is its
// descriptor's address).
func symbolValue(t testing.TB, exe, name string) uint64 {
	t.Helper()
	f, err := elf.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range syms {
		if s.Name == name {
			return s.Value
		}
	}
	t.Fatalf("%s has no symbol %s", exe, name)
	return 0
}
