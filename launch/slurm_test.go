package launch

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hpcdap/hpcdap/internal/testenv"
	"github.com/hpcdap/hpcdap/tests/cluster"
)

// slurmFrontend starts (or reuses) the package's cluster and makes a front end for it, with
// sessions in the nodes' private directories.
func slurmFrontend(t *testing.T) (*Frontend, *cluster.Cluster) {
	t.Helper()
	c := slurm.Need(t)
	t.Setenv("SLURM_CONF", c.Conf)
	return newFrontend(t, "slurm", c.LocalDir()), c
}

// slurmTasks is the oracle for a Slurm step's tasks: the processes of this host that run prog
// with SLURM_JOB_ID and SLURM_STEP_ID of the step, by SLURM_PROCID, with their node from
// SLURMD_NODENAME.
func slurmTasks(t *testing.T, prog, job, step string) map[int]Proc {
	t.Helper()
	out := map[int]Proc{}
	for rank, pid := range ranksRunning(t, prog, "SLURM_PROCID", map[string]string{"SLURM_JOB_ID": job, "SLURM_STEP_ID": step}) {
		node, _ := testenv.ProcEnv(pid, "SLURMD_NODENAME")
		out[rank] = Proc{Rank: rank, Host: node, Pid: pid}
	}
	return out
}

var slurmID = regexp.MustCompile(`^slurm (\d+)\.(\d+)$`)

// checkSlurmTable compares an App's table with the oracle.
func checkSlurmTable(t *testing.T, app *App, prog string, n int) (job, step string) {
	t.Helper()
	m := slurmID.FindStringSubmatch(app.ID())
	if m == nil {
		t.Fatalf("app id %q is not a Slurm step", app.ID())
	}
	job, step = m[1], m[2]
	tasks := slurmTasks(t, prog, job, step)
	procs := app.Procs()
	if len(procs) != n || len(tasks) != n {
		t.Fatalf("table %+v, oracle %+v: want %d tasks", procs, tasks, n)
	}
	for _, p := range procs {
		if o := tasks[p.Rank]; o.Pid != p.Pid || o.Host != p.Host {
			t.Errorf("rank %d on %s pid %d; the task's environment says %s pid %d", p.Rank, p.Host, p.Pid, o.Host, o.Pid)
		}
	}
	return job, step
}

// srun under MPIR through the slurm workload manager: eight tasks on four nodes, held stopped
// at exec and untraced; one agent per node started with srun --overlap registers; every rank is
// attached, continued (with the SIGCONT the hold needs) and stops at after_init once srun is
// released; each exits with its own code.
func TestSlurmLaunchEndToEnd(t *testing.T) {
	prog := program(t, "ompi")
	fe, c := slurmFrontend(t)
	ctx, cancel := context.WithTimeout(context.Background(), 180*time.Second)
	defer cancel()
	app, err := fe.LaunchBarrier(ctx, LaunchSpec{Launcher: "srun", Args: []string{"--mpi=pmix", "-N4", "-n8"},
		Program: prog, Dir: t.TempDir()})
	if err != nil {
		t.Fatalf("LaunchBarrier: %v\n%s", err, c.Logs())
	}
	checkSlurmTable(t, app, prog, 8)
	if app.Hold() != HoldAtExec {
		t.Errorf("hold %v, want at exec", app.Hold())
	}
	// srun fills its table once the tasks are forked; slurmstepd stops each at its exec a moment
	// later (it traces the task to its exec, then leaves it in a job-control stop).
	for _, p := range app.Procs() {
		var st, tr string
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			st, _ = testenv.ProcStatus(p.Pid, "State")
			tr, _ = testenv.ProcStatus(p.Pid, "TracerPid")
			if strings.HasPrefix(st, "T") && tr == "0" || time.Now().After(deadline) {
				break
			}
		}
		if !strings.HasPrefix(st, "T") || tr != "0" {
			t.Errorf("rank %d: state %q tracer %q, want stopped and untraced", p.Rank, st, tr)
		}
	}
	if got := app.Placement().HostNames(); fmt.Sprint(got) != fmt.Sprint(c.Nodes) {
		t.Errorf("hosts %v, want %v", got, c.Nodes)
	}
	g, err := app.StartAgents(ctx)
	if err != nil {
		app.Release(ctx)
		t.Fatalf("StartAgents: %v", err)
	}
	if len(g.Endpoints) != 4 {
		t.Fatalf("agents %+v", g.Endpoints)
	}
	for _, ep := range g.Endpoints {
		h, _ := func() (HostPlacement, bool) {
			for _, h := range app.Placement().Hosts {
				if h.Host == ep.Host {
					return h, true
				}
			}
			return HostPlacement{}, false
		}()
		if fmt.Sprint(ep.Ranks) != fmt.Sprint(h.Ranks) {
			t.Errorf("agent on %s serves %v, the placement says %v", ep.Host, ep.Ranks, h.Ranks)
		}
	}
	codes := driveRanks(t, app, g, prog, true)
	for r := range 8 {
		if codes[r] != 10+r {
			t.Errorf("rank %d exit code %d, want %d", r, codes[r], 10+r)
		}
	}
	if _, err := app.Wait(ctx); err != nil {
		t.Errorf("Wait: %v", err)
	}
	// The job has ended: its staging directory went with it on every node, without the
	// front end doing anything.
	base := filepath.Base(g.Session.Dir)
	deadline := time.Now().Add(15 * time.Second)
	for _, n := range c.Nodes {
		p := filepath.Join(c.NodeDir(n), base)
		for _, err := os.Stat(p); err == nil && time.Now().Before(deadline); _, err = os.Stat(p) {
			time.Sleep(50 * time.Millisecond)
		}
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s: staging directory still there after the job ended: %v", n, err)
		}
	}
	out, _ := os.ReadFile(app.OutputPath())
	if n := strings.Count(string(out), "/8 on node"); n != 8 {
		t.Errorf("%d rank lines in srun's output:\n%s", n, out)
	}
}

