package agent

import (
	"bytes"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hpcdap/hpcdap/bpcode"
	"github.com/hpcdap/hpcdap/cdti"
	"github.com/hpcdap/hpcdap/internal/testenv"
)

// buildOOL compiles testdata/ool.c with oolkinds.S, whose ool_* labels mark one instruction of
// each kind a breakpoint may stand on.
func buildOOL(t testing.TB, pie bool) string {
	t.Helper()
	testenv.NeedTool(t, "gcc", "gcc")
	bin := filepath.Join(t.TempDir(), "ool")
	args := []string{"-g", "-O0", "-pthread", "-o", bin, "testdata/ool.c", "testdata/oolkinds.S"}
	if !pie {
		args = append(args, "-no-pie")
	}
	if out, err := exec.Command("gcc", args...).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	return bin
}

// nativeOutput runs bin with args untraced and returns what it prints.
func nativeOutput(t testing.TB, bin string, args ...string) string {
	t.Helper()
	out, err := exec.Command(bin, args...).Output()
	if err != nil {
		t.Fatalf("%s %v: %v", bin, args, err)
	}
	return string(out)
}

// oolKinds are the labels of oolkinds.S that ool's "kinds" runs once per round; ool_syscall is
// the one instruction that cannot run out of line.
var oolKinds = []string{"ool_load", "ool_lea", "ool_pop", "ool_ret", "ool_store", "ool_addimm", "ool_call",
	"ool_callreg", "ool_callmem", "ool_jcc8", "ool_jmp", "ool_jcc32", "ool_sse_load", "ool_sse_add", "ool_syscall"}

// oolHits is how many times a round of "kinds" executes each label: ool_jmp only for even
// i (i % 50 even: every other round), the rest once.
func oolHits(label string, n int) int {
	if label == "ool_jmp" {
		return (n + 1) / 2
	}
	return n
}

// loadBias is where bin's first segment (file offset 0) lies in pid: 0 for a fixed-address
// executable.
func loadBias(t testing.TB, pid int, bin string) uint64 {
	t.Helper()
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Type != elf.ET_DYN {
		return 0
	}
	maps, err := readMaps(pid)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range maps {
		if m.path == bin {
			return m.start
		}
	}
	t.Fatalf("%s is not mapped in pid %d", bin, pid)
	return 0
}

// neverSite is a site whose condition never holds: every hit is decided in the agent and
// passed.
func neverSite(t testing.TB) []byte {
	t.Helper()
	var b bpcode.Builder
	b.Const(0)
	p, err := b.Program(false)
	if err != nil {
		t.Fatal(err)
	}
	return (&bpcode.Site{Cond: p}).Encode()
}

// passesOf reads how rank 0's threads passed the breakpoints they hit.
func passesOf(t testing.TB, h *harness) passCounts {
	t.Helper()
	var pc passCounts
	if err := h.a.proc(0).do(func() { pc = h.a.proc(0).passes }); err != nil {
		t.Fatal(err)
	}
	return pc
}

// waitPassing is waitTermination for a run of many thousand breakpoint hits, whose length
// depends on the machine's load (each hit is a round trip between the process and the agent):
// it fails only when 20 s go by with neither the Termination notification nor a single
// breakpoint passed, a process that no longer advances, rather than bounding the whole run.
func waitPassing(t testing.TB, h *harness, tt *testTool) cdti.ExitStatus {
	t.Helper()
	total := func() uint64 {
		pc := passesOf(t, h)
		return pc.emulated + pc.branched + pc.outOfLine + pc.stepped
	}
	last, seen := total(), time.Now()
	for {
		select {
		case n, ok := <-tt.c.Notifications():
			if !ok {
				t.Fatalf("connection ended: %v", tt.c.Err())
			}
			switch n.Kind {
			case cdti.NotifyTypeTermination:
				return n.Exit
			case cdti.NotifyTypeSignal:
				tt.cont(0)
			}
		case <-time.After(time.Second):
			if now := total(); now != last {
				last, seen = now, time.Now()
			} else if time.Since(seen) > 20*time.Second {
				t.Fatalf("no breakpoint passed and no notification for 20 s; passes %+v", passesOf(t, h))
			}
		}
	}
}

