package debugger

import (
	"strings"
	"testing"

	"github.com/hpcdap/hpcdap/bpcode"
)

func FuzzDataID(f *testing.F) {
	f.Add("m:/tmp/stacks:4010:4:counter")
	f.Add("a:3:7ffe12345678:8:local")
	f.Add("m:::0:")
	f.Add("a:-1:10:4:x")
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseDataID(s)
		if err == nil && (d.size <= 0 || d.rank < 0 || (d.module == "" && !strings.HasPrefix(s, "a:"))) {
			t.Fatalf("accepted %q as %+v", s, d)
		}
	})
}

func FuzzHitCondition(f *testing.F) {
	for _, s := range []string{"3", ">= 2", "%4", "== 10", "<5", "x"} {
		f.Add(s, 7)
	}
	f.Fuzz(func(t *testing.T, s string, hits int) {
		op, n, err := parseHitCondition(s)
		if err == nil && (n < 0 || (op == bpcode.HitMod && n == 0)) {
			t.Fatalf("accepted %q", s)
		}
		if err == nil {
			hitCondition{op, n}.holds(hits)
		}
	})
}
