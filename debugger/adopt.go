package debugger

import "context"

// AdoptBreakpoints takes over the source, function and instruction breakpoints of old, a job
// that ended, for a restart of the program: each keeps its id, rank set, condition, hit
// condition and log message, its hits count from zero in the new ranks, and it is resolved
// and planted here anew. Data breakpoints, which watch the old processes' memory, and
// breakpoints that old refused are not taken. The exception filter (signal stops) carries
// over too. It returns the breakpoints taken and the data breakpoints left behind; the new
// job's ids continue after old's.
func (j *Job) AdoptBreakpoints(ctx context.Context, old *Job) (taken, dropped []*Breakpoint) {
	old.mu.Lock()
	signalStop := old.signalStop
	old.mu.Unlock()
	j.SetSignalStop(signalStop)

	ob := old.bps
	ob.mu.Lock()
	sets := map[BPSet][]*Breakpoint{}
	for set, list := range ob.sets {
		if set.Kind == BPData {
			for _, o := range list {
				c := *o
				dropped = append(dropped, &c)
			}
			continue
		}
		for _, o := range list {
			bp := &Breakpoint{ID: o.ID, Kind: o.Kind, Ranks: o.Ranks, Owner: o.Owner, Path: o.Path, DebugPath: o.DebugPath,
				Line: o.Line, column: o.column, Fn: o.Fn, instrBin: o.instrBin, instrAddr: o.instrAddr,
				InstrRef: o.InstrRef, BPMeta: o.BPMeta}
			sets[set] = append(sets[set], bp)
			taken = append(taken, bp)
		}
	}
	next := ob.next
	ob.mu.Unlock()

	b := j.bps
	b.mu.Lock()
	for set, list := range sets {
		b.sets[set] = list
	}
	if next > b.next {
		b.next = next
	}
	b.mu.Unlock()
	j.applyBreakpoints(ctx, taken)
	return taken, dropped
}
