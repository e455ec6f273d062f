package adapter

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-dap"
)

// condCase is one conditional breakpoint of testdata/condhits.c: at a MARK line, a condition
// over one kind of operand, and an optional hit condition (with the gdb ignore count that
// means the same).
type condCase struct {
	mark, cond string
	hit        string
	ignore     int
}

var condCases = []condCase{
	{mark: "c-first", cond: "i % 10 == 3"},                                       // argument, remainder
	{mark: "c-local", cond: "k == 7 || k == 2"},                                  // local, ||
	{mark: "c-arg", cond: "f == 0.5f && i > 20"},                                 // float local, float literal
	{mark: "c-float", cond: "x >= 3.5 && x < 5"},                                 // double argument
	{mark: "c-struct", cond: "s.pt.y - s.pt.x == 1 && s.small > 0 && i < 20"},    // struct local fields, short
	{mark: "c-global", cond: "gcount > 20 && gcount <= 26 || gptr->small == 99"}, // globals, pointer member
	{mark: "c-array", cond: "garr[i % 8] == 5 && grec.pt.x < 0 && i > 40"},       // global array, global struct
	{mark: "c-deref", cond: "*p > 100 && *p < 300"},                              // pointer deref (long)
	{mark: "c-logic", cond: "r->next != 0 && r->next->pt.y == 2 && !(i & 1)"},    // pointer chain, !, &
	{mark: "c-unsigned", cond: "u < 5 || (c == 'z' && i % 4 == 1)"},              // unsigned, char literal
	{mark: "c-call", cond: "(v / 7) % 5 == -(i & 3) + 1"},                        // signed division of negatives
	{mark: "c-last", cond: "k % 2 == 0", hit: "4", ignore: 3},                    // hit count over the true hits
}

// gdbCondHits runs condhits under gdb with the cases as conditional breakpoints and returns
// the hits where gdb stopped, in order, as "mark i".
func gdbCondHits(t *testing.T, p *program, cases []condCase, env ...string) []string {
	t.Helper()
	return gdbCondHitsExpr(t, p, cases, "i", env...)
}

