//go:build linux && amd64

package ptrace

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/hpcdap/hpcdap/internal/testenv"
	"github.com/hpcdap/hpcdap/target"
)

func auxvValue(t testing.TB, auxv []byte, typ uint64) uint64 {
	t.Helper()
	for i := 0; i+16 <= len(auxv); i += 16 {
		if binary.LittleEndian.Uint64(auxv[i:]) == typ {
			return binary.LittleEndian.Uint64(auxv[i+8:])
		}
	}
	t.Fatalf("auxv has no entry %d", typ)
	return 0
}

// interpEntry returns the path of bin's interpreter and the interpreter's e_entry (debug/elf).
func interpEntry(t testing.TB, bin string) (string, uint64) {
	t.Helper()
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, ph := range f.Progs {
		if ph.Type == elf.PT_INTERP {
			b := make([]byte, ph.Filesz)
			if _, err := ph.ReadAt(b, 0); err != nil {
				t.Fatal(err)
			}
			interp := string(b[:len(b)-1])
			lf, err := elf.Open(interp)
			if err != nil {
				t.Fatal(err)
			}
			defer lf.Close()
			return interp, lf.Entry
		}
	}
	t.Fatalf("%s has no PT_INTERP", bin)
	return "", 0
}

const (
	atBase  = 7
	atEntry = 9
)

