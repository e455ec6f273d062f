//go:build linux && amd64

package threaddb_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hpcdap/hpcdap/internal/testenv"
	"github.com/hpcdap/hpcdap/threaddb"
)

// swapThreads lets one threaddb.Process outlive the ptrace sessions between stops: the test
// detaches so that gdb can attach, then seizes the process again.
type swapThreads struct {
	mu  sync.Mutex
	cur threaddb.Threads
}

func (s *swapThreads) set(t threaddb.Threads) { s.mu.Lock(); s.cur = t; s.mu.Unlock() }
func (s *swapThreads) get() threaddb.Threads {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur
}
func (s *swapThreads) LWPs() ([]int, error) { return s.get().LWPs() }
func (s *swapThreads) ThreadPointer(lwp int) (uint64, error) {
	return s.get().ThreadPointer(lwp)
}

func TestLiveDynamic(t *testing.T) { liveCheck(t, buildPrograms(t).dynamic, true) }
func TestLiveStatic(t *testing.T)  { liveCheck(t, buildPrograms(t).static, false) }

// liveCheck compares the package with gdb (which uses glibc's libthread_db) on a process with 8
// workers, then again after one worker has exited and another has been created, using the same
// Process, so nothing stale may survive between stops.
func liveCheck(t *testing.T, path string, withLib bool) {
	tg := startTarget(t, path, 8)
	mem := openProcMem(t, tg.pid)
	thr := &swapThreads{}
	mods := procModules(t, tg.pid)
	p, err := threaddb.Open(tg.pid, mods, mem, thr)
	if err != nil {
		t.Fatal(err)
	}
	lib := p.Library()
	if lib == nil {
		t.Fatalf("no thread library among %v", mods)
	}
	if lib.Static == withLib {
		t.Errorf("Library.Static = %v for %s", lib.Static, filepath.Base(path))
	}
	t.Logf("thread library %s (glibc %s), %d modules", lib.Module.Path, lib.Version, len(mods))

	before := liveRound(t, tg, p, mem, thr, mods, path, withLib, 9, 0)

	// Worker 3 exits and is joined; a new worker is created; worker 5 exits but is not joined.
	// The same Process must see all three changes.
	var gone, zombieLWP int
	var zombie uint64
	for lwp, th := range before {
		switch th.tls {
		case 1003:
			gone = lwp
		case 1005:
			zombieLWP, zombie = lwp, th.pthread
		}
	}
	tg.command(t, "exit 3", "exited 3")
	tg.command(t, "spawn", "spawned 8")
	tg.command(t, "finish 5", "finished 5")
	waitGone(t, tg.pid, zombieLWP)
	after := liveRound(t, tg, p, mem, thr, mods, path, withLib, 8, zombie)
	if _, ok := after[gone]; ok {
		t.Errorf("LWP %d of the exited worker is still listed", gone)
	}
	if _, ok := after[zombieLWP]; ok {
		t.Errorf("LWP %d of the finished worker is still listed", zombieLWP)
	}
	found := false
	for _, th := range after {
		if th.tls == 1008 {
			found = true
		}
	}
	if !found {
		t.Errorf("the spawned worker (tlsvar 1008) is not listed")
	}
}

// liveThread is what one round learned of a thread.
type liveThread struct {
	pthread uint64
	tls     int64
}

