package adapter

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"testing"

	"github.com/google/go-dap"
)

// TestThreadsOfLaterStopInOneCollective: at a stop after the first, whose threads are named
// already, the thread lists of the ranks one connection reaches are read with one collective:
// one CDTI message for the 4 ranks of one agent, and one for the 8 ranks of a tree of 8
// agents at fan-out 2, where rank by rank would take one a rank. Every rank's threads are
// then those the kernel lists for it (/proc/PID/task), named as at the first stop.
func TestThreadsOfLaterStopInOneCollective(t *testing.T) {
	for _, c := range []struct {
		name string
		np   int
		args map[string]any
	}{
		{"one-agent", 4, map[string]any{}},
		{"tree", 8, map[string]any{"ranksPerAgent": 1, "fanout": 2}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			p := compileC(t, "tlsthreads", "-pthread")
			d := newDAP(t, viaPipe)
			defer d.close()
			args := map[string]any{"program": p.bin, "np": c.np, "stopMode": "rank"}
			for k, v := range c.args {
				args[k] = v
			}
			d.launch(args)
			d.setBreakpoints(p.src, p.line(t, "all-ready"))
			d.call("configurationDone", nil, nil)
			waitFor(t, "every rank at the breakpoint", func() bool { return allRanksStopped(d, c.np) })
			var first dap.ThreadsResponseBody
			d.call("threads", nil, &first)
			names := map[int]string{}
			for _, th := range first.Threads {
				names[th.Id] = th.Name
			}
			// Every rank on to its park, then all paused: a stop after the first.
			d.setBreakpoints(p.src)
			for _, r := range d.ranks().Ranks {
				d.call("continue", map[string]any{"threadId": r.ThreadID}, nil)
			}
			waitFor(t, "every rank running", func() bool {
				for _, r := range d.ranks().Ranks {
					if r.State != "running" {
						return false
					}
				}
				return true
			})
			for _, r := range d.ranks().Ranks { // stop mode rank: each rank paused on its own
				d.call("pause", map[string]any{"threadId": r.ThreadID}, nil)
			}
			waitFor(t, "every rank paused", func() bool { return allRanksStopped(d, c.np) })

			before := *d.ranks().Messages
			var later dap.ThreadsResponseBody
			d.call("threads", nil, &later)
			if sent := d.ranks().Messages.Sent - before.Sent; sent != 1 {
				t.Errorf("the threads of %d ranks at a later stop took %d CDTI messages, want 1 (a collective)", c.np, sent)
			}
			lwp := regexp.MustCompile(`^rank (\d+) · \w+ \(LWP (\d+)\)`)
			got := map[int][]int{} // LWPs by rank
			for _, th := range later.Threads {
				m := lwp.FindStringSubmatch(th.Name)
				if m == nil {
					t.Fatalf("thread %d named %q", th.Id, th.Name)
				}
				rank, _ := strconv.Atoi(m[1])
				l, _ := strconv.Atoi(m[2])
				got[rank] = append(got[rank], l)
				if was, ok := names[th.Id]; !ok || was != th.Name {
					t.Errorf("thread %d named %q, at the first stop %q", th.Id, th.Name, was)
				}
			}
			for _, r := range d.ranks().Ranks {
				want := taskLWPs(t, r.Pid)
				slices.Sort(got[r.Rank])
				if !slices.Equal(got[r.Rank], want) {
					t.Errorf("rank %d: threads %v, the kernel lists %v", r.Rank, got[r.Rank], want)
				}
			}
		})
	}
}

// taskLWPs lists the threads of process pid, from /proc/PID/task, in order.
func taskLWPs(t *testing.T, pid int) []int {
	t.Helper()
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, e := range ents {
		if n, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}
