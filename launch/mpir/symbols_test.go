package mpir

import (
	"debug/elf"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hpcdap/hpcdap/internal/testenv"
)

// The MPIR symbols of Open MPI's libopen-rte and of srun come from .dynsym and equal what
// nm -D reports; orterun itself defines none.
func TestLookupFileMatchesNm(t *testing.T) {
	need(t, ompiProg)
	srun := testenv.NeedTool(t, "srun", "slurm-client")
	rte := libPath(t, ompiProg, "libopen-rte.so")
	for _, c := range []struct {
		path     string
		required []string
	}{
		{rte, []string{SymBreakpoint, SymBeingDebugged, SymDebugState, SymProctable, SymProctableSize}},
		{srun, []string{SymBreakpoint, SymBeingDebugged, SymDebugState, SymProctable, SymProctableSize,
			SymTotalviewJobID, SymTotalviewStepID}},
	} {
		fs, err := LookupFile(c.path)
		if err != nil {
			t.Fatalf("LookupFile(%s): %v", c.path, err)
		}
		if fs.Source != SourceDynsym || !fs.Has() {
			t.Errorf("%s: source %q, complete %v; want .dynsym and complete", c.path, fs.Source, fs.Has())
		}
		nm := testenv.NMSymbols(t, c.path, "-D", "--defined-only")
		for _, name := range c.required {
			want, ok := nm[name]
			if !ok {
				t.Errorf("%s: nm -D does not list %s", c.path, name)
				continue
			}
			if got, ok := fs.Values[name]; !ok || got != want {
				t.Errorf("%s: %s = %#x (found %v), nm -D says %#x", c.path, name, got, ok, want)
			}
		}
		// Nothing that nm does not see.
		for name, v := range fs.Values {
			if nm[name] != v {
				t.Errorf("%s: %s = %#x not in nm -D (%#x)", c.path, name, v, nm[name])
			}
		}
	}
	orterun := testenv.NeedTool(t, "orterun", "openmpi-bin")
	if _, err := LookupFile(orterun); !errors.Is(err, ErrNoSymbols) {
		t.Errorf("LookupFile(orterun) = %v, want ErrNoSymbols (the symbols live in libopen-rte)", err)
	}
}

// Debian's mpiexec.hydra exports nothing; its offsets come from the known-builds table, keyed
// by the build ID that readelf reports.
func TestLookupFileHydraKnownBuild(t *testing.T) {
	hydra := testenv.NeedTool(t, "mpiexec.hydra", "mpich")
	if n := len(nmDynamicMatching(t, hydra, "MPIR")); n != 0 {
		t.Fatalf("nm -D lists %d MPIR symbols in %s: the known-builds path is not needed", n, hydra)
	}
	out, err := exec.Command("readelf", "-n", hydra).Output()
	if err != nil {
		t.Fatalf("readelf -n: %v (install binutils)", err)
	}
	var id string
	for _, line := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "Build ID: "); ok {
			id = v
		}
	}
	fs, err := LookupFile(hydra)
	if err != nil {
		t.Fatalf("LookupFile(%s) (build ID %s): %v; the known-builds table must gain this build", hydra, id, err)
	}
	if fs.BuildID != id || fs.Source != SourceKnownBuild || !fs.Has() {
		t.Errorf("build %q source %q complete %v; readelf says build %q", fs.BuildID, fs.Source, fs.Has(), id)
	}
	// The breakpoint offset must be the start of a function in .text: `xor %eax,%eax; ret`.
	f, err := elf.Open(hydra)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	text := f.Section(".text")
	bp := fs.Values[SymBreakpoint]
	if bp < text.Addr || bp >= text.Addr+text.Size {
		t.Fatalf("MPIR_Breakpoint %#x outside .text", bp)
	}
	code := make([]byte, 3)
	if _, err := text.ReadAt(code, int64(bp-text.Addr)); err != nil {
		t.Fatal(err)
	}
	if string(code) != "\x31\xc0\xc3" {
		t.Errorf("code at MPIR_Breakpoint % x, want xor %%eax,%%eax; ret (31 c0 c3)", code)
	}
}

func nmDynamicMatching(t testing.TB, path, sub string) []string {
	var out []string
	for name := range testenv.NMSymbols(t, path, "-D", "--defined-only") {
		if strings.Contains(name, sub) {
			out = append(out, name)
		}
	}
	return out
}

// A file that is not ELF, or does not exist, gives a clear error.
func TestLookupFileErrors(t *testing.T) {
	if _, err := LookupFile("/nonexistent/launcher"); err == nil || !strings.Contains(err.Error(), "/nonexistent/launcher") {
		t.Errorf("missing file: %v", err)
	}
	if _, err := LookupFile("helpers_test.go"); err == nil {
		t.Errorf("non-ELF file: no error")
	}
}

// What LookupFile read of a file is not used for another version of it: a launcher rebuilt
// with, then without, the MPIR symbols at the same path (written in place, then replaced)
// is read again each time.
func TestLookupFileSeesChangedFile(t *testing.T) {
	cc := testenv.NeedTool(t, "cc", "gcc")
	dir := t.TempDir()
	build := func(name, src string) string {
		c := filepath.Join(dir, name+".c")
		out := filepath.Join(dir, name)
		if err := os.WriteFile(c, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		if b, err := exec.Command(cc, "-rdynamic", "-o", out, c).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", cc, err, b)
		}
		return out
	}
	with := build("with", `int MPIR_debug_state, MPIR_proctable_size; void *MPIR_proctable;
void MPIR_Breakpoint(void) {}
int main(void) { MPIR_Breakpoint(); return MPIR_debug_state; }`)
	without := build("without", `int main(void) { return 0; }`)
	launcher := filepath.Join(dir, "launcher")
	copyTo := func(src string) {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(launcher, b, 0o755); err != nil { // in place: same inode
			t.Fatal(err)
		}
	}
	copyTo(without)
	if _, err := LookupFile(launcher); !errors.Is(err, ErrNoSymbols) {
		t.Fatalf("without the symbols: %v, want ErrNoSymbols", err)
	}
	copyTo(with)
	fs, err := LookupFile(launcher)
	if err != nil || !fs.Has() {
		t.Fatalf("rewritten in place with the symbols: %+v, %v", fs, err)
	}
	// Callers may keep and change what they get: the next lookup is not affected.
	fs.Values[SymBreakpoint] = 0
	if again, err := LookupFile(launcher); err != nil || again.Values[SymBreakpoint] == 0 {
		t.Fatalf("second lookup: %+v, %v", again, err)
	}
	if err := os.Rename(without, launcher); err != nil { // replaced: another inode
		t.Fatal(err)
	}
	if _, err := LookupFile(launcher); !errors.Is(err, ErrNoSymbols) {
		t.Fatalf("replaced by a file without the symbols: %v, want ErrNoSymbols", err)
	}
}
