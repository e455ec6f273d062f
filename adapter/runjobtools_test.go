package adapter

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-dap"
	"github.com/hpcdap/hpcdap/cdti"
	"github.com/hpcdap/hpcdap/internal/testenv"
)

// runningRunjob is a runjob of the emulated BG/Q started outside the debugger, whose ranks
// spin (testdata/bgq.c) until something sets release.
type runningRunjob struct {
	pid    int
	root   string
	out    string // runjob's output and its ranks'
	exited chan error
}

// startRunjob starts runjob for np ranks of p, 2 per compute node, cnPerION compute nodes per
// I/O node, and waits until every rank spins. The test's end kills it.
func startRunjob(t *testing.T, p *program, root string, np, cnPerION int) *runningRunjob {
	t.Helper()
	ready := t.TempDir()
	out, err := os.Create(filepath.Join(t.TempDir(), "runjob.out"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	cmd := exec.Command(hpcdapBinary(t), "bgq", "runjob", "--np", strconv.Itoa(np), "--ranks-per-node", "2",
		"--cn-per-ion", strconv.Itoa(cnPerION), "--root", root, "--exe", p.bin, "--envs", "READY_DIR="+ready)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	rj := &runningRunjob{pid: cmd.Process.Pid, root: root, out: out.Name(), exited: make(chan error, 1)}
	go func() { rj.exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		err := <-rj.exited
		rj.exited <- err
		if t.Failed() {
			t.Logf("runjob's output:\n%s", rj.output())
		}
	})
	for r := range np {
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
			if _, err := os.Stat(filepath.Join(ready, fmt.Sprintf("spin-%d", r))); err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("rank %d did not reach its loop:\n%s", r, rj.output())
			}
		}
	}
	return rj
}

func (rj *runningRunjob) output() string {
	b, _ := os.ReadFile(rj.out)
	return string(b)
}

