package adapter

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/google/go-dap"
)

// TestSourcesNotOnThisMachine stops in a callback called from libc: the frame in the program
// names its source with a path, while libc's frames (debug information from libc6-dbg naming
// glibc's build tree) have no source a client would try to open, in stackTrace and in the
// parallel stacks alike.
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
	libcFrames := 0
	for _, f := range frames[1:] {
		if f.Name == "main" {
			if f.Source == nil || f.Source.Path != p.src {
				t.Errorf("main's source %+v; want %s", f.Source, p.src)
			}
			break
		}
		libcFrames++
		if f.Source != nil || f.PresentationHint != "subtle" || f.Line != 0 {
			t.Errorf("frame %s: source %+v, line %d, hint %q; want no source, subtle", f.Name, f.Source, f.Line, f.PresentationHint)
		}
	}
	if libcFrames == 0 {
		t.Fatalf("no libc frame between cmp and main: %s", frameList(frames))
	}
	// The parallel stacks show the frames as stackTrace does.
	checkParallelStacks(t, d, d.ranks())
	d.call("disconnect", map[string]any{"terminateDebuggee": true}, nil)
}

// TestPauseInLibcFrames: a process paused inside libc's sleep shows libc's frames, whose source
// files are not on this machine, without a source (and subtle), so that a client that shows
// the first frame with a source shows main's line rather than a file it cannot open.
func TestPauseInLibcFrames(t *testing.T) {
	t.Parallel()
	p := compileC(t, "nap")
	d := newDAP(t, viaPipe)
	defer d.close()
	d.launch(map[string]any{"program": p.bin})
	d.call("configurationDone", nil, nil)
	waitFor(t, "the program to nap", func() bool { return strings.Contains(allOutput(d), "napping") })
	d.call("pause", map[string]any{"threadId": 1}, nil)
	st := d.stopped()
	if st.Reason != "pause" {
		t.Fatalf("stopped %+v", st)
	}
	frames := d.stackTrace(st.ThreadId)
	var first *dap.StackFrame
	libc := 0
	for i := range frames {
		f := &frames[i]
		if f.Source != nil {
			if _, err := os.Stat(f.Source.Path); f.Source.Path == "" || err != nil {
				t.Errorf("frame %d %s: source %+v is not a file on this machine", i, f.Name, f.Source)
			}
			if first == nil {
				first = f
			}
			continue
		}
		if f.PresentationHint != "subtle" || f.Line != 0 {
			t.Errorf("frame %d %s without a source: presentationHint %q line %d; want subtle, 0", i, f.Name, f.PresentationHint, f.Line)
		}
		if strings.Contains(fmt.Sprint(f.ModuleId), "libc.so") {
			libc++
		}
	}
	if !strings.Contains(fmt.Sprint(frames[0].ModuleId), "libc.so") || frames[0].Source != nil {
		t.Errorf("innermost frame %+v; want libc's, without a source", frames[0])
	}
	if first == nil || first.Name != "main" || first.Line != p.line(t, "nap") || first.Source.Path != p.src {
		t.Errorf("first frame with a source: %+v; want main at %s:%d\n%s", first, p.src, p.line(t, "nap"), frameList(frames))
	}
	if libc < 2 {
		t.Errorf("%d libc frames under main: %s", libc, frameList(frames))
	}
	d.call("disconnect", map[string]any{"terminateDebuggee": true}, nil)
}
