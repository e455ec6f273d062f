package symbols

import (
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// agreement counts items (frames, variables, printed expressions) on which the package and
// gdb agree.
type agreement struct {
	ok, total int
	misses    []string
}

func (a *agreement) check(same bool, what string, args ...any) {
	a.total++
	if same {
		a.ok++
		return
	}
	a.misses = append(a.misses, fmt.Sprintf(what, args...))
}

func (a *agreement) rate() float64 {
	if a.total == 0 {
		return 0
	}
	return float64(a.ok) / float64(a.total)
}

// Agreement thresholds. At -O0 everything this package claims to support must match gdb
// exactly. Optimized code leans on gdb heuristics (entry values through call sites,
// tail-call frames, location lists that name registers the code has since reused), and there
// gdb itself is sometimes wrong: on this toolchain it reads a Fortran deferred-length
// CHARACTER's length through a register as an address, and both debuggers read garbage
// through an assumed-shape descriptor whose register gcc's location list claims is still
// valid, rendering it differently. Measured at -O2: C 100%, C++ 100%, Fortran 97%; the
// threshold of 95% leaves room for such cases while failing on regressions.
var thresholds = map[string]float64{
	"c-O0": 1.0, "c-O2": 0.95,
	"cpp-O0": 1.0, "cpp-O2": 0.95,
	"fortran-O0": 1.0, "fortran-O2": 0.95,
	"c-O2-dwarf4": 0.95,
}

// TestAgainstGDB stops each test program at its marked lines under gdb, has gdb dump a core
// and print its view of the stack, variables and expressions, then checks that the package
// gives the same answers from the core file.
func TestAgainstGDB(t *testing.T) {
	type variant struct {
		name, lang string
		flags      []string
	}
	var variants []variant
	for _, lang := range []string{"c", "cpp", "fortran"} {
		for _, opt := range []string{"-O0", "-O2"} {
			variants = append(variants, variant{lang + opt, lang, []string{"-g", opt}})
		}
	}
	// DWARF 4 (.debug_loc, GNU call-site and entry-value extensions) for optimized C.
	variants = append(variants, variant{"c-O2-dwarf4", "c", []string{"-g", "-O2", "-gdwarf-4"}})
	for _, v := range variants {
		v := v
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			b := buildProgram(t, v.lang, v.flags...)
			live := b.liveDump(t)
			lines := map[string]int{}
			for _, m := range markers(t, b.src) {
				lines[m.Name] = m.Line
			}
			var agr agreement
			for _, st := range live.Stops {
				compareStop(t, b, st, lines[st.Name], &agr)
			}
			rate := agr.rate()
			t.Logf("agreement %s: %d/%d = %.1f%%", v.name, agr.ok, agr.total, 100*rate)
			for _, m := range agr.misses {
				t.Logf("  differs: %s", m)
			}
			if want, ok := thresholds[v.name]; !ok || rate < want {
				t.Errorf("agreement with gdb %.1f%% is below the required %.1f%%", 100*rate, 100*want)
			}
		})
	}
}

