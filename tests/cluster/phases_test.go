package cluster

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hpcdap/hpcdap/launch"
	"github.com/hpcdap/hpcdap/rankset"
)

// An srun job whose agent exits on one node (node2's agent binary says why and exits with
// code 3 before it registers) fails the agents' phase as soon as that agent has ended, not at
// the phase's time limit: the error names node2, its ranks, srun's report of the exit and
// what the agent wrote, and no other node's agent is blamed.
func TestSlurmAgentExitsOnOneNode(t *testing.T) {
	real := hpcdap(t)
	p := buildC(t, "ranks", "mpicc.openmpi", "libopenmpi-dev")
	agent := filepath.Join(t.TempDir(), "hpcdap-refusing")
	src, _ := filepath.Abs("testdata/agent_on_node.c")
	if out, err := exec.Command("gcc", "-O1", `-DREAL="`+real+`"`, `-DREFUSE="node2"`, "-o", agent, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	c := slurm.Need(t)
	cancelJobs(t, c)
	t.Setenv("SLURM_CONF", c.Conf)
	fe, err := launch.NewFrontend(launch.Options{WLM: "slurm", AgentPath: agent, NodeTmpDir: c.LocalDir(),
		AdvertiseHost: "127.0.0.1", WorkDir: t.TempDir(), Timeout: 60 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer fe.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	app, g, err := launch.Start(ctx, fe, launch.Request{Launcher: "srun", LauncherArgs: []string{"--mpi=pmix", "-N4"}, NP: 8,
		Program: p.bin, Dir: t.TempDir()})
	if app == nil {
		t.Fatalf("launch: %v", err)
	}
	var node2 string // node2's ranks, as the placement says
	for _, h := range app.Placement().Hosts {
		if h.Host == "node2" {
			node2 = fmt.Sprintf("node2 (ranks %s)", rankset.Of(h.Ranks...))
		}
	}
	var registered []string
	if g != nil {
		for _, ep := range g.Endpoints {
			registered = append(registered, ep.Host)
		}
		g.Stop()
	}
	app.Deregister()
	if err == nil {
		t.Fatal("launch with node2's agent exiting: no error")
	}
	t.Logf("error: %v", err)
	msg := err.Error()
	for _, want := range []string{node2, "exit code 3", "agent on node2: refused by the test"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
	if errors.Is(err, context.DeadlineExceeded) || strings.Contains(msg, "time limit") || strings.Contains(msg, "deadline") {
		t.Errorf("the agents' phase waited for its time limit: %v", err)
	}
	// The other agents may or may not have registered by the time node2's end fails the
	// phase (it does not wait for them); none of them is blamed, and node2 never registered.
	for _, h := range registered {
		if h == "node2" {
			t.Errorf("agents registered on %v: node2's agent exited before registering", registered)
		}
	}
	_, ended, found := strings.Cut(msg, "agents ended before registering: ")
	ended, _, _ = strings.Cut(ended, "); missing:")
	if !found || strings.Contains(ended, "node1") || strings.Contains(ended, "node3") || strings.Contains(ended, "node4") {
		t.Errorf("the error does not blame node2's agent alone for ending: %v", err)
	}
}

// srun of a program that does not exist, under MPIR: srun fills its table with the tasks it
// forked, whose exec then fails on every node while srun is held at MPIR_Breakpoint (so its
// own words about the program cannot come out yet). The launch fails as soon as the agents
// have looked for their ranks, naming ranks and nodes whose process is gone, not at a phase's
// time limit.
func TestSrunLaunchMissingProgram(t *testing.T) {
	hpcdap(t)
	c := slurm.Need(t)
	cancelJobs(t, c)
	fe := slurmFrontend(t, c)
	missing := filepath.Join(t.TempDir(), "no-such-program")
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	app, g, err := launch.Start(ctx, fe, launch.Request{Launcher: "srun", LauncherArgs: []string{"-N4"}, NP: 8,
		Program: missing, Dir: t.TempDir()})
	if app != nil {
		if g != nil {
			g.Stop()
		}
		app.Deregister()
	}
	if err == nil {
		t.Fatalf("launch of %s: no error", missing)
	}
	t.Logf("error: %v", err)
	msg := err.Error()
	if !regexp.MustCompile(`rank\(s\) had ended before their agent started: rank \d+ on node\d \(pid \d+\)`).MatchString(msg) {
		t.Errorf("error does not name the ranks that ended and their nodes: %v", err)
	}
	if errors.Is(err, context.DeadlineExceeded) || strings.Contains(msg, "within") || strings.Contains(msg, "time limit") {
		t.Errorf("the launch waited for a time limit: %v", err)
	}
}
