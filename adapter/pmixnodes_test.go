//go:build pmix

package adapter

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// hostNodes starts one process per name in a UTS namespace of its own whose host name is that
// name, and writes an ssh stand-in that runs a command "on" a node by entering its namespace:
// PRRTE, told to use it (plm_ssh_agent), starts its daemons there as it would on other hosts.
// The nodes share this machine's network and file systems, as a cluster's nodes share a
// network and a shared installation; they are named by addresses of the loopback network
// (127.0.0.2, ...), so that their names resolve, as a cluster's node names resolve to the
// addresses that reach them.
func hostNodes(t *testing.T, names ...string) (sshAgent string) {
	t.Helper()
	needTool(t, "unshare")
	needTool(t, "nsenter")
	var cases strings.Builder
	for _, n := range names {
		cmd := exec.Command("unshare", "--uts", "/bin/sh", "-c", "hostname "+n+" && exec sleep 600")
		if err := cmd.Start(); err != nil {
			t.Fatalf("node %s: %v", n, err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", cmd.Process.Pid)); err == nil && strings.TrimSpace(string(b)) == "sleep" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("node %s: its namespace's process did not start", n)
			}
		}
		fmt.Fprintf(&cases, "%s) pid=%d ;;\n", n, cmd.Process.Pid)
	}
	sshAgent = filepath.Join(t.TempDir(), "node-ssh")
	script := "#!/bin/sh\n# ssh HOST COMMAND...: COMMAND in HOST's UTS namespace\nhost=$1; shift\ncase $host in\n" +
		cases.String() + "*) echo \"node-ssh: no node $host\" >&2; exit 255 ;;\nesac\nexec nsenter -t \"$pid\" --uts -- /bin/sh -c \"$*\"\n"
	if err := os.WriteFile(sshAgent, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return sshAgent
}

// An Open MPI 5 job over two nodes: PRRTE starts its daemons on both through its ssh
// launch agent, and hpcdap's agents as the job's debugger daemons on each. Every rank reports
// the node it runs on, stops at a breakpoint with its own rank number in `rank`, and is traced
// by an agent on its own node; a detach lets the job finish with no rank stopped or traced, a
// terminate ends every rank on both nodes; either way the agents' session directories are
// removed from the nodes.
func TestPMIxMultiNode(t *testing.T) {
	p := needOpenMPI5(t)
	nodes := []string{"127.0.0.2", "127.0.0.3"}
	ssh := hostNodes(t, nodes...)
	for _, terminate := range []bool{false, true} {
		t.Run(map[bool]string{false: "detach", true: "terminate"}[terminate], func(t *testing.T) {
			multiNodeSession(t, p, nodes, ssh, terminate)
		})
	}
	t.Run("attach", func(t *testing.T) { multiNodeAttach(t, p, nodes, ssh) })
}

// A rank on another node whose death ends the job while the launcher holds it, once the
// launcher has started the agents as its debugger daemons and before they are in place: PRRTE
// ends the daemons that have not registered with the job, an agent that has finds the rank's
// process gone (or, registered before the rank's end, fails to attach to it), and only the
// launcher's report of the job's end says which rank ended it and how. The launch fails at
// once with an error that names the rank, its node and its exit status, and nothing of the
// job is left on any node.
func TestPMIxMultiNodeRankDiesBeforeAgents(t *testing.T) {
	needOpenMPI5(t)
	nodes := []string{"127.0.0.2", "127.0.0.3"}
	ssh := hostNodes(t, nodes...)
	bin := filepath.Join(t.TempDir(), "mpi_dies_held")
	if out, err := exec.Command("mpicc.openmpi", "-g", "-pthread", "-o", bin, filepath.Join("testdata", "mpi_dies_held.c")).CombinedOutput(); err != nil {
		t.Fatalf("mpicc: %v\n%s", err, out)
	}
	env := multiNodeEnv()
	// The rank's exit must end the job, as it does by default.
	env["DIE_RANK"], env["DIE_STATUS"] = "2", "7"
	delete(env, "PRTE_MCA_state_base_error_non_zero_exit")
	d := newDAP(t, viaPipe)
	defer d.close()
	d.initialize()
	t0 := time.Now()
	err := d.c.Call("launch", map[string]any{"program": bin, "launcher": "mpirun.openmpi", "np": 4, "env": env,
		"launcherArgs": []string{"--host", nodes[0] + ":2," + nodes[1] + ":2", "--map-by", "node", "--prtemca", "plm_ssh_agent", ssh}}, nil)
	if err == nil {
		t.Fatal("launch succeeded; want an error naming rank 2")
	}
	t.Logf("launch error after %v: %v", time.Since(t0).Round(time.Millisecond), err)
	// Rank 2 runs on the first node (mapped by node). (PRRTE 3.0 gives no words of its own on
	// the job's end: there is no launcher's message to quote.) Its agent may have registered
	// before the rank's end, which the debugger's attach to it then meets.
	for _, want := range []string{": ranks ended before ", "rank 2 on " + nodes[0], "whose end ended the job with status 7"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("launch error %q does not say %q", err, want)
		}
	}
	if !strings.Contains(err.Error(), "before their node agents were in place") && !strings.Contains(err.Error(), "before the debugger took them") {
		t.Errorf("launch error %q says neither that the agents were not in place nor that the debugger had not taken the ranks", err)
	}
	// The ranks and the launcher have the program in their command lines, the agents and their
	// daemons this hpcdap.
	var left []string
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		left = left[:0]
		for _, pid := range processesWith(bin) {
			left = append(left, fmt.Sprintf("pid %d of the job (%s)", pid, procStatus(pid, "State")))
		}
		for _, pid := range processesWith(hpcdapBinary(t)) {
			args, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
			if argv := strings.Split(string(args), "\x00"); len(argv) > 1 && (argv[1] == "pmix-daemon" || argv[1] == "agent") {
				left = append(left, fmt.Sprintf("%s pid %d (%s)", argv[1], pid, procStatus(pid, "State")))
			}
		}
		if len(left) == 0 {
			t.Logf("nothing of the job left %v after the launch request", time.Since(t0).Round(time.Millisecond))
			return
		}
	}
	t.Fatalf("processes of the failed job left: %s", strings.Join(left, "; "))
}