// waitEnd waits for runjob to end by itself, and checks that it ended well and that every
// rank printed its result: the ranks ran on to their end.
func (rj *runningRunjob) waitEnd(t *testing.T, np int) {
	t.Helper()
	select {
	case err := <-rj.exited:
		rj.exited <- err
		if err != nil {
			t.Errorf("runjob: %v", err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatalf("the job did not end")
	}
	for r := range np {
		if want := fmt.Sprintf("rank %d: ", r); !strings.Contains(rj.output(), want) {
			t.Errorf("rank %d printed nothing:\n%s", r, rj.output())
		}
	}
}

// startedTool matches what start_tool prints.
var startedTool = regexp.MustCompile(`^tool (\d+) started for job (\d+)\n$`)

// placeholderTool has jobctld start a tool on the job's I/O nodes that does nothing but
// touch its status file, and returns the tool id and job id jobctld gave it: the test speaks
// CDTI for that tool over the toolctld sockets.
func placeholderTool(t *testing.T, rj *runningRunjob) (tool uint32, job uint64) {
	t.Helper()
	script := filepath.Join(t.TempDir(), "beat.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\ntrap 'exit 0' TERM\nwhile :; do touch \"$HPCDAP_BGQ_JOBS/$BG_JOBID/tools_status/$BG_TOOLID\"; sleep 0.2; done\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(hpcdapBinary(t), "bgq", "start_tool", "--pid", strconv.Itoa(rj.pid), "--tool", script).CombinedOutput()
	m := startedTool.FindStringSubmatch(string(out))
	if err != nil || m == nil {
		t.Fatalf("start_tool: %v %q", err, out)
	}
	id, _ := strconv.ParseUint(m[1], 10, 32)
	j, _ := strconv.ParseUint(m[2], 10, 64)
	return uint32(id), j
}

// monitor is a tool of low priority, as the Redbook's multi-tool example has one (§4.5.4;
// cdti-v6.md §9.2, §10.1 point 7): it holds control of one compute node's ranks, gives it up
// to a tool of higher priority that asks (ReleaseControl with notify Active, so that it hears
// when control is free again), and asks for it again when it hears that it is.
type monitor struct {
	t     *testing.T
	c     *cdti.Client
	id    uint32
	prio  uint8
	ranks []uint32

	mu       sync.Mutex
	log      []string       // "rank 0: Conflict tool 2 priority 90", ... in the order heard
	regained map[uint32]int // times control came back, by rank
	failures []string       // its own requests that failed, for the log of a failed test
	keep     bool           // it gives control up to nobody
	signals  chan *cdti.Notify
}

// monitorNotify is the monitor's notify set.
var monitorNotify = cdti.Control{NotifySet: cdti.Signals(int(syscall.SIGTRAP), int(syscall.SIGSTOP))}

// startMonitor connects tool id to compute node 0 of job on I/O node 0 under root, attaches
// ranks at priority prio and, with control, takes control of each.
func startMonitor(t *testing.T, root string, job uint64, id uint32, prio uint8, ranks []uint32, control bool) *monitor {
	t.Helper()
	return startMonitorOn(t, root, 0, 0, job, id, prio, ranks, control)
}

// startMonitorOn is startMonitor on compute node node of I/O node ion.
func startMonitorOn(t *testing.T, root string, ion, node int, job uint64, id uint32, prio uint8, ranks []uint32, control bool) *monitor {
	t.Helper()
	path := filepath.Join(root, fmt.Sprintf("ion%d", ion), "jobs", strconv.FormatUint(job, 10), "toolctl_node", strconv.Itoa(node))
	nc, err := net.Dial("unix", path) // toolctld speaks no Hello: cdti.Dial's
	if err != nil {
		t.Fatal(err)
	}
	c := cdti.NewClient(nc, cdti.ClientOptions{ToolID: id, JobID: job, Serialize: true, Timeout: time.Minute})
	t.Cleanup(func() { c.Close() })
	m := &monitor{t: t, c: c, id: id, prio: prio, ranks: ranks, regained: map[uint32]int{}, signals: make(chan *cdti.Notify, 16)}
	ctx := context.Background()
	if ack, err := c.Attach(ctx, ranks[0], cdti.RanksInNode, cdti.NewTag("monitor"), prio); err != nil || ack.ReturnCode != cdti.Success {
		t.Fatalf("monitor %d: attach: %v %+v", id, err, ack)
	}
	if control {
		for _, r := range ranks {
			if ack, err := c.Control(ctx, r, monitorNotify); err != nil || ack.ControllingToolID != uint16(id) {
				t.Fatalf("monitor %d: control of rank %d: %v %+v", id, r, err, ack)
			}
		}
	}
	go m.serve()
	t.Cleanup(func() {
		if t.Failed() {
			m.mu.Lock()
			t.Logf("monitor %d: heard %q; failed %q", id, m.log, m.failures)
			m.mu.Unlock()
		}
	})
	return m
}

// serve answers the notifications: Conflict and Available as above, signals and exits to
// m.signals.
func (m *monitor) serve() {
	for n := range m.c.Notifications() {
		if n.Kind != cdti.NotifyTypeControl {
			m.signals <- n
			continue
		}
		m.mu.Lock()
		m.log = append(m.log, fmt.Sprintf("rank %d: %s tool %d priority %d", n.Rank,
			strings.TrimPrefix(n.Control.Reason.String(), "NotifyControl_"), n.Control.ToolID, n.Control.Priority))
		m.mu.Unlock()
		go func() { // not on the goroutine that delivers acks' neighbours
			ctx := context.Background()
			switch n.Control.Reason {
			case cdti.ControlConflict:
				m.mu.Lock()
				keep := m.keep
				m.mu.Unlock()
				if n.Control.Priority > m.prio && !keep {
					rs, err := m.c.Update(ctx, n.Rank, &cdti.ReleaseControl{Notify: cdti.ReleaseActive})
					if err != nil || rs[0].Code != cdti.CmdSuccess {
						m.failed(fmt.Sprintf("rank %d: release control: %v %v", n.Rank, err, rs))
					}
				}
			case cdti.ControlAvailable:
				ack, err := m.c.Control(ctx, n.Rank, monitorNotify)
				if err != nil || ack.ControllingToolID != uint16(m.id) {
					m.failed(fmt.Sprintf("rank %d: control: %v %+v", n.Rank, err, ack))
					return
				}
				m.mu.Lock()
				m.regained[n.Rank]++
				m.mu.Unlock()
			}
		}()
	}
}

func (m *monitor) failed(what string) {
	m.mu.Lock()
	m.failures = append(m.failures, what)
	m.mu.Unlock()
}

// heard returns what the monitor heard of other tools.
func (m *monitor) heard() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.log...)
}

// waitRegained waits until the monitor holds control of every rank again.
func (m *monitor) waitRegained() {
	m.t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		m.mu.Lock()
		n := 0
		for _, r := range m.ranks {
			if m.regained[r] > 0 {
				n++
			}
		}
		m.mu.Unlock()
		if n == len(m.ranks) {
			return
		}
		if time.Now().After(deadline) {
			m.t.Fatalf("the monitor did not regain control of every rank; it heard %q", m.heard())
		}
	}
}

