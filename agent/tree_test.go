package agent

import (
	"context"
	"maps"
	"os"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/hpcdap/hpcdap/cdti"
)

// TestTreeRelayAndGatherStacks puts two real agents in a tree: the parent serves rank 0 and
// relays for its child, which serves ranks 1 and 2 and which it authenticates to with the
// session token. A tool connected to the parent alone attaches and stops all three ranks
// (the child's notifications come up through the parent); GatherStacks then merges exactly
// the stacks each rank's own GetTraceback gives, across both agents. A tool attached to
// nothing gathers no rank: the agents unwind only ranks the asking tool may query.
func TestTreeRelayAndGatherStacks(t *testing.T) {
	parent := newHarness(t, "")
	parent.spawn(1, progBin)
	child := newHarness(t, "")
	out := newOutFile(t)
	if err := child.a.SpawnRanks(SpawnSpec{Argv: []string{progBin}, Stdio: []*os.File{nil, out.f, out.f}, FirstRank: 1, Count: 2}); err != nil {
		t.Fatal(err)
	}
	parent.a.router.SetChildren([]cdti.Route{{Addr: child.addr, Ranks: []uint32{1, 2}}})

	tt := parent.dial(5)
	for r := uint32(0); r < 3; r++ {
		tt.attach(r, 50, "tree")
		tt.control(r, int(syscall.SIGSTOP), cdti.DynamicNotifyStart)
	}
	stopped := map[uint32]bool{}
	for len(stopped) < 3 {
		n := tt.notify()
		if n.Kind != cdti.NotifyTypeSignal || n.Signal.Signal != uint32(syscall.SIGSTOP) {
			t.Fatalf("notification %+v, want a SIGSTOP", n)
		}
		stopped[n.Rank] = true
	}
	own := map[uint32][]uint64{}
	for r := uint32(0); r < 3; r++ {
		frames, err := tt.c.Traceback(ctx(), r, 0, 0)
		if err != nil {
			t.Fatalf("rank %d through the parent: %v", r, err)
		}
		for _, f := range frames {
			own[r] = append(own[r], f.PC)
		}
	}
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tree, err := tt.c.GatherStacks(c, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := tree.Paths(); !maps.EqualFunc(got, own, slices.Equal) {
		t.Fatalf("merged stacks %x, the ranks' own %x", got, own)
	}
	if len(tree.Unreachable) != 0 {
		t.Errorf("unreachable %v", tree.Unreachable)
	}

	other := parent.dial(6)
	tree, err = other.c.GatherStacks(c, 0)
	if err != nil {
		t.Fatal(err)
	}
	if tree.Ranks.Count() != 0 {
		t.Errorf("a tool attached to nothing gathered ranks %v", tree.Ranks)
	}
}
