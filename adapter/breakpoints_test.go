package adapter

import (
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-dap"
)

// TestBreakpointKinds runs stacks with a conditional function breakpoint, a hit-count source
// breakpoint and a log point, and checks the exact sequence of stops and messages.
func TestBreakpointKinds(t *testing.T) {
	t.Parallel()
	p := compileC(t, "stacks")
	d := newDAP(t, viaPipe)
	defer d.close()
	d.launch(map[string]any{"program": p.bin})
	var fb SetBreakpointsResponseBodyExt
	d.call("setFunctionBreakpoints", map[string]any{"breakpoints": []map[string]any{{"name": "middle", "condition": "depth == 0"}}}, &fb)
	if len(fb.Breakpoints) != 1 || !fb.Breakpoints[0].Verified {
		t.Fatalf("function breakpoint: %+v", fb)
	}
	var sb SetBreakpointsResponseBodyExt
	d.call("setBreakpoints", map[string]any{"source": map[string]any{"path": p.src}, "breakpoints": []map[string]any{
		{"line": p.line(t, "middle-after"), "hitCondition": "3"},
		{"line": p.line(t, "leaf-return"), "logMessage": "leaf local={local} name={s->name}"},
	}}, &sb)
	if len(sb.Breakpoints) != 2 || !sb.Breakpoints[0].Verified || !sb.Breakpoints[1].Verified {
		t.Fatalf("source breakpoints: %+v", sb)
	}
	d.call("configurationDone", nil, nil)
	type want struct {
		reason string
		id     int
		fn     string
		calls  string
	}
	seq := []want{
		{"function breakpoint", fb.Breakpoints[0].Id, "middle", "0"},
		{"function breakpoint", fb.Breakpoints[0].Id, "middle", "2"},
		{"breakpoint", sb.Breakpoints[0].Id, "middle", "2"},
		{"breakpoint", sb.Breakpoints[0].Id, "middle", "3"},
	}
	for i, w := range seq {
		st := d.stopped()
		frames := d.stackTrace(st.ThreadId)
		var ev dap.EvaluateResponseBody
		d.call("evaluate", map[string]any{"expression": "calls", "frameId": frames[0].Id, "context": "watch"}, &ev)
		if st.Reason != w.reason || len(st.HitBreakpointIds) != 1 || st.HitBreakpointIds[0] != w.id ||
			frames[0].Name != w.fn || ev.Result != w.calls {
			t.Errorf("stop %d: %s %v in %s, calls=%s; want %s [%d] in %s, calls=%s", i, st.Reason, st.HitBreakpointIds,
				frames[0].Name, ev.Result, w.reason, w.id, w.fn, w.calls)
		}
		if w.reason == "function breakpoint" {
			args := d.scopeVars(frames[0].Id, "Arguments")
			if args["depth"].Value != "0" {
				t.Errorf("stop %d: condition depth == 0 but depth = %s", i, args["depth"].Value)
			}
		}
		d.call("continue", map[string]any{"threadId": st.ThreadId}, nil)
	}
	d.event("terminated")
	out := allOutput(d)
	// One process: the log point's lines are not labelled with its rank.
	n := 0
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "leaf local=0 name=") {
			n++
		}
	}
	if n != 2 || !strings.Contains(out, `"box"`) {
		t.Errorf("log point printed %d times:\n%s", n, out)
	}
	if len(d.c.Events("stopped")) != len(seq) {
		t.Errorf("%d stops, want %d", len(d.c.Events("stopped")), len(seq))
	}
}

// SetBreakpointsResponseBodyExt decodes breakpoints with DAP 1.64's reason.
type SetBreakpointsResponseBodyExt struct {
	Breakpoints []Breakpoint `json:"breakpoints"`
}

