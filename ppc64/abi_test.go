package ppc64

import (
	"bufio"
	"bytes"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// abiSource has functions with and without TOC use, called directly and through pointers.
const abiSource = `#include <stdio.h>
int counter;
__attribute__((noinline)) int add(int a, int b) { return a + b; }
__attribute__((noinline)) int uses_global(int a) { counter += a; return counter; }
__attribute__((noinline)) void say(const char *s) { puts(s); }
static __attribute__((noinline)) int local_helper(int x) { return x * 7 + counter; }
int (*fp)(int, int) = add;
int main(int argc, char **argv) {
	say("hi");
	return fp(argc, 2) + uses_global(argc) + local_helper(argc);
}
`

// abiBuilds are the executables the ABI tests resolve: static and PIE, both byte orders.
var abiBuilds = []struct {
	arch  crossArch
	flags []string
	abi   ABI
}{
	{archBE, []string{"-O0", "-static"}, ELFv1},
	{archBE, []string{"-O2", "-fPIE", "-pie"}, ELFv1},
	{archLE, []string{"-O0", "-static"}, ELFv2},
	{archLE, []string{"-O2", "-fPIE", "-pie"}, ELFv2},
}

var (
	// objdump labels ELFv1 code with synthetic dot symbols: "0000000010000994 <.main>:".
	dotLabel = regexp.MustCompile(`^([0-9a-f]+) <\.([^>+]+)>:$`)
	// readelf -sW: "  1554: 0000000010000940   128 FUNC    GLOBAL DEFAULT [<localentry>: 8]     5 main"
	readelfSym = regexp.MustCompile(`^\s*\d+: ([0-9a-f]+)\s+(\d+) FUNC\s+\S+\s+\S+(?: \[<localentry>: (\d+)\])?\s+(\S+)\s+(\S+)$`)
	// readelf -h: "  Flags:                             0x1, abiv1"
	readelfFlags = regexp.MustCompile(`Flags:\s+0x[0-9a-f]+, abiv(\d)`)
)

// TestResolverAgainstBinutils resolves every function symbol of real executables and checks
// ELFv1 descriptors against objdump's dot-symbol labels (the code addresses binutils reads from
// .opd) and ELFv2 entries against readelf's st_value and [<localentry>: N].
func TestResolverAgainstBinutils(t *testing.T) {
	for _, b := range abiBuilds {
		name := b.arch.name + strings.Join(b.flags, "")
		t.Run(name, func(t *testing.T) {
			exe := b.arch.compile(t, t.TempDir(), "prog", abiSource, b.flags...)
			fh, err := os.Open(exe)
			if err != nil {
				t.Fatal(err)
			}
			defer fh.Close()
			r, err := NewResolver(fh)
			if err != nil {
				t.Fatal(err)
			}
			hdr := run(t, b.arch.tool(t, "readelf"), "-hW", exe)
			m := readelfFlags.FindSubmatch(hdr)
			if m == nil {
				t.Fatalf("readelf -h shows no abiv flag:\n%s", hdr)
			}
			if want := map[string]ABI{"1": ELFv1, "2": ELFv2}[string(m[1])]; r.ABI() != want || want != b.abi {
				t.Fatalf("ABI %v, readelf abiv%s", r.ABI(), m[1])
			}
			funcs, err := r.Funcs()
			if err != nil {
				t.Fatal(err)
			}
			byName := make(map[string][]Entry)
			for _, e := range funcs {
				byName[e.Name] = append(byName[e.Name], e)
			}
			// find returns the entry of the symbol called name whose global entry is global.
			find := func(name string, global uint64) (Entry, bool) {
				for _, e := range byName[name] {
					if e.Global == global {
						return e, true
					}
				}
				return Entry{}, false
			}
			checked := 0
			switch r.ABI() {
			case ELFv1:
				out := run(t, b.arch.tool(t, "objdump"), "-d", exe)
				sc := bufio.NewScanner(bytes.NewReader(out))
				for sc.Scan() {
					f := dotLabel.FindStringSubmatch(sc.Text())
					if f == nil {
						continue
					}
					code, _ := strconv.ParseUint(f[1], 16, 64)
					if len(byName[f[2]]) == 0 {
						continue // objdump labels every .opd entry; this one has no symbol
					}
					e, ok := find(f[2], code)
					if !ok {
						t.Errorf("objdump <.%s> at %#x: no symbol %s resolves there", f[2], code, f[2])
						continue
					}
					if e.Local != code || e.Breakpoint() != code {
						t.Errorf("%s: local entry %#x, objdump <.%s> at %#x", f[2], e.Local, f[2], code)
					}
					if e.Descriptor == 0 || e.TOC == 0 {
						t.Errorf("%s: descriptor %#x, TOC %#x", f[2], e.Descriptor, e.TOC)
					}
					checked++
				}
				pe, err := r.ProgramEntry()
				if err != nil {
					t.Fatal(err)
				}
				start, err := r.Lookup("_start")
				if err != nil {
					t.Fatal(err)
				}
				if pe != start.Global || pe == r.File().Entry {
					t.Errorf("program entry %#x, _start %#x, e_entry %#x", pe, start.Global, r.File().Entry)
				}
			case ELFv2:
				out := run(t, b.arch.tool(t, "readelf"), "-sW", exe)
				sc := bufio.NewScanner(bytes.NewReader(out))
				locals := 0
				for sc.Scan() {
					f := readelfSym.FindStringSubmatch(sc.Text())
					if f == nil || f[4] == "UND" {
						continue
					}
					value, _ := strconv.ParseUint(f[1], 16, 64)
					off := uint64(0)
					if f[3] != "" {
						off, _ = strconv.ParseUint(f[3], 10, 64)
						locals++
					}
					e, ok := find(f[5], value)
					if !ok {
						t.Errorf("readelf %s at %#x: not resolved", f[5], value)
						continue
					}
					if e.Local != value+off {
						t.Errorf("%s: local entry %#x, readelf %#x + %d", f[5], e.Local, value, off)
					}
					checked++
				}
				if locals == 0 {
					t.Error("no function with a local entry point was checked")
				}
				if pe, _ := r.ProgramEntry(); pe != r.File().Entry {
					t.Errorf("ELFv2 program entry %#x, e_entry %#x", pe, r.File().Entry)
				}
			}
			if checked < 5 {
				t.Fatalf("only %d functions checked", checked)
			}
			for _, fn := range []string{"main", "add", "uses_global", "say"} {
				if _, err := r.Lookup(fn); err != nil {
					t.Error(err)
				}
			}
			if _, err := r.Lookup("counter"); err == nil {
				t.Error("Lookup of a data symbol succeeded")
			}
			t.Logf("%s: %d function entries agree with binutils", name, checked)
		})
	}
}

// TestLocalEntryOffset checks the st_other decoding against the ELFv2 ABI's table.
func TestLocalEntryOffset(t *testing.T) {
	want := []uint64{0, 0, 4, 8, 16, 32, 64}
	for v, w := range want {
		got, err := LocalEntryOffset(uint8(v<<5 | 3)) // visibility bits must not matter
		if err != nil || got != w {
			t.Errorf("field %d: %d, %v; want %d", v, got, err, w)
		}
	}
	if _, err := LocalEntryOffset(7 << 5); err == nil {
		t.Error("reserved field 7 accepted")
	}
}

// TestReadABIErrors checks that non-ppc64 and non-ELF files get clear errors.
func TestReadABIErrors(t *testing.T) {
	self, err := os.Open("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	defer self.Close()
	if _, err := ReadABI(self); err == nil || !strings.Contains(err.Error(), "EM_PPC64") {
		t.Errorf("host executable: %v", err)
	}
	if _, err := ReadABI(strings.NewReader("not an ELF file at all, but long enough to read a header from it....")); err == nil {
		t.Error("text accepted as ELF")
	}
	if _, err := NewResolver(strings.NewReader("short")); err == nil {
		t.Error("short file accepted")
	}
	if _, err := ParseDescriptor(make([]byte, 23), nil); err == nil {
		t.Error("short descriptor accepted")
	}
}
