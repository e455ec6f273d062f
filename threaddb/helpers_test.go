package threaddb_test

import (
	"bufio"
	"bytes"
	"debug/elf"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hpcdap/hpcdap/internal/testenv"
	"github.com/hpcdap/hpcdap/threaddb"
)

// run runs a command and fails the test with its output on error.
func run(t testing.TB, dir string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// programs holds the test program built in one directory.
type programs struct {
	dir     string
	dynamic string // threads.c with libtls.so linked and liblazy.so dlopen'ed
	static  string // threads.c linked -static
	libtls  string
}

var (
	buildOnce sync.Once
	built     programs
	buildErr  string
	buildDir  string
)

// buildPrograms compiles the test programs once per test binary run.
func buildPrograms(t testing.TB) programs {
	t.Helper()
	testenv.NeedTool(t, "gcc", "gcc")
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "threaddb-test-")
		if err != nil {
			buildErr = err.Error()
			return
		}
		buildDir = dir
		src, _ := filepath.Abs("testdata")
		steps := [][]string{
			{"gcc", "-g", "-shared", "-fPIC", "-o", "libtls.so", filepath.Join(src, "libtls.c")},
			{"gcc", "-g", "-shared", "-fPIC", "-o", "liblazy.so", filepath.Join(src, "liblazy.c")},
			{"gcc", "-g", "-shared", "-fPIC", "-o", "libie.so", filepath.Join(src, "libie.c")},
			{"gcc", "-g", "-O0", "-pthread", "-DWITH_LIB", "-o", "threads", filepath.Join(src, "threads.c"),
				"-L.", "-ltls", "-ldl", "-Wl,-rpath," + dir},
			{"gcc", "-g", "-O0", "-pthread", "-static", "-o", "threads_static", filepath.Join(src, "threads.c")},
		}
		for _, s := range steps {
			cmd := exec.Command(s[0], s[1:]...)
			cmd.Dir = dir
			if out, err := cmd.CombinedOutput(); err != nil {
				buildErr = fmt.Sprintf("%s: %v\n%s", strings.Join(s, " "), err, out)
				return
			}
		}
		built = programs{
			dir:     dir,
			dynamic: filepath.Join(dir, "threads"),
			static:  filepath.Join(dir, "threads_static"),
			libtls:  filepath.Join(dir, "libtls.so"),
		}
	})
	if buildErr != "" {
		t.Fatalf("build test programs: %s", buildErr)
	}
	return built
}

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// target is a running test program.
type target struct {
	cmd   *exec.Cmd
	pid   int
	stdin io.WriteCloser
	out   *bufio.Reader
	key   uint32 // the live pthread key
	dead  uint32 // a deleted pthread key
}

// startTarget starts the test program with n workers and waits for its "ready" line.
func startTarget(t testing.TB, path string, n int) *target {
	t.Helper()
	cmd := exec.Command(path, strconv.Itoa(n))
	cmd.Dir = filepath.Dir(path)
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
	tg := &target{cmd: cmd, pid: cmd.Process.Pid, stdin: stdin, out: bufio.NewReader(stdout)}
	t.Cleanup(func() {
		tg.stdin.Close()
		done := make(chan struct{})
		go func() { tg.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			tg.cmd.Process.Kill()
			<-done
		}
	})
	line := tg.expect(t, "ready")
	if _, err := fmt.Sscanf(line, "ready %d %d", &tg.key, &tg.dead); err != nil {
		t.Fatalf("parse %q: %v", line, err)
	}
	return tg
}

// expect reads the program's next output line, which must start with prefix.
func (tg *target) expect(t testing.TB, prefix string) string {
	t.Helper()
	type res struct {
		line string
		err  error
	}
	ch := make(chan res, 1)
	go func() {
		l, err := tg.out.ReadString('\n')
		ch <- res{strings.TrimSpace(l), err}
	}()
	select {
	case r := <-ch:
		if r.err != nil || !strings.HasPrefix(r.line, prefix) {
			t.Fatalf("test program: want %q line, got %q (%v)", prefix, r.line, r.err)
		}
		return r.line
	case <-time.After(60 * time.Second):
		t.Fatalf("test program: no %q line after 60 s", prefix)
	}
	return ""
}

// command sends one command line and waits for the reply line.
func (tg *target) command(t testing.TB, cmd, reply string) string {
	t.Helper()
	if _, err := fmt.Fprintln(tg.stdin, cmd); err != nil {
		t.Fatalf("send %q: %v", cmd, err)
	}
	return tg.expect(t, reply)
}

// procMem reads a process's memory through /proc/PID/mem and counts the reads.
type procMem struct {
	f     *os.File
	reads atomic.Int64
	bytes atomic.Int64
}

func openProcMem(t testing.TB, pid int) *procMem {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
	if err != nil {
		t.Fatalf("open memory of %d: %v", pid, err)
	}
	t.Cleanup(func() { f.Close() })
	return &procMem{f: f}
}