// waitGone waits until an LWP has left the kernel's thread list.
func waitGone(t *testing.T, pid, lwp int) {
	t.Helper()
	for i := 0; i < 1000; i++ {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d/task/%d", pid, lwp)); os.IsNotExist(err) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("LWP %d did not exit", lwp)
}

// liveRound checks one stop against gdb and returns the threads by LWP. zombie, if not 0, is the
// pthread_t of a thread that has exited but has not been joined: gdb no longer lists it, while
// its descriptor stays on glibc's list until the join.
func liveRound(t *testing.T, tg *target, p *threaddb.Process, mem *procMem, thr *swapThreads,
	mods []threaddb.Module, path string, withLib bool, wantThreads int, zombie uint64) map[int]liveThread {
	t.Helper()
	cmds := []string{
		"print/x $fs_base",
		"print tlsvar",
		"print &tlsvar",
		"print tlsarr[1]",
	}
	const (
		iFS = iota
		iTLS
		iTLSAddr
		iArr
		iLib
		iLibAddr
		iLazyAddr
		iIE
		iIEAddr
	)
	if withLib {
		cmds = append(cmds, "print libvar", "print &libvar", "print &lazyvar", "print ievar", "print &ievar")
	}
	oracle := runGDB(t, tg.pid, cmds...)
	if len(oracle) != wantThreads {
		t.Fatalf("gdb lists %d threads, the program has %d", len(oracle), wantThreads)
	}

	tr := seizeAll(t, tg.pid)
	thr.set(tr)
	defer tr.detach()

	list, err := p.List()
	if err != nil {
		t.Fatal(err)
	}
	if list.Status != threaddb.StatusReady {
		t.Fatalf("List status = %v, want ready", list.Status)
	}
	if want := len(oracle) + map[bool]int{true: 1}[zombie != 0]; len(list.Threads) != want {
		t.Errorf("List has %d threads, want %d (gdb lists %d)", len(list.Threads), want, len(oracle))
	}
	exe := moduleFor(t, mods, path)
	tlsOff := testenv.NMSymbol(t, path, "tlsvar")
	arrOff := testenv.NMSymbol(t, path, "tlsarr")
	even := exe.Bias + testenv.NMSymbol(t, path, "worker_even")
	odd := exe.Bias + testenv.NMSymbol(t, path, "worker_odd")
	if id, err := p.ModuleID(exe); err != nil || id != 1 {
		t.Errorf("ModuleID(executable) = %d, %v; want 1", id, err)
	}
	if n, err := p.NThreads(); err != nil || n != len(oracle) {
		t.Errorf("NThreads = %d, %v; gdb lists %d", n, err, len(oracle))
	}
	if zombie != 0 {
		found := false
		for _, th := range list.Threads {
			if th.Pthread != zombie {
				continue
			}
			found = true
			t.Logf("exited, unjoined thread: %+v (%v)", th, th.State)
			if th.LWP != 0 || th.State == threaddb.StateActive || !th.Cancel.Exiting() {
				t.Errorf("exited, unjoined thread %#x: %+v; want LWP 0, exiting", zombie, th)
			}
			if m, err := p.MapPthread(zombie); err != nil || m != th {
				t.Errorf("MapPthread(%#x) = %+v, %v; want %+v", zombie, m, err, th)
			}
		}
		if !found {
			t.Errorf("exited, unjoined thread %#x is not listed", zombie)
		}
	}

	var libMod, lazy, ie threaddb.Module
	var libOff, lazyOff, ieOff uint64
	if withLib {
		libMod, lazy, ie = moduleFor(t, mods, "libtls.so"), moduleFor(t, mods, "liblazy.so"), moduleFor(t, mods, "libie.so")
		libOff = testenv.NMSymbol(t, libMod.Path, "libvar")
		lazyOff = testenv.NMSymbol(t, lazy.Path, "lazyvar")
		ieOff = testenv.NMSymbol(t, ie.Path, "ievar")
	}

	order := binary.LittleEndian
	readInt := func(addr uint64, size int) int64 {
		b := make([]byte, size)
		if _, err := mem.ReadAt(b, addr); err != nil {
			t.Fatalf("read %#x: %v", addr, err)
		}
		if size == 4 {
			return int64(int32(order.Uint32(b)))
		}
		return int64(order.Uint64(b))
	}

	out := map[int]liveThread{}
	for _, th := range list.Threads {
		if zombie != 0 && th.Pthread == zombie {
			continue
		}
		g := oracle[th.LWP]
		if g == nil {
			t.Errorf("List has LWP %d, gdb does not", th.LWP)
			continue
		}
		if th.Pthread != g.pthread {
			t.Errorf("LWP %d: pthread_t %#x, gdb %#x", th.LWP, th.Pthread, g.pthread)
		}
		// The test's own FS base must agree with gdb's before it can serve as input.
		fs, err := tr.ThreadPointer(th.LWP)
		if err != nil {
			t.Fatal(err)
		}
		if want := parseGDBInt(t, g.values[iFS]); fs != want {
			t.Fatalf("LWP %d: ptrace FS base %#x, gdb $fs_base %#x", th.LWP, fs, want)
		}
		if m, err := p.MapThreadPointer(fs); err != nil || m != th {
			t.Errorf("MapThreadPointer(%#x) = %+v, %v; List has %+v", fs, m, err, th)
		}
		byLWP, err := p.MapLWP(th.LWP)
		if err != nil || byLWP != th {
			t.Errorf("MapLWP(%d) = %+v, %v; List has %+v", th.LWP, byLWP, err, th)
		}
		byPT, err := p.MapPthread(g.pthread)
		if err != nil || byPT.LWP != th.LWP {
			t.Errorf("MapPthread(%#x) = LWP %d, %v; gdb says LWP %d", g.pthread, byPT.LWP, err, th.LWP)
		}

		tlsVal := int64(parseGDBInt(t, g.values[iTLS]))
		addr, err := p.TLSAddress(th, exe, tlsOff)
		if err != nil {
			t.Errorf("LWP %d: TLSAddress(tlsvar): %v", th.LWP, err)
		} else {
			if want := parseGDBInt(t, g.values[iTLSAddr]); addr != want {
				t.Errorf("LWP %d: &tlsvar = %#x, gdb %#x", th.LWP, addr, want)
			}
			if v := readInt(addr, 4); v != tlsVal {
				t.Errorf("LWP %d: tlsvar = %d, gdb %d", th.LWP, v, tlsVal)
			}
		}
		if addr, err := p.TLSAddress(th, exe, arrOff+8); err != nil {
			t.Errorf("LWP %d: TLSAddress(tlsarr[1]): %v", th.LWP, err)
		} else if v, want := readInt(addr, 8), int64(parseGDBInt(t, g.values[iArr])); v != want {
			t.Errorf("LWP %d: tlsarr[1] = %d, gdb %d", th.LWP, v, want)
		}

		// The key's value is the one the program set (gdb would have to call
		// pthread_getspecific, and on processors whose extended register state it cannot
		// write back it makes no calls): worker I sets 0x1000 + I for even I, main 0x999.
		spec, err := p.Specific(th, tg.key)
		want := uint64(0)
		switch i := tlsVal - 1000; {
		case i < 0:
			want = 0x999
		case i%2 == 0:
			want = 0x1000 + uint64(i)
		}
		if err != nil || spec != want {
			t.Errorf("LWP %d (tlsvar %d): Specific(%d) = %#x, %v; the program set %#x", th.LWP, tlsVal, tg.key, spec, err, want)
		}
		if _, err := p.Specific(th, tg.dead); !errors.Is(err, threaddb.ErrBadKey) {
			t.Errorf("LWP %d: Specific(deleted key %d) error = %v, want ErrBadKey", th.LWP, tg.dead, err)
		}

		// The program derives the rest from the worker index, which tlsvar encodes.
		idx := tlsVal - 1000
		var wantStart uint64
		switch {
		case tlsVal == 999:
			idx = -1
		case idx%2 == 0:
			wantStart = even
		default:
			wantStart = odd
		}
		if th.StartRoutine != wantStart {
			t.Errorf("LWP %d (worker %d): start routine %#x, want %#x", th.LWP, idx, th.StartRoutine, wantStart)
		}
		// Every thread here is blocked in a cancellation point (sem_wait, read), which glibc
		// makes asynchronous while it blocks, so only worker 2's async type is certain.
		if th.Cancel.CancelDisabled() != (idx == 1) || (idx == 2 && !th.Cancel.CancelAsync()) {
			t.Errorf("LWP %d (worker %d): cancelhandling %#x", th.LWP, idx, uint32(th.Cancel))
		}
		if th.State != threaddb.StateActive {
			t.Errorf("LWP %d: state %v", th.LWP, th.State)
		}

		if withLib {
			if addr, err := p.TLSAddress(th, libMod, libOff); err != nil {
				t.Errorf("LWP %d: TLSAddress(libvar): %v", th.LWP, err)
			} else {
				if want := parseGDBInt(t, g.values[iLibAddr]); addr != want {
					t.Errorf("LWP %d: &libvar = %#x, gdb %#x", th.LWP, addr, want)
				}
				if v, want := readInt(addr, 4), int64(parseGDBInt(t, g.values[iLib])); v != want {
					t.Errorf("LWP %d: libvar = %d, gdb %d", th.LWP, v, want)
				}
			}
			addr, err := p.TLSAddress(th, lazy, lazyOff)
			gv := g.values[iLazyAddr]
			switch {
			case strings.Contains(gv, "not yet allocated"):
				if !errors.Is(err, threaddb.ErrTLSNotAllocated) {
					t.Errorf("LWP %d: TLSAddress(lazyvar) = %#x, %v; gdb: %s", th.LWP, addr, err, gv)
				}
			case err != nil:
				t.Errorf("LWP %d: TLSAddress(lazyvar): %v; gdb %s", th.LWP, err, gv)
			default:
				if want := parseGDBInt(t, gv); addr != want {
					t.Errorf("LWP %d: &lazyvar = %#x, gdb %#x", th.LWP, addr, want)
				}
				if v := readInt(addr, 4); v != 3000+idx {
					t.Errorf("LWP %d (worker %d): lazyvar = %d, the program set %d", th.LWP, idx, v, 3000+idx)
				}
			}
			if touched := idx >= 0 && idx%3 == 0; touched != (err == nil) {
				t.Errorf("LWP %d (worker %d): lazyvar allocated = %v, the program touched it = %v", th.LWP, idx, err == nil, touched)
			}
			// ievar was loaded into static TLS after the workers' DTVs were made.
			if addr, err := p.TLSAddress(th, ie, ieOff); err != nil {
				t.Errorf("LWP %d: TLSAddress(ievar): %v", th.LWP, err)
			} else {
				if want := parseGDBInt(t, g.values[iIEAddr]); addr != want {
					t.Errorf("LWP %d: &ievar = %#x, gdb %#x", th.LWP, addr, want)
				}
				if v, want := readInt(addr, 4), int64(parseGDBInt(t, g.values[iIE])); v != want {
					t.Errorf("LWP %d: ievar = %d, gdb %d", th.LWP, v, want)
				}
			}
		}
		out[th.LWP] = liveThread{pthread: th.Pthread, tls: tlsVal}
	}
	for lwp := range oracle {
		if _, ok := out[lwp]; !ok {
			t.Errorf("gdb lists LWP %d, List does not", lwp)
		}
	}
	return out
}

// TestConcurrentQueries runs List, MapLWP and TLSAddress from several goroutines on one Process
// (run with -race): all must agree with a single-goroutine List.
func TestConcurrentQueries(t *testing.T) {
	path := buildPrograms(t).dynamic
	tg := startTarget(t, path, 8)
	mods := procModules(t, tg.pid)
	tr := seizeAll(t, tg.pid)
	p, err := threaddb.Open(tg.pid, mods, openProcMem(t, tg.pid), tr)
	if err != nil {
		t.Fatal(err)
	}
	want, err := p.List()
	if err != nil {
		t.Fatal(err)
	}
	exe := moduleFor(t, mods, path)
	off := testenv.NMSymbol(t, path, "tlsvar")
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 5; i++ {
				got, err := p.List()
				if err != nil || len(got.Threads) != len(want.Threads) {
					errs <- fmt.Errorf("List: %d threads, %v", len(got.Threads), err)
					return
				}
				for j, th := range got.Threads {
					if th != want.Threads[j] {
						errs <- fmt.Errorf("List[%d] = %+v, want %+v", j, th, want.Threads[j])
						return
					}
					if m, err := p.MapLWP(th.LWP); err != nil || m != th {
						errs <- fmt.Errorf("MapLWP(%d) = %+v, %v", th.LWP, m, err)
						return
					}
					if _, err := p.TLSAddress(th, exe, off); err != nil {
						errs <- err
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
