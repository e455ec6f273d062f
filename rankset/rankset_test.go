package rankset

import (
	"encoding/json"
	"fmt"
	"math/rand"
	"strconv"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	tests := []struct {
		in   string
		size int
		want string
	}{
		{"", 8, ""},
		{"3", 8, "3"},
		{"1 2 4-6", 8, "1-2,4-6"},
		{"1,2,4-6", 8, "1-2,4-6"},
		{"7-$max:2", 16, "7-15:2"},
		{"1 2 4-6 7-$max:2", 12, "1-2,4-7,9,11"},
		{"$max", 4, "3"},
		{"all", 4, "0-3"},
		{"*", 3, "0-2"},
		{"0-3 2-5", 8, "0-5"},
		{"0-3,4-7", 8, "0-7"},
		{"5 1 3 2 4", 8, "1-5"},
		{"0-511,513-1023", 1024, "0-511,513-1023"},
		{"10-20:5", -1, "10-20:5"},
		{"0-62:2", 64, "0-62:2"},
		{"  4  ,, 6 ", 8, "4,6"},
	}
	for _, tt := range tests {
		got, err := Parse(tt.in, tt.size)
		if err != nil {
			t.Errorf("Parse(%q, %d): %v", tt.in, tt.size, err)
			continue
		}
		if got.String() != tt.want {
			t.Errorf("Parse(%q, %d) = %q, want %q", tt.in, tt.size, got, tt.want)
		}
	}
}

// TestStringStrided checks the printed form: evenly spaced single ranks print as a strided
// range where that is shorter than listing them, and everything prints back to its set.
func TestStringStrided(t *testing.T) {
	evens := func(lo, hi int) []int {
		var r []int
		for i := lo; i <= hi; i += 2 {
			r = append(r, i)
		}
		return r
	}
	tests := []struct {
		set  Set
		want string
	}{
		{Of(evens(0, 62)...), "0-62:2"},
		{Of(evens(1, 1023)...), "1-1023:2"},
		{Of(0, 2, 4), "0,2,4"}, // as long as "0-4:2"
		{Of(1, 3), "1,3"},
		{Of(1, 3, 5, 7), "1-7:2"},
		{Of(10, 15, 20), "10-20:5"},
		{MustParse("0-3,8,12,16,20,31", -1), "0-3,8-20:4,31"},
		{Of(0, 3, 6, 9, 11, 13, 15, 17), "0-9:3,11-17:2"},
		{Of(0, 2, 4, 6, 7), "0,2,4,6-7"},
		{Of(0, 2, 4, 6, 8, 9), "0-6:2,8-9"},
		{MustParse("0-511,513-1023", -1), "0-511,513-1023"},
		{MustParse("0-9 20-40:10 41-50", -1), "0-9,20,30,40-50"},
		{All(64).Minus(Of(evens(1, 63)...)), "0-62:2"},
		// Evenly spaced ranges of one width: one strided item per offset where shorter.
		{MustParse("0-56:8 1-57:8", -1), "0-56:8,1-57:8"},
		{MustParse("0-1008:16 1-1009:16 2-1010:16 3-1011:16", -1), "0-1008:16,1-1009:16,2-1010:16,3-1011:16"},
		{MustParse("0-3,16-19,32-35,48-51", -1), "0-3,16-19,32-35,48-51"}, // shorter listed
		{MustParse("0-1,4-5", -1), "0-1,4-5"},
		{MustParse("0-3 8-40:8 9-41:8", -1), "0-3,8-40:8,9-41:8"},
		{MustParse("8-40:8 9-41:8 100-200:2", -1), "8-40:8,9-41:8,100-200:2"},
		{MustParse("0-248:8 1-249:8 256-300", -1), "0-248:8,1-249:8,256-300"},
	}
	for _, tt := range tests {
		got := tt.set.String()
		if got != tt.want {
			t.Errorf("String() of %v = %q, want %q", tt.set.Ranks(), got, tt.want)
		}
		back, err := Parse(got, -1)
		if err != nil || !back.Equal(tt.set) {
			t.Errorf("Parse(%q) = %v, %v; want %v", got, back.Ranks(), err, tt.set.Ranks())
		}
	}
}

