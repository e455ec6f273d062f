package testenv_test

import (
	"bufio"
	"bytes"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/hpcdap/hpcdap/internal/testenv"
)

// source has a function and a data symbol whose bytes the source itself states.
const source = `const unsigned char marker[8] = {0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88};
int counter;
int bump(void) { return ++counter + marker[0]; }
int main(void) { return bump() == 0; }
`

// build compiles source with gcc into the test's directory.
func build(t *testing.T) string {
	t.Helper()
	gcc := testenv.NeedTool(t, "gcc", "gcc")
	dir := t.TempDir()
	src := filepath.Join(dir, "prog.c")
	if err := os.WriteFile(src, []byte(source), 0o644); err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(dir, "prog")
	if err := testenv.Build("gcc", gcc, "-O0", "-o", exe, src); err != nil {
		t.Fatal(err)
	}
	return exe
}

func TestBuild(t *testing.T) {
	err := testenv.Build("no-such-package", "no-such-tool-for-testenv")
	if err == nil || !strings.Contains(err.Error(), "install the Debian package no-such-package") {
		t.Errorf("missing tool: %v", err)
	}
	err = testenv.Build("dash", "sh", "-c", "echo the-output; exit 3")
	if err == nil || !strings.Contains(err.Error(), "the-output") || !strings.Contains(err.Error(), "exit status 3") {
		t.Errorf("failing command: %v", err)
	}
}

func TestSymbolsAgree(t *testing.T) {
	exe := build(t)
	syms := testenv.NMSymbols(t, exe)
	for _, name := range []string{"main", "bump", "counter", "marker"} {
		s := testenv.ELFSymbol(t, exe, name)
		if s.Value == 0 || syms[name] != s.Value {
			t.Errorf("%s: debug/elf %#x, nm %#x", name, s.Value, syms[name])
		}
		if got := testenv.NMSymbol(t, exe, name); got != s.Value {
			t.Errorf("NMSymbol(%s) = %#x, want %#x", name, got, s.Value)
		}
	}
	if s := testenv.ELFSymbol(t, exe, "bump"); elf.ST_TYPE(s.Info) != elf.STT_FUNC || s.Size == 0 {
		t.Errorf("bump: type %v size %d, want a function with a size", elf.ST_TYPE(s.Info), s.Size)
	}
	want := []byte{0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88}
	if got := testenv.ELFBytes(t, exe, testenv.ELFSymbol(t, exe, "marker").Value, 8); !bytes.Equal(got, want) {
		t.Errorf("marker bytes % x, want % x", got, want)
	}
	readelf := testenv.NeedTool(t, "readelf", "binutils")
	out, err := exec.Command(readelf, "-h", exe).Output()
	if err != nil {
		t.Fatalf("readelf -h: %v", err)
	}
	_, rest, _ := strings.Cut(string(out), "Entry point address:")
	if f := strings.Fields(rest); len(f) == 0 || f[0] != fmt.Sprintf("%#x", testenv.ELFEntry(t, exe)) {
		t.Errorf("ELFEntry %#x; readelf -h says:\n%s", testenv.ELFEntry(t, exe), out)
	}
	if _, err := testenv.NM(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("NM of a missing file: no error")
	}
}

// TestNMSeesRebuild checks that the cache does not outlive a change to the file.
func TestNMSeesRebuild(t *testing.T) {
	exe := build(t)
	if _, ok := testenv.NMSymbols(t, exe)["counter"]; !ok {
		t.Fatal("no counter")
	}
	other := build(t)
	b, err := os.ReadFile("/bin/true")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(exe, b, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, ok := testenv.NMSymbols(t, exe, "-D")["counter"]; ok {
		t.Errorf("%s replaced by /bin/true still lists counter", exe)
	}
	if _, ok := testenv.NMSymbols(t, other)["counter"]; !ok {
		t.Error("second build has no counter")
	}
}

func TestProc(t *testing.T) {
	sh := testenv.NeedTool(t, "sh", "dash")
	// The child says when it runs (before its exec, /proc shows the parent's environment) and
	// then waits in the shell itself, reading its stdin: no further exec, during which /proc
	// would show no environment at all.
	cmd := exec.Command(sh, "-c", "echo ready; read line")
	cmd.Env = []string{"TESTENV_MARK=here", "EMPTY=", "PATH=/usr/bin:/bin"}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if _, err := bufio.NewReader(stdout).ReadString('\n'); err != nil {
		t.Fatalf("child: %v", err)
	}
	pid := cmd.Process.Pid
	defer cmd.Wait()
	defer cmd.Process.Kill()
	if v, ok := testenv.ProcEnv(pid, "TESTENV_MARK"); !ok || v != "here" {
		t.Errorf("ProcEnv TESTENV_MARK = %q, %v", v, ok)
	}
	if v, ok := testenv.ProcEnv(pid, "EMPTY"); !ok || v != "" {
		t.Errorf("ProcEnv EMPTY = %q, %v", v, ok)
	}
	if _, ok := testenv.ProcEnv(pid, "TESTENV"); ok {
		t.Error("ProcEnv matched a prefix of a name")
	}
	if v, err := testenv.ProcStatus(pid, "PPid"); err != nil || v != strconv.Itoa(os.Getpid()) {
		t.Errorf("ProcStatus PPid = %q, %v; want %d", v, err, os.Getpid())
	}
	if _, err := testenv.ProcStatus(pid, "NoSuchField"); err == nil {
		t.Error("ProcStatus of a missing field: no error")
	}
	cmd.Process.Kill()
	cmd.Wait()
	if _, err := testenv.ProcStatus(pid, "PPid"); err == nil {
		t.Error("ProcStatus of a reaped process: no error")
	}
	if _, ok := testenv.ProcEnv(pid, "TESTENV_MARK"); ok {
		t.Error("ProcEnv of a reaped process: set")
	}
}

func TestQEMUDir(t *testing.T) {
	t.Setenv("HPCDAP_QEMU_DIR", "/x/y")
	if d := testenv.QEMUDir(); d != "/x/y" {
		t.Errorf("QEMUDir with HPCDAP_QEMU_DIR = %s", d)
	}
	t.Setenv("HPCDAP_QEMU_DIR", "")
	t.Setenv("XDG_CACHE_HOME", "/c")
	if d := testenv.QEMUDir(); d != "/c/hpcdap/qemu/bin" {
		t.Errorf("QEMUDir with XDG_CACHE_HOME = %s", d)
	}
	dir := t.TempDir()
	t.Setenv("HPCDAP_QEMU_DIR", dir)
	emu := filepath.Join(dir, "qemu-test")
	if err := os.WriteFile(emu, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	if p := testenv.QEMUUser(t, "qemu-test"); p != emu {
		t.Errorf("QEMUUser = %s, want %s", p, emu)
	}
}
