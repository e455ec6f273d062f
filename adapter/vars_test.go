package adapter

import (
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-dap"
)

// stopAtLeaf launches stacks with np ranks, stops at leaf-write (locals set) and returns the stopped
// thread's frames and rank.
func stopAtLeaf(t *testing.T, d *dapSession, p *program, np int) (dap.StoppedEventBody, []dap.StackFrame, int) {
	t.Helper()
	d.launch(map[string]any{"program": p.bin, "np": np})
	d.setBreakpoints(p.src, p.line(t, "leaf-write"))
	d.call("configurationDone", nil, nil)
	st := d.stopped()
	if st.Reason != "breakpoint" {
		t.Fatalf("stopped %+v", st)
	}
	rank := -1
	for _, r := range d.ranks().Ranks {
		if r.ThreadID == st.ThreadId {
			rank = r.Rank
		}
	}
	return st, d.stackTrace(st.ThreadId), rank
}

var leafExprs = []string{"s->name", "s->corner[1]", "*s", "s->corner", "s->scale", "values", "greeting",
	"counter", "calls", "depth * 2 + 1", "&values[2]", "values[3] + s->corner[0].y", "sizeof(struct shape)"}

func TestVariablesAgainstGDB(t *testing.T) {
	t.Parallel()
	p := compileC(t, "stacks")
	d := newDAP(t, viaPipe)
	defer d.close()
	_, frames, rank := stopAtLeaf(t, d, p, 2)
	oracle := gdbOracle(t, p, []string{fmt.Sprintf("HPCDAP_RANK=%d", rank), "ORACLE_EXPRS=" + jsonList(leafExprs)}, nil,
		fmt.Sprintf("break stacks.c:%d", p.line(t, "leaf-write")), "run", "oracle-dump", "kill")[0]
	compareFrames(t, frames, oracle.Frames)
	locals := d.scopeVars(frames[0].Id, "Locals")
	args := d.scopeVars(frames[0].Id, "Arguments")
	for name, want := range oracle.Locals {
		if got := locals[name].Value; got != want {
			t.Errorf("local %s = %q, gdb %q", name, got, want)
		}
	}
	for name, want := range oracle.Args {
		if strings.HasPrefix(want, "0x7ff") {
			// A stack address: the environment (which gdb and the agent set differently)
			// moves the stack. *s is compared through the expressions below.
			continue
		}
		if got := args[name].Value; got != want {
			t.Errorf("argument %s = %q, gdb %q", name, got, want)
		}
	}
	if len(locals) != len(oracle.Locals) || len(args) != len(oracle.Args) {
		t.Errorf("locals %v args %v; gdb has %v and %v", keys(locals), keys(args), oracle.Locals, oracle.Args)
	}
	// Evaluation in watch, hover and repl contexts.
	for _, e := range leafExprs {
		want := oracle.Exprs[e]
		for _, ctx := range []string{"watch", "hover"} {
			var ev dap.EvaluateResponseBody
			d.call("evaluate", map[string]any{"expression": e, "frameId": frames[0].Id, "context": ctx}, &ev)
			if ev.Result != want {
				t.Errorf("evaluate %q (%s) = %q, gdb %q", e, ctx, ev.Result, want)
			}
		}
	}
	var repl dap.EvaluateResponseBody
	d.call("evaluate", map[string]any{"expression": "&values[2]", "frameId": frames[0].Id, "context": "repl"}, &repl)
	if !strings.HasPrefix(repl.Result, "(int *) ") || !strings.HasSuffix(repl.Result, oracle.Exprs["&values[2]"]) {
		t.Errorf("repl &values[2] = %q, want gdb's print form of %q", repl.Result, oracle.Exprs["&values[2]"])
	}
	if msg := d.callErr("evaluate", map[string]any{"expression": "no_such_thing + 1", "frameId": frames[0].Id, "context": "watch"}); !strings.Contains(msg, "no_such_thing") {
		t.Errorf("evaluating an unknown name: %q", msg)
	}
	// Children: the pointer s shows the struct's members; corner is an indexed array.
	s := args["s"]
	if s.VariablesReference == 0 {
		t.Fatalf("s has no children: %+v", s)
	}
	members := d.vars(s.VariablesReference)
	for name, expr := range map[string]string{"name": "s->name", "corner": "s->corner", "scale": "s->scale"} {
		if got := members[name].Value; got != oracle.Exprs[expr] {
			t.Errorf("s.%s = %q, gdb %s = %q", name, got, expr, oracle.Exprs[expr])
		}
	}
	corner := members["corner"]
	if corner.IndexedVariables != 2 || corner.VariablesReference == 0 {
		t.Fatalf("corner: %+v", corner)
	}
	elems := d.vars(corner.VariablesReference)
	if got := elems["[1]"].Value; got != oracle.Exprs["s->corner[1]"] {
		t.Errorf("corner[1] = %q, gdb %q", got, oracle.Exprs["s->corner[1]"])
	}
	// evaluateName of a nested child evaluates to the same value.
	var ev dap.EvaluateResponseBody
	d.call("evaluate", map[string]any{"expression": elems["[1]"].EvaluateName, "frameId": frames[0].Id}, &ev)
	if ev.Result != elems["[1]"].Value {
		t.Errorf("evaluateName %q gives %q, the variable shows %q", elems["[1]"].EvaluateName, ev.Result, elems["[1]"].Value)
	}
	// Globals and registers.
	globals := d.scopeVars(frames[0].Id, "Globals")
	for _, g := range []string{"counter", "values", "greeting", "calls"} {
		if got := globals[g].Value; got != oracle.Exprs[g] {
			t.Errorf("global %s = %q, gdb %q", g, got, oracle.Exprs[g])
		}
	}
	regs := d.scopeVars(frames[0].Id, "Registers")
	if rip, err := strconv.ParseUint(regs["rip"].Value, 0, 64); err != nil || rip != oracle.Frames[0].PC {
		t.Errorf("rip %q, gdb's pc %#x", regs["rip"].Value, oracle.Frames[0].PC)
	}
	// The caller's frame has its own arguments.
	upArgs := d.scopeVars(frames[1].Id, "Arguments")
	if upArgs["depth"].Value != "0" {
		t.Errorf("middle's depth = %q, want 0", upArgs["depth"].Value)
	}
}

