package symbols

import (
	"bytes"
	"debug/dwarf"
	"debug/elf"
	"fmt"
	"sort"
)

// Location is where a breakpoint goes: a link-time address and the source position and
// function it stands for.
type Location struct {
	Addr     uint64
	File     string
	Line     int
	Function string
}

// LineBreakpoints returns the addresses at which a breakpoint on file:line stops, placed as
// gdb places them: every statement entry for the line (or, when the line has no code, for the
// nearest following line that has), one per block, moved past the prologue when it falls in
// one. file may be an absolute path or a path suffix ("prog.c", "src/prog.c").
func (b *Binary) LineBreakpoints(file string, line int) ([]Location, error) {
	if b.dw == nil {
		return nil, fmt.Errorf("symbols: %s: no debugging information", b.Path)
	}
	names := b.matchFiles(file)
	if len(names) == 0 {
		return nil, fmt.Errorf("symbols: %s: no source file %q", b.Path, file)
	}
	type cand struct {
		addr uint64
		file string
	}
	collect := func(l int) ([]cand, int) {
		var out []cand
		best := 0
		for _, name := range names {
			for _, cu := range b.files[name] {
				lt, err := cu.lineTable()
				if err != nil || lt == nil {
					continue
				}
				f := lt.byName[name]
				if f == nil {
					continue
				}
				exact := false
				for _, e := range f.entries {
					if !e.stmt {
						continue
					}
					if int(e.line) == l {
						out = append(out, cand{e.addr, name})
						exact = true
					}
				}
				if !exact {
					for _, e := range f.entries {
						if e.stmt && int(e.line) > l && (best == 0 || int(e.line) < best) {
							best = int(e.line)
						}
					}
				}
			}
		}
		return out, best
	}
	cands, best := collect(line)
	resolved := line
	if len(cands) == 0 && best != 0 {
		cands, _ = collect(best)
		resolved = best
	}
	if len(cands) == 0 {
		return nil, fmt.Errorf("symbols: %s: line %d of %s: %w", b.Path, line, file, ErrNoCode)
	}
	// Keep the first address per innermost block: one source line scattered over several
	// ranges of one block gets one breakpoint.
	blocks := make([]*scope, len(cands))
	keep := make([]bool, len(cands))
	for i, c := range cands {
		blocks[i] = b.innermostBlock(c.addr)
		keep[i] = true
	}
	for i := range cands {
		if blocks[i] == nil {
			continue
		}
		for j := i + 1; j < len(cands); j++ {
			if blocks[j] == blocks[i] {
				keep[j] = false
				break
			}
		}
	}
	var out []Location
	seen := map[uint64]bool{}
	for i, c := range cands {
		if !keep[i] {
			continue
		}
		addr := c.addr
		fname := ""
		if fn := b.funcForPC(addr); fn != nil {
			fname = fn.Name
			if pp, ok := b.postPrologue(fn); ok && addr < pp {
				addr = pp
			}
		}
		if seen[addr] {
			continue
		}
		seen[addr] = true
		out = append(out, Location{Addr: addr, File: c.file, Line: resolved, Function: fname})
	}
	return out, nil
}

