package symbols

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// crossTargets are the Power machines checked through QEMU user mode: big-endian ELFv1
// (the Blue Gene/Q ABI) and little-endian ELFv2.
var crossTargets = []struct {
	name, gcc, qemu string
}{
	{"ppc64", "powerpc64-linux-gnu-gcc", "qemu-ppc64"},
	{"ppc64le", "powerpc64le-linux-gnu-gcc", "qemu-ppc64le"},
}

// TestCrossCoresAgainstGDB builds a program for 64-bit Power, lets it abort under QEMU user
// mode (which writes a core file of the emulated process), and compares what gdb-multiarch
// and the package make of that core: frames (pc, function, line), arguments, locals and
// expressions in the frame of the marked function.
func TestCrossCoresAgainstGDB(t *testing.T) {
	gdb := needTool(t, "gdb-multiarch")
	src, _ := filepath.Abs("testdata/crash/crash.c")
	stops := markers(t, src)
	for _, tgt := range crossTargets {
		for _, opt := range []string{"-O0", "-O2"} {
			tgt, opt := tgt, opt
			name := tgt.name + opt
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				gcc := needTool(t, tgt.gcc)
				qemu := needTool(t, tgt.qemu)
				dir := t.TempDir()
				exe := filepath.Join(dir, "crash")
				if out, err := exec.Command(gcc, "-g", opt, "-static", "-o", exe, src).CombinedOutput(); err != nil {
					t.Fatalf("%s: %v\n%s", tgt.gcc, err, out)
				}
				// QEMU writes qemu_<prog>_<time>_<pid>.core into the working directory when the
				// core size limit allows it.
				cmd := exec.Command("sh", "-c", "ulimit -c unlimited; exec "+qemu+" ./crash")
				cmd.Dir = dir
				if err := cmd.Run(); err == nil {
					t.Fatalf("%s: the program did not abort", tgt.qemu)
				}
				cores, _ := filepath.Glob(filepath.Join(dir, "qemu_crash_*.core"))
				if len(cores) != 1 {
					t.Fatalf("%s wrote no core file (found %v)", tgt.qemu, cores)
				}
				st := stops[0]
				spec := map[string]any{"name": st.Name, "function": st.Name, "exprs": st.Exprs}
				var out gdbLive
				runGDB(t, gdb, "core", dir, spec, &out, exe, cores[0])
				if len(out.Stops) != 1 {
					t.Fatal("gdb dumped no stop")
				}
				var agr agreement
				compareCore(t, exe, cores[0], out.Stops[0], st.Name, &agr)
				t.Logf("agreement %s: %d/%d = %.1f%%", name, agr.ok, agr.total, 100*agr.rate())
				for _, m := range agr.misses {
					t.Logf("  differs: %s", m)
				}
				if agr.rate() < 1 {
					t.Errorf("agreement with gdb-multiarch %.1f%% is below 100%%", 100*agr.rate())
				}
			})
		}
	}
}

// compareCore checks a core file against gdb's dump: every frame's pc, and for frames with
// debug information their function, line, arguments and locals; then the expressions in the
// frame of function fn.
func compareCore(t *testing.T, exe, core string, st gdbStop, fn string, agr *agreement) {
	c, err := OpenCore(core, &CoreOptions{Executable: exe, Cache: testCache})
	if err != nil {
		t.Fatalf("open core: %v", err)
	}
	defer c.Close()
	frames, err := c.Process.Stack(c.Threads[0].Regs, &StackOptions{MaxFrames: 40})
	if err != nil {
		t.Fatalf("unwind: %v", err)
	}
	var sel *Frame
	for i, g := range st.Frames {
		if i >= len(frames) {
			agr.check(false, "frame #%d %s missing", i, g.Name)
			continue
		}
		f := frames[i]
		same := f.PC == g.PC
		if g.File != "" {
			same = same && f.Name == g.Name && f.Line.Line == g.Line && sameSource(g.File, f.Line.File)
		}
		agr.check(same, "frame #%d: gdb %#x %s at %s:%d, got %#x %s at %s:%d", i, g.PC, g.Name, g.File, g.Line,
			f.PC, f.Name, f.Line.File, f.Line.Line)
		if !same || g.File == "" {
			continue
		}
		if f.Name == fn && sel == nil {
			sel = f
		}
		compareVars(t, st.Name, i, "args", g.Args, f, agr)
		compareVars(t, st.Name, i, "locals", g.Locals, f, agr)
	}
	agr.check(len(frames) == len(st.Frames), "%d frames, gdb has %d", len(frames), len(st.Frames))
	if sel == nil {
		agr.check(false, "no frame of %s", fn)
		return
	}
	for _, p := range st.Prints {
		want := strings.TrimRight(p.Out, "\n")
		if i := strings.Index(want, " = "); i >= 0 && strings.HasPrefix(want, "$") {
			want = want[i+3:]
		}
		v, err := sel.Eval(p.Expr)
		if err != nil {
			agr.check(strings.HasPrefix(want, "ERROR:"), "print %s: gdb %q, got error %v", p.Expr, want, err)
			continue
		}
		agr.check(v.PrintString() == want, "print %s: gdb %q, got %q", p.Expr, want, v.PrintString())
	}
}

// TestPPC64BackChain removes all call frame information from a big-endian Power program (the
// Blue Gene/Q ABI) and checks that the back-chain unwinder finds gdb-multiarch's frames.
func TestPPC64BackChain(t *testing.T) {
	gdb := needTool(t, "gdb-multiarch")
	gcc := needTool(t, "powerpc64-linux-gnu-gcc")
	objcopy := needTool(t, "powerpc64-linux-gnu-objcopy")
	qemu := needTool(t, "qemu-ppc64")
	src, _ := filepath.Abs("testdata/crash/crash.c")
	dir := t.TempDir()
	exe := filepath.Join(dir, "crash")
	if out, err := exec.Command(gcc, "-g", "-O0", "-static", "-fno-asynchronous-unwind-tables", "-fno-unwind-tables",
		"-o", exe, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	if out, err := exec.Command(objcopy, "--remove-section=.eh_frame", "--remove-section=.eh_frame_hdr",
		"--remove-section=.debug_frame", exe).CombinedOutput(); err != nil {
		t.Fatalf("objcopy: %v\n%s", err, out)
	}
	cmd := exec.Command("sh", "-c", "ulimit -c unlimited; exec "+qemu+" ./crash")
	cmd.Dir = dir
	if err := cmd.Run(); err == nil {
		t.Fatal("the program did not abort")
	}
	cores, _ := filepath.Glob(filepath.Join(dir, "qemu_crash_*.core"))
	if len(cores) != 1 {
		t.Fatalf("no core file (found %v)", cores)
	}
	st := markers(t, src)[0]
	var out gdbLive
	runGDB(t, gdb, "core", dir, map[string]any{"name": st.Name, "function": st.Name, "exprs": st.Exprs}, &out, exe, cores[0])
	var agr agreement
	compareCore(t, exe, cores[0], out.Stops[0], st.Name, &agr)
	t.Logf("agreement back chain: %d/%d", agr.ok, agr.total)
	for _, m := range agr.misses {
		t.Errorf("differs: %s", m)
	}
	c, err := OpenCore(cores[0], &CoreOptions{Executable: exe})
	if err != nil {
		t.Fatal(err)
	}
	frames, _ := c.Process.Stack(c.Threads[0].Regs, nil)
	for _, f := range frames[1:] {
		if !f.Uncertain {
			t.Errorf("frame %s found without CFI is not flagged uncertain", f.Name)
		}
	}
}
