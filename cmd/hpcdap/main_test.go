package main

import (
	"bufio"
	"bytes"
	"os"
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

// TestServeAnyUserWarns: `hpcdap serve --any-user` says on stderr that other users can run
// programs as this one, and `--listen unix:PATH` serves on a socket only this user may open.
func TestServeAnyUserWarns(t *testing.T) {
	bin := t.TempDir() + "/hpcdap"
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	for _, listen := range []string{"127.0.0.1:0", "unix:" + t.TempDir() + "/dap.sock"} {
		cmd := exec.Command(bin, "serve", "--any-user", "--listen", listen)
		stdout, _ := cmd.StdoutPipe()
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		line, err := bufio.NewReader(stdout).ReadString('\n')
		cmd.Process.Kill()
		cmd.Wait()
		if err != nil || !strings.HasPrefix(line, "listening on ") {
			t.Fatalf("serve --listen %s: first line %q, %v", listen, line, err)
		}
		if !strings.Contains(stderr.String(), "WARNING: --any-user") {
			t.Errorf("serve --any-user --listen %s: stderr %q, want a warning", listen, stderr.String())
		}
		if path, ok := strings.CutPrefix(listen, "unix:"); ok {
			if fi, err := os.Stat(path); err == nil && fi.Mode().Perm() != 0o600 {
				t.Errorf("socket %s has mode %v, want 0600", path, fi.Mode())
			}
		}
	}
}