// TestStringStridedBound checks that a set with more evenly spaced single ranks than Parse
// expands from strided items still prints in a form Parse reads back.
func TestStringStridedBound(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a set of 4 million ranks")
	}
	ranks := make([]int, 0, maxExpand+2)
	for r := 0; len(ranks) < maxExpand+2; r += 2 {
		ranks = append(ranks, r)
	}
	s := Of(ranks...)
	out := s.String()
	back, err := Parse(out, -1)
	if err != nil || !back.Equal(s) {
		t.Fatalf("Parse(String()) of %d even ranks: %v (equal %v)", len(ranks), err, err == nil && back.Equal(s))
	}
	if want := fmt.Sprintf("0-%d:2,", 2*(maxExpand-1)); !strings.HasPrefix(out, want) {
		t.Fatalf("String() of %d even ranks starts %q, want %q", len(ranks), out[:min(len(out), 40)], want)
	}

	// Pairs of ranks, as many as Parse expands and one more pair: the strided items stop at
	// the bound and the last pair is listed.
	var ivs []interval
	for k := 0; k < maxExpand/2+1; k++ {
		ivs = append(ivs, interval{4 * k, 4*k + 1})
	}
	pairs := normalize(ivs)
	out = pairs.String()
	back, err = Parse(out, -1)
	if err != nil || !back.Equal(pairs) {
		t.Fatalf("Parse(String()) of %d pairs: %v", len(ivs), err)
	}
	last := 4 * (maxExpand/2 - 1)
	if want := fmt.Sprintf("0-%d:4,1-%d:4,%d-%d", last, last+1, last+4, last+5); out != want {
		t.Fatalf("String() of %d pairs = %q, want %q", len(ivs), out[:min(len(out), 80)], want)
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		in      string
		size    int
		wantErr string
	}{
		{"8", 8, "out of range"},
		{"$max", -1, "needs the job size"},
		{"all", -1, "needs the job size"},
		{"5-3", 8, "reversed"},
		{"a", 8, "bad rank"},
		{"-3", 8, "bad rank"},
		{"1-", 8, "bad rank"},
		{"1-4:0", 8, "bad stride"},
		{"1-4:x", 8, "bad stride"},
		{"4:2", 8, "stride needs a range"},
		{"99999999999", -1, "bad rank"},
		{"0-2000000000:2", -1, "more than"},
		{"$max", 0, "no ranks"},
	}
	for _, tt := range tests {
		_, err := Parse(tt.in, tt.size)
		if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("Parse(%q, %d) error = %v, want it to mention %q", tt.in, tt.size, err, tt.wantErr)
		}
	}
}

// TestAgainstBitmap checks the set algebra against a plain []bool model on random sets.
func TestAgainstBitmap(t *testing.T) {
	const n = 200
	rng := rand.New(rand.NewSource(1))
	random := func() ([]bool, Set) {
		bits := make([]bool, n)
		var ranks []int
		for i := range bits {
			if rng.Intn(3) == 0 {
				bits[i] = true
				ranks = append(ranks, i)
			}
		}
		return bits, Of(ranks...)
	}
	check := func(name string, bits []bool, s Set) {
		t.Helper()
		count := 0
		for r, in := range bits {
			if s.Contains(r) != in {
				t.Fatalf("%s: Contains(%d) = %v, want %v (set %s)", name, r, !in, in, s)
			}
			if in {
				count++
			}
		}
		if s.Len() != count {
			t.Fatalf("%s: Len = %d, want %d", name, s.Len(), count)
		}
		back, err := Parse(s.String(), n)
		if err != nil || !back.Equal(s) {
			t.Fatalf("%s: Parse(String()) = %s, %v; want %s", name, back, err, s)
		}
	}
	for i := 0; i < 500; i++ {
		a, sa := random()
		b, sb := random()
		union, inter, minus := make([]bool, n), make([]bool, n), make([]bool, n)
		for r := range a {
			union[r] = a[r] || b[r]
			inter[r] = a[r] && b[r]
			minus[r] = a[r] && !b[r]
		}
		check("a", a, sa)
		check("union", union, sa.Union(sb))
		check("intersect", inter, sa.Intersect(sb))
		check("minus", minus, sa.Minus(sb))
	}
}

