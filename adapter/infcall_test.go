package adapter

import (
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-dap"
	"github.com/hpcdap/hpcdap/internal/testenv"
	"github.com/hpcdap/hpcdap/rankset"
)

// callExprs are calls whose results gdb prints on the same program, in this order (bump and
// reset change counter, which later expressions read).
var callExprs = []string{
	"add(2, 3)", "add(local, counter)", "scale(3, 'a', 2, 1)", "scale(-4, 2, 1, 0)", "twice(add(2, 3)) + 1",
	"color_value(BLUE)", "length(name)", `length("hello")`, "(int)strlen(name)", "(unsigned long)strlen(greeting)",
	"many(1, 2, 3, 4, 5, 6, 7, 8)", "op(4, 5)", "(*op)(6, 7)", "add(1, 2, 3)", "add(1)", "bump(4)", "counter + 0", "reset()", "counter * 2",
	"bump(9) - 1",
}

// callOracle runs calls.c (built static, for QEMU) under gdb-multiarch on qemu-x86_64 and
// prints callExprs at the stop mark: gdb cannot call functions in a native x86-64 process on
// a kernel whose extended register state is larger than it knows (its register writes fail),
// while its writes to QEMU's stub work. QEMU's stub describes the vector registers in a way
// gdb 13 cannot write (an internal error), so floating-point calls are compared with the
// program's own results instead (callFloats).
func callOracle(t *testing.T, static *program) map[string]string {
	t.Helper()
	needTool(t, "gdb-multiarch")
	emu := testenv.QEMUUser(t, "qemu-x86_64")
	dumps, out := emulatedOracle(t, static, emu, []string{"ORACLE_EXPRS=" + jsonList(callExprs)},
		"set unwindonsignal on", fmt.Sprintf("break calls.c:%d", static.line(t, "stop")), "continue", "oracle-dump")
	if len(dumps[0].Exprs) != len(callExprs) {
		t.Fatalf("gdb evaluated %d of %d expressions:\n%s", len(dumps[0].Exprs), len(callExprs), out)
	}
	return dumps[0].Exprs
}

// evalIn evaluates expr in a frame with a DAP context; err is the error response's message.
func evalIn(d *dapSession, frameID int, expr, ctx string) (dap.EvaluateResponseBody, string) {
	d.t.Helper()
	m, err := d.c.Request("evaluate", map[string]any{"expression": expr, "frameId": frameID, "context": ctx})
	if err != nil {
		d.t.Fatalf("evaluate %q: %v", expr, err)
	}
	var b dap.EvaluateResponseBody
	if !m.Success {
		return b, m.Message
	}
	if err := m.Decode(&b); err != nil {
		d.t.Fatal(err)
	}
	return b, ""
}

// sameAsGDB reports whether an evaluate answered gdb's printed value, or its error for
// "<error: ...>".
func sameAsGDB(got dap.EvaluateResponseBody, errMsg, want string) bool {
	if e, ok := strings.CutPrefix(want, "<error: "); ok {
		return errMsg == strings.TrimSuffix(e, ">")
	}
	return errMsg == "" && got.Result == want
}

