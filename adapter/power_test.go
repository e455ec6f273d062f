package adapter

import (
	"bufio"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-dap"
	"github.com/hpcdap/hpcdap/agent"
	"github.com/hpcdap/hpcdap/internal/testenv"
)

// powerTarget is one emulated Power target of the DAP tests.
type powerTarget struct {
	emulator string // the launch argument
	prefix   string // cross tool prefix
}

var powerTargets = []powerTarget{
	{"qemu-ppc64", "powerpc64-linux-gnu-"},
	{"qemu-ppc64le", "powerpc64le-linux-gnu-"},
}

// modernQEMU checks that the emulator the agent will find is QEMU ≥ 9 (scripts/qemu-user.sh),
// whose stub writes breakpoint traps into program text.
func modernQEMU(t testing.TB, name string) string {
	t.Helper()
	path, err := agent.FindEmulator(name)
	if err != nil {
		t.Fatalf("%v", err)
	}
	out, err := exec.Command(path, "--version").Output()
	m := regexp.MustCompile(`version (\d+)\.`).FindSubmatch(out)
	if err != nil || m == nil {
		t.Fatalf("%s --version: %v %q", path, err, out)
	}
	if n, _ := strconv.Atoi(string(m[1])); n < 9 {
		t.Fatalf("%s is QEMU %s: the test needs QEMU ≥ 9 (run scripts/qemu-user.sh)", path, m[1])
	}
	return path
}

// compilePower builds testdata/power.c statically with the cross compiler.
func compilePower(t testing.TB, tg powerTarget) *program {
	t.Helper()
	return compilePowerC(t, tg, "power")
}

// compilePowerC builds testdata/<name>.c statically with the cross compiler.
func compilePowerC(t testing.TB, tg powerTarget, name string) *program {
	t.Helper()
	gcc := needTool(t, tg.prefix+"gcc")
	src, err := os.ReadFile(filepath.Join("testdata", name+".c"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	p := &program{src: filepath.Join(dir, name+".c"), bin: filepath.Join(dir, name), dir: dir, marks: map[string]int{}}
	if err := os.WriteFile(p.src, src, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(gcc, "-g", "-O0", "-static", "-pthread", "-o", p.bin, p.src).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", gcc, err, out)
	}
	for i, l := range strings.Split(string(src), "\n") {
		if k := strings.Index(l, "MARK:"); k >= 0 {
			p.marks[strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(l[k+5:]), "*/"))] = i + 1
		}
	}
	return p
}

// powerOracle runs the program under gdb-multiarch connected to a second QEMU, with
// testdata/gdboracle.py: the dumps its commands ask for, and gdb's other output.
func powerOracle(t testing.TB, p *program, emulator string, cmds ...string) ([]oracleDump, string) {
	t.Helper()
	return emulatedOracle(t, p, emulator, nil, cmds...)
}

// emulatedOracle is powerOracle for a program of any machine QEMU emulates, with extra
// environment for gdb (ORACLE_EXPRS).
func emulatedOracle(t testing.TB, p *program, emulator string, env []string, cmds ...string) ([]oracleDump, string) {
	t.Helper()
	return emulatedOracleEnv(t, p, emulator, nil, env, cmds...)
}

// emulatedOracleEnv is emulatedOracle with an environment for the program (QEMU's -E).
func emulatedOracleEnv(t testing.TB, p *program, emulator string, progEnv, env []string, cmds ...string) ([]oracleDump, string) {
	t.Helper()
	gdb := needTool(t, "gdb-multiarch")
	var qargs []string
	for _, e := range progEnv {
		qargs = append(qargs, "-E", e)
	}
	emu := exec.Command(emulator, append(qargs, p.bin)...)
	emu.Dir = p.dir
	sock := testenv.StartQEMUStub(t, emu)
	script, _ := filepath.Abs(filepath.Join("testdata", "gdboracle.py"))
	args := []string{"-batch", "-nx", "-x", script, p.bin, "-ex", "target remote " + sock}
	for _, c := range cmds {
		args = append(args, "-ex", c)
	}
	args = append(args, "-ex", "kill")
	cmd := exec.Command(gdb, args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	var dumps []oracleDump
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		if j, ok := strings.CutPrefix(sc.Text(), "ORACLE "); ok {
			var d oracleDump
			if err := json.Unmarshal([]byte(j), &d); err != nil {
				t.Fatalf("gdb oracle output %q: %v", j, err)
			}
			dumps = append(dumps, d)
		}
	}
	if len(dumps) == 0 {
		t.Fatalf("gdb-multiarch produced no oracle dump (err %v):\n%s", err, out)
	}
	return dumps, string(out)
}

