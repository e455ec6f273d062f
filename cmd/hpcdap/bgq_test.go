package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestBGQUsage: the bgq commands' usage errors exit with status 2 and start nothing; runjob
// without its MPIR helper beside the binary says where it looked.
func TestBGQUsage(t *testing.T) {
	for _, tt := range []struct {
		args    []string
		code    int
		wantErr string
	}{
		{[]string{"bgq"}, 2, "usage: hpcdap bgq"},
		{[]string{"bgq", "nosuch"}, 2, `unknown command "nosuch"`},
		{[]string{"bgq", "runjob", "--envs", "NOVALUE"}, 2, `--envs "NOVALUE": want NAME=VALUE`},
		{[]string{"bgq", "runjob", "--exe", "x", "extra"}, 2, `unexpected arguments ["extra"]`},
		{[]string{"bgq", "start_tool", "--id", "5"}, 2, "usage: hpcdap bgq start_tool"},
		{[]string{"bgq", "end_tool", "--id", "5", "--tool", "x"}, 2, "usage: hpcdap bgq end_tool"},
		{[]string{"bgq", "runjob", "--np", "2", "--exe", "x"}, 1, "hpcdap-runjob is missing"},
	} {
		var out, errOut bytes.Buffer
		code := run(tt.args, &out, &errOut)
		if code != tt.code || !strings.Contains(errOut.String(), tt.wantErr) {
			t.Errorf("run(%q) = %d, stderr %q; want %d and %q", tt.args, code, errOut.String(), tt.code, tt.wantErr)
		}
	}
}
