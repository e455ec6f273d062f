package agent

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hpcdap/hpcdap/cdti"
	"github.com/hpcdap/hpcdap/internal/testenv"
)

// mpichProgram compiles testdata/mpi.c with MPICH's compiler wrapper.
func mpichProgram(t testing.TB) (prog, hydra string) {
	t.Helper()
	cc, err := exec.LookPath("mpicc.mpich")
	if err != nil {
		t.Fatal("mpicc.mpich not found: install the Debian packages mpich and libmpich-dev")
	}
	if hydra, err = exec.LookPath("mpiexec.hydra"); err != nil {
		t.Fatal("mpiexec.hydra not found: install the Debian package mpich")
	}
	prog = filepath.Join(t.TempDir(), "mpi")
	out, err := exec.Command(cc, "-g", "-O0", "-fno-omit-frame-pointer", "-no-pie", "-o", prog, filepath.Join("testdata", "mpi.c")).CombinedOutput()
	if err != nil {
		t.Fatalf("mpicc.mpich: %v\n%s", err, out)
	}
	return prog, hydra
}

// Fork/exec following with MPICH's real mpiexec.hydra, which has no usable MPIR symbols: the
// four ranks are caught at their exec of the program, held there (state t, loaded), with
// their ranks 0..3 from PMI_RANK, announced by ranks.subscribe and listed by ranks; the
// launcher's proxies are let go once all four are caught. A breakpoint at main (nm) is hit by
// all four, which then run to exit 0, and the launcher's exit is reported.
func TestFollowExecHydra(t *testing.T) {
	prog, hydra := mpichProgram(t)
	h := newHarness(t, "")
	m, _ := dialMgmt(t, h.addr)
	var empty struct{}
	if err := m.call("ranks.subscribe", struct{}{}, &empty); err != nil {
		t.Fatal(err)
	}
	out := newOutFile(t)
	err := h.a.FollowExec(FollowSpec{Argv: []string{hydra, "-n", "4", prog}, Program: prog,
		Stdio: []*os.File{nil, out.f, out.f}})
	if err != nil {
		t.Fatal(err)
	}
	launcherPid := func() int {
		li, ok := h.a.LauncherInfo()
		if !ok {
			t.Fatal("no launcher")
		}
		return li.Pid
	}()
	announced := map[int]RankInfo{}
	for len(announced) < 4 {
		msg := m.read(60 * time.Second)
		if msg.Method != RankNotification || msg.ID != nil {
			t.Fatalf("unexpected management message %+v", msg)
		}
		var r RankInfo
		if err := json.Unmarshal(msg.Params, &r); err != nil {
			t.Fatal(err)
		}
		if _, dup := announced[r.Rank]; dup {
			t.Fatalf("rank %d announced twice", r.Rank)
		}
		announced[r.Rank] = r
	}
	for rank := range 4 {
		r, ok := announced[rank]
		if !ok {
			t.Fatalf("rank %d not announced: %+v", rank, announced)
		}
		if r.State != "loaded" || r.JobSize != 4 || r.Executable != prog {
			t.Errorf("rank %d announced as %+v, want loaded, job size 4, %s", rank, r, prog)
		}
		// Oracles independent of the agent: the process runs the program, its environment
		// names the rank, and it is stopped under a tracer.
		if exe, _ := os.Readlink("/proc/" + strconv.Itoa(r.Pid) + "/exe"); exe != prog {
			t.Errorf("rank %d: pid %d runs %q", rank, r.Pid, exe)
		}
		env, _ := os.ReadFile("/proc/" + strconv.Itoa(r.Pid) + "/environ")
		if !bytes.Contains(env, []byte("\x00PMI_RANK="+strconv.Itoa(rank)+"\x00")) {
			t.Errorf("rank %d: pid %d environment lacks PMI_RANK=%d", rank, r.Pid, rank)
		}
		if st := taskStates(t, r.Pid)[r.Pid]; st != 't' {
			t.Errorf("rank %d: pid %d state %c, want t (held at its exec)", rank, r.Pid, st)
		}
		if procStatus(t, r.Pid, "TracerPid") == "0" {
			t.Errorf("rank %d: not traced", rank)
		}
	}
	var listed []RankInfo
	if err := m.call("ranks", struct{}{}, &listed); err != nil {
		t.Fatal(err)
	}
	if len(listed) != 4 {
		t.Fatalf("ranks lists %d entries: %+v", len(listed), listed)
	}
	// Every process but the ranks and the launcher is let go: hydra's proxies run untraced.
	for _, pid := range descendants(launcherPid) {
		isRank := false
		for _, r := range announced {
			isRank = isRank || r.Pid == pid
		}
		if !isRank && procStatus(t, pid, "TracerPid") != "0" {
			t.Errorf("pid %d (%s), not a rank, still traced", pid, readComm(pid))
		}
	}

	main := testenv.NMSymbol(t, prog, "main")
	tt := h.dial(1)
	for rank := range uint32(4) {
		tt.attach(rank, 99, "fe")
		tt.control(rank, int(syscall.SIGSTOP), cdti.DynamicNotifyDLoader)
	}
	stopped := map[uint32]bool{}
	for len(stopped) < 4 {
		n := tt.notify()
		if n.Kind != cdti.NotifyTypeSignal || n.Signal.Signal != uint32(syscall.SIGSTOP) || stopped[n.Rank] {
			t.Fatalf("notification %+v, want each rank's SIGSTOP once", n)
		}
		stopped[n.Rank] = true
	}
	for rank := range uint32(4) {
		tt.setBreak(rank, main)
		tt.cont(rank)
	}
	hits := map[uint32]bool{}
	for len(hits) < 4 {
		n := tt.notify()
		if n.Kind != cdti.NotifyTypeSignal || n.Signal.Reason != cdti.SignalBreakpoint || n.Signal.InstAddress != main {
			t.Fatalf("notification %+v, want the breakpoint at main %#x", n, main)
		}
		if hits[n.Rank] {
			t.Fatalf("rank %d hit main twice", n.Rank)
		}
		hits[n.Rank] = true
		tt.cont(n.Rank)
	}
	for ended := 0; ended < 4; {
		n := tt.notify()
		if n.Kind != cdti.NotifyTypeTermination {
			t.Fatalf("notification %+v, want a termination", n)
		}
		if !n.Exit.Exited() || n.Exit.ExitCode() != 0 {
			t.Errorf("rank %d ended with %v", n.Rank, n.Exit)
		}
		ended++
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		li, _ := h.a.LauncherInfo()
		if li.State == "exited" {
			if li.ExitStatus == nil || *li.ExitStatus != 0 || li.Ranks != 4 {
				t.Errorf("launcher %+v, want exit status 0 and 4 ranks", li)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("launcher still %s 30 s after its ranks ended", li.State)
		}
		time.Sleep(10 * time.Millisecond)
	}
	for rank := range 4 {
		if !strings.Contains(out.String(), "rank "+strconv.Itoa(rank)+" of 4\n") {
			t.Errorf("output lacks rank %d's line:\n%s", rank, out.String())
		}
	}
}

// descendants lists every process below pid.
func descendants(pid int) []int {
	var out []int
	for _, c := range childrenOf(pid) {
		out = append(out, c)
		out = append(out, descendants(c)...)
	}
	return out
}

func readComm(pid int) string {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	return strings.TrimSpace(string(b))
}

// The built binary with --follow-exec: the ranks hydra starts are announced and held. With
// --kill-on-exit, losing the front end's connection kills the ranks and the launcher; without,
// a shutdown lets the held ranks start and the job completes on its own.
func TestBinaryFollowExec(t *testing.T) {
	prog, hydra := mpichProgram(t)
	for _, kill := range []bool{true, false} {
		name := "detach"
		if kill {
			name = "kill-on-exit"
		}
		t.Run(name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "out")
			args := []string{"--listen", "127.0.0.1:0", "--output", out, "--follow-exec", prog}
			if kill {
				args = append(args, "--kill-on-exit")
			}
			args = append(args, "--", hydra, "-n", "2", prog)
			ap := startAgentBinary(t, []string{"HPCDAP_TOKEN=" + testToken}, args...)
			addr := ap.listening(t)
			m, hello := dialMgmt(t, addr)
			if !contains(hello.Capabilities, CapabilityLauncher) {
				t.Errorf("capabilities %q", hello.Capabilities)
			}
			var li LauncherInfo
			if err := m.call("launcher", struct{}{}, &li); err != nil || li.Rank != nil || li.Executable != hydra {
				t.Fatalf("launcher %+v %v, want %s not served on CDTI", li, err, hydra)
			}
			var empty struct{}
			if err := m.call("ranks.subscribe", struct{}{}, &empty); err != nil {
				t.Fatal(err)
			}
			pids := map[int]int{}
			for len(pids) < 2 {
				msg := m.read(60 * time.Second)
				var r RankInfo
				if msg.Method != RankNotification || json.Unmarshal(msg.Params, &r) != nil {
					t.Fatalf("unexpected message %+v", msg)
				}
				pids[r.Rank] = r.Pid
			}
			if kill {
				m.nc.Close()
				for _, pid := range append([]int{li.Pid}, pids[0], pids[1]) {
					waitDead(t, pid)
				}
				if err := ap.cmd.Wait(); err != nil {
					t.Errorf("agent exit: %v", err)
				}
				return
			}
			if err := m.call("shutdown", ShutdownParams{}, &empty); err != nil {
				t.Fatal(err)
			}
			if err := ap.cmd.Wait(); err != nil {
				t.Errorf("agent exit: %v", err)
			}
			deadline := time.Now().Add(30 * time.Second)
			for {
				b, _ := os.ReadFile(out)
				if strings.Contains(string(b), "rank 0 of 2\n") && strings.Contains(string(b), "rank 1 of 2\n") {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the job did not complete after the agent left; output:\n%s", b)
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
}

// FollowExec with a launcher that is not MPI (a shell that forks before it execs the program,
// with PMI_RANK and PMI_SIZE set as a PMI launcher would): the rank is caught at its exec with
// its job size; a process the rank forks is let go (it would otherwise stay held for an
// adoption and the rank's waitpid would never return): the rank reports its child's exit 7.
func TestFollowExecReleasesRanksChildren(t *testing.T) {
	h := newHarness(t, "")
	out := newOutFile(t)
	// "; true" keeps the shell from exec'ing the program in place: it forks first.
	script := `PMI_RANK=0 PMI_SIZE=1 "$0" fork; true`
	err := h.a.FollowExec(FollowSpec{Argv: []string{"sh", "-c", script, progBin}, Program: progBin,
		Stdio: []*os.File{nil, out.f, out.f}})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for len(h.a.RankInfos()) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no rank caught")
		}
		time.Sleep(5 * time.Millisecond)
	}
	r := h.a.RankInfos()[0]
	if r.Rank != 0 || r.JobSize != 1 || r.State != "loaded" {
		t.Fatalf("rank %+v", r)
	}
	tt := h.dial(1)
	tt.attach(0, 99, "fe")
	tt.control(0, 0, cdti.DynamicNotifyDLoader)
	if st := tt.waitTermination(0); !st.Exited() || st.ExitCode() != 0 {
		t.Fatalf("rank ended with %v", st)
	}
	out.waitFor(t, "child 7\n")
	for {
		li, _ := h.a.LauncherInfo()
		if li.State == "exited" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("launcher %+v did not end", li)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// killFollowed follows a shell launcher running script (which prints "ready" and then reads
// from a pipe kept open), kills the following once it is ready (Shutdown with kill), and
// returns what the launcher printed by the time Shutdown returned.
func killFollowed(t *testing.T, script string) string {
	t.Helper()
	h := newKillHarness(t, true)
	out := newOutFile(t)
	in, keep, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	defer keep.Close()
	err = h.a.FollowExec(FollowSpec{Argv: []string{"sh", "-c", script}, Program: progBin,
		Stdio: []*os.File{in, out.f, out.f}})
	if err != nil {
		t.Fatal(err)
	}
	out.waitFor(t, "ready\n")
	h.a.Shutdown(true)
	return out.String()
}

// A kill that ends the following tells the launcher with SIGTERM, and the launcher handles it
// (a shell whose trap prints "term", waiting in a read from a pipe): the signal's stop is
// passed through to the launcher, not left unread with the launcher stopped in it until it
// is killed outright. Four rounds, each with a new agent, since the signal's stop raced the
// end of the following.
func TestFollowKillTellsLauncher(t *testing.T) {
	for round := range 4 {
		t.Run(strconv.Itoa(round), func(t *testing.T) {
			out := killFollowed(t, `trap 'echo term; exit 3' TERM; echo ready; read line`)
			if !strings.Contains(out, "term\n") {
				t.Errorf("the launcher did not handle SIGTERM; its output:\n%s", out)
			}
		})
	}
}

// A process the launcher creates once the following has ended (here in its SIGTERM handler,
// as a launcher that forks to end its job does) is let go at once: the launcher, which waits
// for it, then ends on its own instead of waiting until it is killed outright.
func TestFollowLetsLateChildGo(t *testing.T) {
	out := killFollowed(t, `trap 'sh -c "echo late"; echo term; exit 3' TERM; echo ready; read line`)
	if !strings.Contains(out, "late\nterm\n") {
		t.Errorf("the launcher's child did not run before the launcher was killed; output:\n%s", out)
	}
}

// FollowExec refuses what it cannot follow, naming the problem.
func TestFollowExecErrors(t *testing.T) {
	h := newHarness(t, "")
	for _, c := range []struct {
		spec FollowSpec
		want string
	}{
		{FollowSpec{Program: progBin}, "no launcher"},
		{FollowSpec{Argv: []string{"true"}, Program: filepath.Join(t.TempDir(), "nosuch")}, "nosuch"},
		{FollowSpec{Argv: []string{"true"}, Program: "no-such-program-anywhere"}, "no-such-program-anywhere"},
		{FollowSpec{Argv: []string{filepath.Join(t.TempDir(), "nolauncher")}, Program: progBin}, "nolauncher"},
	} {
		err := h.a.FollowExec(c.spec)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "agent: follow exec: ") {
			t.Errorf("FollowExec(%+v) = %v, want an error naming %q", c.spec, err, c.want)
		}
	}
	if got, err := resolveProgram(filepath.Base(progBin), filepath.Dir(progBin)); err != nil || got != progBin {
		t.Errorf("resolveProgram relative to dir: %q %v", got, err)
	}
	sh, _ := exec.LookPath("sh")
	if got, err := resolveProgram("sh", t.TempDir()); err != nil || got != sh {
		t.Errorf("resolveProgram from PATH: %q %v, want %s", got, err, sh)
	}
}

// BenchmarkFollowExecHydra: from the start of `mpiexec.hydra -n 4` under FollowExec to all
// four ranks caught and held at their exec, per launch; then the ranks are released (the
// agent shuts down without killing) and the job completes. BenchmarkHydraPlain is the plain
// run of the same job, for the ratio.
func BenchmarkFollowExecHydra(b *testing.B) {
	prog, hydra := mpichProgram(b)
	var caught time.Duration
	for i := 0; i < b.N; i++ {
		h := newHarness(b, "")
		devnull, _ := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
		start := time.Now()
		if err := h.a.FollowExec(FollowSpec{Argv: []string{hydra, "-n", "4", prog}, Program: prog,
			Stdio: []*os.File{nil, devnull, devnull}}); err != nil {
			b.Fatal(err)
		}
		for len(h.a.RankInfos()) < 4 {
			time.Sleep(100 * time.Microsecond)
		}
		caught += time.Since(start)
		h.a.Shutdown(false)
		devnull.Close()
	}
	b.ReportMetric(float64(caught.Microseconds())/1000/float64(b.N), "ms-to-4-held")
}

func BenchmarkHydraPlain(b *testing.B) {
	prog, hydra := mpichProgram(b)
	for i := 0; i < b.N; i++ {
		if out, err := exec.Command(hydra, "-n", "4", prog).CombinedOutput(); err != nil {
			b.Fatalf("%v\n%s", err, out)
		}
	}
}
