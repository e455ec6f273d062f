package agent

import (
	"bufio"
	"context"
	"io"
	"log"
	"net"
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
	"github.com/hpcdap/hpcdap/target/ptrace"
)

// A launcher spawned with SpawnSpec.Launcher gets neither HPCDAP_RANK nor HPCDAP_NP (even when
// the environment given carries them), so its ranks cannot inherit them; it is served on CDTI
// as rank 0 and the management plane reports it as the launcher. prog's "rank" mode exits
// with HPCDAP_RANK, plus 100 without HPCDAP_NP, plus 100 without HPCDAP_RANK: 200 here.
func TestSpawnLauncher(t *testing.T) {
	h := newHarness(t, "")
	out := newOutFile(t)
	env := []string{"PATH=/usr/bin:/bin", "HPCDAP_RANK=5", "HPCDAP_NP=9"}
	if err := h.a.SpawnRanks(SpawnSpec{Argv: []string{progBin, "rank"}, Env: env, Count: 2, Launcher: true}); err == nil {
		t.Fatal("two launchers spawned: want an error")
	}
	err := h.a.SpawnRanks(SpawnSpec{Argv: []string{progBin, "rank"}, Env: env, Stdio: []*os.File{nil, out.f, out.f},
		Count: 1, Launcher: true})
	if err != nil {
		t.Fatal(err)
	}
	pid := h.rankPid(0)
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		t.Fatal(err)
	}
	if s := string(b); strings.Contains(s, "HPCDAP_RANK") || strings.Contains(s, "HPCDAP_NP") {
		t.Errorf("launcher environment carries rank variables: %q", strings.Split(s, "\x00"))
	}
	m, hello := dialMgmt(t, h.addr)
	if !contains(hello.Capabilities, CapabilityLauncher) {
		t.Errorf("hello capabilities %q lack %q", hello.Capabilities, CapabilityLauncher)
	}
	var ranks []RankInfo
	if err := m.call("ranks", struct{}{}, &ranks); err != nil {
		t.Fatal(err)
	}
	if len(ranks) != 1 || !ranks[0].Launcher || ranks[0].Pid != pid {
		t.Fatalf("ranks %+v, want the launcher (pid %d) marked as such", ranks, pid)
	}
	var li LauncherInfo
	if err := m.call("launcher", struct{}{}, &li); err != nil {
		t.Fatal(err)
	}
	if li.Pid != pid || li.Rank == nil || *li.Rank != 0 || li.Executable != progBin || li.State != "loaded" {
		t.Fatalf("launcher %+v, want pid %d rank 0 %s loaded", li, pid, progBin)
	}
	// Still the process the tool controls on CDTI.
	tt := h.dial(1)
	tt.attach(0, 99, "fe")
	tt.control(0, int(syscall.SIGSTOP), cdti.DynamicNotifyDLoader)
	tt.signalNotify()
	tt.cont(0)
	if st := tt.waitTermination(0); !st.Exited() || st.ExitCode() != 200 {
		t.Fatalf("launcher ended with %v, want exit 200 (no rank variables)", st)
	}
	if err := m.call("launcher", struct{}{}, &li); err != nil {
		t.Fatal(err)
	}
	if li.State != "exited" || li.ExitStatus == nil || syscall.WaitStatus(*li.ExitStatus).ExitStatus() != 200 {
		t.Fatalf("launcher after exit %+v", li)
	}
}

// An agent without a launcher says so.
func TestNoLauncher(t *testing.T) {
	h := newHarness(t, "")
	h.spawn(1, progBin, "loop", "1")
	m, _ := dialMgmt(t, h.addr)
	var li LauncherInfo
	if err := m.call("launcher", struct{}{}, &li); err == nil || !strings.Contains(err.Error(), "no launcher") {
		t.Fatalf("launcher call: %v, want an error saying there is no launcher", err)
	}
}

// newKillHarness is a harness whose agent has KillOnExit set.
func newKillHarness(t *testing.T, kill bool) *harness {
	t.Helper()
	return newLifeHarness(t, kill, false)
}

// newLifeHarness is newKillHarness with EndWithFrontEnd set to end.
func newLifeHarness(t *testing.T, kill, end bool) *harness {
	t.Helper()
	needPrograms(t)
	tr, err := ptrace.NewTracer()
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, tracer: tr, logBuf: &syncBuffer{}}
	a, err := New(Config{Token: testToken, Backend: tr, Node: "testnode", KillOnExit: kill, EndWithFrontEnd: end,
		Logger: log.New(h.logBuf, "", log.Lmicroseconds)})
	if err != nil {
		t.Fatal(err)
	}
	h.a = a
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h.addr = l.Addr().String()
	go a.Serve(context.Background(), l)
	t.Cleanup(func() {
		a.Shutdown(true)
		tr.Close()
		if t.Failed() {
			t.Logf("agent log:\n%s", h.logBuf.String())
		}
	})
	return h
}

// runRank spawns one rank of `prog run` and lets it run under tool 1, which stays attached:
// it returns the rank's pid and the tool.
func runRank(t *testing.T, h *harness) (int, *testTool) {
	t.Helper()
	out := newOutFile(t)
	if err := h.a.SpawnRanks(SpawnSpec{Argv: []string{progBin, "run"}, Stdio: []*os.File{nil, out.f, out.f}, Count: 1}); err != nil {
		t.Fatal(err)
	}
	pid := h.rankPid(0)
	tt := h.dial(1)
	tt.attach(0, 99, "fe")
	tt.control(0, int(syscall.SIGSTOP), cdti.DynamicNotifyDLoader)
	tt.signalNotify()
	tt.cont(0)
	out.waitFor(t, "pid ")
	return pid, tt
}

