package symbols

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
)

// TestRelativeCompileNames: a file compiled by a relative name (`gcc -c src/f.c`, as make
// does) is recorded relative to the compilation directory; an editor names it by its absolute
// path, and frames must name a file the editor can open.
func TestRelativeCompileNames(t *testing.T) {
	needTool(t, "gcc")
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(t.TempDir(), "prog")
	cmd := exec.Command("gcc", "-g", "-O0", "-o", exe, "testdata/c/prog.c")
	cmd.Dir = wd
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	b, err := Open(exe, nil)
	if err != nil {
		t.Fatal(err)
	}
	abs := filepath.Join(wd, "testdata/c/prog.c")
	line := mainLine(t, abs)
	for _, name := range []string{abs, "prog.c", "c/prog.c", "testdata/c/prog.c"} {
		locs, err := b.LineBreakpoints(name, line)
		if err != nil || len(locs) == 0 {
			t.Fatalf("LineBreakpoints(%q, %d) = %v, %v; want a location", name, line, locs, err)
		}
		l, ok := b.LineForPC(locs[0].Addr)
		if !ok || l.File != abs {
			t.Errorf("LineForPC of %q:%d = %+v, %v; want file %s", name, line, l, ok, abs)
		}
	}
	if !slices.Contains(b.SourceFiles(), abs) {
		t.Errorf("SourceFiles() = %v; want %s among them", b.SourceFiles(), abs)
	}
}

// mainLine is the line of the first statement of main in a C source.
func mainLine(t *testing.T, src string) int {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	line, inMain := 1, false
	for i, c := range data {
		if c != '\n' {
			continue
		}
		line++
		rest := data[i+1:]
		if len(rest) >= 9 && string(rest[:9]) == "int main(" {
			inMain = true
		} else if inMain && len(rest) > 0 && rest[0] == '\t' {
			return line
		}
	}
	t.Fatalf("%s: no main", src)
	return 0
}
