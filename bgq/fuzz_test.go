package bgq

import (
	"strings"
	"testing"
)

// FuzzParseToolRequest: any bytes in runjob's tool arrays give a request or an error, never a
// panic; an accepted request's path and arguments hold no NUL and its subset names only ranks
// of the job.
func FuzzParseToolRequest(f *testing.F) {
	f.Add([]byte("/bin/tool\x00"), []byte("a\x00b\x00\x00"), []byte("1 2 4-6 7-$max:2\x00"), 16)
	f.Add([]byte("/t\x00"), []byte("\x00"), []byte("0-max:3,max\x00"), 9)
	f.Add([]byte(strings.Repeat("a", 256)), []byte("\x00"), []byte("\x00"), 1)
	f.Add([]byte("/t\x00"), []byte("x"), []byte("max-max\x00"), 4)
	f.Fuzz(func(t *testing.T, path, args, subset []byte, np int) {
		if np < 1 || np > 1<<16 {
			return
		}
		r, err := ParseToolRequest(path, args, subset, np)
		if err != nil {
			return
		}
		if r.Path == "" || strings.ContainsRune(r.Path, 0) {
			t.Fatalf("path %q", r.Path)
		}
		for _, a := range r.Args {
			if a == "" || strings.ContainsRune(a, 0) {
				t.Fatalf("argument %q", a)
			}
		}
		set, err := ParseSubset(r.Subset, np)
		if err != nil {
			t.Fatalf("subset %q accepted, then refused: %v", r.Subset, err)
		}
		if set.Min() < 0 || set.Max() >= np {
			t.Fatalf("subset %q of %d ranks: %v", r.Subset, np, set)
		}
	})
}

// TestParseSubset checks BG/Q's spellings of the last rank against rankset's.
func TestParseSubset(t *testing.T) {
	for _, tc := range []struct {
		in   string
		np   int
		want string // rankset's form, or "" for an error
	}{
		{"", 4, "0-3"},
		{"1 2 4-6 7-$max:2", 16, "1-2,4-7,9-15:2"},
		{"7-max:2", 12, "7,9,11"},
		{"max", 5, "4"},
		{"max-max", 5, "4"},
		{"0,max", 3, "0,2"},
		{"maximum", 5, ""},
		{"1-x", 5, ""},
		{"9", 5, ""},
		{",", 4, ""},
	} {
		set, err := ParseSubset(tc.in, tc.np)
		switch {
		case tc.want == "" && err == nil:
			t.Errorf("ParseSubset(%q, %d) = %v, want an error", tc.in, tc.np, set)
		case tc.want != "" && (err != nil || set.String() != tc.want):
			t.Errorf("ParseSubset(%q, %d) = %v, %v; want %s", tc.in, tc.np, set, err, tc.want)
		}
	}
}