// multiNodeEnv is the launch environment of the multi-node jobs: the nodes' network is the
// loopback one, which Open MPI's TCP transport leaves out unless told (as a site names its
// cluster's interconnect).
func multiNodeEnv() map[string]any {
	env := map[string]any{"OMPI_MCA_btl_tcp_if_include": "lo"}
	for k, v := range ompi5Env {
		env[k] = v
	}
	return env
}

// multiNodeAttach attaches by launcherPid to a running job over the nodes: every rank is
// found where it runs and stopped, and the detach leaves the job to finish.
func multiNodeAttach(t *testing.T, p *program, nodes []string, ssh string) {
	const np = 4
	cmd, goFile, done := startWaitingJob(t, p, needTool(t, "mpirun.openmpi"), envList(multiNodeEnv()),
		"--host", nodes[0]+":2,"+nodes[1]+":2", "--map-by", "node", "--prtemca", "plm_ssh_agent", ssh, "-np", strconv.Itoa(np))
	waitRanksRunning(t, cmd.Process.Pid, p.bin, done, np)
	d, rs := attachAtEntry(t, cmd.Process.Pid, np)
	for _, r := range rs {
		if got := hostOf(t, r.Pid); got != r.Host || got != nodes[r.Rank%2] {
			t.Errorf("rank %d (pid %d) reported on %s runs on %s, want %s", r.Rank, r.Pid, r.Host, got, nodes[r.Rank%2])
		}
		if frames := d.stackTrace(r.ThreadID); indexOfFrame(frames, 0, "main") < 0 {
			t.Errorf("rank %d: stack %v has no main", r.Rank, frameNames(frames))
		}
	}
	d.c.Request("disconnect", map[string]any{"terminateDebuggee": false})
	d.end()
	for _, r := range rs {
		if tr := procStatus(r.Pid, "TracerPid"); tr != "0" {
			t.Errorf("rank %d after the detach: TracerPid %s", r.Rank, tr)
		}
	}
	if err := os.WriteFile(goFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	checkFinished(t, cmd, done, np)
}

func multiNodeSession(t *testing.T, p *program, nodes []string, ssh string, terminate bool) {
	d := newDAP(t, viaPipe)
	defer d.close()
	done := t.TempDir()
	const np = 4
	d.launch(map[string]any{"program": p.bin, "launcher": "mpirun.openmpi", "np": np, "env": multiNodeEnv(),
		"launcherArgs": []string{"--host", nodes[0] + ":2," + nodes[1] + ":2", "--map-by", "node", "--prtemca", "plm_ssh_agent", ssh},
		"args":         []string{"-", done}, "stopMode": "rank"})
	waitOutput(t, d, "agents started by the launcher as PMIx debugger daemons")
	d.setBreakpoints(p.src, p.line(t, "after_init"))
	d.call("configurationDone", nil, nil)
	tids := waitBreakpointStops(t, d, np)
	ranks := d.ranks().Ranks
	hosts := map[string]int{}
	staging := map[string]bool{} // the session directories the agents' daemons made, one per node
	for _, r := range ranks {
		hosts[r.Host]++
		if want := nodes[r.Rank%2]; r.Host != want {
			t.Errorf("rank %d runs on %q, want %s (mapped by node)", r.Rank, r.Host, want)
		}
		if got := hostOf(t, r.Pid); got != r.Host {
			t.Errorf("rank %d (pid %d) reported on %s runs in the UTS namespace of %s", r.Rank, r.Pid, r.Host, got)
		}
		tracer, _ := strconv.Atoi(procStatus(r.Pid, "TracerPid"))
		if tracer == 0 {
			t.Fatalf("rank %d (pid %d) is not traced at the breakpoint", r.Rank, r.Pid)
		}
		if got := hostOf(t, tracer); got != r.Host {
			t.Errorf("rank %d on %s is traced by an agent on %s", r.Rank, r.Host, got)
		}
		args, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", tracer))
		argv := strings.Split(string(args), "\x00")
		for i, a := range argv {
			if a == "--staging" && i+1 < len(argv) {
				staging[argv[i+1]] = true
			}
		}
		if !strings.Contains(string(args), "--remove-staging") {
			t.Errorf("rank %d's agent %q does not remove the session directory its daemon made", r.Rank, argv)
		}
		frames := d.stackTrace(tids[r.Rank])
		var ev struct {
			Result string `json:"result"`
		}
		d.call("evaluate", map[string]any{"expression": "rank", "frameId": frames[0].Id, "context": "watch"}, &ev)
		if ev.Result != strconv.Itoa(r.Rank) {
			t.Errorf("rank %d: rank = %q", r.Rank, ev.Result)
		}
	}
	if len(staging) != len(nodes) {
		t.Errorf("the agents' session directories: %v, want one per node", staging)
	}
	t.Logf("the agents' session directories: %v", staging)
	if len(ranks) != np || hosts[nodes[0]] != 2 || hosts[nodes[1]] != 2 {
		t.Fatalf("ranks per node %v, want 2 on each of %v", hosts, nodes)
	}
	d.call("disconnect", map[string]any{"terminateDebuggee": terminate}, nil)
	var left []string
	for deadline := time.Now().Add(90 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		left = left[:0]
		for _, r := range ranks {
			st := procStatus(r.Pid, "State")
			switch {
			case st == "" || strings.HasPrefix(st, "Z"):
			case terminate:
				left = append(left, fmt.Sprintf("rank %d (pid %d) still runs: %s", r.Rank, r.Pid, st))
			case strings.HasPrefix(st, "t") || strings.HasPrefix(st, "T"):
				left = append(left, fmt.Sprintf("rank %d (pid %d) in state %s", r.Rank, r.Pid, st))
			case procStatus(r.Pid, "TracerPid") != "0":
				left = append(left, fmt.Sprintf("rank %d (pid %d) still traced", r.Rank, r.Pid))
			}
			if _, err := os.Stat(filepath.Join(done, "rank."+strconv.Itoa(r.Rank))); err != nil && !terminate {
				left = append(left, fmt.Sprintf("rank %d not finished", r.Rank))
			}
		}
		for dir := range staging {
			if _, err := os.Stat(dir); err == nil {
				left = append(left, "session directory "+dir+" still there")
			}
			for _, pid := range processesWith(dir) {
				left = append(left, fmt.Sprintf("agent %d of %s still there (%s)", pid, dir, procStatus(pid, "State")))
			}
		}
		if len(left) == 0 {
			return
		}
	}
	t.Fatalf("after the disconnect: %s", strings.Join(left, "; "))
}

// processesWith lists the processes whose command line holds arg.
func processesWith(arg string) []int {
	var out []int
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		for _, a := range strings.Split(string(b), "\x00") {
			if a == arg {
				out = append(out, pid)
				break
			}
		}
	}
	return out
}

// hostOf is the host name of pid's UTS namespace.
func hostOf(t *testing.T, pid int) string {
	t.Helper()
	out, err := exec.Command("nsenter", "-t", strconv.Itoa(pid), "--uts", "hostname").Output()
	if err != nil {
		t.Fatalf("host name of pid %d: %v", pid, err)
	}
	return strings.TrimSpace(string(out))
}
