package adapter

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-dap"
)

// bgqOracle is what gdb-multiarch says of one rank of testdata/bgq.c at its breakpoint in
// leaf: the stack and variables, the registers by gdb's names (FPRs as raw doublewords), and
// the exit code once the spin loop is released.
type bgqOracle struct {
	dump oracleDump
	regs map[string]uint64
	exit int
}

var (
	gdbRegLine = regexp.MustCompile(`^([a-z]+[0-9]*)\s+(0x[0-9a-f]+)\s`)
	gdbFPRLine = regexp.MustCompile(`^(f[0-9]+)\s+\S+\s+\(raw (0x[0-9a-f]+)\)`)
	gdbExit    = regexp.MustCompile(`exited (?:with code (\d+)|normally)`)
)

func bgqRankOracle(t *testing.T, p *program, emulator string, rank, np int) bgqOracle {
	t.Helper()
	// The same path as under the debugger: past a barrier that every rank has passed.
	ready := t.TempDir()
	for r := range np {
		if err := os.WriteFile(filepath.Join(ready, fmt.Sprintf("start-%d", r)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	dumps, out := emulatedOracleEnv(t, p, emulator, append(rankEnv(rank, np), "READY_DIR="+ready), nil,
		fmt.Sprintf("break bgq.c:%d", p.line(t, "leaf")), "continue", "oracle-dump",
		"info registers", "info registers float", "set var release = 1", "delete", "continue")
	o := bgqOracle{regs: map[string]uint64{}, exit: -1}
	if len(dumps) != 1 || len(dumps[0].Frames) != 3 {
		t.Fatalf("rank %d: gdb oracle %+v:\n%s", rank, dumps, out)
	}
	o.dump = dumps[0]
	for _, l := range strings.Split(out, "\n") {
		l = strings.TrimSpace(l)
		if m := gdbFPRLine.FindStringSubmatch(l); m != nil {
			o.regs[m[1]], _ = strconv.ParseUint(m[2], 0, 64)
		} else if m := gdbRegLine.FindStringSubmatch(l); m != nil {
			o.regs[m[1]], _ = strconv.ParseUint(m[2], 0, 64)
		}
		if m := gdbExit.FindStringSubmatch(l); m != nil {
			o.exit = 0
			if m[1] != "" {
				o.exit, _ = strconv.Atoi(m[1])
			}
		}
	}
	if len(o.regs) < 70 || o.exit < 0 {
		t.Fatalf("rank %d: gdb registers %v, exit %d:\n%s", rank, o.regs, o.exit, out)
	}
	return o
}

// bgqRegNames maps the BG/Q names of the Registers scope whose values the test compares to
// gdb's names for them. Left out: GPRs that hold stack addresses (QEMU places the stack of
// the rank and of gdb's copy differently), the volatile r0, r5–r8, r11, r12 and ctr, where
// the C library's calls leave values that depend on the environment and on how long a rank
// waited for the others.
func bgqRegNames(o bgqOracle) map[string]string {
	names := map[string]string{"iar": "pc", "lr": "lr", "msr": "msr", "cr": "cr", "xer": "xer", "fpscr": "fpscr"}
	for i := range 32 {
		switch i {
		case 0, 5, 6, 7, 8, 11, 12:
			continue
		}
		n := fmt.Sprintf("r%d", i)
		if d := int64(o.regs[n] - o.regs["r1"]); d < -1<<24 || d > 1<<24 { // not into the stack
			names[n] = n
		}
	}
	return names
}

// TestEmulatedBGQSession is a scripted DAP session on a static big-endian Power program run
// as two ranks under QEMU whose agents answer as a Blue Gene/Q CNK (`hpcdap agent --cnk`,
// chosen through HPCDAP_AGENT_CNK): every extension command is refused, acks come shuffled.
// The breakpoint, with a condition the front end decides, is hit on every rank; there the
// stack, the variables and the Registers scope, by BG/Q names (GPRs, special registers, FPRs
// as QPX quads, debug registers), agree with gdb-multiarch on the same program; thread names
// carry the hardware thread; a function call in an expression is refused; registers are
// written; pause stops every rank in its spin loop, where parallel stacks agree with each
// rank's stack; setting a variable releases the loop, and every rank runs to its end with
// gdb's exit code, none left stopped.
func TestEmulatedBGQSession(t *testing.T) {
	t.Setenv("HPCDAP_AGENT_CNK", "1")
	// QEMU ≥ 9 ignores the debugger's interrupt: the agents interrupt with SIGUSR1, which the
	// program handles.
	t.Setenv("HPCDAP_AGENT_INTERRUPT_SIGNAL", "SIGUSR1")
	const np = 2
	tg := powerTargets[0] // qemu-ppc64: big-endian ELFv1, as BG/Q
	emulator := modernQEMU(t, tg.emulator)
	p := compilePowerC(t, tg, "bgq")
	oracle := make([]bgqOracle, np)
	for r := range np {
		oracle[r] = bgqRankOracle(t, p, emulator, r, np)
	}

	ready := t.TempDir()
	d := newDAP(t, viaPipe)
	defer d.close()
	d.launch(map[string]any{"program": p.bin, "emulator": tg.emulator, "np": np, "env": map[string]any{"READY_DIR": ready}})
	// A condition that holds on every rank: the CNK refuses to evaluate it, the front end does.
	var bps struct{ Breakpoints []Breakpoint }
	d.call("setBreakpoints", map[string]any{"source": map[string]any{"path": p.src},
		"breakpoints": []map[string]any{{"line": p.line(t, "leaf"), "condition": "x > rank"}}}, &bps)
	if len(bps.Breakpoints) != 1 || !bps.Breakpoints[0].Verified {
		t.Fatalf("breakpoint %+v", bps)
	}
	d.call("configurationDone", nil, nil)

	hit := map[int]bool{}
	for stops := 0; len(hit) < np; stops++ {
		st := d.stopped()
		if st.Reason != "breakpoint" || !st.AllThreadsStopped {
			t.Fatalf("stop %d: %+v, want the breakpoint, all stopped", stops, st)
		}
		for _, r := range d.ranks().Ranks {
			if r.State != "stopped" {
				t.Errorf("stop %d: rank %d is %s", stops, r.Rank, r.State)
			}
			if r.StopReason == "breakpoint" && !hit[r.Rank] {
				hit[r.Rank] = true
				checkBGQStop(t, d, r, oracle[r.Rank])
			}
		}
		if stops > 2*np {
			t.Fatalf("%d stops, ranks at the breakpoint: %v", stops, hit)
		}
		d.call("continue", map[string]any{"threadId": st.ThreadId}, nil)
	}

	if o := allOutput(d); !strings.Contains(o, "does not evaluate breakpoint conditions") {
		t.Errorf("the front end did not say it decides the condition:\n%s", o)
	}

	// Pause: every rank stops in its spin loop.
	for r := range np {
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
			if _, err := os.Stat(filepath.Join(ready, fmt.Sprintf("spin-%d", r))); err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("rank %d did not reach its spin loop within a minute", r)
			}
		}
	}
	ids := rankThreads(d)
	d.call("pause", map[string]any{"threadId": ids[1]}, nil)
	if st := d.stopped(); st.Reason != "pause" || !st.AllThreadsStopped {
		t.Fatalf("after pause: %+v", st)
	}
	spin := p.line(t, "spin")
	checkParallelStacks(t, d, d.ranks()) // every rank unwound here: no traceback, no gather
	for _, r := range d.ranks().Ranks {
		frames := d.stackTrace(r.ThreadID)
		// The spin file is there once mark has created it: a rank may still be in mark, called
		// from the line before the loop, when the pause comes.
		top := len(frames) - 1
		if r.State != "stopped" || top < 0 || frames[top].Name != "main" || frames[top].Line < spin-1 || frames[top].Line > spin+1 ||
			(top > 0 && frames[top].Line != spin-1) {
			t.Fatalf("paused rank %d (%s): %s", r.Rank, r.State, strings.Join(frameNames(frames), " ← "))
		}
		var ev dap.EvaluateResponseBody
		d.call("evaluate", map[string]any{"expression": "release = 1", "frameId": frames[top].Id, "context": "repl"}, &ev)
		if ev.Result != "1" {
			t.Errorf("rank %d: release = 1 gave %q", r.Rank, ev.Result)
		}
	}
	d.call("continue", map[string]any{"threadId": ids[1]}, nil)
	if _, err := d.c.WaitEvent("terminated", time.Minute, nil); err != nil {
		t.Fatal(err)
	}
	checkExits(t, d, func(rank int) int { return oracle[rank].exit })
}

// checkBGQStop compares one rank at its breakpoint with gdb's view of it.
func checkBGQStop(t *testing.T, d *dapSession, r RankState, o bgqOracle) {
	t.Helper()
	var th dap.ThreadsResponseBody
	d.call("threads", nil, &th)
	for _, x := range th.Threads {
		if x.Id == r.ThreadID && !regexp.MustCompile(`^rank \d+ · main \(LWP \d+, core \d+/thread \d+\)`).MatchString(x.Name) {
			t.Errorf("rank %d: thread name %q names no hardware thread", r.Rank, x.Name)
		}
	}
	frames := d.stackTrace(r.ThreadID)
	if len(frames) != len(o.dump.Frames) {
		t.Errorf("rank %d: %d frames %v; gdb %d", r.Rank, len(frames), frameNames(frames), len(o.dump.Frames))
	}
	for i := range min(len(frames), len(o.dump.Frames)) {
		f, w := frames[i], o.dump.Frames[i]
		pc, _ := strconv.ParseUint(f.InstructionPointerReference, 0, 64)
		if f.Name != w.Name || f.Line != w.Line || pc != w.PC {
			t.Errorf("rank %d frame %d: %s line %d pc %#x; gdb %s line %d pc %#x", r.Rank, i, f.Name, f.Line, pc, w.Name, w.Line, w.PC)
		}
	}
	for scope, want := range map[string]map[string]string{"Locals": o.dump.Locals, "Arguments": o.dump.Args} {
		got := d.scopeVars(frames[0].Id, scope)
		for name, v := range want {
			if got[name].Value != v {
				t.Errorf("rank %d: %s %s = %q; gdb %q", r.Rank, scope, name, got[name].Value, v)
			}
		}
	}
	regs := d.scopeVars(frames[0].Id, "Registers")
	for _, name := range []string{"r0", "r31", "iar", "lr", "msr", "cr", "ctr", "xer", "fpscr", "dear", "esr",
		"f0", "f31", "dbcr0", "dac1", "iac4", "dbsr"} {
		if _, ok := regs[name]; !ok {
			t.Errorf("rank %d: no %s in the Registers scope", r.Rank, name)
		}
	}
	for mine, gdbName := range bgqRegNames(o) {
		if got, err := strconv.ParseUint(regs[mine].Value, 0, 64); err != nil || got != o.regs[gdbName] {
			t.Errorf("rank %d: register %s = %q; gdb %s %#x", r.Rank, mine, regs[mine].Value, gdbName, o.regs[gdbName])
		}
	}
	for i := range 32 {
		n := fmt.Sprintf("f%d", i)
		q := strings.Split(strings.Trim(regs[n].Value, "{}"), ", ")
		if got, err := strconv.ParseUint(q[0], 0, 64); len(q) != 4 || err != nil || got != o.regs[n] {
			t.Errorf("rank %d: QPX %s = %q; gdb's FPR %#x in element 0", r.Rank, n, regs[n].Value, o.regs[n])
		}
	}
	// Registers are written with the v6 Set command of their set (r12 and f13 are volatile:
	// leaf reads neither after the breakpoint).
	var sc dap.ScopesResponseBody
	d.call("scopes", map[string]any{"frameId": frames[0].Id}, &sc)
	for _, s := range sc.Scopes {
		if s.Name == "Registers" {
			d.call("setVariable", map[string]any{"variablesReference": s.VariablesReference, "name": "r12", "value": "0x1234abcd"}, nil)
			d.call("setVariable", map[string]any{"variablesReference": s.VariablesReference, "name": "f13", "value": "0x4045000000000000"}, nil)
		}
	}
	frames = d.stackTrace(r.ThreadID)
	after := d.scopeVars(frames[0].Id, "Registers")
	f13 := strings.Split(strings.Trim(regs["f13"].Value, "{}"), ", ")
	if want := "{0x4045000000000000, " + strings.Join(f13[1:], ", ") + "}"; after["r12"].Value != "0x1234abcd" || after["f13"].Value != want {
		t.Errorf("rank %d: after setVariable r12 = %q, f13 = %q; want 0x1234abcd, %s", r.Rank, after["r12"].Value, after["f13"].Value, want)
	}
	msg := d.callErr("evaluate", map[string]any{"expression": "leaf(1, 2)", "frameId": frames[0].Id, "context": "repl"})
	if !strings.Contains(msg, "Blue Gene/Q CNK") {
		t.Errorf("rank %d: a function call in an expression: %q, want it refused for the CNK", r.Rank, msg)
	}
}
