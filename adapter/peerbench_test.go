package adapter

import (
	"fmt"
	"os/exec"
	"testing"
	"time"

	"github.com/hpcdap/hpcdap/adapter/dapclient"
)

// BenchmarkInitializeLatency times a new adapter process's first answer: from its start to
// the answer to initialize, hpcdap beside lldb-vscode-15.
//
//	go test ./adapter -run '^$' -bench InitializeLatency -benchtime 50x
func BenchmarkInitializeLatency(b *testing.B) {
	for _, a := range []struct {
		name string
		cmd  func() *exec.Cmd
	}{
		{"hpcdap", func() *exec.Cmd { return exec.Command(hpcdapBinary(b), "dap") }},
		{"lldb-vscode", func() *exec.Cmd { needTool(b, lldbVSCode); return exec.Command(lldbVSCode) }},
	} {
		b.Run(a.name, func(b *testing.B) {
			a.cmd() // builds or checks the tool before the timer starts
			var l latency
			b.ResetTimer()
			for range b.N {
				cmd := a.cmd()
				in, err := cmd.StdinPipe()
				if err != nil {
					b.Fatal(err)
				}
				out, err := cmd.StdoutPipe()
				if err != nil {
					b.Fatal(err)
				}
				l.time(func() {
					if err := cmd.Start(); err != nil {
						b.Fatal(err)
					}
					c := dapclient.New(out, in)
					if err := c.Call("initialize", map[string]any{"adapterID": "bench", "linesStartAt1": true,
						"columnsStartAt1": true, "pathFormat": "path"}, nil); err != nil {
						b.Fatal(err)
					}
				})
				in.Close()
				if err := waitOrKill(cmd, 20*time.Second); err != nil {
					b.Fatalf("%s, its input closed: %v", a.name, err)
				}
			}
			b.StopTimer()
			l.report(b)
		})
	}
}

// waitOrKill waits for cmd to end, killing it after d (an error then). How it ended is not
// checked: lldb-vscode aborts when its input ends without a disconnect.
func waitOrKill(cmd *exec.Cmd, d time.Duration) error {
	t := time.AfterFunc(d, func() { cmd.Process.Kill() })
	cmd.Wait()
	if !t.Stop() {
		return fmt.Errorf("did not end within %v: killed", d)
	}
	return nil
}

// BenchmarkNextLatency times a next over a call at a stop, to the stopped event of the step,
// hpcdap beside lldb-vscode-15 on the same program (condloop's loop in main, its breakpoint
// removed after the first stop).
//
//	go test ./adapter -run '^$' -bench NextLatency -benchtime 300x
func BenchmarkNextLatency(b *testing.B) { nextLatency(b, "condloop", "main-call") }

// BenchmarkNextLongLineLatency is NextLatency over lines of ~40 instructions and no call
// (longloop's loop), which hpcdap's agent steps through alone (StepRange).
//
//	go test ./adapter -run '^$' -bench NextLongLineLatency -benchtime 300x
func BenchmarkNextLongLineLatency(b *testing.B) { nextLatency(b, "longloop", "first") }

// nextLatency times nexts from the line marked mark of program prog, hpcdap beside
// lldb-vscode-15, the breakpoint there removed after the first stop.
func nextLatency(b *testing.B, prog, mark string) {
	p := compileC(b, prog)
	line := p.line(b, mark)
	next := func(b *testing.B, c *dapclient.Client, tid int) {
		if b.N > maxNexts {
			b.Fatalf("at most %d steps: the program's loop is not longer (-benchtime %dx)", maxNexts, b.N)
		}
		if err := c.Call("setBreakpoints", map[string]any{"source": map[string]any{"path": p.src},
			"breakpoints": []map[string]any{}}, nil); err != nil {
			b.Fatal(err)
		}
		var l latency
		b.ResetTimer()
		for range b.N {
			l.time(func() {
				if err := c.Call("next", map[string]any{"threadId": tid}, nil); err != nil {
					b.Fatal(err)
				}
				if _, err := c.WaitEvent("stopped", 30*time.Second, nil); err != nil {
					b.Fatal(err)
				}
			})
		}
		b.StopTimer()
		l.report(b)
	}
	b.Run("hpcdap", func(b *testing.B) {
		d := newDAP(b, viaStdio)
		defer d.close()
		st := d.runTo(map[string]any{"program": p.bin}, p.src, line)
		before := *d.ranks().Messages
		next(b, d.c, st.ThreadId)
		after := *d.ranks().Messages
		b.ReportMetric(float64(after.Sent-before.Sent)/float64(b.N), "cdti-sent/next")
	})
	b.Run("lldb-vscode", func(b *testing.B) {
		lp := startLLDB(b, p, line, []string{"HPCDAP_RANK=0"})
		next(b, lp.c, lp.thread)
		lp.c.Call("disconnect", map[string]any{"terminateDebuggee": true}, nil)
	})
}

// maxNexts bounds NextLatency's steps: condloop's loop is 20,000 calls, two lines each
// (longloop's is longer).
const maxNexts = 19000