// compareStop checks one stop: frames, then each frame's arguments and locals, then the
// printed expressions in frame 0.
func compareStop(t *testing.T, b *built, st gdbStop, line int, agr *agreement) {
	c, err := OpenCore(st.Core, &CoreOptions{Executable: b.exe, Cache: testCache})
	if err != nil {
		t.Errorf("stop %s: open core: %v", st.Name, err)
		agr.check(false, "stop %s: core unreadable", st.Name)
		return
	}
	defer c.Close()
	frames, err := c.Process.Stack(c.Threads[0].Regs, &StackOptions{MaxFrames: 40})
	if err != nil {
		agr.check(false, "stop %s: unwind: %v", st.Name, err)
		return
	}
	for i, g := range st.Frames {
		if i >= len(frames) {
			agr.check(false, "stop %s: frame #%d %s missing (have %d frames)", st.Name, i, g.Name, len(frames))
			continue
		}
		f := frames[i]
		same := f.Name == g.Name && (g.Type == "sigtramp") == (f.Kind == FrameSignal) &&
			(g.Type == "inline") == (f.Kind == FrameInline)
		if g.Line != 0 || f.HasLine {
			same = same && f.Line.Line == g.Line && sameSource(g.File, f.Line.File)
		}
		agr.check(same, "stop %s: frame #%d: gdb %s %s at %s:%d, got %s %s at %s:%d", st.Name, i,
			g.Type, g.Name, g.File, g.Line, f.Kind, f.Name, f.Line.File, f.Line.Line)
		if !same {
			continue
		}
		compareVars(t, st.Name, i, "args", g.Args, f, agr)
		compareVars(t, st.Name, i, "locals", g.Locals, f, agr)
	}
	if len(frames) > len(st.Frames) && len(st.Frames) < 40 {
		agr.check(false, "stop %s: %d frames, gdb has %d (extra #%d %s)", st.Name, len(frames), len(st.Frames),
			len(st.Frames), frames[len(st.Frames)].Name)
	}
	if len(frames) == 0 {
		return
	}
	// gdb stopped at its breakpoint for the marked line: the package places one there too,
	// and maps the stop pc back to a line.
	if len(st.Frames) > 0 {
		pc := st.Frames[0].PC
		locs, err := c.Process.LineBreakpoints(b.src, line)
		found := false
		for _, l := range locs {
			found = found || l.Addr == pc
		}
		agr.check(err == nil && found, "stop %s: gdb stopped at %#x for line %d, breakpoints %v (%v)", st.Name, pc, line, locs, err)
		if l, _, ok := c.Process.LineAt(pc); frames[0].Kind == FrameNormal {
			agr.check(ok && l.Line == frames[0].Line.Line, "stop %s: line at %#x: %d, frame says %d", st.Name, pc, l.Line,
				frames[0].Line.Line)
		}
	}
	// The frame's "Globals" scope shows file-level variables with the values gdb prints.
	statics := map[string]*Value{}
	if vs, err := frames[0].Statics(); err == nil {
		for _, v := range vs {
			statics[v.Name] = v
		}
	}
	for _, p := range st.Prints {
		if v, ok := statics[p.Expr]; ok && !strings.HasPrefix(p.Out, "ERROR") {
			agr.check(v.PrintString() == gdbResult(p.Out), "stop %s: static %s: gdb %q, got %q", st.Name, p.Expr,
				gdbResult(p.Out), v.PrintString())
		}
	}
	// Assignments write through a copy-on-write overlay of the core's memory.
	mem := &overlayMemory{base: c, writes: map[uint64]byte{}}
	c.Process.Mem = mem
	c.Process.Regs = registerSink{}
	for _, p := range st.Prints {
		if strings.HasPrefix(p.Expr, "set ") {
			compareAssign(st.Name, p, frames[0], agr)
			continue
		}
		want := p.Out
		gerr := strings.HasPrefix(want, "ERROR:")
		if !gerr {
			if i := strings.Index(want, " = "); i >= 0 && strings.HasPrefix(want, "$") {
				want = want[i+3:]
			}
			want = strings.TrimRight(want, "\n")
		}
		v, err := frames[0].Eval(p.Expr)
		switch {
		case gerr:
			agr.check(err != nil, "stop %s: print %s: gdb %s, got %v", st.Name, p.Expr, strings.TrimSpace(want), valueOrErr(v, err))
		case err != nil:
			agr.check(err.Error() == "value has been optimized out" && want == "<optimized out>",
				"stop %s: print %s: gdb %q, got error %v", st.Name, p.Expr, want, err)
		default:
			got := v.PrintString()
			agr.check(got == want, "stop %s: print %s: gdb %q, got %q", st.Name, p.Expr, want, got)
			compareChildren(st.Name, p, v, agr)
		}
	}
}

func valueOrErr(v *Value, err error) string {
	if err != nil {
		return "error " + err.Error()
	}
	return fmt.Sprintf("%q", v.PrintString())
}

// sameSource compares gdb's symtab file name (possibly relative, "./nptl/x.c") with a full path.
func sameSource(gdbName, full string) bool {
	if gdbName == "" || full == "" {
		return gdbName == full
	}
	g := filepath.Clean(gdbName)
	return g == full || strings.HasSuffix(full, "/"+strings.TrimPrefix(g, "./")) || filepath.Base(g) == filepath.Base(full)
}

// gdbVarLines parses "info locals"/"info args" output into "name = value" lines; nil means
// gdb had no symbol information for the frame.
func gdbVarLines(out string) ([]string, bool) {
	out = strings.TrimSpace(out)
	switch {
	case strings.HasPrefix(out, "No symbol table info"):
		return nil, false
	case out == "No locals." || out == "No arguments.":
		return []string{}, true
	case strings.HasPrefix(out, "ERROR:"):
		return nil, false
	}
	return strings.Split(out, "\n"), true
}