// TestOutOfLineKinds puts a breakpoint whose condition never holds on one instruction of each
// kind (RIP-relative load, lea and store, an immediate after the displacement, push and pop,
// ret, three forms of call, jcc with 8- and 32-bit displacements, jmp, SSE, syscall) and runs
// them 2,000 times each: the program prints what it prints untraced, and every hit but the
// syscall's was passed without a single step (before out-of-line execution, every one but the
// push was stepped over).
func TestOutOfLineKinds(t *testing.T) {
	for _, pie := range []bool{false, true} {
		t.Run(map[bool]string{false: "fixed", true: "pie"}[pie], func(t *testing.T) {
			bin := buildOOL(t, pie)
			const n = 2000
			want := nativeOutput(t, bin, "kinds", strconv.Itoa(n))
			h := newHarness(t, "")
			out := h.spawn(1, bin, "kinds", strconv.Itoa(n))
			tt, _ := startStopped(t, h, 1)
			bias := loadBias(t, h.rankPid(0), bin)
			site := neverSite(t)
			total := 0
			for _, l := range oolKinds {
				a := testenv.NMSymbol(t, bin, l) + bias
				tt.setBreak(0, a)
				tt.mustUpdate(0, &cdti.SetTrapCondition{Address: a, Site: site})
				total += oolHits(l, n)
			}
			tt.cont(0)
			if st := waitPassing(t, h, tt); st != 0 {
				t.Fatalf("exit status %v (output %q)", st, out.String())
			}
			out.waitFor(t, strings.TrimSpace(want))
			pc := passesOf(t, h)
			if pc.stepped != n {
				t.Errorf("%d hits stepped over, want %d (the syscall's only); passes %+v", pc.stepped, n, pc)
			}
			if got := pc.emulated + pc.branched + pc.outOfLine + pc.stepped; got != uint64(total) {
				t.Errorf("%d hits passed, want %d; passes %+v", got, total, pc)
			}
			// Branches: three calls, two jcc and a jmp taken every other round; out of line:
			// the other eight kinds.
			if pc.branched != uint64(5*n+n/2) || pc.outOfLine != 8*n {
				t.Errorf("passes %+v, want %d branches and %d out of line", pc, 5*n+n/2, 8*n)
			}
		})
	}
}