// gdbPowerReg matches `info registers` lines of the registers that do not depend on where
// QEMU placed the stack: "pc             0x10000854          0x10000854 <depth3+20>".
var gdbPowerReg = regexp.MustCompile(`^(pc|lr|r2|msr)\s+(0x[0-9a-f]+)\s`)

// TestEmulatedPowerSession is a scripted DAP session on a Power program launched with
// "emulator": a function breakpoint stops where gdb's does, a source breakpoint in the
// innermost of three calls stops there; the stack
// (functions, lines, down to main), the Registers scope and the disassembly around the pc
// match gdb-multiarch on a second QEMU and the cross objdump; "next" stops where gdb's next
// does; the program then runs to its end.
func TestEmulatedPowerSession(t *testing.T) {
	t.Parallel()
	for _, tg := range powerTargets {
		t.Run(tg.emulator, func(t *testing.T) {
			emulator := modernQEMU(t, tg.emulator)
			objdump := needTool(t, tg.prefix+"objdump")
			p := compilePower(t, tg)
			line := p.line(t, "depth3")
			dumps, gdbOut := powerOracle(t, p, emulator, "break depth2", fmt.Sprintf("break power.c:%d", line),
				"continue", "oracle-dump", "continue", "oracle-dump", "info registers", "next", "oracle-dump")
			if len(dumps) != 3 || len(dumps[1].Frames) != 4 || dumps[0].Frames[0].Name != "depth2" {
				t.Fatalf("gdb oracle: %+v\n%s", dumps, gdbOut)
			}
			atDepth2, oracle := dumps[0].Frames[0], dumps[1:]
			gdbRegs := map[string]uint64{}
			for _, l := range strings.Split(gdbOut, "\n") {
				if m := gdbPowerReg.FindStringSubmatch(strings.TrimSpace(l)); m != nil {
					gdbRegs[m[1]], _ = strconv.ParseUint(m[2], 0, 64)
				}
			}
			if len(gdbRegs) != 4 {
				t.Fatalf("gdb registers %v:\n%s", gdbRegs, gdbOut)
			}

			d := newDAP(t, viaPipe)
			defer d.close()
			d.launch(map[string]any{"program": p.bin, "emulator": tg.emulator})
			bps := d.setBreakpoints(p.src, line)
			if len(bps) != 1 || !bps[0].Verified || bps[0].Line != oracle[0].Frames[0].Line {
				t.Fatalf("breakpoint %+v; gdb stops at line %d", bps, oracle[0].Frames[0].Line)
			}
			var fb struct{ Breakpoints []Breakpoint }
			d.call("setFunctionBreakpoints", map[string]any{"breakpoints": []map[string]any{{"name": "depth2"}}}, &fb)
			if len(fb.Breakpoints) != 1 || !fb.Breakpoints[0].Verified {
				t.Fatalf("function breakpoint: %+v", fb)
			}
			d.call("configurationDone", nil, nil)
			// The function breakpoint stops where gdb's `break depth2` does (ELFv1: the
			// descriptor's code, ELFv2: the local entry, then past the prologue).
			st := d.stopped()
			top := d.stackTrace(st.ThreadId)[0]
			if pc, _ := strconv.ParseUint(top.InstructionPointerReference, 0, 64); st.Reason != "function breakpoint" ||
				top.Name != "depth2" || top.Line != atDepth2.Line || pc != atDepth2.PC {
				t.Fatalf("stopped (%s) in %s line %d pc %s; gdb: %s line %d pc %#x", st.Reason, top.Name, top.Line,
					top.InstructionPointerReference, atDepth2.Name, atDepth2.Line, atDepth2.PC)
			}
			d.call("continue", map[string]any{"threadId": st.ThreadId}, nil)
			st = d.stopped()
			if st.Reason != "breakpoint" {
				t.Fatalf("stopped: %+v", st)
			}
			frames := d.stackTrace(st.ThreadId)
			if len(frames) < len(oracle[0].Frames) {
				t.Fatalf("%d frames, gdb %d: %+v", len(frames), len(oracle[0].Frames), frames)
			}
			for i, of := range oracle[0].Frames {
				f := frames[i]
				if f.Name != of.Name || f.Line != of.Line || f.Source == nil || filepath.Base(f.Source.Path) != filepath.Base(of.File) {
					t.Errorf("frame %d: %s line %d (%v); gdb %s %s:%d", i, f.Name, f.Line, f.Source, of.Name, of.File, of.Line)
				}
				if pc, _ := strconv.ParseUint(f.InstructionPointerReference, 0, 64); pc != of.PC {
					t.Errorf("frame %d pc %s, gdb %#x", i, f.InstructionPointerReference, of.PC)
				}
			}

			for _, f := range frames {
				t.Logf("frame %s line %d pc %s", f.Name, f.Line, f.InstructionPointerReference)
			}
			regs := d.scopeVars(frames[0].Id, "Registers")
			for name, want := range gdbRegs {
				v, ok := regs[name]
				got, err := strconv.ParseUint(v.Value, 0, 64)
				if !ok || err != nil || got != want {
					t.Errorf("register %s = %q, gdb %#x", name, v.Value, want)
				}
			}
			if _, ok := regs["r31"]; !ok {
				t.Errorf("no r31 in the Registers scope: %v", regs)
			}

			var dis struct {
				Instructions []DisassembledInstruction `json:"instructions"`
			}
			d.call("disassemble", map[string]any{"memoryReference": frames[0].InstructionPointerReference,
				"instructionOffset": -2, "instructionCount": 6, "resolveSymbols": true}, &dis)
			if len(dis.Instructions) != 6 || dis.Instructions[2].Address != frames[0].InstructionPointerReference {
				t.Fatalf("disassembly %+v", dis.Instructions)
			}
			t.Logf("pc %s: %q; registers pc %s lr %s r2 %s", dis.Instructions[2].Address, dis.Instructions[2].Instruction,
				regs["pc"].Value, regs["lr"].Value, regs["r2"].Value)
			ref := crossObjdump(t, objdump, p.bin)
			for i, in := range dis.Instructions {
				a, _ := strconv.ParseUint(in.Address, 0, 64)
				want, ok := ref[a]
				if !ok || in.InstructionBytes != want.bytes || strings.Fields(in.Instruction)[0] != strings.Fields(want.text)[0] {
					t.Errorf("row %d at %#x: %s %q; objdump %s %q", i, a, in.InstructionBytes, in.Instruction, want.bytes, want.text)
				}
			}

			d.call("next", map[string]any{"threadId": st.ThreadId}, nil)
			st = d.stopped()
			top = d.stackTrace(st.ThreadId)[0]
			if want := oracle[1].Frames[0]; st.Reason != "step" || top.Name != want.Name || top.Line != want.Line {
				t.Errorf("after next: %s line %d (%s); gdb %s line %d", top.Name, top.Line, st.Reason, want.Name, want.Line)
			}
			d.call("setBreakpoints", map[string]any{"source": map[string]any{"path": p.src}, "breakpoints": []any{}}, nil)
			d.call("setFunctionBreakpoints", map[string]any{"breakpoints": []any{}}, nil)
			d.call("continue", map[string]any{"threadId": st.ThreadId}, nil)
			var ex dap.ExitedEventBody
			if err := d.event("exited").Decode(&ex); err != nil || ex.ExitCode != 0 {
				t.Errorf("exited %+v %v", ex, err)
			}
		})
	}
}

// crossObjdump disassembles bin with a cross objdump: address → bytes (hex, memory order) and
// text.
func crossObjdump(t testing.TB, objdump, bin string) map[uint64]objdumpInst {
	t.Helper()
	out, err := exec.Command(objdump, "-d", bin).Output()
	if err != nil {
		t.Fatalf("%s: %v", objdump, err)
	}
	m := map[uint64]objdumpInst{}
	for _, l := range strings.Split(string(out), "\n") {
		cols := strings.Split(l, "\t")
		if len(cols) < 3 {
			continue
		}
		a, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(cols[0]), ":"), 16, 64)
		if err != nil {
			continue
		}
		raw := strings.ReplaceAll(strings.TrimSpace(cols[1]), " ", "")
		if _, err := hex.DecodeString(raw); err != nil {
			continue
		}
		m[a] = objdumpInst{bytes: raw, text: strings.TrimSpace(strings.Join(cols[2:], " "))}
	}
	return m
}
