package symbols

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
)

// This file holds the gdb side of the differential tests: building the test programs with
// the system compilers, finding the marked stop lines, and running gdb (batch mode, driven by
// testdata/gdbdump.py) to dump cores and gdb's own view of them.

// testCache shares binaries (notably libc's debug info) across the tests of one run.
var testCache = NewCache(nil)

// debianPackage names the Debian package that provides each tool the tests run.
var debianPackage = map[string]string{
	"gcc": "gcc", "g++": "g++", "gfortran": "gfortran", "gdb": "gdb", "gdb-multiarch": "gdb-multiarch",
	"readelf": "binutils", "objcopy": "binutils", "nm": "binutils",
	"powerpc64-linux-gnu-gcc": "gcc-powerpc64-linux-gnu", "powerpc64le-linux-gnu-gcc": "gcc-powerpc64le-linux-gnu",
	"powerpc64-linux-gnu-objcopy": "binutils-powerpc64-linux-gnu",
	"qemu-ppc64":                  "qemu-user", "qemu-ppc64le": "qemu-user",
}

// needTool fails the test when a required program is missing.
func needTool(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("required tool %s not found in PATH (Debian package %s)", name, debianPackage[name])
	}
	return p
}

// program describes a test program source and how to build it.
type program struct {
	lang    string // "c", "cpp", "fortran"
	src     string // path under testdata
	compile string // compiler
}

var programs = map[string]program{
	"c":             {lang: "c", src: "testdata/c/prog.c", compile: "gcc"},
	"cpp":           {lang: "cpp", src: "testdata/cpp/prog.cpp", compile: "g++"},
	"fortran":       {lang: "fortran", src: "testdata/fortran/prog.f90", compile: "gfortran"},
	"crash":         {lang: "c", src: "testdata/crash/crash.c", compile: "gcc"},
	"tls":           {lang: "c", src: "testdata/tls/tls.c", compile: "gcc"},
	"crash-ppc64":   {lang: "c", src: "testdata/crash/crash.c", compile: "powerpc64-linux-gnu-gcc"},
	"crash-ppc64le": {lang: "c", src: "testdata/crash/crash.c", compile: "powerpc64le-linux-gnu-gcc"},
}

// built is one compiled variant of a program.
type built struct {
	exe  string
	src  string // absolute source path
	dir  string
	err  error
	once sync.Once
	// live is gdb's dump of the stops (filled once).
	liveOnce sync.Once
	live     *gdbLive
	liveErr  error
}

var (
	buildMu  sync.Mutex
	builds   = map[string]*built{}
	buildDir string
)

// buildProgram compiles a program once per test run with the given flags.
func buildProgram(t *testing.T, name string, flags ...string) *built {
	t.Helper()
	prog := programs[name]
	key := name + " " + strings.Join(flags, " ")
	buildMu.Lock()
	if buildDir == "" {
		d, err := os.MkdirTemp("", "symbols-test-")
		if err != nil {
			buildMu.Unlock()
			t.Fatal(err)
		}
		buildDir = d
	}
	b := builds[key]
	if b == nil {
		b = &built{}
		builds[key] = b
	}
	dir := buildDir
	buildMu.Unlock()
	b.once.Do(func() {
		needTool(t, prog.compile)
		src, err := filepath.Abs(prog.src)
		if err != nil {
			b.err = err
			return
		}
		b.src = src
		b.dir, err = os.MkdirTemp(dir, name)
		if err != nil {
			b.err = err
			return
		}
		b.exe = filepath.Join(b.dir, name)
		args := append(append([]string{}, flags...), "-o", b.exe, src)
		cmd := exec.Command(prog.compile, args...)
		cmd.Dir = b.dir
		if out, err := cmd.CombinedOutput(); err != nil {
			b.err = fmt.Errorf("%s %v: %v\n%s", prog.compile, args, err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b
}

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// stopSpec is a marked line: where to stop and what to print there.
type stopSpec struct {
	Name  string   `json:"name"`
	File  string   `json:"file"`
	Line  int      `json:"line"`
	Exprs []string `json:"exprs"`
}

var markerRE = regexp.MustCompile(`STOP:(\w+)(.*)$`)

// markers finds "STOP:name ; expr ; expr" markers in a source file.
func markers(t *testing.T, src string) []stopSpec {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	var out []stopSpec
	for i, line := range strings.Split(string(data), "\n") {
		m := markerRE.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		rest := strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(m[2]), "*/"))
		s := stopSpec{Name: m[1], File: filepath.Base(src), Line: i + 1}
		for _, e := range strings.Split(rest, ";") {
			if e = strings.TrimSpace(e); e != "" {
				s.Exprs = append(s.Exprs, e)
			}
		}
		out = append(out, s)
	}
	if len(out) == 0 {
		t.Fatalf("%s: no STOP markers", src)
	}
	return out
}

// gdbFrame is one frame as gdb reports it.
type gdbFrame struct {
	Level  int    `json:"level"`
	PC     uint64 `json:"pc"`
	Name   string `json:"name"`
	Type   string `json:"type"`
	File   string `json:"file"`
	Line   int    `json:"line"`
	Locals string `json:"locals"`
	Args   string `json:"args"`
}

type gdbPrint struct {
	Expr     string      `json:"expr"`
	Out      string      `json:"out"`
	After    string      `json:"after"` // for assignments: the variable printed afterwards
	Children [][2]string `json:"children"`
}

type gdbStop struct {
	Name   string     `json:"name"`
	Core   string     `json:"core"`
	BT     string     `json:"bt"`
	Frames []gdbFrame `json:"frames"`
	Prints []gdbPrint `json:"prints"`
}

type gdbLive struct {
	Stops []gdbStop `json:"stops"`
}

// runGDB runs gdbdump.py in a mode and decodes its JSON output into out.
func runGDB(t *testing.T, gdb, mode, dir string, spec any, out any, args ...string) {
	t.Helper()
	in := filepath.Join(dir, mode+"-in.json")
	res := filepath.Join(dir, mode+"-out.json")
	data, _ := json.Marshal(spec)
	if err := os.WriteFile(in, data, 0o644); err != nil {
		t.Fatal(err)
	}
	script, _ := filepath.Abs("testdata/gdbdump.py")
	cmd := exec.Command(gdb, append([]string{"-batch", "-nx", "-x", script}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "LC_ALL=C", "DEBUGINFOD_URLS=", "SYMTEST_MODE="+mode,
		"SYMTEST_IN="+in, "SYMTEST_OUT="+res, "SYMTEST_DIR="+dir)
	var stderr bytes.Buffer
	cmd.Stdout = &stderr
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("gdb %s: %v\n%s", mode, err, stderr.String())
	}
	data, err := os.ReadFile(res)
	if err != nil {
		t.Fatalf("gdb %s wrote no result: %v\n%s", mode, err, stderr.String())
	}
	if err := json.Unmarshal(data, out); err != nil {
		t.Fatalf("gdb %s: bad JSON: %v", mode, err)
	}
}

// liveDump runs the program under gdb once, stopping at every marker.
func (b *built) liveDump(t *testing.T) *gdbLive {
	t.Helper()
	b.liveOnce.Do(func() {
		gdb := needTool(t, "gdb")
		spec := map[string]any{"stops": markers(t, b.src), "pass_signals": []string{"SIGUSR1"}}
		var out gdbLive
		runGDB(t, gdb, "live", b.dir, spec, &out, b.exe)
		b.live = &out
	})
	if b.live == nil {
		t.Fatal("gdb dump failed earlier")
	}
	return b.live
}
