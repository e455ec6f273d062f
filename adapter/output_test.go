package adapter

import (
	"fmt"
	"strings"
	"testing"
)

// TestOutputLabels: a single process's output arrives as the program wrote it; in a job of
// more than one rank each line is labelled "[rank] ". In both, every output event of a rank
// carries the rank in its data.
func TestOutputLabels(t *testing.T) {
	t.Parallel()
	p := compileC(t, "stacks")
	for _, np := range []int{1, 2} {
		t.Run(fmt.Sprintf("np%d", np), func(t *testing.T) {
			t.Parallel()
			d := newDAP(t, viaPipe)
			defer d.close()
			d.launch(map[string]any{"program": p.bin, "np": np})
			d.call("configurationDone", nil, nil)
			d.event("terminated")
			seen := map[int]string{}
			for _, m := range d.c.Events("output") {
				var o struct {
					Category string
					Output   string
					Data     *struct{ Rank *int }
				}
				if err := m.Decode(&o); err != nil {
					t.Fatal(err)
				}
				if o.Category != "stdout" {
					continue
				}
				if o.Data == nil || o.Data.Rank == nil {
					t.Errorf("stdout event without a rank in its data: %q", o.Output)
					continue
				}
				seen[*o.Data.Rank] += o.Output
			}
			for r := range np {
				line := fmt.Sprintf("rank %d total ", r)
				if np > 1 {
					line = fmt.Sprintf("[%d] rank %d total ", r, r)
				}
				if !strings.HasPrefix(seen[r], line) {
					t.Errorf("rank %d's output %q, want it to begin with %q", r, seen[r], line)
				}
			}
			if len(seen) != np {
				t.Errorf("output from ranks %v, want %d ranks", seen, np)
			}
		})
	}
}
