package threaddb_test

import (
	"bufio"
	"bytes"
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hpcdap/hpcdap/internal/testenv"
	"github.com/hpcdap/hpcdap/ppc64"
	tgt "github.com/hpcdap/hpcdap/target"
	"github.com/hpcdap/hpcdap/target/rsp"
	"github.com/hpcdap/hpcdap/threaddb"
)

// rspMemory reads target memory through the GDB remote protocol (m packets) and counts the
// ReadAt calls threaddb makes.
type rspMemory struct {
	p     *rsp.Process
	reads atomic.Int64
}

func (m *rspMemory) ReadAt(b []byte, addr uint64) (int, error) {
	m.reads.Add(1)
	return m.p.ReadMemory(addr, b)
}

// rspThreads lists the stub's threads (qfThreadInfo) and reads r13 from each thread's pt_regs.
type rspThreads struct {
	p     *rsp.Process
	order binary.ByteOrder
}

func (r *rspThreads) LWPs() ([]int, error) { return r.p.Threads() }

func (r *rspThreads) ThreadPointer(lwp int) (uint64, error) {
	regs, err := r.p.Registers(lwp, tgt.RegsGeneral)
	if err != nil {
		return 0, err
	}
	if len(regs) < 14*8 {
		return 0, fmt.Errorf("general registers of %d: %d bytes", lwp, len(regs))
	}
	return r.order.Uint64(regs[13*8:]), nil
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// selfRec is one line the program wrote about one of its threads.
type selfRec struct {
	round, idx                 int
	tid                        int
	self, tp, tlsAddr, arrAddr uint64
	tls, arr                   int64
	start                      uint64
}

// readSelfRecs reads rspthreads' record file.
func readSelfRecs(t *testing.T, path string) []selfRec {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var recs []selfRec
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		f := strings.Fields(line)
		if len(f) != 11 || f[0] != "thread" {
			t.Fatalf("record file %s: bad line %q", path, line)
		}
		n := make([]uint64, 10)
		for i, s := range f[1:] {
			v, err := strconv.ParseInt(s, 0, 64)
			if err != nil {
				u, err2 := strconv.ParseUint(s, 0, 64)
				if err2 != nil {
					t.Fatalf("record file %s: %q: %v", path, line, err)
				}
				v = int64(u)
			}
			n[i] = uint64(v)
		}
		recs = append(recs, selfRec{round: int(n[0]), idx: int(int64(n[1])), tid: int(n[2]), self: n[3], tp: n[4],
			tlsAddr: n[5], tls: int64(n[6]), arrAddr: n[7], arr: int64(n[8]), start: n[9]})
	}
	return recs
}

// powerTarget is one of the two Power byte orders.
type powerTarget struct {
	name, gcc, gccPkg, qemu, sysroot string
	order                            binary.ByteOrder
}

var powerTargets = []powerTarget{
	{"ppc64", "powerpc64-linux-gnu-gcc", "gcc-powerpc64-linux-gnu", "qemu-ppc64", "/usr/powerpc64-linux-gnu", binary.BigEndian},
	{"ppc64le", "powerpc64le-linux-gnu-gcc", "gcc-powerpc64le-linux-gnu", "qemu-ppc64le", "/usr/powerpc64le-linux-gnu", binary.LittleEndian},
}

// buildRSPThreads cross-compiles testdata/rspthreads.c, static or dynamic. The dynamic build
// is not position-independent, so breakpoints can be planted at link-time addresses before the
// program runs; its libc.so.6 and ld.so are loaded at run-time addresses all the same.
func buildRSPThreads(t *testing.T, pt powerTarget, static bool) string {
	t.Helper()
	testenv.NeedTool(t, pt.gcc, pt.gccPkg)
	src, _ := filepath.Abs("testdata/rspthreads.c")
	exe := filepath.Join(t.TempDir(), "rspthreads")
	args := []string{"-g", "-O0", "-pthread", "-o", exe, src}
	if static {
		args = append(args, "-static")
	} else {
		args = append(args, "-no-pie")
	}
	run(t, "", pt.gcc, args...)
	return exe
}

// readGuestModules reads the module file of rspthreads: each module's load bias and guest
// path, which QEMU opens under the sysroot when the file exists there. Modules without a file
// (QEMU's vDSO) are left out; the main program (no name) is exe.
func readGuestModules(t *testing.T, path, exe, sysroot string) []threaddb.Module {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var mods []threaddb.Module
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || f[0] != "module" {
			t.Fatalf("module file %s: bad line %q", path, line)
		}
		bias, err := strconv.ParseUint(f[1], 0, 64)
		if err != nil {
			t.Fatalf("module file %s: %q: %v", path, line, err)
		}
		file := exe
		if len(f) > 2 {
			file = ""
			for _, cand := range []string{filepath.Join(sysroot, f[2]), f[2]} {
				if fileExists(cand) {
					file = cand
					break
				}
			}
			if file == "" {
				continue
			}
		}
		mods = append(mods, threaddb.Module{Path: file, Bias: bias})
	}
	return mods
}

