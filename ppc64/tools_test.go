package ppc64

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// Cross tools, by target. Each comes from a Debian package named in the failure message.
type crossArch struct {
	name    string // be or le
	prefix  string // tool prefix
	pkg     string // Debian package of binutils
	gccPkg  string // Debian package of gcc
	objdump string
}

var (
	archBE = crossArch{name: "be", prefix: "powerpc64-linux-gnu-", pkg: "binutils-powerpc64-linux-gnu", gccPkg: "gcc-powerpc64-linux-gnu"}
	archLE = crossArch{name: "le", prefix: "powerpc64le-linux-gnu-", pkg: "binutils-powerpc64le-linux-gnu", gccPkg: "gcc-powerpc64le-linux-gnu"}
)

// tool returns the path of a cross tool, failing the test with the package to install.
func (a crossArch) tool(t testing.TB, name string) string {
	t.Helper()
	pkg := a.pkg
	if name == "gcc" {
		pkg = a.gccPkg
	}
	p, err := exec.LookPath(a.prefix + name)
	if err != nil {
		t.Fatalf("%s%s not found: install the Debian package %s", a.prefix, name, pkg)
	}
	return p
}

// run runs a command and returns its standard output, failing the test on error.
func run(t testing.TB, name string, args ...string) []byte {
	t.Helper()
	var stderr bytes.Buffer
	cmd := exec.Command(name, args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, stderr.String())
	}
	return out
}

// compile builds C source with the cross compiler into dir and returns the executable.
func (a crossArch) compile(t testing.TB, dir, name, src string, flags ...string) string {
	t.Helper()
	c := filepath.Join(dir, name+".c")
	if err := os.WriteFile(c, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(dir, name)
	run(t, a.tool(t, "gcc"), append(append([]string{}, flags...), "-o", exe, c)...)
	return exe
}

// assemble assembles source with the cross assembler and returns the object file.
func (a crossArch) assemble(t testing.TB, dir, name, src string) string {
	t.Helper()
	s := filepath.Join(dir, name+".s")
	if err := os.WriteFile(s, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	obj := filepath.Join(dir, name+".o")
	run(t, a.tool(t, "as"), "-mpower9", "-o", obj, s)
	return obj
}

var (
	objdumpLine = regexp.MustCompile(`^\s*([0-9a-f]+):\t((?:[0-9a-f]{2} )+)\s*\t?(.*)$`)
	// objdump writes a direct branch target as "ADDR <symbol+off>"; GNU syntax elsewhere (and
	// ppc64asm) writes "0xADDR". This is the one operand spelling normalised.
	objdumpTarget = regexp.MustCompile(`\b([0-9a-f]+) <[^>]*>`)
)

// objdumpText disassembles file with objdump and returns the text of each instruction by
// address, with whitespace collapsed and branch targets written as 0xADDR.
func (a crossArch) objdumpText(t testing.TB, file string, args ...string) map[uint64]string {
	t.Helper()
	out := run(t, a.tool(t, "objdump"), append(append([]string{"-d", "-z", "-w"}, args...), file)...)
	m := make(map[uint64]string)
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		f := objdumpLine.FindStringSubmatch(sc.Text())
		if f == nil {
			continue
		}
		addr, _ := strconv.ParseUint(f[1], 16, 64)
		text := objdumpTarget.ReplaceAllString(f[3], "0x$1")
		m[addr] = strings.Join(strings.Fields(text), " ")
	}
	return m
}
