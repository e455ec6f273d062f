package agent

import (
	"bufio"
	"bytes"
	"context"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"io"
	"log"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hpcdap/hpcdap/cdti"
	"github.com/hpcdap/hpcdap/internal/testenv"
	"github.com/hpcdap/hpcdap/ppc64"
)

// powerSource is the Power test program: a loop of argv[1] calls of add (default 10), a worker
// thread created and joined, then a chain of three calls for the back chain.
const powerSource = `#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
long total;
double scale = 1.5;
volatile unsigned long marker = 0x1122334455667788UL;
__attribute__((noinline)) long add(long a, long b) { return a + b; }
__attribute__((noinline)) long depth3(long x) { return x * 2 + total; }
__attribute__((noinline)) long depth2(long x) { return depth3(x + 1) + 1; }
__attribute__((noinline)) long depth1(long x) { return depth2(x + 1) + 1; }
void *worker(void *arg) { total += (long)arg; return NULL; }
int main(int argc, char **argv) {
	long n = argc > 1 ? atol(argv[1]) : 10;
	long s = 0;
	for (long i = 0; i < n; i++)
		s = add(s, i);
	pthread_t th;
	pthread_create(&th, NULL, worker, (void *)7);
	pthread_join(th, NULL);
	total = s * scale;
	printf("sum %ld depth %ld marker %lx\n", s, depth1(1), marker);
	return 0;
}
`

// powerArch is one of the two Power targets: big-endian ELFv1 and little-endian ELFv2.
type powerArch struct {
	name  string // QEMU suffix
	gcc   string
	order binary.ByteOrder
}

var powerArches = []powerArch{
	{"ppc64", "powerpc64-linux-gnu-gcc", binary.BigEndian},
	{"ppc64le", "powerpc64le-linux-gnu-gcc", binary.LittleEndian},
}

// qemu10 returns QEMU ≥ 9 for a, from the cache scripts/qemu-user.sh fills; the tests need
// trap words written into text, which QEMU 7.2 cannot do.
func (a powerArch) qemu10(t testing.TB) string {
	t.Helper()
	for _, dir := range EmulatorDirs() {
		p := filepath.Join(dir, "qemu-"+a.name)
		out, err := exec.Command(p, "--version").Output()
		if err != nil {
			continue
		}
		m := regexp.MustCompile(`version (\d+)\.`).FindSubmatch(out)
		if n, _ := strconv.Atoi(string(m[1])); m != nil && n >= 9 {
			return p
		}
	}
	t.Fatalf("QEMU ≥ 9 qemu-%s not found in %v: run scripts/qemu-user.sh", a.name, EmulatorDirs())
	return ""
}

// fixedLayout wraps the emulator so that two runs get the same addresses (a reserved guest
// address space), so that gdb-multiarch on a second emulator sees the same register values.
func fixedLayout(t testing.TB, emulator string) string {
	t.Helper()
	w := filepath.Join(t.TempDir(), "qemu-fixed")
	script := fmt.Sprintf("#!/bin/sh\nexec %s -R 0x8000000000 \"$@\"\n", emulator)
	if err := os.WriteFile(w, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return w
}

// compile builds powerSource statically with the cross compiler.
func (a powerArch) compile(t testing.TB) string {
	t.Helper()
	gcc := testenv.NeedTool(t, a.gcc, "gcc-"+strings.TrimSuffix(a.gcc, "-gcc"))
	dir := t.TempDir()
	src := filepath.Join(dir, "power.c")
	if err := os.WriteFile(src, []byte(powerSource), 0o644); err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(dir, "power")
	if out, err := exec.Command(gcc, "-g", "-O0", "-static", "-pthread", "-o", exe, src).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", a.gcc, err, out)
	}
	return exe
}

// powerEnv is the environment of the program under both the agent and gdb: the agent adds
// HPCDAP_RANK and HPCDAP_NP, so gdb's emulator gets them too and the stacks match.
var powerEnv = []string{"PATH=/usr/bin:/bin"}