// TestOutOfLineThreads: threads call k_bump many times each, all through one breakpoint on a
// locked RIP-relative add whose condition holds when i & mask == mask: 8 threads of 2,000
// calls (3 stops each) and 64 threads of 600 (2 each, the slots of 64 threads in one page).
// Each thread is reported exactly at those calls, the program's counts and total are right,
// and no false hit was stepped over (which would stop every thread).
func TestOutOfLineThreads(t *testing.T) {
	bin := buildOOL(t, false)
	for _, c := range []struct {
		threads, per int
		mask         uint64
		want         []uint64
	}{
		{8, 2000, 511, []uint64{511, 1023, 1535}},
		{64, 600, 255, []uint64{255, 511}},
	} {
		t.Run(strconv.Itoa(c.threads), func(t *testing.T) {
			h := newHarness(t, "")
			out := h.spawn(1, bin, "threads", strconv.Itoa(c.threads), strconv.Itoa(c.per))
			tt, _ := startStopped(t, h, 1)
			a := testenv.NMSymbol(t, bin, "ool_bump")
			tt.setBreak(0, a)
			var b bpcode.Builder
			b.Reg(4) // rsi: i
			b.Const(c.mask)
			b.Emit(bpcode.OpAnd)
			b.Const(c.mask)
			b.Emit(bpcode.OpEq)
			p, err := b.Program(false)
			if err != nil {
				t.Fatal(err)
			}
			tt.mustUpdate(0, &cdti.SetTrapCondition{Address: a, Site: (&bpcode.Site{Cond: p}).Encode()})
			stops := map[uint32][]uint64{}
			tt.cont(0)
			for {
				n := tt.notify()
				if n.Kind == cdti.NotifyTypeTermination {
					if n.Exit != 0 {
						t.Fatalf("exit status %v", n.Exit)
					}
					break
				}
				s := n.Signal
				if s.Reason != cdti.SignalBreakpoint || s.InstAddress != a {
					t.Fatalf("notification %+v, want the breakpoint at %#x", s, a)
				}
				stops[s.ThreadID] = append(stops[s.ThreadID], binary64(tt.regs(0, s.ThreadID), 104)) // rsi
				tt.cont(0)
			}
			if len(stops) != c.threads {
				t.Errorf("stops in %d threads, want %d", len(stops), c.threads)
			}
			for tid, is := range stops {
				if fmt.Sprint(is) != fmt.Sprint(c.want) {
					t.Errorf("thread %d stopped at i = %v, want %v", tid, is, c.want)
				}
			}
			for i := range c.threads {
				out.waitFor(t, "thread "+strconv.Itoa(i)+": "+strconv.Itoa(c.per)+"\n")
			}
			out.waitFor(t, "total "+strconv.Itoa(c.threads*c.per)+"\n")
			// A thread interrupted in its slot before the instruction ran (when another
			// thread's hit stopped the process) passes the breakpoint again: at least one
			// pass per call.
			pc := passesOf(t, h)
			if pc.stepped != 0 || pc.emulated != 0 || pc.branched != 0 || pc.outOfLine < uint64(c.threads*c.per) {
				t.Errorf("passes %+v, want all %d out of line and none stepped", pc, c.threads*c.per)
			}
		})
	}
}

// TestOutOfLineSignals runs every kind under a breakpoint whose condition never holds while an
// interval timer (every 2 ms, until its 500th signal) interrupts the process with SIGALRM,
// which the tool does not watch: signals stop threads in their slots (put back on the
// breakpoint or after the instruction) and are delivered, and the handler passes breakpoints
// of its own (k_branch, k_sse) with the interrupted context still to finish. The results are
// those of an untraced run.
func TestOutOfLineSignals(t *testing.T) {
	bin := buildOOL(t, false)
	const n = 3000
	want := nativeOutput(t, bin, "signals", strconv.Itoa(n))
	h := newHarness(t, "")
	out := h.spawn(1, bin, "signals", strconv.Itoa(n))
	tt, _ := startStopped(t, h, 1)
	site := neverSite(t)
	for _, l := range oolKinds {
		a := testenv.NMSymbol(t, bin, l)
		tt.setBreak(0, a)
		tt.mustUpdate(0, &cdti.SetTrapCondition{Address: a, Site: site})
	}
	tt.cont(0)
	if st := waitPassing(t, h, tt); st != 0 {
		t.Fatalf("exit status %v (output %q)", st, out.String())
	}
	out.waitFor(t, "ticks ")
	if got := withoutTicks(out.String()); got != withoutTicks(want) {
		t.Errorf("output %q, want %q (ticks aside)", out.String(), want)
	}
	if strings.Contains(out.String(), "ticks 0\n") {
		t.Errorf("no SIGALRM was handled: the test tests nothing (output %q)", out.String())
	}
	pc := passesOf(t, h)
	if pc.outOfLine < 8*n {
		t.Errorf("passes %+v, want at least %d out of line", pc, 8*n)
	}
	t.Logf("passes %+v, output %q", pc, out.String())
}