// compareVars compares gdb's variable listing of one frame with the package's, as multisets
// for locals (gdb orders lexical blocks by hash) and in order for arguments.
func compareVars(t *testing.T, stop string, level int, kind, gdbOut string, f *Frame, agr *agreement) {
	want, ok := gdbVarLines(gdbOut)
	if !ok {
		return
	}
	var vars []*Variable
	var err error
	if kind == "args" {
		vars, err = f.Args()
	} else {
		vars, err = f.Locals()
	}
	if err != nil {
		agr.check(false, "stop %s #%d %s: %v", stop, level, kind, err)
		return
	}
	var got []string
	for _, v := range vars {
		if kind == "locals" && (v.ConstBlock || v.Declaration) {
			continue // gdb's "info locals" leaves these out
		}
		got = append(got, v.String())
	}
	if kind == "locals" {
		sort.Strings(want)
		sort.Strings(got)
	}
	if len(want) == 0 {
		agr.check(len(got) == 0, "stop %s #%d %s: gdb none, got %q", stop, level, kind, got)
		return
	}
	used := make([]bool, len(got))
	for i, w := range want {
		found := false
		if kind == "args" {
			found = i < len(got) && got[i] == w
			if found {
				used[i] = true
			}
		} else {
			for j, g := range got {
				if !used[j] && g == w {
					used[j], found = true, true
					break
				}
			}
		}
		agr.check(found, "stop %s #%d %s: gdb %q, got %q", stop, level, kind, w, closest(w, got))
	}
	for j, g := range got {
		if !used[j] {
			agr.check(false, "stop %s #%d %s: extra %q", stop, level, kind, g)
		}
	}
}

// closest returns the candidate with the same variable name, for readable messages.
func closest(want string, got []string) string {
	name := want
	if i := strings.Index(want, " = "); i >= 0 {
		name = want[:i]
	}
	for _, g := range got {
		if strings.HasPrefix(g, name+" = ") {
			return g
		}
	}
	return "(none)"
}

// compareChildren checks the first children of a printed value (what an IDE shows when the
// value is expanded) against gdb's.
func compareChildren(stop string, p gdbPrint, v *Value, agr *agreement) {
	if len(p.Children) == 0 {
		return
	}
	kids, err := v.Children(0, len(p.Children))
	if err != nil {
		agr.check(false, "stop %s: children of %s: %v", stop, p.Expr, err)
		return
	}
	for i, g := range p.Children {
		if i >= len(kids) {
			agr.check(false, "stop %s: child %s of %s missing", stop, g[0], p.Expr)
			continue
		}
		k := kids[i]
		name := k.Name
		if strings.HasPrefix(name, "*") {
			name = "*"
		}
		got := k.Value.String()
		if err := k.Value.Fetch(); err != nil {
			got = "ERROR: " + err.Error()
		}
		agr.check(name == g[0] && got == g[1], "stop %s: child of %s: gdb %s = %q, got %s = %q", stop, p.Expr,
			g[0], g[1], name, got)
	}
}

// gdbResult strips gdb's "$N = " from a print result.
func gdbResult(out string) string {
	out = strings.TrimRight(out, "\n")
	if i := strings.Index(out, " = "); i >= 0 && strings.HasPrefix(out, "$") {
		return out[i+3:]
	}
	return out
}

// compareAssign checks an assignment: the value gdb printed for it and the variable read back.
func compareAssign(stop string, p gdbPrint, f *Frame, agr *agreement) {
	assign := strings.TrimPrefix(p.Expr, "set ")
	lhs := strings.TrimRight(strings.SplitN(assign, "=", 2)[0], "+-*/ ")
	want, after := gdbResult(p.Out), gdbResult(p.After)
	var v *Value
	var err error
	if parts := strings.SplitN(assign, "=", 2); len(parts) == 2 && !strings.ContainsAny(parts[0], "+-*/") {
		v, err = f.Assign(parts[0], parts[1]) // the setVariable path
	} else {
		v, err = f.Eval(assign) // compound assignments go through the expression evaluator
	}
	if strings.HasPrefix(want, "ERROR:") {
		agr.check(err != nil, "stop %s: %s: gdb %s, got %v", stop, p.Expr, want, valueOrErr(v, err))
		return
	}
	if err != nil {
		agr.check(false, "stop %s: %s: gdb %q, got error %v", stop, p.Expr, want, err)
		return
	}
	agr.check(v.PrintString() == want, "stop %s: %s: gdb %q, got %q", stop, p.Expr, want, v.PrintString())
	r, err := f.Eval(lhs)
	agr.check(err == nil && r.PrintString() == after, "stop %s: after %s: gdb %q, got %v", stop, p.Expr, after,
		valueOrErr(r, err))
}

// overlayMemory lets assignments write over a read-only core file.
type overlayMemory struct {
	base   Memory
	writes map[uint64]byte
}

func (m *overlayMemory) ReadAt(p []byte, addr uint64) (int, error) {
	n, err := m.base.ReadAt(p, addr)
	for i := range p {
		if b, ok := m.writes[addr+uint64(i)]; ok {
			p[i] = b
		}
	}
	return n, err
}

func (m *overlayMemory) WriteAt(p []byte, addr uint64) (int, error) {
	for i, b := range p {
		m.writes[addr+uint64(i)] = b
	}
	return len(p), nil
}

// registerSink accepts frame-0 register writes (the frame keeps the new value).
type registerSink struct{}

func (registerSink) WriteRegister(reg int, value []byte) error { return nil }
