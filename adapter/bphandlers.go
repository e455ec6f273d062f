package adapter

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/google/go-dap"
	"github.com/hpcdap/hpcdap/rankset"
	"github.com/hpcdap/hpcdap/symbols"
)

// dapBreakpoint reports a breakpoint's state: verified once it resolved and is planted on at
// least one rank; the message names the ranks where planting failed.
func (s *Session) dapBreakpoint(bp *userBP) Breakpoint {
	out := Breakpoint{Breakpoint: dap.Breakpoint{Id: bp.id}}
	switch {
	case !bp.resolved:
		out.Message = bp.message
		out.Reason = "pending"
	case len(bp.failures) > 0 && bp.planted == 0:
		out.Message = failureText(bp.failures)
		out.Reason = "failed"
	default:
		out.Verified = true
		if len(bp.failures) > 0 {
			out.Message = failureText(bp.failures)
		}
	}
	if bp.resolved && bp.actual.File != "" {
		file := s.sources.paths.toEditor(bp.actual.File)
		out.Source = &dap.Source{Name: filepath.Base(file), Path: file}
		out.Line = s.lineOut(bp.actual.Line)
	} else if bp.kind == bpSource {
		out.Source = &dap.Source{Name: filepath.Base(bp.path), Path: bp.path}
		out.Line = s.lineOut(bp.line)
	}
	if bp.resolved && bp.kind == bpInstruction {
		out.InstructionReference = fmt.Sprintf("%#x", bp.instrRef)
	}
	return out
}

// failureText summarises planting failures by rank.
func failureText(f map[int]string) string {
	byMsg := map[string]rankset.Set{}
	for r, m := range f {
		byMsg[m] = byMsg[m].Add(r)
	}
	var parts []string
	for m, set := range byMsg {
		parts = append(parts, fmt.Sprintf("ranks %s: %s", set, m))
	}
	sort.Strings(parts)
	return "not planted on " + strings.Join(parts, "; ")
}

// applyBreakpoints resolves new breakpoints, plants everything on the live ranks and counts
// where each breakpoint went.
func (j *Job) applyBreakpoints(ctx context.Context, fresh []*userBP) {
	if len(fresh) > 0 {
		// Libraries may have been loaded since the link maps were read.
		j.refreshModules(ctx, j.liveRanks())
	}
	bins := j.binaries(ctx)
	for _, bp := range fresh {
		j.bps.resolve(bp, bins)
	}
	ranks := j.liveRanks()
	j.bps.mu.Lock()
	for _, bp := range j.bps.allUser() {
		bp.failures = nil
	}
	j.bps.mu.Unlock()
	j.bps.sync(ctx, ranks)
	j.countPlanted(ranks)
	j.updateLibraryWatch(ctx, ranks)
}

// countPlanted records on how many ranks each breakpoint is planted.
func (j *Job) countPlanted(ranks []*Rank) {
	j.bps.mu.Lock()
	defer j.bps.mu.Unlock()
	for _, bp := range j.bps.allUser() {
		bp.planted = 0
		for _, r := range ranks {
			if !bp.ranks.Contains(r.Num) || bp.failures[r.Num] != "" {
				continue
			}
			if len(bp.locs) > 0 {
				bp.planted++
			}
		}
	}
}

// focusSet returns the current focus.
func (j *Job) focusSet() rankset.Set {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.focus
}