func TestUnresolvedBreakpoints(t *testing.T) {
	t.Parallel()
	p := compileC(t, "stacks")
	d := newDAP(t, viaPipe)
	defer d.close()
	d.launch(map[string]any{"program": p.bin})
	var sb SetBreakpointsResponseBodyExt
	d.call("setBreakpoints", map[string]any{"source": map[string]any{"path": "/nonexistent/other.c"},
		"breakpoints": []map[string]any{{"line": 3}}}, &sb)
	if len(sb.Breakpoints) != 1 || sb.Breakpoints[0].Verified || sb.Breakpoints[0].Message == "" || sb.Breakpoints[0].Reason == "" {
		t.Errorf("breakpoint in an unknown file: %+v", sb.Breakpoints)
	}
	var fb SetBreakpointsResponseBodyExt
	d.call("setFunctionBreakpoints", map[string]any{"breakpoints": []map[string]any{{"name": "no_such_function"}}}, &fb)
	if len(fb.Breakpoints) != 1 || fb.Breakpoints[0].Verified || !strings.Contains(fb.Breakpoints[0].Message, "no_such_function") {
		t.Errorf("unknown function: %+v", fb.Breakpoints)
	}
	msg := d.callErr("setBreakpoints", map[string]any{"source": map[string]any{"path": p.src},
		"breakpoints": []map[string]any{{"line": 10, "hitCondition": "lots"}}})
	if !strings.Contains(msg, "hit condition") {
		t.Errorf("bad hit condition: %q", msg)
	}
	// A breakpoint on a line without code moves to the next line with code, as gdb does.
	oracle := gdbOracle(t, p, []string{"HPCDAP_RANK=0"}, nil, "break stacks.c:1", "run", "oracle-dump", "kill")
	bps := d.setBreakpoints(p.src, 1)
	if len(bps) != 1 || !bps[0].Verified || bps[0].Line != oracle[0].Frames[0].Line {
		t.Errorf("breakpoint at line 1: %+v; gdb stops at line %d", bps, oracle[0].Frames[0].Line)
	}
}

// TestInstructionBreakpointAndDisassembly disassembles around a stop, checks the rows against
// objdump, and stops at an instruction breakpoint.
func TestInstructionBreakpointAndDisassembly(t *testing.T) {
	t.Parallel()
	needTool(t, "objdump")
	p := compileC(t, "stacks")
	d := newDAP(t, viaPipe)
	defer d.close()
	d.launch(map[string]any{"program": p.bin})
	d.call("setFunctionBreakpoints", map[string]any{"breakpoints": []map[string]any{{"name": "leaf"}}}, nil)
	d.call("configurationDone", nil, nil)
	st := d.stopped()
	frames := d.stackTrace(st.ThreadId)
	pc, _ := strconv.ParseUint(frames[0].InstructionPointerReference, 0, 64)
	var dis struct {
		Instructions []DisassembledInstruction `json:"instructions"`
	}
	d.call("disassemble", map[string]any{"memoryReference": frames[0].InstructionPointerReference,
		"instructionOffset": -3, "instructionCount": 10, "resolveSymbols": true}, &dis)
	if len(dis.Instructions) != 10 {
		t.Fatalf("%d instructions", len(dis.Instructions))
	}
	if a, _ := strconv.ParseUint(dis.Instructions[3].Address, 0, 64); a != pc {
		t.Fatalf("row 3 is at %s, the pc is %#x", dis.Instructions[3].Address, pc)
	}
	// The load bias, from the modules request.
	var mods dap.ModulesResponseBody
	d.call("modules", map[string]any{}, &mods)
	var bias uint64
	for _, m := range mods.Modules {
		if m.Path == p.bin {
			lo, _, _ := strings.Cut(m.AddressRange, "-")
			bias, _ = strconv.ParseUint(lo, 0, 64)
		}
	}
	if bias == 0 {
		t.Fatalf("no module for %s in %+v", p.bin, mods.Modules)
	}
	ref := objdumpInstructions(t, p.bin)
	for i, in := range dis.Instructions {
		a, _ := strconv.ParseUint(in.Address, 0, 64)
		want, ok := ref[a-bias]
		if !ok {
			t.Errorf("row %d: %#x (link %#x) is not an instruction start for objdump", i, a, a-bias)
			continue
		}
		if in.InstructionBytes != want.bytes || strings.Fields(in.Instruction)[0] != strings.Fields(want.text)[0] {
			t.Errorf("row %d at %#x: %s %q, objdump %s %q", i, a-bias, in.InstructionBytes, in.Instruction, want.bytes, want.text)
		}
	}
	if dis.Instructions[3].Line == 0 && dis.Instructions[0].Line == 0 {
		t.Errorf("no row carries a source line")
	}
	// Stop two instructions further on.
	target := dis.Instructions[5].Address
	d.call("setFunctionBreakpoints", map[string]any{"breakpoints": []any{}}, nil)
	var ib SetBreakpointsResponseBodyExt
	d.call("setInstructionBreakpoints", map[string]any{"breakpoints": []map[string]any{{"instructionReference": target}}}, &ib)
	if len(ib.Breakpoints) != 1 || !ib.Breakpoints[0].Verified {
		t.Fatalf("instruction breakpoint: %+v", ib)
	}
	d.call("continue", map[string]any{"threadId": st.ThreadId}, nil)
	st = d.stopped()
	top := d.stackTrace(st.ThreadId)[0]
	if st.Reason != "instruction breakpoint" || top.InstructionPointerReference != target {
		t.Errorf("stopped %s at %s, want an instruction breakpoint at %s", st.Reason, top.InstructionPointerReference, target)
	}
}

