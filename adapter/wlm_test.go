package adapter

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-dap"
	"github.com/hpcdap/hpcdap/adapter/dapclient"
)

// ompiEnv lets Open MPI's mpirun run as root on a 2-core machine, and keeps it from aborting
// the job when the first rank exits with a non-zero code (every rank exits with 10+rank).
var ompiEnv = map[string]any{"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
	"OMPI_MCA_rmaps_base_oversubscribe": "1", "OMPI_MCA_orte_abort_on_non_zero_status": "0"}

// compileMPI builds testdata/mpi_job.c with an MPI compiler wrapper (mpicc.openmpi,
// mpicc.mpich) and finds its MARK: lines.
func compileMPI(t testing.TB, mpicc string) *program {
	t.Helper()
	needTool(t, mpicc)
	dir := t.TempDir()
	srcData, err := os.ReadFile(filepath.Join("testdata", "mpi_job.c"))
	if err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(dir, "mpi_job.c")
	if err := os.WriteFile(src, srcData, 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "mpi_job")
	buildMu.Lock()
	out, err := exec.Command(mpicc, "-g", "-O0", "-o", bin, src).CombinedOutput()
	buildMu.Unlock()
	if err != nil {
		t.Fatalf("%s mpi_job.c: %v\n%s", mpicc, err, out)
	}
	p := &program{bin: bin, src: src, dir: dir, marks: map[string]int{}}
	for i, l := range strings.Split(string(srcData), "\n") {
		if k := strings.Index(l, "MARK:"); k >= 0 {
			p.marks[strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(l[k+5:]), "*/"))] = i + 1
		}
	}
	return p
}

// frameNames lists a stack's function names, innermost first.
func frameNames(frames []dap.StackFrame) []string {
	out := make([]string, len(frames))
	for i, f := range frames {
		out[i] = f.Name
	}
	return out
}

// indexOfFrame returns the first frame at or after from whose name contains part, or -1.
func indexOfFrame(frames []dap.StackFrame, from int, part string) int {
	for i := from; i < len(frames); i++ {
		if strings.Contains(frames[i].Name, part) {
			return i
		}
	}
	return -1
}

// waitBreakpointStops waits until every rank of np has reported a stop at the breakpoint
// (stopMode "rank": each rank stops on its own) and returns rank → thread id.
func waitBreakpointStops(t testing.TB, d *dapSession, np int) map[int]int {
	t.Helper()
	tids := map[int]int{}
	deadline := time.Now().Add(3 * time.Minute)
	for len(tids) < np && time.Now().Before(deadline) {
		var b dap.StoppedEventBody
		m, err := d.c.WaitEvent("stopped", 60*time.Second, nil)
		if err != nil {
			t.Fatalf("%d of %d ranks stopped at the breakpoint: %v; the others: %s", len(tids), np, err, whereRanksAre(d, tids))
		}
		if err := m.Decode(&b); err != nil {
			t.Fatal(err)
		}
		if b.Reason != "breakpoint" {
			t.Fatalf("stop %+v, want a breakpoint stop", b)
		}
		for _, r := range d.ranks().Ranks {
			if r.State == "stopped" && r.StopReason == "breakpoint" {
				tids[r.Rank] = r.ThreadID
			}
		}
	}
	if len(tids) < np {
		t.Fatalf("%d of %d ranks stopped at the breakpoint: %v", len(tids), np, tids)
	}
	return tids
}

