//go:build linux && amd64

package arch_test

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/hpcdap/hpcdap/arch"
	"github.com/hpcdap/hpcdap/internal/testenv"
)

// coreNotes returns the register-set notes of the first thread of a core file: NT_PRSTATUS's
// pr_reg and NT_PRFPREG.
func coreNotes(t *testing.T, path string) (gp, fp []byte) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type != elf.PT_NOTE {
			continue
		}
		b := make([]byte, p.Filesz)
		if _, err := p.ReadAt(b, 0); err != nil {
			t.Fatal(err)
		}
		for len(b) >= 12 {
			namesz, descsz, typ := binary.LittleEndian.Uint32(b), binary.LittleEndian.Uint32(b[4:]), binary.LittleEndian.Uint32(b[8:])
			off := 12 + (int(namesz)+3)&^3
			desc := b[off : off+int(descsz)]
			switch {
			case typ == uint32(elf.NT_PRSTATUS) && gp == nil:
				gp = desc[112:] // struct elf_prstatus: pr_reg follows 112 bytes of process facts
			case typ == uint32(elf.NT_FPREGSET) && fp == nil:
				fp = desc
			}
			b = b[off+(int(descsz)+3)&^3:]
		}
	}
	if gp == nil || fp == nil {
		t.Fatalf("%s: no NT_PRSTATUS or NT_PRFPREG note", path)
	}
	return gp, fp
}

// TestRegistersMatchGDB stops a program under gdb, has gdb write a core file of the stop and
// print every register, and checks that the x86-64 register table reads each register from
// the core file's native sets as gdb shows it.
func TestRegistersMatchGDB(t *testing.T) {
	gdb := testenv.NeedTool(t, "gdb", "gdb")
	dir := t.TempDir()
	exe := filepath.Join(dir, "regs")
	if err := testenv.Build("gcc", "gcc", "-O1", "-g", "-o", exe, filepath.Join("testdata", "regs.c")); err != nil {
		t.Fatal(err)
	}
	a, err := arch.For(elf.EM_X86_64, binary.LittleEndian)
	if err != nil {
		t.Fatal(err)
	}
	core := filepath.Join(dir, "core")
	script := []string{"set startup-with-shell off", "break stop_here", "run", "gcore " + core}
	for _, r := range a.Registers {
		switch {
		case strings.HasPrefix(r.Name, "xmm"):
			script = append(script, "echo "+r.Name+"\\n", fmt.Sprintf("p/x $%s.uint128", r.Name))
		case strings.HasPrefix(r.Name, "st"):
			script = append(script, "info registers "+r.Name)
		default:
			script = append(script, fmt.Sprintf("printf \"%s %%#lx\\n\", $%s", r.Name, r.Name))
		}
	}
	cmds := filepath.Join(dir, "cmds")
	if err := os.WriteFile(cmds, []byte(strings.Join(script, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(gdb, "-batch", "-nx", "-x", cmds, exe).CombinedOutput()
	if err != nil {
		t.Fatalf("gdb: %v\n%s", err, out)
	}
	// gdb's values by register name, as hex without 0x.
	want := map[string]string{}
	var pending string
	plain := regexp.MustCompile(`^([a-z0-9_]+) (?:0x)?([0-9a-f]+)$`)
	xmmName := regexp.MustCompile(`^(xmm\d+)$`)
	u128 := regexp.MustCompile(`^\$\d+ = 0x([0-9a-f]+)$`)
	st := regexp.MustCompile(`^(st\d)\s.*\(raw 0x([0-9a-f]+)\)$`)
	for _, line := range strings.Split(string(out), "\n") {
		switch m := plain.FindStringSubmatch(line); {
		case m != nil:
			want[m[1]] = m[2]
			continue
		}
		if m := xmmName.FindStringSubmatch(line); m != nil {
			pending = m[1]
		} else if m := u128.FindStringSubmatch(line); m != nil && pending != "" {
			want[pending], pending = m[1], ""
		} else if m := st.FindStringSubmatch(line); m != nil {
			want[m[1]] = m[2]
		}
	}
	gp, fp := coreNotes(t, core)
	nonzero := 0
	for _, r := range a.Registers {
		w, ok := want[r.Name]
		if !ok {
			t.Errorf("gdb did not show %s", r.Name)
			continue
		}
		src := gp
		if r.Set == arch.Float {
			src = fp
		}
		b := src[r.Off : r.Off+r.Size]
		// Little-endian bytes to a number, as gdb prints it.
		le := make([]byte, len(b))
		for i := range b {
			le[len(b)-1-i] = b[i]
		}
		got := new(big.Int).SetBytes(le)
		wantN, _ := new(big.Int).SetString(w, 16)
		if wantN == nil || got.Cmp(wantN) != 0 {
			t.Errorf("%s (offset %d in set %d, %d bytes): table reads %#x, gdb shows 0x%s", r.Name, r.Off, r.Set, r.Size, got, w)
		}
		if got.Sign() != 0 {
			nonzero++
		}
	}
	if nonzero < len(a.Registers)/2 {
		t.Errorf("only %d of %d registers are non-zero: the stop does not exercise the table", nonzero, len(a.Registers))
	}
	// The registers the description singles out are the ones gdb calls so.
	for _, c := range []struct {
		n    int
		name string
	}{{a.PCReg, "rip"}, {a.SPReg, "rsp"}, {a.FPReg, "rbp"}, {a.TPReg, "fs_base"}} {
		if got := a.RegName(c.n); got != c.name {
			t.Errorf("DWARF %d is %q, want %q", c.n, got, c.name)
		}
	}
	if !bytes.Equal(a.Trap(), []byte{0xcc}) {
		t.Errorf("trap %x", a.Trap())
	}
}

// TestDWARFNumbersMatchReadelf checks the x86-64 DWARF register names against GNU readelf's,
// over every register the CFI of the C library and the dynamic linker names.
func TestDWARFNumbersMatchReadelf(t *testing.T) {
	readelf := testenv.NeedTool(t, "readelf", "binutils")
	a, err := arch.For(elf.EM_X86_64, binary.LittleEndian)
	if err != nil {
		t.Fatal(err)
	}
	pair := regexp.MustCompile(`\br(\d+) \(([a-z0-9_.]+)\)`)
	seen := map[int]string{}
	for _, lib := range []string{"/lib/x86_64-linux-gnu/libc.so.6", "/lib64/ld-linux-x86-64.so.2"} {
		// readelf exits 1 on the stripped libraries (it finds no .debug_frame) after it has
		// printed .eh_frame.
		out, err := exec.Command(readelf, "--debug-dump=frames", lib).Output()
		if !bytes.Contains(out, []byte("Contents of the .eh_frame section")) {
			t.Fatalf("readelf %s: %v\n%s", lib, err, out)
		}
		for _, m := range pair.FindAllStringSubmatch(string(out), -1) {
			var n int
			fmt.Sscan(m[1], &n)
			seen[n] = m[2]
		}
	}
	if len(seen) < 17 {
		t.Fatalf("the CFI names only %d registers: %v", len(seen), seen)
	}
	for n, name := range seen {
		if got := a.RegName(n); got != name {
			t.Errorf("DWARF register %d: arch names it %q, readelf %q", n, got, name)
		}
		if got, ok := a.RegNum(name); !ok || got != n {
			t.Errorf("register %q: arch numbers it %d (%v), readelf %d", name, got, ok, n)
		}
	}
}
