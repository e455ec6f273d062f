package adapter

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-dap"
	"github.com/hpcdap/hpcdap/adapter/dapclient"
)

// TestPauseFocusContinueTerminate: pause stops every rank; continue on a focus of one rank
// resumes only that rank; terminate kills the job.
func TestPauseFocusContinueTerminate(t *testing.T) {
	t.Parallel()
	p := compileC(t, "spin")
	d := newDAP(t, viaPipe)
	defer d.close()
	d.launch(map[string]any{"program": p.bin, "np": 3})
	d.call("configurationDone", nil, nil)
	// Pause once every rank is in its loop (its ticks are printed).
	waitFor(t, "ranks to tick", func() bool { return strings.Count(allOutput(d), "tick ") >= 9 })
	d.call("pause", map[string]any{"threadId": 1}, nil)
	st := d.stopped()
	if st.Reason != "pause" || !st.AllThreadsStopped {
		t.Fatalf("stopped %+v", st)
	}
	ticks := func(rank int) int {
		r := d.ranks().Ranks[rank]
		for _, f := range d.stackTrace(r.ThreadID) {
			if f.Name == "main" {
				var ev dap.EvaluateResponseBody
				d.call("evaluate", map[string]any{"expression": "ticks", "frameId": f.Id, "context": "watch"}, &ev)
				n, _ := strconv.Atoi(ev.Result)
				return n
			}
		}
		t.Fatalf("rank %d has no main frame", rank)
		return 0
	}
	for _, r := range d.ranks().Ranks {
		if r.State != "stopped" {
			t.Errorf("rank %d is %s after pause", r.Rank, r.State)
		}
	}
	t0, t2 := ticks(0), ticks(2)
	var fb FocusBody
	d.call("hpcdap/focus", map[string]any{"ranks": "1"}, &fb)
	var cont dap.ContinueResponseBody
	d.call("continue", map[string]any{"threadId": 2}, &cont)
	if cont.AllThreadsContinued {
		t.Errorf("continue with focus 1 claims every thread continued")
	}
	time.Sleep(200 * time.Millisecond)
	states := d.ranks()
	if states.Ranks[0].State != "stopped" || states.Ranks[1].State != "running" || states.Ranks[2].State != "stopped" {
		t.Errorf("states after continue of rank 1: %+v", states.Ranks)
	}
	if ticks(0) != t0 || ticks(2) != t2 {
		t.Errorf("ranks outside the focus ran")
	}
	for _, m := range d.c.Events("continued") {
		var b dap.ContinuedEventBody
		m.Decode(&b)
		if b.ThreadId != states.Ranks[1].ThreadID {
			t.Errorf("continued event for thread %d, only rank 1 (thread %d) runs", b.ThreadId, states.Ranks[1].ThreadID)
		}
	}
	// Pausing the focus stops rank 1 again; the job is all stopped.
	d.call("pause", map[string]any{"threadId": 2}, nil)
	st = d.stopped()
	if st.ThreadId != 2 || st.Reason != "pause" {
		t.Errorf("stopped %+v", st)
	}
	// Bad focus sets are refused.
	if msg := d.callErr("hpcdap/focus", map[string]any{"ranks": "7"}); !strings.Contains(msg, "7") {
		t.Errorf("focus 7: %q", msg)
	}
	pids := []int{}
	for _, r := range d.ranks().Ranks {
		pids = append(pids, r.Pid)
	}
	d.call("terminate", map[string]any{}, nil)
	d.event("exited")
	d.event("terminated")
	for _, pid := range pids {
		waitForExit(t, pid)
	}
}

// stoppedAtGo launches testdata/threads.c to its main-go line and returns the session (closed
// at the test's end), the program, the stop and the threads request's answer there.
func stoppedAtGo(t *testing.T) (*dapSession, *program, dap.StoppedEventBody, dap.ThreadsResponseBody) {
	t.Helper()
	p := compileC(t, "threads")
	d := newDAP(t, viaPipe)
	t.Cleanup(d.close)
	st := d.runTo(map[string]any{"program": p.bin}, p.src, p.line(t, "main-go"))
	var threads dap.ThreadsResponseBody
	d.call("threads", nil, &threads)
	return d, p, st, threads
}