func TestFunctionCallsAgainstGDB(t *testing.T) {
	t.Parallel()
	oracle := callOracle(t, compileC(t, "calls", "-static"))
	p := compileC(t, "calls")
	d := newDAP(t, viaPipe)
	defer d.close()
	d.launch(map[string]any{"program": p.bin})
	d.setBreakpoints(p.src, p.line(t, "stop"))
	d.call("configurationDone", nil, nil)
	st := d.stopped()
	frames := d.stackTrace(st.ThreadId)
	before := d.scopeVars(frames[0].Id, "Registers")

	// Calls on hover are refused and run nothing.
	if _, msg := evalIn(d, frames[0].Id, "bump(100)", "hover"); !strings.Contains(msg, "not evaluated on hover") {
		t.Errorf("bump(100) on hover: %q, want a refusal", msg)
	}
	for _, e := range callExprs {
		got, msg := evalIn(d, frames[0].Id, e, "watch")
		if !sameAsGDB(got, msg, oracle[e]) {
			t.Errorf("evaluate %q = %q (error %q), gdb prints %q", e, got.Result, msg, oracle[e])
		}
	}
	// Without debugging information the return type must be given, as gdb asks.
	if _, msg := evalIn(d, frames[0].Id, "strlen(name)", "repl"); !strings.Contains(msg, "'strlen' has unknown return type; cast the call to its declared return type") {
		t.Errorf("strlen(name): %q", msg)
	}
	// Structures by value are refused before anything runs.
	for call, want := range map[string]string{
		"make_pair(1)":      "calling a function that returns `struct pair' is not supported",
		"pair_sum(origin)":  "passing `struct pair' by value (argument 1) is not supported",
		"pair_sum(bump(1))": "passing `struct pair' by value (argument 1) is not supported",
	} {
		if _, msg := evalIn(d, frames[0].Id, call, "watch"); msg != want {
			t.Errorf("evaluate %q: %q, want %q", call, msg, want)
		}
	}
	// Floating point: the values the program's own calls computed.
	for call, native := range map[string]string{"mix(ratio, 0.25, 3)": "mix_native", "halve(ratio)": "halve_native",
		"fsum(1, 2, 3, 4, 5, 6, 7, 8, 9, 10)": "fsum_native", "halve(3)": "halve_native + 0.75f"} {
		got, msg := evalIn(d, frames[0].Id, call, "watch")
		want, _ := evalIn(d, frames[0].Id, native, "watch")
		if msg != "" || got.Result != want.Result || want.Result == "" || got.Type != strings.Fields(want.Type)[0] {
			t.Errorf("evaluate %q = %q %q (error %q); the program computed %s = %q %q", call, got.Result, got.Type, msg,
				native, want.Result, want.Type)
		}
	}
	// A signal inside the called function: gdb's message, and nothing changed.
	if _, msg := evalIn(d, frames[0].Id, "crash(0)", "repl"); !strings.HasPrefix(msg,
		"The program being debugged was signaled while in a function called from the expression: SIGSEGV (") ||
		!strings.Contains(msg, "in crash at calls.c:") || !strings.Contains(msg, "(crash) was abandoned") {
		t.Errorf("crash(0): %q", msg)
	}
	frames = d.stackTrace(st.ThreadId)
	after := d.scopeVars(frames[0].Id, "Registers")
	if len(after) != len(before) || len(before) < 20 {
		t.Errorf("registers: %d before the calls, %d after", len(before), len(after))
	}
	sameRegisters(t, before, after)
	// The program goes on from where it stopped, with the global the calls left.
	var cont dap.ContinueResponseBody
	d.call("continue", map[string]any{"threadId": st.ThreadId}, &cont)
	var exited dap.ExitedEventBody
	d.event("exited").Decode(&exited)
	if exited.ExitCode != 0 {
		t.Errorf("exit code %d", exited.ExitCode)
	}
	if out := allOutput(d); !strings.Contains(out, "start 8 0") || !strings.Contains(out, "counter 9 abcdefg 1.5") {
		t.Errorf("output:\n%s", out)
	}
}

// TestFunctionCallsIFunc calls libc's strlen in a static x86-64 program, where it is a GNU
// indirect function: its symbol names a resolver, which the call runs first.
func TestFunctionCallsIFunc(t *testing.T) {
	t.Parallel()
	static := compileC(t, "calls", "-static")
	if out, err := exec.Command("readelf", "-s", static.bin).Output(); err != nil ||
		!regexp.MustCompile(`IFUNC\s+GLOBAL\s+\S+\s+\S+\s+strlen\n`).Match(out) {
		t.Fatalf("strlen is not an indirect function in the static program (%v)", err)
	}
	oracle := callOracle(t, static)
	d := newDAP(t, viaPipe)
	defer d.close()
	d.launch(map[string]any{"program": static.bin})
	d.setBreakpoints(static.src, static.line(t, "stop"))
	d.call("configurationDone", nil, nil)
	st := d.stopped()
	frames := d.stackTrace(st.ThreadId)
	for _, e := range []string{"(int)strlen(name)", "(unsigned long)strlen(greeting)"} {
		got, msg := evalIn(d, frames[0].Id, e, "repl")
		if !sameAsGDB(got, msg, oracle[e]) {
			t.Errorf("evaluate %q = %q (error %q), gdb prints %q", e, got.Result, msg, oracle[e])
		}
	}
}

