package symbols

import (
	"debug/elf"
	"testing"
)

// TestFramePointerFallback removes all call frame information from a program built with frame
// pointers and checks that the frame-pointer unwinder still finds gdb's frames, flagging the
// frames it found as uncertain.
func TestFramePointerFallback(t *testing.T) {
	b := buildProgram(t, "crash", "-g", "-O0", "-fno-omit-frame-pointer", "-fno-asynchronous-unwind-tables",
		"-fno-unwind-tables")
	run(t, "objcopy", "--remove-section=.debug_frame", "--remove-section=.eh_frame",
		"--remove-section=.eh_frame_hdr", b.exe)
	f, err := elf.Open(b.exe)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{".eh_frame", ".debug_frame"} {
		if f.Section(s) != nil {
			t.Fatalf("%s still has %s", b.exe, s)
		}
	}
	f.Close()
	live := b.liveDump(t)
	if len(live.Stops) == 0 {
		t.Fatal("gdb did not stop")
	}
	st := live.Stops[0]
	c, err := OpenCore(st.Core, &CoreOptions{Executable: b.exe, Cache: NewCache(nil)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	frames, err := c.Process.Stack(c.Threads[0].Regs, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(frames) != len(st.Frames) {
		t.Fatalf("%d frames, gdb has %d:\n%s", len(frames), len(st.Frames), st.BT)
	}
	for i, g := range st.Frames {
		f := frames[i]
		if f.PC != g.PC || f.Name != g.Name || f.Line.Line != g.Line {
			t.Errorf("frame #%d: gdb %#x %s:%d, got %#x %s:%d", i, g.PC, g.Name, g.Line, f.PC, f.Name, f.Line.Line)
		}
		if f.Uncertain != (i > 0) {
			t.Errorf("frame #%d: uncertain=%v", i, f.Uncertain)
		}
		var agr agreement
		compareVars(t, st.Name, i, "args", g.Args, f, &agr)
		compareVars(t, st.Name, i, "locals", g.Locals, f, &agr)
		for _, m := range agr.misses {
			t.Errorf("frame #%d: %s", i, m)
		}
	}
}
