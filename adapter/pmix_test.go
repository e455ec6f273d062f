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

// The PMIx launch path through the adapter, against a real Open MPI 5 mpirun (PRRTE), which
// has no MPIR symbols. These tests run where Open MPI 5 is installed: `make test-pmix` runs
// them in a Debian 13 root.

// ompi5Env lets Open MPI 5's mpirun run as root and place more ranks than there are cores, and
// keeps it from ending the job when the first rank exits with a non-zero code (every rank exits
// with 10+rank).
var ompi5Env = map[string]any{"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
	"PRTE_ALLOW_RUN_AS_ROOT": "1", "PRTE_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
	"PRTE_MCA_rmaps_default_mapping_policy": ":oversubscribe", "PRTE_MCA_state_base_error_non_zero_exit": "0"}

// needOpenMPI5 fails the test unless mpirun.openmpi is Open MPI 5 or later: with the pmix
// build tag, the tests are meant to run against it.
func needOpenMPI5(t *testing.T) *program {
	t.Helper()
	mpirun := needTool(t, "mpirun.openmpi")
	out, _ := exec.Command(mpirun, "--version").Output()
	if !strings.Contains(string(out), "(Open MPI) 5") {
		t.Fatalf("%s is not Open MPI 5: %q (the PMIx tests run in the Debian 13 root: make test-pmix)", mpirun, out)
	}
	return compileMPI(t, "mpicc.openmpi")
}

// Open MPI 5's mpirun through the PMIx tool interface: every rank stops at the breakpoint in
// combine with main under the MPI frames, the job runs to its end with each rank's own exit
// code and its output labelled by rank; the user is told which protocol was chosen.
func TestPMIxMPIRunBreakpoint(t *testing.T) {
	p := needOpenMPI5(t)
	// (With one rank, MPI_Allreduce has nothing to combine: TestPMIxStopAtEntry covers np 1.)
	mpirunBreakpoint(t, p, "mpirun.openmpi", ompi5Env, 4, 16)
}

// An MPI program is held inside PMIx_Init, in MPI_Init (as under Open MPI 4): stopAtEntry
// stops every rank there, under main, and says that main has already run; a breakpoint after
// MPI_Init then stops each rank with its own rank number in `rank`.
func TestPMIxStopAtEntry(t *testing.T) {
	p := needOpenMPI5(t)
	for _, np := range []int{1, 4} {
		t.Run(fmt.Sprintf("np%d", np), func(t *testing.T) {
			d := newDAP(t, viaPipe)
			defer d.close()
			d.launch(map[string]any{"program": p.bin, "launcher": "mpirun.openmpi", "np": np, "env": ompi5Env,
				"args": []string{"-"}, "stopAtEntry": true, "stopMode": "rank"})
			d.setBreakpoints(p.src, p.line(t, "after_init"))
			d.call("configurationDone", nil, nil)
			// Ranks held where the launcher holds them are stopped in place: one entry stop.
			if b := d.stopped(); b.Reason != "entry" {
				t.Fatalf("stop %+v, want the entry stop first", b)
			}
			waitOutput(t, d, "through the PMIx tool interface")
			waitOutput(t, d, "main has already run")
			rs := d.ranks().Ranks
			for _, r := range rs {
				if r.State != "stopped" {
					t.Fatalf("rank %d is %s after the entry stop", r.Rank, r.State)
				}
			}
			for _, r := range rs {
				frames := d.stackTrace(r.ThreadID)
				if i := indexOfFrame(frames, 0, "MPI_Init"); i < 0 || indexOfFrame(frames, i, "main") < 0 {
					t.Errorf("rank %d held at %v, want inside MPI_Init under main", r.Rank, frameNames(frames))
				}
			}
			for _, r := range rs {
				d.call("continue", map[string]any{"threadId": r.ThreadID}, nil)
			}
			tids := waitBreakpointStops(t, d, np)
			for rank, tid := range tids {
				frames := d.stackTrace(tid)
				if len(frames) == 0 || frames[0].Line != p.line(t, "after_init") {
					t.Fatalf("rank %d stopped at %v, want line %d", rank, frameNames(frames), p.line(t, "after_init"))
				}
				var ev struct {
					Result string `json:"result"`
				}
				d.call("evaluate", map[string]any{"expression": "rank", "frameId": frames[0].Id, "context": "watch"}, &ev)
				if ev.Result != strconv.Itoa(rank) {
					t.Errorf("rank %d: rank = %q", rank, ev.Result)
				}
			}
		})
	}
}