func TestFunctionCallsAcrossRanks(t *testing.T) {
	t.Parallel()
	p := compileC(t, "calls")
	d := newDAP(t, viaPipe)
	defer d.close()
	// Each rank stops at the mark on its own (stop mode rank), so that every rank has set
	// rank_id when the expression is compared.
	d.launch(map[string]any{"program": p.bin, "np": 4, "stopMode": "rank"})
	d.setBreakpoints(p.src, p.line(t, "stop"))
	d.call("configurationDone", nil, nil)
	for range 4 {
		if st := d.stopped(); st.Reason != "breakpoint" {
			t.Fatalf("stopped %+v", st)
		}
	}
	var cmp CompareBody
	d.call("hpcdap/compareExpression", map[string]any{"expression": "add(rank_id, 10) * bump(rank_id)"}, &cmp)
	if len(cmp.Groups) != 4 || len(cmp.Errors) != 0 {
		t.Fatalf("compareExpression: %+v", cmp)
	}
	for _, g := range cmp.Groups {
		r := rankset.MustParse(g.Ranks, 4).Min()
		if want := fmt.Sprint((r + 10) * (3 + r)); g.Count != 1 || g.Value != want {
			t.Errorf("rank %d: %q, want %s", r, g.Value, want)
		}
	}
	// Each rank's call changed its own counter, once.
	d.call("hpcdap/compareExpression", map[string]any{"expression": "counter - rank_id"}, &cmp)
	if len(cmp.Groups) != 1 || cmp.Groups[0].Value != "3" || cmp.Groups[0].Ranks != "0-3" {
		t.Errorf("counter - rank_id across ranks after one bump each: %+v", cmp)
	}
	d.call("hpcdap/compareExpression", map[string]any{"expression": "crash(0)"}, &cmp)
	if len(cmp.Errors) != 1 || cmp.Errors[0].Ranks != "0-3" || !strings.Contains(cmp.Errors[0].Message, "SIGSEGV") {
		t.Errorf("crash(0) across ranks: %+v", cmp)
	}
	d.setBreakpoints(p.src)
	for _, r := range d.ranks().Ranks {
		d.call("continue", map[string]any{"threadId": r.ThreadID}, nil)
	}
	d.event("terminated")
	out := allOutput(d)
	for r := 0; r < 4; r++ {
		if !strings.Contains(out, fmt.Sprintf("counter %d abcdefg 1.5", 3+r)) {
			t.Errorf("rank %d did not print its bumped counter:\n%s", r, out)
		}
	}
}