// gdbCondHitsExpr is gdbCondHits printing the integer variable v at each stop.
func gdbCondHitsExpr(t *testing.T, p *program, cases []condCase, v string, env ...string) []string {
	t.Helper()
	needTool(t, "gdb")
	var sb strings.Builder
	sb.WriteString("set pagination off\nset confirm off\n")
	for _, c := range cases {
		fmt.Fprintf(&sb, "break %s:%d if %s\n", filepath.Base(p.src), p.line(t, c.mark), c.cond)
		if c.ignore > 0 {
			fmt.Fprintf(&sb, "ignore $bpnum %d\n", c.ignore)
		}
		fmt.Fprintf(&sb, "commands\nsilent\nprintf \"HIT %s %%d\\n\", %s\ncontinue\nend\n", c.mark, v)
	}
	sb.WriteString("run\n")
	script := filepath.Join(p.dir, "cond.gdb")
	if err := os.WriteFile(script, []byte(sb.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("gdb", "-batch", "-nx", "-x", script, p.bin)
	cmd.Dir = p.dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	var hits []string
	for _, l := range strings.Split(string(out), "\n") {
		if h, ok := strings.CutPrefix(l, "HIT "); ok {
			hits = append(hits, h)
		}
	}
	if !strings.Contains(string(out), "total ") {
		t.Fatalf("gdb did not run the program to its end (%v):\n%s", err, out)
	}
	return hits
}

// dapCondHits runs condhits through the adapter with the cases as conditional breakpoints
// and returns the stops, in order, as "mark i", and the output.
func dapCondHits(t *testing.T, p *program, cases []condCase) ([]string, string) {
	t.Helper()
	return dapCondHitsExpr(t, p, cases, "i")
}

// dapCondHitsExpr is dapCondHits reading the variable v at each stop.
func dapCondHitsExpr(t *testing.T, p *program, cases []condCase, v string) ([]string, string) {
	t.Helper()
	d := newDAP(t, viaPipe)
	defer d.close()
	d.launch(map[string]any{"program": p.bin})
	var bps []map[string]any
	for _, c := range cases {
		bp := map[string]any{"line": p.line(t, c.mark), "condition": c.cond}
		if c.hit != "" {
			bp["hitCondition"] = c.hit
		}
		bps = append(bps, bp)
	}
	var resp SetBreakpointsResponseBodyExt
	d.call("setBreakpoints", map[string]any{"source": map[string]any{"path": p.src}, "breakpoints": bps}, &resp)
	marks := map[int]string{}
	for i, bp := range resp.Breakpoints {
		if !bp.Verified {
			t.Fatalf("breakpoint %s not verified: %+v", cases[i].mark, bp)
		}
		marks[bp.Id] = cases[i].mark
	}
	d.call("configurationDone", nil, nil)
	var hits []string
	for {
		m, err := d.c.WaitAny([]string{"stopped", "terminated"}, time.Minute, nil)
		if err != nil {
			t.Fatal(err)
		}
		if m.Event == "terminated" {
			break
		}
		var st dap.StoppedEventBody
		if err := m.Decode(&st); err != nil {
			t.Fatal(err)
		}
		frames := d.stackTrace(st.ThreadId)
		var ev dap.EvaluateResponseBody
		d.call("evaluate", map[string]any{"expression": v, "frameId": frames[0].Id, "context": "watch"}, &ev)
		mark := "?"
		if len(st.HitBreakpointIds) == 1 {
			mark = marks[st.HitBreakpointIds[0]]
		}
		hits = append(hits, mark+" "+ev.Result)
		d.call("continue", map[string]any{"threadId": st.ThreadId}, nil)
	}
	return hits, allOutput(d)
}

// TestAgentConditionsMatchGDB sets a conditional breakpoint over each kind of operand (locals,
// arguments, globals, floats, structs, pointers, arrays, unsigned and char values, and a hit
// count) and checks that the agents, which decide them, stop on exactly the hits gdb stops on.
func TestAgentConditionsMatchGDB(t *testing.T) {
	t.Parallel()
	p := compileC(t, "condhits")
	want := gdbCondHits(t, p, condCases)
	for _, c := range condCases {
		if !slices.ContainsFunc(want, func(h string) bool { return strings.HasPrefix(h, c.mark+" ") }) {
			t.Fatalf("gdb never stops at %s (%s): the case tests nothing", c.mark, c.cond)
		}
	}
	got, out := dapCondHits(t, p, condCases)
	if !slices.Equal(got, want) {
		t.Errorf("stops:\n got %v\nwant %v (gdb)", got, want)
	}
	if strings.Contains(out, "evaluated by the debugger") || strings.Contains(out, "does not evaluate") {
		t.Errorf("a condition was left to the front end:\n%s", out)
	}
}

// TestConditionsFallBackOnRefusingAgent runs the same breakpoints against agents that answer
// SetTrapCondition with CmdInval, as a BG/Q CNK does: the front end decides every hit, with
// the same stops, and says so once.
func TestConditionsFallBackOnRefusingAgent(t *testing.T) {
	t.Setenv("HPCDAP_AGENT_NO_TRAP_CONDITIONS", "1")
	p := compileC(t, "condhits")
	cases := condCases[:4]
	want := gdbCondHits(t, p, cases)
	stopsAsGDBSaidOnce(t, p, cases, want, "does not evaluate breakpoint conditions")
}

// TestConditionNotCompiledFallsBack uses a condition the agent's compiler does not take (a
// cast): the front end evaluates it, says so once, and stops where gdb does.
func TestConditionNotCompiledFallsBack(t *testing.T) {
	t.Parallel()
	p := compileC(t, "condhits")
	cases := []condCase{{mark: "c-first", cond: "(signed char)(i * 9) == 27 || (short)(i * 3000) < -20000"}}
	want := gdbCondHits(t, p, cases)
	if len(want) < 2 {
		t.Fatalf("gdb stops %v: the test wants two at least", want)
	}
	stopsAsGDBSaidOnce(t, p, cases, want, "is evaluated by the debugger at each hit")
}

// TestConditionSyntaxErrorRefused checks that a condition that is no expression is refused
// by setBreakpoints (unverified, with the parser's message), not at the first hit, and that
// the other breakpoints of the request are kept.
func TestConditionSyntaxErrorRefused(t *testing.T) {
	t.Parallel()
	p := compileC(t, "condhits")
	d := newDAP(t, viaPipe)
	defer d.close()
	d.launch(map[string]any{"program": p.bin})
	var resp SetBreakpointsResponseBodyExt
	d.call("setBreakpoints", map[string]any{"source": map[string]any{"path": p.src}, "breakpoints": []map[string]any{
		{"line": p.line(t, "c-first"), "condition": "i =="},
		{"line": p.line(t, "c-local"), "condition": "k == 7"},
		{"line": p.line(t, "c-arg"), "logMessage": "f={f +}"},
	}}, &resp)
	if len(resp.Breakpoints) != 3 {
		t.Fatalf("%+v", resp)
	}
	if b := resp.Breakpoints[0]; b.Verified || !strings.Contains(b.Message, `condition "i =="`) {
		t.Errorf("syntax error: %+v", b)
	}
	if b := resp.Breakpoints[1]; !b.Verified {
		t.Errorf("good condition: %+v", b)
	}
	if b := resp.Breakpoints[2]; b.Verified || !strings.Contains(b.Message, "{f +}") {
		t.Errorf("log message syntax error: %+v", b)
	}
	d.call("configurationDone", nil, nil)
	st := d.stopped()
	if len(st.HitBreakpointIds) != 1 || st.HitBreakpointIds[0] != resp.Breakpoints[1].Id {
		t.Errorf("first stop %+v, want breakpoint %d", st, resp.Breakpoints[1].Id)
	}
}

// TestConditionRunTimeErrorStops uses a condition that follows a null pointer on the first
// hit: as gdb does, the hit stops and the error is said.
func TestConditionRunTimeErrorStops(t *testing.T) {
	t.Parallel()
	p := compileC(t, "condhits")
	cases := []condCase{{mark: "c-first", cond: "r->next->pt.x == 1"}}
	// gdb stops at the first hit (i = 0: recs[0].next is NULL) with the error.
	const bad = "Cannot access memory at address 0x0"
	needTool(t, "gdb")
	out, _ := exec.Command("gdb", "-batch", "-nx", "-ex", fmt.Sprintf("break condhits.c:%d if %s", p.line(t, "c-first"), cases[0].cond),
		"-ex", "run", "-ex", "print i", p.bin).CombinedOutput()
	if !strings.Contains(string(out), bad) || !strings.Contains(string(out), "$1 = 0") {
		t.Fatalf("gdb:\n%s", out)
	}
	d := newDAP(t, viaPipe)
	defer d.close()
	d.launch(map[string]any{"program": p.bin})
	d.call("setBreakpoints", map[string]any{"source": map[string]any{"path": p.src}, "breakpoints": []map[string]any{
		{"line": p.line(t, "c-first"), "condition": cases[0].cond}}}, nil)
	d.call("configurationDone", nil, nil)
	st := d.stopped()
	frames := d.stackTrace(st.ThreadId)
	var ev dap.EvaluateResponseBody
	d.call("evaluate", map[string]any{"expression": "i", "frameId": frames[0].Id, "context": "watch"}, &ev)
	if ev.Result != "0" || st.Reason != "breakpoint" {
		t.Errorf("stop %+v at i = %s, want the breakpoint at i = 0", st, ev.Result)
	}
	if o := allOutput(d); !strings.Contains(o, bad) {
		t.Errorf("no error said:\n%s", o)
	}
}

// TestConditionOnOneRank runs condhits as 8 ranks with a condition that holds on rank 5 only:
// the job stops once, in rank 5, at the hit gdb names.
func TestConditionOnOneRank(t *testing.T) {
	t.Parallel()
	p := compileC(t, "condhits")
	const cond = "rank == 5 && i == 17"
	want := gdbCondHits(t, p, []condCase{{mark: "c-first", cond: cond}}, "HPCDAP_RANK=5")
	if !slices.Equal(want, []string{"c-first 17"}) {
		t.Fatalf("gdb on rank 5: %v", want)
	}
	d := newDAP(t, viaPipe)
	defer d.close()
	d.launch(map[string]any{"program": p.bin, "np": 8})
	d.call("setBreakpoints", map[string]any{"source": map[string]any{"path": p.src}, "breakpoints": []map[string]any{
		{"line": p.line(t, "c-first"), "condition": cond}}}, nil)
	d.call("configurationDone", nil, nil)
	st := d.stopped()
	frames := d.stackTrace(st.ThreadId)
	for _, e := range []struct{ expr, want string }{{"rank", "5"}, {"i", "17"}} {
		var ev dap.EvaluateResponseBody
		d.call("evaluate", map[string]any{"expression": e.expr, "frameId": frames[0].Id, "context": "watch"}, &ev)
		if ev.Result != e.want {
			t.Errorf("stopped with %s = %s, want %s", e.expr, ev.Result, e.want)
		}
	}
	d.call("continue", map[string]any{"threadId": st.ThreadId}, nil)
	d.event("terminated")
	if n := len(d.c.Events("stopped")); n != 1 {
		t.Errorf("%d stops, want 1", n)
	}
}

// TestConditionManyThreads has four threads pass a conditional breakpoint together, 2000
// times each: every hit where the condition holds stops once, in its own thread, and no
// other does.
func TestConditionManyThreads(t *testing.T) {
	t.Parallel()
	p := compileC(t, "condthreads")
	d := newDAP(t, viaPipe)
	defer d.close()
	d.launch(map[string]any{"program": p.bin})
	d.call("setBreakpoints", map[string]any{"source": map[string]any{"path": p.src}, "breakpoints": []map[string]any{
		{"line": p.line(t, "tick"), "condition": "n % 500 == 0 && n > 0"}}}, nil)
	d.call("configurationDone", nil, nil)
	seen := map[string]int{}
	for {
		m, err := d.c.WaitAny([]string{"stopped", "terminated"}, time.Minute, nil)
		if err != nil {
			t.Fatal(err)
		}
		if m.Event == "terminated" {
			break
		}
		var st dap.StoppedEventBody
		m.Decode(&st)
		frames := d.stackTrace(st.ThreadId)
		args := d.scopeVars(frames[0].Id, "Arguments")
		seen[args["id"].Value+"/"+args["n"].Value]++
		d.call("continue", map[string]any{"threadId": st.ThreadId}, nil)
	}
	var want []string
	for id := 0; id < 4; id++ {
		for _, n := range []int{500, 1000, 1500} {
			want = append(want, fmt.Sprintf("%d/%d", id, n))
		}
	}
	for _, w := range want {
		if seen[w] != 1 {
			t.Errorf("hit id/n = %s stopped %d times, want once", w, seen[w])
		}
	}
	if len(seen) != len(want) {
		t.Errorf("stops %v, want %v", seen, want)
	}
}

// logPointRun runs condhits with a log point at c-global (a condition and a hit condition too)
// and returns the lines it printed.
func logPointRun(t *testing.T, p *program, msg, cond, hit string) ([]string, string) {
	t.Helper()
	d := newDAP(t, viaPipe)
	defer d.close()
	d.launch(map[string]any{"program": p.bin})
	var resp SetBreakpointsResponseBodyExt
	d.call("setBreakpoints", map[string]any{"source": map[string]any{"path": p.src}, "breakpoints": []map[string]any{
		{"line": p.line(t, "c-global"), "condition": cond, "hitCondition": hit, "logMessage": msg}}}, &resp)
	if len(resp.Breakpoints) != 1 || !resp.Breakpoints[0].Verified {
		t.Fatalf("log point: %+v", resp)
	}
	d.call("configurationDone", nil, nil)
	d.event("terminated")
	out := allOutput(d)
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "probe ") {
			lines = append(lines, l)
		}
	}
	if n := len(d.c.Events("stopped")); n != 0 {
		t.Errorf("a log point stopped %d times", n)
	}
	return lines, out
}

