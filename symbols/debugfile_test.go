package symbols

import (
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// buildCrash compiles the small C test program with extra flags into dir.
func buildCrash(t *testing.T, dir, name string, flags ...string) string {
	t.Helper()
	needTool(t, "gcc")
	exe := filepath.Join(dir, name)
	src, _ := filepath.Abs("testdata/crash/crash.c")
	args := append(append([]string{"-g"}, flags...), "-o", exe, src)
	if out, err := exec.Command("gcc", args...).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	return exe
}

func run(t *testing.T, name string, args ...string) {
	t.Helper()
	needTool(t, name)
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
}

// sameView checks that two binaries give the same functions, line tables and breakpoint
// addresses (a stripped binary with its separate debug file against the original).
func sameView(t *testing.T, want, got *Binary) {
	t.Helper()
	if len(want.Functions()) == 0 || len(got.Functions()) != len(want.Functions()) {
		t.Fatalf("functions: want %d, got %d", len(want.Functions()), len(got.Functions()))
	}
	for i, f := range want.Functions() {
		g := got.Functions()[i]
		if f.Name != g.Name || f.Entry != g.Entry {
			t.Errorf("function %d: want %s@%#x, got %s@%#x", i, f.Name, f.Entry, g.Name, g.Entry)
		}
		wl, _ := want.LineForPC(f.Entry)
		gl, _ := got.LineForPC(f.Entry)
		if wl != gl {
			t.Errorf("%s: line want %+v, got %+v", f.Name, wl, gl)
		}
		wb, err1 := want.FunctionBreakpoints(f.Name)
		gb, err2 := got.FunctionBreakpoints(f.Name)
		if err1 != nil || err2 != nil || len(wb) != len(gb) || wb[0].Addr != gb[0].Addr {
			t.Errorf("%s: breakpoints want %v (%v), got %v (%v)", f.Name, wb, err1, gb, err2)
		}
	}
	// Unwinding needs the object's own .eh_frame, which stripping keeps.
	if got.frames.Len() != want.frames.Len() {
		t.Errorf("FDEs: want %d, got %d", want.frames.Len(), got.frames.Len())
	}
}

// TestSeparateDebugFile strips the debugging information into a separate file and finds it
// the ways gdb does: through .gnu_debuglink next to the object, and by build-id under a
// debug directory (with compressed debug sections).
func TestSeparateDebugFile(t *testing.T) {
	dir := t.TempDir()
	exe := buildCrash(t, dir, "prog")
	full, err := Open(exe, nil)
	if err != nil {
		t.Fatal(err)
	}
	debug := filepath.Join(dir, "prog.debug")
	run(t, "objcopy", "--only-keep-debug", exe, debug)

	t.Run("debuglink", func(t *testing.T) {
		stripped := filepath.Join(dir, "prog.stripped")
		run(t, "objcopy", "--strip-debug", "--add-gnu-debuglink="+debug, exe, stripped)
		b, err := Open(stripped, &Options{DebugDirs: []string{}})
		if err != nil {
			t.Fatal(err)
		}
		if b.DebugPath != debug {
			t.Fatalf("debug file %q, want %q", b.DebugPath, debug)
		}
		sameView(t, full, b)
	})

	t.Run("build-id", func(t *testing.T) {
		root := filepath.Join(dir, "debugroot")
		id := hex.EncodeToString(full.BuildID)
		if len(id) < 4 {
			t.Fatal("test binary has no build-id")
		}
		target := filepath.Join(root, ".build-id", id[:2], id[2:]+".debug")
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			t.Fatal(err)
		}
		run(t, "objcopy", "--compress-debug-sections=zlib", debug, target)
		stripped := filepath.Join(dir, "prog.nolink")
		run(t, "objcopy", "--strip-debug", exe, stripped)
		b, err := Open(stripped, &Options{DebugDirs: []string{root}})
		if err != nil {
			t.Fatal(err)
		}
		if b.DebugPath != target {
			t.Fatalf("debug file %q, want %q", b.DebugPath, target)
		}
		sameView(t, full, b)
		// The cache finds the same binary by build-id alone.
		c := NewCache(&Options{DebugDirs: []string{root}})
		viaID, err := c.OpenBuildID(id)
		if err != nil {
			t.Fatal(err)
		}
		if len(viaID.Functions()) != len(full.Functions()) {
			t.Errorf("by build-id: %d functions, want %d", len(viaID.Functions()), len(full.Functions()))
		}
	})
}

// TestCacheSharesBinaries checks that a binary is indexed once per build-id however it is
// reached: the same path, another copy of the file, many goroutines at once.
func TestCacheSharesBinaries(t *testing.T) {
	dir := t.TempDir()
	exe := buildCrash(t, dir, "prog")
	copyPath := filepath.Join(dir, "copy")
	data, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(copyPath, data, 0o755); err != nil {
		t.Fatal(err)
	}
	c := NewCache(nil)
	var wg sync.WaitGroup
	got := make([]*Binary, 64)
	for i := range got {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			p := exe
			if i%2 == 1 {
				p = copyPath
			}
			b, err := c.Open(p)
			if err != nil {
				t.Error(err)
				return
			}
			got[i] = b
		}(i)
	}
	wg.Wait()
	for i, b := range got {
		if b != got[0] {
			t.Fatalf("open %d returned a different Binary", i)
		}
	}
	// Without a build-id, files are told apart by identity.
	noid := buildCrash(t, dir, "noid", "-Wl,--build-id=none")
	b1, err := c.Open(noid)
	if err != nil {
		t.Fatal(err)
	}
	if b1 == got[0] || b1.BuildID != nil {
		t.Fatal("binary without build-id shared an entry")
	}
	b2, _ := c.Open(noid)
	if b1 != b2 {
		t.Fatal("same file opened twice gave two Binaries")
	}
}
