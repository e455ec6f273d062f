//go:build linux && amd64

package threaddb_test

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"github.com/hpcdap/hpcdap/internal/testenv"
	"github.com/hpcdap/hpcdap/threaddb"
)

// execStop starts a program stopped at its first instruction (the exec stop of PTRACE_TRACEME).
// The calling goroutine is locked to its thread, which is the tracer.
func execStop(t *testing.T, path string) *target {
	t.Helper()
	runtime.LockOSThread()
	t.Cleanup(runtime.UnlockOSThread)
	cmd := exec.Command(path, "8")
	cmd.SysProcAttr = &syscall.SysProcAttr{Ptrace: true}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", path, err)
	}
	var ws syscall.WaitStatus
	if _, err := syscall.Wait4(cmd.Process.Pid, &ws, 0, nil); err != nil || !ws.Stopped() {
		cmd.Process.Kill()
		t.Fatalf("wait for the exec stop of %s: %v (status %v)", path, err, ws)
	}
	tg := &target{cmd: cmd, pid: cmd.Process.Pid, stdin: stdin, out: bufio.NewReader(stdout)}
	t.Cleanup(func() {
		tg.cmd.Process.Kill()
		tg.cmd.Wait()
	})
	return tg
}

// stoppedThreads serves a process stopped under this goroutine's ptrace.
type stoppedThreads struct{ pid int }

func (s stoppedThreads) LWPs() ([]int, error) { return procLWPs(s.pid) }
func (s stoppedThreads) ThreadPointer(lwp int) (uint64, error) {
	var regs syscall.PtraceRegs
	if err := syscall.PtraceGetRegs(lwp, &regs); err != nil {
		return 0, err
	}
	return regs.Fs_base, nil
}

// gdbStarti runs a fresh copy of the program to its first instruction under gdb and returns
// what "info threads" lists: gdb's view of a program whose thread library is not initialised.
func gdbStarti(t *testing.T, path string) []string {
	t.Helper()
	testenv.NeedTool(t, "gdb", "gdb")
	out := run(t, "", "gdb", "-batch", "-nx", "-ex", "starti", "-ex", "info threads", "--args", path, "8")
	var rows []string
	row := regexp.MustCompile(`^\*?\s*\d+\s+(\S.*)$`)
	inTable := false
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "Id") {
			inTable = true
			continue
		}
		if m := row.FindStringSubmatch(l); inTable && m != nil {
			rows = append(rows, m[1])
		}
	}
	if len(rows) == 0 {
		t.Fatalf("gdb starti: no threads listed\n%s", out)
	}
	return rows
}

// TestNotInitialized stops a static program at its first instruction, before glibc has set up
// its thread list: the package must report the one LWP, flagged, and no pthread_t, as gdb does.
// Released, the same Process must then see the initialised list.
func TestNotInitialized(t *testing.T) {
	path := buildPrograms(t).static
	gdbRows := gdbStarti(t, path)
	if len(gdbRows) != 1 || strings.Contains(gdbRows[0], "Thread 0x") {
		t.Fatalf("gdb at the first instruction lists %q; want one thread without a pthread_t", gdbRows)
	}

	tg := execStop(t, path)
	mem := openProcMem(t, tg.pid)
	thr := &swapThreads{cur: stoppedThreads{tg.pid}}
	p, err := threaddb.Open(tg.pid, procModules(t, tg.pid), mem, thr)
	if err != nil {
		t.Fatal(err)
	}
	if p.Library() == nil || !p.Library().Static {
		t.Fatalf("static program: Library = %+v", p.Library())
	}
	if st, err := p.Status(); err != nil || st != threaddb.StatusNotInitialized {
		t.Fatalf("Status = %v, %v; want not initialised", st, err)
	}
	list, err := p.List()
	if err != nil {
		t.Fatal(err)
	}
	want := []threaddb.Thread{{LWP: tg.pid}}
	if list.Status != threaddb.StatusNotInitialized || len(list.Threads) != 1 || list.Threads[0] != want[0] {
		t.Fatalf("List = %+v; want status not initialised, threads %+v", list, want)
	}
	if th, err := p.MapLWP(tg.pid); err != nil || th != want[0] {
		t.Errorf("MapLWP(pid) = %+v, %v; want %+v", th, err, want[0])
	}
	if _, err := p.MapLWP(tg.pid + 1); !errors.Is(err, threaddb.ErrNotInitialized) {
		t.Errorf("MapLWP(pid+1) error = %v, want ErrNotInitialized", err)
	}
	if th, err := p.MapPthread(0); err != nil || th != want[0] {
		t.Errorf("MapPthread(0) = %+v, %v; want %+v", th, err, want[0])
	}
	// The thread pointer is still 0 at the first instruction: no TLS yet.
	if _, err := p.TLSBlock(list.Threads[0], 1); !errors.Is(err, threaddb.ErrTLSNotAllocated) {
		t.Errorf("TLSBlock before initialisation: %v, want ErrTLSNotAllocated", err)
	}

	// Let the program run to its steady state; the same Process now sees 9 threads.
	if err := syscall.PtraceDetach(tg.pid); err != nil {
		t.Fatal(err)
	}
	tg.expect(t, "ready")
	tr := seizeAll(t, tg.pid)
	thr.set(tr)
	list, err = p.List()
	if err != nil {
		t.Fatal(err)
	}
	if list.Status != threaddb.StatusReady || len(list.Threads) != 9 {
		t.Fatalf("after initialisation: status %v, %d threads; want ready, 9", list.Status, len(list.Threads))
	}
	for _, th := range list.Threads {
		if th.Pthread == 0 {
			t.Errorf("after initialisation: LWP %d has no pthread_t", th.LWP)
		}
	}
}

// TestNoLibraryYet stops a dynamic program at its first instruction, when only the executable
// and ld.so are mapped: there is no thread library yet, and the package reports LWPs only.
func TestNoLibraryYet(t *testing.T) {
	path := buildPrograms(t).dynamic
	gdbRows := gdbStarti(t, path)
	if len(gdbRows) != 1 || strings.Contains(gdbRows[0], "Thread 0x") {
		t.Fatalf("gdb at the first instruction lists %q; want one thread without a pthread_t", gdbRows)
	}
	tg := execStop(t, path)
	mods := procModules(t, tg.pid)
	p, err := threaddb.Open(tg.pid, mods, openProcMem(t, tg.pid), stoppedThreads{tg.pid})
	if err != nil {
		t.Fatal(err)
	}
	if p.Library() != nil {
		t.Fatalf("modules %v: found a thread library in %s before libc is mapped", mods, p.Library().Module.Path)
	}
	list, err := p.List()
	if err != nil {
		t.Fatal(err)
	}
	if list.Status != threaddb.StatusNoLibrary || len(list.Threads) != 1 || list.Threads[0] != (threaddb.Thread{LWP: tg.pid}) {
		t.Fatalf("List = %+v; want no library, LWP %d only", list, tg.pid)
	}
	if _, err := p.MapLWP(tg.pid); !errors.Is(err, threaddb.ErrNoThreadLibrary) {
		t.Errorf("MapLWP without a thread library: %v, want ErrNoThreadLibrary", err)
	}
}
