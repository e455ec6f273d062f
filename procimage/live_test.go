package procimage_test

import (
	"bufio"
	"debug/elf"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/hpcdap/hpcdap/internal/testenv"
	"github.com/hpcdap/hpcdap/procimage"
)

// procMem reads a live process through /proc/PID/mem: the memory the package reads through.
type procMem struct{ f *os.File }

func (m procMem) ReadAt(p []byte, addr uint64) (int, error) { return m.f.ReadAt(p, int64(addr)) }

// startLinked builds testdata/linked.c as a PIE, runs it with libs to dlopen and returns its
// pid and executable once it has loaded them.
func startLinked(t *testing.T, libs ...string) (int, string) {
	t.Helper()
	gcc := testenv.NeedTool(t, "gcc", "gcc")
	exe := filepath.Join(t.TempDir(), "linked")
	if out, err := exec.Command(gcc, "-g", "-pie", "-fPIE", "-o", exe, "testdata/linked.c").CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	cmd := exec.Command(exe, libs...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	if line, err := bufio.NewReader(out).ReadString('\n'); line != "ready\n" {
		t.Fatalf("program said %q, %v", line, err)
	}
	return cmd.Process.Pid, exe
}

// gdbFacts attaches gdb to pid and returns its "info auxv" (key → value, and the strings it
// prints for string-valued keys) and "info sharedlibrary" (path → lowest .text address).
func gdbFacts(t *testing.T, pid int) (aux map[uint64]uint64, strs map[uint64]string, libs map[string]uint64) {
	t.Helper()
	gdb := testenv.NeedTool(t, "gdb", "gdb")
	out, err := exec.Command(gdb, "-batch", "-nx", "-p", strconv.Itoa(pid),
		"-ex", "info auxv", "-ex", "info sharedlibrary").CombinedOutput()
	if err != nil {
		t.Fatalf("gdb: %v\n%s", err, out)
	}
	auxLine := regexp.MustCompile(`^(\d+)\s+\S+\s.*?\s(0x[0-9a-f]+|\d+)(?:\s+"(.*)")?$`)
	libLine := regexp.MustCompile(`^(0x[0-9a-f]+)\s+0x[0-9a-f]+\s+Yes.*?\s(/\S+)$`)
	aux, strs, libs = map[uint64]uint64{}, map[uint64]string{}, map[string]uint64{}
	for _, line := range strings.Split(string(out), "\n") {
		if m := auxLine.FindStringSubmatch(line); m != nil {
			k, _ := strconv.ParseUint(m[1], 10, 64)
			v, err := strconv.ParseUint(m[2], 0, 64)
			if err != nil {
				t.Fatalf("gdb auxv line %q: %v", line, err)
			}
			aux[k] = v
			if m[3] != "" {
				strs[k] = m[3]
			}
		} else if m := libLine.FindStringSubmatch(line); m != nil {
			from, _ := strconv.ParseUint(m[1], 0, 64)
			libs[m[2]] = from
		}
	}
	if len(aux) < 10 || len(libs) < 2 {
		t.Fatalf("gdb printed %d auxv entries and %d libraries:\n%s", len(aux), len(libs), out)
	}
	return aux, strs, libs
}

// textAddr is the link-time address of a file's .text section.
func textAddr(t *testing.T, path string) uint64 {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s := f.Section(".text")
	if s == nil {
		t.Fatalf("%s has no .text", path)
	}
	return s.Addr
}

// TestLiveProcessAgainstGDB reads a live x86-64 process that dlopened a library: its auxv
// from /proc/PID/auxv, and its program headers, r_debug, link map and strings from its
// memory, and checks each against gdb attached to the same process (info auxv, info
// sharedlibrary) and against /proc/PID/maps.
func TestLiveProcessAgainstGDB(t *testing.T) {
	pid, exe := startLinked(t, "libz.so.1")
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/auxv")
	if err != nil {
		t.Fatal(err)
	}
	lay := procimage.Layout{Order: binary.LittleEndian, PtrSize: 8}
	aux, err := procimage.ParseAuxv(raw, lay)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/mem")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	im := procimage.Image{Mem: procMem{f}, Layout: lay}
	gAux, gStrs, gLibs := gdbFacts(t, pid)

	// The auxiliary vector: every entry gdb prints but AT_NULL, and nothing else.
	delete(gAux, procimage.AtNull)
	if len(aux) != len(gAux) {
		t.Errorf("%d auxv entries, gdb prints %d: %v vs %v", len(aux), len(gAux), aux, gAux)
	}
	for k, v := range gAux {
		if aux[k] != v {
			t.Errorf("auxv key %d = %#x, gdb says %#x", k, aux[k], v)
		}
	}
	// C strings: AT_EXECFN and AT_PLATFORM, as gdb prints them.
	for k, want := range gStrs {
		s, err := im.CString(aux[k], procimage.MaxPath)
		if err != nil || s != want {
			t.Errorf("string of auxv key %d at %#x = %q, %v; gdb says %q", k, aux[k], s, err, want)
		}
	}
	if len(gStrs) == 0 {
		t.Error("gdb printed no string-valued auxv entry")
	}

	// The program headers and the executable's bias: AT_ENTRY minus the file's entry point.
	ph, phAddr, err := im.ProgramHeaders(aux)
	if err != nil {
		t.Fatal(err)
	}
	ef, err := elf.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	if len(ph) != len(ef.Progs) {
		t.Fatalf("%d program headers, the file has %d", len(ph), len(ef.Progs))
	}
	for i, p := range ph {
		fp := ef.Progs[i]
		if p.Type != fp.Type || p.Vaddr != fp.Vaddr || p.Off != fp.Off || p.Memsz != fp.Memsz || p.Filesz != fp.Filesz {
			t.Errorf("program header %d = %+v, the file has %+v", i, p, fp.ProgHeader)
		}
	}
	bias, err := procimage.ProgramBias(phAddr, ph, lay)
	if err != nil || bias != aux.Entry()-ef.Entry || bias == 0 {
		t.Errorf("bias %#x, %v; AT_ENTRY − e_entry = %#x", bias, err, aux.Entry()-ef.Entry)
	}

	// r_debug: consistent, its r_ldbase is AT_BASE, r_brk is in the dynamic linker.
	dyn, ok := ef.Progs[0], false
	for _, p := range ef.Progs {
		if p.Type == elf.PT_DYNAMIC {
			dyn, ok = p, true
		}
	}
	if !ok {
		t.Fatal("no PT_DYNAMIC")
	}
	rdAddr, err := im.DebugAddr(bias+dyn.Vaddr, dyn.Memsz)
	if err != nil || rdAddr == 0 {
		t.Fatalf("DT_DEBUG = %#x, %v", rdAddr, err)
	}
	rd, err := im.RDebug(rdAddr)
	if err != nil {
		t.Fatal(err)
	}
	if rd.Version < 1 || rd.Changing() || rd.LdBase != aux[procimage.AtBase] || rd.Map == 0 {
		t.Errorf("r_debug = %+v; want a consistent map with r_ldbase = AT_BASE %#x", rd, aux[procimage.AtBase])
	}
	ldText := gLibs["/lib64/ld-linux-x86-64.so.2"]
	if ldText == 0 || rd.Brk < rd.LdBase || rd.Brk >= ldText+1<<20 {
		t.Errorf("r_brk %#x is not in the dynamic linker (loaded at %#x, text from %#x)", rd.Brk, rd.LdBase, ldText)
	}

	// The link map, through Objects: the executable first at its bias, then every library
	// gdb lists at the bias that puts its .text where gdb says.
	objs, err := im.Objects(aux, exe)
	if err != nil {
		t.Fatal(err)
	}
	if objs[0].Path != exe || objs[0].Bias != bias || objs[0].Dynamic != bias+dyn.Vaddr {
		t.Errorf("executable %+v, want %s at %#x with dynamic section %#x", objs[0], exe, bias, bias+dyn.Vaddr)
	}
	found := map[string]bool{}
	for _, o := range objs[1:] {
		from, ok := gLibs[o.Path]
		if !ok {
			if _, err := os.Stat(o.Path); err == nil {
				t.Errorf("object %s is a file gdb does not list", o.Path)
			}
			continue // the vdso
		}
		found[o.Path] = true
		if got := o.Bias + textAddr(t, o.Path); got != from {
			t.Errorf("%s: bias %#x puts .text at %#x, gdb says %#x", o.Path, o.Bias, got, from)
		}
	}
	for p := range gLibs {
		if !found[p] {
			t.Errorf("gdb lists %s, the link map read here does not", p)
		}
	}
	if !found["/lib/x86_64-linux-gnu/libz.so.1"] && !found["/usr/lib/x86_64-linux-gnu/libz.so.1"] {
		t.Errorf("the dlopened libz is missing from %+v", objs)
	}
	checkMaps(t, pid, objs)
}

// checkMaps checks every object with a file against /proc/PID/maps: the file is mapped at
// offset 0 at its load bias (true for PIE executables and shared objects, linked at 0).
func checkMaps(t *testing.T, pid int, objs []procimage.Object) {
	t.Helper()
	at, err := testenv.ProcMapStarts(pid)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		real, err := filepath.EvalSymlinks(o.Path)
		if err != nil {
			continue // the vdso
		}
		lo, ok := at[real]
		if !ok {
			lo, ok = at[o.Path]
		}
		if !ok || lo != o.Bias {
			t.Errorf("%s: bias %#x; /proc/%d/maps maps offset 0 at %#x (found %v)", o.Path, o.Bias, pid, lo, ok)
		}
	}
}

// execOut runs a command and returns its combined output.
func execOut(name string, args ...string) ([]byte, error) {
	return exec.Command(name, args...).CombinedOutput()
}