type objdumpInst struct{ bytes, text string }

// objdumpInstructions maps link-time addresses to objdump's bytes and text.
func objdumpInstructions(t *testing.T, bin string) map[uint64]objdumpInst {
	t.Helper()
	out, err := exec.Command("objdump", "-d", "--no-show-raw-insn", bin).Output()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := exec.Command("objdump", "-d", "--insn-width=16", bin).Output()
	if err != nil {
		t.Fatal(err)
	}
	m := map[uint64]objdumpInst{}
	parse := func(text []byte, f func(addr uint64, cols []string)) {
		for _, l := range strings.Split(string(text), "\n") {
			cols := strings.Split(l, "\t")
			if len(cols) < 2 {
				continue
			}
			a, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(cols[0]), ":"), 16, 64)
			if err != nil {
				continue
			}
			f(a, cols)
		}
	}
	parse(out, func(a uint64, cols []string) {
		m[a] = objdumpInst{text: strings.TrimSpace(cols[1])}
	})
	parse(raw, func(a uint64, cols []string) {
		in := m[a]
		in.bytes = strings.ReplaceAll(strings.TrimSpace(cols[1]), " ", "")
		if _, err := hex.DecodeString(in.bytes); err == nil {
			m[a] = in
		}
	})
	return m
}

// TestDataBreakpoint watches a global through dataBreakpointInfo and compares the stop with
// gdb's hardware watchpoint.
func TestDataBreakpoint(t *testing.T) {
	t.Parallel()
	p := compileC(t, "stacks")
	oracle := gdbOracle(t, p, []string{"HPCDAP_RANK=0", `ORACLE_EXPRS=["counter"]`}, nil,
		fmt.Sprintf("break stacks.c:%d", p.line(t, "main-start")), "run", "watch counter", "continue", "oracle-dump", "kill")
	d := newDAP(t, viaPipe)
	defer d.close()
	d.launch(map[string]any{"program": p.bin})
	d.setBreakpoints(p.src, p.line(t, "main-start"))
	d.call("configurationDone", nil, nil)
	st := d.stopped()
	frames := d.stackTrace(st.ThreadId)
	var info dap.DataBreakpointInfoResponseBody
	d.call("dataBreakpointInfo", map[string]any{"name": "counter", "frameId": frames[0].Id}, &info)
	id, _ := info.DataId.(string)
	if id == "" || len(info.AccessTypes) == 0 {
		t.Fatalf("dataBreakpointInfo: %+v", info)
	}
	var db SetBreakpointsResponseBodyExt
	d.call("setDataBreakpoints", map[string]any{"breakpoints": []map[string]any{{"dataId": id, "accessType": "write"}}}, &db)
	if len(db.Breakpoints) != 1 || !db.Breakpoints[0].Verified {
		t.Fatalf("setDataBreakpoints: %+v", db)
	}
	d.setBreakpoints(p.src)
	d.call("continue", map[string]any{"threadId": st.ThreadId}, nil)
	st = d.stopped()
	if st.Reason != "data breakpoint" || len(st.HitBreakpointIds) != 1 || st.HitBreakpointIds[0] != db.Breakpoints[0].Id {
		t.Fatalf("stopped %+v", st)
	}
	frames = d.stackTrace(st.ThreadId)
	compareFrames(t, frames, oracle[0].Frames)
	var ev dap.EvaluateResponseBody
	d.call("evaluate", map[string]any{"expression": "counter", "frameId": frames[0].Id, "context": "watch"}, &ev)
	if ev.Result != oracle[0].Exprs["counter"] {
		t.Errorf("counter = %s at the watchpoint, gdb %s", ev.Result, oracle[0].Exprs["counter"])
	}
	// A local on the stack can be watched too (in its rank only).
	d.call("dataBreakpointInfo", map[string]any{"name": "local", "frameId": frames[0].Id}, &info)
	if lid, _ := info.DataId.(string); !strings.HasPrefix(lid, "a:0:") {
		t.Errorf("dataId of a local: %v", info.DataId)
	}
	// Something not in memory cannot be watched.
	d.call("dataBreakpointInfo", map[string]any{"name": "local + 1", "frameId": frames[0].Id}, &info)
	if info.DataId != nil || info.Description == "" {
		t.Errorf("watching an rvalue: %+v", info)
	}
}