// TestPPC64LiveRSP runs the 8-thread program (static, and dynamic with the cross sysroot's
// glibc) under QEMU user mode, stops it through the GDB stub (package target/rsp) with every
// thread alive, and reads the thread lists through the stub's memory packets. Then three threads change and the same Process must follow them at
// the next stop: one exits and is joined (it leaves the list), one exits and is not joined (its
// LWP is gone, its descriptor stays with LWP 0 until the join), one is created (on the
// joined thread's stack, which glibc's stack cache usually hands out again, and then with its
// pthread_t).
//
// Oracle: gdb-multiarch cannot load a Power libthread_db on this x86_64 host, so it shows no
// pthread_t and cannot print __thread variables (it asks the stub for qGetTLSAddr, which QEMU
// lacks). The pthread_t ↔ LWP pairs and TLS addresses and values are therefore checked against
// what each thread recorded about itself (gettid, pthread_self, r13, &tlsvar and its value).
// TestPPC64SelfRecordsAgainstGDB checks those records against gdb-multiarch in turn.
func TestPPC64LiveRSP(t *testing.T) {
	for _, pt := range powerTargets {
		for _, static := range []bool{true, false} {
			name := pt.name + map[bool]string{true: "/static", false: "/dynamic"}[static]
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				ppc64LiveRSP(t, pt, static)
			})
		}
	}
}

