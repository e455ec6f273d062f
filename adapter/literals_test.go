package adapter

import (
	"fmt"
	"testing"
)

// cxxLiteralExprs are compared with gdb in a C++ frame.
var cxxLiteralExprs = []string{"true", "false", "!true", "true + 1", "sizeof(true)", "b == true", "f.on == false",
	"false || b", "true && f.on", "b ? 10 : 20"}

// TestCXXKeywordLiterals: in a C++ frame true and false are bool literals, as gdb has them, and
// nullptr is the null pointer (which this gdb does not know: the language's meaning is
// checked instead); in a C frame none of them is a name the program has (TestEvaluateScopesAgainstGDB).
func TestCXXKeywordLiterals(t *testing.T) {
	t.Parallel()
	p := compileCXX(t, "literals")
	oracle := gdbOracle(t, p, []string{"ORACLE_EXPRS=" + jsonList(cxxLiteralExprs)}, nil,
		fmt.Sprintf("break literals.cpp:%d", p.line(t, "cxx-stop")), "run", "oracle-dump", "kill")[0]
	d := newDAP(t, viaPipe)
	defer d.close()
	d.launch(map[string]any{"program": p.bin})
	d.setBreakpoints(p.src, p.line(t, "cxx-stop"))
	d.call("configurationDone", nil, nil)
	st := d.stopped()
	frames := d.stackTrace(st.ThreadId)
	fid := frames[0].Id
	for _, e := range cxxLiteralExprs {
		got, msg := evaluateOrError(d, e, fid)
		if msg != "" {
			got = "<error: " + msg + ">"
		}
		if want := oracle.Exprs[e]; got != want {
			t.Errorf("evaluate %q = %q, gdb %q", e, got, want)
		}
	}
	for e, want := range map[string]string{"nullptr": "0x0", "p == nullptr": "false", "f.where == nullptr": "true",
		"p != nullptr && b": "true", "!nullptr": "true", "sizeof(nullptr) == sizeof(p)": "true"} {
		got, msg := evaluateOrError(d, e, fid)
		if msg != "" || got != want {
			t.Errorf("evaluate %q = %q (%s), want %q", e, got, msg, want)
		}
	}
	// An assignment of the literals.
	if got, msg := evaluateOrError(d, "f.where = nullptr", fid); msg != "" || got != "0x0" {
		t.Errorf("f.where = nullptr: %q (%s)", got, msg)
	}
	if got, msg := evaluateOrError(d, "b = false", fid); msg != "" || got != "false" {
		t.Errorf("b = false: %q (%s)", got, msg)
	}
	d.call("disconnect", map[string]any{"terminateDebuggee": true}, nil)
}