func (s *Session) onSetBreakpointsRequest(req *dap.SetBreakpointsRequest) {
	j := s.currentJob(&req.Request)
	if j == nil {
		return
	}
	a := req.Arguments
	path := a.Source.Path
	if path == "" {
		path = a.Source.Name
	}
	if path == "" {
		s.sendError(&req.Request, errBadArguments, "setBreakpoints: the source has no path")
		return
	}
	key := filepath.Clean(path)
	reqs := a.Breakpoints
	if reqs == nil {
		for _, l := range a.Lines {
			reqs = append(reqs, dap.SourceBreakpoint{Line: l})
		}
	}
	for _, sb := range reqs {
		if sb.HitCondition != "" {
			if _, _, err := parseHitCondition(sb.HitCondition); err != nil {
				s.sendError(&req.Request, errBreakpoints, "setBreakpoints: "+err.Error())
				return
			}
		}
	}
	if err := j.back.frozen(); err != nil {
		s.respondUnverified(req, reqs, path, err.Error())
		return
	}
	if j.noStop {
		s.respondUnverified(req, reqs, path, noDebugRefusal)
		return
	}
	focus := j.focusSet()
	j.bps.mu.Lock()
	old := j.bps.source[key]
	var list, fresh []*userBP
	used := map[*userBP]bool{}
	for _, sb := range reqs {
		line := s.lineIn(sb.Line)
		var bp *userBP
		for _, o := range old {
			if !used[o] && o.line == line {
				bp = o
				break
			}
		}
		if bp == nil {
			bp = &userBP{id: j.bps.newID(), kind: bpSource, ranks: focus, path: path, file: s.sources.paths.toDebug(path), line: line}
			fresh = append(fresh, bp)
		}
		used[bp] = true
		bp.cond, bp.hitCond, bp.logMsg = sb.Condition, sb.HitCondition, sb.LogMessage
		list = append(list, bp)
	}
	if len(list) == 0 {
		delete(j.bps.source, key)
	} else {
		j.bps.source[key] = list
	}
	j.bps.mu.Unlock()
	ctx, cancel := context.WithTimeout(s.ctx, defaultTimeout)
	defer cancel()
	j.applyBreakpoints(ctx, fresh)
	resp := &SetBreakpointsResponse{Response: newResponse(&req.Request)}
	resp.Body.Breakpoints = []Breakpoint{}
	j.bps.mu.Lock()
	for _, bp := range list {
		resp.Body.Breakpoints = append(resp.Body.Breakpoints, s.dapBreakpoint(bp))
	}
	j.bps.mu.Unlock()
	s.send(resp)
}

// respondUnverified answers setBreakpoints when nothing can be planted.
func (s *Session) respondUnverified(req *dap.SetBreakpointsRequest, reqs []dap.SourceBreakpoint, path, why string) {
	resp := &SetBreakpointsResponse{Response: newResponse(&req.Request)}
	resp.Body.Breakpoints = []Breakpoint{}
	for _, sb := range reqs {
		resp.Body.Breakpoints = append(resp.Body.Breakpoints, Breakpoint{Breakpoint: dap.Breakpoint{Message: why,
			Source: &dap.Source{Path: path, Name: filepath.Base(path)}, Line: sb.Line}, Reason: "failed"})
	}
	s.send(resp)
}

func (s *Session) onSetFunctionBreakpointsRequest(req *dap.SetFunctionBreakpointsRequest) {
	j := s.currentJob(&req.Request)
	if j == nil {
		return
	}
	focus := j.focusSet()
	j.bps.mu.Lock()
	old := j.bps.funcs
	var list, fresh []*userBP
	used := map[*userBP]bool{}
	for _, fb := range req.Arguments.Breakpoints {
		var bp *userBP
		for _, o := range old {
			if !used[o] && o.fn == fb.Name {
				bp = o
				break
			}
		}
		if bp == nil {
			bp = &userBP{id: j.bps.newID(), kind: bpFunction, ranks: focus, fn: strings.TrimSpace(fb.Name)}
			fresh = append(fresh, bp)
		}
		used[bp] = true
		bp.cond, bp.hitCond = fb.Condition, fb.HitCondition
		list = append(list, bp)
	}
	j.bps.funcs = list
	j.bps.mu.Unlock()
	ctx, cancel := context.WithTimeout(s.ctx, defaultTimeout)
	defer cancel()
	if j.back.frozen() == nil {
		j.applyBreakpoints(ctx, fresh)
	}
	resp := &SetBreakpointsResponse{Response: newResponse(&req.Request)}
	resp.Command = "setFunctionBreakpoints"
	resp.Body.Breakpoints = []Breakpoint{}
	j.bps.mu.Lock()
	for _, bp := range list {
		resp.Body.Breakpoints = append(resp.Body.Breakpoints, s.dapBreakpoint(bp))
	}
	j.bps.mu.Unlock()
	s.send(resp)
}

