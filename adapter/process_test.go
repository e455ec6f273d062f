package adapter

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-dap"
)

// TestSignalException: every rank faults; the first reports an exception whose details name
// the signal, the faulting address and the rank, as gdb's $_siginfo does.
func TestSignalException(t *testing.T) {
	t.Parallel()
	p := compileC(t, "stacks")
	d := newDAP(t, viaPipe)
	defer d.close()
	d.launch(map[string]any{"program": p.bin, "args": []string{"segv"}, "np": 2})
	d.call("configurationDone", nil, nil)
	st := d.stopped()
	if st.Reason != "exception" || !st.AllThreadsStopped {
		t.Fatalf("stopped %+v", st)
	}
	rank := -1
	ranks := d.ranks()
	for _, r := range ranks.Ranks {
		if r.ThreadID == st.ThreadId {
			rank = r.Rank
			if r.Signal != "SIGSEGV" || r.StopReason != "exception" {
				t.Errorf("rank state %+v", r)
			}
		}
	}
	oracle := gdbOracle(t, p, []string{fmt.Sprintf("HPCDAP_RANK=%d", rank)}, []string{"segv"}, "run", "oracle-dump", "kill")[0]
	compareFrames(t, d.stackTrace(st.ThreadId), oracle.Frames)
	var ei dap.ExceptionInfoResponseBody
	d.call("exceptionInfo", map[string]any{"threadId": st.ThreadId}, &ei)
	if oracle.SiAddr == nil || oracle.Signal != 11 {
		t.Fatalf("gdb saw no SIGSEGV: %+v", oracle)
	}
	wantAddr := fmt.Sprintf("%#x", *oracle.SiAddr)
	if ei.ExceptionId != "SIGSEGV" || ei.BreakMode != "always" || !strings.Contains(ei.Description, wantAddr) ||
		!strings.Contains(ei.Description, fmt.Sprintf("rank %d", rank)) {
		t.Errorf("exceptionInfo %+v; want SIGSEGV at %s on rank %d", ei, wantAddr, rank)
	}
	if ei.Details == nil || !strings.Contains(ei.Details.StackTrace, "main") {
		t.Errorf("exception details: %+v", ei.Details)
	}
	// Continuing delivers the signal: the ranks die of it. A rank that the all-stop stopped
	// before its own fault reports that fault later: continue it too.
	d.call("continue", map[string]any{"threadId": st.ThreadId}, nil)
	var ex dap.ExitedEventBody
	for {
		m, err := d.c.WaitAny([]string{"stopped", "exited"}, 30*time.Second, focusStop)
		if err != nil {
			t.Fatal(err)
		}
		if m.Event == "exited" {
			m.Decode(&ex)
			break
		}
		var b dap.StoppedEventBody
		m.Decode(&b)
		if b.Reason != "exception" {
			t.Errorf("stopped %+v while running to the end", b)
		}
		d.call("continue", map[string]any{"threadId": b.ThreadId}, nil)
	}
	if ex.ExitCode != 128+11 {
		t.Errorf("exit code %d, want %d (SIGSEGV)", ex.ExitCode, 128+11)
	}
	for _, r := range d.ranks().Ranks {
		if r.Signal != "SIGSEGV" || r.ExitCode == nil || *r.ExitCode != 139 {
			t.Errorf("rank %d: %+v", r.Rank, r)
		}
	}
	if out := allOutput(d); !strings.Contains(out, "killed by SIGSEGV") {
		t.Errorf("no kill message in output:\n%s", out)
	}
}

// TestExitCodesPerRank: rank 1 of stacks exits with 3, the others with 0.
func TestExitCodesPerRank(t *testing.T) {
	t.Parallel()
	p := compileC(t, "stacks")
	d := newDAP(t, viaTCP)
	defer d.close()
	d.launch(map[string]any{"program": p.bin, "np": 3})
	d.call("configurationDone", nil, nil)
	var ex dap.ExitedEventBody
	d.event("exited").Decode(&ex)
	d.event("terminated")
	if ex.ExitCode != 3 {
		t.Errorf("job exit code %d, want 3 (rank 1's)", ex.ExitCode)
	}
	want := map[int]int{0: 0, 1: 3, 2: 0}
	for _, r := range d.ranks().Ranks {
		if r.State != "exited" || r.ExitCode == nil || *r.ExitCode != want[r.Rank] {
			t.Errorf("rank %d: %+v, want exit code %d", r.Rank, r, want[r.Rank])
		}
	}
	out := allOutput(d)
	for r, c := range want {
		if !strings.Contains(out, fmt.Sprintf("rank %d exited with code %d", r, c)) {
			t.Errorf("output lacks rank %d's exit code:\n%s", r, out)
		}
	}
}

