package adapter

import (
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-dap"
)

// TestGotoSkipsALine: stopped before a line, goto to the next one skips it (its assignment is
// not made) and the variable keeps its value; at a later line the value is what gdb's jump
// gives on the same program. A goto to a line of another function is refused with an error
// naming both functions, and the thread stays where it was.
func TestGotoSkipsALine(t *testing.T) {
	p := compileC(t, "jump", "-O0")
	out, err := exec.Command(needTool(t, "gdb"), append(jumpCommands(p, "run"), p.bin)...).CombinedOutput()
	checkGoto(t, p, gdbJumpResult(t, out, err), map[string]any{"program": p.bin})
}

// TestGotoPower is TestGotoSkipsALine on Power programs under QEMU (big-endian ELFv1 and
// ppc64le), gdb-multiarch on a second QEMU the oracle: the pc is set through the architecture's
// own pc register.
func TestGotoPower(t *testing.T) {
	for _, tg := range powerTargets {
		t.Run(tg.emulator, func(t *testing.T) {
			emulator := modernQEMU(t, tg.emulator)
			p := compilePowerC(t, tg, "jump")
			_, out := emulatedOracle(t, p, emulator, nil, append(jumpCommandsEx(p, "continue"), "python print('ORACLE {}')")...)
			checkGoto(t, p, gdbJumpResult(t, []byte(out), nil), map[string]any{"program": p.bin, "emulator": tg.emulator})
		})
	}
}

// jumpCommandsEx are gdb's commands for the oracle: stop before the skipped line, jump to the
// next one, print a at the end (start: "run", or "continue" on a stub).
func jumpCommandsEx(p *program, start string) []string {
	return []string{fmt.Sprintf("break jump.c:%d", p.marks["jump-skipped"]), fmt.Sprintf("break jump.c:%d", p.marks["jump-end"]),
		start, fmt.Sprintf("jump jump.c:%d", p.marks["jump-to"]), "print a"}
}

// jumpCommands are jumpCommandsEx as gdb -batch arguments.
func jumpCommands(p *program, start string) []string {
	args := []string{"-nx", "-batch"}
	for _, c := range jumpCommandsEx(p, start) {
		args = append(args, "-ex", c)
	}
	return args
}

// gdbJumpResult is the value gdb printed for a after its jump.
func gdbJumpResult(t *testing.T, out []byte, err error) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^\$1 = (-?\d+)$`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("gdb: %v\n%s", err, out)
	}
	return string(m[1])
}

// checkGoto runs the DAP side of the goto tests: launched with args, stopped before the
// skipped line, a goto into another function refused, a goto to the next line, and a at the
// end compared with want (gdb's).
func checkGoto(t *testing.T, p *program, want string, args map[string]any) {
	skipped, to, end := p.line(t, "jump-skipped"), p.line(t, "jump-to"), p.line(t, "jump-end")
	d := newDAP(t, viaPipe)
	defer d.close()
	var caps dap.Capabilities
	d.call("initialize", map[string]any{"adapterID": "hpcdap", "linesStartAt1": true}, &caps)
	if !caps.SupportsGotoTargetsRequest {
		t.Fatal("supportsGotoTargetsRequest not advertised")
	}
	d.call("launch", args, nil)
	d.event("initialized")
	d.setBreakpoints(p.src, skipped, end)
	d.call("configurationDone", nil, nil)
	st := d.stopped()
	source := map[string]any{"path": p.src}

	// Refused: a line of twice, from main.
	var other dap.GotoTargetsResponseBody
	d.call("gotoTargets", map[string]any{"source": source, "line": p.line(t, "twice-body")}, &other)
	if len(other.Targets) != 1 {
		t.Fatalf("gotoTargets: %+v", other)
	}
	msg := d.callErr("goto", map[string]any{"threadId": st.ThreadId, "targetId": other.Targets[0].Id})
	if !strings.Contains(msg, "twice") || !strings.Contains(msg, "main") {
		t.Errorf("goto into another function: error %q, want one naming twice and main", msg)
	}
	if f := d.stackTrace(st.ThreadId); f[0].Line != skipped {
		t.Fatalf("after a refused goto the thread is at line %d, want %d", f[0].Line, skipped)
	}

	var targets dap.GotoTargetsResponseBody
	d.call("gotoTargets", map[string]any{"source": source, "line": to}, &targets)
	if len(targets.Targets) != 1 || targets.Targets[0].Line != to {
		t.Fatalf("gotoTargets: %+v", targets)
	}
	d.call("goto", map[string]any{"threadId": st.ThreadId, "targetId": targets.Targets[0].Id}, nil)
	if ev := d.stopped(); ev.Reason != "goto" || ev.ThreadId != st.ThreadId {
		t.Fatalf("after goto: stopped %+v, want reason goto on thread %d", ev, st.ThreadId)
	}
	frames := d.stackTrace(st.ThreadId)
	if frames[0].Line != to {
		t.Fatalf("after goto the thread is at line %d, want %d", frames[0].Line, to)
	}
	var a dap.EvaluateResponseBody
	d.call("evaluate", map[string]any{"expression": "a", "frameId": frames[0].Id, "context": "watch"}, &a)
	if a.Result != "1" {
		t.Errorf("a after the goto = %s, want 1 (the skipped line not run)", a.Result)
	}
	d.call("continue", map[string]any{"threadId": st.ThreadId}, nil)
	if ev := d.stopped(); ev.Reason != "breakpoint" {
		t.Fatalf("stopped %+v, want the breakpoint at line %d", ev, end)
	}
	frames = d.stackTrace(st.ThreadId)
	d.call("evaluate", map[string]any{"expression": "a", "frameId": frames[0].Id, "context": "watch"}, &a)
	if frames[0].Line != end || a.Result != want {
		t.Errorf("at line %d a = %s; gdb's jump gives a = %s at line %d", frames[0].Line, a.Result, want, end)
	}
}