// TestThreadsAnsweredInRequestOrder: threads requests sent behind others without waiting are
// answered after them, in order, with the dispatcher's answer, although a repeated threads
// request can be answered as soon as it is read when nothing is queued.
func TestThreadsAnsweredInRequestOrder(t *testing.T) {
	t.Parallel()
	d, _, st, want := stoppedAtGo(t)
	type sent struct {
		command string
		ch      <-chan *dapclient.Message
	}
	var order []sent
	send := func(command string, args any) {
		_, ch, err := d.c.Send(command, args)
		if err != nil {
			t.Fatal(err)
		}
		order = append(order, sent{command, ch})
	}
	for range 20 {
		for _, th := range want.Threads {
			send("stackTrace", map[string]any{"threadId": th.Id})
		}
		send("threads", nil)
		send("threads", nil)
	}
	send("continue", map[string]any{"threadId": st.ThreadId})
	send("threads", nil)
	last := 0
	for i, s := range order {
		var m *dapclient.Message
		select {
		case m = <-s.ch:
		case <-time.After(dapclient.DefaultTimeout):
			t.Fatalf("request %d (%s): no answer", i, s.command)
		}
		if !m.Success {
			t.Fatalf("request %d (%s): %s", i, s.command, m.Message)
		}
		if m.Seq <= last {
			t.Fatalf("request %d (%s) answered (seq %d) before the request before it (seq %d)", i, s.command, m.Seq, last)
		}
		last = m.Seq
		if s.command == "threads" {
			var got dap.ThreadsResponseBody
			if err := m.Decode(&got); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("request %d: threads %+v, want %+v", i, got.Threads, want.Threads)
			}
		}
	}
}

// TestThreadsAndSingleThread: threads are named after their start routine; a single-thread
// continue lets only that thread run.
func TestThreadsAndSingleThread(t *testing.T) {
	t.Parallel()
	d, p, st, threads := stoppedAtGo(t)
	pid := d.ranks().Ranks[0].Pid
	if len(threads.Threads) != 3 || !strings.HasPrefix(threads.Threads[0].Name, fmt.Sprintf("rank 0 · main (LWP %d) 0x", pid)) {
		t.Fatalf("threads %+v", threads.Threads)
	}
	for _, th := range threads.Threads[1:] {
		if !strings.HasPrefix(th.Name, "rank 0 · worker (LWP ") {
			t.Errorf("worker thread named %q", th.Name)
		}
	}
	// Every worker waits in usleep called from worker.
	for _, th := range threads.Threads[1:] {
		frames := d.stackTrace(th.Id)
		found := false
		for _, f := range frames {
			found = found || f.Name == "worker"
		}
		if !found {
			t.Errorf("thread %q: stack %s", th.Name, frameList(frames))
		}
	}
	// Release the workers but keep them held: a single-thread continue of main.
	d.setBreakpoints(p.src, p.line(t, "main-sleep"))
	d.call("continue", map[string]any{"threadId": st.ThreadId, "singleThread": true}, nil)
	st = d.stopped()
	if st.ThreadId != threads.Threads[0].Id {
		t.Fatalf("stopped %+v", st)
	}
	frames := d.stackTrace(st.ThreadId)
	var ev dap.EvaluateResponseBody
	d.call("evaluate", map[string]any{"expression": "work[0] + work[1]", "frameId": frames[0].Id}, &ev)
	if ev.Result != "0" {
		t.Errorf("workers ran during a single-thread continue: work = %s", ev.Result)
	}
	// A single-thread step over usleep: the workers stay held too. (The line is a one-line
	// loop with a breakpoint on it: the step ends there, as in gdb.)
	d.call("next", map[string]any{"threadId": st.ThreadId, "singleThread": true}, nil)
	if st2 := d.stopped(); (st2.Reason != "step" && st2.Reason != "breakpoint") || st2.ThreadId != st.ThreadId {
		t.Fatalf("after a single-thread next: %+v", st2)
	}
	frames = d.stackTrace(st.ThreadId)
	d.call("evaluate", map[string]any{"expression": "work[0] + work[1]", "frameId": frames[0].Id}, &ev)
	if ev.Result != "0" || frames[0].Name != "main" {
		t.Errorf("after a single-thread next in %s: work = %s", frames[0].Name, ev.Result)
	}
	// A normal continue releases them.
	d.setBreakpoints(p.src, p.line(t, "worker-loop"))
	d.call("continue", map[string]any{"threadId": st.ThreadId}, nil)
	st = d.stopped()
	wf := d.stackTrace(st.ThreadId)
	if wf[0].Name != "worker" {
		t.Fatalf("stopped in %+v, want a worker", st)
	}
	// Thread-local storage, found through the thread library's descriptors: each worker
	// sees its own tls_id (set to its id + 100), main its initial value.
	eval := func(frameID int, e string) string {
		var ev dap.EvaluateResponseBody
		d.call("evaluate", map[string]any{"expression": e, "frameId": frameID, "context": "watch"}, &ev)
		return ev.Result
	}
	if got, want := eval(wf[0].Id, "tls_id"), eval(wf[0].Id, "id + 100"); got != want {
		t.Errorf("worker tls_id = %s, want %s", got, want)
	}
	mf := d.stackTrace(threads.Threads[0].Id)
	if got := eval(mf[0].Id, "tls_id"); got != "-1" {
		t.Errorf("main's tls_id = %s, want -1", got)
	}
}

