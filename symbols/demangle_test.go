package symbols

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestDemangleAgainstGDB demangles the C++ symbols of the C++ test program and of libstdc++
// and compares with gdb's own demangler (its "demangle" command).
func TestDemangleAgainstGDB(t *testing.T) {
	nm := needTool(t, "nm")
	gdb := needTool(t, "gdb")
	b := buildProgram(t, "cpp", "-g", "-O0")
	var names []string
	seen := map[string]bool{}
	for _, args := range [][]string{{b.exe}, {"-D", "/usr/lib/x86_64-linux-gnu/libstdc++.so.6"}} {
		out, err := exec.Command(nm, args...).Output()
		if err != nil {
			t.Fatalf("nm %v: %v", args, err)
		}
		for _, line := range strings.Split(string(out), "\n") {
			f := strings.Fields(line)
			if len(f) == 0 {
				continue
			}
			n := f[len(f)-1]
			if i := strings.IndexByte(n, '@'); i >= 0 {
				n = n[:i] // symbol version
			}
			if strings.HasPrefix(n, "_Z") && !seen[n] {
				seen[n] = true
				names = append(names, n)
			}
		}
	}
	if len(names) < 1000 {
		t.Fatalf("only %d mangled names found", len(names))
	}
	script := filepath.Join(t.TempDir(), "demangle.gdb")
	var cmds strings.Builder
	for _, n := range names {
		cmds.WriteString("demangle -l c++ -- " + n + "\n")
	}
	if err := os.WriteFile(script, []byte(cmds.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(gdb, "-batch", "-nx", "-x", script).Output()
	if err != nil {
		t.Fatalf("gdb demangle: %v", err)
	}
	want := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	if len(want) != len(names) {
		t.Fatalf("gdb gave %d lines for %d names", len(want), len(names))
	}
	bad := 0
	for i, n := range names {
		if got := demangle(n); got != want[i] {
			bad++
			if bad <= 10 {
				t.Errorf("%s: got %q, gdb %q", n, got, want[i])
			}
		}
	}
	t.Logf("%d/%d names demangled as gdb does", len(names)-bad, len(names))
}