// whereRanksAre pauses the ranks of the session that are not in stopped and says where each
// is: what a test that waited in vain for them reports.
func whereRanksAre(d *dapSession, stopped map[int]int) string {
	var out []string
	for _, r := range d.ranks().Ranks {
		if _, ok := stopped[r.Rank]; ok {
			continue
		}
		if _, err := d.c.Request("pause", map[string]any{"threadId": r.ThreadID}); err != nil {
			out = append(out, fmt.Sprintf("rank %d (%s): pause: %v", r.Rank, r.State, err))
			continue
		}
		d.c.WaitEvent("stopped", 10*time.Second, nil)
		var st dap.StackTraceResponseBody
		m, err := d.c.Request("stackTrace", map[string]any{"threadId": r.ThreadID})
		if err == nil {
			err = m.Decode(&st)
		}
		if err != nil {
			out = append(out, fmt.Sprintf("rank %d (%s): stack: %v", r.Rank, r.State, err))
			continue
		}
		var names []string
		for _, f := range st.StackFrames {
			names = append(names, f.Name)
		}
		out = append(out, fmt.Sprintf("rank %d (%s) in %s", r.Rank, r.State, strings.Join(names, " < ")))
	}
	return strings.Join(out, "; ")
}

// stopInCombineAndGoOn waits for every rank to stop at the breakpoint in combine, checks each
// rank's stack there, then clears the breakpoint (combine runs again in the reduction's later
// rounds) and lets every rank go.
func stopInCombineAndGoOn(t *testing.T, d *dapSession, p *program, np int) {
	t.Helper()
	tids := waitBreakpointStops(t, d, np)
	for r := 0; r < np; r++ {
		checkCombineStack(t, d, p, r, tids[r])
	}
	d.setBreakpoints(p.src)
	for r := 0; r < np; r++ {
		d.call("continue", map[string]any{"threadId": tids[r]}, nil)
	}
}

// checkCombineStack checks one rank's stack at the breakpoint in combine, which MPI_Allreduce
// calls: combine on top at the breakpoint's line, MPI frames, then MPI_Allreduce, then main.
func checkCombineStack(t *testing.T, d *dapSession, p *program, rank, tid int) {
	t.Helper()
	frames := d.stackTrace(tid)
	names := frameNames(frames)
	if len(frames) == 0 || frames[0].Name != "combine" || frames[0].Line != p.line(t, "combine") {
		t.Errorf("rank %d: top frame %v, want combine at line %d", rank, names, p.line(t, "combine"))
		return
	}
	ar := indexOfFrame(frames, 1, "MPI_Allreduce")
	m := indexOfFrame(frames, 1, "main")
	if ar < 2 || m != ar+1 {
		t.Errorf("rank %d: stack %v: want combine, the MPI library's frames, MPI_Allreduce, then main", rank, names)
		return
	}
	for _, f := range frames[1:ar] {
		if f.Source != nil && f.Source.Path == p.src {
			t.Errorf("rank %d: frame %s between combine and MPI_Allreduce is in the program's source", rank, f.Name)
		}
	}
	if frames[m].Line != p.line(t, "allreduce") {
		t.Errorf("rank %d: main at line %d, want the MPI_Allreduce call at %d", rank, frames[m].Line, p.line(t, "allreduce"))
	}
}

// Open MPI's mpirun through the adapter: every rank stops at a breakpoint inside
// MPI_Allreduce's call path, each rank's stack shows main under the MPI frames, and the job
// runs to its end with each rank's own exit code and its output labelled by rank.
func TestMPIRunBreakpoint(t *testing.T) {
	needTool(t, "mpirun.openmpi")
	p := compileMPI(t, "mpicc.openmpi")
	mpirunBreakpoint(t, p, "mpirun.openmpi", ompiEnv, 4, 16)
}

