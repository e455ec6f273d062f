package adapter

import (
	"os"
	"strings"
	"testing"
)

// TestSourcesNotOnThisMachine stops in a callback called from libc: the frame in the program
// names its source with a path, while libc's frames (debug information from libc6-dbg naming
// glibc's build tree) carry their file name without a path the client would try to open.
func TestSourcesNotOnThisMachine(t *testing.T) {
	t.Parallel()
	p := compileC(t, "qsortcb")
	d := newDAP(t, viaPipe)
	defer d.close()
	d.launch(map[string]any{"program": p.bin})
	d.setBreakpoints(p.src, p.line(t, "cmp"))
	d.call("configurationDone", nil, nil)
	st := d.stopped()
	frames := d.stackTrace(st.ThreadId)
	if len(frames) < 3 || frames[0].Name != "cmp" || frames[0].Source == nil || frames[0].Source.Path != p.src {
		t.Fatalf("frames %+v; want cmp in %s first", frames, p.src)
	}
	libcLines := 0
	for _, f := range frames[1:] {
		if f.Name == "main" {
			if f.Source == nil || f.Source.Path != p.src {
				t.Errorf("main's source %+v; want %s", f.Source, p.src)
			}
			break
		}
		if f.Source == nil {
			continue
		}
		libcLines++
		if _, err := os.Stat(f.Source.Path); f.Source.Path != "" && err != nil {
			t.Errorf("frame %s: source path %q does not exist", f.Name, f.Source.Path)
		}
		if f.Source.Path == "" && (f.Source.PresentationHint != "deemphasize" ||
			!strings.HasPrefix(f.Source.Origin, "not on this machine: ") || f.Source.Name == "") {
			t.Errorf("frame %s: source %+v; want a de-emphasised source naming the recorded file", f.Name, f.Source)
		}
	}
	if libcLines == 0 {
		t.Fatalf("no libc frame between cmp and main has line information (is libc6-dbg installed?): %+v", frames)
	}
	d.call("disconnect", map[string]any{"terminateDebuggee": true}, nil)
}