func (m *procMem) ReadAt(b []byte, addr uint64) (int, error) {
	m.reads.Add(1)
	m.bytes.Add(int64(len(b)))
	if addr > 1<<63-1 {
		return 0, fmt.Errorf("address %#x out of range", addr)
	}
	n, err := m.f.ReadAt(b, int64(addr))
	if n == len(b) {
		return n, nil
	}
	if err == nil {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

// procLWPs lists the LWPs of a process from /proc/PID/task.
func procLWPs(pid int) ([]int, error) {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return nil, err
	}
	var lwps []int
	for _, e := range ents {
		if n, err := strconv.Atoi(e.Name()); err == nil {
			lwps = append(lwps, n)
		}
	}
	sort.Ints(lwps)
	return lwps, nil
}

// procModules derives the loaded modules and their load biases from /proc/PID/maps: each file
// mapped at offset 0 is an ELF object whose lowest PT_LOAD page is at the mapping's start.
func procModules(t testing.TB, pid int) []threaddb.Module {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		t.Fatalf("read maps of %d: %v", pid, err)
	}
	var mods []threaddb.Module
	seen := map[string]bool{}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 6 || !strings.HasPrefix(f[5], "/") || f[2] != "00000000" || seen[f[5]] {
			continue
		}
		start, err := strconv.ParseUint(strings.Split(f[0], "-")[0], 16, 64)
		if err != nil {
			t.Fatalf("maps line %q: %v", line, err)
		}
		ef, err := elf.Open(f[5])
		if err != nil {
			continue // not an ELF object (a mapped data file)
		}
		low := ^uint64(0)
		for _, p := range ef.Progs {
			if p.Type == elf.PT_LOAD {
				low = min(low, p.Vaddr&^uint64(os.Getpagesize()-1))
			}
		}
		ef.Close()
		seen[f[5]] = true
		mods = append(mods, threaddb.Module{Path: f[5], Bias: start - low})
	}
	return mods
}

// gdbThread is what gdb, through the real libthread_db, says of one thread.
type gdbThread struct {
	pthread uint64
	lwp     int
	values  []string // one per command given to runGDB, in order; "ERROR: ..." when it failed
}

var (
	gdbHeader = regexp.MustCompile(`^Thread \d+ \(Thread 0x([0-9a-f]+) \(LWP (\d+)\)`)
	gdbInfo   = regexp.MustCompile(`^\*?\s*\d+\s+Thread 0x([0-9a-f]+) \(LWP (\d+)\)`)
	gdbValue  = regexp.MustCompile(`^\$\d+ = (.*)$`)
)

// runGDB attaches gdb to a process, lists its threads with "info threads" and runs each command
// in every thread with "thread apply all -c", then detaches. It returns the threads by LWP and
// the number of threads "info threads" listed.
func runGDB(t testing.TB, pid int, cmds ...string) map[int]*gdbThread {
	t.Helper()
	testenv.NeedTool(t, "gdb", "gdb")
	args := []string{"-batch", "-nx", "-p", strconv.Itoa(pid), "-ex", "set width 0", "-ex", "info threads"}
	for _, c := range cmds {
		args = append(args, "-ex", "thread apply all -c "+c)
	}
	cmd := exec.Command("gdb", args...)
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("gdb -p %d: %v\n%s", pid, err, out.String())
	}
	threads := map[int]*gdbThread{}
	lines := strings.Split(out.String(), "\n")
	cmdIdx := -1
	seenInCmd := map[int]bool{}
	var cur *gdbThread
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		if m := gdbInfo.FindStringSubmatch(line); m != nil {
			pt, _ := strconv.ParseUint(m[1], 16, 64)
			lwp, _ := strconv.Atoi(m[2])
			threads[lwp] = &gdbThread{pthread: pt, lwp: lwp}
			continue
		}
		if m := gdbHeader.FindStringSubmatch(line); m != nil {
			lwp, _ := strconv.Atoi(m[2])
			if cmdIdx < 0 || seenInCmd[lwp] {
				cmdIdx++
				seenInCmd = map[int]bool{}
			}
			seenInCmd[lwp] = true
			cur = threads[lwp]
			if cur == nil {
				t.Fatalf("gdb: thread apply names LWP %d that info threads did not list\n%s", lwp, out.String())
			}
			// The command's output is the next non-empty line(s) up to the next blank line.
			var body []string
			for i+1 < len(lines) && strings.TrimSpace(lines[i+1]) != "" && !strings.HasPrefix(lines[i+1], "[") {
				i++
				body = append(body, lines[i])
			}
			text := strings.Join(body, " ")
			if m := gdbValue.FindStringSubmatch(text); m != nil {
				text = m[1]
			} else if !strings.HasPrefix(text, "ORACLE") {
				text = "ERROR: " + text
			}
			for len(cur.values) < cmdIdx {
				cur.values = append(cur.values, "ERROR: missing")
			}
			cur.values = append(cur.values, text)
		}
	}
	if len(threads) == 0 {
		t.Fatalf("gdb -p %d listed no threads\n%s", pid, out.String())
	}
	return threads
}

// parseGDBInt parses a gdb integer or pointer value such as "42", "0x1f" or "(int *) 0x7f00".
func parseGDBInt(t testing.TB, s string) uint64 {
	t.Helper()
	if i := strings.LastIndexByte(s, ')'); strings.HasPrefix(s, "(") && i > 0 {
		s = strings.TrimSpace(s[i+1:])
	}
	if f := strings.Fields(s); len(f) > 0 {
		s = f[0]
	}
	v, err := strconv.ParseInt(s, 0, 64)
	if err != nil {
		u, err2 := strconv.ParseUint(s, 0, 64)
		if err2 != nil {
			t.Fatalf("parse gdb value %q: %v", s, err)
		}
		return u
	}
	return uint64(v)
}

// moduleFor returns the module whose path ends in suffix.
func moduleFor(t testing.TB, mods []threaddb.Module, suffix string) threaddb.Module {
	t.Helper()
	for _, m := range mods {
		if strings.HasSuffix(m.Path, suffix) {
			return m
		}
	}
	t.Fatalf("no module %s among %v", suffix, mods)
	return threaddb.Module{}
}