// compileDlopen builds dlmain and the library it loads (plugin.c as NAME.so).
func compileDlopen(t *testing.T) (main, plugin *program, so string) {
	main = compileC(t, "dlmain")
	plugin = compileC(t, "plugin", "-shared", "-fPIC")
	so = plugin.bin + ".so"
	if out, err := exec.Command("mv", plugin.bin, so).CombinedOutput(); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	return main, plugin, so
}

// TestBreakpointInLoadedLibrary: a breakpoint in a library the program loads with dlopen is
// pending until the library appears, then planted and hit.
func TestBreakpointInLoadedLibrary(t *testing.T) {
	t.Parallel()
	main, plugin, so := compileDlopen(t)
	d := newDAP(t, viaPipe)
	defer d.close()
	d.launch(map[string]any{"program": main.bin, "args": []string{so}})
	bps := d.setBreakpoints(plugin.src, plugin.line(t, "plugin-compute"))
	if len(bps) != 1 || bps[0].Verified || bps[0].Reason != "pending" {
		t.Fatalf("breakpoint before the library is loaded: %+v", bps)
	}
	d.call("configurationDone", nil, nil)
	st := d.stopped()
	if st.Reason != "breakpoint" || len(st.HitBreakpointIds) != 1 || st.HitBreakpointIds[0] != bps[0].Id {
		t.Fatalf("stopped %+v", st)
	}
	var ev BreakpointEvent
	if m, err := d.c.WaitEvent("breakpoint", 0, nil); err == nil {
		m.Decode(&ev.Body)
	}
	if !ev.Body.Breakpoint.Verified || ev.Body.Breakpoint.Id != bps[0].Id {
		t.Errorf("breakpoint event %+v", ev.Body)
	}
	frames := d.stackTrace(st.ThreadId)
	if len(frames) != 2 || frames[0].Name != "plugin_compute" || frames[0].Line != plugin.line(t, "plugin-compute") ||
		frames[1].Name != "main" || frames[1].Line != main.line(t, "call-plugin") {
		t.Errorf("stack %s", frameList(frames))
	}
	var res dap.EvaluateResponseBody
	d.call("evaluate", map[string]any{"expression": "x * plugin_value", "frameId": frames[0].Id, "context": "watch"}, &res)
	if res.Result != "42" {
		t.Errorf("x * plugin_value = %s", res.Result)
	}
	if len(d.c.Events("module")) == 0 {
		t.Errorf("no module event for the loaded library")
	}
	d.setBreakpoints(plugin.src)
	d.call("continue", map[string]any{"threadId": st.ThreadId}, nil)
	d.event("terminated")
	if out := allOutput(d); !strings.Contains(out, "plugin says 43") {
		t.Errorf("output %q", out)
	}
}

// TestBreakpointInLibraryLoadedUnwatched: with no breakpoint waiting for a library, library
// loads are not watched; a library loaded meanwhile is still found when a breakpoint is set in
// it later, and stacks through it are whole.
func TestBreakpointInLibraryLoadedUnwatched(t *testing.T) {
	t.Parallel()
	main, plugin, so := compileDlopen(t)
	d := newDAP(t, viaPipe)
	defer d.close()
	d.launch(map[string]any{"program": main.bin, "args": []string{so}})
	bps := d.setBreakpoints(main.src, main.line(t, "call-plugin"))
	if len(bps) != 1 || !bps[0].Verified {
		t.Fatalf("breakpoint in main: %+v", bps)
	}
	d.call("configurationDone", nil, nil)
	st := d.stopped()
	if st.Reason != "breakpoint" {
		t.Fatalf("stopped %+v", st)
	}
	// The library was loaded while nobody watched: a breakpoint in it resolves at once.
	pbps := d.setBreakpoints(plugin.src, plugin.line(t, "plugin-compute"))
	if len(pbps) != 1 || !pbps[0].Verified {
		t.Fatalf("breakpoint in the loaded library: %+v", pbps)
	}
	d.call("continue", map[string]any{"threadId": st.ThreadId}, nil)
	st = d.stopped()
	if st.Reason != "breakpoint" || len(st.HitBreakpointIds) != 1 || st.HitBreakpointIds[0] != pbps[0].Id {
		t.Fatalf("stopped %+v, want breakpoint %d", st, pbps[0].Id)
	}
	frames := d.stackTrace(st.ThreadId)
	if len(frames) != 2 || frames[0].Name != "plugin_compute" || frames[1].Name != "main" {
		t.Errorf("stack %s", frameList(frames))
	}
	d.setBreakpoints(plugin.src)
	d.setBreakpoints(main.src)
	d.call("continue", map[string]any{"threadId": st.ThreadId}, nil)
	d.event("terminated")
}