// waitDead waits until pid is gone (or a zombie).
func waitDead(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		st, err := readTaskStat(pid, pid)
		if err != nil || st.state == 'Z' || st.state == 'X' {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pid %d still alive (state %c)", pid, st.state)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitRunning waits until pid's counter moves: it runs.
func waitRunning(t *testing.T, pid int) {
	t.Helper()
	counter := testenv.NMSymbol(t, progBin, "counter")
	c0 := le.Uint64(procMem(t, pid, counter, 8))
	deadline := time.Now().Add(20 * time.Second)
	for le.Uint64(procMem(t, pid, counter, 8)) == c0 {
		if time.Now().After(deadline) {
			t.Fatalf("pid %d does not run (states %v)", pid, taskStates(t, pid))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// KillOnExit: when the front end's last connection (CDTI or management) closes, the agent
// ends and what it spawned dies; without it, the process runs on and the agent stays.
func TestKillOnFrontEndLoss(t *testing.T) {
	for _, c := range []struct {
		name       string
		kill, mgmt bool
	}{{"kill-cdti", true, false}, {"kill-mgmt", true, true}, {"nokill-cdti", false, false}} {
		t.Run(c.name, func(t *testing.T) {
			h := newKillHarness(t, c.kill)
			pid, tt := runRank(t, h)
			var m *mgmtClient
			if c.mgmt {
				m, _ = dialMgmt(t, h.addr)
			}
			tt.c.Close()
			if c.mgmt {
				// A connection remains: nothing happens yet.
				waitRunning(t, pid)
				m.nc.Close()
			}
			if !c.kill {
				waitRunning(t, pid)
				select {
				case <-h.a.Done():
					t.Fatal("agent ended without --kill-on-exit")
				case <-time.After(100 * time.Millisecond):
				}
				return
			}
			select {
			case <-h.a.Done():
			case <-time.After(20 * time.Second):
				t.Fatal("agent did not end when the front end left")
			}
			waitDead(t, pid)
		})
	}
}

// EndWithFrontEnd: when the front end's last connection closes, the agent ends and lets the
// process it controlled run on, untraced.
func TestEndWithFrontEnd(t *testing.T) {
	h := newLifeHarness(t, false, true)
	pid, tt := runRank(t, h)
	tt.c.Close()
	select {
	case <-h.a.Done():
	case <-time.After(20 * time.Second):
		t.Fatal("agent did not end when the front end left")
	}
	waitRunning(t, pid)
	if tr, _ := testenv.ProcStatus(pid, "TracerPid"); tr != "0" {
		t.Errorf("process %d still traced by %s after the agent ended", pid, tr)
	}
	syscall.Kill(pid, syscall.SIGKILL)
}

// The built binary with --kill-on-exit: SIGTERM, the death of its parent and SIGKILL of the
// agent each kill the process it spawned (the last through PTRACE_O_EXITKILL); a launcher
// (--launcher) is told with SIGTERM, so that it can end its job.
func TestBinaryKillOnExit(t *testing.T) {
	for _, how := range []string{"sigterm", "parent", "sigkill"} {
		t.Run(how, func(t *testing.T) {
			bin := hpcdapBinary(t)
			args := []string{bin, "agent", "--listen", "127.0.0.1:0", "--kill-on-exit", "--launcher",
				"--output", filepath.Join(t.TempDir(), "out"), "--", progBin, "run"}
			// The agent's parent is a shell that waits for its stdin to close.
			sh := exec.Command("sh", "-c", `"$@" & echo "agent $!"; read x`, "sh")
			sh.Args = append(sh.Args, args...)
			sh.Env = append(withoutVar(os.Environ(), "HPCDAP_TOKEN"), "HPCDAP_TOKEN="+testToken)
			stdin, err := sh.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			stdout, err := sh.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := sh.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { stdin.Close(); sh.Process.Kill(); sh.Wait() }()
			r := bufio.NewReader(stdout)
			var agentPid int
			var addr string
			for addr == "" {
				line, err := r.ReadString('\n')
				if err != nil {
					t.Fatalf("agent output: %v", err)
				}
				if v, ok := strings.CutPrefix(strings.TrimSpace(line), "agent "); ok {
					agentPid, _ = strconv.Atoi(v)
				}
				if v, ok := strings.CutPrefix(strings.TrimSpace(line), "listening on "); ok {
					addr = v
				}
			}
			go io.Copy(io.Discard, r)
			kids := childrenOf(agentPid)
			if len(kids) != 1 {
				t.Fatalf("agent %d has children %v, want the launcher alone", agentPid, kids)
			}
			prog := kids[0]
			tt := dialAgent(t, addr, 1)
			tt.attach(0, 99, "fe")
			tt.control(0, 0, cdti.DynamicNotifyDLoader) // starts it
			waitRunning(t, prog)
			switch how {
			case "sigterm":
				syscall.Kill(agentPid, syscall.SIGTERM)
			case "parent":
				stdin.Close() // the shell exits
			case "sigkill":
				syscall.Kill(agentPid, syscall.SIGKILL)
			}
			waitDead(t, prog)
			waitDead(t, agentPid)
		})
	}
}

// childrenOf lists a process's children (/proc/PID/task/*/children).
func childrenOf(pid int) []int {
	var out []int
	dir := "/proc/" + strconv.Itoa(pid) + "/task"
	tasks, _ := os.ReadDir(dir)
	for _, task := range tasks {
		b, _ := os.ReadFile(filepath.Join(dir, task.Name(), "children"))
		for _, f := range strings.Fields(string(b)) {
			if c, err := strconv.Atoi(f); err == nil {
				out = append(out, c)
			}
		}
	}
	return out
}