// releaseAll lets every rank out of its loop, as the tool in control: each is stopped with
// SIGSTOP, release is set, and it continues.
func (m *monitor) releaseAll(release uint64) {
	m.t.Helper()
	ctx := context.Background()
	for _, r := range m.ranks {
		if rs, err := m.c.Update(ctx, r, &cdti.SendSignalToProcess{Signal: uint32(syscall.SIGSTOP)}); err != nil || rs[0].Code != cdti.CmdSuccess {
			m.t.Fatalf("monitor: stop rank %d: %v %v", r, err, rs)
		}
		for stopped := false; !stopped; {
			var n *cdti.Notify
			select {
			case n = <-m.signals:
			case <-time.After(time.Minute):
				m.t.Fatalf("monitor: rank %d did not stop", r)
			}
			switch {
			case n.Kind == cdti.NotifyTypeSignal && n.Rank == r && n.Signal.Signal == uint32(syscall.SIGSTOP):
				stopped = true
			case n.Kind == cdti.NotifyTypeTermination && n.Rank != r:
				// the end of a rank released before
			default:
				m.t.Fatalf("monitor: rank %d: %+v, want its SIGSTOP", r, n)
			}
		}
		rs, err := m.c.Update(ctx, r, &cdti.SetMemory{Addr: release, Data: []byte{0, 0, 0, 1}},
			&cdti.SetContinuationSignal{}, &cdti.ContinueProcess{})
		if err != nil {
			m.t.Fatalf("monitor: release rank %d: %v", r, err)
		}
		for i, x := range rs {
			if x.Code != cdti.CmdSuccess {
				m.t.Fatalf("monitor: release rank %d: command %d: %v", r, i, x.Code)
			}
		}
	}
}

// consoleText is every output event's text so far.
func consoleText(d *dapSession) string {
	var b strings.Builder
	for _, m := range d.c.Events("output") {
		var o dap.OutputEventBody
		if m.Decode(&o) == nil {
			b.WriteString(o.Output)
		}
	}
	return b.String()
}

// waitConsole waits until d's output events hold text n times (a hang guard of a minute, not
// a timing).
func waitConsole(t *testing.T, d *dapSession, text string, n int) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); strings.Count(consoleText(d), text) < n; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the console does not say %q %d times:\n%s", text, n, consoleText(d))
		}
	}
}

// attachRunjob attaches a session to runjob pid with toolPriority prio and waits for the
// releaseAndLeave pauses the ranks of session d (thread: one of their threads), lets each out
// of its spin (release = 1), leaves the job running, and waits for its np ranks to end.
func releaseAndLeave(t *testing.T, d *dapSession, thread int, rj *runningRunjob, np int) {
	t.Helper()
	d.call("pause", map[string]any{"threadId": thread}, nil)
	d.stopped()
	for _, r := range d.ranks().Ranks {
		f := d.stackTrace(r.ThreadID)
		var ev dap.EvaluateResponseBody
		d.call("evaluate", map[string]any{"expression": "release = 1", "frameId": f[0].Id, "context": "repl"}, &ev)
	}
	d.c.Request("disconnect", map[string]any{"terminateDebuggee": false})
	d.end()
	rj.waitEnd(t, np)
}

// ranks' entry stop.
func attachRunjob(t *testing.T, pid, np, prio int) *dapSession {
	t.Helper()
	d := newDAP(t, viaPipe)
	d.initialize()
	d.call("attach", map[string]any{"launcherPid": pid, "stopAtEntry": true, "toolPriority": prio}, nil)
	d.event("initialized")
	d.call("configurationDone", nil, nil)
	if st := d.stopped(); st.Reason != "entry" {
		t.Fatalf("stop %+v, want the entry stop", st)
	}
	if rs := d.ranks().Ranks; len(rs) != np {
		t.Fatalf("ranks %+v, want %d", rs, np)
	}
	return d
}

