//go:build cgo && pmix

package pmix

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// programs builds the test programs once per test binary.
var programs struct {
	once         sync.Once
	dir          string
	ranks, plain string
	err          error
}

// buildPrograms compiles testdata/ranks.c with mpicc and testdata/plain.c with cc.
func buildPrograms(t *testing.T) (ranks, plain string) {
	t.Helper()
	programs.once.Do(func() {
		dir, err := os.MkdirTemp("", "pmixtest")
		if err != nil {
			programs.err = err
			return
		}
		programs.dir = dir
		programs.ranks, programs.plain = filepath.Join(dir, "ranks"), filepath.Join(dir, "plain")
		for _, c := range [][]string{
			{"mpicc", "-g", "-O0", "-o", programs.ranks, "testdata/ranks.c"},
			{"cc", "-g", "-O0", "-o", programs.plain, "testdata/plain.c"},
		} {
			if out, err := exec.Command(c[0], c[1:]...).CombinedOutput(); err != nil {
				programs.err = fmt.Errorf("%s: %v\n%s", strings.Join(c, " "), err, out)
				return
			}
		}
	})
	if programs.err != nil {
		t.Fatal(programs.err)
	}
	return programs.ranks, programs.plain
}

// launcher returns the absolute path of name; the tests need Open MPI 5 / PRRTE (make test-pmix).
func launcher(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Skipf("%s not found: the PMIx tests run in the Debian 13 root (make test-pmix)", name)
	}
	return p
}

// launchArgs are the launcher arguments the tests use: 4 ranks on this one machine, each
// output line labelled with its rank.
var launchArgs = []string{"--oversubscribe", "-np", "4", "--output", "tag"}

// procState returns the state letter of pid from /proc/PID/stat.
func procState(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatalf("rank pid %d: %v", pid, err)
	}
	i := strings.LastIndexByte(string(b), ')')
	return string(b[i+2])
}

// tracerPid returns TracerPid from /proc/PID/status.
func tracerPid(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatalf("rank pid %d: %v", pid, err)
	}
	m := regexp.MustCompile(`(?m)^TracerPid:\s*(\d+)`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("no TracerPid in /proc/%d/status", pid)
	}
	return string(m[1])
}

// waitEnd waits for the job's end and returns its status.
func waitEnd(t *testing.T, tool *Tool) int {
	t.Helper()
	select {
	case <-tool.Ended():
	case <-time.After(2 * time.Minute):
		t.Fatal("the job did not end")
	}
	st, err := tool.Status()
	if err != nil {
		t.Fatalf("Status: %v", err)
	}
	return st
}

// checkProcs checks a 4-rank proc table against the running processes.
func checkProcs(t *testing.T, r Ready, exe string) {
	t.Helper()
	if len(r.Procs) != 4 {
		t.Fatalf("proc table has %d entries, want 4: %+v", len(r.Procs), r.Procs)
	}
	host, _ := os.Hostname()
	for i, p := range r.Procs {
		if p.Rank != i {
			t.Errorf("entry %d has rank %d", i, p.Rank)
		}
		if p.Host != host {
			t.Errorf("rank %d host %q, want os.Hostname %q", p.Rank, p.Host, host)
		}
		if p.Executable != exe {
			t.Errorf("rank %d executable %q, want %q", p.Rank, p.Executable, exe)
		}
		if got, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", p.Pid)); err != nil || got != exe {
			t.Errorf("rank %d pid %d: /proc/PID/exe = %q, %v; want %q", p.Rank, p.Pid, got, err, exe)
		}
	}
}

func TestLaunchHoldExec(t *testing.T) {
	ranks, _ := buildPrograms(t)
	for _, name := range []string{"prterun", "mpirun"} {
		t.Run(name, func(t *testing.T) {
			tool, stdout, stderr := startTool(t, "serve")
			defer func() {
				if t.Failed() {
					b, _ := os.ReadFile(stderr)
					t.Logf("tool stderr:\n%s", b)
				}
			}()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			r, err := tool.Launch(ctx, Request{Launcher: launcher(t, name), Args: launchArgs, Program: ranks, Hold: HoldExec})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("ready: %+v", r)
			if r.Hold != HoldExec || r.Nspace == "" || r.LauncherPid <= 0 || r.Version == "" {
				t.Errorf("Ready = %+v", r)
			}
			checkProcs(t, r, ranks)
			for _, p := range r.Procs {
				if st := procState(t, p.Pid); st != "T" {
					t.Errorf("rank %d pid %d state %s, want T (stopped on exec)", p.Rank, p.Pid, st)
				}
				if tp := tracerPid(t, p.Pid); tp != "0" {
					t.Errorf("rank %d pid %d traced by %s, want untraced", p.Rank, p.Pid, tp)
				}
			}
			if err := tool.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if st := waitEnd(t, tool); st != 0 {
				t.Errorf("job status %d, want 0", st)
			}
			if err := tool.Close(); err != nil {
				t.Fatal(err)
			}
			checkOutput(t, stdout, r)
		})
	}
}

// checkOutput checks that every rank's line arrived on the tool's stdout, labelled.
func checkOutput(t *testing.T, stdout string, r Ready) {
	t.Helper()
	b, err := os.ReadFile(stdout)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, p := range r.Procs {
		want := fmt.Sprintf("<stdout>: rank %d of 4 pid %d", p.Rank, p.Pid)
		if !strings.Contains(string(b), want) {
			t.Errorf("tool stdout lacks %q", want)
		}
		lines = append(lines, want)
	}
	sort.Strings(lines)
	if t.Failed() {
		t.Logf("tool stdout:\n%s", b)
	}
}

var _ = syscall.SIGCONT
