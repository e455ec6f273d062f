package adapter

import (
	"fmt"
	"os/exec"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-dap"
)

// gdbCompletions asks gdb which members complete each "print EXPR" at a line of p, the
// oracle for member completion: the names after the last "." or "->" of each answer.
func gdbCompletions(t *testing.T, p *program, line int, exprs []string) map[string][]string {
	t.Helper()
	args := []string{"-nx", "-batch", "-ex", fmt.Sprintf("break %d", line), "-ex", "run"}
	for _, e := range exprs {
		args = append(args, "-ex", "echo @@"+e+"\\n", "-ex", "complete print "+e)
	}
	out, err := exec.Command(needTool(t, "gdb"), append(args, p.bin)...).CombinedOutput()
	if err != nil {
		t.Fatalf("gdb: %v\n%s", err, out)
	}
	got := map[string][]string{}
	cur := ""
	for _, l := range strings.Split(string(out), "\n") {
		if e, ok := strings.CutPrefix(l, "@@"); ok {
			cur = e
			got[cur] = []string{}
			continue
		}
		if rest, ok := strings.CutPrefix(l, "print "); ok && cur != "" {
			base := cur[:len(cur)-len(memberPrefix(cur))]
			got[cur] = append(got[cur], strings.TrimPrefix(rest, base))
		}
	}
	return got
}

// memberPrefix is the partial name at the end of an expression.
func memberPrefix(e string) string {
	i := len(e)
	for i > 0 && isIdentChar(e[i-1]) {
		i--
	}
	return e[i:]
}

