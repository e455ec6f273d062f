package adapter

import (
	"fmt"
	"runtime"
	"sort"
	"testing"
	"time"

	"github.com/google/go-dap"
	"github.com/hpcdap/hpcdap/adapter/dapclient"
)

// Benchmarks (go test -run '^$' -bench . ./adapter):
//
//	BenchmarkRequestLatency   threads, stackTrace, scopes, variables, evaluate, completions and setBreakpoints at
//	                          one stop, hpcdap beside lldb-vscode-15 on the same program; p50/p99 per request.
//	BenchmarkInitializeLatency a new adapter process's initialize, beside lldb-vscode-15 (peerbench_test.go).
//	BenchmarkNextLatency      next at a stop to the stopped event of the step, beside lldb-vscode-15 (peerbench_test.go).
//	BenchmarkLaunchToStop     launch → every rank stopped at a breakpoint, for 1, 16, 64 ranks.
//	BenchmarkMemoryPerRank    the adapter's heap per rank of a stopped job with its stacks read.
//	BenchmarkMemoryAtScale    the same per stopped rank at 1,024 ranks, every rank's stack read (scalebench_test.go).
//	BenchmarkThreadsAfterPause the first threads after a pause of 256 and 1,024 ranks (scalebench_test.go).
//	BenchmarkFunctionCall     evaluate of a function call at one stop (infcall_test.go).
//	BenchmarkJoinStoppedJob   a client joining, and leaving, a shared job of 4 stopped ranks (shared_test.go).

// latency records request durations and reports percentiles.
type latency struct{ d []time.Duration }

func (l *latency) time(f func()) {
	t0 := time.Now()
	f()
	l.d = append(l.d, time.Since(t0))
}

func (l *latency) report(b *testing.B) {
	sort.Slice(l.d, func(i, j int) bool { return l.d[i] < l.d[j] })
	p := func(q float64) float64 {
		if len(l.d) == 0 {
			return 0
		}
		return float64(l.d[min(len(l.d)-1, int(q*float64(len(l.d))))].Microseconds())
	}
	b.ReportMetric(p(0.5), "p50-µs")
	b.ReportMetric(p(0.99), "p99-µs")
	b.ReportMetric(0, "ns/op")
}

// stoppedRequests issues the requests a client sends at every stop, on thread tid; bp is the
// setBreakpoints request that set the stop's breakpoint (sent again unchanged).
func stoppedRequests(b *testing.B, c *dapclient.Client, tid int, which string, bp map[string]any, l *latency) {
	var st dap.StackTraceResponseBody
	if err := c.Call("stackTrace", map[string]any{"threadId": tid}, &st); err != nil {
		b.Fatal(err)
	}
	fid := st.StackFrames[0].Id
	var sc dap.ScopesResponseBody
	if err := c.Call("scopes", map[string]any{"frameId": fid}, &sc); err != nil {
		b.Fatal(err)
	}
	ref := sc.Scopes[0].VariablesReference
	call := func(cmd string, args any) {
		l.time(func() {
			if err := c.Call(cmd, args, nil); err != nil {
				b.Fatal(err)
			}
		})
	}
	for i := 0; i < b.N; i++ {
		switch which {
		case "threads":
			call("threads", nil)
		case "stackTrace":
			call("stackTrace", map[string]any{"threadId": tid})
		case "scopes":
			call("scopes", map[string]any{"frameId": fid})
		case "variables":
			call("variables", map[string]any{"variablesReference": ref})
		case "evaluate":
			call("evaluate", map[string]any{"expression": "s->corner[1].x + depth", "frameId": fid, "context": "watch"})
		case "completions":
			call("completions", map[string]any{"text": "s->corner[1].", "column": 14, "frameId": fid})
		case "setBreakpoints":
			call("setBreakpoints", bp)
		}
	}
}

func BenchmarkRequestLatency(b *testing.B) {
	p := compileC(b, "stacks")
	line := p.line(b, "leaf-write")
	bp := map[string]any{"source": map[string]any{"path": p.src}, "breakpoints": []map[string]any{{"line": line}}}
	for _, req := range []string{"threads", "stackTrace", "scopes", "variables", "evaluate", "completions", "setBreakpoints"} {
		b.Run("hpcdap/"+req, func(b *testing.B) {
			d := newDAP(b, viaStdio)
			defer d.close()
			st := d.runTo(map[string]any{"program": p.bin}, p.src, line)
			var l latency
			b.ResetTimer()
			stoppedRequests(b, d.c, st.ThreadId, req, bp, &l)
			b.StopTimer()
			l.report(b)
		})
		b.Run("lldb-vscode/"+req, func(b *testing.B) {
			lp := startLLDB(b, p, line, []string{"HPCDAP_RANK=0"})
			var l latency
			b.ResetTimer()
			stoppedRequests(b, lp.c, lp.thread, req, bp, &l)
			b.StopTimer()
			l.report(b)
			lp.c.Call("disconnect", map[string]any{"terminateDebuggee": true}, nil)
		})
	}
}