// FunctionBreakpoints returns where a breakpoint on a function stops: past its prologue, or at
// its entry when its unit carries location lists (optimized code, whose variable locations
// are valid from the first instruction), as gdb does. name may be qualified, unqualified or a
// linkage name; every matching function gets a location.
func (b *Binary) FunctionBreakpoints(name string) ([]Location, error) {
	fs := b.FunctionsNamed(name)
	if len(fs) == 0 {
		// A function that exists only inlined: its copies.
		b.inlinedInstances(nil)
		var out []Location
		for _, in := range b.inlByName[name] {
			addr := in.entry
			if host := b.funcForPC(addr); host != nil && !(host.cu.gcc() && host.cu.locationsValid()) {
				if pp, ok := b.postPrologue(host); ok && addr < pp {
					addr = pp
				}
			}
			loc := Location{Addr: addr, Function: in.name}
			if l, ok := b.LineForPC(addr); ok {
				loc.File, loc.Line = l.File, l.Line
			}
			out = append(out, loc)
		}
		if len(out) > 0 {
			sort.Slice(out, func(i, j int) bool { return out[i].Addr < out[j].Addr })
			return out, nil
		}
		// Functions without DWARF: the ELF symbol, past no prologue.
		for _, s := range b.syms.named(name) {
			if s.Func {
				out = append(out, Location{Addr: b.skipEntrypoint(s.Addr), Function: s.Name})
			}
		}
		if len(out) == 0 {
			return nil, fmt.Errorf("symbols: %s: no function %q", b.Path, name)
		}
		return out, nil
	}
	sortFuncs(fs)
	var out []Location
	seen := map[uint64]bool{}
	for _, f := range fs {
		addr := f.Entry
		if f.cu.gcc() && f.cu.locationsValid() {
			addr = b.skipEntrypoint(f.Entry)
		} else if pp, ok := b.postPrologue(f); ok {
			addr = pp
		}
		if seen[addr] {
			continue
		}
		seen[addr] = true
		loc := Location{Addr: addr, Function: f.Name}
		if l, ok := b.LineForPC(addr); ok {
			loc.File, loc.Line = l.File, l.Line
		}
		out = append(out, loc)
	}
	// Inlined copies of the function get locations too, at their first instruction (past
	// the containing function's prologue when they start inside it).
	for _, in := range b.inlinedInstances(fs) {
		addr := in.entry
		if host := b.funcForPC(addr); host != nil && !(host.cu.gcc() && host.cu.locationsValid()) {
			if pp, ok := b.postPrologue(host); ok && addr < pp {
				addr = pp
			}
		}
		if seen[addr] {
			continue
		}
		seen[addr] = true
		loc := Location{Addr: addr, Function: in.name}
		if l, ok := b.LineForPC(addr); ok {
			loc.File, loc.Line = l.File, l.Line
		}
		out = append(out, loc)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Addr < out[j].Addr })
	return out, nil
}

// postPrologue is gdb's skip_prologue_sal for a function's entry: the first address past the
// prologue. ok is false when no better address than the entry is known.
func (b *Binary) postPrologue(f *Function) (uint64, bool) {
	start := f.Entry
	if pc, ok := b.prologueEndFlag(f); ok {
		return pc, true
	}
	if f.cu.gcc() && f.cu.locationsValid() {
		// gdb trusts optimized units' locations from the entry on.
		return b.skipEntrypoint(start), true
	}
	pc := b.skipEntrypoint(start)
	pc = b.archSkipPrologue(f, pc)
	if l, ok := b.LineForPC(pc); ok && l.Addr != pc && f.Entry <= l.End && l.End < f.High {
		pc = l.End
	}
	return pc, true
}

// prologueEndFlag returns the first line-table entry in the function flagged prologue_end.
func (b *Binary) prologueEndFlag(f *Function) (uint64, bool) {
	l, ok := b.LineForPC(f.Entry)
	if !ok {
		return 0, false
	}
	lt, err := f.cu.lineTable()
	if err != nil || lt == nil {
		return 0, false
	}
	lf := lt.byName[l.File]
	if lf == nil {
		return 0, false
	}
	lo, hi := f.rangeAt(f.Entry)
	i := sort.Search(len(lf.entries), func(k int) bool { return lf.entries[k].addr >= lo })
	for ; i < len(lf.entries) && lf.entries[i].addr < hi; i++ {
		if lf.entries[i].prologueEnd {
			return lf.entries[i].addr, true
		}
	}
	return 0, false
}

// rangeAt returns the code range of f that contains pc (gdb's find_pc_partial_function).
func (f *Function) rangeAt(pc uint64) (uint64, uint64) {
	for _, r := range f.Ranges {
		if pc >= r[0] && pc < r[1] {
			return r[0], r[1]
		}
	}
	return f.Low, f.High
}

// skipEntrypoint moves an ELFv2 global entry point to its local entry point.
func (b *Binary) skipEntrypoint(pc uint64) uint64 {
	if b.Arch.Name != "ppc64le" {
		return pc
	}
	for _, s := range b.syms.syms {
		if s.Addr == pc && s.Func && s.localEntry > 0 {
			return pc + s.localEntry
		}
	}
	return pc
}

// archSkipPrologue is the machine-specific prologue analysis gdb applies for gcc code.
func (b *Binary) archSkipPrologue(f *Function, pc uint64) uint64 {
	switch b.Arch.Machine {
	case elf.EM_X86_64:
		return b.amd64SkipPrologue(pc)
	case elf.EM_PPC64:
		if post := b.skipPrologueUsingLines(f); post != 0 && post > pc {
			return post
		}
		return pc
	}
	return pc
}

