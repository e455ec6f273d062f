package adapter

import (
	"os/exec"
	"testing"
	"time"

	"github.com/google/go-dap"
	"github.com/hpcdap/hpcdap/adapter/dapclient"
)

// BenchmarkHitStopContinue: an unconditional function breakpoint on f (testdata/condloop.c,
// 20,000 calls), one operation a stop reported through DAP and the continue that lets the
// program reach the next: the round trips per second a client sees, through hpcdap
// ("hpcdap") and through lldb-vscode-15 in the same run. Use a fixed -benchtime of at most
// 19999x (e.g. 2000x).
//
//	go test ./adapter/ -run '^$' -bench HitStopContinue -benchtime 2000x
func BenchmarkHitStopContinue(b *testing.B) {
	p := compileC(b, "condloop")
	run := func(b *testing.B, c *dapclient.Client) {
		b.Helper()
		must := func(err error) {
			b.Helper()
			if err != nil {
				b.Fatal(err)
			}
		}
		must(c.Call("setFunctionBreakpoints", map[string]any{"breakpoints": []map[string]any{{"name": "f"}}}, nil))
		must(c.Call("configurationDone", nil, nil))
		var st dap.StoppedEventBody
		ev, err := c.WaitEvent("stopped", time.Minute, nil)
		must(err)
		must(ev.Decode(&st))
		b.ResetTimer()
		for range b.N {
			must(c.Call("continue", map[string]any{"threadId": st.ThreadId}, nil))
			ev, err := c.WaitEvent("stopped", time.Minute, nil)
			must(err)
			must(ev.Decode(&st))
		}
		b.StopTimer()
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "round-trips/s")
	}
	b.Run("hpcdap", func(b *testing.B) {
		d := newDAP(b, viaPipe)
		defer d.close()
		d.launch(map[string]any{"program": p.bin})
		run(b, d.c)
	})
	b.Run("lldb-vscode", func(b *testing.B) {
		needTool(b, lldbVSCode)
		cmd := exec.Command(lldbVSCode)
		in, _ := cmd.StdinPipe()
		out, _ := cmd.StdoutPipe()
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		defer func() { cmd.Process.Kill(); cmd.Wait() }()
		c := dapclient.New(out, in)
		if err := c.Call("initialize", map[string]any{"adapterID": "lldb", "linesStartAt1": true, "columnsStartAt1": true, "pathFormat": "path"}, nil); err != nil {
			b.Fatal(err)
		}
		if _, _, err := c.Send("launch", map[string]any{"program": p.bin, "cwd": p.dir}); err != nil {
			b.Fatal(err)
		}
		if _, err := c.WaitEvent("initialized", 30*time.Second, nil); err != nil {
			b.Fatal(err)
		}
		run(b, c)
	})
}