func keys(m map[string]dap.Variable) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func jsonList(l []string) string {
	var b strings.Builder
	b.WriteString("[")
	for i, s := range l {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString(strconv.Quote(s))
	}
	b.WriteString("]")
	return b.String()
}

// TestEvaluateErrorsShownInPlace checks which failed evaluations ask the client to notify the
// user: none in the contexts whose client shows the error where the expression is (hover, watch,
// console), where VS Code would otherwise raise a notification for every word the pointer rests
// on; the others do, as every other failed request.
func TestEvaluateErrorsShownInPlace(t *testing.T) {
	t.Parallel()
	p := compileC(t, "stacks")
	d := newDAP(t, viaPipe)
	defer d.close()
	_, frames, _ := stopAtLeaf(t, d, p, 1)
	fid := frames[0].Id
	showUser := func(command string, args map[string]any) (string, bool) {
		t.Helper()
		m, err := d.c.Request(command, args)
		if err != nil {
			t.Fatalf("%s %v: %v", command, args, err)
		}
		if m.Success {
			t.Fatalf("%s %v succeeded, want an error response", command, args)
		}
		var body dap.ErrorResponseBody
		if err := m.Decode(&body); err != nil || body.Error == nil {
			t.Fatalf("%s %v: error body %s: %v", command, args, m.Body, err)
		}
		return m.Message, body.Error.ShowUser
	}
	for _, expr := range []string{"", "  ", "no_such_thing + 1"} {
		for ctx, want := range map[string]bool{"hover": false, "watch": false, "repl": false, "clipboard": true, "": true} {
			args := map[string]any{"expression": expr, "frameId": fid}
			if ctx != "" {
				args["context"] = ctx
			}
			if msg, show := showUser("evaluate", args); show != want {
				t.Errorf("evaluate %q in context %q: %q with showUser %v, want %v", expr, ctx, msg, show, want)
			}
		}
	}
	// A function call, refused on hover.
	if msg, show := showUser("evaluate", map[string]any{"expression": "leaf(0, s)", "frameId": fid, "context": "hover"}); show || !strings.Contains(msg, "hover") {
		t.Errorf("evaluate leaf(0, s) on hover: %q with showUser %v, want the refusal without", msg, show)
	}
	// A frame of an earlier stop, as a hover that races a continue names it.
	if msg, show := showUser("evaluate", map[string]any{"expression": "depth", "frameId": 999999, "context": "hover"}); show {
		t.Errorf("evaluate in a frame that is gone, on hover: %q with showUser", msg)
	}
	// The next request's error is shown again.
	if msg, show := showUser("stackTrace", map[string]any{"threadId": 999999}); !show {
		t.Errorf("stackTrace of a thread that never was: %q without showUser", msg)
	}
	// The session goes on: the same expression evaluates once it names a variable.
	var ev dap.EvaluateResponseBody
	d.call("evaluate", map[string]any{"expression": "depth", "frameId": fid, "context": "hover"}, &ev)
	if ev.Result == "" {
		t.Errorf("evaluate depth on hover after the errors: empty result")
	}
}