// amd64SkipPrologue recognises gcc's frame setup: an optional endbr64, "push %rbp" and
// "mov %rsp,%rbp". A function without that frame setup keeps its entry.
func (b *Binary) amd64SkipPrologue(start uint64) uint64 {
	buf := make([]byte, 8)
	n, _ := b.ReadCode(buf, start)
	buf = buf[:n]
	pc := 0
	if bytes.HasPrefix(buf, []byte{0xf3, 0x0f, 0x1e, 0xfa}) {
		pc = 4
	}
	if pc >= len(buf) || buf[pc] != 0x55 {
		return start
	}
	rest := buf[pc+1:]
	switch {
	case bytes.HasPrefix(rest, []byte{0x48, 0x89, 0xe5}), bytes.HasPrefix(rest, []byte{0x48, 0x8b, 0xec}):
		return start + uint64(pc) + 4
	case bytes.HasPrefix(rest, []byte{0x89, 0xe5}), bytes.HasPrefix(rest, []byte{0x8b, 0xec}):
		return start + uint64(pc) + 3
	}
	return start // push without frame setup: gdb treats the function as frameless
}

// skipPrologueUsingLines is gdb's skip_prologue_using_sal: the prologue ends where the line
// number first stops decreasing; 0 when the function is a single line.
func (b *Binary) skipPrologueUsingLines(f *Function) uint64 {
	start, end := f.rangeAt(f.Entry)
	psal, ok := b.LineForPC(start)
	if !ok {
		return 0
	}
	if lt, err := f.cu.lineTable(); err == nil && lt != nil {
		if lf := lt.byName[psal.File]; lf != nil {
			idx := 0
			for idx+1 < len(lf.entries) && (lf.entries[idx].addr != psal.Addr || lf.entries[idx].line == 0) {
				idx++
			}
			if idx+1 < len(lf.entries) && lf.entries[idx+1].line != 0 && lf.entries[idx+1].addr == start {
				return start
			}
		}
	}
	if psal.End >= end {
		return 0
	}
	for psal.End < end {
		sal, ok := b.LineForPC(psal.End)
		if !ok || sal.End <= psal.End {
			break
		}
		if sal.Line >= psal.Line || sal.File != psal.File {
			break
		}
		if blk := b.innermostBlock(psal.End); blk != nil && blk.inlinedAncestor() {
			break
		}
		psal = sal
	}
	if psal.End < end {
		return psal.End
	}
	return psal.Addr
}

// inlinedAncestor reports whether the scope is, or is inside, an inlined call (below the
// function).
func (s *scope) inlinedAncestor() bool {
	for x := s; x != nil; x = x.parent {
		if x.kind == scopeInlined {
			return true
		}
		if x.kind == scopeFunction {
			return false
		}
	}
	return false
}

// inlineInstance is an inlined copy of a function.
type inlineInstance struct {
	name  string
	entry uint64
}

// inlinedInstances returns the inlined copies of the given functions (matched by their
// abstract DIEs). The index of inlined calls is built on first use by reading every function.
func (b *Binary) inlinedInstances(fs []*Function) []inlineInstance {
	b.inlOnce.Do(func() {
		b.inlByOrigin = map[dwarf.Offset][]inlineInstance{}
		b.inlByName = map[string][]inlineInstance{}
		for _, f := range b.funcs {
			root, err := f.scopeTree()
			if err != nil {
				continue
			}
			var walk func(s *scope)
			walk = func(s *scope) {
				for _, c := range s.children {
					if c.kind == scopeInlined && c.origin != 0 && len(c.ranges) > 0 {
						in := inlineInstance{name: c.name, entry: c.ranges[0][0]}
						b.inlByOrigin[c.origin] = append(b.inlByOrigin[c.origin], in)
						b.inlByName[c.name] = append(b.inlByName[c.name], in)
						if u := unqualified(c.name); u != c.name {
							b.inlByName[u] = append(b.inlByName[u], in)
						}
					}
					walk(c)
				}
			}
			walk(root)
		}
	})
	var out []inlineInstance
	for _, f := range fs {
		origin := f.off
		if f.origin != 0 {
			origin = f.origin
		}
		out = append(out, b.inlByOrigin[origin]...)
		if f.spec != 0 && f.origin == 0 {
			out = append(out, b.inlByOrigin[f.spec]...)
		}
	}
	return out
}
