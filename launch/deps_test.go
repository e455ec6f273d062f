package launch

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hpcdap/hpcdap/internal/testenv"
)

// lddResult is what ldd (the real dynamic linker in trace mode) reports.
type lddResult struct {
	libs    []string // "name => path", in ldd's order
	interp  string
	missing []string
}

func ldd(t testing.TB, prog string, env []string) lddResult {
	t.Helper()
	testenv.NeedTool(t, "ldd", "libc-bin")
	cmd := exec.Command("ldd", prog)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	var res lddResult
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 4 && f[1] == "=>" && f[2] == "not" && f[3] == "found":
			res.missing = append(res.missing, f[0])
		case len(f) >= 3 && f[1] == "=>":
			res.libs = append(res.libs, f[0]+" => "+f[2])
		case len(f) == 2 && strings.HasPrefix(f[0], "/"):
			res.interp = f[0]
		}
	}
	if err != nil && len(res.missing) == 0 {
		t.Fatalf("ldd %s: %v\n%s", prog, err, out)
	}
	return res
}

// checkAgainstLdd compares a Resolve result with ldd's report for the same environment.
func checkAgainstLdd(t *testing.T, prog string, env []string) {
	t.Helper()
	want := ldd(t, prog, env)
	deps, err := NewResolver(env).Resolve(prog)
	var got []string
	interp := ""
	for _, d := range deps {
		if d.NeededBy == "" {
			interp = d.Path
			continue
		}
		got = append(got, d.Name+" => "+d.Path)
	}
	if len(want.missing) > 0 {
		if !errors.Is(err, ErrNotFound) {
			t.Errorf("%s: ldd misses %v, Resolve error %v", prog, want.missing, err)
		}
		for _, m := range want.missing {
			if err == nil || !strings.Contains(err.Error(), m) {
				t.Errorf("%s: the error does not name %s: %v", prog, m, err)
			}
		}
	} else if err != nil {
		t.Errorf("%s: Resolve: %v", prog, err)
	}
	if fmt.Sprint(got) != fmt.Sprint(want.libs) {
		t.Errorf("%s:\n Resolve %q\n ldd     %q", prog, got, want.libs)
	}
	if interp != want.interp {
		t.Errorf("%s: interpreter %q, ldd %q", prog, interp, want.interp)
	}
}

