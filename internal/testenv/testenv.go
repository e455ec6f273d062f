// Package testenv provides what the test environment offers to the tests of every hpcdap
// package: the tools a test needs, the state of processes under /proc, QEMU user-mode emulators
// started with their GDB stub listening for gdb as an oracle, and independent oracles for
// symbol addresses and file contents (debug/elf and nm).
//
// It imports only the standard library, so that any package's tests may use it.
package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// NeedTool returns the path of the program name, or fails the test with a message naming the
// Debian package that provides it: a missing tool is a broken test environment, not a reason
// to skip.
func NeedTool(t testing.TB, name, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s not found: install the Debian package %s", name, pkg)
	}
	return p
}

// QEMUDir is the directory where scripts/qemu-user.sh leaves the QEMU ≥ 9 user-mode emulators:
// $HPCDAP_QEMU_DIR, else $XDG_CACHE_HOME/hpcdap/qemu/bin (~/.cache/hpcdap/qemu/bin).
func QEMUDir() string {
	if d := os.Getenv("HPCDAP_QEMU_DIR"); d != "" {
		return d
	}
	cache := os.Getenv("XDG_CACHE_HOME")
	if cache == "" {
		home, _ := os.UserHomeDir()
		cache = filepath.Join(home, ".cache")
	}
	return filepath.Join(cache, "hpcdap", "qemu", "bin")
}

// QEMUUser returns the user-mode emulator name (such as "qemu-ppc64"): the one in QEMUDir when
// present, else the system's, failing the test when neither is installed.
func QEMUUser(t testing.TB, name string) string {
	t.Helper()
	p := filepath.Join(QEMUDir(), name)
	if _, err := os.Stat(p); err == nil {
		return p
	}
	return NeedTool(t, name, "qemu-user")
}

// Build runs one build step of a test program (a compiler, go build) outside any test, as
// TestMain or a sync.Once does: it returns an error naming the Debian package pkg when the
// program name is missing, and the command's output when it fails, for the first test that
// needs the result to report.
func Build(pkg, name string, args ...string) error {
	if _, err := exec.LookPath(name); err != nil {
		return fmt.Errorf("%s not found: install the Debian package %s", name, pkg)
	}
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return nil
}
