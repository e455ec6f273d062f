package adapter

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hpcdap/hpcdap/rankset"
)

// TestCompareByAgentsAgreesWithFrontEnd compares values across 12 ranks of comparevals.c
// paused at three kinds of places (in libc's sleep under two functions, some ranks with a null
// pointer, and spinning, each at its own pc): locals of frames above libc's and of main, a
// global, chars, booleans, a member through a pointer that is null on some ranks, a name only
// some ranks' frames have, and a floating-point value the agents leave to the front end. Each
// comparison of every rank, which the agents answer where they can, must equal each rank
// compared alone (one rank: always the front end's own evaluation), rank by rank: the same
// value or the same error. Directly connected agents, a tree of agents (fan-out 2), and ranks
// whose libraries and executable are loaded at different addresses in each (address-space
// randomisation on, as under a workload manager).
func TestCompareByAgentsAgreesWithFrontEnd(t *testing.T) {
	p := compileC(t, "comparevals")
	const np = 12
	for _, c := range []struct {
		name string
		args map[string]any
	}{
		{"direct", map[string]any{"ranksPerAgent": 4}},
		{"tree", map[string]any{"ranksPerAgent": 2, "fanout": 2}},
		{"aslr", map[string]any{"ranksPerAgent": 4, "disableASLR": false}},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := newDAP(t, viaPipe)
			defer d.close()
			args := map[string]any{"program": p.bin, "np": np}
			for k, v := range c.args {
				args[k] = v
			}
			d.launch(args)
			d.call("configurationDone", nil, nil)
			waitFor(t, "every rank ready", func() bool { return strings.Count(allOutput(d), "ready") >= np })
			time.Sleep(100 * time.Millisecond) // into their waits
			rs := d.ranks().Ranks
			if c.args["disableASLR"] == false && libcBase(t, rs[0].Pid) == libcBase(t, rs[3].Pid) {
				t.Fatalf("ranks 0 and 3 map libc at the same address with randomisation on")
			}
			d.call("pause", map[string]any{"threadId": rs[0].ThreadID}, nil)
			d.stopped()
			for _, expr := range []string{"rank", "rank_id", "depth", "letter", "flag", "here", "twice",
				"cp->v", "rank_id * 3 + depth", "weight", "n", "no_such_name"} {
				var all CompareBody
				d.call("hpcdap/compareExpression", map[string]any{"expression": expr}, &all)
				got := byRank(t, all, np)
				for r := range np {
					var one CompareBody
					d.call("hpcdap/compareExpression", map[string]any{"expression": expr, "ranks": fmt.Sprint(r)}, &one)
					want := byRank(t, one, np)[r]
					if got[r] != want || want == "" {
						t.Errorf("%s: rank %d: %q among all ranks, %q alone", expr, r, got[r], want)
					}
				}
			}
		})
	}
}

// byRank returns each rank's outcome in a comparison: "= value" or "! error".
func byRank(t *testing.T, b CompareBody, np int) []string {
	t.Helper()
	out := make([]string, np)
	for _, g := range b.Groups {
		for _, r := range rankset.MustParse(g.Ranks, np).Ranks() {
			out[r] = "= " + g.Value
		}
	}
	for _, e := range b.Errors {
		for _, r := range rankset.MustParse(e.Ranks, np).Ranks() {
			out[r] = "! " + e.Message
		}
	}
	return out
}

// TestCompareAtOnePlaceTakesNoMessagePerRank compares a local of main and a global across 16
// ranks of nap.c, all paused in libc's sleep, on two agents: the agents evaluate them and the
// answer comes back grouped by value, so a comparison of a stop whose stacks are known costs
// the front end fewer CDTI messages than there are ranks (evaluating rank by rank costs at
// least two a rank); with address-space randomisation off (every rank's modules at the same
// addresses) and on. And the same for workers.c through a tree of agents, whose rank 0 waits
// elsewhere than the 15 others (a master and its workers).
func TestCompareAtOnePlaceTakesNoMessagePerRank(t *testing.T) {
	nap, workers := compileC(t, "nap"), compileC(t, "workers")
	for _, c := range []struct {
		name string
		p    *program
		args map[string]any
	}{
		{"disableASLR=true", nap, map[string]any{"ranksPerAgent": 8, "disableASLR": true}},
		{"disableASLR=false", nap, map[string]any{"ranksPerAgent": 8, "disableASLR": false}},
		{"master-workers-tree", workers, map[string]any{"ranksPerAgent": 2, "fanout": 2}},
	} {
		t.Run(c.name, func(t *testing.T) { compareAtOnePlace(t, c.p, c.args) })
	}
}

func compareAtOnePlace(t *testing.T, p *program, args map[string]any) {
	const np = 16
	d := newDAP(t, viaPipe)
	defer d.close()
	launch := map[string]any{"program": p.bin, "np": np}
	for k, v := range args {
		launch[k] = v
	}
	d.launch(launch)
	d.call("configurationDone", nil, nil)
	waitFor(t, "every rank napping", func() bool { return strings.Count(allOutput(d), "napping") >= np })
	for _, r := range d.ranks().Ranks {
		waitFor(t, fmt.Sprintf("rank %d in its sleep", r.Rank), func() bool { return inSleep(r.Pid) })
	}
	tid := d.ranks().Ranks[0].ThreadID
	d.call("pause", map[string]any{"threadId": tid}, nil)
	d.stopped()
	var cmp CompareBody
	d.call("hpcdap/compareExpression", map[string]any{"expression": "rank"}, &cmp)
	m0 := *d.ranks().Messages
	for _, expr := range []string{"rank", "rank_id"} {
		d.call("hpcdap/compareExpression", map[string]any{"expression": expr}, &cmp)
		for _, g := range cmp.Groups {
			if g.Count != 1 || g.Value != g.Ranks {
				t.Errorf("%s: ranks %s have %s", expr, g.Ranks, g.Value)
			}
		}
		if len(cmp.Groups) != np || len(cmp.Errors) != 0 {
			t.Errorf("%s: %d groups, errors %+v", expr, len(cmp.Groups), cmp.Errors)
		}
	}
	m1 := *d.ranks().Messages
	if n := m1.Sent - m0.Sent + m1.Received - m0.Received; n >= np {
		t.Errorf("two comparisons across %d ranks took %d CDTI messages", np, n)
	} else {
		t.Logf("two comparisons across %d ranks: %d CDTI messages", np, n)
	}
}

// inSleep reports whether process pid is blocked in clock_nanosleep (x86-64 system call 230),
// where nap.c and workers.c wait once they said they are ready.
func inSleep(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/syscall", pid))
	return err == nil && strings.HasPrefix(string(b), "230 ")
}
