package bgq

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hpcdap/hpcdap/internal/testenv"
)

// mpirOracle is what testdata/mpirtool.py read from runjob's MPIR symbols at MPIR_Breakpoint.
type mpirOracle struct {
	State int    `json:"state"`
	Abort string `json:"abort"`
	Table []struct {
		Host string `json:"host"`
		Exe  string `json:"exe"`
		Pid  int    `json:"pid"`
	} `json:"table"`
}

// recordingTool writes a tool that records, per I/O node, its environment, arguments and the
// toolctl_node entries it finds, into dir/tool.ion<k>.
func recordingTool(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "tool.sh")
	script := `#!/bin/sh
out=$1; shift
ion=$(basename "$(dirname "$HPCDAP_BGQ_JOBS")")
{ echo "job=$BG_JOBID tool=$BG_TOOLID args=$*"; ls "$HPCDAP_BGQ_JOBS/$BG_JOBID/toolctl_node"; } > "$out/.tool.$ion"
mv "$out/.tool.$ion" "$out/tool.$ion"
`
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// runjobArgs are runjob's options for 4 ranks, 2 per compute node, 1 compute node per I/O
// node, under root.
func runjobArgs(t *testing.T, root string, jobID int, extra ...string) []string {
	_, exe := built(t)
	return append([]string{"--np", "4", "--ranks-per-node", "2", "--cn-per-ion", "1", "--exe", exe,
		"--root", root, "--emulator", testenv.QEMUUser(t, "qemu-ppc64"), "--job-id", fmt.Sprint(jobID)}, extra...)
}

