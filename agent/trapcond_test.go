package agent

import (
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hpcdap/hpcdap/amd64"
	"github.com/hpcdap/hpcdap/bpcode"
	"github.com/hpcdap/hpcdap/cdti"
	"github.com/hpcdap/hpcdap/internal/testenv"
)

// rdiSite is a site whose condition compares hit's argument (rdi, DWARF register 5) with v
// by op, and whose hit condition is hit n.
func rdiSite(t *testing.T, op bpcode.Op, v uint64, hit bpcode.HitOp, n uint64) []byte {
	t.Helper()
	var b bpcode.Builder
	b.Reg(5)
	b.Const(v)
	b.Emit(op)
	p, err := b.Program(false)
	if err != nil {
		t.Fatal(err)
	}
	return (&bpcode.Site{Cond: p, HitOp: hit, HitN: n}).Encode()
}

// TestTrapConditionDecidedInAgent runs hit 20 times under a trap whose condition holds for
// i == 7 only: one Notify comes, for that call, and the process then runs to its end with
// no other.
func TestTrapConditionDecidedInAgent(t *testing.T) {
	h := newHarness(t, "")
	out := h.spawn(1, progBin, "loop", "20")
	tt, _ := startStopped(t, h, 1)
	hit := testenv.NMSymbol(t, progBin, "hit")
	tt.setBreak(0, hit)
	tt.mustUpdate(0, &cdti.SetTrapCondition{Address: hit, Site: rdiSite(t, bpcode.OpEq, 7, bpcode.HitAny, 0)})
	tt.cont(0)
	n := tt.signalNotify()
	if n.Reason != cdti.SignalBreakpoint || n.InstAddress != hit {
		t.Fatalf("notify %+v, want the breakpoint at hit %#x", n, hit)
	}
	if i := binary64(tt.regs(0, 0), amd64.OffRDI); i != 7 {
		t.Errorf("stopped with i = %d, want 7", i)
	}
	tt.cont(0)
	if st := tt.waitTermination(0); st != 0 {
		t.Errorf("exit status %v", st)
	}
	out.waitFor(t, "iterations 20 counter 190")
}

// TestTrapConditionHitCount counts the hits whose condition holds (even i) and stops from
// the third on, as a hit condition ">= 3" asks: the stops are at i = 4, 6, 8.
func TestTrapConditionHitCount(t *testing.T) {
	h := newHarness(t, "")
	h.spawn(1, progBin, "loop", "14")
	tt, _ := startStopped(t, h, 1)
	hit := testenv.NMSymbol(t, progBin, "hit")
	tt.setBreak(0, hit)
	var b bpcode.Builder
	b.Reg(5)
	b.Const(1)
	b.Emit(bpcode.OpAnd)
	b.Emit(bpcode.OpLNot)
	p, err := b.Program(false)
	if err != nil {
		t.Fatal(err)
	}
	site := (&bpcode.Site{Cond: p, HitOp: bpcode.HitGE, HitN: 3}).Encode()
	tt.mustUpdate(0, &cdti.SetTrapCondition{Address: hit, Site: site})
	for _, want := range []uint64{4, 6, 8} {
		tt.cont(0)
		n := tt.signalNotify()
		if n.Reason != cdti.SignalBreakpoint {
			t.Fatalf("notify %+v", n)
		}
		if i := binary64(tt.regs(0, 0), amd64.OffRDI); i != want {
			t.Errorf("stopped with i = %d, want %d", i, want)
		}
	}
	// Replacing it, carrying on from its count (5: i = 0, 2, 4, 6, 8): the hit condition
	// ">= 7" of the new one (every hit holds) is met at the 7th, i = 10.
	every := (&bpcode.Site{HitOp: bpcode.HitGE, HitN: 7}).Encode()
	rs := tt.update(0, &cdti.SetTrapCondition{Address: hit, Site: every, Hits: cdti.TrapHitsCarryOn})
	if ack, ok := rs[0].Ack.(*cdti.SetTrapConditionAck); rs[0].Code != cdti.CmdSuccess || !ok || ack.Hits != 5 {
		t.Errorf("replace: %v %+v, want the replaced count 5", rs[0].Code, rs[0].Ack)
	}
	// Removing it hands its count back (7: i = 9 and 10 counted too); every hit is reported again.
	tt.cont(0)
	tt.signalNotify()
	if i := binary64(tt.regs(0, 0), amd64.OffRDI); i != 10 {
		t.Errorf("after the replacement: stopped with i = %d, want 10", i)
	}
	rs = tt.update(0, &cdti.SetTrapCondition{Address: hit})
	if ack, ok := rs[0].Ack.(*cdti.SetTrapConditionAck); !ok || ack.Hits != 7 {
		t.Errorf("remove: %+v, want the count 7", rs[0].Ack)
	}
	tt.cont(0)
	tt.signalNotify()
	if i := binary64(tt.regs(0, 0), amd64.OffRDI); i != 11 {
		t.Errorf("after the condition was removed: stopped with i = %d, want 11", i)
	}
}