func TestSpawnHoldsAtInterpreterEntry(t *testing.T) {
	tr := newTracer(t)
	p := spawn(t, tr, "count", "3")
	pid := p.Info().Pid
	if got := threadState(t, pid); got != 't' {
		t.Fatalf("spawned process state %q, want t (tracing stop)", got)
	}
	tids, err := p.Threads()
	if err != nil || !equalInts(tids, []int{pid}) {
		t.Fatalf("Threads = %v, %v; want [%d]", tids, err, pid)
	}
	if want := procTasks(t, pid); !equalInts(tids, want) {
		t.Fatalf("Threads %v, /proc task %v", tids, want)
	}
	interp, entry := interpEntry(t, progPath)
	ldBase := loadBase(t, pid, interp) // oracle: the kernel's mapping of ld.so
	pc, err := p.PC(pid)
	if err != nil {
		t.Fatal(err)
	}
	if pc != ldBase+entry {
		t.Fatalf("PC %#x, want ld.so entry %#x (base %#x + e_entry %#x)", pc, ldBase+entry, ldBase, entry)
	}
	auxv, err := p.Auxv()
	if err != nil {
		t.Fatal(err)
	}
	if got := auxvValue(t, auxv, atBase); got != ldBase {
		t.Fatalf("AT_BASE %#x, maps say %#x", got, ldBase)
	}
	f, err := elf.Open(progPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if got, want := auxvValue(t, auxv, atEntry), loadBase(t, pid, progPath)+f.Entry; got != want {
		t.Fatalf("AT_ENTRY %#x, want %#x", got, want)
	}
	info := p.Info()
	real, _ := filepath.EvalSymlinks(progPath)
	if info.Machine != elf.EM_X86_64 || info.PtrSize != 8 || info.Exe != real || info.Pid != pid ||
		info.PageSize != os.Getpagesize() || info.Arch.PCAfterBreak != 1 || string(info.Arch.BreakInstr) != "\xcc" || info.Arch.WatchSlots != 4 {
		t.Fatalf("Info = %+v", info)
	}
	if err := p.Resume(pid, 0); err != nil {
		t.Fatal(err)
	}
	expectExit(t, p, 0)
}

func TestSpawnStaticHoldsAtEntry(t *testing.T) {
	needPrograms(t)
	tr := newTracer(t)
	p, err := tr.Spawn([]string{staticBin, "count", "2"}, nil, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	f, err := elf.Open(staticBin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Type != elf.ET_EXEC {
		t.Fatalf("static test program is %v, want ET_EXEC", f.Type)
	}
	pid := p.Info().Pid
	pc, err := p.PC(pid)
	if err != nil {
		t.Fatal(err)
	}
	if pc != f.Entry {
		t.Fatalf("PC %#x, want e_entry %#x", pc, f.Entry)
	}
	if err := p.Resume(pid, 0); err != nil {
		t.Fatal(err)
	}
	expectExit(t, p, 0)
}

func TestSpawnEnvDirStdio(t *testing.T) {
	needPrograms(t)
	tr := newTracer(t)
	dir := t.TempDir()
	out, err := os.Create(filepath.Join(dir, "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	// prog with an unknown mode prints to stderr and exits 2.
	p, err := tr.Spawn([]string{progPath, "nosuchmode"}, []string{"RANK=5"}, dir, []*os.File{nil, nil, out})
	if err != nil {
		t.Fatal(err)
	}
	pid := p.Info().Pid
	env, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if string(env) != "RANK=5\x00" {
		t.Fatalf("environ %q", env)
	}
	if cwd, _ := os.Readlink("/proc/" + strconv.Itoa(pid) + "/cwd"); cwd != dir {
		t.Fatalf("cwd %q, want %q", cwd, dir)
	}
	p.Resume(pid, 0)
	expectExit(t, p, 2<<8)
	b, _ := os.ReadFile(out.Name())
	if string(b) != "prog: unknown mode nosuchmode\n" {
		t.Fatalf("stderr %q", b)
	}
}

func TestSpawnErrors(t *testing.T) {
	tr := newTracer(t)
	if _, err := tr.Spawn(nil, nil, "", nil); err == nil {
		t.Fatal("empty argv accepted")
	}
	_, err := tr.Spawn([]string{filepath.Join(t.TempDir(), "missing")}, nil, "", nil)
	if !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing program: %v", err)
	}
}

func TestExecEvent(t *testing.T) {
	tr := newTracer(t)
	p := spawn(t, tr, "exec", staticBin)
	pid := p.Info().Pid
	p.Resume(pid, 0)
	ev := expect(t, p, target.EventExec)
	f, err := elf.Open(staticBin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if ev.Tid != pid || ev.PC != f.Entry {
		t.Fatalf("exec event %+v, want tid %d pc %#x", ev, pid, f.Entry)
	}
	if real, _ := filepath.EvalSymlinks(staticBin); p.Info().Exe != real {
		t.Fatalf("Exe after exec %q, want %q", p.Info().Exe, real)
	}
	// Memory is that of the new image.
	addr := testenv.NMSymbol(t, staticBin, "target_fn")
	got := make([]byte, 16)
	if _, err := p.ReadMemory(addr, got); err != nil {
		t.Fatal(err)
	}
	want := testenv.ELFBytes(t, staticBin, addr, 16)
	if string(got) != string(want) {
		t.Fatalf("target_fn after exec: % x, file % x", got, want)
	}
	p.Resume(pid, 0)
	expectExit(t, p, 7<<8)
}

func TestExecFromThread(t *testing.T) {
	tr := newTracer(t)
	p := spawn(t, tr, "threadexec", staticBin)
	pid := p.Info().Pid
	p.Resume(pid, 0)
	news := map[int]bool{}
	exited := map[int]bool{}
	for {
		ev := nextEvent(t, p)
		if ev.Kind == target.EventNewThread {
			news[ev.Tid] = true
			if ev.Parent != pid {
				t.Fatalf("new thread %d parent %d, want %d", ev.Tid, ev.Parent, pid)
			}
			// The exec may already have ended this thread (its event was queued before the
			// exec): then it is reported gone below like the others.
			if err := p.Resume(ev.Tid, 0); err != nil && !errors.Is(err, target.ErrNoThread) {
				t.Fatal(err)
			}
			continue
		}
		if ev.Kind == target.EventThreadExit {
			exited[ev.Tid] = true
			continue
		}
		if ev.Kind != target.EventExec || ev.Tid != pid {
			t.Fatalf("got %+v, want exec of %d", ev, pid)
		}
		break
	}
	// The exec'ing thread was reported and ran; the worker may not have had its first stop yet
	// (then it was never reported, and dies unreported). Every reported thread is gone.
	if len(news) == 0 || len(news) != len(exited) {
		t.Fatalf("new threads %v, exited %v; want the same", news, exited)
	}
	for tid := range news {
		if !exited[tid] {
			t.Fatalf("thread %d not reported gone at exec", tid)
		}
	}
	tids, _ := p.Threads()
	if !equalInts(tids, []int{pid}) || !equalInts(procTasks(t, pid), []int{pid}) {
		t.Fatalf("after exec Threads %v, /proc %v", tids, procTasks(t, pid))
	}
	p.Resume(pid, 0)
	expectExit(t, p, 7<<8)
}
