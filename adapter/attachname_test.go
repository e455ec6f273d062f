package adapter

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-dap"
	"github.com/hpcdap/hpcdap/adapter/dapclient"
)

// uniqueSpin copies the spin program under a name no other process of the run has, so that
// an attach by name finds only the test's processes.
func uniqueSpin(t *testing.T) (*program, string) {
	t.Helper()
	p := compileC(t, "spin")
	name := fmt.Sprintf("spin-%s-%d", strings.ToLower(strings.NewReplacer("/", "-").Replace(t.Name())), os.Getpid())
	// A hard link: a copy written here could be held open by a concurrent test's fork at
	// the moment it runs (ETXTBSY).
	bin := filepath.Join(p.dir, name)
	if err := os.Link(p.bin, bin); err != nil {
		t.Fatal(err)
	}
	p.bin = bin
	return p, name
}

// consoleLine waits for a console output event containing text.
func consoleLine(d *dapSession, text string) {
	d.t.Helper()
	_, err := d.c.WaitEvent("output", 60*time.Second, func(m *dapclient.Message) bool {
		var o dap.OutputEventBody
		return m.Decode(&o) == nil && strings.Contains(o.Output, text)
	})
	if err != nil {
		d.t.Fatal(err)
	}
}

// TestAttachByProcessName: "processName" attaches the one process that runs the program (by
// base name or path); none, or several, is a clear error naming them.
func TestAttachByProcessName(t *testing.T) {
	t.Parallel()
	p, name := uniqueSpin(t)
	d := newDAP(t, viaPipe)
	defer d.close()
	d.initialize()
	if msg := d.callErr("attach", map[string]any{"processName": name}); !strings.Contains(msg, "no process of this host runs") {
		t.Errorf("attach with no process running: %q", msg)
	}
	a, _ := startSpin(t, p)
	b, _ := startSpin(t, p)
	msg := d.callErr("attach", map[string]any{"processName": name})
	for _, pid := range []int{a.Process.Pid, b.Process.Pid} {
		if !strings.Contains(msg, fmt.Sprintf("pid %d", pid)) {
			t.Errorf("attach with two processes running: %q does not name pid %d", msg, pid)
		}
	}
	b.Process.Kill()
	b.Wait()
	if msg := d.callErr("attach", map[string]any{"processName": name, "timeout": 3}); !strings.Contains(msg, "waitFor") {
		t.Errorf("timeout without waitFor: %q", msg)
	}
	d.call("attach", map[string]any{"processName": p.bin}, nil) // by path
	d.event("initialized")
	if r := d.ranks(); len(r.Ranks) != 1 || r.Ranks[0].Pid != a.Process.Pid {
		t.Fatalf("ranks %+v, want pid %d", r.Ranks, a.Process.Pid)
	}
	d.setBreakpoints(p.src, p.line(t, "tick"))
	d.call("configurationDone", nil, nil)
	if st := d.stopped(); st.Reason != "breakpoint" {
		t.Fatalf("stopped %+v", st)
	}
	// An attached job is not restarted: the session did not start it.
	if msg := d.callErr("restart", nil); !strings.Contains(msg, "attach anew") {
		t.Errorf("restart of an attached job: %q", msg)
	}
	if r := d.ranks(); len(r.Ranks) != 1 || r.Ranks[0].Pid != a.Process.Pid || r.Ranks[0].State != "stopped" {
		t.Errorf("after the refused restart: ranks %+v", r.Ranks)
	}
}

// TestAttachWaitFor: with "waitFor" the attach waits for a process of that name to start
// (one running before the request does not count) and attaches it; a timeout ends the wait
// with an error, and a cancel request ends it as cancelled, leaving the session free to attach.
func TestAttachWaitFor(t *testing.T) {
	t.Parallel()
	p, name := uniqueSpin(t)
	old, _ := startSpin(t, p)
	d := newDAP(t, viaPipe)
	defer d.close()
	d.initialize()
	if msg := d.callErr("attach", map[string]any{"processName": name, "waitFor": true, "timeout": 0.2}); !strings.Contains(msg, "none started within 200ms") {
		t.Errorf("attach that timed out: %q", msg)
	}
	consoleLine(d, "Waiting up to 200ms") // the first wait's line

	// A cancel ends the wait.
	seq, ch, err := d.c.Send("attach", map[string]any{"processName": name, "waitFor": true})
	if err != nil {
		t.Fatal(err)
	}
	consoleLine(d, "Waiting up to 30s")
	// A request queued behind the wait, cancelled, is answered without being handled.
	queued, qch, err := d.c.Send("threads", nil)
	if err != nil {
		t.Fatal(err)
	}
	d.call("cancel", map[string]any{"requestId": queued}, nil)
	d.call("cancel", map[string]any{"requestId": seq}, nil)
	if m := <-ch; m.Success || m.Message != "cancelled" {
		t.Fatalf("cancelled attach answered %+v", m)
	}
	if m := <-qch; m.Success || m.Message != "cancelled" {
		t.Fatalf("cancelled queued threads request answered %+v", m)
	}

	_, ch, err = d.c.Send("attach", map[string]any{"processName": name, "waitFor": true, "timeout": 60})
	if err != nil {
		t.Fatal(err)
	}
	consoleLine(d, "Waiting up to 1m0s")
	fresh := exec.Command(p.bin)
	if err := fresh.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fresh.Process.Kill(); fresh.Wait() })
	m := <-ch
	if !m.Success {
		t.Fatalf("attach with waitFor: %s", m.Message)
	}
	d.event("initialized")
	if r := d.ranks(); len(r.Ranks) != 1 || r.Ranks[0].Pid != fresh.Process.Pid {
		t.Fatalf("ranks %+v, want the new pid %d (not %d, running before)", r.Ranks, fresh.Process.Pid, old.Process.Pid)
	}
	d.setBreakpoints(p.src, p.line(t, "tick"))
	d.call("configurationDone", nil, nil)
	st := d.stopped()
	frames := d.stackTrace(st.ThreadId)
	if frames[0].Line != p.line(t, "tick") {
		t.Errorf("stop %s, want line %d", frameList(frames), p.line(t, "tick"))
	}
	// How far the program ran (a tick each 20 ms) before the attach held it: a measure, not
	// asserted.
	ticks, _ := evaluateOrError(d, "ticks", frames[0].Id)
	t.Logf("the process had ticked %s times when the attach held it", ticks)
	if errs := d.c.UnsolicitedErrors(); len(errs) != 0 {
		t.Errorf("unsolicited errors: %v", errs)
	}
}
