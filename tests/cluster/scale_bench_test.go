package cluster

import (
	"encoding/json"
	"fmt"
	"net"
	"os/exec"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-dap"
	"github.com/hpcdap/hpcdap/adapter"
	"github.com/hpcdap/hpcdap/adapter/dapclient"
)

// BenchmarkSlurm1024 attaches to a hung job of 1,024 ranks (256 on each of the four nodes:
// 16 agents of 64 ranks) through an adapter in this process, at fan-out 2 (a tree four levels
// deep) and 32 (16 direct connections), after a job of 16 ranks (4 agents) at fan-out 2 for
// the memory baseline, and reports:
//
//	ms-attach             the attach request to the initialized event
//	ms-first-threads      the first threads request (the ranks running)
//	ms-threads-stopped    the first threads request after the first pause
//	msgs/rank-threads-stopped  the CDTI messages the front end sent for it, over the ranks
//	ms-pause-all          pause to every rank stopped (the stopped event, then hpcdap/ranks
//	                      polled every 5 ms until all 1,024 say stopped)
//	ms-parallel-stacks    one hpcdap/parallelStacks of the stopped job
//	ms-continue-all       the continue request's answer (every rank let go)
//	KiB/rank              the heap in use after the attach, a pause, the stacks and threads,
//	                      less the heap before, over the ranks: the adapter's and engine's
//	                      state, and also this process's DAP client and its log of every event
//	                      (an upper bound)
//	KiB/rank-marginal     the same at 1,024 ranks less at 16 (a job of 16 ranks, 4 per node, run
//	                      first), over 1,008: what one more rank costs, without the fixed costs
//	                      (symbols, agents' connections)
//
// then `hpcdap stacks --slurm J.S --fanout 2` on the same job, from its start to its exit
// (s-attach-sample-detach: agents started, every rank stopped, its stack read, the ranks let
// go), and gdb's `bt` of one rank (gdb -batch -p PID -ex bt) on 8 ranks, times 1,024
// (s-gdb-bt-1024-extrapolated): what a debugger attaching rank by rank spends on one stack
// dump of the job.
//
//	go test ./tests/cluster -run '^$' -bench Slurm1024 -benchtime 5x
func BenchmarkSlurm1024(b *testing.B) {
	bin := hpcdap(b)
	p := buildC(b, "hung", "gcc", "gcc")
	c := slurm.Need(b)
	const n = 1024
	job := submitHung(b, c, p.bin, n)
	step := job + ".0"
	small := submitHung(b, c, p.bin, 16) + ".0"
	b.Setenv("SLURM_CONF", c.Conf)
	b.Setenv("HPCDAP_FRONTEND_HOST", "127.0.0.1")
	b.Setenv("HPCDAP_NODE_TMPDIR", c.LocalDir())
	heap16 := -1.0 // the heap of the 16-rank session, for the marginal cost of a rank
	for _, run := range []struct{ n, fanout int }{{16, 2}, {n, 2}, {n, 32}} {
		n, step := run.n, step
		if n == 16 {
			step = small
		}
		fanout := run.fanout
		b.Run(fmt.Sprintf("ranks=%d/agents=%d/fanout=%d", n, 4*((n/4+63)/64), fanout), func(b *testing.B) {
			runtime.GC()
			var before runtime.MemStats
			runtime.ReadMemStats(&before)
			srv := adapter.NewServer(adapter.Config{AgentPath: bin})
			a, pc := net.Pipe()
			served := make(chan struct{})
			go func() { srv.ServeConn(a); close(served) }()
			cl := dapclient.New(pc, pc)
			defer func() { pc.Close(); <-served }()
			call := func(cmd string, args, out any) time.Duration {
				t0 := time.Now()
				if err := cl.Call(cmd, args, out); err != nil {
					b.Fatalf("%s: %v", cmd, err)
				}
				return time.Since(t0)
			}
			call("initialize", map[string]any{"adapterID": "hpcdap", "linesStartAt1": true, "pathFormat": "path"}, nil)
			t0 := time.Now()
			call("attach", map[string]any{"slurmJob": step, "program": p.bin, "fanout": fanout}, nil)
			if _, err := cl.WaitEvent("initialized", 240*time.Second, nil); err != nil {
				b.Fatal(err)
			}
			attach := time.Since(t0)
			call("configurationDone", nil, nil)
			var th dap.ThreadsResponseBody
			firstThreads := call("threads", nil, &th)
			if len(th.Threads) != n {
				b.Fatalf("threads: %d, want %d", len(th.Threads), n)
			}
			tid := th.Threads[0].Id
			allStopped := func() bool {
				var rb struct {
					Ranks []rankState `json:"ranks"`
				}
				call("hpcdap/ranks", map[string]any{}, &rb)
				for _, r := range rb.Ranks {
					if r.State != "stopped" {
						return false
					}
				}
				return len(rb.Ranks) == n
			}
			sent := func() uint64 {
				var rb struct {
					Messages struct {
						Sent uint64 `json:"sent"`
					} `json:"messages"`
				}
				call("hpcdap/ranks", map[string]any{}, &rb)
				return rb.Messages.Sent
			}
			var pause, stacks, cont, stoppedThreads, laterThreads time.Duration
			var stoppedMsgs, laterMsgs uint64
			for i := range b.N {
				t1 := time.Now()
				call("pause", map[string]any{"threadId": tid}, nil)
				if _, err := cl.WaitEvent("stopped", 120*time.Second, nil); err != nil {
					b.Fatal(err)
				}
				for !allStopped() {
					time.Sleep(5 * time.Millisecond)
				}
				pause += time.Since(t1)
				switch i {
				case 0:
					before := sent()
					stoppedThreads = call("threads", nil, &th)
					stoppedMsgs = sent() - before
				case 1: // a later stop: the threads named, their lists read again
					before := sent()
					laterThreads = call("threads", nil, &th)
					laterMsgs = sent() - before
				}
				var ps struct {
					Total int `json:"total"`
				}
				stacks += call("hpcdap/parallelStacks", map[string]any{}, &ps)
				if ps.Total != n {
					b.Fatalf("parallel stacks of %d ranks, want %d", ps.Total, n)
				}
				if i == 0 {
					runtime.GC()
					var after runtime.MemStats
					runtime.ReadMemStats(&after)
					grown := float64(int64(after.HeapInuse) - int64(before.HeapInuse))
					b.ReportMetric(grown/float64(n)/1024, "KiB/rank")
					if n == 16 {
						heap16 = grown
					} else if heap16 >= 0 {
						b.ReportMetric((grown-heap16)/float64(n-16)/1024, "KiB/rank-marginal")
					}
				}
				cont += call("continue", map[string]any{"threadId": tid}, nil)
			}
			call("disconnect", map[string]any{"terminateDebuggee": false}, nil)
			ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
			b.ReportMetric(ms(attach), "ms-attach")
			b.ReportMetric(ms(firstThreads), "ms-first-threads")
			b.ReportMetric(ms(stoppedThreads), "ms-threads-stopped")
			b.ReportMetric(float64(stoppedMsgs)/float64(n), "msgs/rank-threads-stopped")
			if b.N > 1 {
				b.ReportMetric(ms(laterThreads), "ms-threads-later")
				b.ReportMetric(float64(laterMsgs), "msgs-threads-later")
			}
			b.ReportMetric(ms(pause)/float64(b.N), "ms-pause-all")
			b.ReportMetric(ms(stacks)/float64(b.N), "ms-parallel-stacks")
			b.ReportMetric(ms(cont)/float64(b.N), "ms-continue-all")
			b.ReportMetric(0, "ns/op")
		})
	}
	b.Run("hpcdap-stacks/fanout=2", func(b *testing.B) {
		var took time.Duration
		for range b.N {
			r := <-startStacks(c, bin, 300*time.Second, "--slurm", step, "--fanout", "2", "--format", "json")
			if r.err != nil || r.code != 0 {
				b.Fatalf("hpcdap stacks: exit %d, %v\n%s", r.code, r.err, tail(r.errOut, 20))
			}
			var ps struct {
				Roots []struct {
					Count int `json:"count"`
				} `json:"roots"`
			}
			if err := json.Unmarshal([]byte(r.out), &ps); err != nil || len(ps.Roots) == 0 || ps.Roots[0].Count != n {
				b.Fatalf("hpcdap stacks --format json: %v, roots %+v", err, ps.Roots)
			}
			took += r.took
		}
		b.ReportMetric(took.Seconds()/float64(b.N), "s-attach-sample-detach")
		b.ReportMetric(0, "ns/op")
	})
	b.Run("gdb-bt-per-rank", func(b *testing.B) {
		pids := stepRanks(b, step, n)
		var took time.Duration
		for range b.N {
			for r := 0; r < n; r += n / 8 {
				t0 := time.Now()
				out, err := exec.Command("gdb", "-nx", "-batch", "-p", strconv.Itoa(pids[r]), "-ex", "bt").CombinedOutput()
				took += time.Since(t0)
				if err != nil {
					b.Fatalf("gdb -p %d: %v\n%s", pids[r], err, out)
				}
			}
		}
		per := took / time.Duration(8*b.N)
		b.ReportMetric(float64(per.Microseconds())/1000, "ms-gdb-bt-per-rank")
		b.ReportMetric((per * n).Seconds(), "s-gdb-bt-1024-extrapolated")
		b.ReportMetric(0, "ns/op")
	})
}
