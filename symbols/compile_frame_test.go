package symbols

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/hpcdap/hpcdap/bpcode"
)

// TestValuesInStackAgreeWithEvaluator stops framevals.c (at -O0 and -O2) in a call inlined
// into the comparison function qsort calls, under four frames of a recursion, and evaluates every integer
// variable of every frame both ways a comparison across ranks does: by the front end, in the
// frame, and by a program CompileValueInStack made for that frame, run from frame 0's
// registers as an agent runs it. Where the program compiles, both must print the same; the
// variables that live across calls in registers at -O2 are found through the C library's
// frames' saved registers. The program must refuse a process stopped elsewhere.
func TestValuesInStackAgreeWithEvaluator(t *testing.T) {
	for _, opt := range []string{"-O0", "-O2"} {
		t.Run(opt, func(t *testing.T) {
			exe, corePath, _ := coreAtStopHere(t, t.TempDir(), "testdata/framevals/framevals.c", opt)
			c, err := OpenCore(corePath, &CoreOptions{Executable: exe, Cache: testCache})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			frames, err := c.Process.Stack(c.Threads[0].Regs, &StackOptions{MaxFrames: 32})
			if err != nil || len(frames) < 2 || frames[0].Name != "order" || frames[0].Kind != FrameInline || frames[1].Name != "cmp" {
				t.Fatalf("stack %v: %v", frames, err)
			}
			core := coreMachine{f: frames[0], c: c}
			agree := map[string]int{} // function → values compiled and agreeing
			var outer []string        // values compiled in a frame above the C library's
			pastLibc := false
			for k, f := range frames {
				if f.Module != nil && f.Module != frames[0].Module {
					pastLibc = true
				}
				if f.Function == nil || f.Module != frames[0].Module {
					continue
				}
				names := []string{"g_total", "g_level", "g_odd", "sink"}
				vars, _ := f.Locals()
				args, _ := f.Args()
				for _, v := range append(args, vars...) {
					names = append(names, v.Name)
				}
				for _, name := range names {
					want, werr := evalIn(f, name)
					prog, format, mods, cerr := CompileValueInStack(frames, k, name)
					if cerr != nil {
						if !errors.Is(cerr, ErrNotCompiled) {
							t.Errorf("frame %d (%s): %s: %v, not ErrNotCompiled", k, f.Name, name, cerr)
						}
						continue
					}
					got, gerr := prog.Eval(stackMachine{core, mods, 0}, 0)
					if werr != nil || gerr != nil {
						if (werr == nil) != (gerr == nil) {
							t.Errorf("frame %d (%s): %s: front end %q (%v), agent %v", k, f.Name, name, want, werr, gerr)
						}
						continue
					}
					if s := bpcode.FormatValue(format, got); s != want {
						t.Errorf("frame %d (%s): %s: front end %q, agent %q", k, f.Name, name, want, s)
						continue
					}
					agree[f.Name]++
					if pastLibc {
						outer = append(outer, fmt.Sprintf("%s#%d.%s=%s", f.Name, k, name, want))
					}
				}
			}
			t.Logf("agreeing values by function %v; above the C library: %v", agree, outer)
			for _, fn := range []string{"order", "cmp", "sort_some", "recurse", "main"} {
				if agree[fn] == 0 {
					t.Errorf("no value of %s compiled", fn)
				}
			}
			if n := strings.Count(strings.Join(outer, " "), ".mine="); n != 4 {
				t.Errorf("recurse's mine compiled in %d of its 4 frames above the C library", n)
			}
			// Another place: frame 0's pc moved by one.
			prog, _, mods, err := CompileValueInStack(frames, len(frames)-1, "g_total")
			if err != nil {
				t.Fatalf("g_total in main: %v", err)
			}
			if _, err := prog.Eval(stackMachine{core, mods, 1}, 0); err == nil {
				t.Error("a program for main's frame ran in a process stopped one byte further")
			}
			place, mods, err := CompilePlace(frames, len(frames)-1)
			if err != nil {
				t.Fatalf("place of the whole stack: %v", err)
			}
			if v, err := place.Eval(stackMachine{core, mods, 0}, 0); v != 1 || err != nil {
				t.Errorf("the place probe at its place: %d, %v", v, err)
			}
			if _, err := place.Eval(stackMachine{core, mods, 1}, 0); err == nil {
				t.Error("the place probe passed one byte further")
			}
		})
	}
}

// evalIn is a value as the comparison prints it in frame f.
func evalIn(f *Frame, expr string) (string, error) {
	v, err := f.Eval(expr)
	if err != nil {
		return "", err
	}
	if err := v.Fetch(); err != nil {
		return "", err
	}
	return v.String(), nil
}

// stackMachine runs a program of CompileValueInStack over a core's thread as an agent runs
// it: frame 0's registers, the core's memory, the biases of the program's modules as the core
// has them; with pcDelta, the thread's pc that much further than the stop's.
type stackMachine struct {
	coreMachine
	mods    []*Module
	pcDelta uint64
}

func (m stackMachine) Register(n int) (uint64, error) {
	v, err := m.coreMachine.Register(n)
	if n == m.f.proc.Arch.PCReg {
		v += m.pcDelta
	}
	return v, err
}

func (m stackMachine) ModuleBias(i int) (uint64, error) {
	if i >= len(m.mods) {
		return 0, fmt.Errorf("module %d of %d", i, len(m.mods))
	}
	return m.mods[i].Bias, nil
}