func TestSetVariableAndMemory(t *testing.T) {
	t.Parallel()
	p := compileC(t, "stacks")
	d := newDAP(t, viaPipe)
	defer d.close()
	_, frames, _ := stopAtLeaf(t, d, p, 1)
	fid := frames[0].Id
	eval := func(e string) dap.EvaluateResponseBody {
		var ev dap.EvaluateResponseBody
		d.call("evaluate", map[string]any{"expression": e, "frameId": fid, "context": "watch"}, &ev)
		return ev
	}
	// A local, a member through a pointer, a global.
	var sc dap.ScopesResponseBody
	d.call("scopes", map[string]any{"frameId": fid}, &sc)
	var localsRef, argsRef int
	for _, s := range sc.Scopes {
		switch s.Name {
		case "Locals":
			localsRef = s.VariablesReference
		case "Arguments":
			argsRef = s.VariablesReference
		}
	}
	var sv dap.SetVariableResponseBody
	d.call("setVariable", map[string]any{"variablesReference": localsRef, "name": "local", "value": "42"}, &sv)
	if sv.Value != "42" || eval("local").Result != "42" {
		t.Errorf("set local: response %q, evaluate %q", sv.Value, eval("local").Result)
	}
	sRef := d.vars(argsRef)["s"].VariablesReference
	d.call("setVariable", map[string]any{"variablesReference": sRef, "name": "scale", "value": "2.5"}, &sv)
	if got := eval("s->scale").Result; got != "2.5" {
		t.Errorf("s->scale after setVariable: %q", got)
	}
	if msg := d.callErr("setVariable", map[string]any{"variablesReference": sRef, "name": "nosuch", "value": "1"}); msg == "" {
		t.Errorf("setVariable of a missing member gave no message")
	}
	// readMemory of values[] and writeMemory into it.
	vals := eval("values")
	if vals.MemoryReference == "" {
		t.Fatalf("values has no memory reference")
	}
	var rm dap.ReadMemoryResponseBody
	d.call("readMemory", map[string]any{"memoryReference": vals.MemoryReference, "count": 32}, &rm)
	data, err := base64.StdEncoding.DecodeString(rm.Data)
	if err != nil || len(data) != 32 {
		t.Fatalf("readMemory: %v, %d bytes", err, len(data))
	}
	for i := range 8 {
		if v := binary.LittleEndian.Uint32(data[4*i:]); int(v) != i+1 {
			t.Errorf("values[%d] read as %d", i, v)
		}
	}
	var w [4]byte
	binary.LittleEndian.PutUint32(w[:], 99)
	var wm dap.WriteMemoryResponseBody
	d.call("writeMemory", map[string]any{"memoryReference": vals.MemoryReference, "offset": 8,
		"data": base64.StdEncoding.EncodeToString(w[:])}, &wm)
	if wm.BytesWritten != 4 {
		t.Errorf("bytesWritten %d", wm.BytesWritten)
	}
	if got := eval("values[2]").Result; got != "99" {
		t.Errorf("values[2] after writeMemory: %q", got)
	}
	if len(d.c.Events("invalidated")) == 0 {
		t.Errorf("no invalidated event after writes")
	}
	// Unreadable memory is reported as such.
	d.call("readMemory", map[string]any{"memoryReference": "0x10", "count": 16}, &rm)
	if rm.UnreadableBytes != 16 {
		t.Errorf("readMemory at 0x10: %+v", rm)
	}
	// The program sees the new values: continue to the end and read its output.
	d.setBreakpoints(p.src)
	d.call("continue", map[string]any{"threadId": 1}, nil)
	d.event("terminated")
	if out := allOutput(d); !strings.Contains(out, "total") {
		t.Errorf("program output missing: %q", out)
	}
}

