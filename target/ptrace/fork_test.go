//go:build linux && amd64

package ptrace

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hpcdap/hpcdap/internal/testenv"
	"github.com/hpcdap/hpcdap/procimage"
	"github.com/hpcdap/hpcdap/target"
)

var (
	forkerOnce sync.Once
	forkerBin  string
	forkerErr  error
)

// forker builds testdata/forker.c once.
func forker(t testing.TB) string {
	t.Helper()
	forkerOnce.Do(func() {
		gcc, err := exec.LookPath("gcc")
		if err != nil {
			forkerErr = fmt.Errorf("gcc not found: install the Debian package gcc")
			return
		}
		forkerBin = filepath.Join(buildDir, "forker") // removed by TestMain
		if out, err := exec.Command(gcc, "-O0", "-o", forkerBin, filepath.Join("testdata", "forker.c")).CombinedOutput(); err != nil {
			forkerErr = fmt.Errorf("gcc forker.c: %v\n%s", err, out)
		}
	})
	if forkerErr != nil {
		t.Fatal(forkerErr)
	}
	return forkerBin
}

// With FollowForks every child (fork, posix_spawn's vfork, fork without exec) is announced by
// EventFork, held before its first instruction until adopted, then traced through its exec
// to its exit, while the parent carries on.
func TestFollowForks(t *testing.T) {
	bin := forker(t)
	sh, err := filepath.EvalSymlinks("/bin/sh")
	if err != nil {
		t.Fatal(err)
	}
	tr := newTracer(t)
	p, err := tr.SpawnWith([]string{bin}, nil, "", nil, SpawnOptions{FollowForks: true})
	if err != nil {
		t.Fatal(err)
	}
	pid := p.Info().Pid
	if err := p.Resume(pid, 0); err != nil {
		t.Fatal(err)
	}
	wantCodes := []int{3, 4, 7}
	wantExec := []bool{true, true, false}
	for i := range wantCodes {
		var ev target.Event
		for {
			ev = nextEvent(t, p)
			if ev.Kind == target.EventSignal && ev.Signal == int(syscall.SIGCHLD) {
				p.Resume(ev.Tid, ev.Signal)
				continue
			}
			break
		}
		if ev.Kind != target.EventFork || ev.Tid != pid || ev.Child <= 0 {
			t.Fatalf("child %d: event %+v, want EventFork from %d", i, ev, pid)
		}
		cp, err := tr.Adopt(ev.Child, AdoptOptions{})
		if err != nil {
			t.Fatalf("Adopt(%d): %v", ev.Child, err)
		}
		// Held: stopped, traced by the tracer's thread, before its first instruction.
		if st := threadState(t, ev.Child); st != 't' {
			t.Errorf("child %d (pid %d) state %c after Adopt, want t (traced stop)", i, ev.Child, st)
		}
		if st, err := procimage.ReadStatus(ev.Child); err != nil || st.TracerPid != tr.tid {
			t.Errorf("child %d traced by %d, want the tracer thread %d (%v)", i, st.TracerPid, tr.tid, err)
		}
		if tids, err := cp.Threads(); err != nil || len(tids) != 1 || tids[0] != ev.Child {
			t.Errorf("child %d threads %v, %v", i, tids, err)
		}
		if exe := cp.Info().Exe; exe != bin {
			t.Errorf("child %d runs %s before exec, want %s", i, exe, bin)
		}
		if err := cp.Resume(ev.Child, 0); err != nil {
			t.Fatal(err)
		}
		if wantExec[i] {
			expect(t, cp, target.EventExec)
			if exe := cp.Info().Exe; exe != sh {
				t.Errorf("child %d runs %s after exec, want %s", i, exe, sh)
			}
			if err := cp.Resume(ev.Child, 0); err != nil {
				t.Fatal(err)
			}
		}
		expectExit(t, cp, wantCodes[i]<<8)
	}
	for {
		ev := nextEvent(t, p)
		if ev.Kind == target.EventSignal && ev.Signal == int(syscall.SIGCHLD) {
			p.Resume(ev.Tid, ev.Signal)
			continue
		}
		if ev.Kind != target.EventExit || ev.Status != 14<<8 {
			t.Fatalf("parent: %+v, want exit 14", ev)
		}
		break
	}
}

// Without FollowForks nothing changes: no EventFork, children run untraced.
func TestNoFollowForks(t *testing.T) {
	bin := forker(t)
	tr := newTracer(t)
	p, err := tr.Spawn([]string{bin}, nil, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	p.Resume(p.Info().Pid, 0)
	for {
		ev := nextEvent(t, p)
		switch ev.Kind {
		case target.EventSignal:
			p.Resume(ev.Tid, ev.Signal)
			continue
		case target.EventFork:
			t.Fatalf("EventFork without FollowForks: %+v", ev)
		case target.EventExit:
			if ev.Status != 14<<8 {
				t.Errorf("exit status %#x, want 14<<8", ev.Status)
			}
			return
		}
	}
}

// A child held but never adopted is let go when the tracer closes: the whole program then
// completes on its own.
func TestHeldChildReleasedOnClose(t *testing.T) {
	bin := forker(t)
	tr, err := NewTracer()
	if err != nil {
		t.Fatal(err)
	}
	p, err := tr.SpawnWith([]string{bin}, nil, "", nil, SpawnOptions{FollowForks: true})
	if err != nil {
		t.Fatal(err)
	}
	pid := p.Info().Pid
	p.Resume(pid, 0)
	ev := expect(t, p, target.EventFork)
	tr.Close()
	// The tracer no longer reaps it: completion shows as a zombie.
	deadline := time.Now().Add(eventWait)
	for threadState(t, pid) != 'Z' {
		if time.Now().After(deadline) {
			t.Fatalf("forker (child %d held) did not complete after Close: state %c", ev.Child, threadState(t, pid))
		}
		time.Sleep(5 * time.Millisecond)
	}
	syscall.Wait4(pid, nil, 0, nil)
}

// exitKillHelper is the environment variable that makes the test binary a helper: it spawns
// `sleep 60` with or without ExitKill, prints the pid and waits to be killed.
const exitKillHelper = "HPCDAP_PTRACE_EXITKILL_HELPER"

func init() {
	if mode := os.Getenv(exitKillHelper); mode != "" {
		tr, err := NewTracer()
		if err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		p, err := tr.SpawnWith([]string{"sleep", "60"}, nil, "", nil, SpawnOptions{ExitKill: mode == "kill"})
		if err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		p.Resume(p.Info().Pid, 0)
		fmt.Println(p.Info().Pid)
		select {}
	}
}

// With ExitKill the spawned process dies with the tracer's program; without, it runs on.
func TestExitKill(t *testing.T) {
	testenv.NeedTool(t, "sleep", "coreutils")
	for _, mode := range []string{"kill", "keep"} {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), exitKillHelper+"="+mode)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		line, _ := bufio.NewReader(out).ReadString('\n')
		child, err := strconv.Atoi(strings.TrimSpace(line))
		if err != nil {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("%s: helper said %q", mode, line)
		}
		cmd.Process.Kill()
		cmd.Wait()
		deadline := time.Now().Add(5 * time.Second)
		alive := func() bool {
			st, err := procimage.ReadStatus(child)
			return err == nil && st.State != 'Z'
		}
		for mode == "kill" && alive() && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		if mode == "kill" && alive() {
			t.Errorf("ExitKill: sleep %d survived its tracer", child)
		}
		if mode == "keep" {
			if !alive() {
				t.Errorf("without ExitKill: sleep %d died with its tracer", child)
			}
			syscall.Kill(child, syscall.SIGKILL)
		}
	}
}
