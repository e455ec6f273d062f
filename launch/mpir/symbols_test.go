package mpir

import (
	"debug/elf"
	"errors"
	"os/exec"
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
