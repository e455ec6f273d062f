package pmix

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// toolEnv selects what this test binary does when a test starts it as the tool process.
const toolEnv = "HPCDAP_PMIX_TEST_TOOL"

func TestMain(m *testing.M) {
	switch os.Getenv(toolEnv) {
	case "":
		os.Exit(m.Run())
	case "serve":
		if err := ServeTool(os.Stdin, os.NewFile(3, "events")); err != nil {
			fmt.Fprintf(os.Stderr, "hpcdap pmix-tool: %v\n", err)
			os.Exit(1)
		}
		os.Exit(0)
	case "die-on-request":
		// A tool that crashes on its first request, saying so on stderr.
		bufio.NewReader(os.Stdin).ReadString('\n')
		fmt.Fprintln(os.Stderr, "fake tool: crashed on request")
		os.Exit(7)
	case "hang":
		// A tool that never answers and ignores end of input.
		io.Copy(io.Discard, os.Stdin)
		time.Sleep(time.Hour)
	case "ready-then-die":
		// A tool that reports a held job, then dies on the next request.
		events := os.NewFile(3, "events")
		in := bufio.NewReader(os.Stdin)
		line, _ := in.ReadString('\n')
		var r Request
		json.Unmarshal([]byte(line), &r)
		fmt.Fprintf(events, `{"ev":"ready","seq":%d,"launcherPid":1,"nspace":"job@1","hold":"exec","procs":[{"rank":0,"host":"h","pid":1,"executable":"/bin/true"}],"status":0}`+"\n", r.Seq)
		in.ReadString('\n')
		fmt.Fprintln(os.Stderr, "fake tool: crashed on release")
		os.Exit(9)
	case "late-error":
		// A tool that answers its first request only after the second, with an error, and
		// then the second.
		events := os.NewFile(3, "events")
		in := bufio.NewScanner(os.Stdin)
		var seqs []any
		for len(seqs) < 2 && in.Scan() {
			var r map[string]any
			json.Unmarshal(in.Bytes(), &r)
			seqs = append(seqs, r["seq"])
		}
		enc := json.NewEncoder(events)
		enc.Encode(map[string]any{"ev": "error", "seq": seqs[0], "error": "fake tool: late error"})
		enc.Encode(map[string]any{"ev": "released", "seq": seqs[1], "status": 0})
		io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	case "stale-replies":
		// A tool that writes many replies no request waits for, then the job's end.
		for range 100 {
			fmt.Fprintln(os.NewFile(3, "events"), `{"ev":"released","seq":1000,"status":0}`)
		}
		fmt.Fprintln(os.NewFile(3, "events"), `{"ev":"end","nspace":"job@1","status":5}`)
		io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	case "last-words":
		// A tool that says why it ends, leaves a child holding its stderr open (as a launcher
		// it detached from does), and exits.
		syscall.CloseOnExec(3)
		sleep := exec.Command("sleep", "30")
		sleep.Stderr = os.Stderr
		sleep.Start()
		// The test ends it through its pid, on stdout.
		fmt.Println(sleep.Process.Pid)
		fmt.Fprintln(os.Stderr, "fake tool: last words")
		os.Exit(4)
	}
	fmt.Fprintf(os.Stderr, "%s=%q: unknown mode\n", toolEnv, os.Getenv(toolEnv))
	os.Exit(2)
}

// startTool starts this test binary as a tool process in mode, with extra environment; its
// stdout and stderr go to files in the test's directory, whose paths are returned. Its TMPDIR
// is that directory unless env sets it.
func startTool(t *testing.T, mode string, env ...string) (tool *Tool, stdout, stderr string) {
	t.Helper()
	dir := t.TempDir()
	stdout, stderr = filepath.Join(dir, "stdout"), filepath.Join(dir, "stderr")
	fo, err := os.Create(stdout)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fo.Close() })
	fe, err := os.Create(stderr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fe.Close() })
	env = append(append(os.Environ(), toolEnv+"="+mode, "TMPDIR="+dir), env...)
	tool, err = StartTool(context.Background(), os.Args[0], env, fo, fe)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tool.Close() })
	return tool, stdout, stderr
}

func TestBuiltWithoutPMIx(t *testing.T) {
	if Built {
		t.Skip("this test binary holds the PMIx tool")
	}
	err := ServeTool(strings.NewReader(""), os.Stderr)
	if err == nil || err.Error() != "this hpcdap was built without PMIx (build with libpmix: make build)" {
		t.Fatalf("ServeTool = %v", err)
	}
	// Through a tool process, a launch fails at once with the tool's own words.
	tool, _, _ := startTool(t, "serve")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err = tool.Launch(ctx, Request{Launcher: "/bin/true", Program: "/bin/true"})
	if err == nil || !strings.Contains(err.Error(), "built without PMIx") || !strings.Contains(err.Error(), "exited with status 1") {
		t.Fatalf("Launch = %v, want the tool's exit and its message", err)
	}
}

