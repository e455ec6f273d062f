//go:build linux && amd64

package ptrace

import (
	"bufio"
	"encoding/binary"
	"math"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/hpcdap/hpcdap/amd64"
	"github.com/hpcdap/hpcdap/internal/testenv"
	"github.com/hpcdap/hpcdap/target"
)

// userRegs names the words of struct user_regs_struct in order.
var userRegs = []string{"r15", "r14", "r13", "r12", "rbp", "rbx", "r11", "r10", "r9", "r8", "rax",
	"rcx", "rdx", "rsi", "rdi", "orig_rax", "rip", "cs", "eflags", "rsp", "ss", "fs_base", "gs_base",
	"ds", "es", "fs", "gs"}

// FXSAVE offsets in user_fpregs_struct.
const (
	fxFCW   = 0
	fxMXCSR = 24
	fxXMM0  = 160
)

// TestLayoutMatchesHeaders checks the structure sizes and offsets the package hard-codes
// against the C library headers, compiled by gcc.
func TestLayoutMatchesHeaders(t *testing.T) {
	needPrograms(t)
	out, err := exec.Command(layoutBin).Output()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"gregs": gregsSize, "fpregs": fpregsSize, "orig_rax": amd64.OffOrigRAX, "rip": amd64.OffRIP, "u_debugreg": offDebugReg}
	got := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		n, _ := strconv.Atoi(f[1])
		got[f[0]] = n
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: package uses %d, headers say %d", k, v, got[k])
		}
	}
	if len(userRegs)*8 != gregsSize {
		t.Errorf("test register table has %d names", len(userRegs))
	}
}

// gdbRegisters runs the test program under gdb (address randomisation off, no shell, the same
// environment as ours), stops at the first instruction of regs_fn and returns gdb's view.
func gdbRegisters(t *testing.T, env []string) (map[string]uint64, uint64, uint64, uint64) {
	t.Helper()
	gdb := testenv.NeedTool(t, "gdb", "gdb")
	cmd := exec.Command(gdb, "-batch", "-nx",
		"-ex", "set startup-with-shell off",
		"-ex", "set disable-randomization on",
		"-ex", "unset environment LINES",
		"-ex", "unset environment COLUMNS",
		"-ex", "break *regs_fn",
		"-ex", "run",
		"-ex", "info registers",
		"-ex", "p/x $mxcsr",
		"-ex", "p/x $fctrl",
		"-ex", "p/x $xmm0.v2_int64[0]",
		"-ex", "kill",
		"--args", progPath, "regs")
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("gdb: %v\n%s", err, out)
	}
	regs := map[string]uint64{}
	var vals []uint64
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 2 && strings.HasPrefix(f[1], "0x") {
			if v, err := strconv.ParseUint(f[1][2:], 16, 64); err == nil {
				regs[f[0]] = v
			}
		}
		if len(f) == 3 && strings.HasPrefix(f[0], "$") && f[1] == "=" {
			v, err := strconv.ParseUint(strings.TrimPrefix(f[2], "0x"), 16, 64)
			if err != nil {
				t.Fatalf("gdb value %q", sc.Text())
			}
			vals = append(vals, v)
		}
	}
	if len(regs) < 20 || len(vals) != 3 {
		t.Fatalf("gdb output not understood:\n%s", out)
	}
	return regs, vals[0], vals[1], vals[2]
}

// TestRegistersMatchGDB stops the program at the first instruction of regs_fn twice, under
// gdb and under the tracer (both without address randomisation, with the same argv and
// environment), and compares every register gdb shows.
func TestRegistersMatchGDB(t *testing.T) {
	needPrograms(t)
	env := []string{"PATH=/usr/bin:/bin"}
	gregs, gmxcsr, gfcw, gxmm0 := gdbRegisters(t, env)

	setarch := testenv.NeedTool(t, "setarch", "util-linux")
	tr := newTracer(t)
	p, err := tr.Spawn([]string{setarch, "x86_64", "-R", progPath, "regs"}, env, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Kill(0, 9)
	pid := p.Info().Pid
	p.Resume(pid, 0)
	expect(t, p, target.EventExec) // setarch has exec'd the program
	addr := symAddr(t, pid, progPath, "regs_fn")
	if addr != gregs["rip"] {
		t.Fatalf("regs_fn at %#x, gdb stopped at %#x: address randomisation not off on both sides", addr, gregs["rip"])
	}
	orig := make([]byte, 1)
	p.ReadMemory(addr, orig)
	p.WriteMemory(addr, []byte{0xcc})
	p.Resume(pid, 0)
	ev := expect(t, p, target.EventSignal)
	if ev.Trap != target.TrapBreakpoint || ev.PC != addr+1 {
		t.Fatalf("event %+v", ev)
	}
	p.WriteMemory(addr, orig)
	if err := p.SetPC(pid, addr); err != nil {
		t.Fatal(err)
	}
	regs, err := p.Registers(pid, target.RegsGeneral)
	if err != nil {
		t.Fatal(err)
	}
	if len(regs) != gregsSize {
		t.Fatalf("%d bytes of general registers", len(regs))
	}
	compared := 0
	for i, name := range userRegs {
		want, ok := gregs[name]
		if !ok {
			continue
		}
		compared++
		if got := binary.LittleEndian.Uint64(regs[i*8:]); got != want {
			t.Errorf("%s = %#x, gdb says %#x", name, got, want)
		}
	}
	if compared < 20 {
		t.Fatalf("only %d registers compared", compared)
	}
	fp, err := p.Registers(pid, target.RegsFloat)
	if err != nil {
		t.Fatal(err)
	}
	if len(fp) != fpregsSize {
		t.Fatalf("%d bytes of float registers", len(fp))
	}
	if got := uint64(binary.LittleEndian.Uint32(fp[fxMXCSR:])); got != gmxcsr {
		t.Errorf("mxcsr %#x, gdb %#x", got, gmxcsr)
	}
	if got := uint64(binary.LittleEndian.Uint16(fp[fxFCW:])); got != gfcw {
		t.Errorf("fcw %#x, gdb %#x", got, gfcw)
	}
	if got := binary.LittleEndian.Uint64(fp[fxXMM0:]); got != gxmm0 || math.Float64frombits(got) != 7.5 {
		t.Errorf("xmm0 %#x, gdb %#x (7.5 is %#x)", got, gxmm0, math.Float64bits(7.5))
	}

	// Writing: a = 11+50 and x = 7.5+12 make regs_fn return 300, and the program exit 4; one
	// change without the other gives exit 1.
	binary.LittleEndian.PutUint64(regs[14*8:], 61) // rdi
	if err := p.SetRegisters(pid, target.RegsGeneral, regs); err != nil {
		t.Fatal(err)
	}
	binary.LittleEndian.PutUint64(fp[fxXMM0:], math.Float64bits(19.5))
	if err := p.SetRegisters(pid, target.RegsFloat, fp); err != nil {
		t.Fatal(err)
	}
	p.Resume(pid, 0)
	expectExit(t, p, 4<<8)
}
