package topology

import (
	"errors"
	"slices"
	"testing"
)

func TestNewRefusesBadInput(t *testing.T) {
	for _, c := range []struct{ n, k int }{{4, 1}, {4, 0}, {4, -3}, {-1, 2}, {0, 1}} {
		tr, err := New(c.n, c.k)
		if err == nil {
			t.Errorf("New(%d, %d) = %v, want an error", c.n, c.k, tr)
			continue
		}
		if c.k < MinFanout && !errors.Is(err, ErrFanout) {
			t.Errorf("New(%d, %d): %v does not wrap ErrFanout", c.n, c.k, err)
		}
	}
}

func TestBinaryTree(t *testing.T) {
	tr, err := New(7, 2)
	if err != nil {
		t.Fatal(err)
	}
	want := map[int][]int{0: {1, 2}, 1: {3, 4}, 2: {5, 6}, 3: nil, 6: nil}
	for i, w := range want {
		if got := tr.Children(i); !slices.Equal(got, w) {
			t.Errorf("Children(%d) = %v, want %v", i, got, w)
		}
	}
	if got := tr.Path(5); !slices.Equal(got, []int{0, 2, 5}) {
		t.Errorf("Path(5) = %v", got)
	}
	if got := tr.Subtree(1); !slices.Equal(got, []int{1, 3, 4}) {
		t.Errorf("Subtree(1) = %v", got)
	}
	if tr.Height() != 2 || !tr.Interior(2) || tr.Interior(3) {
		t.Errorf("Height %d, Interior(2) %v, Interior(3) %v", tr.Height(), tr.Interior(2), tr.Interior(3))
	}
	live := func(i int) bool { return i != 2 }
	if got := tr.NearestLive(5, live); got != 0 {
		t.Errorf("NearestLive(5) with 2 lost = %d, want 0", got)
	}
	if got := tr.NearestLive(0, live); got != -1 {
		t.Errorf("NearestLive(root) = %d, want -1", got)
	}
}

func TestOutsideTheTree(t *testing.T) {
	tr, _ := New(3, 2)
	for _, i := range []int{-1, 3, 100} {
		if tr.Parent(i) != -1 || tr.Children(i) != nil || tr.Path(i) != nil || tr.Subtree(i) != nil || tr.Depth(i) != -1 {
			t.Errorf("agent %d outside a tree of 3 has a place in it", i)
		}
	}
	empty, _ := New(0, 32)
	if empty.Roots() != nil || empty.Height() != -1 {
		t.Errorf("empty tree: roots %v, height %d", empty.Roots(), empty.Height())
	}
}

// TestHeights checks the depth the package doc promises for the simulated sizes.
func TestHeights(t *testing.T) {
	for _, c := range []struct{ n, k, h int }{{1, 32, 0}, {33, 32, 1}, {34, 32, 2}, {1024, 32, 2}, {4096, 64, 2}, {4097, 64, 2}, {131072, 32, 4}, {4, 2, 2}} {
		tr, _ := New(c.n, c.k)
		if got := tr.Height(); got != c.h {
			t.Errorf("height of %d agents at fan-out %d = %d, want %d", c.n, c.k, got, c.h)
		}
	}
}

// checkTree verifies the invariants of any tree: every agent but the root has exactly one
// parent, is its parent's child, is reached by its path, and the root's subtree is every
// agent exactly once.
func checkTree(t *testing.T, tr *Tree) {
	t.Helper()
	n := tr.Len()
	seen := make([]int, n)
	for i := 0; i < n; i++ {
		if len(tr.Children(i)) > tr.Fanout() {
			t.Fatalf("agent %d has %d children at fan-out %d", i, len(tr.Children(i)), tr.Fanout())
		}
		for _, c := range tr.Children(i) {
			seen[c]++
			if tr.Parent(c) != i {
				t.Fatalf("child %d of %d has parent %d", c, i, tr.Parent(c))
			}
		}
		p := tr.Path(i)
		if p[0] != 0 || p[len(p)-1] != i || len(p) != tr.Depth(i)+1 {
			t.Fatalf("Path(%d) = %v", i, p)
		}
	}
	for i := 1; i < n; i++ {
		if seen[i] != 1 {
			t.Fatalf("agent %d is the child of %d agents", i, seen[i])
		}
	}
	if n > 0 && len(tr.Subtree(0)) != n {
		t.Fatalf("root's subtree has %d of %d agents", len(tr.Subtree(0)), n)
	}
}

func FuzzNew(f *testing.F) {
	for _, s := range [][2]int{{0, 2}, {1, 32}, {4, 2}, {1024, 32}, {5, 1}, {-3, 4}, {10, -1}, {7, 1 << 62}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, n, k int) {
		n %= 5000 // keep each input quick
		tr, err := New(n, k)
		if k < MinFanout || n < 0 {
			if err == nil {
				t.Fatalf("New(%d, %d) accepted", n, k)
			}
			return
		}
		if err != nil {
			t.Fatalf("New(%d, %d): %v", n, k, err)
		}
		checkTree(t, tr)
	})
}