func TestToolDiesOnRequest(t *testing.T) {
	tool, _, stderr := startTool(t, "die-on-request")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := tool.Launch(ctx, Request{Launcher: "/bin/true", Program: "/bin/true"})
	if err == nil {
		t.Fatal("Launch succeeded against a tool that died")
	}
	for _, want := range []string{"pmix: launch:", "exited with status 7", "fake tool: crashed on request"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Launch error %q lacks %q", err, want)
		}
	}
	// Every later call fails at once with the same account.
	for name, call := range map[string]func() error{
		"Release": func() error { return tool.Release(ctx) },
		"Kill":    func() error { return tool.Kill(ctx, syscall.SIGTERM) },
		"Detach":  func() error { return tool.Detach(ctx) },
		"Attach":  func() error { _, err := tool.Attach(ctx, 1, ""); return err },
	} {
		if err := call(); err == nil || !strings.Contains(err.Error(), "exited with status 7") {
			t.Errorf("%s after the tool died = %v", name, err)
		}
	}
	select {
	case <-tool.Ended():
	case <-ctx.Done():
		t.Fatal("Ended not closed after the tool died")
	}
	if _, err := tool.Status(); err == nil {
		t.Error("Status after the tool died gives no error")
	}
	if err := tool.Close(); err != nil {
		t.Errorf("Close = %v", err)
	}
	if err := tool.Close(); err != nil {
		t.Errorf("second Close = %v", err)
	}
	b, _ := os.ReadFile(stderr)
	if !strings.Contains(string(b), "fake tool: crashed on request") {
		t.Errorf("the tool's stderr file holds %q, want its message passed on", b)
	}
}

func TestToolDiesWhileHeld(t *testing.T) {
	tool, _, _ := startTool(t, "ready-then-die")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := tool.Launch(ctx, Request{Launcher: "/bin/true", Program: "/bin/true", Hold: HoldExec})
	if err != nil {
		t.Fatal(err)
	}
	if r.Nspace != "job@1" || r.Hold != HoldExec || len(r.Procs) != 1 || r.Procs[0].Executable != "/bin/true" {
		t.Fatalf("Ready = %+v", r)
	}
	// Close releases a held job first; the release meets the crash and says so.
	err = tool.Close()
	if err == nil || !strings.Contains(err.Error(), "exited with status 9") || !strings.Contains(err.Error(), "crashed on release") {
		t.Fatalf("Close = %v", err)
	}
}

func TestToolHangsContext(t *testing.T) {
	defer func(w time.Duration) { closeWait = w }(closeWait)
	closeWait = time.Second
	tool, _, _ := startTool(t, "hang")
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := tool.Launch(ctx, Request{Launcher: "/bin/true", Program: "/bin/true"})
	if err == nil || !strings.Contains(err.Error(), context.DeadlineExceeded.Error()) {
		t.Fatalf("Launch = %v, want the context's deadline", err)
	}
	// Close ends a tool that ignores end of input.
	pid := tool.Pid()
	if err := tool.Close(); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("Close = %v, want a report of the kill", err)
	}
	if err := syscall.Kill(pid, 0); err != syscall.ESRCH {
		t.Fatalf("tool process %d still exists after Close: %v", pid, err)
	}
}

// TestLateReplyDropped: an error the tool sends for a request whose caller gave up is not
// taken as the next request's answer.
func TestLateReplyDropped(t *testing.T) {
	tool, _, _ := startTool(t, "late-error")
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	_, err := tool.Launch(ctx, Request{Launcher: "/bin/true", Program: "/bin/true"})
	cancel()
	if err == nil || !strings.Contains(err.Error(), context.DeadlineExceeded.Error()) {
		t.Fatalf("Launch = %v, want the context's deadline", err)
	}
	ctx, cancel = context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := tool.Release(ctx); err != nil {
		t.Fatalf("Release = %v, want its own reply", err)
	}
}

// TestStaleRepliesDoNotStallEnd: replies nobody waits for do not hold up the job's end.
func TestStaleRepliesDoNotStallEnd(t *testing.T) {
	tool, _, _ := startTool(t, "stale-replies")
	select {
	case <-tool.Ended():
	case <-time.After(time.Minute):
		t.Fatal("Ended not closed after the tool reported the job's end")
	}
	if st, err := tool.Status(); st != 5 || err != nil {
		t.Fatalf("Status = %d, %v; want 5", st, err)
	}
}

// TestToolExitKeepsLastWords: the error for an exited tool holds what it wrote last, though a
// process it left behind holds its standard error open.
func TestToolExitKeepsLastWords(t *testing.T) {
	for i := range 20 {
		tool, stdout, _ := startTool(t, "last-words")
		<-tool.Ended()
		if b, err := os.ReadFile(stdout); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		_, err := tool.Status()
		if err == nil || !strings.Contains(err.Error(), "exited with status 4") || !strings.Contains(err.Error(), "fake tool: last words") {
			t.Fatalf("run %d: Status = %v, want the exit and the last words", i, err)
		}
	}
}
