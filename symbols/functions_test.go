package symbols

import (
	"slices"
	"testing"
)

// TestFunctionsNamedMatchesScan checks the name index against a scan of every function: for
// each function's qualified, unqualified and linkage name, in the C library (with its
// separate debugging information) and in C++ and Fortran programs (qualified names, module
// procedures), FunctionsNamed returns exactly the functions the scan finds, in DWARF order.
// A name no function has finds none, and a caller may change what it was given.
func TestFunctionsNamedMatchesScan(t *testing.T) {
	bins := map[string]string{"libc": libcPath}
	for _, name := range []string{"cpp", "fortran"} {
		bins[name] = buildProgram(t, name, "-g", "-O0").exe
	}
	for what, path := range bins {
		bin, err := Open(path, nil)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		defer bin.Close()
		scan := func(name string) []*Function {
			var out []*Function
			for _, f := range bin.Functions() {
				if f.Name == name || f.LinkageName == name || unqualified(f.Name) == name {
					out = append(out, f)
				}
			}
			return out
		}
		names := map[string]bool{}
		qualified := 0
		for _, f := range bin.Functions() {
			for _, n := range []string{f.Name, f.LinkageName, unqualified(f.Name)} {
				names[n] = true
			}
			if unqualified(f.Name) != f.Name {
				qualified++
			}
		}
		if len(bin.Functions()) < 10 || (what != "libc" && qualified == 0) {
			t.Fatalf("%s: %d functions, %d qualified: not the binary meant", what, len(bin.Functions()), qualified)
		}
		for n := range names {
			if got, want := bin.FunctionsNamed(n), scan(n); !slices.Equal(got, want) {
				t.Fatalf("%s: FunctionsNamed(%q) = %d functions, the scan finds %d", what, n, len(got), len(want))
			}
		}
		if got := bin.FunctionsNamed("no such function, surely"); got != nil {
			t.Errorf("%s: FunctionsNamed of an unknown name = %v", what, got)
		}
		if fs := bin.FunctionsNamed("main"); len(fs) > 0 {
			fs[0] = nil
			if again := bin.FunctionsNamed("main"); again[0] == nil {
				t.Errorf("%s: a caller's change reached the index", what)
			}
		}
		t.Logf("%s: %d functions, %d names, %d qualified", what, len(bin.Functions()), len(names), qualified)
	}
}
