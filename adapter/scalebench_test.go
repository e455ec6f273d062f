package adapter

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/google/go-dap"
)

// BenchmarkMemoryAtScale measures the front end's heap per stopped rank at 1,024 local ranks:
// every rank stopped at a breakpoint and the stack of each read (a stackTrace of every rank's
// thread, the state a user is in after looking through the ranks' stacks), less the same at 16
// ranks, over the 1,008 ranks between (the marginal cost of a stopped rank; what does not grow
// with ranks, the program's and libc's symbols, falls out).
//
//	go test -run '^$' -bench MemoryAtScale -benchtime 1x ./adapter
func BenchmarkMemoryAtScale(b *testing.B) {
	p := compileC(b, "spin")
	line := p.line(b, "tick")
	heap := func(np int) uint64 {
		d := newDAP(b, viaPipe)
		defer d.close()
		// Each rank stops at the breakpoint on its own (stop mode rank), not wherever the
		// first rank's hit found it.
		d.launch(map[string]any{"program": p.bin, "np": np, "ranksPerAgent": 64, "stopMode": "rank"})
		d.setBreakpoints(p.src, line)
		d.call("configurationDone", nil, nil)
		d.stopped()
		for !allRanksStopped(d, np) {
			time.Sleep(5 * time.Millisecond)
		}
		var threads dap.ThreadsResponseBody
		d.call("threads", nil, &threads)
		if len(threads.Threads) != np {
			b.Fatalf("%d threads, want %d", len(threads.Threads), np)
		}
		for _, t := range threads.Threads {
			if fr := d.stackTrace(t.Id); len(fr) < 2 || fr[0].Name != "tick" {
				b.Fatalf("thread %d: stack %+v, want tick at the top", t.Id, fr)
			}
		}
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapInuse
	}
	// A first job fills what the process keeps for any job (the symbol cache, threaddb's
	// per-file tables), so that the difference below is the ranks'.
	heap(16)
	for range b.N {
		h16 := heap(16)
		h1024 := heap(1024)
		b.ReportMetric(0, "ns/op")
		b.ReportMetric(float64(int64(h1024)-int64(h16))/1008/1024, "KiB/rank")
	}
}

// allRanksStopped reports whether all np ranks of the session's job are stopped.
func allRanksStopped(d *dapSession, np int) bool {
	rb := d.ranks()
	for _, r := range rb.Ranks {
		if r.State != "stopped" {
			return false
		}
	}
	return len(rb.Ranks) == np
}

// BenchmarkThreadsAfterPause: the first `threads` request after the first pause of every rank
// of a running job of np local ranks (each stopped in libc's sleep, nap.c), which reads every
// rank's thread list and labels its threads; a second one at the same stop; and the first
// after a second pause (the labels known, the lists read again). Each iteration launches a
// job. fe-msgs are the CDTI messages the front end sent
// for the first, msgs/rank the same over the ranks, next-fe-msgs those for the one after the
// second pause. The -aslr cases run the ranks with address-space randomisation, as ranks
// attached to a running job are: every rank has its own layout.
//
//	go test -run '^$' -bench ThreadsAfterPause -benchtime 3x ./adapter
func BenchmarkThreadsAfterPause(b *testing.B) {
	p := compileC(b, "nap")
	for _, c := range []struct {
		np   int
		aslr bool
	}{{256, false}, {1024, false}, {256, true}, {1024, true}} {
		np, name := c.np, fmt.Sprintf("np%d", c.np)
		if c.aslr {
			name += "-aslr"
		}
		b.Run(name, func(b *testing.B) {
			var first, again, next time.Duration
			var msgs, nextMsgs uint64
			for range b.N {
				d := newDAP(b, viaPipe)
				d.launch(map[string]any{"program": p.bin, "np": np, "ranksPerAgent": 64, "disableASLR": !c.aslr})
				d.call("configurationDone", nil, nil)
				var threads dap.ThreadsResponseBody
				d.call("threads", nil, &threads)
				tid := threads.Threads[0].Id
				pause := func() {
					d.call("pause", map[string]any{"threadId": tid}, nil)
					d.stopped()
					for !allRanksStopped(d, np) {
						time.Sleep(5 * time.Millisecond)
					}
				}
				timed := func() time.Duration {
					t0 := time.Now()
					d.call("threads", nil, &threads)
					dt := time.Since(t0)
					if len(threads.Threads) != np {
						b.Fatalf("%d threads, want %d", len(threads.Threads), np)
					}
					return dt
				}
				pause()
				before := *d.ranks().Messages
				first += timed()
				msgs += d.ranks().Messages.Sent - before.Sent
				again += timed()
				d.call("continue", map[string]any{"threadId": tid}, nil)
				pause()
				before = *d.ranks().Messages
				next += timed()
				nextMsgs += d.ranks().Messages.Sent - before.Sent
				d.close()
			}
			n := float64(b.N)
			b.ReportMetric(0, "ns/op")
			b.ReportMetric(float64(first.Microseconds())/1000/n, "first-ms")
			b.ReportMetric(float64(again.Microseconds())/1000/n, "again-ms")
			b.ReportMetric(float64(next.Microseconds())/1000/n, "next-pause-ms")
			b.ReportMetric(float64(msgs)/n, "fe-msgs")
			b.ReportMetric(float64(msgs)/n/float64(np), "msgs/rank")
			b.ReportMetric(float64(nextMsgs)/n, "next-fe-msgs")
		})
	}
}
