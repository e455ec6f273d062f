//go:build linux && amd64

package ptrace

import (
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hpcdap/hpcdap/internal/testenv"
	"github.com/hpcdap/hpcdap/procimage"
	"github.com/hpcdap/hpcdap/target"
)

// Test programs, compiled once per test binary by TestMain.
var (
	buildDir  string
	buildErr  error
	progPath  string // testdata/prog.c, PIE, dynamically linked
	staticBin string // testdata/prog.c, static
	layoutBin string // testdata/layout.c
)

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		os.Exit(runHelper())
	}
	dir, err := os.MkdirTemp("", "ptrace-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	buildDir = dir
	progPath = filepath.Join(dir, "prog")
	staticBin = filepath.Join(dir, "prog-static")
	layoutBin = filepath.Join(dir, "layout")
	buildErr = buildPrograms()
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func buildPrograms() error {
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		return errors.New("gcc not found: install the Debian package gcc (and libc6-dev for the static build)")
	}
	src := filepath.Join("testdata", "prog.c")
	builds := [][]string{
		{"-g", "-O0", "-fno-stack-protector", "-pthread", "-o", progPath, src},
		{"-g", "-O0", "-fno-stack-protector", "-pthread", "-static", "-o", staticBin, src},
		{"-o", layoutBin, filepath.Join("testdata", "layout.c")},
	}
	for _, args := range builds {
		if out, err := exec.Command(gcc, args...).CombinedOutput(); err != nil {
			return fmt.Errorf("gcc %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	return nil
}

func needPrograms(t testing.TB) {
	t.Helper()
	if buildErr != nil {
		t.Fatalf("test programs: %v", buildErr)
	}
}

func newTracer(t testing.TB) *Tracer {
	t.Helper()
	tr, err := NewTracer()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	return tr
}

// spawn starts prog with args, held at its first instruction.
func spawn(t testing.TB, tr *Tracer, args ...string) target.Process {
	t.Helper()
	needPrograms(t)
	p, err := tr.Spawn(append([]string{progPath}, args...), []string{"PATH=/usr/bin:/bin"}, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Kill(0, 9)
	})
	return p
}

const eventWait = 30 * time.Second // a hang guard, not a timing assertion

func nextEvent(t testing.TB, p target.Process) target.Event {
	t.Helper()
	select {
	case ev, ok := <-p.Events():
		if !ok {
			t.Fatalf("pid %d: events closed", p.Info().Pid)
		}
		return ev
	case <-time.After(eventWait):
		t.Fatalf("pid %d: no event within %v", p.Info().Pid, eventWait)
	}
	return target.Event{}
}

// expect reads the next event and checks its kind.
func expect(t testing.TB, p target.Process, kind target.EventKind) target.Event {
	t.Helper()
	ev := nextEvent(t, p)
	if ev.Kind != kind {
		t.Fatalf("pid %d: got event %+v, want kind %d", p.Info().Pid, ev, kind)
	}
	return ev
}

// expectExit drains events up to EventExit and checks the status and the channel's close.
func expectExit(t testing.TB, p target.Process, status int) {
	t.Helper()
	for {
		ev := nextEvent(t, p)
		if ev.Kind == target.EventThreadExit {
			continue
		}
		if ev.Kind != target.EventExit {
			t.Fatalf("pid %d: got %+v, want exit", p.Info().Pid, ev)
		}
		if ev.Status != status {
			t.Fatalf("pid %d: exit status %#x, want %#x", p.Info().Pid, ev.Status, status)
		}
		break
	}
	select {
	case ev, ok := <-p.Events():
		if ok {
			t.Fatalf("event after exit: %+v", ev)
		}
	case <-time.After(eventWait):
		t.Fatal("events not closed after exit")
	}
}

type mapping struct {
	start, end, off uint64
	perm, path      string
}

func readMaps(t testing.TB, pid int) []mapping {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		t.Fatal(err)
	}
	var ms []mapping
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		se := strings.SplitN(f[0], "-", 2)
		var m mapping
		m.start, _ = strconv.ParseUint(se[0], 16, 64)
		m.end, _ = strconv.ParseUint(se[1], 16, 64)
		m.off, _ = strconv.ParseUint(f[2], 16, 64)
		m.perm = f[1]
		if len(f) >= 6 {
			m.path = f[5]
		}
		ms = append(ms, m)
	}
	return ms
}

// loadBase is where the kernel mapped file offset 0 of path in the process.
func loadBase(t testing.TB, pid int, path string) uint64 {
	t.Helper()
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range readMaps(t, pid) {
		if m.off == 0 && (m.path == real || m.path == path) {
			return m.start
		}
	}
	t.Fatalf("pid %d: %s not mapped", pid, path)
	return 0
}

// symAddr is the run-time address of a symbol of the test program in process pid.
func symAddr(t testing.TB, pid int, bin, name string) uint64 {
	t.Helper()
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	v := testenv.NMSymbol(t, bin, name)
	if f.Type == elf.ET_DYN {
		return loadBase(t, pid, bin) + v
	}
	return v
}

// objdumpInsns disassembles bin with objdump (the oracle) and returns, by link-time address,
// the address of the next instruction, and the text of the instruction that ends there.
func objdumpInsns(t testing.TB, bin string) (next map[uint64]uint64, prevText map[uint64]string) {
	t.Helper()
	out, err := exec.Command(testenv.NeedTool(t, "objdump", "binutils"), "-d", "--no-show-raw-insn", bin).Output()
	if err != nil {
		t.Fatalf("objdump: %v", err)
	}
	next = map[uint64]uint64{}
	prevText = map[uint64]string{}
	var lastAddr uint64
	var lastText string
	have := false
	for _, line := range strings.Split(string(out), "\n") {
		// "    1139:\tpush   %rbp"
		a, text, ok := strings.Cut(line, ":\t")
		if !ok {
			if strings.HasSuffix(line, ">:") || line == "" {
				have = false
			}
			continue
		}
		addr, err := strconv.ParseUint(strings.TrimSpace(a), 16, 64)
		if err != nil {
			continue
		}
		if have {
			next[lastAddr] = addr
			prevText[addr] = lastText
		}
		lastAddr, lastText, have = addr, text, true
	}
	return next, prevText
}

func threadState(t testing.TB, tid int) byte {
	t.Helper()
	st, err := procimage.ReadStatus(tid)
	if err != nil {
		t.Fatalf("status of %d: %v", tid, err)
	}
	return st.State
}

func procTasks(t testing.TB, pid int) []int {
	t.Helper()
	tids, err := taskList(pid)
	if err != nil {
		t.Fatal(err)
	}
	return tids
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// mapBase and symbolNoT are loadBase and testenv.NMSymbol for goroutines without a testing.T.
func mapBase(pid int, bin string) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return 0, err
	}
	real, _ := filepath.EvalSymlinks(bin)
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) >= 6 && f[2] == "00000000" && f[5] == real {
			start, _, _ := strings.Cut(f[0], "-")
			return strconv.ParseUint(start, 16, 64)
		}
	}
	return 0, fmt.Errorf("pid %d: %s not mapped", pid, bin)
}

func symbolNoT(bin, name string) (uint64, error) {
	syms, err := testenv.NM(bin)
	if err != nil {
		return 0, err
	}
	v, ok := syms[name]
	if !ok {
		return 0, fmt.Errorf("nm %s: no symbol %s", bin, name)
	}
	return v, nil
}