// newRSPHarness is an in-process agent with the RSP back end.
func newRSPHarness(t testing.TB, emulator string, emuArgs ...string) *harness {
	t.Helper()
	h := &harness{t: t, logBuf: &syncBuffer{}}
	b := &RSPBackend{Emulator: emulator, EmulatorArgs: emuArgs, Timeout: 30 * time.Second, Trace: rspTrace(),
		Logf: log.New(h.logBuf, "", log.Lmicroseconds).Printf}
	a, err := New(Config{Token: testToken, Backend: b, Node: "testnode", WaitTimeout: 30 * time.Second,
		Logger: log.New(h.logBuf, "", log.Lmicroseconds)})
	if err != nil {
		t.Fatalf("agent.New: %v", err)
	}
	h.a = a
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h.addr = l.Addr().String()
	go a.Serve(context.Background(), l)
	t.Cleanup(func() {
		a.Shutdown(true)
		if t.Failed() {
			t.Logf("agent log:\n%s", h.logBuf.String())
		}
	})
	return h
}

// spawnPower starts the program as rank 0 and returns its output.
func (h *harness) spawnPower(argv ...string) *outFile {
	h.t.Helper()
	out := newOutFile(h.t)
	err := h.a.SpawnRanks(SpawnSpec{Argv: argv, Env: powerEnv, Stdio: []*os.File{nil, out.f, out.f}, Count: 1})
	if err != nil {
		h.t.Fatalf("spawn: %v", err)
	}
	return out
}

// funcEntry resolves a function's breakpoint address (ELFv1 descriptor's code address, ELFv2
// local entry) with package ppc64.
func funcEntry(t testing.TB, exe, name string) uint64 {
	t.Helper()
	f, err := os.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := ppc64.NewResolver(f)
	if err != nil {
		t.Fatal(err)
	}
	e, err := r.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	return e.Breakpoint()
}

// gdbPower runs the program under gdb-multiarch on a second emulator (same layout, seed and
// environment) and returns gdb's output.
func gdbPower(t testing.TB, a powerArch, emulator, exe string, emuArgs []string, commands ...string) string {
	t.Helper()
	gdb, err := exec.LookPath("gdb-multiarch")
	if err != nil {
		t.Fatal("gdb-multiarch not found: install the Debian package gdb-multiarch")
	}
	emu := exec.Command(emulator, append(append([]string(nil), emuArgs...), exe)...)
	emu.Env = append(append([]string(nil), powerEnv...), "HPCDAP_RANK=0", "HPCDAP_NP=1")
	sock := testenv.StartQEMUStub(t, emu)
	args := []string{"-nx", "-batch", exe, "-ex", "set confirm off", "-ex", "target remote " + sock}
	for _, c := range commands {
		args = append(args, "-ex", c)
	}
	args = append(args, "-ex", "kill")
	out, err := exec.Command(gdb, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("gdb-multiarch: %v\n%s", err, out)
	}
	return string(out)
}

var (
	// `info registers`: "r1             0x4000800180        274886295936".
	gdbRegLine = regexp.MustCompile(`^(r\d+|pc|msr|cr|lr|ctr|xer|fpscr)\s+(0x[0-9a-f]+)\s`)
	// `info registers float`: "f1             1.5                 (raw 0x3ff8000000000000)".
	gdbFloatLine = regexp.MustCompile(`^(f\d+)\s+.*\(raw (0x[0-9a-f]+)\)`)
	// `p/x $pc`: "$3 = 0x10000858".
	gdbValueLine = regexp.MustCompile(`^\$\d+ = (0x[0-9a-f]+)$`)
	// `bt`: "#1  0x0000000010000a3c in depth2 (x=2) at /tmp/x/power.c:9".
	gdbFrameLine = regexp.MustCompile(`^#(\d+)\s+(?:(0x[0-9a-f]+) in )?([\w.]+) \(`)
	// `info address add`: `Symbol "add" is a function at address 0x10000b24.`
	gdbAddressLine = regexp.MustCompile(`is a function at address (0x[0-9a-f]+)`)
)

// gdbOracle is what gdb-multiarch says about the program.
type gdbOracle struct {
	regs   map[string]uint64 // at the fifth call of add
	steps  []uint64          // pcs after each stepi from there
	global uint64            // gdb's address of add (code address; ELFv2: the global entry)
	depth3 uint64            // where gdb's `break depth3` stops
	frames []uint64          // bt there: frame pcs from #1 on
	names  []string          // and their functions
}

const powerSteps = 3