// TestInfoRequests: stack paging, modules, loaded sources, source, breakpoint locations and
// the progress events of a launch.
func TestInfoRequests(t *testing.T) {
	t.Parallel()
	p := compileC(t, "stacks")
	d := newDAP(t, viaPipe)
	defer d.close()
	st, frames, _ := stopAtLeaf(t, d, p, 1)
	var page dap.StackTraceResponseBody
	d.call("stackTrace", map[string]any{"threadId": st.ThreadId, "startFrame": 1, "levels": 2}, &page)
	if page.TotalFrames != len(frames) || len(page.StackFrames) != 2 || page.StackFrames[0].Name != frames[1].Name ||
		page.StackFrames[1].Line != frames[2].Line {
		t.Errorf("page 1+2: %+v of %s", page, frameList(frames))
	}
	var mods dap.ModulesResponseBody
	d.call("modules", map[string]any{}, &mods)
	var sawProg, sawLibc bool
	for _, m := range mods.Modules {
		sawProg = sawProg || (m.Path == p.bin && m.SymbolStatus == "Symbols loaded.")
		sawLibc = sawLibc || strings.Contains(m.Name, "libc.so")
	}
	if !sawProg || !sawLibc || mods.TotalModules != len(mods.Modules) {
		t.Errorf("modules %+v", mods)
	}
	var ls dap.LoadedSourcesResponseBody
	d.call("loadedSources", map[string]any{}, &ls)
	found := false
	for _, s := range ls.Sources {
		found = found || s.Path == p.src
	}
	if !found {
		t.Errorf("loadedSources lacks %s (%d sources)", p.src, len(ls.Sources))
	}
	var src dap.SourceResponseBody
	d.call("source", map[string]any{"source": map[string]any{"path": p.src}, "sourceReference": 0}, &src)
	if !strings.Contains(src.Content, "MARK:leaf-write") {
		t.Errorf("source content %q", src.Content[:min(len(src.Content), 80)])
	}
	var bl dap.BreakpointLocationsResponseBody
	leaf := p.line(t, "leaf-first")
	d.call("breakpointLocations", map[string]any{"source": map[string]any{"path": p.src}, "line": leaf, "endLine": leaf + 3}, &bl)
	if len(bl.Breakpoints) != 4 || bl.Breakpoints[0].Line != leaf {
		t.Errorf("breakpointLocations %d-%d: %+v", leaf, leaf+3, bl.Breakpoints)
	}
	if len(d.c.Events("progressStart")) == 0 || len(d.c.Events("progressEnd")) == 0 {
		t.Errorf("no progress events during the launch")
	}
}

// TestRunningThreadErrorNotShown: a client that asks for a thread's stack just as its rank
// resumes (VS Code does, after a stop, when the user continues at once), or expands a variable
// or a frame of the stop that just ended, gets an error without showUser: a race of the
// protocol, not a failure to raise as a notification.
func TestRunningThreadErrorNotShown(t *testing.T) {
	t.Parallel()
	p := compileC(t, "spin")
	d := newDAP(t, viaPipe)
	defer d.close()
	d.launch(map[string]any{"program": p.bin})
	d.setBreakpoints(p.src, p.line(t, "tick"))
	d.call("configurationDone", nil, nil)
	st := d.stopped()
	var stack dap.StackTraceResponseBody
	d.call("stackTrace", map[string]any{"threadId": st.ThreadId}, &stack)
	var scopes dap.ScopesResponseBody
	d.call("scopes", map[string]any{"frameId": stack.StackFrames[0].Id}, &scopes)
	d.setBreakpoints(p.src)
	d.call("continue", map[string]any{"threadId": st.ThreadId}, nil)
	for _, q := range []struct {
		command string
		args    map[string]any
		want    string
	}{
		{"stackTrace", map[string]any{"threadId": st.ThreadId}, "is running"},
		{"scopes", map[string]any{"frameId": stack.StackFrames[0].Id}, "is not a frame of a current stop"},
		{"variables", map[string]any{"variablesReference": scopes.Scopes[0].VariablesReference}, "is not valid at this stop"},
	} {
		m, err := d.c.Request(q.command, q.args)
		if err != nil {
			t.Fatal(err)
		}
		var body dap.ErrorResponseBody
		if m.Success || m.Decode(&body) != nil || body.Error == nil {
			t.Fatalf("%s after the stop: success %v, body %s", q.command, m.Success, m.Body)
		}
		if !strings.Contains(m.Message, q.want) || body.Error.ShowUser {
			t.Errorf("%s after the stop: %q with showUser %v, want \"… %s\" without", q.command, m.Message, body.Error.ShowUser, q.want)
		}
	}
}
