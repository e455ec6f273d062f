package symbols

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// coreMachine is a bpcode.Machine over a frame of a core file: the frame's registers by
// DWARF number and the core's memory.
type coreMachine struct {
	f *Frame
	c *Core
}

func (m coreMachine) Register(n int) (uint64, error) {
	v, ok := m.f.Regs().Get(n)
	if !ok {
		return 0, fmt.Errorf("register %d unknown", n)
	}
	return v, nil
}

func (m coreMachine) ReadMemory(addr uint64, buf []byte) error {
	k, err := m.c.ReadAt(buf, addr)
	if err == nil && k < len(buf) {
		err = fmt.Errorf("read %#x: short", addr)
	}
	return err
}

// coreAtStopHere builds the C program src with gcc -g and opt into dir, runs it under gdb to
// the line marked "stop here", runs gdb's arguments gdbArgs there, and has gdb dump a core:
// the executable, the core and gdb's output.
func coreAtStopHere(t *testing.T, dir, src, opt string, gdbArgs ...string) (exe, core string, out []byte) {
	t.Helper()
	gcc := needTool(t, "gcc")
	gdb := needTool(t, "gdb")
	src, err := filepath.Abs(src)
	if err != nil {
		t.Fatal(err)
	}
	exe, core = filepath.Join(dir, strings.TrimSuffix(filepath.Base(src), ".c")), filepath.Join(dir, "core")
	if out, err := exec.Command(gcc, "-g", opt, "-o", exe, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	text, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	line := 0
	for i, l := range strings.Split(string(text), "\n") {
		if strings.Contains(l, "stop here") {
			line = i + 1
		}
	}
	args := append([]string{"-nx", "-batch", "-ex", fmt.Sprintf("break %s:%d", filepath.Base(src), line), "-ex", "run"}, gdbArgs...)
	out, err = exec.Command(gdb, append(args, "-ex", "generate-core-file "+core, "-ex", "kill", exe)...).CombinedOutput()
	if _, serr := os.Stat(core); serr != nil {
		t.Fatalf("gdb made no core (%v):\n%s", err, out)
	}
	return exe, core, out
}

// promoteConditions are conditions over promote.c's operands: each alone, negated, under
// unary minus, plus and complement, and every pair compared, combined and shifted.
func promoteConditions() []string {
	operands := []string{"sc", "uc", "s", "us", "el", "ew", "g_ch", "g_b", "g_i", "g_u", "g_l", "g_ul", "g_ec",
		"g_eh", "-1", "2u", "3000000000u", "-5l", "7ul", "'a'"}
	var conds []string
	for _, a := range operands {
		conds = append(conds, a, "!"+a, "-"+a+" < 0", "-"+a+" > 0", "~"+a+" < 0", "~"+a+" > 0", "+"+a+" < 0")
		for _, b := range operands {
			for _, op := range []string{"<", "<=", ">", ">=", "==", "!="} {
				conds = append(conds, a+" "+op+" "+b)
			}
			for _, op := range []string{"+", "-", "*", "/", "%", "&", "|", "^"} {
				conds = append(conds, fmt.Sprintf("(%s %s %s) < 0", a, op, b), fmt.Sprintf("(%s %s %s) > 100", a, op, b))
			}
			conds = append(conds, fmt.Sprintf("(%s >> 1) < %s", a, b), fmt.Sprintf("(%s << 3) > %s", a, b))
		}
	}
	return conds
}

// TestConditionsAgreeWithEvaluator decides conditions over operands of every integer kind C
// promotes differently (signed and unsigned char, short, bool, enumerations of signed and
// unsigned base and of 4 and 8 bytes, int, unsigned, long, unsigned long, as arguments and
// globals) both ways a breakpoint condition is decided — compiled for the agent and evaluated
// by the front end — and with gdb. All three must agree on every condition, or the same
// breakpoint would stop in one place and not in the other.
func TestConditionsAgreeWithEvaluator(t *testing.T) {
	dir := t.TempDir()
	conds := promoteConditions()
	// gdb decides every condition at the stop (1, 0, or E for an error) and dumps the core.
	condFile, verdictFile := filepath.Join(dir, "conds"), filepath.Join(dir, "verdicts")
	if err := os.WriteFile(condFile, []byte(strings.Join(conds, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	script := fmt.Sprintf(`python
out = open(%q, "w")
for c in open(%q).read().splitlines():
    try:
        out.write("1\n" if bool(gdb.parse_and_eval("(%%s) != 0" %% c)) else "0\n")
    except gdb.error:
        out.write("E\n")
out.close()
end`, verdictFile, condFile)
	scriptFile := filepath.Join(dir, "decide.gdb")
	if err := os.WriteFile(scriptFile, []byte(script+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	exe, core, out := coreAtStopHere(t, dir, "testdata/promote/promote.c", "-O0", "-x", scriptFile)
	vb, err := os.ReadFile(verdictFile)
	verdicts := strings.Fields(string(vb))
	if err != nil || len(verdicts) != len(conds) {
		t.Fatalf("gdb decided %d of %d conditions (%v):\n%s", len(verdicts), len(conds), err, out)
	}
	c, err := OpenCore(core, &CoreOptions{Executable: exe, Cache: testCache})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	frames, err := c.Process.Stack(c.Threads[0].Regs, &StackOptions{MaxFrames: 4})
	if err != nil || len(frames) == 0 || frames[0].Name != "probe" {
		t.Fatalf("stack %v: %v", frames, err)
	}
	f := frames[0]
	bin, bias := f.Module.Bin, f.Module.Bias

	m := coreMachine{f: f, c: c}
	compiled, disagree := 0, 0
	for i, cond := range conds {
		want, werr := f.Eval(cond)
		var wantTrue bool
		if werr == nil {
			wantTrue, werr = truth(want)
		}
		// gdb refuses arithmetic and ordering between two C _Bool values, which C promotes to
		// int like any narrow integer: there the package follows C.
		bothBool := strings.Count(cond, "g_b") == 2
		if g := verdicts[i]; (g == "E" && !bothBool) != (werr != nil) || (werr == nil && g != "E" && (g == "1") != wantTrue) {
			disagree++
			t.Errorf("%s: front end %v (%v), gdb %s", cond, wantTrue, werr, g)
		}
		prog, cerr := bin.CompileCondition(cond, f.PC-bias)
		if cerr != nil {
			continue
		}
		compiled++
		got, gerr := prog.Eval(m, bias)
		switch {
		case werr != nil && gerr != nil:
		case werr != nil || gerr != nil:
			disagree++
			t.Errorf("%s: front end %v (%v), agent %d (%v)", cond, wantTrue, werr, got, gerr)
		case (got != 0) != wantTrue:
			disagree++
			t.Errorf("%s: front end %v, agent %v", cond, wantTrue, got != 0)
		}
	}
	t.Logf("%d conditions, %d compiled, %d decided differently", len(conds), compiled, disagree)
	if compiled < len(conds)*9/10 {
		t.Errorf("only %d of %d conditions compiled", compiled, len(conds))
	}
}
