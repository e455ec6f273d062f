package agent

import (
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/hpcdap/hpcdap/cdti"
	"github.com/hpcdap/hpcdap/mgmt"
	"github.com/hpcdap/hpcdap/target/ptrace"
	"github.com/hpcdap/hpcdap/topology"
)

// BenchmarkTreeStart measures how a front end learns a job's agents at its start: real
// agents (n of them, in this process, serving no rank), either told their tree through the
// root alone (the management call "tree": each interior agent connects to its children and
// tells them theirs, and the root answers with every agent's hello and ranks), or each
// connected and asked its ranks by the front end, 64 at a time, as before the management
// plane went through the tree. front-end-conns counts the connections the front end made.
//
//	go test -run '^$' -bench TreeStart -benchtime 3x ./agent
func BenchmarkTreeStart(b *testing.B) {
	tr, err := ptrace.NewTracer()
	if err != nil {
		b.Skipf("ptrace: %v", err)
	}
	defer tr.Close()
	for _, n := range []int{256, 1024, 4096} {
		for _, how := range []string{"root", "each"} {
			b.Run(fmt.Sprintf("agents=%d/fanout=32/%s", n, how), func(b *testing.B) {
				var took time.Duration
				conns := 0
				for range b.N {
					addrs, stop := startIdleAgents(b, tr, n)
					t0 := time.Now()
					if how == "root" {
						conns += treeThroughRoot(b, addrs)
					} else {
						conns += eachAgent(b, addrs)
					}
					took += time.Since(t0)
					stop()
				}
				b.ReportMetric(float64(took.Milliseconds())/float64(b.N), "ms-to-know-every-agent")
				b.ReportMetric(float64(conns)/float64(b.N), "front-end-conns")
			})
		}
	}
}

// startIdleAgents starts n agents serving no rank on loopback and returns their addresses
// and a function that ends them.
func startIdleAgents(b *testing.B, tr *ptrace.Tracer, n int) ([]string, func()) {
	b.Helper()
	agents := make([]*Agent, n)
	addrs := make([]string, n)
	ctx, cancel := context.WithCancel(context.Background())
	for i := range n {
		a, err := New(Config{Token: testToken, Backend: tr, Node: fmt.Sprintf("node%d", i), Logger: log.New(io.Discard, "", 0)})
		if err != nil {
			b.Fatal(err)
		}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		agents[i], addrs[i] = a, l.Addr().String()
		go a.Serve(ctx, l)
	}
	return addrs, func() {
		var wg sync.WaitGroup
		for _, a := range agents {
			wg.Go(func() { a.Shutdown(false) })
		}
		wg.Wait()
		cancel()
	}
}

// treeThroughRoot tells the root of the 32-ary tree over addrs the agents below it and
// waits for its answer; it returns the connections made (one).
func treeThroughRoot(b *testing.B, addrs []string) int {
	t, err := topology.New(len(addrs), 32)
	if err != nil {
		b.Fatal(err)
	}
	var below func(i int) []cdti.Route
	below = func(i int) []cdti.Route {
		var rts []cdti.Route
		for _, c := range t.Children(i) {
			rts = append(rts, cdti.Route{Addr: addrs[c], Children: below(c)})
		}
		return rts
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := mgmt.Dial(ctx, addrs[0], testToken, "bench", nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	var res TreeResult
	if err := c.Call(ctx, "tree", TreeParams{Children: below(0)}, &res); err != nil {
		b.Fatal(err)
	}
	if len(res.Agents) != len(addrs)-1 {
		b.Fatalf("the root answered for %d agents, want %d", len(res.Agents), len(addrs)-1)
	}
	return 1
}

// eachAgent connects to every agent, 64 at a time, and asks its ranks; it returns the
// connections made.
func eachAgent(b *testing.B, addrs []string) int {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sem := make(chan struct{}, 64)
	var wg sync.WaitGroup
	errs := make([]error, len(addrs))
	for i, addr := range addrs {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			c, err := mgmt.Dial(ctx, addr, testToken, "bench", nil, nil)
			if err != nil {
				errs[i] = err
				return
			}
			var ranks []RankInfo
			errs[i] = c.Call(ctx, "ranks", nil, &ranks)
			c.Close()
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
	return len(addrs)
}