// A program that is not an MPI program never reaches PMIx_Init: the launcher holds its ranks
// at their exec, and stopAtEntry stops each at main, before any of its code ran.
func TestPMIxStopAtEntryNotMPI(t *testing.T) {
	needOpenMPI5(t)
	p := compileC(t, "nap")
	d := newDAP(t, viaPipe)
	defer d.close()
	d.launch(map[string]any{"program": p.bin, "launcher": "mpirun.openmpi", "np": 2, "env": ompi5Env,
		"stopAtEntry": true, "stopMode": "rank"})
	d.call("configurationDone", nil, nil)
	for range 2 {
		if b := d.stopped(); b.Reason != "entry" {
			t.Fatalf("stop %+v, want the entry stops", b)
		}
	}
	rs := d.ranks().Ranks
	if len(rs) != 2 {
		t.Fatalf("ranks %+v, want 2", rs)
	}
	for _, r := range rs {
		if frames := d.stackTrace(r.ThreadID); len(frames) == 0 || frames[0].Name != "main" {
			t.Errorf("rank %d held at %v, want main", r.Rank, frameNames(frames))
		}
	}
	if out := allOutput(d); strings.Contains(out, "main has already run") {
		t.Errorf("output says main has already run:\n%s", out)
	}
}

// Attach to a running Open MPI 5 job by its launcher's pid: the ranks come from the PMIx
// proc table, and a detach leaves the job running to its end.
func TestPMIxAttachLauncherPid(t *testing.T) {
	p := needOpenMPI5(t)
	mpirunAttach(t, p, needTool(t, "mpirun.openmpi"), ompi5Env)
}

// Killing `hpcdap dap` with every rank stopped leaves no rank stopped or traced, and the job
// completes.
func TestPMIxFrontEndKilled(t *testing.T) {
	p := needOpenMPI5(t)
	for _, mode := range []string{"rank", "all"} {
		t.Run(mode, func(t *testing.T) { frontEndKilled(t, p, "mpirun.openmpi", ompi5Env, mode) })
	}
}

// BenchmarkPMIxMPIRunToBreakpoint: launch → every rank stopped at a breakpoint after
// MPI_Init, through Open MPI 5's `mpirun -np N` (the PMIx tool interface, ranks held at exec,
// one agent), for 1, 4, 16 and 64 ranks, beside the plain `mpirun -np N` run of the same
// program.
//
//	scripts/debian13-root.sh run go test -tags pmix -run '^$' -bench PMIxMPIRunToBreakpoint -benchtime 1x ./adapter
func BenchmarkPMIxMPIRunToBreakpoint(b *testing.B) {
	mpirun := needTool(b, "mpirun.openmpi")
	if out, _ := exec.Command(mpirun, "--version").Output(); !strings.Contains(string(out), "(Open MPI) 5") {
		b.Fatalf("%s is not Open MPI 5: %q", mpirun, out)
	}
	benchLauncherToBreakpoint(b, compileMPI(b, "mpicc.openmpi"), "mpirun.openmpi", "-np", ompi5Env)
}

// BenchmarkPMIxAttachLauncherPid: attach by launcherPid to a running 16-rank Open MPI 5 job
// (through the PMIx proc table) until every rank is stopped, and until every rank's stack is
// read.
//
//	scripts/debian13-root.sh run go test -tags pmix -run '^$' -bench PMIxAttachLauncherPid -benchtime 1x ./adapter
func BenchmarkPMIxAttachLauncherPid(b *testing.B) {
	mpirun := needTool(b, "mpirun.openmpi")
	p := compileMPI(b, "mpicc.openmpi")
	var stopped, stacks time.Duration
	for range b.N {
		s, a := attachLauncherPidOnce(b, mpirun, p, 16, ompi5Env)
		stopped += s
		stacks += a
	}
	n := float64(b.N)
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(stopped.Seconds()/n, "all-stopped-s")
	b.ReportMetric(stacks.Seconds()/n, "all-stacks-s")
}

