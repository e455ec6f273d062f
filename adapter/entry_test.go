package adapter

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
)

// TestStackAtStart: a process stopped at its entry point (an instruction breakpoint on the
// executable's _start, whose call frame information marks the return address undefined) has
// one frame, _start, as gdb shows it; nothing follows it (the argument count at the stack top
// is no return address).
func TestStackAtStart(t *testing.T) {
	t.Parallel()
	needTool(t, "nm")
	p := compileC(t, "stacks", "-no-pie")
	out, err := exec.Command("nm", p.bin).Output()
	if err != nil {
		t.Fatalf("nm %s: %v", p.bin, err)
	}
	start := ""
	for _, l := range strings.Split(string(out), "\n") {
		if f := strings.Fields(l); len(f) == 3 && f[2] == "_start" {
			start = "0x" + strings.TrimLeft(f[0], "0")
		}
	}
	if start == "" {
		t.Fatalf("no _start in nm's output for %s", p.bin)
	}
	oracle := gdbOracle(t, p, nil, nil, "break *_start", "run", "oracle-dump", "kill")[0]
	d := newDAP(t, viaPipe)
	defer d.close()
	d.launch(map[string]any{"program": p.bin})
	var ib SetBreakpointsResponseBodyExt
	d.call("setInstructionBreakpoints", map[string]any{"breakpoints": []map[string]any{{"instructionReference": start}}}, &ib)
	if len(ib.Breakpoints) != 1 || !ib.Breakpoints[0].Verified {
		t.Fatalf("instruction breakpoint at _start (%s): %+v", start, ib.Breakpoints)
	}
	d.call("configurationDone", nil, nil)
	st := d.stopped()
	frames := d.stackTrace(st.ThreadId)
	if fmt.Sprint(frames[0].InstructionPointerReference) != start {
		t.Fatalf("stopped at %s, want _start at %s: %s", frames[0].InstructionPointerReference, start, frameList(frames))
	}
	compareFrames(t, frames, oracle.Frames)
	if len(frames) != 1 || frames[0].Name != "_start" {
		t.Errorf("stack at _start: %s; want _start alone", frameList(frames))
	}
	d.call("disconnect", map[string]any{"terminateDebuggee": true}, nil)
}
