package adapter

import (
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-dap"
)

// callOrder returns the functions the call instructions of a line call, in address order, as
// gdb disassembles the line: the oracle for the order of step-in targets.
func callOrder(t *testing.T, p *program, line int) []string {
	t.Helper()
	out, err := exec.Command(needTool(t, "gdb"), "-nx", "-batch", "-ex", "disassemble /s main", p.bin).CombinedOutput()
	if err != nil {
		t.Fatalf("gdb: %v\n%s", err, out)
	}
	var names []string
	in := false
	lineRE := regexp.MustCompile(`^(\d+)\s`)
	callRE := regexp.MustCompile(`\bcall\s+0x[0-9a-f]+ <([A-Za-z_][A-Za-z0-9_]*)>`)
	for _, l := range strings.Split(string(out), "\n") {
		if m := lineRE.FindStringSubmatch(l); m != nil {
			in = m[1] == strconv.Itoa(line)
			continue
		}
		if m := callRE.FindStringSubmatch(l); m != nil && in {
			names = append(names, m[1])
		}
	}
	return names
}

// stepInTargets returns the targets of a frame.
func stepInTargets(d *dapSession, frameID int) []dap.StepInTarget {
	d.t.Helper()
	var b dap.StepInTargetsResponseBody
	d.call("stepInTargets", map[string]any{"frameId": frameID}, &b)
	return b.Targets
}

// TestStepInTargets: a line `f(g(1), h(2))` offers g, h and f in the order its calls are made
// (gdb's disassembly the oracle), and a step in with a target stops at that callee's first
// line, the line's other calls stepped over; without a target the first call is entered.
func TestStepInTargets(t *testing.T) {
	t.Parallel()
	p := compileC(t, "stepinto")
	want := callOrder(t, p, p.line(t, "calls"))
	if len(want) != 3 || want[2] != "f" {
		t.Fatalf("gdb: the line's calls are %v, want g and h, then f", want)
	}
	d := newDAP(t, viaPipe)
	defer d.close()
	d.launch(map[string]any{"program": p.bin})
	d.setBreakpoints(p.src, p.line(t, "calls"), p.line(t, "again"))
	d.call("configurationDone", nil, nil)

	st := d.stopped()
	frames := d.stackTrace(st.ThreadId)
	if len(frames) == 0 || frames[0].Line != p.line(t, "calls") {
		t.Fatalf("stop: %s, want line %d", frameList(frames), p.line(t, "calls"))
	}
	targets := stepInTargets(d, frames[0].Id)
	var got []string
	for _, tg := range targets {
		got = append(got, tg.Label)
		if tg.Line != p.line(t, "calls") {
			t.Errorf("target %s: line %d, want %d", tg.Label, tg.Line, p.line(t, "calls"))
		}
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("step-in targets %v, want %v", got, want)
	}
	if len(frames) > 1 {
		if outer := stepInTargets(d, frames[1].Id); len(outer) != 0 {
			t.Errorf("an outer frame's targets: %v, want none", outer)
		}
	}
	if msg := d.callErr("stepIn", map[string]any{"threadId": st.ThreadId, "targetId": 999999}); !strings.Contains(msg, "999999") {
		t.Errorf("stepIn with an unknown target: %q", msg)
	}
	// The second call of the line: the first is stepped over.
	d.call("stepIn", map[string]any{"threadId": st.ThreadId, "targetId": targets[1].Id}, nil)
	st = d.stopped()
	frames = d.stackTrace(st.ThreadId)
	if len(frames) < 2 || frames[0].Name != want[1] || frames[0].Line != p.line(t, want[1]) || frames[1].Name != "main" {
		t.Fatalf("step into %s: %s, want %s at line %d called from main", want[1], frameList(frames), want[1], p.line(t, want[1]))
	}
	d.call("continue", map[string]any{"threadId": st.ThreadId}, nil)

	// The last call, f: g and h are stepped over and have run (f's arguments are their results).
	st = d.stopped()
	frames = d.stackTrace(st.ThreadId)
	if len(frames) == 0 || frames[0].Line != p.line(t, "again") {
		t.Fatalf("second stop: %s, want line %d", frameList(frames), p.line(t, "again"))
	}
	targets = stepInTargets(d, frames[0].Id)
	if len(targets) != 3 {
		t.Fatalf("targets at the second line: %v", targets)
	}
	d.call("stepIn", map[string]any{"threadId": st.ThreadId, "targetId": targets[2].Id}, nil)
	st = d.stopped()
	frames = d.stackTrace(st.ThreadId)
	if len(frames) == 0 || frames[0].Name != "f" || frames[0].Line != p.line(t, "f") {
		t.Fatalf("step into f: %s, want f at line %d", frameList(frames), p.line(t, "f"))
	}
	args := d.scopeVars(frames[0].Id, "Arguments")
	if args["a"].Value != "13" || args["b"].Value != "80" {
		t.Errorf("f's arguments a=%s b=%s, want 13 and 80", args["a"].Value, args["b"].Value)
	}
	// A stale target (its stop is over) is refused.
	if msg := d.callErr("stepIn", map[string]any{"threadId": st.ThreadId, "targetId": targets[0].Id}); !strings.Contains(msg, "not a step-in target") {
		t.Errorf("stepIn with a stale target: %q", msg)
	}
	d.call("continue", map[string]any{"threadId": st.ThreadId}, nil)
	d.event("terminated")
}