// TestLogPointMatchesDprintf: a log point with a condition and a hit count, formatted by the
// agent, prints the lines gdb's dprintf prints with the same condition and ignore count.
func TestLogPointMatchesDprintf(t *testing.T) {
	t.Parallel()
	p := compileC(t, "condhits")
	needTool(t, "gdb")
	script := filepath.Join(p.dir, "dprintf.gdb")
	os.WriteFile(script, []byte(fmt.Sprintf("set pagination off\n"+
		"dprintf condhits.c:%d,\"probe i=%%d k=%%d small=%%d u=%%u g=%%ld\\n\", i, k, s.small, u, gcount\n"+
		"condition $bpnum i %% 7 == 0\nignore $bpnum 1\nrun\n", p.line(t, "c-global"))), 0o644)
	gout, err := exec.Command("gdb", "-batch", "-nx", "-x", script, p.bin).CombinedOutput()
	var want []string
	for _, l := range strings.Split(string(gout), "\n") {
		if strings.HasPrefix(l, "probe ") {
			want = append(want, l)
		}
	}
	if len(want) < 5 {
		t.Fatalf("gdb dprintf (%v):\n%s", err, gout)
	}
	got, out := logPointRun(t, p, "probe i={i} k={k} small={s.small} u={u} g={gcount}", "i % 7 == 0", "2")
	if !slices.Equal(got, want) {
		t.Errorf("log lines:\n got %q\nwant %q (gdb dprintf)", got, want)
	}
	if strings.Contains(out, "evaluated by the debugger") {
		t.Errorf("the log point was left to the front end:\n%s", out)
	}
}