// TestFunctionCallsEmulatedPower calls functions in Power programs (ELFv1 big-endian, ELFv2
// little-endian) under QEMU and compares with gdb-multiarch's print of the same calls on a
// second QEMU, floating point included; a signal in a call leaves the registers as they were.
func TestFunctionCallsEmulatedPower(t *testing.T) {
	t.Parallel()
	exprs := append([]string{"mix(ratio, 0.25, 3)", "halve(ratio)", "halve(3)", "fsum(1, 2, 3, 4, 5, 6, 7, 8, 9, 10)"},
		callExprs...)
	for _, tg := range powerTargets {
		t.Run(tg.emulator, func(t *testing.T) {
			emulator := modernQEMU(t, tg.emulator)
			p := compilePowerC(t, tg, "calls")
			dumps, out := emulatedOracle(t, p, emulator, []string{"ORACLE_EXPRS=" + jsonList(exprs)},
				"set unwindonsignal on", fmt.Sprintf("break calls.c:%d", p.line(t, "stop")), "continue", "oracle-dump")
			oracle := dumps[0].Exprs
			if len(oracle) != len(exprs) {
				t.Fatalf("gdb evaluated %d of %d expressions:\n%s", len(oracle), len(exprs), out)
			}
			d := newDAP(t, viaPipe)
			defer d.close()
			d.launch(map[string]any{"program": p.bin, "emulator": tg.emulator})
			d.setBreakpoints(p.src, p.line(t, "stop"))
			d.call("configurationDone", nil, nil)
			st := d.stopped()
			frames := d.stackTrace(st.ThreadId)
			before := d.scopeVars(frames[0].Id, "Registers")
			for _, e := range exprs {
				got, msg := evalIn(d, frames[0].Id, e, "watch")
				if !sameAsGDB(got, msg, oracle[e]) {
					t.Errorf("evaluate %q = %q (error %q), gdb prints %q", e, got.Result, msg, oracle[e])
				}
			}
			if _, msg := evalIn(d, frames[0].Id, "crash(0)", "repl"); !strings.HasPrefix(msg,
				"The program being debugged was signaled while in a function called from the expression: SIGSEGV (") {
				t.Errorf("crash(0): %q", msg)
			}
			frames = d.stackTrace(st.ThreadId)
			after := d.scopeVars(frames[0].Id, "Registers")
			if len(after) != len(before) || len(before) < 32 {
				t.Errorf("registers: %d before the calls, %d after", len(before), len(after))
			}
			sameRegisters(t, before, after)
			continueToExit(t, d, st.ThreadId, "counter 9 abcdefg 1.5")
		})
	}
}

// TestFunctionCallThreadsTimeoutBreakpoints: during a call the process's other thread does not
// run; a call that does not return is interrupted after the launch's callTimeout with the
// thread restored; a breakpoint inside a called function is passed over and stops the program
// when it later runs there itself.
func TestFunctionCallThreadsTimeoutBreakpoints(t *testing.T) {
	t.Parallel()
	p := compileC(t, "callthreads")
	d := newDAP(t, viaPipe)
	defer d.close()
	d.launch(map[string]any{"program": p.bin, "callTimeout": 0.5})
	d.setBreakpoints(p.src, p.line(t, "stop"), p.line(t, "nap"))
	d.call("configurationDone", nil, nil)
	st := d.stopped()
	frames := d.stackTrace(st.ThreadId)
	before := d.scopeVars(frames[0].Id, "Registers")
	ticks, _ := evalIn(d, frames[0].Id, "ticks", "watch")
	if v, msg := evalIn(d, frames[0].Id, "nap(200)", "repl"); v.Result != "200" {
		t.Errorf("nap(200) = %q (error %q)", v.Result, msg)
	}
	if after, _ := evalIn(d, frames[0].Id, "ticks", "watch"); after.Result != ticks.Result || ticks.Result == "" {
		t.Errorf("ticks %q before the call, %q after: the other thread ran", ticks.Result, after.Result)
	}
	if _, msg := evalIn(d, frames[0].Id, "spin()", "repl"); !strings.Contains(msg, "did not return within 500ms") ||
		!strings.Contains(msg, "in spin at callthreads.c:") {
		t.Errorf("spin(): %q", msg)
	}
	frames = d.stackTrace(st.ThreadId)
	after := d.scopeVars(frames[0].Id, "Registers")
	sameRegisters(t, before, after)
	d.call("continue", map[string]any{"threadId": st.ThreadId}, nil)
	st = d.stopped()
	if top := d.stackTrace(st.ThreadId)[0]; st.Reason != "breakpoint" || top.Name != "nap" || top.Line != p.line(t, "nap") {
		t.Errorf("stopped (%s) in %s line %d, want the breakpoint in nap", st.Reason, top.Name, top.Line)
	}
	d.setBreakpoints(p.src)
	continueToExit(t, d, st.ThreadId, "done 1")
}

