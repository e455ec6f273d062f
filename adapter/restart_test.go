package adapter

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-dap"
)

// TestRestart: a launched job of two ranks stopped at a breakpoint restarts — the ranks are
// new processes, the breakpoints keep their ids and conditions and are hit again without the
// client setting them anew; a restart with new arguments (one rank) takes them; the old job's
// end reaches the client as nothing (no exited or terminated event).
func TestRestart(t *testing.T) {
	t.Parallel()
	p := compileC(t, "stepinto")
	d := newDAP(t, viaPipe)
	defer d.close()
	launchArgs := map[string]any{"program": p.bin, "np": 2}
	d.launch(launchArgs)
	d.event("process") // the launch's
	bps := d.setBreakpoints(p.src, p.line(t, "g"))
	var fb SetBreakpointsResponseBodyExt
	d.call("setFunctionBreakpoints", map[string]any{"breakpoints": []map[string]any{{"name": "f", "condition": "a == 13"}}}, &fb)
	if len(bps) != 1 || len(fb.Breakpoints) != 1 {
		t.Fatalf("breakpoints %+v %+v", bps, fb)
	}
	lineID, fnID := bps[0].Id, fb.Breakpoints[0].Id
	d.call("configurationDone", nil, nil)

	atG := func(what string) dap.StoppedEventBody {
		t.Helper()
		st := d.stopped()
		frames := d.stackTrace(st.ThreadId)
		if len(frames) == 0 || frames[0].Name != "g" || frames[0].Line != p.line(t, "g") || !slices.Contains(st.HitBreakpointIds, lineID) {
			t.Fatalf("%s: stop %+v at %s, want breakpoint %d in g at line %d", what, st, frameList(frames), lineID, p.line(t, "g"))
		}
		return st
	}
	st := atG("first run")
	frames := d.stackTrace(st.ThreadId)
	var info dap.DataBreakpointInfoResponseBody
	d.call("dataBreakpointInfo", map[string]any{"name": "r", "frameId": frames[1].Id}, &info)
	dataID, _ := info.DataId.(string)
	var db SetBreakpointsResponseBodyExt
	d.call("setDataBreakpoints", map[string]any{"breakpoints": []map[string]any{{"dataId": dataID, "accessType": "write"}}}, &db)
	if len(db.Breakpoints) != 1 || !db.Breakpoints[0].Verified {
		t.Fatalf("setDataBreakpoints %q: %+v", dataID, db)
	}
	before := d.ranks().Ranks
	if len(before) != 2 {
		t.Fatalf("ranks %+v", before)
	}
	d.call("restart", nil, nil)
	ev := d.event("process")
	atG("after the restart")
	after := d.ranks().Ranks
	if len(after) != 2 {
		t.Fatalf("ranks after the restart %+v", after)
	}
	for i := range after {
		if after[i].Pid == before[i].Pid || procStatus(before[i].Pid, "State") != "" && !strings.HasPrefix(procStatus(before[i].Pid, "State"), "Z") {
			t.Errorf("rank %d: pid %d before the restart, %d after (the old one %q)", i, before[i].Pid, after[i].Pid, procStatus(before[i].Pid, "State"))
		}
	}
	var pe dap.ProcessEventBody
	if err := ev.Decode(&pe); err != nil || pe.SystemProcessId != after[0].Pid {
		t.Errorf("process event %+v, want pid %d", pe, after[0].Pid)
	}
	if n := len(d.c.Events("exited")) + len(d.c.Events("terminated")); n != 0 {
		t.Errorf("%d exited/terminated events from the replaced job", n)
	}
	// The client hears that the data breakpoint, which watched an old process, is gone, and
	// that the others are planted in the new ranks.
	changed := map[int]string{}
	for _, m := range d.c.Events("breakpoint") {
		var b struct {
			Reason     string
			Breakpoint Breakpoint
		}
		if err := m.Decode(&b); err != nil {
			t.Fatal(err)
		}
		changed[b.Breakpoint.Id] = b.Reason
		if b.Reason == "changed" && !b.Breakpoint.Verified {
			t.Errorf("breakpoint %d after the restart: %+v, want it verified", b.Breakpoint.Id, b.Breakpoint)
		}
	}
	if want := map[int]string{lineID: "changed", fnID: "changed", db.Breakpoints[0].Id: "removed"}; !maps.Equal(changed, want) {
		t.Errorf("breakpoint events after the restart: %v, want %v", changed, want)
	}

	// New arguments: one rank. The function breakpoint's condition came along: f stops only
	// at its second call (a == 13).
	args := map[string]any{"program": p.bin, "np": 1}
	d.call("restart", map[string]any{"arguments": args}, nil)
	st = atG("after the restart with one rank")
	if r := d.ranks().Ranks; len(r) != 1 {
		t.Fatalf("ranks after a restart with np 1: %+v", r)
	}
	d.call("continue", map[string]any{"threadId": st.ThreadId}, nil)
	st = atG("second call of g")
	d.call("continue", map[string]any{"threadId": st.ThreadId}, nil)
	st = d.stopped()
	frames = d.stackTrace(st.ThreadId)
	if len(frames) == 0 || frames[0].Name != "f" || !slices.Contains(st.HitBreakpointIds, fnID) {
		t.Fatalf("stop %+v at %s, want function breakpoint %d in f", st, frameList(frames), fnID)
	}
	if a := d.scopeVars(frames[0].Id, "Arguments")["a"].Value; a != "13" {
		t.Errorf("f stopped with a = %s, want 13 (the condition)", a)
	}
	// Bad new arguments change nothing.
	if msg := d.callErr("restart", map[string]any{"arguments": map[string]any{"np": 1}}); !strings.Contains(msg, "program") {
		t.Errorf("restart without a program: %q", msg)
	}
	d.call("continue", map[string]any{"threadId": st.ThreadId}, nil)
	d.event("terminated")
}