// TestTrapConditionError reads through a null pointer: the hit stops with the reason
// SignalConditionError.
func TestTrapConditionError(t *testing.T) {
	h := newHarness(t, "")
	h.spawn(1, progBin, "loop", "3")
	tt, _ := startStopped(t, h, 1)
	hit := testenv.NMSymbol(t, progBin, "hit")
	tt.setBreak(0, hit)
	var b bpcode.Builder
	b.Const(8)
	b.Sized(bpcode.OpLoad, 8)
	p, _ := b.Program(false)
	tt.mustUpdate(0, &cdti.SetTrapCondition{Address: hit, Site: (&bpcode.Site{Cond: p}).Encode()})
	tt.cont(0)
	n := tt.signalNotify()
	if n.Reason != cdti.SignalConditionError || n.InstAddress != hit {
		t.Fatalf("notify %+v, want a condition error at hit %#x", n, hit)
	}
	if i := binary64(tt.regs(0, 0), amd64.OffRDI); i != 0 {
		t.Errorf("stopped with i = %d, want the first call", i)
	}
}

// TestTrapConditionRefused: no trap there, a malformed site, a log message and an agent
// configured as a CNK are refused, and the trap keeps reporting every hit.
func TestTrapConditionRefused(t *testing.T) {
	h := newHarness(t, "")
	h.spawn(1, progBin, "loop", "3")
	tt, _ := startStopped(t, h, 1)
	hit := testenv.NMSymbol(t, progBin, "hit")
	good := rdiSite(t, bpcode.OpEq, 2, bpcode.HitAny, 0)
	if rs := tt.update(0, &cdti.SetTrapCondition{Address: hit, Site: good}); rs[0].Code != cdti.CmdParmErr {
		t.Errorf("condition without a trap: %v, want CmdParmErr", rs[0].Code)
	}
	tt.setBreak(0, hit)
	if rs := tt.update(0, &cdti.SetTrapCondition{Address: hit, Site: []byte{1, 2, 3}}); rs[0].Code != cdti.CmdParmErr {
		t.Errorf("malformed site: %v, want CmdParmErr", rs[0].Code)
	}
	var v bpcode.Builder
	v.Reg(5)
	vp, _ := v.Program(false)
	logSite := (&bpcode.Site{Log: []bpcode.LogPart{{Text: "i=", Format: bpcode.FmtSigned, Expr: vp}}}).Encode()
	if rs := tt.update(0, &cdti.SetTrapCondition{Address: hit, Site: logSite}); rs[0].Code != cdti.CmdParmErr {
		t.Errorf("log message: %v, want CmdParmErr", rs[0].Code)
	}
	h.a.noTrapConds = true
	if rs := tt.update(0, &cdti.SetTrapCondition{Address: hit, Site: good}); rs[0].Code != cdti.CmdInval {
		t.Errorf("agent configured as a CNK: %v, want CmdInval", rs[0].Code)
	}
	tt.cont(0)
	if n := tt.signalNotify(); n.Reason != cdti.SignalBreakpoint || binary64(tt.regs(0, 0), amd64.OffRDI) != 0 {
		t.Errorf("first hit not reported: %+v", n)
	}
}

