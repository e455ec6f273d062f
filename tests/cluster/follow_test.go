package cluster

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/hpcdap/hpcdap/target"
	"github.com/hpcdap/hpcdap/target/ptrace"
)

// Following fork and exec from MPICH's mpiexec.hydra, which has no MPIR symbols
// (launchers.md §4): every process hydra creates is held at its first instruction; proxies
// are followed further, and each rank is recognised at its exec (its /proc/PID/exe is the
// program) and held there with its rank from PMI_RANK. With all four held, everything is let
// go and the job completes normally.
func TestHydraFollowForks(t *testing.T) {
	prog := program(t, "mpich")
	hydra, err := filepath.EvalSymlinks("/usr/bin/mpiexec.hydra")
	if err != nil {
		t.Fatalf("mpiexec.hydra: %v (install the Debian package mpich)", err)
	}
	tr, err := ptrace.NewTracer()
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	out, err := os.Create(filepath.Join(t.TempDir(), "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	launcher, err := tr.SpawnWith([]string{hydra, "-n", "4", prog}, nil, "", []*os.File{nil, out, out},
		ptrace.SpawnOptions{FollowForks: true, ExitKill: true})
	if err != nil {
		t.Fatal(err)
	}
	type proc struct {
		p      target.Process
		isRank bool
	}
	procs := map[int]*proc{launcher.Info().Pid: {p: launcher}}
	events := make(chan struct {
		pid int
		ev  target.Event
	}, 64)
	watch := func(pid int, p target.Process) {
		go func() {
			for ev := range p.Events() {
				events <- struct {
					pid int
					ev  target.Event
				}{pid, ev}
			}
		}()
	}
	watch(launcher.Info().Pid, launcher)
	launcher.Resume(launcher.Info().Pid, 0)
	ranks := map[int]int{} // rank → pid
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for len(ranks) < 4 {
		var e struct {
			pid int
			ev  target.Event
		}
		select {
		case e = <-events:
		case <-ctx.Done():
			t.Fatalf("%d of 4 ranks held when the time ran out: %v", len(ranks), ranks)
		}
		pr := procs[e.pid]
		switch e.ev.Kind {
		case target.EventFork:
			// Proxies and ranks alike start as forks; follow on until an exec says which.
			cp, err := tr.Adopt(e.ev.Child, ptrace.AdoptOptions{FollowForks: true})
			if err != nil {
				t.Fatalf("adopt %d: %v", e.ev.Child, err)
			}
			procs[e.ev.Child] = &proc{p: cp}
			watch(e.ev.Child, cp)
			cp.Resume(e.ev.Child, 0)
		case target.EventExec:
			if pr.p.Info().Exe == prog {
				pr.isRank = true
				b, _ := os.ReadFile("/proc/" + strconv.Itoa(e.pid) + "/environ")
				for _, kv := range bytes.Split(b, []byte{0}) {
					if v, ok := bytes.CutPrefix(kv, []byte("PMI_RANK=")); ok {
						r, _ := strconv.Atoi(string(v))
						ranks[r] = e.pid
					}
				}
				continue // held at its first instruction
			}
			pr.p.Resume(e.ev.Tid, 0)
		case target.EventSignal:
			pr.p.Resume(e.ev.Tid, e.ev.Signal)
		case target.EventNewThread, target.EventStopped:
			pr.p.Resume(e.ev.Tid, 0)
		case target.EventExit, target.EventThreadExit:
		}
	}
	for r := range 4 {
		pid, ok := ranks[r]
		if !ok {
			t.Fatalf("rank %d not held: %v", r, ranks)
		}
		if st := procState(pid); st != 't' {
			t.Errorf("rank %d (pid %d) state %c, want t (held)", r, pid, st)
		}
	}
	// Let everything go; the job completes on its own.
	for pid, pr := range procs {
		if err := pr.p.Detach(); err != nil {
			t.Logf("detach %d: %v", pid, err)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	// The tracer reaps its detached child, or it is left a zombie: either way it has ended.
	for st := procState(launcher.Info().Pid); st != 'Z' && st != 0; st = procState(launcher.Info().Pid) {
		if time.Now().After(deadline) {
			t.Fatalf("mpiexec.hydra still running (state %c) 30 s after the release", st)
		}
		time.Sleep(10 * time.Millisecond)
	}
	var ws syscall.WaitStatus
	syscall.Wait4(launcher.Info().Pid, &ws, syscall.WNOHANG, nil)
	b, _ := os.ReadFile(out.Name())
	if n := bytes.Count(b, []byte("/4 on ")); n != 4 {
		t.Errorf("%d rank lines after release:\n%s", n, b)
	}

}

// procState is the state letter of /proc/PID/stat (0 if gone).
func procState(pid int) byte {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return 0
	}
	return b[i+2]
}
