package adapter

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-dap"
)

// BenchmarkConditionFalseHits: a function breakpoint on f (testdata/condloop.c, 20,000 calls)
// with the condition i == 19999, timed from configurationDone to the stop; one operation is
// one whole run. "agent": the agent decides each hit; "frontend": the agents answer
// SetTrapCondition with CmdInval (as a CNK), so each hit goes to the front end; "gdb": gdb
// -batch with break f if i == 19999, from its start to the stop (start-up included). Use a
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
}
