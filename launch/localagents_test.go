package launch

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hpcdap/hpcdap/mgmt"
)

// agentRanks lists the ranks an agent serves, by its management plane, as rank → pid.
func agentRanks(t *testing.T, ep AgentEndpoint) map[int]int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := mgmt.Dial(ctx, ep.Addr, ep.Token, "test", nil, nil)
	if err != nil {
		t.Fatalf("management connection to %s: %v", ep.Addr, err)
	}
	defer c.Close()
	var infos []struct {
		Rank int `json:"rank"`
		Pid  int `json:"pid"`
	}
	if err := c.Call(ctx, "ranks", nil, &infos); err != nil {
		t.Fatalf("ranks: %v", err)
	}
	out := map[int]int{}
	for _, ri := range infos {
		out[ri.Rank] = ri.Pid
	}
	return out
}

// agentChildren lists this process's children that run the hpcdap binary.
func agentChildren(t *testing.T) map[int]bool {
	t.Helper()
	agent := program(t, "hpcdap")
	out := map[int]bool{}
	for _, pid := range childPids(os.Getpid()) {
		if exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); exe == agent {
			out[pid] = true
		}
	}
	return out
}

// noAgentLeft fails the test when this process has an agent child that was not among before
// (one a failed start should have ended).
func noAgentLeft(t *testing.T, before map[int]bool, what string) {
	t.Helper()
	for pid := range agentChildren(t) {
		if !before[pid] {
			t.Errorf("%s: agent pid %d left", what, pid)
		}
	}
}

// LocalSpawn starts one agent per 64 ranks, each spawning its share of the program with the
// job's rank numbers, and reports the job's size.
func TestLocalSpawn(t *testing.T) {
	prog := program(t, "serial")
	var calls []string
	g, err := (&LocalSpawn{AgentPath: program(t, "hpcdap"), LogDir: t.TempDir(), NP: 66, Program: prog,
		Env: os.Environ(), Dir: t.TempDir()}).Start(context.Background(), func(done, total int) {
		calls = append(calls, fmt.Sprintf("%d/%d", done, total))
	})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Kill()
	if g.Size != 66 || len(g.Endpoints) != 2 {
		t.Fatalf("size %d, %d agents; want 66 ranks, 2 agents", g.Size, len(g.Endpoints))
	}
	if slices.Sort(calls); fmt.Sprint(calls) != "[1/2 2/2]" {
		t.Errorf("progress %v, want [1/2 2/2]", calls)
	}
	for i, want := range [][2]int{{0, 63}, {64, 65}} {
		ep := g.Endpoints[i]
		if ep.Agent == nil || ep.Output == nil || ep.Owned {
			t.Errorf("agent %d: process %v, output %v, owned %v: want a child with its output, not owned", i, ep.Agent, ep.Output, ep.Owned)
		}
		if len(ep.Ranks) != want[1]-want[0]+1 || ep.Ranks[0] != want[0] || ep.Ranks[len(ep.Ranks)-1] != want[1] {
			t.Errorf("agent %d serves %v, want %d-%d", i, ep.Ranks, want[0], want[1])
		}
		got := agentRanks(t, ep)
		for _, r := range ep.Ranks {
			exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", got[r]))
			if err != nil || exe != prog {
				t.Errorf("rank %d: pid %d runs %q (%v), want %s", r, got[r], exe, err, prog)
			}
		}
		if len(got) != len(ep.Ranks) {
			t.Errorf("agent %d serves ranks %v, the endpoint says %v", i, got, ep.Ranks)
		}
	}
	g.Kill()
	for i, ep := range g.Endpoints {
		if !ep.Agent.Wait(time.Second) {
			t.Errorf("agent %d still runs after Kill", i)
		}
	}
}

// A program that cannot run fails the start with the agent's own reason, and no agent stays.
func TestLocalSpawnBadProgram(t *testing.T) {
	missing := t.TempDir() + "/no-such-program"
	before := agentChildren(t)
	_, err := (&LocalSpawn{AgentPath: program(t, "hpcdap"), LogDir: t.TempDir(), NP: 2, Program: missing,
		Env: os.Environ(), Dir: t.TempDir()}).Start(context.Background(), nil)
	if err == nil || !strings.Contains(err.Error(), "launch: agent: exited before listening") || !strings.Contains(err.Error(), missing) {
		t.Errorf("start of a missing program: %v; want the agent's exit, naming the program", err)
	}
	noAgentLeft(t, before, "failed spawn")
}

