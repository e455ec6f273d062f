package adapter

import (
	"bufio"
	"context"
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
)

// BenchmarkGDBMPIR: what a user does by hand with gdb for the same result as
// BenchmarkMPIRunToBreakpoint — one gdb runs mpirun through MPIR (catch the load of
// libopen-rte, set MPIR_being_debugged, break on MPIR_Breakpoint, read the proctable), then
// one gdb per rank attaches in parallel and plants the breakpoint, and mpirun is continued;
// timed from start until every rank's gdb reports the breakpoint hit.
//
//	go test -run '^$' -bench GDBMPIR -benchtime 1x ./adapter
func BenchmarkGDBMPIR(b *testing.B) {
	needTool(b, "mpirun.openmpi")
	needTool(b, "gdb")
	p := compileMPI(b, "mpicc.openmpi")
	line := p.line(b, "after_init")
	for _, np := range []int{1, 4, 16, 64} {
		b.Run(fmt.Sprintf("np%d", np), func(b *testing.B) {
			var total, table time.Duration
			for range b.N {
				tab, all := gdbMPIRByHand(b, p, np, line)
				table += tab
				total += all
			}
			n := float64(b.N)
			b.ReportMetric(0, "ns/op")
			b.ReportMetric(table.Seconds()/n, "gdb-proctable-s")
			b.ReportMetric(total.Seconds()/n, "gdb-all-ranks-s")
		})
	}
}

// gdbLauncherScript is the launcher gdb's command file: the MPIR recipe of
// spec/launchers.md, then the pids one per line, then a wait (in a shell) for the go file
// that says every rank's gdb is attached, before mpirun is let go out of MPIR_Breakpoint.
const gdbLauncherScript = `set pagination off
set confirm off
set width 0
catch load libopen-rte
run
set var *(int*)&MPIR_being_debugged = 1
delete
break MPIR_Breakpoint
continue
while *(int*)&MPIR_debug_state != 1
continue
end
printf "SIZE %d\n", *(int*)&MPIR_proctable_size
set $i = 0
while $i < *(int*)&MPIR_proctable_size
printf "PID %d\n", *(int*)(*(long*)&MPIR_proctable + 24*$i + 16)
set $i = $i + 1
end
printf "TABLE-END\n"
shell while [ ! -e %s ]; do sleep 0.01; done
delete
detach
`

// gdbMPIRByHand runs one launch of the by-hand recipe and returns the time to the proctable
// read and the time until every rank stopped at line.
func gdbMPIRByHand(b *testing.B, p *program, np, line int) (time.Duration, time.Duration) {
	b.Helper()
	dir := b.TempDir()
	goFile := filepath.Join(dir, "go")
	script := filepath.Join(dir, "launcher.gdb")
	if err := os.WriteFile(script, []byte(strings.Replace(gdbLauncherScript, "%s", goFile, 1)), 0o644); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var ranks, launchers []int
	var mu sync.Mutex
	var logs []*strings.Builder
	defer func() {
		// The ranks are the launcher gdb's grandchildren; kill them before their gdbs go.
		for _, pid := range append(ranks, launchers...) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		if b.Failed() {
			mu.Lock()
			for _, l := range logs {
				b.Log(l.String())
			}
			mu.Unlock()
		}
	}()
	launcher := exec.CommandContext(ctx, "gdb", "-batch", "-nx", "-x", script,
		"--args", "mpirun.openmpi", "-np", strconv.Itoa(np), p.bin, "-")
	launcher.Env = append(os.Environ(), append(envList(ompiEnv), "OMPI_MPIR_DO_NOT_WARN=1")...)
	launcher.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	launcher.Cancel = func() error { return syscall.Kill(-launcher.Process.Pid, syscall.SIGKILL) }
	launcher.WaitDelay = 5 * time.Second
	out, err := launcher.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	launcher.Stderr = launcher.Stdout
	lLog := &strings.Builder{}
	logs = append(logs, lLog)
	t0 := time.Now()
	if err := launcher.Start(); err != nil {
		b.Fatalf("gdb mpirun: %v", err)
	}
	defer func() {
		syscall.Kill(-launcher.Process.Pid, syscall.SIGKILL)
		launcher.Wait()
	}()
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		l := sc.Text()
		lLog.WriteString(l + "\n")
		if pid, ok := strings.CutPrefix(l, "PID "); ok {
			n, err := strconv.Atoi(pid)
			if err != nil {
				b.Fatalf("gdb mpirun: proctable line %q", l)
			}
			ranks = append(ranks, n)
		}
		if l == "TABLE-END" {
			break
		}
	}
	tTable := time.Since(t0)
	// gdb runs mpirun in a process group of its own, and mpirun lingers after its ranks are
	// killed: remember it (gdb's child) to kill it at the end.
	launchers = childrenOf(launcher.Process.Pid)
	if len(ranks) != np {
		b.Fatalf("gdb mpirun: %d proctable pids, want %d (ctx %v)", len(ranks), np, ctx.Err())
	}
	// One gdb per rank, in parallel: attach, plant the breakpoint, announce READY, continue.
	ready := make(chan error, np)
	hit := make(chan error, np)
	for _, pid := range ranks {
		g := exec.CommandContext(ctx, "gdb", "-batch", "-nx", "-p", strconv.Itoa(pid),
			"-ex", "set pagination off", "-ex", "set confirm off",
			"-ex", fmt.Sprintf("break %s:%d", filepath.Base(p.src), line),
			"-ex", `echo READY\n`, "-ex", "continue", "-ex", `echo HIT-END\n`, "-ex", "kill")
		g.WaitDelay = 5 * time.Second
		gOut, err := g.StdoutPipe()
		if err != nil {
			b.Fatal(err)
		}
		g.Stderr = g.Stdout
		gLog := &strings.Builder{}
		mu.Lock()
		logs = append(logs, gLog)
		mu.Unlock()
		if err := g.Start(); err != nil {
			b.Fatalf("gdb -p %d: %v", pid, err)
		}
		go func() {
			sc := bufio.NewScanner(gOut)
			sawReady, sawHit := false, false
			for sc.Scan() {
				l := sc.Text()
				mu.Lock()
				gLog.WriteString(l + "\n")
				mu.Unlock()
				switch {
				case l == "READY" && !sawReady:
					sawReady = true
					ready <- nil
				case strings.HasPrefix(l, "Thread ") && strings.Contains(l, "hit Breakpoint 1,"),
					strings.HasPrefix(l, "Breakpoint 1,"):
					if !sawHit {
						sawHit = true
						hit <- nil
					}
				}
			}
			g.Wait()
			if !sawReady {
				ready <- fmt.Errorf("gdb -p %d: ended before the breakpoint was planted", pid)
			}
			if !sawHit {
				hit <- fmt.Errorf("gdb -p %d: ended without the breakpoint hit", pid)
			}
		}()
	}
	for range ranks {
		if err := <-ready; err != nil {
			b.Fatal(err)
		}
	}
	// Every rank is held by its gdb: let mpirun out of MPIR_Breakpoint, which releases them.
	if err := os.WriteFile(goFile, nil, 0o644); err != nil {
		b.Fatal(err)
	}
	for range ranks {
		if err := <-hit; err != nil {
			b.Fatal(err)
		}
	}
	return tTable, time.Since(t0)
}