// TestOutOfLineForkExec: the process forks a child that execs (the child inherits the
// scratch page, never a thread in it, and runs its new image untouched), then execs itself;
// after the exec the tool plants the breakpoints again, and the agent maps a new scratch page
// instead of writing where the old image's was.
func TestOutOfLineForkExec(t *testing.T) {
	bin := buildOOL(t, false)
	const n = 300
	for _, mode := range []string{"fork", "exec"} {
		t.Run(mode, func(t *testing.T) {
			want := nativeOutput(t, bin, mode, strconv.Itoa(n))
			h := newHarness(t, "")
			out := h.spawn(1, bin, mode, strconv.Itoa(n))
			tt, _ := startStopped(t, h, 1, int(syscall.SIGTRAP))
			site := neverSite(t)
			plant := func() {
				for _, l := range oolKinds {
					a := testenv.NMSymbol(t, bin, l)
					tt.setBreak(0, a)
					tt.mustUpdate(0, &cdti.SetTrapCondition{Address: a, Site: site})
				}
			}
			plant()
			var first uint64
			tt.cont(0)
			images := 1
			for {
				nt := tt.notify()
				if nt.Kind == cdti.NotifyTypeTermination {
					if nt.Exit != 0 {
						t.Fatalf("exit status %v (output %q)", nt.Exit, out.String())
					}
					break
				}
				if nt.Signal.Signal != uint32(syscall.SIGTRAP) || nt.Signal.Reason != cdti.SignalGeneric {
					t.Fatalf("notification %+v", nt.Signal)
				}
				// The exec: the new image has neither the breakpoints nor the scratch page.
				h.a.proc(0).do(func() {
					if len(h.a.proc(0).scratch) != 0 {
						t.Errorf("scratch pages kept across the exec")
					}
				})
				first = passesOf(t, h).outOfLine
				images++
				plant()
				tt.cont(0)
			}
			// The child's lines and the parent's come in either order.
			if got := sortedLines(out.String()); got != sortedLines(want) {
				t.Errorf("output %q, want the lines of %q", out.String(), want)
			}
			pc := passesOf(t, h)
			if wantImages := map[string]int{"fork": 1, "exec": 2}[mode]; images != wantImages {
				t.Errorf("%d images, want %d", images, wantImages)
			}
			// Both modes run the kinds twice in the traced process. In "fork", the child's
			// SIGCHLD may reach the parent on its way past a breakpoint: that one hit is
			// stepped over with the signal delivered.
			if pc.stepped < 2*n || pc.stepped > 2*n+1 {
				t.Errorf("%d hits stepped over, want %d (the syscalls'); passes %+v", pc.stepped, 2*n, pc)
			}
			if mode == "exec" && pc.outOfLine-first != 8*n {
				t.Errorf("%d hits out of line after the exec; passes %+v", pc.outOfLine-first, pc)
			}
		})
	}
}