// TestRunjobMultiToolDAP is the Redbook's multi-tool example (§4.5.4) with hpcdap as the
// debugger: a monitor, a tool jobctld started (start_tool) at priority 10, controls both
// ranks of a running job; a DAP attach to its runjob at "toolPriority": 90 becomes the job's
// second tool, is refused control, and the monitor hears Notify(Control, Conflict) naming it
// (tool 2, priority 90) and gives way; the session hears Notify(Control, Available), takes
// control, and stops the ranks where they spin. When the session detaches, the monitor hears
// Available naming it, takes control back, and the job runs on under the monitor to its end.
func TestRunjobMultiToolDAP(t *testing.T) {
	const np = 2
	p, _, root := runjobProgram(t)
	rj := startRunjob(t, p, root, np, 1)
	monID, job := placeholderTool(t, rj)
	mon := startMonitor(t, root, job, monID, 10, []uint32{0, 1}, true)

	d := attachRunjob(t, rj.pid, np, 90)
	want := []string{fmt.Sprintf("rank 0: Conflict tool %d priority 90", monID+1), fmt.Sprintf("rank 1: Conflict tool %d priority 90", monID+1)}
	if got := mon.heard(); !sameSet(got, want) {
		t.Errorf("the monitor heard %q, want %q", got, want)
	}
	if c := consoleText(d); !strings.Contains(c, fmt.Sprintf(`tool %d ("monitor", priority 10) holds control authority; waiting for it to give way`, monID)) {
		t.Errorf("the console does not say whom the session waited for:\n%s", c)
	}
	spin := p.line(t, "spin")
	for _, r := range d.ranks().Ranks {
		if f := d.stackTrace(r.ThreadID); len(f) == 0 || f[0].Name != "main" || f[0].Line < spin || f[0].Line > spin+1 {
			t.Errorf("rank %d: %v, want main at line %d", r.Rank, frameNames(f), spin)
		}
	}
	d.c.Request("disconnect", map[string]any{"terminateDebuggee": false})
	d.end()
	mon.waitRegained()
	want = append(want, fmt.Sprintf("rank 0: Available tool %d priority 90", monID+1), fmt.Sprintf("rank 1: Available tool %d priority 90", monID+1))
	if got := mon.heard(); !sameSet(got, want) {
		t.Errorf("the monitor heard %q, want %q", got, want)
	}
	mon.releaseAll(testenv.ELFSymbol(t, p.bin, "release").Value)
	rj.waitEnd(t, np)
}

// sameSet reports whether a and b hold the same strings, in any order.
func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	n := map[string]int{}
	for _, s := range a {
		n[s]++
	}
	for _, s := range b {
		if n[s]--; n[s] < 0 {
			return false
		}
	}
	return true
}

// TestRunjobTwoSessions: two DAP sessions attach to one running runjob, the second as a
// further tool of the job (runjob's MPIR interface is the first's: start_tool starts its
// agent), in both orders of priority.
//
// Low first: the session at 10 holds the ranks; the one at 90 takes control authority (the
// first gives way and says so, and its pause is refused naming the holder instead of
// waiting); when the second detaches, control comes back to the first, which stops and
// releases the ranks, and the job runs to its end.
//
// High first: the session at 10 is refused, its attach failing with the holder named, and
// the ranks stay the first's, which pauses them, releases them and lets the job end.
func TestRunjobTwoSessions(t *testing.T) {
	const np = 2
	p, _, root := runjobProgram(t)
	for _, tc := range []struct {
		name         string
		first, again int
	}{{"low first", 10, 90}, {"high first", 90, 10}} {
		t.Run(tc.name, func(t *testing.T) {
			root, err := os.MkdirTemp(root, "job") // short: the sockets' paths are bounded
			if err != nil {
				t.Fatal(err)
			}
			rj := startRunjob(t, p, root, np, 1)
			a := attachRunjob(t, rj.pid, np, tc.first)
			defer a.close()
			var thread int
			for _, r := range a.ranks().Ranks {
				thread = r.ThreadID
			}
			a.call("continue", map[string]any{"threadId": thread}, nil)
			if tc.first > tc.again {
				b := newDAP(t, viaPipe)
				b.initialize()
				msg := b.callErr("attach", map[string]any{"launcherPid": rj.pid, "toolPriority": tc.again})
				if !strings.Contains(msg, `control authority is held by tool 1 ("hpcdap", priority 90), which this session's priority 10 does not outrank`) {
					t.Errorf("the lower-priority attach failed with %q", msg)
				}
				b.close()
				// The first session hears of the request on its own connection, in its time.
				waitConsole(t, a, `tool 2 ("hpcdap", priority 10) asked for control authority; this session (priority 90) keeps it`, 1)
			} else {
				b := attachRunjob(t, rj.pid, np, tc.again)
				waitConsole(t, a, `tool 2 ("hpcdap", priority 90) took control authority`, np)
				if msg := a.callErr("pause", map[string]any{"threadId": thread}); !strings.Contains(msg, `control authority is with tool 2 ("hpcdap", priority 90)`) {
					t.Errorf("the first session's pause while the second controls: %q", msg)
				}
				b.c.Request("disconnect", map[string]any{"terminateDebuggee": false})
				b.end()
				waitConsole(t, a, "released control authority: it is this session's again", np)
			}
			releaseAndLeave(t, a, thread, rj, np)
		})
	}
}

