package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hpcdap/hpcdap/cdti"
	"github.com/hpcdap/hpcdap/mgmt"
)

// A subscriber that passes output.subscribe {after} gets the history after those chunks
// only, and a drop notice only when chunks it lacks were dropped. 200 lines on each stream
// of one rank (400 chunks at most, numbered from 1): after the first half, the replay is the
// second half exactly, and without a notice.
func TestOutputSubscribeAfter(t *testing.T) {
	h := newHarness(t, "")
	h.spawnCaptured(1, outputBin, "lines", "200")
	m, _ := dialMgmt(t, h.addr)
	startRanks(t, h.addr, 1)
	waitExited(t, m)
	h.a.output.mu.Lock()
	hs := h.a.output.hist[0]
	events := append([]OutputParams(nil), hs.events[hs.head:]...)
	h.a.output.mu.Unlock()
	half := events[len(events)/2-1].Seq
	var empty struct{}
	if err := m.call("output.subscribe", OutputSubscribeParams{After: map[int]uint64{0: half}}, &empty); err != nil {
		t.Fatal(err)
	}
	var want strings.Builder
	for _, ev := range events[len(events)/2:] {
		want.WriteString(fmt.Sprintf("%d %s %q %v|", ev.Seq, ev.Stream, ev.Text, ev.EOF))
	}
	var got strings.Builder
	for range events[len(events)/2:] {
		msg := m.read(30 * time.Second)
		var ev OutputParams
		json.Unmarshal(msg.Params, &ev)
		got.WriteString(fmt.Sprintf("%d %s %q %v|", ev.Seq, ev.Stream, ev.Text, ev.EOF))
	}
	if got.String() != want.String() {
		t.Errorf("replay after chunk %d:\n got %s\nwant %s", half, got.String(), want.String())
	}
	for i, ev := range events {
		if ev.Seq != uint64(i+1) {
			t.Fatalf("chunk %d numbered %d", i, ev.Seq)
		}
	}
}

// TestSubtreeReconnectsToSlowSubscriber: an agent drops a subscriber that falls behind (its
// queue over the bound), which is no loss: the Subtree connects to the same agent again,
// subscribing after the chunks it delivered, and adopts nothing. A rank writes 300,000
// numbered lines on each stream while the first delivery is held: each stream arrives in
// order, with no line twice, a drop notice where lines are missing (the history's bound),
// and its end once.
func TestSubtreeReconnectsToSlowSubscriber(t *testing.T) {
	h := newHarness(t, "")
	h.a.output.setLimits(64<<10, 16<<10)
	const lines = 300000
	h.spawnCaptured(1, outputBin, "lines", fmt.Sprint(lines))
	release := make(chan struct{})
	var once sync.Once
	var mu sync.Mutex
	var logs strings.Builder
	type chunk struct{ stream, text string }
	var got []chunk // in the order delivered
	eofs := map[string]int{}
	s := &mgmt.Subtree{Token: testToken, Client: "test",
		Logf: func(f string, a ...any) { mu.Lock(); fmt.Fprintf(&logs, f+"\n", a...); mu.Unlock() },
		Output: func(raw json.RawMessage) {
			once.Do(func() { <-release })
			var ev OutputParams
			json.Unmarshal(raw, &ev)
			mu.Lock()
			defer mu.Unlock()
			if ev.EOF {
				eofs[ev.Stream]++
				return
			}
			got = append(got, chunk{ev.Stream, ev.Text})
		}}
	defer s.Close()
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Connect(c, []cdti.Route{{Addr: h.addr}}); err != nil {
		t.Fatal(err)
	}
	startRanks(t, h.addr, 1)
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(h.logBuf.String(), "unread: disconnected") {
		if time.Now().After(deadline) {
			t.Fatal("the held subscriber was never dropped")
		}
		time.Sleep(10 * time.Millisecond)
	}
	close(release)
	for {
		mu.Lock()
		done := eofs["stdout"] > 0 && eofs["stderr"] > 0
		mu.Unlock()
		if done {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the streams never ended; Subtree log:\n%s", logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond) // a repeat of the end would come by now
	mu.Lock()
	defer mu.Unlock()
	// A notice (in either stream: it names the rank) allows one gap in each stream after it.
	next := map[string]int{}
	notice := map[string]bool{}
	gaps := 0
	partial := map[string]string{}
	for _, c := range got {
		text := partial[c.stream] + c.text
		partial[c.stream] = ""
		for _, line := range strings.SplitAfter(text, "\n") {
			if line == "" {
				continue
			}
			if !strings.HasSuffix(line, "\n") {
				partial[c.stream] = line // completed by the stream's next chunk
				continue
			}
			if strings.HasPrefix(line, "[hpcdap: ") && strings.HasSuffix(line, " bytes of output dropped]\n") {
				notice["stdout"], notice["stderr"] = true, true
				continue
			}
			word := map[string]string{"stdout": "out", "stderr": "err"}[c.stream]
			var i int
			if _, err := fmt.Sscanf(line, "rank 0 "+word+" %d\n", &i); err != nil {
				t.Fatalf("%s: line %q", c.stream, line)
			}
			switch {
			case i < next[c.stream]:
				t.Fatalf("%s: line %d after line %d: a repeat", c.stream, i, next[c.stream]-1)
			case i > next[c.stream]:
				if !notice[c.stream] {
					t.Fatalf("%s: lines %d-%d missing without a drop notice", c.stream, next[c.stream], i-1)
				}
				gaps++
			}
			notice[c.stream] = false
			next[c.stream] = i + 1
		}
	}
	for _, stream := range []string{"stdout", "stderr"} {
		if eofs[stream] != 1 {
			t.Errorf("%s ended %d times", stream, eofs[stream])
		}
		if next[stream] != lines {
			t.Errorf("%s: last line %d, want %d", stream, next[stream]-1, lines-1)
		}
	}
	t.Logf("%d gap(s), each after a notice", gaps)
	if !strings.Contains(logs.String(), "connected again") || strings.Contains(logs.String(), "lost agent") {
		t.Errorf("the Subtree did not connect again to the agent, or took it for lost:\n%s", logs.String())
	}
}
