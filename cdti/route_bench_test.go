package cdti

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"
)

// hungJobStack is the stack a simulated rank of a hung MPI job reports, innermost first:
// most ranks wait in a receive, every 1024th in a barrier, rank 0 computes, and each rank's
// innermost pc inside the progress loop takes one of 4 values, as a real sample catches a
// spinning rank at different instructions. 12 frames, about 10 distinct stacks.
func hungJobStack(_ int, r uint32) []uint64 {
	outer := []uint64{0x401000 /* _start */, 0x7f0000029d90 /* __libc_start_call_main */, 0x401a00 /* main */, 0x401b00 /* solve */}
	var mid []uint64
	switch {
	case r == 0:
		mid = []uint64{0x401c00 /* compute */, 0x401d00 /* kernel */}
	case r%1024 == 0:
		mid = []uint64{0x7f1000010000 /* MPI_Barrier */, 0x7f1000020000, 0x7f1000030000}
	default:
		mid = []uint64{0x7f1000040000 /* MPI_Recv */, 0x7f1000050000, 0x7f1000060000}
	}
	inner := []uint64{0x7f1000070000, 0x7f1000080000, 0x7f1000090000, 0x7f10000a0000, 0x7f10000b0000 + uint64(r%4)*4}
	var s []uint64
	for i := len(inner) - 1; i >= 0; i-- {
		s = append(s, inner[i])
	}
	for i := len(mid) - 1; i >= 0; i-- {
		s = append(s, mid[i])
	}
	for i := len(outer) - 1; i >= 0; i-- {
		s = append(s, outer[i])
	}
	return s
}

// BenchmarkTree runs the real tree code (Router, GatherStacks, the Client) over simulated
// agents: goroutines serving MaxRanksPerNode ranks each over loopback TCP, answering Attach
// and GatherStacks with generated stacks (hungJobStack). Reported per size and fan-out:
//
//	ready-ms     from nothing to every node attached through the tree: listeners up, routers
//	             configured, the root dialed, one Attach(RanksInNode) per node routed down
//	             (each interior agent dialing and authenticating its children on first use)
//	ns/op        one GatherStacks over the whole job, merged on the way up
//	ack-bytes    the one message the front end receives for it
//	fe-bytes     the front end's heap held by the decoded tree (measured around decoding the
//	             ack, with the agents idle)
//	tree-nodes   nodes of the merged tree
func BenchmarkTree(b *testing.B) {
	for _, ranks := range []int{1024, 16384, 131072} {
		for _, k := range []int{32, 64} {
			b.Run(fmt.Sprintf("ranks=%d/fanout=%d", ranks, k), func(b *testing.B) {
				benchTree(b, ranks, k)
			})
		}
	}
}

