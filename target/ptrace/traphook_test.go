//go:build linux && amd64

package ptrace

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/hpcdap/hpcdap/amd64"
	"github.com/hpcdap/hpcdap/target"
)

// TestTrapHook: a trap hook decides the hits of a breakpoint on target_fn's first
// instruction, which the program calls 1,000 times. It passes the hit itself (the
// instruction emulated, as the agent does) except every 100th, which it declines and which
// arrives as an event, passed by the test through ResumeWithRegisters. Inside the hook a
// request to the back end (PC) runs in place on the tracer's thread; seq counts the events
// delivered before the hit. The program's own check of its count says every hit was passed
// exactly once.
func TestTrapHook(t *testing.T) {
	const n, every = 1000, 100
	tr := newTracer(t)
	p := spawn(t, tr, "count", "1000")
	pid := p.Info().Pid
	addr := symAddr(t, pid, progPath, "target_fn")
	orig := make([]byte, 4)
	p.ReadMemory(addr, orig)
	push := orig[0] == 0x55
	if !push && !bytes.Equal(orig, []byte{0xf3, 0x0f, 0x1e, 0xfa}) {
		t.Skipf("target_fn starts with % x, neither push %%rbp nor endbr64", orig)
	}
	le := binary.LittleEndian
	// pass returns the registers after target_fn's first instruction, given those at its trap.
	pass := func(regs []byte) []byte {
		out := append([]byte(nil), regs...)
		if push {
			sp := le.Uint64(out[amd64.OffRSP:]) - 8
			if _, err := p.(target.MemoryAsProcess).WriteMemoryAsProcess(sp, out[amd64.OffRBP:amd64.OffRBP+8]); err != nil {
				t.Errorf("push: %v", err)
			}
			le.PutUint64(out[amd64.OffRSP:], sp)
			le.PutUint64(out[amd64.OffRIP:], addr+1)
		} else {
			le.PutUint64(out[amd64.OffRIP:], addr+4)
		}
		return out
	}
	hits, declined := 0, 0
	var firstSeq uint64
	p.(target.TrapHooker).SetTrapHook(func(ev *target.Event, seq uint64, resume func([]byte) error) bool {
		hits++
		if ev.Kind != target.EventSignal || ev.Trap != target.TrapBreakpoint || ev.PC != addr+1 || len(ev.Regs) == 0 {
			t.Errorf("hit %d: hook called with %+v", hits, ev)
			return false
		}
		if hits == 1 {
			firstSeq = seq
		}
		if want := firstSeq + uint64(declined); seq != want {
			t.Errorf("hit %d: seq %d, want %d (%d declined)", hits, seq, want, declined)
		}
		if pc, err := p.PC(ev.Tid); err != nil || pc != addr+1 {
			t.Errorf("hit %d: PC from within the hook: %#x, %v", hits, pc, err)
		}
		if hits%every == 0 {
			declined++
			return false
		}
		if err := resume(pass(ev.Regs)); err != nil {
			t.Errorf("hit %d: resume: %v", hits, err)
			return false
		}
		return true
	})
	if _, err := p.WriteMemory(addr, []byte{0xcc}); err != nil {
		t.Fatal(err)
	}
	if err := p.Resume(pid, 0); err != nil {
		t.Fatal(err)
	}
	reported := 0
	for {
		ev := nextEvent(t, p)
		if ev.Kind == target.EventExit {
			if ev.Status != 0 {
				t.Errorf("exit status %#x, want 0: the program counted a hit twice or not at all", ev.Status)
			}
			break
		}
		if ev.Kind != target.EventSignal || ev.Trap != target.TrapBreakpoint || ev.PC != addr+1 {
			t.Fatalf("event %+v, want the breakpoint", ev)
		}
		reported++
		if err := p.(target.RegsResumer).ResumeWithRegisters(ev.Tid, pass(ev.Regs), 0); err != nil {
			t.Fatal(err)
		}
	}
	// The hook ran on the tracer's thread; the events channel closing after the exit orders
	// its writes before these reads.
	if hits != n || reported != n/every {
		t.Errorf("%d hits offered to the hook, %d reported; want %d and %d", hits, reported, n, n/every)
	}
}
