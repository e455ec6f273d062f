package symbols

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

type gdbLoc struct {
	Addr uint64 `json:"addr"`
	Line int    `json:"line"`
}

type gdbLocs struct {
	Loc   string   `json:"loc"`
	Addrs []gdbLoc `json:"addrs"`
}

type gdbPC struct {
	PC    uint64 `json:"pc"`
	Line  int    `json:"line"`
	File  string `json:"file"`
	Start uint64 `json:"start"`
	End   uint64 `json:"end"`
}

type gdbLines struct {
	Lines     []gdbLocs `json:"lines"`
	Functions []gdbLocs `json:"functions"`
	PCs       []gdbPC   `json:"pcs"`
}

// lineVariants are the builds whose line tables are checked statically: each language at -O0
// and -O2, a non-PIE executable, DWARF 4 and compressed debug sections.
var lineVariants = []struct {
	name, prog string
	flags      []string
	gdb        string // the debugger to ask ("gdb" when empty)
}{
	{"ppc64-O0", "crash-ppc64", []string{"-g", "-O0", "-static"}, "gdb-multiarch"},
	{"ppc64-O2", "crash-ppc64", []string{"-g", "-O2", "-static"}, "gdb-multiarch"},
	{"ppc64le-O0", "crash-ppc64le", []string{"-g", "-O0", "-static"}, "gdb-multiarch"},
	{"ppc64le-O2", "crash-ppc64le", []string{"-g", "-O2", "-static"}, "gdb-multiarch"},
	{"c-O0", "c", []string{"-g", "-O0"}, ""},
	{"c-O2", "c", []string{"-g", "-O2"}, ""},
	{"c-O0-nopie", "c", []string{"-g", "-O0", "-no-pie"}, ""},
	{"c-O2-dwarf4", "c", []string{"-g", "-O2", "-gdwarf-4"}, ""},
	{"c-O0-gz", "c", []string{"-g", "-O0", "-gz"}, ""},
	{"cpp-O0", "cpp", []string{"-g", "-O0"}, ""},
	{"cpp-O2", "cpp", []string{"-g", "-O2"}, ""},
	{"fortran-O0", "fortran", []string{"-g", "-O0"}, ""},
	{"fortran-O2", "fortran", []string{"-g", "-O2"}, ""},
}

// TestLinesAgainstGDB compares, without running the programs, where gdb and the package
// place a breakpoint for every source line and every function, and which line gdb and the
// package give for every line-table address (and the byte after it).
func TestLinesAgainstGDB(t *testing.T) {
	for _, v := range lineVariants {
		v := v
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			dbg := v.gdb
			if dbg == "" {
				dbg = "gdb"
			}
			gdb := needTool(t, dbg)
			b := buildProgram(t, v.prog, v.flags...)
			bin, err := testCache.Open(b.exe)
			if err != nil {
				t.Fatal(err)
			}
			src, _ := os.ReadFile(b.src)
			nlines := strings.Count(string(src), "\n") + 1
			base := filepath.Base(b.src)
			spec := map[string]any{}
			var locs []string
			for i := 1; i <= nlines; i++ {
				locs = append(locs, fmt.Sprintf("%s:%d", base, i))
			}
			spec["lines"] = locs
			var fns []string
			seen := map[string]bool{}
			for _, f := range bin.Functions() {
				if f.Name == "" || seen[f.Name] || strings.ContainsAny(f.Name, " (),~") || strings.HasPrefix(f.Name, "_") {
					continue
				}
				if f.cu.Name == "" || filepath.Base(f.cu.Name) != base {
					continue
				}
				seen[f.Name] = true
				fns = append(fns, f.Name)
			}
			sort.Strings(fns)
			spec["functions"] = fns
			pcs := statementAddrs(bin, b.src)
			spec["pcs"] = pcs
			dir := t.TempDir()
			var out gdbLines
			runGDB(t, gdb, "lines", dir, spec, &out, b.exe)

			var agr agreement
			for _, g := range out.Lines {
				line := 0
				fmt.Sscanf(g.Loc[len(base)+1:], "%d", &line)
				got, err := bin.LineBreakpoints(b.src, line)
				compareLocs(&agr, g, got, err)
			}
			for _, g := range out.Functions {
				got, err := bin.FunctionBreakpoints(g.Loc)
				compareLocs(&agr, g, got, err)
			}
			for _, g := range out.PCs {
				l, ok := bin.LineForPC(g.PC)
				if g.Line == 0 {
					agr.check(!ok, "pc %#x: gdb no line, got %s:%d", g.PC, l.File, l.Line)
					continue
				}
				agr.check(ok && l.Line == g.Line && l.File == g.File && l.Addr == g.Start,
					"pc %#x: gdb %s:%d [%#x,%#x), got %s:%d [%#x,%#x)", g.PC, filepath.Base(g.File), g.Line,
					g.Start, g.End, filepath.Base(l.File), l.Line, l.Addr, l.End)
			}
			t.Logf("agreement %s: %d/%d = %.1f%% (%d lines, %d functions, %d addresses)", v.name, agr.ok, agr.total,
				100*agr.rate(), len(out.Lines), len(out.Functions), len(out.PCs))
			for _, m := range agr.misses {
				t.Logf("  differs: %s", m)
			}
			if agr.rate() < 1 {
				t.Errorf("line-table agreement with gdb %.1f%% is below 100%%", 100*agr.rate())
			}
		})
	}
}

func compareLocs(agr *agreement, g gdbLocs, got []Location, err error) {
	if len(g.Addrs) == 0 {
		agr.check(err != nil, "%s: gdb finds no location, got %v", g.Loc, got)
		return
	}
	var want, have []string
	for _, a := range g.Addrs {
		want = append(want, fmt.Sprintf("%#x", a.Addr))
	}
	for _, l := range got {
		have = append(have, fmt.Sprintf("%#x", l.Addr))
	}
	sort.Strings(want)
	sort.Strings(have)
	agr.check(err == nil && strings.Join(want, " ") == strings.Join(have, " "), "%s: gdb %v, got %v (err %v)",
		g.Loc, want, have, err)
}

// statementAddrs lists every address named by the line tables of src's compile units, and
// the byte after each, as probes for pc-to-line lookups.
func statementAddrs(b *Binary, src string) []uint64 {
	seen := map[uint64]bool{}
	var out []uint64
	for _, cu := range b.files[src] {
		lt, err := cu.lineTable()
		if err != nil {
			continue
		}
		for _, f := range lt.files {
			for _, e := range f.entries {
				for _, pc := range []uint64{e.addr, e.addr + 1} {
					if !seen[pc] {
						seen[pc] = true
						out = append(out, pc)
					}
				}
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}