// mpirunBreakpoint runs a job of each size in nps through launcher to a breakpoint in
// combine and on to its end, checking the ranks' pids, stacks, exit codes and output.
func mpirunBreakpoint(t *testing.T, p *program, launcher string, env map[string]any, nps ...int) {
	for _, np := range nps {
		t.Run(fmt.Sprintf("np%d", np), func(t *testing.T) {
			d := newDAP(t, viaPipe)
			defer d.close()
			done := t.TempDir()
			d.launch(map[string]any{"program": p.bin, "launcher": launcher, "np": np,
				"args": []string{"-", done}, "env": env, "stopMode": "rank"})
			ranks := d.ranks()
			if len(ranks.Ranks) != np {
				t.Fatalf("%d ranks, want %d: %+v", len(ranks.Ranks), np, ranks.Ranks)
			}
			for _, r := range ranks.Ranks {
				if exe, _ := os.Readlink("/proc/" + strconv.Itoa(r.Pid) + "/exe"); exe != p.bin {
					t.Fatalf("rank %d: pid %d runs %q, want %s", r.Rank, r.Pid, exe, p.bin)
				}
				if env, _ := os.ReadFile("/proc/" + strconv.Itoa(r.Pid) + "/environ"); !strings.Contains(string(env),
					"OMPI_COMM_WORLD_RANK="+strconv.Itoa(r.Rank)+"\x00") {
					t.Errorf("rank %d: pid %d is not Open MPI's rank %d", r.Rank, r.Pid, r.Rank)
				}
			}
			bps := d.setBreakpoints(p.src, p.line(t, "combine"))
			if !bps[0].Verified {
				t.Fatalf("breakpoint not verified: %+v", bps[0])
			}
			d.call("configurationDone", nil, nil)
			stopInCombineAndGoOn(t, d, p, np)
			d.event("exited")
			d.event("terminated")
			for _, r := range d.ranks().Ranks {
				if r.ExitCode == nil || *r.ExitCode != 10+r.Rank {
					t.Errorf("rank %d: exit code %v, want %d", r.Rank, r.ExitCode, 10+r.Rank)
				}
				if _, err := os.Stat(filepath.Join(done, "rank."+strconv.Itoa(r.Rank))); err != nil {
					t.Errorf("rank %d did not finish: %v", r.Rank, err)
				}
			}
			// The launcher's output (the ranks' lines, labelled) and its end reach the client.
			waitOutput(t, d, launcher+" (pid ")
			out := allOutput(d)
			for r := 0; r < np; r++ {
				want := fmt.Sprintf("[%d] rank %d of %d: sum %d\n", r, r, np, np*(np-1)/2)
				if !strings.Contains(out, want) {
					t.Errorf("output lacks %q:\n%s", want, out)
				}
				if !strings.Contains(out, fmt.Sprintf("rank %d exited with code %d\n", r, 10+r)) {
					t.Errorf("output does not report rank %d's exit code", r)
				}
			}
		})
	}
}

// waitOutput waits until some output event contains text.
func waitOutput(t *testing.T, d *dapSession, text string) {
	t.Helper()
	_, err := d.c.WaitEvent("output", 60*time.Second, func(m *dapclient.Message) bool {
		var o dap.OutputEventBody
		m.Decode(&o)
		return strings.Contains(o.Output, text)
	})
	if err != nil {
		t.Fatalf("%v (waiting for %q); output so far:\n%s", err, text, allOutput(d))
	}
}

// A stopAtEntry under mpirun cannot stop at main (the ranks are held inside MPI_Init): the
// user is told, and the ranks stop where they are held, under main.
func TestMPIRunStopAtEntry(t *testing.T) {
	needTool(t, "mpirun.openmpi")
	p := compileMPI(t, "mpicc.openmpi")
	d := newDAP(t, viaPipe)
	defer d.close()
	d.launch(map[string]any{"program": p.bin, "launcher": "mpirun.openmpi", "np": 2, "env": ompiEnv,
		"stopAtEntry": true})
	d.call("configurationDone", nil, nil)
	if b := d.stopped(); b.Reason != "entry" {
		t.Fatalf("stop %+v, want the entry stop", b)
	}
	waitOutput(t, d, "main has already run")
	for _, r := range d.ranks().Ranks {
		frames := d.stackTrace(r.ThreadID)
		if i := indexOfFrame(frames, 0, "MPI_Init"); i < 0 || indexOfFrame(frames, i, "main") < 0 {
			t.Errorf("rank %d held at %v, want inside MPI_Init under main", r.Rank, frameNames(frames))
		}
	}
}