// TestLogPointAgentMatchesFrontEnd prints chars and unsigned values from the agent and from
// the front end (agents answering CmdInval): the same lines.
func TestLogPointAgentMatchesFrontEnd(t *testing.T) {
	p := compileC(t, "condhits")
	const msg = "probe c={c} tag={s.tag} u={u} neg={-i} x={i * 3 - 100}"
	agentLines, out := logPointRun(t, p, msg, "i < 40", "% 3")
	if strings.Contains(out, "evaluated by the debugger") || len(agentLines) != 13 {
		t.Fatalf("agent: %d lines %q\n%s", len(agentLines), agentLines, out)
	}
	t.Setenv("HPCDAP_AGENT_NO_TRAP_CONDITIONS", "1")
	frontLines, frontOut := logPointRun(t, p, msg, "i < 40", "% 3")
	if !strings.Contains(frontOut, "does not evaluate breakpoint conditions") {
		t.Errorf("the log point was never offered to the agent:\n%s", frontOut)
	}
	if !slices.Equal(agentLines, frontLines) {
		t.Errorf("agent:\n%q\nfront end:\n%q", agentLines, frontLines)
	}
}

// TestAgentConditionsCPlusPlus: conditions over a member through this, bool and char values
// (C++'s char literal and true), a struct argument and a local array, decided by the agents,
// stop where gdb stops.
func TestAgentConditionsCPlusPlus(t *testing.T) {
	t.Parallel()
	p := compileCXX(t, "condcpp")
	cases := []condCase{
		{mark: "cpp-first", cond: "this->count == 3 || this->total > 900 && this->total < 1000"},
		{mark: "cpp-body", cond: "flag == true && ch == 'a' && n > 10"},
		{mark: "cpp-last", cond: "v.x + v.y > 8 && arr[n % 4] == 2"},
	}
	want := gdbCondHitsExpr(t, p, cases, "n")
	for _, c := range cases {
		if !slices.ContainsFunc(want, func(h string) bool { return strings.HasPrefix(h, c.mark+" ") }) {
			t.Fatalf("gdb never stops at %s (%s): the case tests nothing", c.mark, c.cond)
		}
	}
	got, out := dapCondHitsExpr(t, p, cases, "n")
	if !slices.Equal(got, want) {
		t.Errorf("stops:\n got %v\nwant %v (gdb)", got, want)
	}
	if strings.Contains(out, "evaluated by the debugger") {
		t.Errorf("a condition was left to the front end:\n%s", out)
	}
}

