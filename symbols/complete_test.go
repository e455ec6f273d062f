package symbols

import "testing"

// TestParseCompletion: the partial name at the end of the text, and the expression before
// "." or "->" whose members complete it.
func TestParseCompletion(t *testing.T) {
	for _, c := range []struct {
		text, prefix, base string
		start              int
		member             bool
	}{
		{"cou", "cou", "", 0, false},
		{"x = cou", "cou", "", 4, false},
		{"", "", "", 0, false},
		{"p->", "", "p", 3, true},
		{"p->ne", "ne", "p", 3, true},
		{"a.b.c", "c", "a.b", 4, true},
		{"x + arr[i + 1].fi", "fi", "arr[i + 1]", 15, true},
		{"f(g(1), (*pp)->x", "x", "(*pp)", 15, true},
		{"ns::obj.m", "m", "ns::obj", 8, true},
		{"1.", "", "", 2, true},
		{"3 + .x", "x", "", 5, true},
		{"(a+b).", "", "(a+b)", 6, true},
	} {
		got := ParseCompletion(c.text)
		if got.Prefix != c.prefix || got.Base != c.base || got.Start != c.start || got.Member != c.member {
			t.Errorf("ParseCompletion(%q) = %+v, want prefix %q base %q start %d member %v", c.text, got, c.prefix, c.base, c.start, c.member)
		}
	}
}

// FuzzParseCompletion reads arbitrary console text: the prefix is the text's tail at Start and
// the base lies before it, never a panic.
func FuzzParseCompletion(f *testing.F) {
	for _, s := range []string{"s->corner[1].", "p->n", "a.b.c", "1.", "f(x)->", "->", ".", "x[1]", "\xff.\xfe->"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c := ParseCompletion(s)
		if c.Start < 0 || c.Start > len(s) || s[c.Start:] != c.Prefix {
			t.Fatalf("ParseCompletion(%q) = %+v", s, c)
		}
		if c.Base != "" && !c.Member {
			t.Fatalf("ParseCompletion(%q): a base without a member operator: %+v", s, c)
		}
	})
}