// A rank that dies before the launcher could hold it (rank 1 aborts before MPI_Init) fails
// the launch at once, naming the rank and its host, and leaves nothing of the job behind —
// whichever of the launcher's reports comes first (the job's end, its ready event with the
// rank dead or dying, or none as it stalls). PRRTE reports a job held in PMIx_Init ready
// once its first rank is there: the debugger may then take rank 1 before its abort, and the
// launch succeeds with rank 1 held short of it; let go, rank 1 then stops on its SIGABRT.
func TestPMIxRankDiesBeforeHold(t *testing.T) {
	needOpenMPI5(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "mpi_early_abort")
	if out, err := exec.Command("mpicc.openmpi", "-g", "-o", bin, filepath.Join("testdata", "mpi_early_abort.c")).CombinedOutput(); err != nil {
		t.Fatalf("mpicc: %v\n%s", err, out)
	}
	d := newDAP(t, viaPipe)
	defer d.close()
	d.initialize()
	err := d.c.Call("launch", map[string]any{"program": bin, "launcher": "mpirun.openmpi", "np": 4, "env": ompi5Env}, nil)
	host, _ := os.Hostname()
	if err == nil {
		tid := -1
		for _, r := range d.ranks().Ranks {
			if r.Rank == 1 {
				tid = r.ThreadID
			}
		}
		d.call("configurationDone", nil, nil)
		if st := d.stopped(); st.ThreadId != tid || st.Reason != "exception" || !strings.Contains(st.Text, "SIGABRT") {
			t.Fatalf("launch succeeded, then stop %+v; want rank 1 (thread %d) stopped on its SIGABRT", st, tid)
		}
		t.Logf("the debugger took rank 1 before its abort, and it stopped on it")
		d.call("disconnect", map[string]any{"terminateDebuggee": true}, nil)
	} else if !strings.Contains(err.Error(), "rank 1 on "+host) || !strings.Contains(err.Error(), ": ranks ended before ") {
		t.Fatalf("launch: %v; want an error naming rank 1 on %s", err, host)
	} else {
		t.Logf("launch error: %v", err)
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		left, _ := exec.Command("pgrep", "-f", bin).Output()
		if len(strings.TrimSpace(string(left))) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("processes of the failed job left: %s", left)
		}
	}
}

// An MPMD launch through PRRTE's prterun (two app contexts: launcherArgs carry the first,
// program the second; Open MPI 5.0.7's own mpirun crashes on any MPMD command line here):
// every rank is held and stops at the breakpoint both binaries share, two ranks run each
// context's executable.
func TestPMIxMPMD(t *testing.T) {
	p := needOpenMPI5(t)
	needTool(t, "prterun")
	second := filepath.Join(t.TempDir(), "mpi_job_b")
	if out, err := exec.Command("cp", p.bin, second).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v\n%s", err, out)
	}
	d := newDAP(t, viaPipe)
	defer d.close()
	d.launch(map[string]any{"program": second, "args": []string{"-"}, "launcher": "prterun", "env": ompi5Env,
		"launcherArgs": []string{"-np", "2", p.bin, "-", ":", "-np", "2"}, "stopMode": "rank"})
	rs := d.ranks().Ranks
	if len(rs) != 4 {
		t.Fatalf("ranks %+v, want 4", rs)
	}
	count := map[string]int{}
	for _, r := range rs {
		exe, _ := os.Readlink("/proc/" + strconv.Itoa(r.Pid) + "/exe")
		count[exe]++
	}
	if count[p.bin] != 2 || count[second] != 2 {
		t.Errorf("ranks run %v, want two of %s and two of %s", count, p.bin, second)
	}
	d.setBreakpoints(p.src, p.line(t, "combine"))
	d.call("configurationDone", nil, nil)
	stopInCombineAndGoOn(t, d, p, 4)
	d.event("terminated")
}

// A rank that starts late, still on its way to MPI_Init when the launcher reports the job
// ready for debug: the release the front end sends once every rank is under control went out
// before that rank listened for it, and it must still be released — every rank stops at the
// breakpoint after MPI_Init and the job runs to its end.
func TestPMIxLateRank(t *testing.T) {
	p := needOpenMPI5(t)
	d := newDAP(t, viaPipe)
	defer d.close()
	env := map[string]any{"LATE_RANK": "3", "LATE_SECONDS": "2"}
	for k, v := range ompi5Env {
		env[k] = v
	}
	const np = 4
	done := t.TempDir()
	d.launch(map[string]any{"program": p.bin, "launcher": "mpirun.openmpi", "np": np, "env": env,
		"args": []string{"-", done}, "stopMode": "rank"})
	d.setBreakpoints(p.src, p.line(t, "after_init"))
	d.call("configurationDone", nil, nil)
	tids := waitBreakpointStops(t, d, np)
	d.setBreakpoints(p.src)
	for r := 0; r < np; r++ {
		d.call("continue", map[string]any{"threadId": tids[r]}, nil)
	}
	if _, err := d.c.WaitEvent("terminated", 2*time.Minute, nil); err != nil {
		t.Fatal(err)
	}
	for r := 0; r < np; r++ {
		if _, err := os.Stat(filepath.Join(done, fmt.Sprintf("rank.%d", r))); err != nil {
			t.Errorf("rank %d did not finish: %v", r, err)
		}
	}
}