// hitCountAcrossChange stops at c-first from the 7th even i on, then changes the condition
// to multiples of 3 (same place: the hit count carries on) and returns the first two stops.
func hitCountAcrossChange(t *testing.T, p *program) []string {
	t.Helper()
	d := newDAP(t, viaPipe)
	defer d.close()
	d.launch(map[string]any{"program": p.bin})
	set := func(cond string) {
		d.call("setBreakpoints", map[string]any{"source": map[string]any{"path": p.src}, "breakpoints": []map[string]any{
			{"line": p.line(t, "c-first"), "condition": cond, "hitCondition": ">= 7"}}}, nil)
	}
	set("i % 2 == 0")
	d.call("configurationDone", nil, nil)
	var stops []string
	for k := 0; k < 2; k++ {
		st := d.stopped()
		frames := d.stackTrace(st.ThreadId)
		var ev dap.EvaluateResponseBody
		d.call("evaluate", map[string]any{"expression": "i", "frameId": frames[0].Id, "context": "watch"}, &ev)
		stops = append(stops, ev.Result)
		if k == 0 {
			set("i % 3 == 0")
		}
		d.call("continue", map[string]any{"threadId": st.ThreadId}, nil)
	}
	return stops
}

// TestHitCountAcrossConditionChange: the hits an agent counted come back to the front end when
// the condition changes, and the new condition counts on from them, as the front end itself
// counts (agents answering CmdInval): 7th even i = 12, then the 8th hit, i = 15.
func TestHitCountAcrossConditionChange(t *testing.T) {
	p := compileC(t, "condhits")
	want := []string{"12", "15"}
	if got := hitCountAcrossChange(t, p); !slices.Equal(got, want) {
		t.Errorf("agent: stops at i = %v, want %v", got, want)
	}
	t.Setenv("HPCDAP_AGENT_NO_TRAP_CONDITIONS", "1")
	if got := hitCountAcrossChange(t, p); !slices.Equal(got, want) {
		t.Errorf("front end: stops at i = %v, want %v", got, want)
	}
}

