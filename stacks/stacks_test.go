package stacks

import (
	"bytes"
	"maps"
	"os/exec"
	"strings"
	"testing"

	"github.com/hpcdap/hpcdap/adapter"
	"github.com/hpcdap/hpcdap/rankset"
)

func TestParsePids(t *testing.T) {
	for _, c := range []struct {
		in   string
		want map[int]int
		err  string
	}{
		{"10,20,30", map[int]int{0: 10, 1: 20, 2: 30}, ""},
		{"3=10, 0=20", map[int]int{3: 10, 0: 20}, ""},
		{"", nil, "names no process"},
		{"10,x", nil, `"x" is not a process id`},
		{"0=10,20", nil, "give every entry as RANK=PID"},
		{"0=10,0=20", nil, "rank 0 given twice"},
		{"0=10,1=10", nil, "pid 10 given for ranks 0 and 1"},
		{"-1=10", nil, `"-1" is not a rank`},
		{"0=-5", nil, `"-5" is not a process id`},
	} {
		got, err := ParsePids(c.in)
		switch {
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("ParsePids(%q): error %v, want %q", c.in, err, c.err)
		case c.err == "" && (err != nil || !maps.Equal(got, c.want)):
			t.Errorf("ParsePids(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
	}
}

func TestParseSlurmStep(t *testing.T) {
	for in, ok := range map[string]bool{"1234.0": true, "7.12": true, "1234": false, "a.0": false, "1.0.1": false, "": false} {
		if _, err := ParseSlurmStep(in); (err == nil) != ok {
			t.Errorf("ParseSlurmStep(%q): %v", in, err)
		}
	}
}

// TestDOTParses: names with quotes, backslashes, angle brackets and braces (C++ and
// Fortran symbols) come out as DOT that Graphviz accepts, labels intact.
func TestDOTParses(t *testing.T) {
	if _, err := exec.LookPath("dot"); err != nil {
		t.Fatalf("dot is required (scripts/install-deps.sh installs graphviz)")
	}
	leaf := &adapter.StackNode{ID: 2, Name: `operator"" \x <T> {a|b}`, Ranks: "0-62:2", Count: 32, Children: []*adapter.StackNode{}}
	root := &adapter.StackNode{ID: 1, Name: "std::vector<int>::push_back(int const&)", Ranks: "0-63", Count: 64,
		Children: []*adapter.StackNode{leaf}}
	r := &Result{Tree: adapter.ParallelStacksBody{Total: 64, Roots: []*adapter.StackNode{root}},
		Ranks: rankset.Range(0, 63), Samples: 1}
	var b bytes.Buffer
	if err := WriteTree(&b, r, "dot"); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("dot", "-Tplain")
	cmd.Stdin = &b
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("dot: %v\n%s\n%s", err, out, b.String())
	}
	// -Tplain prints each node's label, quoted where needed.
	for _, want := range []string{`0-62:2`, `32:[0-62:2]`, `64:[0-63]`, `std::vector<int>::push_back`, `{a|b}`} {
		if !strings.Contains(string(out), want) {
			t.Errorf("dot -Tplain lacks %q:\n%s", want, out)
		}
	}
	var text bytes.Buffer
	if err := WriteTree(&text, r, "text"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), "\n  "+leaf.Name+"  [0-62:2] 32\n") {
		t.Errorf("text:\n%s", text.String())
	}
	if err := WriteTree(&text, r, "svg"); err == nil || !strings.Contains(err.Error(), `unknown format "svg"`) {
		t.Errorf("format svg: %v", err)
	}
}

// FuzzParsePids reads arbitrary --pids text: a table or an error, never a panic; a table has
// positive pids, non-negative ranks and no pid twice.
func FuzzParsePids(f *testing.F) {
	for _, s := range []string{"10,20,30", "0=4242,1=4243", "5=1,5=2", "1=2,3", "", ",", "=", "-1=3", "2=-4", "9999999999999999999=1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		pids, err := ParsePids(s)
		if err != nil {
			return
		}
		seen := map[int]bool{}
		for r, p := range pids {
			if r < 0 || p <= 0 || seen[p] {
				t.Fatalf("ParsePids(%q) = %v", s, pids)
			}
			seen[p] = true
		}
	})
}