// gdbTool runs gdb with testdata/mpirtool.py on gdbArgs, with env for the script.
func gdbTool(t *testing.T, env []string, gdbArgs ...string) (mpirOracle, string) {
	t.Helper()
	gdb := testenv.NeedTool(t, "gdb", "gdb")
	script, _ := filepath.Abs(filepath.Join("testdata", "mpirtool.py"))
	cmd := exec.Command(gdb, append([]string{"-batch", "-nx", "-x", script}, gdbArgs...)...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	var o mpirOracle
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	found := false
	for sc.Scan() {
		if j, ok := strings.CutPrefix(sc.Text(), "ORACLE "); ok {
			if err := json.Unmarshal([]byte(j), &o); err != nil {
				t.Fatalf("oracle %q: %v", j, err)
			}
			found = true
		}
	}
	if !found {
		t.Fatalf("gdb read nothing at MPIR_Breakpoint (%v):\n%s", err, out)
	}
	return o, string(out)
}

// TestRunjobLaunchUnderTool: gdb starts runjob with MPIR_being_debugged set and a tool in
// MPIR_executable_path and MPIR_server_arguments, subset "2-max": runjob starts the tool on
// the I/O node of ranks 2 and 3 only, with BG_JOBID and BG_TOOLID 1, and stops at
// MPIR_Breakpoint with MPIR_DEBUG_SPAWNED and a proc table of I/O node names and compute-node
// ids; continued, the job runs to its end and runjob exits 0.
func TestRunjobLaunchUnderTool(t *testing.T) {
	hpcdap, exe := built(t)
	helper := filepath.Join(filepath.Dir(hpcdap), HelperName)
	root, rec := shortDir(t), t.TempDir()
	tool := recordingTool(t, rec)
	o, out := gdbTool(t, []string{"MPIR_MODE=launch", "MPIR_TOOL_PATH=" + tool,
		`MPIR_TOOL_ARGS=["` + rec + `", "--flag", "x y"]`, "MPIR_SUBSET=2-max"},
		append([]string{"--args", helper}, runjobArgs(t, root, 91)...)...)
	if o.State != DebugSpawned || len(o.Table) != 4 {
		t.Fatalf("at MPIR_Breakpoint: %+v\n%s", o, out)
	}
	for r, e := range o.Table {
		if want := fmt.Sprintf("ion%d", r/2); e.Host != want || e.Pid != r/2 || e.Exe != exe {
			t.Errorf("MPIR_proctable[%d] = %+v, want host %s pid %d exe %s", r, e, want, r/2, exe)
		}
	}
	for r := 0; r < 4; r++ {
		if want := fmt.Sprintf("rank %d sum %d\n", r, 6*r+242); !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if !strings.Contains(out, "exited normally") {
		t.Errorf("runjob did not exit 0:\n%s", out)
	}
	if _, err := os.Stat(filepath.Join(rec, "tool.ion0")); err == nil {
		t.Errorf("the tool ran on ion0, which serves no rank of subset 2-max")
	}
	b, err := os.ReadFile(filepath.Join(rec, "tool.ion1"))
	if want := "job=91 tool=1 args=--flag x y\n1\n"; err != nil || string(b) != want {
		t.Errorf("tool on ion1 recorded %q (%v), want %q", b, err, want)
	}
	if _, err := os.Stat(filepath.Join(root, "ion1", "jobs", "91")); !os.IsNotExist(err) {
		t.Errorf("/jobs/91 on ion1 after the job: %v", err)
	}
}

// TestRunjobRefusesBadToolArrays: an executable path of 256 bytes, server arguments without
// their double NUL within 1,024 bytes and a malformed subset are each refused with
// MPIR_DEBUG_ABORTING and a message naming the array, before any node starts; a tool that
// cannot start is refused the same way, and the loaded job ends.
func TestRunjobRefusesBadToolArrays(t *testing.T) {
	hpcdap, _ := built(t)
	helper := filepath.Join(filepath.Dir(hpcdap), HelperName)
	for _, tc := range []struct {
		name, path, args, subset, want string
	}{
		{"path256", "/" + strings.Repeat("a", 255), `["x"]`, "", "MPIR_executable_path: no NUL within 256 bytes"},
		{"args1024", "/bin/true", `"` + strings.Repeat("a", 1024) + `"`, "", "MPIR_server_arguments: no terminating empty argument"},
		{"subset", "/bin/true", `["x"]`, "1 3-x", `MPIR_subset_attach "1 3-x"`},
		{"subsetRange", "/bin/true", `["x"]`, "0-9", `MPIR_subset_attach "0-9"`},
		// Checked once the job is loaded: a tool that cannot start.
		{"toolMissing", "/nonexistent/tool", `["x"]`, "", "start tool: stat /nonexistent/tool"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := shortDir(t)
			o, out := gdbTool(t, []string{"MPIR_MODE=launch", "MPIR_TOOL_PATH=" + tc.path, "MPIR_TOOL_ARGS=" + tc.args,
				"MPIR_SUBSET=" + tc.subset}, append([]string{"--args", helper}, runjobArgs(t, root, 92)...)...)
			if o.State != DebugAborting || !strings.Contains(o.Abort, tc.want) {
				t.Fatalf("at MPIR_Breakpoint: state %d, abort %q; want ABORTING with %q\n%s", o.State, o.Abort, tc.want, out)
			}
			if !strings.Contains(out, "exited with code 01") {
				t.Errorf("runjob did not fail:\n%s", out)
			}
			gone := filepath.Join(root, "ion0") // nothing set up
			if tc.name == "toolMissing" {
				gone = filepath.Join(root, "ion0", "jobs", "92") // the job loaded, and ended
			}
			if _, err := os.Stat(gone); !os.IsNotExist(err) {
				t.Errorf("%s: %v", gone, err)
			}
		})
	}
}

// TestRunjobAttach: gdb attaches to a running runjob (started as hpcdap bgq runjob), sets MPIR_being_debugged and the tool
// arrays and continues; runjob, polling, starts the tool on every I/O node and stops at
// MPIR_Breakpoint with MPIR_DEBUG_SPAWNED and the proc table. Ended with SIGTERM, runjob
// removes the job's directories.
func TestRunjobAttach(t *testing.T) {
	hpcdap, _ := built(t)
	root, rec := shortDir(t), t.TempDir()
	tool := recordingTool(t, rec)
	outFile := filepath.Join(t.TempDir(), "runjob.out")
	f, err := os.Create(outFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// Started as users start it: hpcdap bgq runjob execs the helper, in the same process.
	rj := exec.Command(hpcdap, append([]string{"bgq", "runjob"}, runjobArgs(t, root, 93, "--poll", "100ms", "--args", "spin")...)...)
	rj.Stdout, rj.Stderr = f, f
	if err := rj.Start(); err != nil {
		t.Fatal(err)
	}
	ended := make(chan error, 1)
	go func() { ended <- rj.Wait() }()
	t.Cleanup(func() {
		rj.Process.Signal(syscall.SIGTERM)
		<-ended
	})
	// The job runs: every rank has printed its first line.
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(50 * time.Millisecond) {
		b, _ := os.ReadFile(outFile)
		if strings.Count(string(b), " sum ") == 4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the job did not start:\n%s", b)
		}
	}
	o, out := gdbTool(t, []string{"MPIR_MODE=attach", "MPIR_TOOL_PATH=" + tool, `MPIR_TOOL_ARGS=["` + rec + `"]`},
		"-p", fmt.Sprint(rj.Process.Pid))
	if o.State != DebugSpawned || len(o.Table) != 4 || o.Table[3].Host != "ion1" || o.Table[3].Pid != 1 {
		t.Fatalf("at MPIR_Breakpoint: %+v\n%s", o, out)
	}
	for k := 0; k < 2; k++ {
		p := filepath.Join(rec, fmt.Sprintf("tool.ion%d", k))
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
			b, err := os.ReadFile(p)
			if want := fmt.Sprintf("job=93 tool=1 args=\n%d\n", k); err == nil {
				if string(b) != want {
					t.Errorf("tool on ion%d recorded %q, want %q", k, b, want)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the tool did not run on ion%d", k)
			}
		}
	}
	rj.Process.Signal(syscall.SIGTERM)
	<-ended
	ended <- nil // for the cleanup
	for k := 0; k < 2; k++ {
		if _, err := os.Stat(filepath.Join(root, fmt.Sprintf("ion%d", k), "jobs", "93")); !os.IsNotExist(err) {
			t.Errorf("/jobs/93 on ion%d after runjob ended: %v", k, err)
		}
	}
}
