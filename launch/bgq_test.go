package launch

import (
	"fmt"
	"testing"

	"github.com/hpcdap/hpcdap/rankset"
)

// TestSubsetRanks: of an I/O node's ranks, a rank subset's session holds on each compute node
// the subset's ranks when they are one or all of the node's (one Attach per tool and
// toolctld socket: RankInHeader or RanksInNode), else every rank of the node, naming the
// others; the ranks of compute nodes the subset leaves out are not held.
func TestSubsetRanks(t *testing.T) {
	// 12 ranks, 3 per compute node (Pid is the compute node's id), 2 compute nodes per I/O
	// node: ion0 serves ranks 0-5, ion1 ranks 6-11.
	var procs []Proc
	for r := range 12 {
		procs = append(procs, Proc{Rank: r, Host: fmt.Sprintf("ion%d", r/6), Pid: r / 3})
	}
	for _, tc := range []struct {
		subset, host string
		held, extra  string
	}{
		{"4", "ion0", "[4]", "[]"},
		{"3-5", "ion0", "[3 4 5]", "[]"},
		{"0 5", "ion0", "[0 5]", "[]"},
		{"0-1", "ion0", "[0 1 2]", "[2]"},
		{"1-2 7", "ion0", "[0 1 2]", "[0]"},
		{"1-2 7", "ion1", "[7]", "[]"},
	} {
		set, err := rankset.Parse(tc.subset, len(procs))
		if err != nil {
			t.Fatal(err)
		}
		held, extra := subsetRanks(procs, tc.host, set)
		if fmt.Sprint(held) != tc.held || fmt.Sprint(extra) != tc.extra {
			t.Errorf("subset %q on %s: held %v, extra %v; want %s, %s", tc.subset, tc.host, held, extra, tc.held, tc.extra)
		}
	}
}
