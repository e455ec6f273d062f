package debugger

import (
	"context"
	"fmt"
	"sync"

	"github.com/hpcdap/hpcdap/symbols"
)

// Libraries loaded at run time (dlopen). The dynamic linker calls r_debug.r_brk around every
// change of its link map. While a breakpoint waits for a library (it resolved nowhere yet), the
// adapter keeps an internal breakpoint there in every rank; when it is hit, it reads the link
// map again, resolves the breakpoints that were waiting, and plants them. Once nothing waits,
// the breakpoint goes: a rank does not stop at each of the dozens of components an MPI library
// loads at start-up unless somebody needs it to. The modules request reads the link map anew
// whenever it is asked, so no library goes unseen.

// waitsForLibrary reports whether a breakpoint of r waits for a library to be loaded in r:
// it resolved nowhere yet, or its locations are in a binary r has not loaded.
func (j *Job) waitsForLibrary(ctx context.Context, r *Rank) bool {
	mods, err := r.sym.modules(ctx, false)
	if err != nil {
		return false
	}
	j.bps.mu.Lock()
	defer j.bps.mu.Unlock()
	for _, bp := range j.bps.allUser() {
		switch {
		case !bp.Ranks.Contains(r.Num):
		case bp.Kind == bpEntry && j.bps.entryDone(r):
		case bp.Kind == BPInstruction && !bp.Resolved:
			// An address in no binary: no library will make it one.
		case len(bp.addrsFor(mods)) == 0:
			return true
		}
	}
	return false
}

// updateLibraryWatch plants or removes the link-map breakpoint in each of ranks so that it is
// there exactly while a breakpoint of the rank waits for a library.
func (j *Job) updateLibraryWatch(ctx context.Context, ranks []*Rank) {
	j.libWatchMu.Lock()
	defer j.libWatchMu.Unlock()
	for _, r := range ranks {
		want := j.waitsForLibrary(ctx, r)
		r.sym.mu.Lock()
		rbrk, planted := r.sym.rbrk, r.sym.libWait
		r.sym.mu.Unlock()
		if rbrk == 0 || planted == want {
			continue
		}
		if want {
			if err := j.bps.plantTemp(ctx, r, rbrk); err != nil {
				j.logf("rank %d: watch library loads at %#x: %v", r.Num, rbrk, err)
				continue
			}
		} else {
			j.bps.removeTemp(ctx, r, rbrk)
		}
		r.sym.setLibraryWatch(want)
	}
}

// refreshModules reads the link map of ranks again (each rank at most once per stop; a map
// the dynamic linker is changing is not taken): a library loaded while nobody watched is then
// known.
func (j *Job) refreshModules(ctx context.Context, ranks []*Rank) {
	var wg sync.WaitGroup
	for _, r := range ranks {
		wg.Go(func() {
			defer j.recoverPanic(fmt.Sprintf("modules of rank %d", r.Num))
			r.sym.modules(ctx, true)
		})
	}
	wg.Wait()
}

// isLibraryEvent reports whether a trap at addr is r's link-map breakpoint (and no user
// breakpoint shares the address).
func (j *Job) isLibraryEvent(r *Rank, addr uint64) bool {
	r.sym.mu.Lock()
	rbrk := r.sym.rbrk
	r.sym.mu.Unlock()
	return rbrk != 0 && addr == rbrk && !j.bps.isUserSite(r, addr)
}

// onLibraryEvent takes in r's new libraries: modules, waiting breakpoints, module events. The
// link-map breakpoint stays in r only while a breakpoint still waits.
func (j *Job) onLibraryEvent(r *Rank) {
	ctx, cancel := context.WithTimeout(context.Background(), DefaultTimeout)
	defer cancel()
	defer j.updateLibraryWatch(ctx, []*Rank{r})
	before, _ := r.sym.modules(ctx, false)
	known := map[string]bool{}
	for _, m := range before {
		known[m.Path] = true
	}
	after, err := r.sym.modules(ctx, true)
	if err != nil {
		return
	}
	var added []*symbols.Module
	for _, m := range after {
		if !known[m.Path] {
			added = append(added, m)
		}
	}
	if len(added) == 0 {
		return
	}
	for _, m := range added {
		j.ev.ModuleLoaded(m)
	}
	j.bps.mu.Lock()
	var waiting []*Breakpoint
	for _, bp := range j.bps.allUser() {
		if !bp.Resolved && bp.Kind != BPInstruction {
			waiting = append(waiting, bp)
		}
	}
	j.bps.mu.Unlock()
	var found []*Breakpoint
	if len(waiting) > 0 {
		bins := j.Binaries(ctx)
		for _, bp := range waiting {
			if j.bps.resolve(bp, bins) {
				found = append(found, bp)
			}
		}
	}
	// Plant what resolved now, and breakpoints that resolved in other ranks and whose library
	// r has just loaded.
	j.bps.sync(ctx, []*Rank{r})
	j.countPlanted(j.liveRanks())
	j.bps.mu.Lock()
	for _, bp := range found {
		defer j.ev.BreakpointChanged(bp.snapshot())
	}
	j.bps.mu.Unlock()
}
