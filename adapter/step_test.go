package adapter

import (
	"fmt"
	"strconv"
	"testing"

	"github.com/google/go-dap"
)

// stepScript is a sequence of gdb stepping commands and their DAP equivalents.
var stepScript = []string{"next", "next", "step", "next", "step", "next", "step", "next", "next", "next", "next",
	"next", "finish", "next", "step", "finish", "stepi", "stepi", "nexti", "next", "next"}

// dapStep performs the DAP request equivalent to a gdb stepping command.
func dapStep(t *testing.T, d *dapSession, tid int, cmd string) {
	t.Helper()
	args := map[string]any{"threadId": tid}
	switch cmd {
	case "next":
		d.call("next", args, nil)
	case "step":
		d.call("stepIn", args, nil)
	case "finish":
		d.call("stepOut", args, nil)
	case "stepi":
		args["granularity"] = "instruction"
		d.call("stepIn", args, nil)
	case "nexti":
		args["granularity"] = "instruction"
		d.call("next", args, nil)
	default:
		t.Fatalf("no DAP step for %q", cmd)
	}
}

func TestSteppingAgainstGDB(t *testing.T) {
	t.Parallel()
	p := compileC(t, "stacks")
	var cmds []string
	cmds = append(cmds, fmt.Sprintf("break stacks.c:%d", p.line(t, "main-start")), "run", "oracle-dump")
	for _, s := range stepScript {
		cmds = append(cmds, s, "oracle-dump")
	}
	cmds = append(cmds, "kill")
	oracle := gdbOracle(t, p, []string{"HPCDAP_RANK=0"}, nil, cmds...)
	if len(oracle) != len(stepScript)+1 {
		t.Fatalf("gdb recorded %d states for %d steps", len(oracle), len(stepScript))
	}
	d := newDAP(t, viaPipe)
	defer d.close()
	d.launch(map[string]any{"program": p.bin})
	d.setBreakpoints(p.src, p.line(t, "main-start"))
	d.call("configurationDone", nil, nil)
	st := d.stopped()
	tid := st.ThreadId
	compareTop(t, "start", d.stackTrace(tid), oracle[0])
	for i, cmd := range stepScript {
		dapStep(t, d, tid, cmd)
		st := d.stopped()
		if st.Reason != "step" || st.ThreadId != tid {
			t.Fatalf("after %s (step %d): stopped %+v", cmd, i, st)
		}
		frames := d.stackTrace(tid)
		if !compareTop(t, fmt.Sprintf("step %d (%s)", i, cmd), frames, oracle[i+1]) {
			break
		}
	}
}

// compareTop checks the innermost frame (function, line, pc for instruction steps) and the
// depth of the stack against gdb's state; it reports whether they agree.
func compareTop(t *testing.T, what string, frames []dap.StackFrame, want oracleDump) bool {
	t.Helper()
	if len(frames) == 0 || len(want.Frames) == 0 {
		t.Errorf("%s: %d frames, gdb %d", what, len(frames), len(want.Frames))
		return false
	}
	g, w := frames[0], want.Frames[0]
	pc, _ := strconv.ParseUint(g.InstructionPointerReference, 0, 64)
	if g.Name != w.Name || g.Line != w.Line || len(frames) != len(want.Frames) || pc != w.PC {
		t.Errorf("%s: at %s:%d pc %#x depth %d, gdb at %s:%d pc %#x depth %d", what, g.Name, g.Line, pc, len(frames),
			w.Name, w.Line, w.PC, len(want.Frames))
		return false
	}
	return true
}

