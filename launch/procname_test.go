package launch

import (
	"os"
	"path/filepath"
	"testing"
)

// TestMatchesName: a name without a slash is an executable's base name, one with a slash its
// path (relative to the working directory); a deleted executable still matches.
func TestMatchesName(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		exe, name string
		want      bool
	}{
		{"/opt/app/bin/solver", "solver", true},
		{"/opt/app/bin/solver", "solve", false},
		{"/opt/app/bin/solver (deleted)", "solver", true},
		{"/opt/app/bin/solver", "/opt/app/bin/solver", true},
		{"/opt/app/bin/solver", "/opt/other/solver", false},
		{filepath.Join(wd, "bin/solver"), "./bin/solver", true},
		{filepath.Join(wd, "bin/solver"), "bin/solver", true},
	} {
		if got := matchesName(c.exe, c.name); got != c.want {
			t.Errorf("matchesName(%q, %q) = %v, want %v", c.exe, c.name, got, c.want)
		}
	}
}
