package main

import (
	"bytes"
	"os/exec"
	"strings"
	"testing"
)

func TestRunExitCodes(t *testing.T) {
	tests := []struct {
		args       []string
		wantCode   int
		wantOut    string // substring of stdout
		wantErrOut string // substring of stderr
	}{
		{nil, 2, "", "usage: hpcdap"},
		{[]string{"nosuch"}, 2, "", `unknown command "nosuch"`},
		{[]string{"version"}, 0, "hpcdap ", ""},
		{[]string{"version", "--bogus"}, 2, "", "flag provided but not defined: -bogus"},
		{[]string{"version", "extra"}, 2, "", `unexpected argument "extra"`},
		{[]string{"help"}, 0, "commands:", ""},
		{[]string{"help", "version"}, 0, "Usage of hpcdap version", ""},
		{[]string{"help", "nosuch"}, 2, "", `unknown command "nosuch"`},
	}
	for _, tt := range tests {
		var out, errOut bytes.Buffer
		code := run(tt.args, &out, &errOut)
		if code != tt.wantCode {
			t.Errorf("run(%q) = %d, want %d (stderr %q)", tt.args, code, tt.wantCode, errOut.String())
		}
		if !strings.Contains(out.String(), tt.wantOut) {
			t.Errorf("run(%q) stdout = %q, want it to contain %q", tt.args, out.String(), tt.wantOut)
		}
		if !strings.Contains(errOut.String(), tt.wantErrOut) {
			t.Errorf("run(%q) stderr = %q, want it to contain %q", tt.args, errOut.String(), tt.wantErrOut)
		}
	}
}

// TestBinary builds the real binary and checks its exit status, as a user's shell sees it.
func TestBinary(t *testing.T) {
	bin := t.TempDir() + "/hpcdap"
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "version").Output()
	if err != nil || !strings.HasPrefix(string(out), "hpcdap ") {
		t.Fatalf("hpcdap version = %q, %v", out, err)
	}
	err = exec.Command(bin, "frobnicate").Run()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 {
		t.Fatalf("hpcdap frobnicate: err = %v, want exit status 2", err)
	}
}
