package adapter

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-dap"
	"github.com/hpcdap/hpcdap/adapter/dapclient"
)

// BenchmarkConditionFalseHits: a function breakpoint on f (testdata/condloop.c, 20,000 calls)
// with the condition i == 19999, timed from configurationDone to the stop; one operation is
// one whole run. "agent": the agent decides each hit; "frontend": the agents answer
// SetTrapCondition with CmdInval (as a CNK), so each hit goes to the front end; "gdb": gdb
// -batch with break f if i == 19999, from its start to the stop (start-up included);
// "gdbserver": the same with the program under gdbserver (over a pipe) and the condition
// evaluated there (set breakpoint condition-evaluation target); "lldb-vscode": the same
// function breakpoint through lldb-vscode-15's DAP, from configurationDone to the stop. Use a
// fixed -benchtime (e.g. 3x).
func BenchmarkConditionFalseHits(b *testing.B) {
	p := compileC(b, "condloop")
	dapRun := func(b *testing.B) {
		var total time.Duration
		for i := 0; i < b.N; i++ {
			d := newDAP(b, viaPipe)
			d.launch(map[string]any{"program": p.bin})
			d.call("setFunctionBreakpoints", map[string]any{"breakpoints": []map[string]any{{"name": "f", "condition": "i == 19999"}}}, nil)
			t0 := time.Now()
			d.call("configurationDone", nil, nil)
			st := d.stopped()
			total += time.Since(t0)
			frames := d.stackTrace(st.ThreadId)
			var ev dap.EvaluateResponseBody
			d.call("evaluate", map[string]any{"expression": "i", "frameId": frames[0].Id, "context": "watch"}, &ev)
			if ev.Result != "19999" {
				b.Fatalf("stopped at i = %s", ev.Result)
			}
			d.close()
		}
		b.ReportMetric(total.Seconds()/float64(b.N), "s-to-stop")
		b.ReportMetric(20000*float64(b.N)/total.Seconds(), "hits/s")
	}
	b.Run("agent", dapRun)
	b.Run("frontend", func(b *testing.B) {
		b.Setenv("HPCDAP_AGENT_NO_TRAP_CONDITIONS", "1")
		dapRun(b)
	})
	b.Run("gdb", func(b *testing.B) {
		gdb := needTool(b, "gdb")
		script := filepath.Join(b.TempDir(), "cond.gdb")
		os.WriteFile(script, []byte("set startup-with-shell off\nbreak f if i == 19999\nrun\nprint i\n"), 0o644)
		var total time.Duration
		for i := 0; i < b.N; i++ {
			t0 := time.Now()
			out, err := exec.Command(gdb, "-batch", "-nx", "-x", script, p.bin).CombinedOutput()
			total += time.Since(t0)
			if err != nil || !strings.Contains(string(out), "$1 = 19999") {
				b.Fatalf("gdb: %v\n%s", err, out)
			}
		}
		b.ReportMetric(total.Seconds()/float64(b.N), "s-to-stop")
		b.ReportMetric(20000*float64(b.N)/total.Seconds(), "hits/s")
	})
	b.Run("gdbserver", func(b *testing.B) {
		gdb := needTool(b, "gdb")
		server := needTool(b, "gdbserver")
		script := filepath.Join(b.TempDir(), "cond.gdb")
		os.WriteFile(script, []byte("set breakpoint condition-evaluation target\n"+
			"target remote | "+server+" - "+p.bin+"\nbreak f if i == 19999\ncontinue\nprint i\nkill\n"), 0o644)
		var total time.Duration
		for i := 0; i < b.N; i++ {
			t0 := time.Now()
			out, err := exec.Command(gdb, "-batch", "-nx", "-x", script, p.bin).CombinedOutput()
			total += time.Since(t0)
			if err != nil || !strings.Contains(string(out), "$1 = 19999") {
				b.Fatalf("gdb with gdbserver: %v\n%s", err, out)
			}
		}
		b.ReportMetric(total.Seconds()/float64(b.N), "s-to-stop")
		b.ReportMetric(20000*float64(b.N)/total.Seconds(), "hits/s")
	})
	b.Run("lldb-vscode", func(b *testing.B) {
		needTool(b, lldbVSCode)
		var total time.Duration
		for i := 0; i < b.N; i++ {
			total += lldbConditionRun(b, p)
		}
		b.ReportMetric(total.Seconds()/float64(b.N), "s-to-stop")
		b.ReportMetric(20000*float64(b.N)/total.Seconds(), "hits/s")
	})
}

