package launch

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/hpcdap/hpcdap/internal/testenv"
)

// Every x86-64 entry that ldconfig -p prints is found by Lookup at the path ldconfig gives
// first for that name, and the cache holds as many entries as ldconfig lists.
func TestLDCacheMatchesLdconfig(t *testing.T) {
	ldconfig := testenv.NeedTool(t, "ldconfig", "libc-bin")
	c, err := ReadLDCache("/etc/ld.so.cache")
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(ldconfig, "-p").Output()
	if err != nil {
		t.Fatalf("ldconfig -p: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) < 2 {
		t.Fatalf("ldconfig -p: %q", out)
	}
	first := map[string]string{}
	entries := 0
	for _, l := range lines[1:] { // the first line counts the libraries
		name, rest, ok := strings.Cut(strings.TrimSpace(l), " (")
		if !ok || !strings.Contains(rest, ") => ") {
			continue
		}
		entries++
		flags, path, ok := strings.Cut(rest, ") => ")
		if !ok || !strings.Contains(flags, "x86-64") || strings.Contains(flags, "hwcap") {
			continue
		}
		if _, seen := first[name]; !seen {
			first[name] = path
		}
	}
	if c.Len() != entries {
		t.Errorf("%d entries parsed, ldconfig -p lists %d", c.Len(), entries)
	}
	if len(first) < 20 {
		t.Fatalf("only %d x86-64 libraries in ldconfig -p", len(first))
	}
	for name, want := range first {
		if got, ok := c.Lookup(name, ldFlagX8664); !ok || got != want {
			t.Errorf("Lookup(%s) = %q, %v; ldconfig says %q", name, got, ok, want)
		}
	}
	if _, ok := c.Lookup("libdoes-not-exist.so.9", ldFlagX8664); ok {
		t.Error("a missing library was found")
	}
}

// Truncated and corrupted caches are errors, not panics.
func TestLDCacheErrors(t *testing.T) {
	b, err := os.ReadFile("/etc/ld.so.cache")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{0, 10, 47, 48, 100} {
		if _, err := ParseLDCache(b[:min(n, len(b))]); err == nil && n < len(b) {
			t.Errorf("%d bytes: no error", n)
		}
	}
	if _, err := ParseLDCache([]byte("not a cache at all, not a cache at all, not a cache")); err == nil {
		t.Error("garbage parsed")
	}
}

// FuzzParseLDCache parses arbitrary bytes, seeded with this machine's cache.
func FuzzParseLDCache(f *testing.F) {
	if b, err := os.ReadFile("/etc/ld.so.cache"); err == nil {
		f.Add(b)
		if len(b) > 4096 {
			f.Add(b[:4096])
		}
	}
	f.Add([]byte(ldCacheNewMagic))
	f.Add([]byte(ldCacheOldMagic + "\x00\x02\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := ParseLDCache(b)
		if err == nil {
			c.Lookup("libc.so.6", ldFlagX8664)
		}
	})
}