func readOracle(t testing.TB, a powerArch, emulator, exe string, emuArgs []string, addAddr uint64) gdbOracle {
	t.Helper()
	cmds := []string{"info address add", fmt.Sprintf("break *%#x", addAddr), "ignore 1 4", "continue",
		"info registers", "info registers float"}
	for i := 0; i < powerSteps; i++ {
		cmds = append(cmds, "stepi", "p/x $pc")
	}
	cmds = append(cmds, "delete", "break depth3", "continue", "p/x $pc", "bt")
	out := gdbPower(t, a, emulator, exe, emuArgs, cmds...)
	o := gdbOracle{regs: map[string]uint64{}}
	var values []uint64
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if m := gdbRegLine.FindStringSubmatch(line); m != nil {
			o.regs[m[1]], _ = strconv.ParseUint(m[2], 0, 64)
		} else if m := gdbFloatLine.FindStringSubmatch(line); m != nil {
			if n, _ := strconv.Atoi(m[1][1:]); n < 32 { // f32–f63 are VSX views
				o.regs[m[1]], _ = strconv.ParseUint(m[2], 0, 64)
			}
		} else if m := gdbValueLine.FindStringSubmatch(line); m != nil {
			v, _ := strconv.ParseUint(m[1], 0, 64)
			values = append(values, v)
		} else if m := gdbFrameLine.FindStringSubmatch(line); m != nil && m[1] != "0" {
			v, _ := strconv.ParseUint(m[2], 0, 64)
			o.frames = append(o.frames, v)
			o.names = append(o.names, m[3])
		} else if m := gdbAddressLine.FindStringSubmatch(line); m != nil {
			o.global, _ = strconv.ParseUint(m[1], 0, 64)
		}
	}
	if len(o.regs) != 32+7+32 || len(values) != powerSteps+1 || o.regs["pc"] != addAddr || len(o.frames) < 3 || o.global == 0 {
		t.Fatalf("gdb gave %d registers, %d values, pc %#x, %d frames, address %#x:\n%s",
			len(o.regs), len(values), o.regs["pc"], len(o.frames), o.global, out)
	}
	o.steps, o.depth3 = values[:powerSteps], values[powerSteps]
	return o
}