// TestOutOfLineDetach: a tool detaches while the process passes a breakpoint on a RIP-relative
// store thousands of times a second, out of line: the process is left untraced, its text as in
// the file, and it finishes with the output of an untraced run.
func TestOutOfLineDetach(t *testing.T) {
	bin := buildOOL(t, false)
	const n = 20000
	want := nativeOutput(t, bin, "kinds", strconv.Itoa(n))
	h := newHarness(t, "")
	out := newOutFile(t)
	cmd := exec.Command(bin, "wait", strconv.Itoa(n))
	cmd.Stdout, cmd.Stderr = out.f, out.f
	start, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	pid := cmd.Process.Pid
	if err := h.a.AttachRanks(map[uint32]int{0: pid}); err != nil {
		t.Fatal(err)
	}
	tt := h.dial(1)
	tt.attach(0, 99, "dbg")
	tt.control(0, int(syscall.SIGSTOP), cdti.DynamicNotifyDLoader)
	tt.signalNotify()
	a := testenv.NMSymbol(t, bin, "ool_store")
	tt.setBreak(0, a)
	tt.mustUpdate(0, &cdti.SetTrapCondition{Address: a, Site: neverSite(t)})
	tt.cont(0)
	start.Write([]byte{1})
	deadline := time.Now().Add(30 * time.Second)
	for passesOf(t, h).outOfLine < 2000 {
		if time.Now().After(deadline) {
			t.Fatalf("no 2000 passes in 30 s: %+v", passesOf(t, h))
		}
		time.Sleep(5 * time.Millisecond)
	}
	tt.mustUpdate(0, &cdti.ReleaseControl{})
	if _, err := tt.c.Detach(ctx(), 0, cdti.RankInHeader); err != nil {
		t.Fatalf("Detach: %v", err)
	}
	deadline = time.Now().Add(10 * time.Second)
	for procStatus(t, pid, "TracerPid") != "0" {
		if time.Now().After(deadline) {
			t.Fatalf("pid %d still traced", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The program waits for a second byte before it ends: its memory is there to read.
	fileCode, memCode := textAt(t, bin, a, 16), procMem(t, pid, a, 16)
	if !bytes.Equal(fileCode, memCode) {
		t.Errorf("code at ool_store after the detach % x, file % x", memCode, fileCode)
	}
	start.Write([]byte{2})
	if err := cmd.Wait(); err != nil {
		t.Fatalf("after the detach: %v (output %q)", err, out.String())
	}
	if got, _ := os.ReadFile(out.path); string(got) != want {
		t.Errorf("output %q, want %q", got, want)
	}
}

// textAt returns n bytes of bin's file image at address addr.
func textAt(t testing.TB, bin string, addr uint64, n int) []byte {
	t.Helper()
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && addr >= p.Vaddr && addr+uint64(n) <= p.Vaddr+p.Filesz {
			b := make([]byte, n)
			if _, err := p.ReadAt(b, int64(addr-p.Vaddr)); err != nil {
				t.Fatal(err)
			}
			return b
		}
	}
	t.Fatalf("%#x is not in %s's file image", addr, bin)
	return nil
}

// sortedLines returns the lines of s, sorted.
func sortedLines(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// TestScratchHint: the page goes just below the mapping nearest to the code that has room
// under it, never where the heap grows (4 GiB above it) nor into the stack's guard gap.
func TestScratchHint(t *testing.T) {
	maps := []mapping{
		{start: 0x400000, end: 0x401000, path: "/bin/prog"},
		{start: 0x401000, end: 0x402000, path: "/bin/prog"},
		{start: 0x1000000, end: 0x1021000, path: "[heap]"},
		{start: 0x1030000, end: 0x1040000, path: "/lib/near-heap.so"},
		{start: 0x7f0000000000, end: 0x7f0000020000, path: "/lib/libc.so.6"},
		{start: 0x7ffc00000000, end: 0x7ffc00021000, path: "[stack]"},
	}
	for _, c := range []struct {
		near, want uint64
	}{
		{0x401234, 0x3ff000},             // below the executable
		{0x1000100, 0xfff000},            // below the heap, not above it
		{0x1030100, 0xfff000},            // not within the heap's 4 GiB
		{0x7f0000001000, 0x7efffffff000}, // below libc, far above the heap
		{0x7ffc00001000, 0x7efffffff000}, // not below the stack
		{0x7fff00000000, 0x7efffffff000}, // past everything: the nearest allowed
	} {
		if got := scratchHint(append([]mapping(nil), maps...), c.near); got != c.want {
			t.Errorf("near %#x: %#x, want %#x", c.near, got, c.want)
		}
	}
	full := []mapping{{start: 0x10000, end: 0x20000}, {start: 0x20000, end: 0x30000, path: "[stack]"}}
	if got := scratchHint(full, 0x15000); got != 0 {
		t.Errorf("no room: %#x, want 0", got)
	}
}

// withoutTicks drops the line of ool's "signals" that counts the timer's signals.
func withoutTicks(s string) string {
	var keep []string
	for _, l := range strings.Split(s, "\n") {
		if !strings.HasPrefix(l, "ticks ") {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}