func isIdentChar(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// completions asks the adapter to complete text at a column (1-based) in a frame.
func completions(d *dapSession, frameID int, text string, column int) []CompletionItem {
	d.t.Helper()
	var b CompletionsBody
	d.call("completions", map[string]any{"frameId": frameID, "text": text, "column": column}, &b)
	return b.Targets
}

func labels(items []CompletionItem) []string {
	out := []string{}
	for _, it := range items {
		out = append(out, it.Label)
	}
	sort.Strings(out)
	return out
}

// TestCompletions: the debug console completes members after "." and "->" as gdb does
// (through a typedef, a pointer, a nested struct and an anonymous union), and names in
// scope — a local that shadows a global once, parameters, the file's statics, functions —
// with start and length replacing the partial name, in the client's column convention.
func TestCompletions(t *testing.T) {
	t.Parallel()
	p := compileC(t, "complete")
	memberExprs := []string{"rootp->", "root.in.", "rootp->inp->w", "(*rootp).t", "root.c", "rootp->in.d"}
	oracle := gdbCompletions(t, p, p.line(t, "main"), memberExprs)
	d := newDAP(t, viaPipe)
	defer d.close()
	d.launch(map[string]any{"program": p.bin})
	d.setBreakpoints(p.src, p.line(t, "compute"), p.line(t, "main"))
	d.call("configurationDone", nil, nil)

	st := d.stopped()
	frames := d.stackTrace(st.ThreadId)
	if len(frames) < 2 || frames[0].Line != p.line(t, "compute") {
		t.Fatalf("first stop: %s, want line %d", frameList(frames), p.line(t, "compute"))
	}
	fid := frames[0].Id
	if got, want := labels(completions(d, fid, "co", 3)), []string{"coeff", "compute", "cooked", "countdown", "counter"}; !reflect.DeepEqual(got, want) {
		t.Errorf("completions of \"co\" in compute: %v, want %v", got, want)
	}
	if got, want := labels(completions(d, fid, "op->i", 6)), []string{"in", "inp"}; !reflect.DeepEqual(got, want) {
		t.Errorf("completions of \"op->i\" in compute: %v, want %v", got, want)
	}
	// The caller's frame sees main's names, not compute's.
	if got, want := labels(completions(d, frames[1].Id, "co", 3)), []string{"compute", "countdown", "counter"}; !reflect.DeepEqual(got, want) {
		t.Errorf("completions of \"co\" in main: %v, want %v", got, want)
	}
	d.call("continue", map[string]any{"threadId": st.ThreadId}, nil)

	st = d.stopped()
	frames = d.stackTrace(st.ThreadId)
	if len(frames) == 0 || frames[0].Line != p.line(t, "main") {
		t.Fatalf("second stop: %s, want line %d", frameList(frames), p.line(t, "main"))
	}
	fid = frames[0].Id
	for _, e := range memberExprs {
		got := labels(completions(d, fid, e, len(e)+1))
		want := append([]string{}, oracle[e]...)
		sort.Strings(want)
		if len(want) == 0 {
			t.Fatalf("gdb completes %q with nothing", e)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("completions of %q: %v, gdb %v", e, got, want)
		}
	}
	// A local shadowing a global is offered once, beside the global it does not shadow.
	items := completions(d, fid, "x = cou", 8)
	if got, want := labels(items), []string{"countdown", "counter"}; !reflect.DeepEqual(got, want) {
		t.Errorf("completions of \"cou\": %v, want %v", got, want)
	}
	for _, it := range items {
		if it.Start != 5 || it.Length != 3 {
			t.Errorf("%s: start %d length %d, want 5 and 3 (\"cou\" at column 5)", it.Label, it.Start, it.Length)
		}
		if it.Label == "counter" && (it.Type != "variable" || it.Detail != "int") {
			t.Errorf("counter: type %q detail %q, want a variable of type int", it.Type, it.Detail)
		}
	}
	// The cursor in the middle of the text completes what is before it.
	if got, want := labels(completions(d, fid, "cache_hits + rootp->inp->de + 1", 28)), []string{"depth"}; !reflect.DeepEqual(got, want) {
		t.Errorf("completions at column 28: %v, want %v", got, want)
	}
	// Nothing to offer is an empty answer, not an error.
	for _, text := range []string{"nosuch", "nosuch->", "counter->", "1.", "x = ."} {
		if got := completions(d, fid, text, len(text)+1); len(got) != 0 {
			t.Errorf("completions of %q: %v, want none", text, labels(got))
		}
	}
	// A failed completion is no news for the user: no showUser.
	for _, args := range []map[string]any{{"frameId": fid, "text": "abc", "column": 9}, {"frameId": 999999, "text": "abc", "column": 4}} {
		m, err := d.c.Request("completions", args)
		if err != nil {
			t.Fatal(err)
		}
		var body dap.ErrorResponseBody
		if m.Success || m.Decode(&body) != nil || body.Error == nil {
			t.Fatalf("completions %v: %+v, want an error", args, m)
		}
		if body.Error.ShowUser || (args["column"] == 9 && !strings.Contains(m.Message, "column 9")) {
			t.Errorf("completions %v: %q, showUser %v", args, m.Message, body.Error.ShowUser)
		}
	}
	if errs := d.c.UnsolicitedErrors(); len(errs) != 0 {
		t.Errorf("unsolicited errors: %v", errs)
	}
	d.call("continue", map[string]any{"threadId": st.ThreadId}, nil)
	d.event("terminated")
}

// TestCompletionsColumnsFromZero: a client counting columns from 0 gets start in its count.
func TestCompletionsColumnsFromZero(t *testing.T) {
	t.Parallel()
	p := compileC(t, "complete")
	d := newDAP(t, viaPipe)
	defer d.close()
	d.call("initialize", map[string]any{"adapterID": "hpcdap", "linesStartAt1": true, "columnsStartAt1": false}, nil)
	d.call("launch", map[string]any{"program": p.bin}, nil)
	d.event("initialized")
	d.setBreakpoints(p.src, p.line(t, "main"))
	d.call("configurationDone", nil, nil)
	st := d.stopped()
	frames := d.stackTrace(st.ThreadId)
	items := completions(d, frames[0].Id, "rootp->co", 9)
	if got, want := labels(items), []string{"color", "count"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("completions of \"rootp->co\": %v, want %v", got, want)
	}
	for _, it := range items {
		if it.Start != 7 || it.Length != 2 {
			t.Errorf("%s: start %d length %d, want 7 and 2", it.Label, it.Start, it.Length)
		}
	}
}

// TestCompletionsCPlusPlus: members of C++ objects complete as gdb completes them — data
// members, base classes' members, the virtual table pointer, member functions (a class's and
// its bases', in a namespace).
func TestCompletionsCPlusPlus(t *testing.T) {
	t.Parallel()
	p := compileCXX(t, "callscpp")
	exprs := []string{"c.", "pc->", "b.", "mx.", "mx.t", "sp->", "sq."}
	oracle := gdbCompletions(t, p, p.line(t, "stop"), exprs)
	d := newDAP(t, viaPipe)
	defer d.close()
	d.launch(map[string]any{"program": p.bin})
	d.setBreakpoints(p.src, p.line(t, "stop"))
	d.call("configurationDone", nil, nil)
	st := d.stopped()
	frames := d.stackTrace(st.ThreadId)
	for _, e := range exprs {
		got := labels(completions(d, frames[0].Id, e, len(e)+1))
		want := append([]string{}, oracle[e]...)
		sort.Strings(want)
		if len(want) == 0 {
			t.Fatalf("gdb completes %q with nothing", e)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("completions of %q: %v, gdb %v", e, got, want)
		}
	}
}
