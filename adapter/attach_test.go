package adapter

import (
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-dap"
	"github.com/hpcdap/hpcdap/internal/testenv"
)

// startSpin runs spin as a plain process whose ticks the test counts.
func startSpin(t *testing.T, p *program) (*exec.Cmd, *lineCollector) {
	t.Helper()
	cmd := exec.Command(p.bin)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	lc := collectLines(out)
	waitFor(t, "spin to tick", func() bool { return lc.count() > 2 })
	return cmd, lc
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// procStatus returns a field of /proc/PID/status ("" if the process is gone).
func procStatus(pid int, field string) string {
	v, _ := testenv.ProcStatus(pid, field)
	return v
}

// TestAttachDetach attaches to two running processes as ranks, stops them at a breakpoint,
// and detaches: the processes go on running, untraced.
func TestAttachDetach(t *testing.T) {
	t.Parallel()
	p := compileC(t, "spin")
	a, la := startSpin(t, p)
	b, lb := startSpin(t, p)
	d := newDAP(t, viaPipe)
	defer d.end()
	d.initialize()
	d.call("attach", map[string]any{"pids": map[string]int{"0": a.Process.Pid, "1": b.Process.Pid}}, nil)
	d.event("initialized")
	ranks := d.ranks()
	if len(ranks.Ranks) != 2 || ranks.Ranks[0].Pid != a.Process.Pid || ranks.Ranks[1].Pid != b.Process.Pid {
		t.Fatalf("ranks %+v", ranks)
	}
	d.setBreakpoints(p.src, p.line(t, "tick"))
	d.call("configurationDone", nil, nil)
	st := d.stopped()
	if st.Reason != "breakpoint" {
		t.Fatalf("stopped %+v", st)
	}
	frames := d.stackTrace(st.ThreadId)
	if frames[0].Name != "tick" || frames[0].Line != p.line(t, "tick") || frames[len(frames)-1].Name != "main" {
		t.Errorf("stack %s", frameList(frames))
	}
	var ev dap.EvaluateResponseBody
	d.call("evaluate", map[string]any{"expression": "ticks", "frameId": frames[0].Id, "context": "watch"}, &ev)
	if n, err := strconv.Atoi(ev.Result); err != nil || n < 2 {
		t.Errorf("ticks = %q", ev.Result)
	}
	for _, pid := range []int{a.Process.Pid, b.Process.Pid} {
		if procStatus(pid, "TracerPid") == "0" {
			t.Errorf("pid %d is not traced while attached", pid)
		}
	}
	// Detach: breakpoints removed, control released, the processes run on untraced.
	d.call("disconnect", map[string]any{"terminateDebuggee": false}, nil)
	na, nb := la.count(), lb.count()
	waitFor(t, "both processes to tick after the detach", func() bool { return la.count() > na+5 && lb.count() > nb+5 })
	for _, pid := range []int{a.Process.Pid, b.Process.Pid} {
		if tp := procStatus(pid, "TracerPid"); tp != "0" {
			t.Errorf("pid %d still traced by %s after the detach", pid, tp)
		}
		if st := procStatus(pid, "State"); strings.HasPrefix(st, "t") || strings.HasPrefix(st, "T") {
			t.Errorf("pid %d is %s after the detach", pid, st)
		}
	}
}

// TestAttachByPid: attach one process, pause it, then end the session with terminateDebuggee.
func TestAttachPauseTerminate(t *testing.T) {
	t.Parallel()
	p := compileC(t, "spin")
	a, _ := startSpin(t, p)
	d := newDAP(t, viaTCP)
	defer d.end()
	d.initialize()
	d.call("attach", map[string]any{"pid": a.Process.Pid}, nil)
	d.event("initialized")
	d.call("configurationDone", nil, nil)
	var threads dap.ThreadsResponseBody
	d.call("threads", nil, &threads)
	d.call("pause", map[string]any{"threadId": threads.Threads[0].Id}, nil)
	st := d.stopped()
	if st.Reason != "pause" || st.ThreadId != threads.Threads[0].Id {
		t.Fatalf("stopped %+v", st)
	}
	frames := d.stackTrace(st.ThreadId)
	if frames[len(frames)-1].Name != "main" {
		t.Errorf("paused stack %s", frameList(frames))
	}
	d.call("disconnect", map[string]any{"terminateDebuggee": true}, nil)
	done := make(chan error, 1)
	go func() { done <- a.Wait() }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Errorf("the attached process survived disconnect with terminateDebuggee")
	}
}

// An attach by a PMIx namespace that no process of this host is in, or given beside another
// target, fails at once saying why, and the session may attach again.
func TestAttachPMIxNamespaceBadInput(t *testing.T) {
	t.Parallel()
	d := newDAP(t, viaPipe)
	defer d.close()
	d.initialize()
	const ns = "hpcdap-test-no-such-namespace@1"
	if msg := d.callErr("attach", map[string]any{"pmixNamespace": ns}); !strings.Contains(msg, "PMIx namespace "+ns+": no process of this host is in it") {
		t.Errorf("attach to an unknown namespace: %q", msg)
	}
	if msg := d.callErr("attach", map[string]any{"pmixNamespace": ns, "launcherPid": 1}); !strings.Contains(msg, `"pmixNamespace"`) ||
		!strings.Contains(msg, "exactly one of") {
		t.Errorf("attach with two targets: %q", msg)
	}
}