func TestAccessors(t *testing.T) {
	s := MustParse("3-5,9", 10)
	if s.Min() != 3 || s.Max() != 9 || s.Len() != 4 || s.Empty() {
		t.Fatalf("Min/Max/Len/Empty of %s = %d %d %d %v", s, s.Min(), s.Max(), s.Len(), s.Empty())
	}
	if got := s.Ranks(); len(got) != 4 || got[0] != 3 || got[3] != 9 {
		t.Fatalf("Ranks = %v", got)
	}
	if (Set{}).Min() != -1 || (Set{}).Max() != -1 || !(Set{}).Empty() {
		t.Fatal("empty set accessors")
	}
	if got := All(4).Minus(Of(2)).Add(7).String(); got != "0-1,3,7" {
		t.Fatalf("All(4) - 2 + 7 = %s", got)
	}
	if !Range(5, 4).Empty() || Range(-3, 1).String() != "0-1" {
		t.Fatal("Range bounds")
	}
}

func TestJSON(t *testing.T) {
	var v struct{ Ranks Set }
	if err := json.Unmarshal([]byte(`{"Ranks":"0-2 7"}`), &v); err != nil {
		t.Fatal(err)
	}
	out, _ := json.Marshal(v)
	if string(out) != `{"Ranks":"0-2,7"}` {
		t.Fatalf("round trip = %s", out)
	}
	if err := json.Unmarshal([]byte(`{"Ranks":"x"}`), &v); err == nil {
		t.Fatal("bad set accepted")
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"1 2 4-6 7-$max:2", "0-511,513-1023", "all", "3", "5-3", "0-9:3"} {
		f.Add(s, 64)
	}
	f.Fuzz(func(t *testing.T, s string, size int) {
		if size > 1<<20 {
			size = 1 << 20
		}
		set, err := Parse(s, size)
		if err != nil {
			return
		}
		if size >= 0 && set.Max() >= size {
			t.Fatalf("Parse(%q, %d) = %s holds a rank ≥ size", s, size, set)
		}
		back, err := Parse(set.String(), size)
		if err != nil || !back.Equal(set) {
			t.Fatalf("Parse(%q).String() = %q does not parse back: %v", s, set, err)
		}
	})
}

// FuzzString builds sets from the input's bytes (each a gap to the next run of ranks and that
// run's length) so that evenly spaced single ranks are common, and checks that String reads
// back to the same set and is never longer than the plain list of ranges.
func FuzzString(f *testing.F) {
	f.Add([]byte{0, 0, 1, 0, 1, 0, 1, 0})
	f.Add([]byte{3, 4, 2, 0, 2, 0, 2, 0, 7, 9, 1, 0})
	f.Add([]byte{255, 0, 255, 0, 255, 0, 1, 200})
	f.Add([]byte{0, 1, 6, 1, 6, 1, 6, 1, 6, 1, 3, 2}) // pairs eight apart, then a range
	f.Fuzz(func(t *testing.T, b []byte) {
		var ranks []int
		r := 0
		for i := 0; i+1 < len(b); i += 2 {
			r += int(b[i])
			for k := 0; k <= int(b[i+1]); k++ {
				ranks = append(ranks, r)
				r++
			}
		}
		set := Of(ranks...)
		out := set.String()
		back, err := Parse(out, -1)
		if err != nil || !back.Equal(set) {
			t.Fatalf("String() of %v = %q parses back to %v, %v", ranks, out, back.Ranks(), err)
		}
		plain := 0
		for i, v := range set.iv {
			if i > 0 {
				plain++
			}
			plain += len(strconv.Itoa(v.lo))
			if v.hi != v.lo {
				plain += 1 + len(strconv.Itoa(v.hi))
			}
		}
		if len(out) > plain {
			t.Fatalf("String() of %v = %q is longer than the plain list (%d bytes)", ranks, out, plain)
		}
	})
}

func BenchmarkParseCompressed(b *testing.B) {
	s := All(100000).Minus(Of(513, 4097, 77777)).String()
	for i := 0; i < b.N; i++ {
		if _, err := Parse(s, 100000); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkStringWideRuns prints sets whose runs of equal ranges are shorter listed than
// strided: every rank of 2^20 but each 1,024th (a node's leader), and three ranges of a
// million ranks each. Measuring a run's strided form must not print it.
func BenchmarkStringWideRuns(b *testing.B) {
	leaders := All(1 << 20)
	for r := 0; r < 1<<20; r += 1024 {
		leaders = leaders.Minus(Of(r))
	}
	wide := MustParse("0-999999 2000000-2999999 4000000-4999999", -1)
	for _, c := range []struct {
		name string
		set  Set
	}{{"all-but-leaders", leaders}, {"three-wide-ranges", wide}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = c.set.String()
			}
		})
	}
}