// TestConditionFortran: conditions in Fortran syntax over a dummy argument (passed by
// reference) and a module variable, with Fortran's operators and logical literals, are decided
// by the agents on exactly the hits gdb stops on; one calling an intrinsic, which the agents'
// compiler does not take, is decided by the front end, which says so once, also as gdb does.
func TestConditionFortran(t *testing.T) {
	t.Parallel()
	// -J: the module file goes to a directory of the test's, not the package's.
	p := compileWith(t, "gfortran", "condfort", ".f90", "-J", t.TempDir())
	for _, cond := range []string{
		"i > 5 .and. i /= 7 .and. i < 10",
		".not. (I .le. 10) .or. i == 3",
		"(i * 4 >= 40) .eqv. .true.",
		"total > 20 .and. i .lt. 9",
		"i * 2147483647 > 2147483647 * 10",
	} {
		cases := []condCase{{mark: "f-probe", cond: cond}}
		want := gdbCondHits(t, p, cases)
		if len(want) == 0 {
			t.Fatalf("%s: gdb never stops: the case tests nothing", cond)
		}
		got, out := dapCondHits(t, p, cases)
		if !slices.Equal(got, want) {
			t.Errorf("%s: stops %v, gdb %v", cond, got, want)
		}
		if strings.Contains(out, "evaluated by the debugger") {
			t.Errorf("%s: left to the front end:\n%s", cond, out)
		}
	}
	cases := []condCase{{mark: "f-probe", cond: "mod(i, 4) == 0"}}
	stopsAsGDBSaidOnce(t, p, cases, gdbCondHits(t, p, cases), "is evaluated by the debugger at each hit")
}

// TestConditionTLS: conditions over the thread-local variables of the main executable, each
// thread reading its own, are decided by the agents on exactly the hits gdb stops on (threads
// interleave, so the stops are compared as sets).
func TestConditionTLS(t *testing.T) {
	t.Parallel()
	p := compileC(t, "tlscond", "-pthread")
	for _, cond := range []string{"tlsv == 305", "tlsv % 100 == 9 && tlsv > 150", "tlsbig + tlsv == 7"} {
		cases := []condCase{{mark: "tls-probe", cond: cond}}
		want := gdbCondHitsExpr(t, p, cases, "tlsv")
		if len(want) == 0 {
			t.Fatalf("%s: gdb never stops: the case tests nothing", cond)
		}
		got, out := dapCondHitsExpr(t, p, cases, "tlsv")
		slices.Sort(want)
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("%s: stops %v, gdb %v", cond, got, want)
		}
		if strings.Contains(out, "evaluated by the debugger") {
			t.Errorf("%s: left to the front end:\n%s", cond, out)
		}
	}
}

// TestHitCountOfInlinedBreakpoint: a breakpoint on a line of an inlined function has a location
// at each call site; its hit condition counts the hits of all of them together, as gdb's
// ignore count does, not each location's apart.
func TestHitCountOfInlinedBreakpoint(t *testing.T) {
	t.Parallel()
	p := compileC(t, "inlined")
	cases := []condCase{{mark: "twice", cond: "v >= 0", hit: "5", ignore: 4}}
	want := gdbCondHitsExpr(t, p, cases, "v")
	got, out := dapCondHitsExpr(t, p, cases, "v")
	if len(want) == 0 || !slices.Equal(got, want) {
		t.Errorf("stops at v = %v, gdb %v\n%s", got, want, out)
	}
}

// stopsAsGDBSaidOnce runs cases through a DAP session and fails unless it stops where gdb did
// (want) and its console says the fallback message said exactly once.
func stopsAsGDBSaidOnce(t *testing.T, p *program, cases []condCase, want []string, said string) {
	t.Helper()
	got, out := dapCondHits(t, p, cases)
	if !slices.Equal(got, want) {
		t.Errorf("stops:\n got %v\nwant %v (gdb)", got, want)
	}
	if n := strings.Count(out, said); n != 1 {
		t.Errorf("the fallback was said %d times, want once:\n%s", n, out)
	}
}