// ppc64LiveRSP is one case of TestPPC64LiveRSP.
func ppc64LiveRSP(t *testing.T, pt powerTarget, static bool) {
	exe := buildRSPThreads(t, pt, static)
	emu := testenv.QEMUUser(t, pt.qemu)
	recFile := filepath.Join(t.TempDir(), "records")
	modFile := filepath.Join(t.TempDir(), "modules")
	args := []string{exe, recFile}
	if !static {
		args = []string{"-L", pt.sysroot, exe, recFile, modFile}
	}
	var out bytes.Buffer
	p, err := rsp.LaunchWith(emu, args, []string{"PATH=/usr/bin:/bin"},
		rsp.Options{Stdout: &out, Stderr: &out})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	ths, err := p.Threads()
	if err != nil || len(ths) != 1 {
		t.Fatalf("threads at start: %v, %v", ths, err)
	}
	leader := ths[0]
	f, err := os.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	res, err := ppc64.NewResolver(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	// A breakpoint at each checkpoint; leaving one means putting its word back.
	var bps [2]uint64
	var origs [2][]byte
	for i, fn := range []string{"checkpoint1", "checkpoint2"} {
		e, err := res.Lookup(fn)
		if err != nil {
			t.Fatal(err)
		}
		bps[i], origs[i] = e.Breakpoint(), make([]byte, 4)
		if _, err := p.ReadMemory(bps[i], origs[i]); err != nil {
			t.Fatal(err)
		}
		if _, err := p.WriteMemory(bps[i], p.Info().Arch.BreakInstr); err != nil {
			t.Fatal(err)
		}
	}
	leave := func(i int) {
		if _, err := p.WriteMemory(bps[i], origs[i]); err != nil {
			t.Fatal(err)
		}
		resumeAll(t, p)
	}

	mem := &rspMemory{p: p}
	thr := &rspThreads{p: p, order: pt.order}
	var tp *threaddb.Process
	exeMod := threaddb.Module{Path: exe}
	if static {
		// Before the program runs, the thread library is not initialised: LWPs only.
		if tp, err = threaddb.Open(leader, []threaddb.Module{exeMod}, mem, thr); err != nil {
			t.Fatal(err)
		}
		if l, err := tp.List(); err != nil || l.Status != threaddb.StatusNotInitialized ||
			len(l.Threads) != 1 || l.Threads[0] != (threaddb.Thread{LWP: leader}) {
			t.Errorf("List at the first instruction = %+v, %v; want the leader by LWP only", l, err)
		}
	}

	resumeAll(t, p)
	waitBreakpoint(t, p, bps[0])
	if !static {
		// The modules are known once the dynamic linker has loaded them.
		mods := readGuestModules(t, modFile, exe, pt.sysroot)
		for _, m := range mods {
			if m.Path == exe {
				exeMod = m
			}
		}
		if tp, err = threaddb.Open(leader, mods, mem, thr); err != nil {
			t.Fatal(err)
		}
	}
	if lib := tp.Library(); lib == nil || lib.Static != static || lib.Machine != elf.EM_PPC64 || lib.Order != pt.order {
		t.Fatalf("Library = %+v", tp.Library())
	}
	recs := readSelfRecs(t, recFile)
	r0 := mem.reads.Load()
	list := checkRound(t, tp, mem, pt.order, exeMod, recs, 1)
	t.Logf("round 1: %d threads; List, the Map calls and TLS lookups made %d memory reads through the stub", len(list.Threads), mem.reads.Load()-r0)

	// Worker 3's pthread_t (to be recycled) and worker 5's (to exit unjoined).
	var gone3, gone5 selfRec
	for _, r := range recs {
		switch r.idx {
		case 3:
			gone3 = r
		case 5:
			gone5 = r
		}
	}
	leave(0)
	waitBreakpoint(t, p, bps[1])
	recs = readSelfRecs(t, recFile)
	list = checkRound(t, tp, mem, pt.order, exeMod, recs, 2)
	zombie := false
	for _, th := range list.Threads {
		if th.LWP != 0 && (th.LWP == gone3.tid || th.LWP == gone5.tid) {
			t.Errorf("round 2: exited LWP %d still listed: %+v", th.LWP, th)
		}
		if th.Pthread == gone5.self {
			zombie = true
			if th.LWP != 0 || th.State == threaddb.StateActive || !th.Cancel.Exiting() {
				t.Errorf("round 2: exited, unjoined worker 5: %+v (%v); want LWP 0, exiting", th, th.State)
			}
		}
	}
	if !zombie {
		t.Errorf("round 2: the exited, unjoined worker 5 (%#x) is not listed", gone5.self)
	}
	for _, r := range recs {
		if r.idx == 8 {
			t.Logf("round 2: worker 8 has pthread_t %#x; joined worker 3 had %#x", r.self, gone3.self)
		}
	}
	if m, err := tp.MapPthread(gone5.self); err != nil || m.LWP != 0 {
		t.Errorf("MapPthread(exited, unjoined %#x) = %+v, %v; want LWP 0", gone5.self, m, err)
	}
	if _, err := tp.MapLWP(gone3.tid); err == nil {
		t.Errorf("MapLWP(%d) of the exited worker 3 succeeded", gone3.tid)
	}

	// Let the program finish: it must exit normally.
	leave(1)
	for {
		ev := nextEvent(t, p)
		if ev.Kind == tgt.EventExit {
			if ev.Status != 0 {
				p.Wait() // the emulator's output is complete
				t.Errorf("program exit status %#x\n%s", ev.Status, out.String())
			}
			break
		}
		handleEvent(t, p, ev)
	}
}

// checkRound compares one stop's List, MapLWP, MapPthread, MapThreadPointer and TLSAddress with
// the records the threads of this round wrote, and returns the List.
func checkRound(t *testing.T, tp *threaddb.Process, mem *rspMemory, order binary.ByteOrder, exeMod threaddb.Module,
	recs []selfRec, round int) threaddb.ThreadList {
	t.Helper()
	// A thread's latest record describes it now (worker records are written once, main's
	// once per round).
	cur := map[int]selfRec{}
	for _, r := range recs {
		if r.round <= round {
			cur[r.idx] = r
		}
	}
	if round == 2 {
		delete(cur, 3)
		delete(cur, 5)
	}
	list, err := tp.List()
	if err != nil {
		t.Fatalf("round %d: List: %v", round, err)
	}
	if list.Status != threaddb.StatusReady {
		t.Fatalf("round %d: List status %v", round, list.Status)
	}
	live := map[int]threaddb.Thread{}
	for _, th := range list.Threads {
		if th.LWP != 0 {
			live[th.LWP] = th
		}
	}
	if len(live) != len(cur) {
		t.Errorf("round %d: List has %d live threads, the program recorded %d: %+v", round, len(live), len(cur), list.Threads)
	}
	if nt, err := tp.NThreads(); err != nil || nt != len(cur) {
		t.Errorf("round %d: NThreads = %d, %v; want %d", round, nt, err, len(cur))
	}
	tlsOff := testenv.NMSymbol(t, exeMod.Path, "tlsvar")
	arrOff := testenv.NMSymbol(t, exeMod.Path, "tlsarr") + 8
	thr := &rspThreads{p: mem.p, order: order}
	for _, r := range cur {
		th, ok := live[r.tid]
		if !ok {
			t.Errorf("round %d: worker %d (LWP %d) missing from List", round, r.idx, r.tid)
			continue
		}
		if th.Pthread != r.self {
			t.Errorf("round %d: LWP %d: pthread_t %#x, pthread_self() said %#x", round, r.tid, th.Pthread, r.self)
		}
		if th.StartRoutine != r.start {
			t.Errorf("round %d: LWP %d: start routine %#x, the program passed %#x", round, r.tid, th.StartRoutine, r.start)
		}
		if th.State != threaddb.StateActive {
			t.Errorf("round %d: LWP %d: state %v", round, r.tid, th.State)
		}
		// The stub's r13 must be what the thread read from itself before it can serve as input.
		r13, err := thr.ThreadPointer(r.tid)
		if err != nil || r13 != r.tp {
			t.Fatalf("round %d: LWP %d: r13 through the stub %#x, %v; the thread read %#x", round, r.tid, r13, err, r.tp)
		}
		if m, err := tp.MapThreadPointer(r13); err != nil || !sameThread(m, th) {
			t.Errorf("round %d: MapThreadPointer(%#x) = %+v, %v; List has %+v", round, r13, m, err, th)
		}
		if m, err := tp.MapLWP(r.tid); err != nil || !sameThread(m, th) {
			t.Errorf("round %d: MapLWP(%d) = %+v, %v; List has %+v", round, r.tid, m, err, th)
		}
		if m, err := tp.MapPthread(r.self); err != nil || m.LWP != r.tid {
			t.Errorf("round %d: MapPthread(%#x) = LWP %d, %v; want %d", round, r.self, m.LWP, err, r.tid)
		}
		for _, v := range []struct {
			name      string
			off, want uint64
			val       int64
			size      int
		}{{"tlsvar", tlsOff, r.tlsAddr, r.tls, 4}, {"tlsarr[1]", arrOff, r.arrAddr, r.arr, 8}} {
			addr, err := tp.TLSAddress(th, exeMod, v.off)
			if err != nil || addr != v.want {
				t.Errorf("round %d: LWP %d: &%s = %#x, %v; the thread said %#x", round, r.tid, v.name, addr, err, v.want)
				continue
			}
			b := make([]byte, v.size)
			if _, err := mem.ReadAt(b, addr); err != nil {
				t.Fatal(err)
			}
			got := int64(int32(order.Uint32(b)))
			if v.size == 8 {
				got = int64(order.Uint64(b))
			}
			if got != v.val {
				t.Errorf("round %d: LWP %d: %s = %d through the stub, the thread said %d", round, r.tid, v.name, got, v.val)
			}
		}
	}
	return list
}

// sameThread compares two reads of one thread, except its cancelhandling word: QEMU user mode
// stops only the thread that reports a stop, so a worker that has just recorded itself may be
// entering sem_wait, where glibc switches its cancellation type to asynchronous, between reads.
func sameThread(a, b threaddb.Thread) bool {
	a.Cancel, b.Cancel = 0, 0
	return a == b
}

// nextEvent waits for the next event of the stub.
func nextEvent(t *testing.T, p *rsp.Process) tgt.Event {
	t.Helper()
	select {
	case ev, ok := <-p.Events():
		if !ok {
			t.Fatalf("event stream closed: %v", p.Err())
		}
		return ev
	case <-time.After(60 * time.Second):
		t.Fatal("no event from the stub within 60 s")
	}
	return tgt.Event{}
}

// resumeAll resumes every thread the stub reported stopped; the stub runs once all are.
func resumeAll(t *testing.T, p *rsp.Process) {
	t.Helper()
	ths, err := p.Threads()
	if err != nil {
		t.Fatal(err)
	}
	for _, tid := range ths {
		if err := p.Resume(tid, 0); err != nil && !errors.Is(err, tgt.ErrRunning) {
			t.Fatalf("resume %d: %v", tid, err)
		}
	}
}

// handleEvent lets a thread that was reported stopped by a thread event run on.
func handleEvent(t *testing.T, p *rsp.Process, ev tgt.Event) {
	t.Helper()
	switch ev.Kind {
	case tgt.EventNewThread, tgt.EventStopped:
		if err := p.Resume(ev.Tid, 0); err != nil && !errors.Is(err, tgt.ErrRunning) {
			t.Fatalf("resume new thread %d: %v", ev.Tid, err)
		}
	case tgt.EventThreadExit:
	default:
		t.Fatalf("unexpected event %+v", ev)
	}
}

// waitBreakpoint waits until a thread stops at the breakpoint address.
func waitBreakpoint(t *testing.T, p *rsp.Process, bp uint64) {
	t.Helper()
	for {
		ev := nextEvent(t, p)
		if ev.Kind == tgt.EventSignal && ev.Trap == tgt.TrapBreakpoint && ev.PC == bp {
			return
		}
		handleEvent(t, p, ev)
	}
}

// gdbRecordsScript stops at checkpoint and prints what gdb-multiarch sees without
// libthread_db: each thread's LWP and r13 (GDBTHREAD), and the memory at every address the
// threads recorded (GDBMEM).
const gdbRecordsScript = `
import gdb
gdb.execute('break checkpoint1')
gdb.execute('continue')
inf = gdb.selected_inferior()
for th in inf.threads():
    th.switch()
    print('GDBTHREAD %d %#x' % (th.ptid[1], int(gdb.parse_and_eval('$r13')) & 0xffffffffffffffff))
for line in open(RECORDS):
    f = line.split()
    for addr, size in ((int(f[6], 16), 4), (int(f[8], 16), 8)):
        print('GDBMEM %#x %s' % (addr, bytes(inf.read_memory(addr, size)).hex()))
`

// TestPPC64SelfRecordsAgainstGDB checks the oracle of TestPPC64LiveRSP: run under QEMU with
// gdb-multiarch attached to the stub, the program's self-records must agree with what gdb can
// show without libthread_db: the LWPs (qfThreadInfo), each thread's r13, and the memory at the
// recorded TLS addresses.
func TestPPC64SelfRecordsAgainstGDB(t *testing.T) {
	for _, pt := range powerTargets {
		t.Run(pt.name, func(t *testing.T) {
			t.Parallel()
			gdb := testenv.NeedTool(t, "gdb-multiarch", "gdb-multiarch")
			exe := buildRSPThreads(t, pt, true)
			emu := testenv.QEMUUser(t, pt.qemu)
			dir := t.TempDir()
			recFile := filepath.Join(dir, "records")
			script := filepath.Join(dir, "records.py")
			if err := os.WriteFile(script, []byte(strings.Replace(gdbRecordsScript, "RECORDS", strconv.Quote(recFile), 1)), 0o644); err != nil {
				t.Fatal(err)
			}
			q := exec.Command(emu, exe, recFile)
			q.Env = []string{"PATH=/usr/bin:/bin"}
			sock := testenv.StartQEMUStub(t, q)
			endian := map[bool]string{true: "big", false: "little"}[pt.order == binary.BigEndian]
			out, err := exec.Command(gdb, "-nx", "-batch", "-ex", "set architecture powerpc:common64",
				"-ex", "set endian "+endian, "-ex", "set confirm off", "-ex", "file "+exe,
				"-ex", "target remote "+sock, "-x", script, "-ex", "kill").CombinedOutput()
			if err != nil {
				t.Fatalf("gdb-multiarch: %v\n%s", err, out)
			}
			gdbR13 := map[int]uint64{}
			gdbMem := map[uint64][]byte{}
			sc := bufio.NewScanner(bytes.NewReader(out))
			for sc.Scan() {
				f := strings.Fields(sc.Text())
				if len(f) != 3 {
					continue
				}
				switch f[0] {
				case "GDBTHREAD":
					lwp, _ := strconv.Atoi(f[1])
					v, _ := strconv.ParseUint(f[2], 0, 64)
					gdbR13[lwp] = v
				case "GDBMEM":
					a, _ := strconv.ParseUint(f[1], 0, 64)
					b, _ := hex.DecodeString(f[2])
					gdbMem[a] = b
				}
			}
			recs := readSelfRecs(t, recFile)
			if len(gdbR13) != len(recs) || len(recs) != 9 {
				t.Fatalf("gdb lists %d threads, the program recorded %d (want 9)\n%s", len(gdbR13), len(recs), out)
			}
			for _, r := range recs {
				r13, ok := gdbR13[r.tid]
				if !ok {
					t.Errorf("worker %d recorded LWP %d, which gdb does not list", r.idx, r.tid)
					continue
				}
				if r13 != r.tp {
					t.Errorf("LWP %d: recorded r13 %#x, gdb $r13 %#x", r.tid, r.tp, r13)
				}
				if b := gdbMem[r.tlsAddr]; len(b) != 4 || int64(int32(pt.order.Uint32(b))) != r.tls {
					t.Errorf("LWP %d: recorded tlsvar %d at %#x, gdb reads %x", r.tid, r.tls, r.tlsAddr, b)
				}
				if b := gdbMem[r.arrAddr]; len(b) != 8 || int64(pt.order.Uint64(b)) != r.arr {
					t.Errorf("LWP %d: recorded tlsarr[1] %d at %#x, gdb reads %x", r.tid, r.arr, r.arrAddr, b)
				}
			}
		})
	}
}