// LocalAttach serves running processes of this host under the rank numbers given; the job's
// size runs to the highest rank. The processes are left running when the agents end.
func TestLocalAttach(t *testing.T) {
	prog := program(t, "serial")
	pids := map[int]int{}
	for _, r := range []int{0, 3} {
		c := exec.Command(prog, "30")
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Process.Kill(); c.Wait() })
		pids[r] = c.Process.Pid
	}
	g, err := (&LocalAttach{AgentPath: program(t, "hpcdap"), LogDir: t.TempDir(), Pids: pids}).Start(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Kill()
	if g.Size != 4 || len(g.Endpoints) != 1 || fmt.Sprint(g.Endpoints[0].Ranks) != "[0 3]" {
		t.Fatalf("size %d, endpoints %+v; want 4 ranks, one agent serving [0 3]", g.Size, g.Endpoints)
	}
	if got := agentRanks(t, g.Endpoints[0]); fmt.Sprint(got) != fmt.Sprint(pids) {
		t.Errorf("agent serves %v, want %v", got, pids)
	}
	g.Kill()
	for r, pid := range pids {
		if err := syscall.Kill(pid, 0); err != nil {
			t.Errorf("rank %d (pid %d) gone with its agent: %v", r, pid, err)
		}
	}
}

// Attaching to a process that does not exist fails, naming it, and leaves no agent.
func TestLocalAttachGone(t *testing.T) {
	c := exec.Command("true")
	if err := c.Run(); err != nil {
		t.Fatal(err)
	}
	gone := c.Process.Pid
	before := agentChildren(t)
	_, err := (&LocalAttach{AgentPath: program(t, "hpcdap"), LogDir: t.TempDir(), Pids: map[int]int{0: gone}}).Start(context.Background(), nil)
	if err == nil || !strings.Contains(err.Error(), fmt.Sprint(gone)) {
		t.Errorf("attach to gone pid %d: %v; want an error naming it", gone, err)
	}
	noAgentLeft(t, before, "failed attach")
	if _, err := (&LocalAttach{AgentPath: program(t, "hpcdap"), LogDir: t.TempDir()}).Start(context.Background(), nil); err == nil {
		t.Error("attach to no process: no error")
	}
}

// The rank labels of Open MPI (--tag-output), hydra (-prepend-rank) and srun (--label) are
// read into one form.
func TestRelabel(t *testing.T) {
	for _, tt := range []struct{ line, cat, text string }{
		{"[1,3]<stdout>:hello\n", "stdout", "[3] hello\n"},
		{"[1,12]<stderr>:oops\n", "stderr", "[12] oops\n"},
		{"[1,0]<stddiag>:diag", "stderr", "[0] diag"},
		{"[5] from hydra\n", "stdout", "[5] from hydra\n"},
		{"  7: from srun\n", "stdout", "[7] from srun\n"},
		{"no label: here\n", "stdout", "no label: here\n"},
	} {
		if cat, text := relabel(tt.line); cat != tt.cat || text != tt.text {
			t.Errorf("relabel(%q) = %q, %q; want %q, %q", tt.line, cat, text, tt.cat, tt.text)
		}
	}
}

// Launcher names: the known ones are accepted when installed and sorted into families, with
// the arguments that label their output; others are refused by name.
func TestLauncherNames(t *testing.T) {
	for _, tt := range []struct{ name, family, label string }{
		{"mpirun.openmpi", "openmpi", "--tag-output"},
		{"mpiexec.hydra", "hydra", "-prepend-rank"},
		{"mpirun.mpich", "hydra", "-prepend-rank"},
		{"srun", "srun", "--label"},
	} {
		if _, err := exec.LookPath(tt.name); err != nil {
			t.Logf("%s not installed: %v", tt.name, err)
			continue
		}
		if err := CheckLauncher(tt.name); err != nil {
			t.Errorf("CheckLauncher(%s): %v", tt.name, err)
		}
		if f := launcherFamily(tt.name); f != tt.family {
			t.Errorf("family of %s: %q, want %q", tt.name, f, tt.family)
		}
		if a := labelArgs(tt.name); fmt.Sprint(a) != "["+tt.label+"]" {
			t.Errorf("label arguments of %s: %q, want %q", tt.name, a, tt.label)
		}
	}
	if err := CheckLauncher("/bin/true"); err == nil || !strings.Contains(err.Error(), `launcher "/bin/true"`) {
		t.Errorf(`CheckLauncher("/bin/true"): %v; want a refusal naming it`, err)
	}
	if err := CheckLauncher("/nonexistent/mpirun"); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf(`CheckLauncher("/nonexistent/mpirun"): %v; want "not found"`, err)
	}
}