func benchTree(b *testing.B, ranks, k int) {
	per := MaxRanksPerNode
	n := ranks / per
	start := time.Now()
	_, root := simTreeOf(b, n, k, per, hungJobStack)
	c := dialRoot(b, root)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	sem := make(chan struct{}, 256)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if _, err := c.Attach(ctx, uint32(i*per), RanksInNode, NewTag("bench"), 1); err != nil {
				mu.Lock()
				firstErr = err
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		b.Fatal(firstErr)
	}
	ready := time.Since(start)

	tree, err := c.GatherStacks(ctx, 0)
	if err != nil {
		b.Fatal(err)
	}
	if tree.Ranks.Count() != ranks || len(tree.Unreachable) != 0 {
		b.Fatalf("%d ranks merged, unreachable %v", tree.Ranks.Count(), tree.Unreachable)
	}
	ack, err := Encode(&GatherStacksAck{Tree: *tree})
	if err != nil {
		b.Fatal(err)
	}
	nodes := tree.Nodes()
	// The front end's cost of the answer: the heap its decoded tree holds.
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	const copies = 64 // decoded and kept, so that the heap's noise averages out
	kept := make([]Message, copies)
	for i := range kept {
		if kept[i], err = DecodeMessage(ack); err != nil {
			b.Fatal(err)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(kept)
	feBytes := (int64(after.HeapAlloc) - int64(before.HeapAlloc)) / copies
	ackBytes := len(ack)

	b.ResetTimer()
	for b.Loop() {
		if _, err := c.GatherStacks(ctx, 0); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(ready.Microseconds())/1000, "ready-ms")
	b.ReportMetric(float64(ackBytes), "ack-bytes")
	b.ReportMetric(float64(max(feBytes, 0)), "fe-bytes")
	b.ReportMetric(float64(nodes), "tree-nodes")
}

// BenchmarkTreeRunControl runs the real tree code over simulated agents (as BenchmarkTree:
// MaxRanksPerNode ranks per agent, fan-out 32) and measures an all-stop and a continue of
// every rank, each as one Collective through the root (a quiet StopProcess, then
// ContinueProcess: the answers reduced on the way up) or rank by rank (a StopProcess and its
// Notify, then a ContinueProcess, per rank, pipelined on the root's connection, as without
// the extension). Reported: pause-ms and continue-ms, and fe-msgs, the messages the front end
// sent and received for both.
//
// The tool reaches the root directly (via=root, Dial) or through a Router of its own
// (via=tool-router, DialTree, as the front end does).
//
//	go test -run '^$' -bench TreeRunControl -benchtime 3x ./cdti
func BenchmarkTreeRunControl(b *testing.B) {
	for _, ranks := range []int{1024, 16384, 131072} {
		for _, how := range []string{"collective", "per-rank"} {
			for _, via := range []string{"root", "tool-router"} {
				b.Run(fmt.Sprintf("ranks=%d/%s/via=%s", ranks, how, via), func(b *testing.B) {
					benchRunControl(b, ranks, how == "collective", via == "tool-router")
				})
			}
		}
	}
}

func benchRunControl(b *testing.B, ranks int, collective, toolRouter bool) {
	per := MaxRanksPerNode
	srvs, root := simTreeOf(b, ranks/per, 32, per, hungJobStack)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	c := dialSim(b, srvs, root, per, toolRouter)
	all := make([]uint32, ranks)
	for i := range all {
		all[i] = uint32(i)
	}
	set := RanksOf(all...)
	// eachRank sends one Update per rank, 256 outstanding.
	eachRank := func(cmd func() Command) {
		sem := make(chan struct{}, 256)
		var wg sync.WaitGroup
		for _, r := range all {
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				if _, err := c.Update(ctx, r, cmd()); err != nil {
					b.Error(err)
				}
			})
		}
		wg.Wait()
	}
	var pause, cont time.Duration
	s0, r0 := c.Messages()
	for b.Loop() {
		t0 := time.Now()
		if collective {
			a, err := c.Collective(ctx, CollectiveQuietStop, set, &StopProcess{})
			if err != nil || len(a.Groups) != 1 || a.Groups[0].Ranks.Count() != ranks {
				b.Fatalf("pause: %v %+v", err, a)
			}
		} else {
			got := make(chan struct{})
			go func() {
				for range ranks {
					<-c.Notifications()
				}
				close(got)
			}()
			eachRank(func() Command { return &StopProcess{} })
			<-got
		}
		t1 := time.Now()
		if collective {
			a, err := c.Collective(ctx, 0, set, &ContinueProcess{})
			if err != nil || len(a.Groups) != 1 || a.Groups[0].Ranks.Count() != ranks {
				b.Fatalf("continue: %v %+v", err, a)
			}
		} else {
			eachRank(func() Command { return &ContinueProcess{} })
		}
		pause += t1.Sub(t0)
		cont += time.Since(t1)
	}
	s1, r1 := c.Messages()
	n := float64(b.N)
	b.ReportMetric(float64(pause.Microseconds())/1000/n, "pause-ms")
	b.ReportMetric(float64(cont.Microseconds())/1000/n, "continue-ms")
	b.ReportMetric(float64(s1-s0+r1-r0)/n, "fe-msgs")
}

// BenchmarkTreeQuery is one Query (GetThreadList) of a rank two levels below the root of a
// simulated 1,024-rank tree at fan-out 4 (16 agents of 64 ranks), the tool reaching the root
// directly (via=root, Dial) or through a Router of its own (via=tool-router, DialTree, as the
// front end does): what the tool's own Router adds to a request's round trip.
//
//	go test -run '^$' -bench TreeQuery ./cdti
func BenchmarkTreeQuery(b *testing.B) {
	for _, via := range []string{"root", "tool-router"} {
		b.Run("via="+via, func(b *testing.B) {
			per := MaxRanksPerNode
			srvs, root := simTreeOf(b, 16, 4, per, hungJobStack)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			c := dialSim(b, srvs, root, per, via == "tool-router")
			rank := uint32(15*per + 1) // agent 15: below agent 3, below the root
			for b.Loop() {
				if _, err := c.Query(ctx, rank, &GetThreadList{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
