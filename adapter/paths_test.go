package adapter

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-dap"
)

func TestPathMap(t *testing.T) {
	m, err := parseSubstitutePath([]PathRule{{From: "/home/me/src/", To: "/build/src"}, {From: "/home/me", To: "/"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ editor, debug string }{
		{"/home/me/src/a.c", "/build/src/a.c"},
		{"/home/me/src", "/build/src"},
		{"/home/me/x/b.c", "/x/b.c"}, // second rule: the first does not apply
		{"/home/mex/c.c", "/home/mex/c.c"},
	} {
		if got := m.toDebug(c.editor); got != c.debug {
			t.Errorf("toDebug(%s) = %s, want %s", c.editor, got, c.debug)
		}
	}
	for _, c := range []struct{ debug, editor string }{
		{"/build/src/a.c", "/home/me/src/a.c"},
		{"/build/srcx/a.c", "/home/me/build/srcx/a.c"}, // not under /build/src; under / (second rule)
		{"/usr/include/stdio.h", "/home/me/usr/include/stdio.h"},
	} {
		if got := m.toEditor(c.debug); got != c.editor {
			t.Errorf("toEditor(%s) = %s, want %s", c.debug, got, c.editor)
		}
	}
	if _, err := parseSubstitutePath([]PathRule{{From: "src", To: "/build"}}); err == nil {
		t.Error("a relative from was accepted")
	}
	if _, err := parseSubstitutePath([]PathRule{{From: "/src", To: ""}}); err == nil {
		t.Error("an empty to was accepted")
	}
}

// A program built in one directory and debugged with its sources in another: with
// substitutePath, a breakpoint set on the editor's file is planted and hit, frames name the
// editor's file, and its text is served; without it, the frame's source is marked as not on
// this machine.
func TestSubstitutePath(t *testing.T) {
	t.Parallel()
	p := compileC(t, "stacks")
	editorDir := t.TempDir()
	moved := filepath.Join(editorDir, "stacks.c")
	if err := os.Rename(p.src, moved); err != nil {
		t.Fatal(err)
	}
	line := p.line(t, "leaf-first")

	d := newDAP(t, viaPipe)
	defer d.close()
	d.launch(map[string]any{"program": p.bin, "substitutePath": []map[string]string{{"from": editorDir, "to": p.dir}}})
	bps := d.setBreakpoints(moved, line)
	if len(bps) != 1 || !bps[0].Verified || bps[0].Source == nil || bps[0].Source.Path != moved {
		t.Fatalf("breakpoint on the editor's file: %+v", bps)
	}
	d.call("configurationDone", nil, nil)
	st := d.stopped()
	frames := d.stackTrace(st.ThreadId)
	if len(frames) == 0 || frames[0].Name != "leaf" || frames[0].Source == nil || frames[0].Source.Path != moved || frames[0].Line != line {
		t.Fatalf("top frame %+v, want leaf at %s:%d", frames, moved, line)
	}
	var src dap.SourceResponseBody
	d.call("source", map[string]any{"source": map[string]any{"path": frames[0].Source.Path}}, &src)
	if !strings.Contains(src.Content, "MARK:leaf-first") {
		t.Errorf("source of %s: %q", moved, src.Content)
	}
	d.setBreakpoints(moved)
	d.call("continue", map[string]any{"threadId": st.ThreadId}, nil)
	d.event("terminated")

	// Without the mapping the recorded file is not on this machine.
	d2 := newDAP(t, viaPipe)
	defer d2.close()
	d2.launch(map[string]any{"program": p.bin, "stopAtEntry": true})
	if bps := d2.setBreakpoints(moved, line); len(bps) != 1 || bps[0].Verified {
		t.Errorf("breakpoint on a file the program does not know: %+v", bps)
	}
	d2.call("configurationDone", nil, nil)
	st = d2.stopped()
	frames = d2.stackTrace(st.ThreadId)
	if len(frames) == 0 || frames[0].Source != nil || frames[0].PresentationHint != "subtle" {
		t.Errorf("top frame without the mapping: %+v; want no source, subtle", frames[0])
	}

	d3 := newDAP(t, viaPipe)
	defer d3.close()
	d3.initialize()
	if msg := d3.callErr("launch", map[string]any{"program": p.bin, "substitutePath": []map[string]string{{"from": "src", "to": p.dir}}}); !strings.Contains(msg, "substitutePath") {
		t.Errorf("a relative substitutePath: %q", msg)
	}
}