// parseAddress reads "0x1234" (or decimal) plus an offset.
func parseAddress(ref string, off int) (uint64, error) {
	a, err := strconv.ParseUint(strings.TrimSpace(ref), 0, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not an address", ref)
	}
	return a + uint64(int64(off)), nil
}

func (s *Session) onSetInstructionBreakpointsRequest(req *dap.SetInstructionBreakpointsRequest) {
	j := s.currentJob(&req.Request)
	if j == nil {
		return
	}
	ctx, cancel := context.WithTimeout(s.ctx, defaultTimeout)
	defer cancel()
	focus := j.focusSet()
	ref := j.referenceRank()
	var list []*userBP
	for _, ib := range req.Arguments.Breakpoints {
		bp := &userBP{id: 0, kind: bpInstruction, ranks: focus, cond: ib.Condition, hitCond: ib.HitCondition}
		addr, err := parseAddress(ib.InstructionReference, ib.Offset)
		if err == nil && ref != nil {
			mods, _ := ref.sym.modules(ctx, false)
			err = fmt.Errorf("address %#x is in no module of rank %d", addr, ref.Num)
			for _, m := range mods {
				if m.Contains(addr) {
					bp.instrBin, bp.instrAddr, bp.instrRef, err = m.Bin, addr-m.Bias, addr, nil
				}
			}
		}
		if err != nil {
			bp.message = err.Error()
		}
		list = append(list, bp)
	}
	j.bps.mu.Lock()
	old := j.bps.instrs
	for _, bp := range list {
		for _, o := range old {
			if o.instrBin == bp.instrBin && o.instrAddr == bp.instrAddr && o.id != 0 {
				bp.id = o.id
			}
		}
		if bp.id == 0 {
			bp.id = j.bps.newID()
		}
	}
	var valid []*userBP
	for _, bp := range list {
		if bp.message == "" {
			valid = append(valid, bp)
		}
	}
	j.bps.instrs = valid
	j.bps.mu.Unlock()
	if j.back.frozen() == nil {
		j.applyBreakpoints(ctx, valid)
	}
	resp := &SetBreakpointsResponse{Response: newResponse(&req.Request)}
	resp.Command = "setInstructionBreakpoints"
	resp.Body.Breakpoints = []Breakpoint{}
	j.bps.mu.Lock()
	for _, bp := range list {
		resp.Body.Breakpoints = append(resp.Body.Breakpoints, s.dapBreakpoint(bp))
	}
	j.bps.mu.Unlock()
	s.send(resp)
}

// referenceRank is the rank whose addresses instruction and memory references are read in:
// the rank whose stack the client read last (the frame it looks at), else the first live
// rank of the focus.
func (j *Job) referenceRank() *Rank {
	j.mu.Lock()
	v := j.viewRank
	alive := v != nil && (v.state == rankStopped || v.state == rankRunning)
	j.mu.Unlock()
	if alive {
		return v
	}
	live := j.liveRanks()
	focus := j.focusSet()
	for _, r := range live {
		if focus.Contains(r.Num) {
			return r
		}
	}
	if len(live) > 0 {
		return live[0]
	}
	return nil
}

func (s *Session) onSetExceptionBreakpointsRequest(req *dap.SetExceptionBreakpointsRequest) {
	j := s.currentJob(&req.Request)
	stop := false
	for _, f := range req.Arguments.Filters {
		if f == "signals" {
			stop = true
		}
	}
	for _, fo := range req.Arguments.FilterOptions {
		if fo.FilterId == "signals" {
			stop = true
		}
	}
	if j != nil {
		j.mu.Lock()
		j.signalStop = stop
		j.mu.Unlock()
	} else {
		return
	}
	resp := &dap.SetExceptionBreakpointsResponse{Response: newResponse(&req.Request)}
	resp.Body.Breakpoints = []dap.Breakpoint{}
	for range req.Arguments.Filters {
		resp.Body.Breakpoints = append(resp.Body.Breakpoints, dap.Breakpoint{Verified: true})
	}
	s.send(resp)
}