// TestFunctionCallsCXXMethods calls C++ member functions (the object's address is the hidden
// this argument, moved to the base for a base class's function; a virtual function through
// the object's virtual table), overloads chosen by their number of arguments, compared with
// gdb's print on the same program under QEMU.
func TestFunctionCallsCXXMethods(t *testing.T) {
	t.Parallel()
	needTool(t, "gdb-multiarch")
	exprs := []string{"c.add(2)", "pc->add(5)", "c.add(2, 3)", "b.area()", "c.add(b.area())", "c.bump(2)", "c.base + 0", "mx.twice_b()", "sp->sides()", "sq.sides()"}
	static := compileWith(t, "g++", "callscpp", ".cpp", "-static")
	dumps, out := emulatedOracle(t, static, testenv.QEMUUser(t, "qemu-x86_64"), []string{"ORACLE_EXPRS=" + jsonList(exprs)},
		fmt.Sprintf("break callscpp.cpp:%d", static.line(t, "stop")), "continue", "oracle-dump")
	oracle := dumps[0].Exprs
	if len(oracle) != len(exprs) {
		t.Fatalf("gdb evaluated %d of %d expressions:\n%s", len(oracle), len(exprs), out)
	}
	p := compileWith(t, "g++", "callscpp", ".cpp")
	d := newDAP(t, viaPipe)
	defer d.close()
	d.launch(map[string]any{"program": p.bin})
	d.setBreakpoints(p.src, p.line(t, "stop"))
	d.call("configurationDone", nil, nil)
	st := d.stopped()
	frames := d.stackTrace(st.ThreadId)
	for _, e := range exprs {
		got, msg := evalIn(d, frames[0].Id, e, "watch")
		if !sameAsGDB(got, msg, oracle[e]) {
			t.Errorf("evaluate %q = %q (error %q), gdb prints %q", e, got.Result, msg, oracle[e])
		}
	}
	if _, msg := evalIn(d, frames[0].Id, "c.nosuch(1)", "watch"); msg != "Couldn't find method Counter::nosuch" {
		t.Errorf("c.nosuch(1): %q", msg)
	}

}

// TestFunctionCallExits: a called function that ends the program is reported as such, and the
// session sees the exit with the function's code.
func TestFunctionCallExits(t *testing.T) {
	t.Parallel()
	p := compileC(t, "callthreads")
	d := newDAP(t, viaPipe)
	defer d.close()
	d.launch(map[string]any{"program": p.bin})
	d.setBreakpoints(p.src, p.line(t, "stop"))
	d.call("configurationDone", nil, nil)
	st := d.stopped()
	frames := d.stackTrace(st.ThreadId)
	if _, msg := evalIn(d, frames[0].Id, "end_program(3)", "repl"); msg != "The program (rank 0) exited while in the function end_program called from the expression." {
		t.Errorf("end_program(3): %q", msg)
	}
	var exited dap.ExitedEventBody
	d.event("exited").Decode(&exited)
	if exited.ExitCode != 3 {
		t.Errorf("exit code %d, want 3", exited.ExitCode)
	}
	d.event("terminated")
}

// BenchmarkFunctionCall times evaluate of a call (add(2, 3)) at one stop: the CDTI round trip
// and the agent's save, run to the return trap and restore.
func BenchmarkFunctionCall(b *testing.B) {
	p := compileC(b, "calls")
	d := newDAP(b, viaPipe)
	defer d.close()
	d.launch(map[string]any{"program": p.bin})
	d.setBreakpoints(p.src, p.line(b, "stop"))
	d.call("configurationDone", nil, nil)
	st := d.stopped()
	fid := d.stackTrace(st.ThreadId)[0].Id
	var l latency
	for b.Loop() {
		l.time(func() {
			if v, msg := evalIn(d, fid, "add(2, 3)", "repl"); v.Result != "5" {
				b.Fatalf("add(2, 3) = %q (%s)", v.Result, msg)
			}
		})
	}
	l.report(b)
}

