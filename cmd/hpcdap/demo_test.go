package main

import (
	"fmt"
	"math"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestDemo builds hpcdap and runs `hpcdap demo`: the transcript must show the whole scripted
// session, from the launch to every rank's exit.
func TestDemo(t *testing.T) {
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Fatalf("gcc is required by the demo (make deps installs it)")
	}
	bin := filepath.Join(t.TempDir(), "hpcdap")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "demo").CombinedOutput()
	if err != nil {
		t.Fatalf("hpcdap demo: %v\n%s", err, out)
	}
	text := string(out)
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`breakpoint 1: verified=true at line \d+`),
		regexp.MustCompile(`stopped: breakpoint on rank 3 \(thread 4\), allThreadsStopped=true`),
		regexp.MustCompile(`rank 3  stopped  pid \d+ +thread 4 +breakpoint`),
		regexp.MustCompile(`#0  ring_sum +ring\.c:\d+`),
		regexp.MustCompile(`└─ main  ring\.c:\d+   \[ranks 0-3\]`),
		// Rank 0 has sent its slice and waits for the total; where ranks 0, 1 and 2 are
		// depends on the moment of the all-stop (each may still be returning from its write
		// to the next rank).
		regexp.MustCompile(`(recv|send)_value  ring\.c:\d+   \[ranks 0[-0-9,]*\]`),
		regexp.MustCompile(`ring_sum  ring\.c:\d+   \[ranks [-0-9,]*3\]`),
		regexp.MustCompile(`\[stdout\] \[2\] rank 2 of 4: my slice [0-9.]+, pi = 3\.14159265`),
		regexp.MustCompile(`exited: exit code 0; terminated`),
	} {
		if !want.MatchString(text) {
			t.Errorf("the transcript lacks %q:\n%s", want, text)
		}
	}
	// The value compareExpression showed for each rank is the slice that rank printed.
	for r := 0; r < 4; r++ {
		shown := regexp.MustCompile(fmt.Sprintf(`ranks %d +\(1\)  local = ([0-9.]+)`, r)).FindStringSubmatch(text)
		printed := regexp.MustCompile(fmt.Sprintf(`\[%d\] rank %d of 4: my slice ([0-9.]+)`, r, r)).FindStringSubmatch(text)
		if shown == nil || printed == nil {
			t.Errorf("rank %d: no compared value or no printed slice", r)
			continue
		}
		a, _ := strconv.ParseFloat(shown[1], 64)
		b, _ := strconv.ParseFloat(printed[1], 64)
		if math.Abs(a-b) > 1e-11 {
			t.Errorf("rank %d: local compared as %s, the rank printed %s", r, shown[1], printed[1])
		}
	}
	if n := strings.Count(text, "exited with code 0"); n != 4 {
		t.Errorf("%d ranks exited with code 0, want 4:\n%s", n, text)
	}
}