// TestStackThroughLibraryLoadedInUnloadedPlace: the program unloads a library the adapter
// has listed and loads another where the first was, without a breakpoint waiting for a library
// (so nobody watches). A stack through the second library is gdb's: a module list read at an
// earlier stop, or while the program ran, must not lend the first library's symbols and call
// frame information to the second's code.
func TestStackThroughLibraryLoadedInUnloadedPlace(t *testing.T) {
	t.Parallel()
	main := compileC(t, "reload")
	first := compileC(t, "reloadlib", "-shared", "-fPIC", "-DFIRST")
	second := compileC(t, "reloadlib", "-shared", "-fPIC")
	libs := []string{first.bin + ".so", second.bin + ".so"}
	for i, p := range []*program{first, second} {
		if err := os.Rename(p.bin, libs[i]); err != nil {
			t.Fatal(err)
		}
	}
	oracle := gdbOracle(t, main, nil, libs, "break callback", "run", "oracle-dump", "kill")
	t.Run("listed at a stop", func(t *testing.T) {
		d := newDAP(t, viaPipe)
		defer d.close()
		d.launch(map[string]any{"program": main.bin, "args": libs})
		d.setBreakpoints(main.src, main.line(t, "first-loaded"))
		d.call("configurationDone", nil, nil)
		st := d.stopped()
		if st.Reason != "breakpoint" {
			t.Fatalf("stopped %+v", st)
		}
		// Setting a breakpoint reads the link map: the first library is listed from here on.
		listFirstAndBreakInCallback(t, d, main, libs[0])
		d.call("continue", map[string]any{"threadId": st.ThreadId}, nil)
		checkReloadedStack(t, d, main, second, oracle[0].Frames)
	})
	t.Run("listed while running", func(t *testing.T) {
		goFile := filepath.Join(t.TempDir(), "go")
		d := newDAP(t, viaPipe)
		defer d.close()
		d.launch(map[string]any{"program": main.bin, "args": append(slices.Clone(libs), goFile)})
		d.call("configurationDone", nil, nil)
		waitOutput(t, d, "first loaded")
		// The link map is read while the program runs, in the generation of the next stop.
		listFirstAndBreakInCallback(t, d, main, libs[0])
		if err := os.WriteFile(goFile, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		checkReloadedStack(t, d, main, second, oracle[0].Frames)
	})
}

// listFirstAndBreakInCallback sets the breakpoint in the reload program's callback and checks
// that the module list now holds the first library.
func listFirstAndBreakInCallback(t *testing.T, d *dapSession, main *program, firstLib string) {
	t.Helper()
	bps := d.setBreakpoints(main.src, main.line(t, "callback"))
	if len(bps) != 1 || !bps[0].Verified {
		t.Fatalf("breakpoint in callback: %+v", bps)
	}
	var mods dap.ModulesResponseBody
	d.call("modules", map[string]any{}, &mods)
	if !slices.ContainsFunc(mods.Modules, func(m dap.Module) bool { return m.Path == firstLib }) {
		t.Fatalf("first library not among the modules: %+v", mods.Modules)
	}
}

// checkReloadedStack waits for the reload program's stop in callback, compares the stack
// through the second library with gdb's, and lets the program end.
func checkReloadedStack(t *testing.T, d *dapSession, main, second *program, want []oracleFrame) {
	t.Helper()
	st := d.stopped()
	if st.Reason != "breakpoint" {
		t.Fatalf("stopped %+v", st)
	}
	frames := d.stackTrace(st.ThreadId)
	if len(frames) != len(want) {
		t.Errorf("stack %s, gdb %+v", frameList(frames), want)
	} else {
		for i, f := range frames {
			if f.Name != want[i].Name || f.Line != want[i].Line {
				t.Errorf("frame %d: %s:%d, gdb %s:%d (stack %s)", i, f.Name, f.Line, want[i].Name, want[i].Line, frameList(frames))
			}
		}
	}
	if len(frames) > 1 && frames[1].Line != second.line(t, "lib-call") {
		t.Errorf("frame 1 at line %d, want the second library's call at %d", frames[1].Line, second.line(t, "lib-call"))
	}
	d.setBreakpoints(main.src)
	d.call("continue", map[string]any{"threadId": st.ThreadId}, nil)
	d.event("terminated")
	out := allOutput(d)
	if !strings.Contains(out, "second over first\n") {
		t.Fatalf("the second library was not loaded where the first was, so this run tests nothing:\n%s", out)
	}
	if !strings.Contains(out, "second says 41\n") {
		t.Errorf("output %q", out)
	}
}