// MPICH's mpiexec.hydra through the adapter: the same checks as for mpirun. The launch's
// environment reaches the ranks (a variable set to null is removed) and the ranks run without
// address-space randomisation (disableASLR's default).
func TestHydraBreakpoint(t *testing.T) {
	needTool(t, "mpiexec.hydra")
	p := compileMPI(t, "mpicc.mpich")
	const np = 4
	t.Setenv("HPCDAP_TEST_UNSET", "inherited")
	d := newDAP(t, viaPipe)
	defer d.close()
	done := t.TempDir()
	d.launch(map[string]any{"program": p.bin, "launcher": "mpiexec.hydra", "np": np, "args": []string{"-", done},
		"launcherArgs": []string{"-disable-auto-cleanup"}, "stopMode": "rank",
		"env": map[string]any{"HPCDAP_TEST_UNSET": nil, "HPCDAP_TEST_SET": "from launch.json"}})
	for _, r := range d.ranks().Ranks {
		env, _ := os.ReadFile("/proc/" + strconv.Itoa(r.Pid) + "/environ")
		if !strings.Contains(string(env), "\x00PMI_RANK="+strconv.Itoa(r.Rank)+"\x00") {
			t.Errorf("rank %d: pid %d is not hydra's rank %d", r.Rank, r.Pid, r.Rank)
		}
		if !strings.Contains(string(env), "\x00HPCDAP_TEST_SET=from launch.json\x00") || strings.Contains(string(env), "HPCDAP_TEST_UNSET=") {
			t.Errorf("rank %d: environment does not follow launch.json's env: %q", r.Rank, env)
		}
		pers, _ := os.ReadFile("/proc/" + strconv.Itoa(r.Pid) + "/personality")
		if v, err := strconv.ParseUint(strings.TrimSpace(string(pers)), 16, 32); err != nil || v&0x0040000 == 0 {
			t.Errorf("rank %d: personality %q, want ADDR_NO_RANDOMIZE", r.Rank, pers)
		}
	}
	d.setBreakpoints(p.src, p.line(t, "combine"))
	d.call("configurationDone", nil, nil)
	stopInCombineAndGoOn(t, d, p, np)
	d.event("terminated")
	for _, r := range d.ranks().Ranks {
		if r.ExitCode == nil || *r.ExitCode != 10+r.Rank {
			t.Errorf("rank %d: exit code %v, want %d", r.Rank, r.ExitCode, 10+r.Rank)
		}
	}
	waitOutput(t, d, "mpiexec.hydra (pid ")
	out := allOutput(d)
	for r := 0; r < np; r++ {
		if want := fmt.Sprintf("[%d] rank %d of %d: sum %d\n", r, r, np, np*(np-1)/2); !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// Under mpiexec.hydra the ranks are held right after their exec (fork/exec following), so a
// stopAtEntry stops every rank at main, before MPI_Init; a disconnect that does not terminate
// then leaves the job to run to its normal end, untraced.
func TestHydraStopAtEntryDetach(t *testing.T) {
	needTool(t, "mpiexec.hydra")
	p := compileMPI(t, "mpicc.mpich")
	const np = 3
	d := newDAP(t, viaPipe)
	defer d.close()
	done := t.TempDir()
	d.launch(map[string]any{"program": p.bin, "launcher": "mpiexec.hydra", "np": np, "args": []string{"-", done},
		"stopAtEntry": true})
	d.call("configurationDone", nil, nil)
	if b := d.stopped(); b.Reason != "entry" {
		t.Fatalf("stop %+v, want the entry stop", b)
	}
	ranks := d.ranks().Ranks
	if len(ranks) != np {
		t.Fatalf("%d ranks, want %d", len(ranks), np)
	}
	for _, r := range ranks {
		frames := d.stackTrace(r.ThreadID)
		if len(frames) == 0 || frames[0].Name != "main" || frames[0].Line >= p.line(t, "after_init") {
			t.Errorf("rank %d stopped at %v, want main before MPI_Init", r.Rank, frameNames(frames))
		}
	}
	if out := allOutput(d); strings.Contains(out, "main has already run") {
		t.Errorf("the user was told main has run:\n%s", out)
	}
	pids := map[int]int{}
	for _, r := range ranks {
		pids[r.Rank] = r.Pid
	}
	d.call("disconnect", map[string]any{"terminateDebuggee": false}, nil)
	deadline := time.Now().Add(90 * time.Second)
	for r := 0; r < np; r++ {
		for {
			if _, err := os.Stat(filepath.Join(done, "rank."+strconv.Itoa(r))); err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("rank %d (pid %d) did not finish after the detach: state %q, TracerPid %q", r, pids[r],
					procStatus(pids[r], "State"), procStatus(pids[r], "TracerPid"))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// Killing `hpcdap dap` with SIGKILL while every rank of an mpirun job is stopped at a
// breakpoint leaves no rank stopped or traced: the agents see their front end gone, remove the
// breakpoints and let the ranks go, and the job ends normally. In an all-stop, ranks that hit
// the breakpoint before the adapter's SIGSTOP reached them must not keep that SIGSTOP pending.
func TestMPIRunFrontEndKilled(t *testing.T) {
	needTool(t, "mpirun.openmpi")
	p := compileMPI(t, "mpicc.openmpi")
	for _, mode := range []string{"rank", "all"} {
		t.Run(mode, func(t *testing.T) { frontEndKilled(t, p, "mpirun.openmpi", ompiEnv, mode) })
	}
}

// The same under mpiexec.hydra, whose ranks are traced by the agent that follows hydra's forks:
// that agent lets everything go when its front end dies.
func TestHydraFrontEndKilled(t *testing.T) {
	needTool(t, "mpiexec.hydra")
	p := compileMPI(t, "mpicc.mpich")
	for _, mode := range []string{"rank", "all"} {
		t.Run(mode, func(t *testing.T) { frontEndKilled(t, p, "mpiexec.hydra", nil, mode) })
	}
}

func frontEndKilled(t *testing.T, p *program, launcher string, env map[string]any, mode string) {
	logs := t.TempDir() // the session's directory: the front end killed leaves its logs there
	cmd := exec.Command(hpcdapBinary(t), "dap", "--log", filepath.Join(logs, "adapter.log"))
	cmd.Env = append(os.Environ(), "TMPDIR="+logs)
	t.Cleanup(func() {
		if t.Failed() {
			dumpLogs(t, logs)
		}
	})
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	cmd.Stderr = newTestWriter(t)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	defer func() {
		cmd.Process.Kill()
		<-exited
	}()
	d := &dapSession{t: t, c: dapclient.New(out, in), end: func() {}}
	done := t.TempDir()
	const np = 4
	args := map[string]any{"program": p.bin, "launcher": launcher, "np": np, "args": []string{"-", done}, "stopMode": mode}
	if env != nil {
		args["env"] = env
	}
	d.launch(args)
	d.setBreakpoints(p.src, p.line(t, "combine"))
	d.call("configurationDone", nil, nil)
	if mode == "rank" {
		waitBreakpointStops(t, d, np)
	} else if b := d.stopped(); b.Reason != "breakpoint" {
		t.Fatalf("stop %+v, want a breakpoint", b)
	}
	rs := d.ranks().Ranks
	parent := 0 // the ranks' parent: mpirun, or a hydra proxy
	for _, r := range rs {
		if r.State != "stopped" {
			t.Fatalf("rank %d is %s, want every rank stopped", r.Rank, r.State)
		}
		if tr := procStatus(r.Pid, "TracerPid"); tr == "0" {
			t.Fatalf("rank %d (pid %d) is not traced while stopped", r.Rank, r.Pid)
		}
		parent, _ = strconv.Atoi(procStatus(r.Pid, "PPid"))
	}
	t.Cleanup(func() {
		if !t.Failed() {
			return // everything has ended (and the pids may be reused)
		}
		for _, r := range rs {
			syscall.Kill(r.Pid, syscall.SIGKILL)
		}
		syscall.Kill(parent, syscall.SIGKILL)
	})
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-exited
	// Every rank leaves the debugger's hands and finishes: watch that none is seen stopped
	// or traced once the agents had a moment to notice.
	deadline := time.Now().Add(90 * time.Second)
	var problems []string
	for time.Now().Before(deadline) {
		problems = problems[:0]
		finished := 0
		for _, r := range rs {
			if _, err := os.Stat(filepath.Join(done, "rank."+strconv.Itoa(r.Rank))); err == nil {
				finished++
			}
			st := procStatus(r.Pid, "State")
			if st == "" || strings.HasPrefix(st, "Z") {
				continue
			}
			if tr := procStatus(r.Pid, "TracerPid"); tr != "0" && tr != "" {
				problems = append(problems, fmt.Sprintf("rank %d (pid %d) traced by %s", r.Rank, r.Pid, tr))
			}
			if strings.HasPrefix(st, "t") || strings.HasPrefix(st, "T") {
				problems = append(problems, fmt.Sprintf("rank %d (pid %d) in state %s", r.Rank, r.Pid, st))
			}
		}
		if finished == np && len(problems) == 0 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if len(problems) > 0 {
		t.Fatalf("after the front end died: %s", strings.Join(problems, "; "))
	}
	for _, r := range rs {
		if _, err := os.Stat(filepath.Join(done, "rank."+strconv.Itoa(r.Rank))); err != nil {
			t.Errorf("rank %d did not finish: %v", r.Rank, err)
		}
	}
	// The ranks' parent ends with its job.
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
		if st := procStatus(parent, "State"); st == "" || strings.HasPrefix(st, "Z") {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Errorf("%s's process %d, the ranks' parent, still runs: state %s", launcher, parent, procStatus(parent, "State"))
}

// A disconnect that terminates a job whose ranks are stopped at a breakpoint ends the ranks
// and the launcher before it is answered: nothing of the job is left, under mpirun and under
// hydra.
func TestTerminateStoppedJob(t *testing.T) {
	for _, c := range []struct{ launcher, mpicc string }{{"mpirun.openmpi", "mpicc.openmpi"}, {"mpiexec.hydra", "mpicc.mpich"}} {
		t.Run(c.launcher, func(t *testing.T) {
			needTool(t, c.launcher)
			p := compileMPI(t, c.mpicc)
			d, pids := stoppedJobToTerminate(t, p, c.launcher)
			d.call("disconnect", map[string]any{"terminateDebuggee": true}, nil)
			d.end()
			for _, pid := range pids {
				if st := procStatus(pid, "State"); st != "" && !strings.HasPrefix(st, "Z") {
					t.Errorf("pid %d (%s) is still there after the disconnect: %s", pid, procStatus(pid, "Name"), st)
				}
			}
		})
	}
}

// stoppedJobToTerminate launches two ranks of p through launcher to a breakpoint in combine
// and returns the session and the pids of the ranks and of their parent (the launcher, or
// hydra's proxy).
func stoppedJobToTerminate(t testing.TB, p *program, launcher string) (*dapSession, []int) {
	d := newDAP(t, viaPipe)
	args := map[string]any{"program": p.bin, "launcher": launcher, "np": 2, "args": []string{"-", t.TempDir()},
		"stopMode": "rank"}
	if launcher == "mpirun.openmpi" {
		// Open MPI's defaults: with orte_abort_on_non_zero_status=0 (ompiEnv, for the other
		// tests' non-zero exit codes) mpirun does not end by itself once its ranks are killed.
		args["env"] = map[string]any{"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
			"OMPI_MCA_rmaps_base_oversubscribe": "1"}
	}
	d.launch(args)
	d.setBreakpoints(p.src, p.line(t, "combine"))
	d.call("configurationDone", nil, nil)
	waitBreakpointStops(t, d, 2)
	var pids []int
	for _, r := range d.ranks().Ranks {
		pids = append(pids, r.Pid)
	}
	if ppid, err := strconv.Atoi(procStatus(pids[0], "PPid")); err == nil {
		pids = append(pids, ppid)
	}
	return d, pids
}