// TestGroupStepFromEntry stops every rank at main (stopAtEntry) and steps the whole focus:
// each rank moves to the same next line, with one stopped event.
func TestGroupStepFromEntry(t *testing.T) {
	t.Parallel()
	p := compileC(t, "stacks")
	oracle := gdbOracle(t, p, []string{"HPCDAP_RANK=0"}, nil, "break main", "run", "oracle-dump", "next", "oracle-dump", "kill")
	d := newDAP(t, viaPipe)
	defer d.close()
	d.launch(map[string]any{"program": p.bin, "np": 3, "stopAtEntry": true})
	d.call("configurationDone", nil, nil)
	st := d.stopped()
	if st.Reason != "entry" || !st.AllThreadsStopped {
		t.Fatalf("stopped %+v, want entry", st)
	}
	ranks := d.ranks()
	for _, r := range ranks.Ranks {
		if r.State != "stopped" {
			t.Fatalf("rank %d is %s at entry", r.Rank, r.State)
		}
		compareTop(t, fmt.Sprintf("rank %d at entry", r.Rank), d.stackTrace(r.ThreadID), oracle[0])
	}
	d.call("next", map[string]any{"threadId": ranks.Ranks[1].ThreadID}, nil)
	st = d.stopped()
	if st.Reason != "step" || st.ThreadId != ranks.Ranks[1].ThreadID || !st.AllThreadsStopped {
		t.Fatalf("after next: %+v", st)
	}
	for _, r := range d.ranks().Ranks {
		compareTop(t, fmt.Sprintf("rank %d after next", r.Rank), d.stackTrace(r.ThreadID), oracle[1])
	}
	// Narrow the focus to rank 2: only it steps.
	var fb FocusBody
	d.call("hpcdap/focus", map[string]any{"ranks": "2"}, &fb)
	if fb.Focus != "2" || fb.Count != 1 {
		t.Fatalf("focus: %+v", fb)
	}
	before := d.stackTrace(ranks.Ranks[0].ThreadID)[0].Line
	d.call("next", map[string]any{"threadId": ranks.Ranks[2].ThreadID}, nil)
	d.stopped()
	if got := d.stackTrace(ranks.Ranks[0].ThreadID)[0].Line; got != before {
		t.Errorf("rank 0 moved (line %d → %d) though the focus is rank 2", before, got)
	}
	if got := d.stackTrace(ranks.Ranks[2].ThreadID)[0].Line; got == before {
		t.Errorf("rank 2 did not move from line %d", before)
	}
}

// TestNextOverLongLineAgainstGDB: a next over a line of many instructions and no call, then
// over a loop of more instructions than one StepRange may execute on one line, lands where
// gdb's next does. The agent steps through each line's range alone (StepRange): the next over
// the long line takes a few CDTI messages, not one per instruction; the loop runs out of the
// range's budget and is left by running to the line's boundaries.
func TestNextOverLongLineAgainstGDB(t *testing.T) {
	t.Parallel()
	p := compileC(t, "longline")
	oracle := gdbOracle(t, p, []string{"HPCDAP_RANK=0"}, nil,
		fmt.Sprintf("break longline.c:%d", p.line(t, "long")), "run", "oracle-dump",
		"next", "oracle-dump", "next", "oracle-dump", "kill")
	if len(oracle) != 3 {
		t.Fatalf("gdb recorded %d states, want 3", len(oracle))
	}
	d := newDAP(t, viaPipe)
	defer d.close()
	d.launch(map[string]any{"program": p.bin})
	d.setBreakpoints(p.src, p.line(t, "long"))
	d.call("configurationDone", nil, nil)
	tid := d.stopped().ThreadId
	compareTop(t, "at the long line", d.stackTrace(tid), oracle[0])
	for i, what := range []string{"over the long line", "over the loop"} {
		before := *d.ranks().Messages
		d.call("next", map[string]any{"threadId": tid}, nil)
		if st := d.stopped(); st.Reason != "step" {
			t.Fatalf("next %s: stopped %+v", what, st)
		}
		sent := d.ranks().Messages.Sent - before.Sent
		t.Logf("next %s: %d CDTI messages sent", what, sent)
		if i == 0 && sent > 6 {
			t.Errorf("next over a line of many instructions took %d CDTI messages, want a few (the agent steps the range)", sent)
		}
		compareTop(t, "next "+what, d.stackTrace(tid), oracle[i+1])
	}
}