// lldbConditionRun runs condloop under lldb-vscode with the function breakpoint f if
// i == 19999 and returns the time from configurationDone to the stop.
func lldbConditionRun(b *testing.B, p *program) time.Duration {
	cmd := exec.Command(lldbVSCode)
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	c := dapclient.New(out, in)
	must := func(err error) {
		b.Helper()
		if err != nil {
			b.Fatalf("%s: %v", lldbVSCode, err)
		}
	}
	must(c.Call("initialize", map[string]any{"adapterID": "lldb", "linesStartAt1": true, "columnsStartAt1": true, "pathFormat": "path"}, nil))
	_, launched, err := c.Send("launch", map[string]any{"program": p.bin, "cwd": p.dir})
	must(err)
	_, err = c.WaitEvent("initialized", 30*time.Second, nil)
	must(err)
	must(c.Call("setFunctionBreakpoints", map[string]any{"breakpoints": []map[string]any{{"name": "f", "condition": "i == 19999"}}}, nil))
	t0 := time.Now()
	must(c.Call("configurationDone", nil, nil))
	if m := <-launched; m == nil || !m.Success {
		b.Fatalf("%s: launch failed: %+v", lldbVSCode, m)
	}
	ev, err := c.WaitEvent("stopped", 120*time.Second, nil)
	must(err)
	el := time.Since(t0)
	var st dap.StoppedEventBody
	ev.Decode(&st)
	var frames dap.StackTraceResponseBody
	must(c.Call("stackTrace", map[string]any{"threadId": st.ThreadId}, &frames))
	var v dap.EvaluateResponseBody
	must(c.Call("evaluate", map[string]any{"expression": "i", "frameId": frames.StackFrames[0].Id, "context": "watch"}, &v))
	if v.Result != "19999" {
		b.Fatalf("%s stopped at i = %s", lldbVSCode, v.Result)
	}
	c.Call("disconnect", map[string]any{"terminateDebuggee": true}, nil)
	return el
}

// BenchmarkConditionFalseHitsJob: 64 ranks of condloop (2,000 calls each) under a function
// breakpoint on f whose condition never holds, from configurationDone to the job's end: the
// false-condition evaluations per second summed over the job.
//
//	go test ./adapter/ -run '^$' -bench ConditionFalseHitsJob -benchtime 2x
func BenchmarkConditionFalseHitsJob(b *testing.B) {
	p := compileC(b, "condloop")
	const np, calls = 64, 2000
	var total time.Duration
	for i := 0; i < b.N; i++ {
		d := newDAP(b, viaPipe)
		d.launch(map[string]any{"program": p.bin, "np": np, "args": []string{strconv.Itoa(calls)}})
		d.call("setFunctionBreakpoints", map[string]any{"breakpoints": []map[string]any{{"name": "f", "condition": "i == -1"}}}, nil)
		t0 := time.Now()
		d.call("configurationDone", nil, nil)
		if _, err := d.c.WaitEvent("terminated", 600*time.Second, nil); err != nil {
			b.Fatal(err)
		}
		total += time.Since(t0)
		d.close()
	}
	b.ReportMetric(total.Seconds()/float64(b.N), "s-to-end")
	b.ReportMetric(np*calls*float64(b.N)/total.Seconds(), "hits/s")
}
