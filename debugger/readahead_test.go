package debugger

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/hpcdap/hpcdap/internal/testenv"
	"github.com/hpcdap/hpcdap/launch"
	"github.com/hpcdap/hpcdap/symbols"
)

// readAhead reads a launched program and the libraries the dynamic linker will load for it,
// with the launch's own library path: added, removed, or relative to the launch directory.
func TestReadAhead(t *testing.T) {
	cc := testenv.NeedTool(t, "cc", "gcc")
	dir := t.TempDir()
	libDir := filepath.Join(dir, "lib")
	if err := os.Mkdir(libDir, 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(name, src string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	run := func(args ...string) {
		if out, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
			t.Fatalf("%s %v: %v\n%s", cc, args, err, out)
		}
	}
	run("-g", "-shared", "-fPIC", "-o", filepath.Join(libDir, "libahead.so"), write("ahead.c", "int ahead(int x) { return x + 1; }\n"))
	prog := filepath.Join(dir, "prog")
	run("-g", "-o", prog, write("prog.c", "int ahead(int);\nint main(void) { return ahead(1); }\n"), "-L"+libDir, "-lahead")

	// Without libc's separate debugging information only the two test binaries have DWARF:
	// the number of indexes built says which of them were read.
	noDebug := &symbols.Options{DebugDirs: []string{}}
	for _, c := range []struct {
		name  string
		req   launch.Request
		setLD bool // LD_LIBRARY_PATH set in this process's environment
		want  int
	}{
		{"library path in the launch", launch.Request{Program: prog, Env: []string{"LD_LIBRARY_PATH=" + libDir}}, false, 2},
		{"library path inherited", launch.Request{Program: prog}, true, 2},
		{"library path removed", launch.Request{Program: prog, Unset: []string{"LD_LIBRARY_PATH"}}, true, 1},
		{"no library path", launch.Request{Program: prog}, false, 1},
		{"program relative to the launch directory", launch.Request{Program: "prog", Dir: dir, Env: []string{"LD_LIBRARY_PATH=" + libDir}}, false, 2},
		{"no such program", launch.Request{Program: filepath.Join(dir, "none")}, false, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.setLD {
				t.Setenv("LD_LIBRARY_PATH", libDir)
			} else {
				t.Setenv("LD_LIBRARY_PATH", "")
				os.Unsetenv("LD_LIBRARY_PATH")
			}
			cache := symbols.NewCache(noDebug)
			readAhead(cache, c.req, nil)
			if built, _ := cache.IndexStats(); built != c.want {
				t.Errorf("%d binaries with debugging information read, want %d", built, c.want)
			}
		})
	}
}
