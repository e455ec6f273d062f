//go:build pmix

package adapter

import (
	"os"
	"strconv"
	"strings"
	"testing"
)

// Attach by PMIx namespace to a running 4-rank Open MPI 5 job: the namespace (as its ranks
// have it in PMIX_NAMESPACE) leads to its launcher, the ranks come from the launcher's proc
// table of that namespace, each traced by an agent the launcher started; a detach leaves the
// job running to its end. A namespace no process of this host is in fails the attach at once,
// naming it.
func TestPMIxAttachNamespace(t *testing.T) {
	p := needOpenMPI5(t)
	var env []string
	for k, v := range ompi5Env {
		env = append(env, k+"="+v.(string))
	}
	cmd, goFile, done := startWaitingJob(t, p, needTool(t, "mpirun.openmpi"), env, "-np", "4")
	pids := waitRanksRunning(t, cmd.Process.Pid, p.bin, done, 4)
	environ, _ := os.ReadFile("/proc/" + strconv.Itoa(pids[0]) + "/environ")
	nspace := ""
	for _, kv := range strings.Split(string(environ), "\x00") {
		if v, ok := strings.CutPrefix(kv, "PMIX_NAMESPACE="); ok {
			nspace = v
		}
	}
	if nspace == "" {
		t.Fatalf("rank pid %d has no PMIX_NAMESPACE", pids[0])
	}

	bad := newDAP(t, viaPipe)
	bad.initialize()
	if msg := bad.callErr("attach", map[string]any{"pmixNamespace": nspace + "x"}); !strings.Contains(msg, nspace+"x") ||
		!strings.Contains(msg, "no process of this host") {
		t.Errorf("attach to an unknown namespace: %q, want an error naming it", msg)
	}
	bad.close()

	d := newDAP(t, viaPipe)
	d.initialize()
	d.call("attach", map[string]any{"pmixNamespace": nspace, "stopAtEntry": true}, nil)
	d.event("initialized")
	d.call("configurationDone", nil, nil)
	if b := d.stopped(); b.Reason != "entry" {
		t.Fatalf("stop %+v, want the entry stop", b)
	}
	waitOutput(t, d, "agents started by the launcher as PMIx debugger daemons")
	rs := d.ranks().Ranks
	if len(rs) != 4 {
		t.Fatalf("ranks %+v, want 4", rs)
	}
	for _, r := range rs {
		if !containsInt(pids, r.Pid) {
			t.Errorf("rank %d: pid %d is not one of the job's ranks %v", r.Rank, r.Pid, pids)
		}
		tracer, _ := strconv.Atoi(procStatus(r.Pid, "TracerPid"))
		if chain := ancestors(tracer); tracer == 0 || !containsInt(chain, cmd.Process.Pid) {
			t.Errorf("rank %d (pid %d) traced by %d (ancestors %v), want an agent the launcher %d started", r.Rank, r.Pid, tracer, chain, cmd.Process.Pid)
		}
		frames := d.stackTrace(r.ThreadID)
		if w := indexOfFrame(frames, 0, "wait_for"); w < 0 || indexOfFrame(frames, w, "main") != w+1 {
			t.Errorf("rank %d: stack %v, want wait_for under main", r.Rank, frameNames(frames))
		}
	}
	d.c.Request("disconnect", map[string]any{"terminateDebuggee": false})
	d.end()
	for _, pid := range pids {
		// The agents detach before they answer the shutdown the detach sends them.
		if tr := procStatus(pid, "TracerPid"); tr != "0" {
			t.Errorf("rank pid %d after the detach: TracerPid %s", pid, tr)
		}
	}
	if err := os.WriteFile(goFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	checkFinished(t, cmd, done, 4)
}