// BenchmarkThreadsAfterStop times the first threads request of each stop (the one a client
// sends when a thread stops, which reads the rank's thread list), one process stepped an
// instruction at a time.
//
//	go test ./adapter -run '^$' -bench ThreadsAfterStop -benchtime 300x
func BenchmarkThreadsAfterStop(b *testing.B) {
	p := compileC(b, "stacks")
	d := newDAP(b, viaStdio)
	defer d.close()
	st := d.runTo(map[string]any{"program": p.bin}, p.src, p.line(b, "leaf-write"))
	var l latency
	b.ResetTimer()
	for range b.N {
		d.call("stepIn", map[string]any{"threadId": st.ThreadId, "granularity": "instruction"}, nil)
		d.stopped()
		l.time(func() { d.call("threads", nil, nil) })
	}
	b.StopTimer()
	l.report(b)
}

func BenchmarkLaunchToStop(b *testing.B) {
	p := compileC(b, "stacks")
	line := p.line(b, "leaf-write")
	for _, np := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("np=%d", np), func(b *testing.B) {
			var total time.Duration
			for i := 0; i < b.N; i++ {
				d := newDAP(b, viaPipe)
				d.initialize()
				t0 := time.Now()
				d.call("launch", map[string]any{"program": p.bin, "np": np}, nil)
				d.event("initialized")
				d.setBreakpoints(p.src, line)
				d.call("configurationDone", nil, nil)
				d.stopped()
				for _, r := range d.ranks().Ranks {
					if r.State != "stopped" {
						b.Fatalf("rank %d is %s", r.Rank, r.State)
					}
				}
				total += time.Since(t0)
				d.close()
			}
			// The symbol cache is shared across iterations (as in a long-running hpcdap
			// serve): after the first, the binaries' DWARF is not read again.
			b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms-to-all-stopped")
		})
	}
}

func BenchmarkMemoryPerRank(b *testing.B) {
	p := compileC(b, "spin")
	heap := func(np int) uint64 {
		d := newDAP(b, viaPipe)
		defer d.close()
		d.runTo(map[string]any{"program": p.bin, "np": np}, p.src, p.line(b, "tick"))
		var ps ParallelStacksBody
		d.call("hpcdap/parallelStacks", map[string]any{}, &ps)
		var threads dap.ThreadsResponseBody
		d.call("threads", nil, &threads)
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapInuse
	}
	for i := 0; i < b.N; i++ {
		h1 := heap(1)
		h64 := heap(64)
		b.ReportMetric(float64(int64(h64)-int64(h1))/63/1024, "KiB/rank")
	}
}

// BenchmarkSetBreakpoints sets and clears a function breakpoint in every rank of a job
// stopped on one node: one round of planting and one of removal per iteration.
func BenchmarkSetBreakpoints(b *testing.B) {
	p := compileC(b, "stacks")
	for _, np := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("np=%d", np), func(b *testing.B) {
			d := newDAP(b, viaPipe)
			defer d.close()
			d.runTo(map[string]any{"program": p.bin, "np": np}, p.src, p.line(b, "leaf-write"))
			set := map[string]any{"breakpoints": []map[string]any{{"name": "middle"}}}
			clear := map[string]any{"breakpoints": []any{}}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				var fb SetBreakpointsResponseBodyExt
				d.call("setFunctionBreakpoints", set, &fb)
				if len(fb.Breakpoints) != 1 || !fb.Breakpoints[0].Verified {
					b.Fatalf("function breakpoint: %+v", fb)
				}
				d.call("setFunctionBreakpoints", clear, nil)
			}
		})
	}
}

// BenchmarkThreadsAtScale: the first `threads` request after an all-stop of np local ranks
// (each rank's thread list and thread names read once per stop), and a second one.
//
//	go test -run '^$' -bench ThreadsAtScale -benchtime 1x ./adapter
func BenchmarkThreadsAtScale(b *testing.B) {
	p := compileC(b, "spin")
	for _, np := range []int{256, 1024} {
		b.Run(fmt.Sprintf("np%d", np), func(b *testing.B) {
			var first, second time.Duration
			for range b.N {
				d := newDAP(b, viaPipe)
				d.runTo(map[string]any{"program": p.bin, "np": np}, p.src, p.line(b, "tick"))
				var threads dap.ThreadsResponseBody
				t0 := time.Now()
				d.call("threads", nil, &threads)
				first += time.Since(t0)
				if len(threads.Threads) != np {
					b.Fatalf("%d threads, want %d", len(threads.Threads), np)
				}
				t1 := time.Now()
				d.call("threads", nil, &threads)
				second += time.Since(t1)
				d.close()
			}
			b.ReportMetric(0, "ns/op")
			b.ReportMetric(float64(first.Microseconds())/1000/float64(b.N), "first-ms")
			b.ReportMetric(float64(second.Microseconds())/1000/float64(b.N), "again-ms")
		})
	}
}
