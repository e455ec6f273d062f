package adapter

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/google/go-dap"
)

// scopeExprs are evaluated at each stop of TestEvaluateScopesAgainstGDB and compared with gdb.
var scopeExprs = []string{"shadow", "level", "gshadow", "daylight", "mode", "opterr", "GREEN", "GREEN + 1",
	"(enum color)6", "c", "environ != 0", "stdout == &_IO_2_1_stdout_", "stdout->_fileno", "other_static",
	"shared_global", "timezone == 0 || timezone != 0", "nosuchname", "true", "false", "nullptr", "(long)helper", "(long)other_sum", "(long)puts"}

// libraryInternal names exist in libc's debugging information only with internal linkage (an
// enumerator, a static): the language does not let the program name them, so they are not
// found. gdb's last resort searches every static block of every object and finds them; the
// adapter follows the language here and only gdb's message is compared.
var libraryInternal = []string{"var", "main_arena"}

// TestEvaluateScopesAgainstGDB: names resolve as C's scopes say — block, function, file
// statics and enumerators, the program's globals, then the libraries' external names — at a
// stop in a nested block, in a function's body and in another function, compared with gdb.
func TestEvaluateScopesAgainstGDB(t *testing.T) {
	t.Parallel()
	other, err := filepath.Abs(filepath.Join("testdata", "scopes_other.c"))
	if err != nil {
		t.Fatal(err)
	}
	p := compileC(t, "scopes", other)
	d := newDAP(t, viaPipe)
	defer d.close()
	d.launch(map[string]any{"program": p.bin})
	marks := []string{"main-function", "helper", "main-block"}
	var lines []int
	var gdbCmds []string
	for _, m := range marks {
		lines = append(lines, p.line(t, m))
		gdbCmds = append(gdbCmds, fmt.Sprintf("break scopes.c:%d", p.line(t, m)))
	}
	gdbCmds = append(gdbCmds, "run", "oracle-dump", "continue", "oracle-dump", "continue", "oracle-dump", "kill")
	oracle := gdbOracle(t, p, []string{"ORACLE_EXPRS=" + jsonList(append(scopeExprs, libraryInternal...))}, nil, gdbCmds...)
	if len(oracle) != len(marks) {
		t.Fatalf("gdb stopped %d times, want %d", len(oracle), len(marks))
	}
	d.setBreakpoints(p.src, lines...)
	d.call("configurationDone", nil, nil)
	for i, m := range marks {
		st := d.stopped()
		frames := d.stackTrace(st.ThreadId)
		if len(frames) == 0 || frames[0].Line != p.line(t, m) {
			t.Fatalf("stop %d: %s, want line %d (%s)", i, frameList(frames), p.line(t, m), m)
		}
		fid := frames[0].Id
		for _, e := range scopeExprs {
			want := oracle[i].Exprs[e]
			got, msg := evaluateOrError(d, e, fid)
			if msg != "" {
				got = "<error: " + msg + ">"
			}
			if got != want {
				t.Errorf("at %s: evaluate %q = %q, gdb %q", m, e, got, want)
			}
		}
		for _, e := range libraryInternal {
			want := fmt.Sprintf("No symbol %q in current context.", e)
			if _, msg := evaluateOrError(d, e, fid); msg != want {
				t.Errorf("at %s: evaluate %q: %q, want %q", m, e, msg, want)
			}
		}
		if i == 0 {
			// Outside any frame names are seen as the program sees them: its file statics and
			// enumerators before a library's globals, never a library's internal names.
			for e, want := range map[string]string{"shadow": "10", "level": "1", "daylight": "daylight", "opterr": "5"} {
				var ev dap.EvaluateResponseBody
				d.call("evaluate", map[string]any{"expression": e, "context": "watch"}, &ev)
				if ev.Result != want {
					t.Errorf("evaluate %q without a frame = %q, want %q", e, ev.Result, want)
				}
			}
			if msg := d.callErr("evaluate", map[string]any{"expression": "var", "context": "watch"}); msg != `No symbol "var" in current context.` {
				t.Errorf("evaluate \"var\" without a frame: %q", msg)
			}
		}
		d.call("continue", map[string]any{"threadId": st.ThreadId}, nil)
	}
	d.event("terminated")
}

// evaluateOrError evaluates in a frame's watch context and returns the result, or the error
// response's message.
func evaluateOrError(d *dapSession, expr string, frameID int) (string, string) {
	d.t.Helper()
	m, err := d.c.Request("evaluate", map[string]any{"expression": expr, "frameId": frameID, "context": "watch"})
	if err != nil {
		d.t.Fatalf("evaluate %q: %v", expr, err)
	}
	if !m.Success {
		return "", m.Message
	}
	var ev dap.EvaluateResponseBody
	if err := m.Decode(&ev); err != nil {
		d.t.Fatal(err)
	}
	return ev.Result, ""
}
