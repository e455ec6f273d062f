package bgq

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// beatingTool writes a tool that records its start in dir/run.<tool>.<ion> and its SIGTERM in
// dir/term.<tool>.<ion>, and, given "beat", touches its status file ten times a second.
func beatingTool(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "beat.sh")
	script := `#!/bin/sh
out=$1; mode=$2
ion=$(basename "$(dirname "$HPCDAP_BGQ_JOBS")")
status="$HPCDAP_BGQ_JOBS/$BG_JOBID/tools_status/$BG_TOOLID"
trap 'echo terminated > "$out/term.$BG_TOOLID.$ion"; exit 0' TERM
echo "job=$BG_JOBID tool=$BG_TOOLID mode=$mode" > "$out/.run.$BG_TOOLID.$ion"
mv "$out/.run.$BG_TOOLID.$ion" "$out/run.$BG_TOOLID.$ion"
while :; do
	if [ "$mode" = beat ]; then touch "$status"; fi
	sleep 0.1
done
`
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// startSpinningJob starts runjob (through its helper) on ranks that run until ended, waits
// for its control socket, and returns runjob's pid (the helper's, which holds the MPIR
// symbols).
func startSpinningJob(t *testing.T, root string, jobID int, extra ...string) int {
	t.Helper()
	hpcdap, _ := built(t)
	helper := filepath.Join(filepath.Dir(hpcdap), HelperName)
	rj := exec.Command(helper, runjobArgs(t, root, jobID, append([]string{"--args", "spin"}, extra...)...)...)
	rj.Stdout, rj.Stderr = os.Stderr, os.Stderr
	if err := rj.Start(); err != nil {
		t.Fatal(err)
	}
	ended := make(chan struct{})
	go func() { rj.Wait(); close(ended) }()
	t.Cleanup(func() {
		rj.Process.Signal(syscall.SIGTERM)
		<-ended
	})
	waitFor(t, "runjob's control socket", func() bool {
		_, err := os.Stat(ControlPath(root, uint64(jobID)))
		return err == nil
	})
	return rj.Process.Pid
}

// waitFor polls cond until it holds (a hang guard of two minutes, not a timing).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Minute); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no %s after 2 minutes", what)
		}
	}
}

// hpcdapCmd runs the built hpcdap with args and returns its output and exit status.
func hpcdapCmd(t *testing.T, args ...string) (string, int) {
	t.Helper()
	hpcdap, _ := built(t)
	out, err := exec.Command(hpcdap, args...).CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return string(out), code
}

func exists(p string) bool { _, err := os.Lstat(p); return err == nil }