// A session on a Slurm job: its directory appears on every node (and only there), manifests
// ship through sbcast only what the session lacks, a daemon on every node finds the shipped
// program through PATH and its library through LD_LIBRARY_PATH, and Close removes the
// directory from every node.
func TestSlurmSessionStaging(t *testing.T) {
	prog := program(t, "serial")
	fix := libsFixture(t)
	fe, c := slurmFrontend(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	app, err := fe.LaunchBarrier(ctx, LaunchSpec{Launcher: "srun", Args: []string{"-N4", "-n4"}, Program: prog,
		Dir: t.TempDir()})
	if err != nil {
		t.Fatalf("LaunchBarrier: %v", err)
	}
	defer app.Release(ctx)
	s, err := app.NewSession(ctx)
	if err != nil {
		t.Fatalf("NewSession: %v", err)
	}
	base := filepath.Base(s.Dir)
	if _, err := os.Stat(filepath.Join(c.LocalDir(), base)); err == nil {
		t.Errorf("%s is visible on the host: not node-local", s.Dir)
	}
	for _, n := range c.Nodes {
		for _, sub := range []string{"", "bin", "lib", "tmp"} {
			st, err := os.Stat(filepath.Join(c.NodeDir(n), base, sub))
			if err != nil || !st.IsDir() || st.Mode().Perm() != 0o700 {
				t.Errorf("%s: %s/%s: %v, %v", n, base, sub, st, err)
			}
		}
	}
	// main_plain finds libouter.so only through LD_LIBRARY_PATH: here, to build the manifest;
	// on the nodes, the session's lib/ (the fixture's lib/ is gone by then).
	t.Setenv("LD_LIBRARY_PATH", filepath.Join(fix, "lib"))
	m := s.NewManifest()
	if err := m.AddBinary(filepath.Join(fix, "bin", "main_plain")); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(t.TempDir(), "settings.txt")
	os.WriteFile(data, []byte("x=1\n"), 0o644)
	if err := m.AddFile(data); err != nil {
		t.Fatal(err)
	}
	shipped, err := s.Ship(ctx, m)
	if err != nil {
		t.Fatalf("Ship: %v", err)
	}
	sort.Strings(shipped)
	if want := "[bin/main_plain lib/libinner.so.1 lib/libouter.so settings.txt]"; fmt.Sprint(shipped) != want {
		t.Errorf("shipped %v, want %s", shipped, want)
	}
	for _, n := range c.Nodes {
		for _, f := range m.Files() {
			want, _ := os.ReadFile(f.Source)
			got, err := os.ReadFile(filepath.Join(c.NodeDir(n), base, f.Dest))
			if err != nil || string(got) != string(want) {
				t.Errorf("%s: %s differs from %s (%v)", n, f.Dest, f.Source, err)
			}
		}
	}
	// Again, plus one file: only that one travels.
	if again, err := s.Ship(ctx, m); err != nil || len(again) != 0 {
		t.Errorf("second Ship of the same manifest: %v, %v; want nothing", again, err)
	}
	m2 := s.NewManifest()
	m2.AddBinary(filepath.Join(fix, "bin", "main_plain"))
	extra := filepath.Join(t.TempDir(), "extra.txt")
	os.WriteFile(extra, []byte("y\n"), 0o644)
	m2.AddFile(extra)
	if got, err := s.Ship(ctx, m2); err != nil || fmt.Sprint(got) != "[extra.txt]" {
		t.Errorf("Ship of a manifest with one new file: %v, %v", got, err)
	}
	// A daemon per node, using the session environment.
	if err := os.RemoveAll(filepath.Join(fix, "lib")); err != nil {
		t.Fatal(err)
	}
	d, err := s.ExecToolDaemon(ctx, nil, []string{"sh", "-c", `echo "$(hostname) $TMPDIR $(main_plain)"`}, DaemonOptions{})
	if err != nil {
		t.Fatalf("ExecToolDaemon: %v", err)
	}
	if err := d.Wait(ctx); err != nil {
		t.Fatalf("daemons: %v\n%s", err, d.Log())
	}
	for _, n := range c.Nodes {
		if want := n + " " + s.Dir + "/tmp 43"; !strings.Contains(d.Log(), want) {
			t.Errorf("daemon output lacks %q:\n%s", want, d.Log())
		}
	}
	if err := s.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	for _, n := range c.Nodes {
		if _, err := os.Stat(filepath.Join(c.NodeDir(n), base)); !os.IsNotExist(err) {
			t.Errorf("%s: session directory still there after Close: %v", n, err)
		}
	}
	if err := app.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if st, err := app.Wait(ctx); err != nil || st.ExitCode() != 0 {
		t.Errorf("job: %v, %v", st, err)
	}
}

// A session whose directory is on a file system the nodes share (the cluster's SharedDir):
// one node creates it and the others share it (one store of four nodes), a manifest is shipped
// and unpacked once, and a daemon on every node runs the shipped program from it; Close
// removes it. Staging used to fail here with "File exists" on three nodes, after a minute.
func TestSlurmSessionStagingShared(t *testing.T) {
	prog := program(t, "serial")
	fix := libsFixture(t)
	c := slurm.Need(t)
	t.Setenv("SLURM_CONF", c.Conf)
	fe := newFrontend(t, "slurm", c.SharedDir())
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	app, err := fe.LaunchBarrier(ctx, LaunchSpec{Launcher: "srun", Args: []string{"-N4", "-n4"}, Program: prog,
		Dir: t.TempDir()})
	if err != nil {
		t.Fatalf("LaunchBarrier: %v", err)
	}
	defer app.Release(ctx)
	s, err := app.NewSession(ctx)
	if err != nil {
		t.Fatalf("NewSession: %v", err)
	}
	if st := s.Stores(); len(st) != 1 || fmt.Sprint(st[0]) != fmt.Sprint(c.Nodes) {
		t.Errorf("stores %v, want one of %v", st, c.Nodes)
	}
	for _, sub := range []string{"", "bin", "lib", "tmp"} {
		st, err := os.Stat(filepath.Join(s.Dir, sub))
		if err != nil || !st.IsDir() || st.Mode().Perm() != 0o700 {
			t.Errorf("%s/%s: %v, %v", s.Dir, sub, st, err)
		}
	}
	t.Setenv("LD_LIBRARY_PATH", filepath.Join(fix, "lib"))
	m := s.NewManifest()
	if err := m.AddBinary(filepath.Join(fix, "bin", "main_plain")); err != nil {
		t.Fatal(err)
	}
	shipped, err := s.Ship(ctx, m)
	if err != nil {
		t.Fatalf("Ship: %v", err)
	}
	sort.Strings(shipped)
	if want := "[bin/main_plain lib/libinner.so.1 lib/libouter.so]"; fmt.Sprint(shipped) != want {
		t.Errorf("shipped %v, want %s", shipped, want)
	}
	for _, f := range m.Files() {
		want, _ := os.ReadFile(f.Source)
		if got, err := os.ReadFile(filepath.Join(s.Dir, f.Dest)); err != nil || string(got) != string(want) {
			t.Errorf("%s differs from %s (%v)", f.Dest, f.Source, err)
		}
	}
	if left, _ := filepath.Glob(filepath.Join(s.Dir, "tmp", ".stage-*")); len(left) > 0 {
		t.Errorf("archives left after unpacking: %v", left)
	}
	if err := os.RemoveAll(filepath.Join(fix, "lib")); err != nil {
		t.Fatal(err)
	}
	d, err := s.ExecToolDaemon(ctx, nil, []string{"sh", "-c", `echo "$(hostname) $(main_plain)"`}, DaemonOptions{})
	if err != nil {
		t.Fatalf("ExecToolDaemon: %v", err)
	}
	if err := d.Wait(ctx); err != nil {
		t.Fatalf("daemons: %v\n%s", err, d.Log())
	}
	for _, n := range c.Nodes {
		if want := n + " 43"; !strings.Contains(d.Log(), want) {
			t.Errorf("daemon output lacks %q:\n%s", want, d.Log())
		}
	}
	if err := s.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := os.Stat(s.Dir); !os.IsNotExist(err) {
		t.Errorf("session directory still there after Close: %v", err)
	}
	if err := app.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if st, err := app.Wait(ctx); err != nil || st.ExitCode() != 0 {
		t.Errorf("job: %v, %v", st, err)
	}
}

// startBackgroundSrun runs srun outside the front end and waits until its tasks run.
func startBackgroundSrun(t *testing.T, c *cluster.Cluster, prog string, n int, args ...string) (*exec.Cmd, string) {
	t.Helper()
	cmd := c.Command("srun", append(args, prog, "30")...)
	cmd.Dir = t.TempDir()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var job string
	t.Cleanup(func() {
		if job != "" {
			c.Command("scancel", job).Run()
		} else {
			cmd.Process.Signal(syscall.SIGTERM)
		}
		cmd.Wait()
	})
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		out, _ := c.Command("squeue", "-h", "-s", "-o", "%i").Output()
		for _, l := range strings.Fields(string(out)) {
			if j, step, ok := strings.Cut(l, "."); ok && step == "0" {
				if len(slurmTasks(t, prog, j, step)) == n {
					job = j
					return cmd, l
				}
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("srun %v did not start %d tasks", args, n)
	return nil, ""
}

// Attach by job step id: the tasks come from scontrol listpids on every node of the step.
func TestSlurmAttachStep(t *testing.T) {
	prog := program(t, "serial")
	fe, c := slurmFrontend(t)
	_, step := startBackgroundSrun(t, c, prog, 6, "-N3", "-n6")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	app, err := fe.Attach(ctx, JobRef{SlurmJob: step})
	if err != nil {
		t.Fatalf("Attach(%s): %v", step, err)
	}
	checkSlurmTable(t, app, prog, 6)
	if err := app.Deregister(); err != nil {
		t.Errorf("Deregister: %v", err)
	}
}

// Attach to a running srun by pid: MPIR attach mode reads the table srun filled at launch.
func TestSlurmAttachSrunPid(t *testing.T) {
	prog := program(t, "serial")
	fe, c := slurmFrontend(t)
	cmd, _ := startBackgroundSrun(t, c, prog, 4, "-N2", "-n4")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	app, err := fe.Attach(ctx, JobRef{LauncherPid: cmd.Process.Pid})
	if err != nil {
		t.Fatalf("Attach(srun pid %d): %v", cmd.Process.Pid, err)
	}
	checkSlurmTable(t, app, prog, 4)
	if err := app.Deregister(); err != nil {
		t.Errorf("Deregister: %v", err)
	}
	if tr, _ := testenv.ProcStatus(cmd.Process.Pid, "TracerPid"); tr != "0" {
		t.Errorf("srun TracerPid %q after Deregister", tr)
	}
}