// TestStopProcessWhilePassingHits: four threads call ool_bump 50,000 times each through a
// breakpoint whose condition never holds, hits the back end passes where it reaps them
// (trapHook), while the tool stops the process twenty times: each stop is one
// Notify(SIGSTOP) with every thread in a traced stop, no signal left behind and no
// notification after it; continued, the program counts every call of every thread, no hit
// was stepped over, and hits were passed where reaped (none was before the trap hook).
func TestStopProcessWhilePassingHits(t *testing.T) {
	const threads, per = 4, 50000
	bin := buildOOL(t, false)
	h := newHarness(t, "")
	out := h.spawn(1, bin, "threads", strconv.Itoa(threads), strconv.Itoa(per))
	tt, _ := startStopped(t, h, 1)
	pid := h.rankPid(0)
	a := testenv.NMSymbol(t, bin, "ool_bump")
	tt.setBreak(0, a)
	tt.mustUpdate(0, &cdti.SetTrapCondition{Address: a, Site: neverSite(t)})
	tt.cont(0)
	for deadline := time.Now().Add(30 * time.Second); countTasks(pid) != threads+1; {
		if time.Now().After(deadline) {
			t.Fatalf("the program has %d threads, want %d", countTasks(pid), threads+1)
		}
		time.Sleep(time.Millisecond)
	}
	for i := range 20 {
		time.Sleep(time.Duration(i%5) * time.Millisecond)
		if !tt.stopProcess() {
			t.Fatalf("stop %d: a running process answered that no notification comes", i)
		}
		n := tt.signalNotify()
		if n.Signal != uint32(syscall.SIGSTOP) || n.Reason != cdti.SignalInterrupt {
			t.Fatalf("stop %d: notify %+v, want SIGSTOP Interrupt", i, n)
		}
		for tid, st := range taskStates(t, pid) {
			if st != 't' {
				t.Errorf("stop %d: thread %d in state %c, want t (traced stop)", i, tid, st)
			}
		}
		for _, f := range []string{"SigPnd", "ShdPnd"} {
			if v := procStatus(t, pid, f); strings.Trim(v, "0") != "" {
				t.Errorf("stop %d: %s %s: a signal was left in the kernel", i, f, v)
			}
		}
		tt.noNotify(20 * time.Millisecond)
		tt.cont(0)
	}
	if st := waitPassing(t, h, tt); st != 0 {
		t.Fatalf("exit status %v (output %q)", st, out.String())
	}
	for i := range threads {
		out.waitFor(t, "thread "+strconv.Itoa(i)+": "+strconv.Itoa(per)+"\n")
	}
	out.waitFor(t, "total "+strconv.Itoa(threads*per)+"\n")
	pc := passesOf(t, h)
	if pc.stepped != 0 || pc.outOfLine < threads*per {
		t.Errorf("passes %+v, want all %d out of line and none stepped", pc, threads*per)
	}
	if pc.hooked == 0 {
		t.Errorf("passes %+v: no hit passed where the back end reaped it", pc)
	}
}

// TestTrapHitCountPassedWhereReaped: hit is called 3,000 times under a trap without a
// condition whose hit condition is "== 2500": the 2,499 hits before it count but do not stop,
// and are passed where the back end reaps them, mixed with those the rank's goroutine decides
// when it is busy; the one stop is at the 2,500th call (i = 2499), so that no hit was counted
// twice or missed, and the run ends without another.
func TestTrapHitCountPassedWhereReaped(t *testing.T) {
	h := newHarness(t, "")
	out := h.spawn(1, progBin, "loop", "3000")
	tt, _ := startStopped(t, h, 1)
	hit := testenv.NMSymbol(t, progBin, "hit")
	tt.setBreak(0, hit)
	site := (&bpcode.Site{HitOp: bpcode.HitEQ, HitN: 2500}).Encode()
	tt.mustUpdate(0, &cdti.SetTrapCondition{Address: hit, Site: site})
	tt.cont(0)
	n := tt.signalNotify()
	if n.Reason != cdti.SignalBreakpoint || n.InstAddress != hit {
		t.Fatalf("notify %+v, want the breakpoint at hit %#x", n, hit)
	}
	if i := binary64(tt.regs(0, 0), amd64.OffRDI); i != 2499 {
		t.Errorf("stopped with i = %d, want 2499 (the 2,500th hit)", i)
	}
	pc := passesOf(t, h)
	tt.cont(0)
	if st := tt.waitTermination(0); st != 0 {
		t.Errorf("exit status %v", st)
	}
	out.waitFor(t, "iterations 3000")
	if pc.hooked == 0 {
		t.Errorf("passes %+v: no counted hit passed where the back end reaped it", pc)
	}
}

