package cfi

import (
	"bufio"
	"bytes"
	"debug/elf"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// amd64Names are readelf's names for x86-64 DWARF registers.
var amd64Names = []string{"rax", "rdx", "rcx", "rbx", "rsi", "rdi", "rbp", "rsp",
	"r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15", "rip"}

// loadTable parses the call frame sections of an ELF file.
func loadTable(t *testing.T, path string) (*Table, *elf.File) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	tab := NewTable()
	if s := f.Section(".eh_frame"); s != nil && s.Type != elf.SHT_NOBITS {
		data, err := s.Data()
		if err != nil {
			t.Fatal(err)
		}
		if err := tab.Parse(data, Options{EH: true, Addr: s.Addr, Order: f.ByteOrder, PtrSize: 8}); err != nil {
			t.Fatalf("%s .eh_frame: %v", path, err)
		}
	}
	if s := f.Section(".debug_frame"); s != nil && s.Type != elf.SHT_NOBITS {
		data, err := s.Data()
		if err != nil {
			t.Fatal(err)
		}
		if err := tab.Parse(data, Options{Order: f.ByteOrder, PtrSize: 8}); err != nil {
			t.Fatalf("%s .debug_frame: %v", path, err)
		}
	}
	tab.Sort()
	return tab, f
}

// readelfRow is one line of readelf's interpreted frame table.
type readelfRow struct {
	begin, end, loc uint64
	cfa             string
	cols            map[string]string
}

// readelfTables runs "readelf --debug-dump=frames-interp" and returns every FDE row it prints.
func readelfTables(t *testing.T, path string) []readelfRow {
	t.Helper()
	out, err := exec.Command("readelf", "--debug-dump=frames-interp", path).Output()
	if err != nil && len(out) == 0 {
		// readelf exits non-zero on warnings about other sections; only no output is fatal.
		t.Fatalf("readelf: %v", err)
	}
	var rows []readelfRow
	var begin, end uint64
	var cols []string
	inFDE := false
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		// Register rules print as "r10 (r10)": drop the parenthesised name.
		var fields []string
		for _, f := range strings.Fields(line) {
			if strings.HasPrefix(f, "(") && len(fields) > 0 {
				continue
			}
			fields = append(fields, f)
		}
		switch {
		case strings.Contains(line, " FDE ") && strings.Contains(line, "pc="):
			pc := line[strings.Index(line, "pc=")+3:]
			parts := strings.SplitN(pc, "..", 2)
			begin, _ = strconv.ParseUint(parts[0], 16, 64)
			end, _ = strconv.ParseUint(strings.Fields(parts[1])[0], 16, 64)
			inFDE = true
		case strings.Contains(line, " CIE"):
			inFDE = false
		case len(fields) >= 2 && fields[0] == "LOC" && fields[1] == "CFA":
			cols = fields[2:]
		case inFDE && len(fields) >= 2 && len(fields[0]) == 16:
			loc, err := strconv.ParseUint(fields[0], 16, 64)
			if err != nil {
				continue
			}
			r := readelfRow{begin: begin, end: end, loc: loc, cfa: fields[1], cols: map[string]string{}}
			for i, c := range cols {
				if 2+i < len(fields) {
					r.cols[c] = fields[2+i]
				}
			}
			rows = append(rows, r)
		}
	}
	return rows
}

// render writes a rule the way readelf prints it.
func render(r Rule) string {
	switch r.Kind {
	case RuleUndefined, RuleUnspecified:
		return "u"
	case RuleSameValue:
		return "s"
	case RuleOffset:
		return fmt.Sprintf("c%+d", r.Offset)
	case RuleValOffset:
		return fmt.Sprintf("v%+d", r.Offset)
	case RuleRegister:
		return fmt.Sprintf("r%d", r.Reg)
	case RuleExpression:
		return "exp"
	case RuleValExpression:
		return "vexp"
	}
	return "?"
}