// localEntryOffset is readelf's "[<localentry>: N]" for a function (0 when absent).
func localEntryOffset(t testing.TB, a powerArch, exe, name string) uint64 {
	t.Helper()
	readelf := strings.TrimSuffix(a.gcc, "gcc") + "readelf"
	out, err := exec.Command(readelf, "-sW", exe).Output()
	if err != nil {
		t.Fatalf("%s: %v", readelf, err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 || f[len(f)-1] != name || f[3] != "FUNC" {
			continue
		}
		if m := regexp.MustCompile(`\[<localentry>: (\d+)\]`).FindStringSubmatch(line); m != nil {
			n, _ := strconv.ParseUint(m[1], 10, 64)
			return n
		}
		return 0
	}
	t.Fatalf("%s: no function %s", readelf, name)
	return 0
}

// TestRSPPowerAgainstGDB drives a Power program under QEMU through the agent over CDTI, big-
// and little-endian: a breakpoint on a new thread's function, breakpoints by function name at
// the right entry (gdb's address, plus readelf's local-entry offset on ELFv2) hit exactly as
// often as the loop calls the function, the BG/Q register sets and pt_regs compared with
// gdb-multiarch stopped at the same call of a second emulator, memory reads and writes,
// single steps compared with gdb's stepi, and a back-chain traceback compared with gdb's bt.
func TestRSPPowerAgainstGDB(t *testing.T) {
	for _, a := range powerArches {
		t.Run(a.name, func(t *testing.T) {
			emu := fixedLayout(t, a.qemu10(t))
			exe := a.compile(t)
			emuArgs := []string{"-seed", "1"}
			addAddr := funcEntry(t, exe, "add")
			o := readOracle(t, a, emu, exe, emuArgs, addAddr)
			if want := o.global + localEntryOffset(t, a, exe, "add"); addAddr != want {
				t.Fatalf("add resolves to %#x; gdb's address %#x + local entry = %#x", addAddr, o.global, want)
			}

			h := newRSPHarness(t, emu, emuArgs...)
			out := h.spawnPower(exe)
			tt, first := startStopped(t, h, 1)
			leader := first.ThreadID

			ti := tt.query(0, &cdti.GetTargetInfo{})
			info := ti.Ack.(*cdti.GetTargetInfoAck)
			if ti.Code != cdti.CmdSuccess || info.Machine != elf.EM_PPC64 || info.Order() != a.order || info.PtrSize != 8 || info.Exe != exe {
				t.Fatalf("target info %v %+v", ti.Code, info)
			}

			// Five calls of add, the loop's breakpoint, with gdb's trap word.
			tt.mustUpdate(0, &cdti.SetBreakpoint{Addr: addAddr, Instruction: ppc64.TrapWordLinux})
			tt.cont(0)
			var n cdti.NotifySignal
			for i := 0; i < 5; i++ {
				if i > 0 {
					tt.cont(0)
				}
				n = tt.signalNotify()
				if n.Reason != cdti.SignalBreakpoint || n.InstAddress != addAddr || n.ThreadID != leader {
					t.Fatalf("hit %d: %+v", i+1, n)
				}
			}
			comparePowerRegs(t, tt, leader, a.order, o.regs)

			// Memory: text reads show the program's instruction, not the trap; data is written.
			text := tt.memory(0, addAddr, 8)
			if want := testenv.ELFBytes(t, exe, addAddr, 8); !bytes.Equal(text, want) {
				t.Errorf("text at add: % x, file has % x", text, want)
			}
			markerAddr := testenv.ELFSymbol(t, exe, "marker").Value
			got := tt.memory(0, markerAddr, 8)
			if a.order.Uint64(got) != 0x1122334455667788 {
				t.Errorf("marker reads % x", got)
			}
			nv := make([]byte, 8)
			a.order.PutUint64(nv, 0xfeedface0badf00d)
			tt.mustUpdate(0, &cdti.SetMemory{Addr: markerAddr, Data: nv})
			if got := tt.memory(0, markerAddr, 8); !bytes.Equal(got, nv) {
				t.Errorf("marker after SetMemory: % x", got)
			}

			// Single steps from the breakpoint, as gdb's stepi.
			for i, want := range o.steps {
				tt.mustUpdate(0, &cdti.StepThread{ThreadID: leader})
				n = tt.signalNotify()
				iar := tt.query(0, &cdti.GetSpecialRegs{ThreadID: leader}).Ack.(*cdti.GetSpecialRegsAck).Regs.IAR
				if n.Reason != cdti.SignalStepComplete || n.InstAddress != want || iar != want {
					t.Fatalf("step %d: %+v, iar %#x; gdb's stepi %#x", i+1, n, iar, want)
				}
			}

			// The worker thread's breakpoint: a thread other than the leader stops.
			worker := funcEntry(t, exe, "worker")
			tt.mustUpdate(0, &cdti.ResetBreakpoint{Addr: addAddr, Instruction: a.order.Uint32(text)},
				&cdti.SetBreakpoint{Addr: worker, Instruction: ppc64.TrapWordTWI})
			tt.cont(0)
			n = tt.signalNotify()
			if n.Reason != cdti.SignalBreakpoint || n.InstAddress != worker || n.ThreadID == leader || n.Signal != uint32(syscall.SIGTRAP) {
				t.Fatalf("worker stop %+v (leader %d)", n, leader)
			}
			tl := tt.query(0, &cdti.GetThreadList{}).Ack.(*cdti.GetThreadListAck)
			if len(tl.Threads) != 2 {
				t.Fatalf("thread list at the worker's breakpoint: %+v", tl.Threads)
			}
			orig := a.order.Uint32(tt.memory(0, worker, 4))
			tt.mustUpdate(0, &cdti.ResetBreakpoint{Addr: worker, Instruction: orig})

			// The back chain at depth3.
			tt.mustUpdate(0, &cdti.SetBreakpoint{Addr: o.depth3, Instruction: ppc64.TrapWordCNK})
			tt.cont(0)
			n = tt.signalNotify()
			if n.Reason != cdti.SignalBreakpoint || n.InstAddress != o.depth3 {
				t.Fatalf("depth3 stop %+v, want breakpoint at %#x", n, o.depth3)
			}
			tb, err := tt.c.Traceback(ctx(), 0, leader, 0)
			if err != nil {
				t.Fatal(err)
			}
			if len(tb) < 1+len(o.frames) || tb[0].PC != o.depth3 {
				t.Fatalf("traceback %+v; gdb's frames %#x %v", tb, o.frames, o.names)
			}
			for i, pc := range o.frames {
				if tb[i+1].PC != pc {
					t.Errorf("frame %d (%s): pc %#x, gdb %#x", i+1, o.names[i], tb[i+1].PC, pc)
				}
			}
			tt.cont(0)
			if st := tt.waitTermination(0); st != 0 {
				t.Fatalf("exit status %#x", st)
			}
			out.waitFor(t, "marker feedface0badf00d")
		})
	}
}

// comparePowerRegs compares GetGeneralRegs, GetSpecialRegs, GetFloatRegs and the pt_regs
// extension with gdb's values.
func comparePowerRegs(t *testing.T, tt *testTool, tid uint32, order binary.ByteOrder, want map[string]uint64) {
	t.Helper()
	gpr := tt.query(0, &cdti.GetGeneralRegs{ThreadID: tid}).Ack.(*cdti.GetGeneralRegsAck).GPR
	spr := tt.query(0, &cdti.GetSpecialRegs{ThreadID: tid}).Ack.(*cdti.GetSpecialRegsAck).Regs
	fpr := tt.query(0, &cdti.GetFloatRegs{ThreadID: tid}).Ack.(*cdti.GetFloatRegsAck).FPR
	raw, err := tt.c.RegisterSet(ctx(), 0, tid, cdti.RegSetGeneral)
	if err != nil {
		t.Fatal(err)
	}
	var pt ppc64.PtRegs
	if err := pt.Unmarshal(raw, order); err != nil {
		t.Fatal(err)
	}
	got := map[string]uint64{"pc": spr.IAR, "msr": spr.MSR, "cr": spr.CR, "lr": spr.LR, "ctr": spr.CTR,
		"xer": spr.XER, "fpscr": spr.FPSCR}
	for i := 0; i < 32; i++ {
		got[fmt.Sprintf("r%d", i)] = gpr[i]
		got[fmt.Sprintf("f%d", i)] = fpr[i][0]
		if pt.GPR[i] != gpr[i] {
			t.Errorf("pt_regs r%d %#x, GetGeneralRegs %#x", i, pt.GPR[i], gpr[i])
		}
	}
	if pt.NIP != spr.IAR || pt.Link != spr.LR || pt.CCR != spr.CR || pt.MSR != spr.MSR {
		t.Errorf("pt_regs %+v disagrees with GetSpecialRegs %+v", pt, spr)
	}
	for name, w := range want {
		if got[name] != w {
			t.Errorf("%s: agent %#x, gdb %#x", name, got[name], w)
		}
	}
	if math.Float64frombits(fpr[1][0]) == 0 && want["f1"] != 0 {
		t.Errorf("f1 is zero")
	}
}

// TestRSPPowerTenThousandHits counts every hit of the loop's breakpoint through the agent:
// exactly as many as the program calls add, on both byte orders; the program's own sum proves
// that every call ran the original instruction.
func TestRSPPowerTenThousandHits(t *testing.T) {
	calls := 10000
	if raceEnabled {
		calls = 1000 // the same paths, checked for races in a tenth of the time
	}
	for _, a := range powerArches {
		t.Run(a.name, func(t *testing.T) {
			t.Parallel() // latency-bound: the two byte orders overlap well
			emu := a.qemu10(t)
			exe := a.compile(t)
			addAddr := funcEntry(t, exe, "add")
			h := newRSPHarness(t, emu)
			out := h.spawnPower(exe, strconv.Itoa(calls))
			tt, _ := startStopped(t, h, 1)
			tt.mustUpdate(0, &cdti.SetBreakpoint{Addr: addAddr, Instruction: ppc64.TrapWordCNK})
			tt.cont(0)
			hits := 0
			for {
				n := tt.notify()
				if n.Kind == cdti.NotifyTypeTermination {
					if n.Exit != 0 {
						t.Fatalf("exit status %#x", n.Exit)
					}
					break
				}
				if n.Kind != cdti.NotifyTypeSignal || n.Signal.Reason != cdti.SignalBreakpoint || n.Signal.InstAddress != addAddr {
					t.Fatalf("after %d hits: %+v", hits, n)
				}
				hits++
				tt.cont(0)
			}
			if hits != calls {
				t.Fatalf("%d hits, want %d", hits, calls)
			}
			out.waitFor(t, fmt.Sprintf("sum %d ", calls*(calls-1)/2))
		})
	}
}

// rspTrace returns stderr when RSP_TRACE is set, for following a test's packets.
func rspTrace() io.Writer {
	if os.Getenv("RSP_TRACE") != "" {
		return os.Stderr
	}
	return nil
}

// countHits continues rank 0 until it exits, checking that every stop is a breakpoint at one
// of addrs, and returns the number of hits.
func countHits(t testing.TB, tt *testTool, addrs ...uint64) int {
	t.Helper()
	tt.cont(0)
	hits := 0
	for {
		n := tt.notify()
		if n.Kind == cdti.NotifyTypeTermination {
			if n.Exit != 0 {
				t.Fatalf("exit status %#x", n.Exit)
			}
			return hits
		}
		if n.Kind != cdti.NotifyTypeSignal || n.Signal.Reason != cdti.SignalBreakpoint || !slices.Contains(addrs, n.Signal.InstAddress) {
			t.Fatalf("after %d hits: %+v", hits, n)
		}
		hits++
		tt.cont(0)
	}
}

// TestRSPPowerStubAddress serves a program that a stub already runs (`qemu-ppc64 -g PORT`,
// the agent's --rsp): the agent connects instead of starting an emulator, and the program
// is controlled the same way.
func TestRSPPowerStubAddress(t *testing.T) {
	a := powerArches[0]
	emu := a.qemu10(t)
	exe := a.compile(t)
	addr := funcEntry(t, exe, "add")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	var out syncBuffer
	cmd := exec.Command(emu, "-g", strconv.Itoa(port), exe, "7")
	cmd.Stdout, cmd.Env = &out, powerEnv
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })

	h := &harness{t: t, logBuf: &syncBuffer{}}
	b := &RSPBackend{Addr: fmt.Sprintf("127.0.0.1:%d", port), Timeout: 30 * time.Second, Trace: rspTrace()}
	h.a, err = New(Config{Token: testToken, Backend: b, Logger: log.New(h.logBuf, "", log.Lmicroseconds)})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h.addr = ln.Addr().String()
	go h.a.Serve(context.Background(), ln)
	t.Cleanup(func() { h.a.Shutdown(true) })
	if err := h.a.SpawnRanks(SpawnSpec{Argv: []string{exe}, Count: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.a.backend.Attach(cmd.Process.Pid); err == nil {
		t.Error("the rsp back end attached to a pid")
	}
	tt, first := startStopped(t, h, 1)
	if first.ThreadID != uint32(cmd.Process.Pid) {
		t.Errorf("leader thread %d, the emulator's pid (QEMU 10 passes thread ids through) %d", first.ThreadID, cmd.Process.Pid)
	}
	info := tt.query(0, &cdti.GetTargetInfo{}).Ack.(*cdti.GetTargetInfoAck)
	if info.Machine != elf.EM_PPC64 || info.Exe != exe {
		t.Errorf("target info %+v", info)
	}
	tt.mustUpdate(0, &cdti.SetBreakpoint{Addr: addr, Instruction: ppc64.TrapWordLinux})
	if hits := countHits(t, tt, addr); hits != 7 {
		t.Fatalf("%d hits, want 7", hits)
	}
	cmd.Wait()
	if !strings.Contains(out.String(), "sum 21 ") {
		t.Errorf("program output %q", out.String())
	}
}

// TestRSPPowerOldQEMU runs the program under Debian 12's QEMU 7.2, whose stub cannot write
// program text: the agent says so in its log, and the tool's trap words are carried out as
// stub breakpoints (Z0), hit exactly as often, while GetMemory shows the original code.
func TestRSPPowerOldQEMU(t *testing.T) {
	a := powerArches[1]
	emu, err := exec.LookPath("qemu-" + a.name)
	if err != nil {
		t.Fatal("qemu-ppc64le not on PATH: install the Debian package qemu-user")
	}
	out, _ := exec.Command(emu, "--version").Output()
	if !strings.Contains(string(out), "version 7.") {
		t.Fatalf("%s is not QEMU 7: %s", emu, out)
	}
	exe := a.compile(t)
	addr := funcEntry(t, exe, "add")
	h := newRSPHarness(t, emu)
	h.spawnPower(exe, "9")
	tt, _ := startStopped(t, h, 1)
	tt.mustUpdate(0, &cdti.SetBreakpoint{Addr: addr, Instruction: ppc64.TrapWordLinux})
	if got, want := tt.memory(0, addr, 4), testenv.ELFBytes(t, exe, addr, 4); !bytes.Equal(got, want) {
		t.Errorf("memory at the breakpoint % x, file % x", got, want)
	}
	if hits := countHits(t, tt, addr); hits != 9 {
		t.Fatalf("%d hits, want 9", hits)
	}
	if log := h.logBuf.String(); !strings.Contains(log, "stub breakpoints (Z0)") {
		t.Errorf("the agent's log does not say that traps became stub breakpoints:\n%s", log)
	}
}