// TestRunjobFifthTool: a compute node takes four tools (cdti-v6.md §2.9). With four tools of
// jobctld's attached to a running job's compute node, a DAP attach to its runjob becomes the
// fifth: toolctld refuses its agent's connection with ErrorAck(ToolMaxAttachedExceeded), and
// the attach fails saying so; the job runs on, and the first tool lets it end.
func TestRunjobFifthTool(t *testing.T) {
	const np = 2
	p, _, root := runjobProgram(t)
	rj := startRunjob(t, p, root, np, 1)
	var first *monitor
	for i, prio := range []uint8{10, 20, 30, 40} {
		id, job := placeholderTool(t, rj)
		m := startMonitor(t, root, job, id, prio, []uint32{0, 1}, i == 0)
		if i == 0 {
			first = m
		}
	}
	d := newDAP(t, viaPipe)
	defer d.close()
	d.initialize()
	msg := d.callErr("attach", map[string]any{"launcherPid": rj.pid, "toolPriority": 90})
	if !strings.Contains(msg, "ToolMaxAttachedExceeded (32)") || !strings.Contains(msg, "already have 4 tools attached") {
		t.Errorf("the fifth tool's attach failed with %q", msg)
	}
	first.releaseAll(testenv.ELFSymbol(t, p.bin, "release").Value)
	rj.waitEnd(t, np)
}

// TestToolPriorityArgument: toolPriority is a CDTI priority, 1 to 99; anything else is
// refused by name before anything starts, and a join takes none.
func TestToolPriorityArgument(t *testing.T) {
	d := newDAP(t, viaPipe)
	defer d.close()
	d.initialize()
	for _, tc := range []struct {
		req  string
		args map[string]any
		want string
	}{
		{"launch", map[string]any{"program": "/bin/true", "toolPriority": 0}, `"toolPriority" must be between 1 and 99, not 0`},
		{"launch", map[string]any{"program": "/bin/true", "toolPriority": 100}, `"toolPriority" must be between 1 and 99, not 100`},
		{"launch", map[string]any{"program": "/bin/true", "toolPriority": "high"}, `toolPriority`},
		{"attach", map[string]any{"pid": os.Getpid(), "toolPriority": -1}, `"toolPriority" must be between 1 and 99, not -1`},
		{"attach", map[string]any{"joinSession": "s1", "toolPriority": 50}, `give none of`},
	} {
		if msg := d.callErr(tc.req, tc.args); !strings.Contains(msg, tc.want) {
			t.Errorf("%s %v: %q, want %q", tc.req, tc.args, msg, tc.want)
		}
	}
}