// libsFixture builds a small library tree in dir:
//
//	lib/libinner.so.1      soname libinner.so.1
//	lib/libouter.so        needs libinner.so.1, DT_RUNPATH $ORIGIN
//	lib/libouter_plain.so  needs libinner.so.1, no path of its own
//	bin/main_rpath         needs libouter.so, DT_RPATH $ORIGIN/../lib
//	bin/main_runpath       needs libouter.so, DT_RUNPATH $ORIGIN/../lib
//	bin/main_plain         needs libouter.so, no path
//	bin/main_inherit       needs libouter_plain.so, DT_RPATH $ORIGIN/../lib (inherited by the library)
//	bin/main_noinherit     needs libouter_plain.so, DT_RUNPATH (not inherited: libinner is missing)
//	decoy/libinner.so.1    libinner with e_machine patched to AArch64: the loader skips it
func libsFixture(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	lib, bin, decoy := filepath.Join(dir, "lib"), filepath.Join(dir, "bin"), filepath.Join(dir, "decoy")
	for _, d := range []string{lib, bin, decoy} {
		os.MkdirAll(d, 0o755)
	}
	src := func(n string) string { return filepath.Join("testdata", "libs", n) }
	steps := [][]string{
		{"-shared", "-fPIC", "-Wl,-soname,libinner.so.1", "-o", filepath.Join(lib, "libinner.so.1"), src("inner.c")},
		{"-shared", "-fPIC", "-o", filepath.Join(lib, "libouter.so"), src("outer.c"), "-L" + lib, "-l:libinner.so.1",
			"-Wl,--enable-new-dtags,-rpath,$ORIGIN"},
		{"-shared", "-fPIC", "-o", filepath.Join(lib, "libouter_plain.so"), src("outer.c"), "-L" + lib, "-l:libinner.so.1"},
		{"-o", filepath.Join(bin, "main_rpath"), src("main.c"), "-L" + lib, "-louter", "-Wl,--disable-new-dtags,-rpath,$ORIGIN/../lib"},
		{"-o", filepath.Join(bin, "main_runpath"), src("main.c"), "-L" + lib, "-louter", "-Wl,--enable-new-dtags,-rpath,$ORIGIN/../lib"},
		{"-o", filepath.Join(bin, "main_plain"), src("main.c"), "-L" + lib, "-louter"},
		{"-o", filepath.Join(bin, "main_inherit"), src("main.c"), "-L" + lib, "-louter_plain", "-Wl,-rpath-link," + lib,
			"-Wl,--disable-new-dtags,-rpath,$ORIGIN/../lib"},
		{"-o", filepath.Join(bin, "main_noinherit"), src("main.c"), "-L" + lib, "-louter_plain", "-Wl,-rpath-link," + lib,
			"-Wl,--enable-new-dtags,-rpath,$ORIGIN/../lib"},
	}
	testenv.NeedTool(t, "gcc", "gcc")
	for _, s := range steps {
		if out, err := exec.Command("gcc", s...).CombinedOutput(); err != nil {
			t.Fatalf("gcc %v: %v\n%s", s, err, out)
		}
	}
	b, err := os.ReadFile(filepath.Join(lib, "libinner.so.1"))
	if err != nil {
		t.Fatal(err)
	}
	b[18], b[19] = 183, 0 // e_machine = EM_AARCH64
	if err := os.WriteFile(filepath.Join(decoy, "libinner.so.1"), b, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// Resolve agrees with ldd on RPATH (own and inherited), RUNPATH (not inherited),
// LD_LIBRARY_PATH, $ORIGIN, a library of the wrong machine on the path, ld.so.cache and the
// system directories.
func TestResolveMatchesLdd(t *testing.T) {
	dir := libsFixture(t)
	base := withoutVars(os.Environ(), "LD_LIBRARY_PATH")
	bin := func(n string) string { return filepath.Join(dir, "bin", n) }
	for _, c := range []struct {
		prog string
		env  []string
	}{
		{bin("main_rpath"), base},
		{bin("main_runpath"), base},
		{bin("main_inherit"), base},
		{bin("main_noinherit"), base},
		{bin("main_plain"), base},
		{bin("main_plain"), append(base, "LD_LIBRARY_PATH="+filepath.Join(dir, "decoy")+":"+filepath.Join(dir, "lib"))},
		{bin("main_noinherit"), append(base, "LD_LIBRARY_PATH="+filepath.Join(dir, "lib"))},
		// LD_LIBRARY_PATH comes before DT_RUNPATH: the decoy is skipped, the real one found.
		{bin("main_runpath"), append(base, "LD_LIBRARY_PATH="+filepath.Join(dir, "decoy"))},
	} {
		t.Run(filepath.Base(c.prog), func(t *testing.T) { checkAgainstLdd(t, c.prog, c.env) })
	}
}

// Real programs with many libraries: MPI programs and the launchers.
func TestResolveMatchesLddMPI(t *testing.T) {
	env := withoutVars(os.Environ(), "LD_LIBRARY_PATH")
	for _, p := range []string{program(t, "ompi"), program(t, "mpich"), testenv.NeedTool(t, "srun", "slurm-client"),
		testenv.NeedTool(t, "orterun", "openmpi-bin"), testenv.NeedTool(t, "mpiexec.hydra", "mpich")} {
		checkAgainstLdd(t, p, env)
	}
}

// The default system directories are the ones ld.so --help lists.
func TestSystemDirsMatchLoader(t *testing.T) {
	main, err := readObject(program(t, "serial"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(main.interp, "--help").Output()
	if err != nil {
		t.Fatalf("%s --help: %v", main.interp, err)
	}
	var want []string
	for _, l := range strings.Split(string(out), "\n") {
		if d, ok := strings.CutSuffix(strings.TrimSpace(l), "(system search path)"); ok {
			want = append(want, strings.TrimSpace(d))
		}
	}
	if got := (&Resolver{}).systemDirs(main); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("system dirs %v, ld.so --help says %v", got, want)
	}
}

// A file that is not ELF is an error naming it.
func TestResolveNotELF(t *testing.T) {
	if _, err := NewResolver(nil).Resolve("deps_test.go"); err == nil || !strings.Contains(err.Error(), "deps_test.go") {
		t.Errorf("Resolve(non-ELF) = %v", err)
	}
}