func (s *Session) onBreakpointLocationsRequest(req *dap.BreakpointLocationsRequest) {
	j := s.currentJob(&req.Request)
	if j == nil {
		return
	}
	a := req.Arguments
	ctx, cancel := context.WithTimeout(s.ctx, defaultTimeout)
	defer cancel()
	bins := j.back.binaries(ctx)
	first := s.lineIn(a.Line)
	last := first
	if a.EndLine > 0 {
		last = s.lineIn(a.EndLine)
	}
	if last-first > 10000 {
		last = first + 10000
	}
	seen := map[int]bool{}
	resp := &dap.BreakpointLocationsResponse{Response: newResponse(&req.Request)}
	resp.Body.Breakpoints = []dap.BreakpointLocation{}
	for line := first; line <= last; line++ {
		for _, b := range bins {
			locs, err := b.LineBreakpoints(s.sources.paths.toDebug(a.Source.Path), line)
			if err != nil {
				continue
			}
			for _, l := range locs {
				if l.Line == line && !seen[line] {
					seen[line] = true
					resp.Body.Breakpoints = append(resp.Body.Breakpoints, dap.BreakpointLocation{Line: s.lineOut(line)})
				}
			}
		}
	}
	s.send(resp)
}

// armEntry plants the stopAtEntry breakpoint on main in every rank; the ranks stop there
// together.
func (j *Job) armEntry() error {
	ctx, cancel := context.WithTimeout(j.ctx, defaultTimeout)
	defer cancel()
	var all rankset.Set
	for _, r := range j.ranks {
		all = all.Add(r.Num)
	}
	bp := &userBP{id: 0, kind: bpEntry, fn: "main", ranks: all}
	j.bps.resolve(bp, j.binaries(ctx))
	if !bp.resolved {
		return fmt.Errorf("no main function: %s", bp.message)
	}
	j.bps.mu.Lock()
	j.bps.entry = bp
	j.bps.mu.Unlock()
	live := j.liveRanks()
	j.mu.Lock()
	j.entryWait = map[*Rank]bool{}
	for _, r := range live {
		j.entryWait[r] = true
	}
	j.mu.Unlock()
	j.bps.sync(ctx, live)
	return nil
}

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
		case !bp.ranks.Contains(r.Num):
		case bp.kind == bpEntry && j.bps.entryDone(r):
		case bp.kind == bpInstruction && !bp.resolved:
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

// refreshModules reads the link map of ranks again where it is consistent (each rank at most
// once per stop): a library loaded while nobody watched is then known.
func (j *Job) refreshModules(ctx context.Context, ranks []*Rank) {
	var wg sync.WaitGroup
	for _, r := range ranks {
		wg.Go(func() {
			defer j.recoverPanic(fmt.Sprintf("modules of rank %d", r.Num))
			if !r.sym.linkMapChanging(ctx) {
				r.sym.modules(ctx, true)
			}
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
	ctx, cancel := context.WithTimeout(context.Background(), defaultTimeout)
	defer cancel()
	defer j.updateLibraryWatch(ctx, []*Rank{r})
	if r.sym.linkMapChanging(ctx) {
		return
	}
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
	var waiting []*userBP
	for _, bp := range j.bps.allUser() {
		if !bp.resolved && bp.kind != bpInstruction {
			waiting = append(waiting, bp)
		}
	}
	j.bps.mu.Unlock()
	var found []*userBP
	if len(waiting) > 0 {
		bins := j.binaries(ctx)
		for _, bp := range waiting {
			j.bps.resolve(bp, bins)
			if bp.resolved {
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