// TestCoreFile debugs a core dumped by gdb at the fault: stacks, variables, exception info
// and disassembly work; running does not.
func TestCoreFile(t *testing.T) {
	t.Parallel()
	p := compileC(t, "stacks")
	core := filepath.Join(t.TempDir(), "stacks.core")
	oracle := gdbOracle(t, p, []string{"HPCDAP_RANK=0", `ORACLE_EXPRS=["sh", "total", "values"]`}, []string{"segv"},
		"run", "oracle-dump", "generate-core-file "+core, "kill")[0]
	if _, err := os.Stat(core); err != nil {
		t.Fatalf("gdb wrote no core: %v", err)
	}
	d := newDAP(t, viaPipe)
	defer d.close()
	d.launch(map[string]any{"program": p.bin, "coreFile": core})
	d.call("configurationDone", nil, nil)
	st := d.stopped()
	if st.Reason != "exception" || !strings.Contains(st.Text, "SIGSEGV") {
		t.Errorf("stopped %+v", st)
	}
	var threads dap.ThreadsResponseBody
	d.call("threads", nil, &threads)
	if len(threads.Threads) != 1 || !strings.HasPrefix(threads.Threads[0].Name, "rank 0 · main (LWP ") {
		t.Errorf("threads %+v", threads)
	}
	frames := d.stackTrace(st.ThreadId)
	compareFrames(t, frames, oracle.Frames)
	locals := d.scopeVars(frames[0].Id, "Locals")
	for _, name := range []string{"sh", "total"} {
		if locals[name].Value != oracle.Exprs[name] {
			t.Errorf("core: %s = %q, gdb %q", name, locals[name].Value, oracle.Exprs[name])
		}
	}
	var ev dap.EvaluateResponseBody
	d.call("evaluate", map[string]any{"expression": "values", "frameId": frames[0].Id, "context": "watch"}, &ev)
	if ev.Result != oracle.Exprs["values"] {
		t.Errorf("core: values = %q, gdb %q", ev.Result, oracle.Exprs["values"])
	}
	var ei dap.ExceptionInfoResponseBody
	d.call("exceptionInfo", map[string]any{"threadId": st.ThreadId}, &ei)
	if ei.ExceptionId != "SIGSEGV" {
		t.Errorf("exceptionInfo %+v", ei)
	}
	var dis struct {
		Instructions []DisassembledInstruction `json:"instructions"`
	}
	d.call("disassemble", map[string]any{"memoryReference": frames[0].InstructionPointerReference, "instructionCount": 3}, &dis)
	if len(dis.Instructions) != 3 || dis.Instructions[0].PresentationHint == "invalid" {
		t.Errorf("disassemble in a core: %+v", dis.Instructions)
	}
	var ps ParallelStacksBody
	d.call("hpcdap/parallelStacks", map[string]any{}, &ps)
	if ps.Total != 1 || len(ps.Roots) != 1 || ps.Roots[0].Name != "main" {
		t.Errorf("parallel stacks of a core: %+v", ps)
	}
	if msg := d.callErr("continue", map[string]any{"threadId": st.ThreadId}); !strings.Contains(msg, "core") {
		t.Errorf("continue on a core: %q", msg)
	}
}

// TestEnvAndCwd: launch's env and cwd reach every rank, also for a program without debugging
// information.
func TestEnvAndCwd(t *testing.T) {
	t.Parallel()
	d := newDAP(t, viaPipe)
	defer d.close()
	dir := t.TempDir()
	d.launch(map[string]any{"program": "/bin/sh", "args": []string{"-c", `echo "foo=$FOO rank=$HPCDAP_RANK np=$HPCDAP_NP home=${HOME:-unset} dir=$(pwd)"`},
		"np": 2, "cwd": dir, "env": map[string]any{"FOO": "bar", "HOME": nil}})
	d.call("configurationDone", nil, nil)
	d.event("terminated")
	out := allOutput(d)
	for r := 0; r < 2; r++ {
		want := fmt.Sprintf("[%d] foo=bar rank=%d np=2 home=unset dir=%s", r, r, dir)
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// TestManyRanksSeveralAgents: 66 ranks need two local agents (64 ranks each at most); the
// job is still one, with every rank's exit reported.
func TestManyRanksSeveralAgents(t *testing.T) {
	t.Parallel()
	p := compileC(t, "stacks")
	d := newDAP(t, viaPipe)
	defer d.close()
	d.launch(map[string]any{"program": p.bin, "np": 66})
	ranks := d.ranks()
	if len(ranks.Ranks) != 66 || ranks.Focus != "0-65" {
		t.Fatalf("%d ranks, focus %q", len(ranks.Ranks), ranks.Focus)
	}
	for i, r := range ranks.Ranks {
		if r.Rank != i || r.ThreadID != i+1 {
			t.Fatalf("rank %d: %+v", i, r)
		}
	}
	d.call("configurationDone", nil, nil)
	var ex dap.ExitedEventBody
	d.event("exited").Decode(&ex)
	if ex.ExitCode != 3 {
		t.Errorf("exit code %d, want 3", ex.ExitCode)
	}
	for _, r := range d.ranks().Ranks {
		want := 0
		if r.Rank == 1 {
			want = 3
		}
		if r.ExitCode == nil || *r.ExitCode != want {
			t.Errorf("rank %d: %+v", r.Rank, r)
		}
	}
}

// TestNullCallStack: a call through a null function pointer faults at pc 0, in no object; the
// stack still shows who made the call (the return address is on the stack top), as gdb's does.
func TestNullCallStack(t *testing.T) {
	t.Parallel()
	p := compileC(t, "nullcall")
	d := newDAP(t, viaPipe)
	defer d.close()
	d.launch(map[string]any{"program": p.bin})
	d.call("configurationDone", nil, nil)
	st := d.stopped()
	if st.Reason != "exception" {
		t.Fatalf("stopped %+v", st)
	}
	oracle := gdbOracle(t, p, []string{"HPCDAP_RANK=0"}, nil, "run", "oracle-dump", "kill")[0]
	frames := d.stackTrace(st.ThreadId)
	if len(frames) != len(oracle.Frames) || len(frames) != 3 {
		t.Fatalf("frames %s, gdb %s", frameList(frames), oracleList(oracle.Frames))
	}
	if frames[0].InstructionPointerReference != "0x0" || frames[0].Source != nil && frames[0].Source.Path != "" {
		t.Errorf("frame 0 %+v, want pc 0 in no source", frames[0])
	}
	compareFrames(t, frames[1:], oracle.Frames[1:])
	if frames[1].Line != p.line(t, "call-hook") {
		t.Errorf("caller at line %d, want the call at %d", frames[1].Line, p.line(t, "call-hook"))
	}
}