// TestStartToolEndTool: start_tool starts a tool on every I/O node of a running job with the
// next tool id, BG_JOBID and BG_TOOLID, tools/<id> naming its executable, the job named by its
// id or by its runjob's pid (tool 2); end_tool sends it SIGTERM and its entries go, the other
// tool running on; bad ids are refused by name.
func TestStartToolEndTool(t *testing.T) {
	root, rec := shortDir(t), t.TempDir()
	tool := beatingTool(t, rec)
	pid := startSpinningJob(t, root, 94)
	jobDir := func(k int) string { return filepath.Join(root, fmt.Sprintf("ion%d", k), "jobs", "94") }

	for id := 1; id <= 2; id++ {
		job := []string{"--id", "94", "--root", root}
		if id == 2 {
			job = []string{"--pid", fmt.Sprint(pid)} // whatever the job's root
		}
		out, code := hpcdapCmd(t, append(append([]string{"bgq", "start_tool"}, job...), "--tool", tool, "--args", rec+" beat")...)
		if want := fmt.Sprintf("tool %d started for job 94\n", id); code != 0 || out != want {
			t.Fatalf("start_tool: %d %q, want %q", code, out, want)
		}
		for k := 0; k < 2; k++ {
			p := filepath.Join(rec, fmt.Sprintf("run.%d.ion%d", id, k))
			waitFor(t, p, func() bool { return exists(p) })
			if b, _ := os.ReadFile(p); string(b) != fmt.Sprintf("job=94 tool=%d mode=beat\n", id) {
				t.Errorf("%s: %q", p, b)
			}
			if l, err := os.Readlink(filepath.Join(jobDir(k), "tools", fmt.Sprint(id))); err != nil || l != tool {
				t.Errorf("ion%d tools/%d → %q, %v", k, id, l, err)
			}
		}
	}
	out, code := hpcdapCmd(t, "bgq", "end_tool", "--id", "94", "--tool", "1", "--root", root)
	if code != 0 || out != "tool 1 of job 94 ended\n" {
		t.Fatalf("end_tool: %d %q", code, out)
	}
	for k := 0; k < 2; k++ {
		if b, err := os.ReadFile(filepath.Join(rec, fmt.Sprintf("term.1.ion%d", k))); err != nil || string(b) != "terminated\n" {
			t.Errorf("tool 1 on ion%d was not ended by SIGTERM: %q %v", k, b, err)
		}
		for _, e := range []string{"tools/1", "tools_status/1"} {
			if exists(filepath.Join(jobDir(k), e)) {
				t.Errorf("ion%d %s after end_tool", k, e)
			}
		}
		if !exists(filepath.Join(jobDir(k), "tools", "2")) || exists(filepath.Join(rec, fmt.Sprintf("term.2.ion%d", k))) {
			t.Errorf("tool 2 on ion%d did not run on", k)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"end_tool", "--id", "94", "--tool", "7"}, "end tool 7 of job 94: no such tool"},
		{[]string{"end_tool", "--pid", fmt.Sprint(pid), "--tool", "7"}, "end tool 7 of job 94: no such tool"},
		{[]string{"start_tool", "--pid", "1", "--tool", tool}, "start_tool the job of runjob pid 1: dial unix"},
		{[]string{"start_tool", "--id", "999", "--tool", tool}, "start_tool job 999"},
		{[]string{"start_tool", "--id", "94", "--tool", "/nonexistent/tool"}, "start tool: stat /nonexistent/tool"},
	} {
		out, code := hpcdapCmd(t, append(append([]string{"bgq"}, tc.args...), "--root", root)...)
		if code != 1 || !strings.Contains(out, tc.want) {
			t.Errorf("hpcdap bgq %v: %d %q, want status 1 and %q", tc.args, code, out, tc.want)
		}
	}
}

// TestToolHeartbeat: a tool whose status file goes untouched for the tool timeout is ended
// with SIGTERM; one that touches it runs on.
func TestToolHeartbeat(t *testing.T) {
	root, rec := shortDir(t), t.TempDir()
	tool := beatingTool(t, rec)
	startSpinningJob(t, root, 95, "--tool-timeout", "3s")
	for _, mode := range []string{"beat", "silent"} { // tools 1 and 2
		if out, code := hpcdapCmd(t, "bgq", "start_tool", "--id", "95", "--tool", tool, "--args", rec+" "+mode, "--root", root); code != 0 {
			t.Fatalf("start_tool: %s", out)
		}
	}
	beat, silent := "1", "2"
	for k := 0; k < 2; k++ {
		p := filepath.Join(rec, fmt.Sprintf("term.%s.ion%d", silent, k))
		waitFor(t, "SIGTERM of the silent tool on ion"+fmt.Sprint(k), func() bool { return exists(p) })
		jd := filepath.Join(root, fmt.Sprintf("ion%d", k), "jobs", "95")
		waitFor(t, "its entries removed", func() bool { return !exists(filepath.Join(jd, "tools", silent)) })
		if exists(filepath.Join(rec, fmt.Sprintf("term.%s.ion%d", beat, k))) || !exists(filepath.Join(jd, "tools", beat)) {
			t.Errorf("the tool that beats was ended on ion%d", k)
		}
	}
}

// TestRunjobBadOptions: runjob refuses a job it cannot run before any node starts.
func TestRunjobBadOptions(t *testing.T) {
	hpcdap, exe := built(t)
	helper := filepath.Join(filepath.Dir(hpcdap), HelperName)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--np", "2", "--exe", "/nonexistent/app"}, "executable: stat /nonexistent/app"},
		{[]string{"--np", "0", "--exe", exe}, "--np 0: want at least one rank"},
		{[]string{"--np", "2", "--ranks-per-node", "65", "--exe", exe}, "--ranks-per-node 65: want 1 to 64"},
	} {
		root := shortDir(t)
		out, err := exec.Command(helper, append(tc.args, "--root", root)...).CombinedOutput()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(string(out), tc.want) {
			t.Errorf("runjob %q: %v %q, want status 1 and %q", tc.args, err, out, tc.want)
		}
		if exists(filepath.Join(root, "ion0")) {
			t.Errorf("runjob %q set up an I/O node", tc.args)
		}
	}
}