// checkAgainstReadelf compares every row readelf interprets with RowAt at that address.
func checkAgainstReadelf(t *testing.T, path string, names []string) {
	tab, f := loadTable(t, path)
	defer f.Close()
	rows := readelfTables(t, path)
	if len(rows) == 0 {
		t.Fatalf("%s: readelf printed no frame rows", path)
	}
	regNum := func(name string, ra uint64) (uint64, bool) {
		if name == "ra" {
			return ra, true
		}
		for i, n := range names {
			if n == name {
				return uint64(i), true
			}
		}
		if strings.HasPrefix(name, "r") {
			n, err := strconv.ParseUint(name[1:], 10, 64)
			return n, err == nil
		}
		return 0, false
	}
	regName := func(n uint64) string {
		if int(n) < len(names) {
			return names[n]
		}
		return fmt.Sprintf("r%d", n)
	}
	bad := 0
	for _, r := range rows {
		fde := tab.Lookup(r.loc)
		if fde == nil || fde.Begin != r.begin || fde.End != r.end {
			t.Errorf("%s: %#x: FDE [%#x,%#x) not found", path, r.loc, r.begin, r.end)
			bad++
			continue
		}
		row, err := fde.RowAt(r.loc)
		if err != nil {
			t.Errorf("%s: %#x: %v", path, r.loc, err)
			bad++
			continue
		}
		cfa := "exp"
		if row.CFA.Expr == nil {
			cfa = fmt.Sprintf("%s%+d", regName(row.CFA.Reg), row.CFA.Offset)
		}
		if cfa != r.cfa {
			t.Errorf("%s: %#x: CFA %s, readelf %s", path, r.loc, cfa, r.cfa)
			bad++
		}
		for name, want := range r.cols {
			n, ok := regNum(name, row.RAReg)
			if !ok {
				continue
			}
			if got := render(row.Rule(n)); got != want {
				t.Errorf("%s: %#x: %s rule %s, readelf %s", path, r.loc, name, got, want)
				bad++
			}
		}
		if bad > 20 {
			t.Fatal("too many differences")
		}
	}
	t.Logf("%s: %d rows of %d FDEs agree with readelf", filepath.Base(path), len(rows), tab.Len())
}

func needTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("required tool %s not found in PATH", name)
	}
	return p
}

// TestAgainstReadelf checks the decoded rules of real binaries — x86-64 .eh_frame (with CFA
// expressions in the PLT and libc's signal trampoline), x86-64 .debug_frame, and big- and
// little-endian 64-bit Power — against binutils' own interpretation.
func TestAgainstReadelf(t *testing.T) {
	needTool(t, "readelf")
	src, _ := filepath.Abs("../testdata/crash/crash.c")
	builds := []struct {
		name, cc string
		flags    []string
		names    []string
	}{
		{"amd64-eh", "gcc", []string{"-O2", "-g"}, amd64Names},
		{"amd64-debugframe", "gcc", []string{"-O0", "-g", "-fno-asynchronous-unwind-tables"}, amd64Names},
		{"ppc64", "powerpc64-linux-gnu-gcc", []string{"-O2", "-g", "-static"}, nil},
		{"ppc64le", "powerpc64le-linux-gnu-gcc", []string{"-O0", "-g", "-static"}, nil},
	}
	for _, b := range builds {
		b := b
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			cc := needTool(t, b.cc)
			exe := filepath.Join(t.TempDir(), "crash")
			args := append(append([]string{}, b.flags...), "-o", exe, src)
			if out, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
				t.Fatalf("%s: %v\n%s", b.cc, err, out)
			}
			checkAgainstReadelf(t, exe, b.names)
		})
	}
	t.Run("libc", func(t *testing.T) {
		t.Parallel()
		checkAgainstReadelf(t, "/lib/x86_64-linux-gnu/libc.so.6", amd64Names)
	})
}