// TestRunjobRefusedAttachLeavesJob: a DAP attach at priority 90 to a job of two compute nodes,
// one of whose ranks a monitor at priority 95 controls, takes the other node's ranks and is
// refused the monitor's: the attach fails naming the monitor, and gives back the ranks it took
// instead of killing them (the job is not the session's): another tool then attaches them and
// takes control of each, and the monitor's ranks run to their end.
func TestRunjobRefusedAttachLeavesJob(t *testing.T) {
	const np = 4
	p, _, root := runjobProgram(t)
	rj := startRunjob(t, p, root, np, 1) // ranks 0-1 on ion0 (node 0), 2-3 on ion1 (node 1)
	id, job := placeholderTool(t, rj)
	high := startMonitorOn(t, root, 0, 0, job, id, 95, []uint32{0, 1}, true)
	d := newDAP(t, viaPipe)
	d.initialize()
	msg := d.callErr("attach", map[string]any{"launcherPid": rj.pid, "toolPriority": 90})
	if !strings.Contains(msg, fmt.Sprintf(`control authority is held by tool %d ("monitor", priority 95), which this session's priority 90 does not outrank`, id)) {
		t.Errorf("the attach failed with %q", msg)
	}
	d.close()
	// A killed rank would refuse the attach (ToolRankNotFound).
	startMonitorOn(t, root, 1, 1, job, id, 95, []uint32{2, 3}, true)
	high.releaseAll(testenv.ELFSymbol(t, p.bin, "release").Value)
	for deadline := time.Now().Add(time.Minute); !strings.Contains(rj.output(), "rank 0: ") || !strings.Contains(rj.output(), "rank 1: "); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("ranks 0 and 1 did not run to their end")
		}
	}
}

// TestRunjobYieldWhileStopped: a session of priority 10 holds the ranks stopped at their entry
// stop when a session of priority 90 attaches. The first gives way: its ranks run under the
// other tool (no stop of the first session's is left behind), and a step is refused naming
// the tool in control, as a continue is; once the second detaches, control comes back to the
// first, which stops and releases the ranks, and the job runs to its end.
func TestRunjobYieldWhileStopped(t *testing.T) {
	const np = 2
	p, _, root := runjobProgram(t)
	root, err := os.MkdirTemp(root, "job") // short: the sockets' paths are bounded
	if err != nil {
		t.Fatal(err)
	}
	rj := startRunjob(t, p, root, np, 1)
	a := attachRunjob(t, rj.pid, np, 10)
	defer a.close()
	b := attachRunjob(t, rj.pid, np, 90)
	waitConsole(t, a, `tool 2 ("hpcdap", priority 90) took control authority`, np)
	var thread int
	for _, r := range a.ranks().Ranks {
		if r.State == "stopped" {
			t.Errorf("rank %d is stopped for the session that gave its control up", r.Rank)
		}
		thread = r.ThreadID
	}
	const holder = `control authority is with tool 2 ("hpcdap", priority 90)`
	if msg := a.callErr("next", map[string]any{"threadId": thread}); !strings.Contains(msg, holder) {
		t.Errorf("next while the other session controls: %q", msg)
	}
	if msg := a.callErr("continue", map[string]any{"threadId": thread}); !strings.Contains(msg, holder) {
		t.Errorf("continue while the other session controls: %q", msg)
	}
	b.c.Request("disconnect", map[string]any{"terminateDebuggee": false})
	b.end()
	waitConsole(t, a, "released control authority: it is this session's again", np)
	releaseAndLeave(t, a, thread, rj, np)
}

// TestRunjobCancelControlWait: a DAP attach at priority 90 to a job whose ranks a monitor of
// priority 10 controls, and does not give up, waits for the monitor; a cancel of the attach
// ends the wait at once, and the job runs on under the monitor, which lets it end.
func TestRunjobCancelControlWait(t *testing.T) {
	const np = 2
	p, _, root := runjobProgram(t)
	rj := startRunjob(t, p, root, np, 1)
	monID, job := placeholderTool(t, rj)
	mon := startMonitor(t, root, job, monID, 10, []uint32{0, 1}, true)
	mon.mu.Lock()
	mon.keep = true
	mon.mu.Unlock()

	d := newDAP(t, viaPipe)
	defer d.close()
	d.initialize()
	seq, ch, err := d.c.Send("attach", map[string]any{"launcherPid": rj.pid, "toolPriority": 90})
	if err != nil {
		t.Fatal(err)
	}
	waitConsole(t, d, fmt.Sprintf(`tool %d ("monitor", priority 10) holds control authority; waiting for it to give way`, monID), 1)
	d.call("cancel", map[string]any{"requestId": seq}, nil)
	if m := <-ch; m.Success || !strings.Contains(m.Message, "cancel") {
		t.Fatalf("cancelled attach answered %+v", m)
	}
	d.c.Request("disconnect", map[string]any{"terminateDebuggee": false})
	d.end()
	mon.releaseAll(testenv.ELFSymbol(t, p.bin, "release").Value)
	rj.waitEnd(t, np)
}
