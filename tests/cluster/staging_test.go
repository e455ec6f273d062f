package cluster

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hpcdap/hpcdap/launch"
)

// `srun -N4 -n8` debugged as a new user would, with the adapter's default staging directory,
// /tmp, which the cluster's nodes share as a shared file system would: one node creates the
// session directory, the others find it with its mark and share it, the agent binary is
// shipped and unpacked once, an agent starts on every node from it, and every rank stops at
// the breakpoint and runs to its exit code. Each phase is reported on the client's console as
// it happens. No session directory is left in /tmp.
func TestDAPSrunSharedTmp(t *testing.T) {
	hpcdap(t)
	p := buildC(t, "ranks", "mpicc.openmpi", "libopenmpi-dev")
	c := slurm.Need(t)
	cancelJobs(t, c)
	var d *dapRun
	for attempt := 1; ; attempt++ {
		var ok bool
		if d, ok = srunLaunch(t, c, p, "", attempt == srunAttempts); ok {
			break
		}
		t.Logf("attempt %d: a rank crashed in Open MPI's start-up before the breakpoint: running the job again", attempt)
	}
	// The adapter's log names the session directory and how many stores it found.
	log, err := os.ReadFile(d.logPath)
	if err != nil {
		t.Fatal(err)
	}
	m := stagedLine.FindStringSubmatch(string(log))
	if m == nil {
		t.Fatalf("the adapter's log names no staging directory:\n%s", tail(string(log), 40))
	}
	parent, dir, nodes, stores := m[1], m[2], m[3], m[4]
	if parent != "/tmp" || nodes != "4" || stores != "1" {
		t.Errorf("%q: want a directory under /tmp on 4 nodes in 1 store", m[0])
	}
	// Each phase was reported to the client as it happened.
	out := d.output()
	for _, want := range []string{"ranks in the MPIR table", "making staging directory /tmp/" + dir + " on 4 node(s)",
		"staging directory /tmp/" + dir + " on 4 nodes in 1 store(s)", "unpacked on 1", "starting agents on 4 node(s)",
		"agent on node1 registered", "agent on node4 registered"} {
		if !strings.Contains(out, want) {
			t.Errorf("no progress line with %q in the client's output:\n%s", want, tail(out, 30))
		}
	}
	if _, err := os.Stat(filepath.Join(parent, dir)); !os.IsNotExist(err) {
		t.Errorf("session directory %s left in the shared /tmp: %v", filepath.Join(parent, dir), err)
	}
}

// stagedLine is the front end's log line for a staging directory made.
var stagedLine = regexp.MustCompile(`staging directory (/\S*)/(hpcdap-[0-9a-f]{12}) on (\d+) nodes in (\d+) store`)

// A node whose staging directory cannot be made (node3's node-local directory is read-only,
// for root too) fails the launch at once with that node's own reason: the error is the staging
// failure naming node3 and the file system's answer, not a phase's time limit; the job is
// gone afterwards and the other nodes' directories are removed.
func TestSlurmStagingFailsOnOneNode(t *testing.T) {
	hpcdap(t)
	p := buildC(t, "ranks", "mpicc.openmpi", "libopenmpi-dev")
	c := slurm.Need(t)
	cancelJobs(t, c)
	undo, err := c.ReadOnlyLocalDir("node3")
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := undo(); err != nil {
			t.Error(err)
		}
	}()
	fe := slurmFrontend(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	app, g, err := launch.Start(ctx, fe, launch.Request{Launcher: "srun", LauncherArgs: []string{"--mpi=pmix", "-N4"}, NP: 8,
		Program: p.bin, Dir: t.TempDir()})
	if app != nil {
		if g != nil {
			g.Stop()
		}
		app.Deregister()
	}
	if err == nil {
		t.Fatal("launch with node3's staging directory read-only: no error")
	}
	t.Logf("error: %v", err)
	msg := err.Error()
	if !strings.Contains(msg, "staging directory") || !strings.Contains(msg, "node3: ") ||
		!strings.Contains(msg, "Read-only file system") {
		t.Errorf("error does not name node3's staging failure and its reason: %v", err)
	}
	for _, n := range []string{"node1: ", "node2: ", "node4: "} {
		if strings.Contains(msg, n) {
			t.Errorf("error blames %s, whose staging worked: %v", strings.TrimSuffix(n, ": "), err)
		}
	}
	if errors.Is(err, context.DeadlineExceeded) || strings.Contains(msg, "deadline") || strings.Contains(msg, "time limit") {
		t.Errorf("the staging failure waited for a time limit: %v", err)
	}
	wctx, wcancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer wcancel()
	if resumed, err := c.WaitIdle(wctx); err != nil || len(resumed) > 0 {
		t.Errorf("after the failed launch: %v; drained nodes: %v", err, resumed)
	}
	for _, n := range c.Nodes {
		if left, _ := filepath.Glob(filepath.Join(c.NodeDir(n), "hpcdap-*")); len(left) > 0 {
			t.Errorf("%s: session directories left: %v", n, left)
		}
	}
}