// TestFunctionCallInBlockedThread calls a function in a thread stopped inside a blocking
// read(2): the call runs (the system call is not restarted under it) and, once the program
// goes on, the read is restarted and returns what the other thread writes.
func TestFunctionCallInBlockedThread(t *testing.T) {
	t.Parallel()
	p := compileC(t, "callsyscall")
	d := newDAP(t, viaPipe)
	defer d.close()
	d.launch(map[string]any{"program": p.bin})
	d.setBreakpoints(p.src, p.line(t, "ready"))
	d.call("configurationDone", nil, nil)
	st := d.stopped()
	mainTid := d.ranks().Ranks[0].ThreadID
	if st.ThreadId == mainTid {
		t.Fatalf("the breakpoint stopped the main thread")
	}
	var mainFrame *dap.StackFrame
	for _, f := range d.stackTrace(mainTid) {
		if f.Name == "main" {
			mainFrame = &f
			break
		}
	}
	if mainFrame == nil {
		t.Fatalf("the main thread has no frame of main")
	}
	top := d.stackTrace(mainTid)[0]
	if !strings.Contains(top.Name, "read") {
		t.Fatalf("the main thread stands in %s, not in read", top.Name)
	}
	before := d.scopeVars(top.Id, "Registers")
	if rax := before["rax"].Value; rax != "0xfffffffffffffe00" { // -ERESTARTSYS: a read to restart
		t.Errorf("rax %q in the blocked thread, want -ERESTARTSYS (a system call to restart)", rax)
	}
	if v, msg := evalIn(d, mainFrame.Id, "add(40, 2)", "repl"); v.Result != "42" {
		t.Fatalf("add(40, 2) in the blocked thread = %q (error %q)", v.Result, msg)
	}
	after := d.scopeVars(d.stackTrace(mainTid)[0].Id, "Registers")
	sameRegisters(t, before, after)
	d.setBreakpoints(p.src)
	continueToExit(t, d, st.ThreadId, "read 1 x")
}

// sameRegisters checks that a thread's registers (the Registers scope) are what they were
// before the calls.
func sameRegisters(t *testing.T, before, after map[string]dap.Variable) {
	t.Helper()
	for name, v := range before {
		if after[name].Value != v.Value {
			t.Errorf("register %s: %s before the calls, %s after", name, v.Value, after[name].Value)
		}
	}
}

// continueToExit continues thread tid's rank and checks that the program exits with code 0
// having printed want.
func continueToExit(t *testing.T, d *dapSession, tid int, want string) {
	t.Helper()
	d.call("continue", map[string]any{"threadId": tid}, nil)
	var exited dap.ExitedEventBody
	d.event("exited").Decode(&exited)
	if out := allOutput(d); exited.ExitCode != 0 || !strings.Contains(out, want) {
		t.Errorf("exit code %d, output:\n%s", exited.ExitCode, out)
	}
}

// TestClientGoneCancelsRequestInFlight: a client that goes away while a request is in flight
// (here a function call that does not return, under a callTimeout of ten minutes) ends its
// session at once: the call is abandoned and the launched program is killed, instead of the
// session waiting for the call's time limit first.
func TestClientGoneCancelsRequestInFlight(t *testing.T) {
	t.Parallel()
	p := compileC(t, "callthreads")
	d := newDAP(t, viaPipe)
	d.launch(map[string]any{"program": p.bin, "callTimeout": 600})
	d.setBreakpoints(p.src, p.line(t, "stop"))
	d.call("configurationDone", nil, nil)
	st := d.stopped()
	frames := d.stackTrace(st.ThreadId)
	pid := d.ranks().Ranks[0].Pid
	if _, _, err := d.c.Send("evaluate", map[string]any{"expression": "spin()", "frameId": frames[0].Id, "context": "repl"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "spin() to run in the program", func() bool { return strings.HasPrefix(procStatus(pid, "State"), "R") })
	d.end() // the client hangs up; the session must end (waited for at most 30 s)
	if st := procStatus(pid, "State"); st != "" && !strings.HasPrefix(st, "Z") {
		t.Errorf("the launched program (pid %d) is %q after its client went away during a call", pid, st)
	}
}