// TestStopModeRank: with stopMode "rank" a breakpoint stops its rank only.
func TestStopModeRank(t *testing.T) {
	t.Parallel()
	p := compileC(t, "spin")
	d := newDAP(t, viaPipe)
	defer d.close()
	st := d.runTo(map[string]any{"program": p.bin, "np": 2, "stopMode": "rank", "ranks": "1"}, p.src, p.line(t, "tick"))
	ranks := d.ranks()
	if st.AllThreadsStopped || st.ThreadId != ranks.Ranks[1].ThreadID {
		t.Fatalf("stopped %+v, want rank 1 alone (the breakpoint's rank set is the focus, 1)", st)
	}
	time.Sleep(100 * time.Millisecond)
	if s := d.ranks().Ranks[0].State; s != "running" {
		t.Errorf("rank 0 is %s with stopMode rank", s)
	}
}

// TestStopModeThread: with stopMode "thread" a breakpoint holds only the thread that hit it;
// its rank's other threads run on, and continuing the thread releases it.
func TestStopModeThread(t *testing.T) {
	t.Parallel()
	p := compileC(t, "threads")
	d := newDAP(t, viaPipe)
	defer d.close()
	d.launch(map[string]any{"program": p.bin, "stopMode": "thread"})
	d.setBreakpoints(p.src, p.line(t, "worker-loop"))
	d.call("configurationDone", nil, nil)
	a := d.stopped()
	b := d.stopped()
	if a.AllThreadsStopped || b.AllThreadsStopped || a.ThreadId == b.ThreadId {
		t.Fatalf("stops %+v and %+v, want two workers each stopped alone", a, b)
	}
	d.setBreakpoints(p.src)
	d.call("continue", map[string]any{"threadId": a.ThreadId}, nil)
	bf := d.stackTrace(b.ThreadId)
	if bf[0].Name != "worker" {
		t.Fatalf("held thread in %s", bf[0].Name)
	}
	eval := func() int {
		var ev dap.EvaluateResponseBody
		d.call("evaluate", map[string]any{"expression": "work[0] + work[1]", "frameId": bf[0].Id, "context": "watch"}, &ev)
		n, _ := strconv.Atoi(ev.Result)
		return n
	}
	w0 := eval()
	waitFor(t, "the released worker to work while the other stays held", func() bool { return eval() > w0 })
	// Stepping the held thread: the rank stops for the step, the thread steps one instruction
	// and is held again, and the other worker goes on working throughout.
	var idv dap.EvaluateResponseBody
	d.call("evaluate", map[string]any{"expression": "id", "frameId": bf[0].Id, "context": "watch"}, &idv)
	heldWork := "work[" + idv.Result + "]"
	value := func(frameID int, expr string) int {
		var ev dap.EvaluateResponseBody
		d.call("evaluate", map[string]any{"expression": expr, "frameId": frameID, "context": "watch"}, &ev)
		n, _ := strconv.Atoi(ev.Result)
		return n
	}
	pc0 := bf[0].InstructionPointerReference
	for i := 0; i < 3; i++ {
		d.call("next", map[string]any{"threadId": b.ThreadId, "granularity": "instruction"}, nil)
		st := d.stopped()
		if st.ThreadId != b.ThreadId || st.Reason != "step" || st.AllThreadsStopped {
			t.Fatalf("stop after next %d: %+v, want a step stop of thread %d alone", i, st, b.ThreadId)
		}
	}
	bf = d.stackTrace(b.ThreadId)
	if bf[0].Name != "worker" || bf[0].InstructionPointerReference == pc0 {
		t.Errorf("after three instruction steps: %s at %s (was %s)", bf[0].Name, bf[0].InstructionPointerReference, pc0)
	}
	before := eval()
	waitFor(t, "the released worker to go on working after the steps", func() bool { return eval() > before })
	h0 := value(bf[0].Id, heldWork)
	time.Sleep(200 * time.Millisecond)
	bf = d.stackTrace(b.ThreadId)
	if h := value(bf[0].Id, heldWork); h > h0+1 {
		t.Errorf("the stepped thread ran on after its steps: %s went from %d to %d", heldWork, h0, h)
	}
}