// BenchmarkAttachLauncherPid: attach to a running 16-rank mpirun job through DAP
// launcherPid until every rank is stopped and has given its first stack trace, then a
// disconnect that leaves the job running.
//
//	go test -run '^$' -bench AttachLauncherPid -benchtime 1x ./adapter
func BenchmarkAttachLauncherPid(b *testing.B) {
	mpirun := needTool(b, "mpirun.openmpi")
	p := compileMPI(b, "mpicc.openmpi")
	const np = 16
	var stopped, stacks time.Duration
	for range b.N {
		s, a := attachLauncherPidOnce(b, mpirun, p, np, ompiEnv)
		stopped += s
		stacks += a
	}
	n := float64(b.N)
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(stopped.Seconds()/n, "all-stopped-s")
	b.ReportMetric(stacks.Seconds()/n, "all-stacks-s")
}

// attachLauncherPidOnce starts a job of np ranks waiting for a file, attaches to its mpirun,
// and returns the times until all ranks were stopped and until every rank's stack was read.
func attachLauncherPidOnce(b *testing.B, mpirun string, p *program, np int, env map[string]any) (time.Duration, time.Duration) {
	b.Helper()
	dir := b.TempDir()
	goFile, done := filepath.Join(dir, "go"), filepath.Join(dir, "done")
	if err := os.Mkdir(done, 0o755); err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(mpirun, "-np", strconv.Itoa(np), p.bin, goFile, done)
	cmd.Env = append(os.Environ(), envList(env)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		cmd.Wait()
	}()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		ready, _ := filepath.Glob(filepath.Join(done, "ready.*"))
		if len(ready) == np && len(ranksOf(cmd.Process.Pid, p.bin)) == np {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("mpirun %d: %d of %d ranks ready", cmd.Process.Pid, len(ready), np)
		}
		time.Sleep(50 * time.Millisecond)
	}
	d := newDAP(b, viaPipe)
	t0 := time.Now()
	d.initialize()
	d.call("attach", map[string]any{"launcherPid": cmd.Process.Pid, "stopAtEntry": true}, nil)
	d.event("initialized")
	d.call("configurationDone", nil, nil)
	if s := d.stopped(); s.Reason != "entry" {
		b.Fatalf("stop %+v, want the entry stop", s)
	}
	var rs []RankState
	for {
		rs = d.ranks().Ranks
		all := len(rs) == np
		for _, r := range rs {
			all = all && r.State == "stopped"
		}
		if all {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("ranks %+v: want %d stopped", rs, np)
		}
		time.Sleep(10 * time.Millisecond)
	}
	tStopped := time.Since(t0)
	for _, r := range rs {
		if frames := d.stackTrace(r.ThreadID); indexOfFrame(frames, 0, "main") < 0 {
			b.Fatalf("rank %d: stack %v has no main", r.Rank, frameNames(frames))
		}
	}
	tStacks := time.Since(t0)
	d.c.Request("disconnect", map[string]any{"terminateDebuggee": false})
	d.end()
	if err := os.WriteFile(goFile, nil, 0o644); err != nil {
		b.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	select {
	case err := <-waited:
		// Each rank exits with 10+rank, so mpirun's status reflects that; what matters is that
		// the job ran to its end after the detach.
		_ = err
		for r := 0; r < np; r++ {
			if _, err := os.Stat(filepath.Join(done, "rank."+strconv.Itoa(r))); err != nil {
				b.Errorf("rank %d did not finish after the detach: %v", r, err)
			}
		}
	case <-time.After(90 * time.Second):
		b.Errorf("the job did not finish after the detach")
	}
	return tStopped, tStacks
}