// TestEvaluateValue asks a process stopped at hit(7) for its argument (rdi) with
// EvaluateValue: the value in each format, a program whose place check fails, and malformed
// requests refused with CmdParmErr, after which the process answers as before.
func TestEvaluateValue(t *testing.T) {
	h := newHarness(t, "")
	h.spawn(1, progBin, "loop", "20")
	tt, _ := startStopped(t, h, 1)
	hit := testenv.NMSymbol(t, progBin, "hit")
	tt.setBreak(0, hit)
	tt.mustUpdate(0, &cdti.SetTrapCondition{Address: hit, Site: rdiSite(t, bpcode.OpEq, 7, bpcode.HitAny, 0)})
	tt.cont(0)
	if n := tt.signalNotify(); n.Reason != cdti.SignalBreakpoint {
		t.Fatalf("notify %+v", n)
	}
	prog := func(pc uint64) []byte {
		var b bpcode.Builder
		b.Reg(amd64.DwarfRIP)
		b.Const(pc)
		b.Emit(bpcode.OpEq)
		b.Emit(bpcode.OpAssert)
		b.Reg(5)
		p, err := b.Program(false)
		if err != nil {
			t.Fatal(err)
		}
		return p.Encode()
	}
	for _, c := range []struct {
		cmd  *cdti.EvaluateValue
		code cdti.CmdReturnCode
		text string
	}{
		{&cdti.EvaluateValue{Format: uint8(bpcode.FmtSigned), Program: prog(hit)}, cdti.CmdSuccess, "7"},
		{&cdti.EvaluateValue{Format: uint8(bpcode.FmtChar), Program: prog(hit)}, cdti.CmdSuccess, `7 '\a'`},
		{&cdti.EvaluateValue{Format: uint8(bpcode.FmtBool), Program: prog(hit)}, cdti.CmdSuccess, "7"}, // not 0 or 1
		{&cdti.EvaluateValue{Format: uint8(bpcode.FmtSigned), Program: prog(hit + 1)}, cdti.CmdParmErr, ""},
		{&cdti.EvaluateValue{Format: uint8(bpcode.FmtText), Program: prog(hit)}, cdti.CmdParmErr, ""},
		{&cdti.EvaluateValue{Format: 200, Program: prog(hit)}, cdti.CmdParmErr, ""},
		{&cdti.EvaluateValue{Format: uint8(bpcode.FmtSigned), Program: []byte{1, 0, 99}}, cdti.CmdParmErr, ""},
		// The executable's bias from the link map ("" names it; prog is no PIE, its bias is 0)
		// places hit where the thread is; a module outside the table or not loaded fails.
		{&cdti.EvaluateValue{Format: uint8(bpcode.FmtBool), Program: atModule(t, 0, hit), Modules: []string{""}},
			cdti.CmdSuccess, "true"},
		{&cdti.EvaluateValue{Format: uint8(bpcode.FmtBool), Program: atModule(t, 1, 0), Modules: []string{""}}, cdti.CmdParmErr, ""},
		{&cdti.EvaluateValue{Format: uint8(bpcode.FmtBool), Program: atModule(t, 0, 0), Modules: []string{"/no/such.so"}},
			cdti.CmdParmErr, ""},
	} {
		r := tt.query(0, c.cmd)
		a, _ := r.Ack.(*cdti.EvaluateValueAck)
		if r.Code != c.code || (c.code == cdti.CmdSuccess && (a == nil || a.Text != c.text)) {
			t.Errorf("format %d: %v %+v, want %v %q", c.cmd.Format, r.Code, r.Ack, c.code, c.text)
		}
	}
	if i := binary64(tt.regs(0, 0), amd64.OffRDI); i != 7 {
		t.Errorf("rdi = %d after the evaluations, want 7", i)
	}
}

// atModule is a program that says whether the thread's pc is off bytes into module i.
func atModule(t *testing.T, i int, off uint64) []byte {
	t.Helper()
	var b bpcode.Builder
	b.ModBias(i)
	b.Const(off)
	b.Emit(bpcode.OpAdd)
	b.Reg(amd64.DwarfRIP)
	b.Emit(bpcode.OpEq)
	p, err := b.Program(false)
	if err != nil {
		t.Fatal(err)
	}
	return p.Encode()
}