// TestStepInTargetsAllRanks: in all-stop mode a step in with a target moves every stopped rank
// of the focus into the same call, each in its own address space.
func TestStepInTargetsAllRanks(t *testing.T) {
	t.Parallel()
	p := compileC(t, "stepinto")
	want := callOrder(t, p, p.line(t, "calls"))
	if len(want) != 3 {
		t.Fatalf("gdb: the line's calls are %v", want)
	}
	d := newDAP(t, viaPipe)
	defer d.close()
	d.launch(map[string]any{"program": p.bin, "np": 3})
	d.setBreakpoints(p.src, p.line(t, "calls"))
	d.call("configurationDone", nil, nil)
	st := d.stopped()
	// The first rank at the line stopped the others wherever they were (starting up, or at
	// the breakpoint's address with its trap not yet executed): each rank that has not hit
	// the breakpoint is run alone until it does.
	for _, r := range d.ranks().Ranks {
		if fs := d.stackTrace(r.ThreadID); r.StopReason == "breakpoint" && len(fs) > 0 && fs[0].Line == p.line(t, "calls") {
			continue
		}
		d.call("continue", map[string]any{"threadId": r.ThreadID, "singleThread": true}, nil)
		if got := d.stopped(); got.ThreadId != r.ThreadID {
			t.Fatalf("rank %d run to the line: stop of thread %d", r.Rank, got.ThreadId)
		}
		if fs := d.stackTrace(r.ThreadID); len(fs) == 0 || fs[0].Line != p.line(t, "calls") {
			t.Fatalf("rank %d run to the line: %s", r.Rank, frameList(fs))
		}
	}
	frames := d.stackTrace(st.ThreadId)
	targets := stepInTargets(d, frames[0].Id)
	if len(targets) != 3 {
		t.Fatalf("targets %v", targets)
	}
	d.call("stepIn", map[string]any{"threadId": st.ThreadId, "targetId": targets[1].Id}, nil)
	st = d.stopped()
	ranks := d.ranks().Ranks
	if len(ranks) != 3 {
		t.Fatalf("ranks %+v", ranks)
	}
	for _, r := range ranks {
		if r.State != "stopped" {
			t.Errorf("rank %d is %s after the step", r.Rank, r.State)
			continue
		}
		fs := d.stackTrace(r.ThreadID)
		if len(fs) < 2 || fs[0].Name != want[1] || fs[0].Line != p.line(t, want[1]) || fs[1].Name != "main" {
			t.Errorf("rank %d after stepping into %s: %s", r.Rank, want[1], frameList(fs))
		}
	}
}
