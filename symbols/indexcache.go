package symbols

import (
	"bytes"
	"debug/dwarf"
	"debug/elf"
	"fmt"
	"strings"
)

// The persistent index cache keeps, per build-id, what indexing a binary's DWARF produced and
// the decompressed contents of its compressed DWARF sections, so that a later process (a new
// session) skips both the DIE walk and the inflating. Files without a build-id are not cached:
// nothing short of reading them would say that an entry is theirs. The store is indexstore.go,
// the file format indexcodec.go.

// dwarfSectionNames are the DWARF sections the package reads.
var dwarfSectionNames = []string{".debug_abbrev", ".debug_info", ".debug_str", ".debug_line",
	".debug_ranges", ".debug_aranges", ".debug_addr", ".debug_line_str", ".debug_str_offsets",
	".debug_rnglists", ".debug_types", ".debug_loc", ".debug_loclists"}

// dwarfLayout describes the DWARF sections of f as its section headers give them, under
// their .debug_ names (a legacy .zdebug section is flagged compressed).
func dwarfLayout(f *elf.File) []sectionFact {
	var out []sectionFact
	for _, n := range dwarfSectionNames {
		s := f.Section(n)
		flags := uint64(0)
		if s == nil || s.Type == elf.SHT_NOBITS {
			s = f.Section(".zdebug_" + strings.TrimPrefix(n, ".debug_"))
			flags = uint64(elf.SHF_COMPRESSED)
		}
		if s == nil || s.Type == elf.SHT_NOBITS {
			continue
		}
		out = append(out, sectionFact{name: n, offset: s.Offset, fileSize: s.FileSize, flags: flags | uint64(s.Flags)})
	}
	return out
}

// compressed reports whether reading the section means inflating it.
func (s sectionFact) compressed() bool { return s.flags&uint64(elf.SHF_COMPRESSED) != 0 }

// compressedSections returns the contents of the compressed sections, as read.
func (b *Binary) compressedSections(layout []sectionFact) map[string][]byte {
	out := map[string][]byte{}
	for _, s := range layout {
		if d, ok := b.secs.all[s.name]; ok && s.compressed() {
			out[s.name] = d
		}
	}
	return out
}

// cachedIndex returns the cache's entry for this binary (its units not decoded yet), or nil when there is none or it is
// not this file's: another build-id, other section headers (a foreign or stale file), or a
// compressed section missing.
func (b *Binary) cachedIndex(store indexStore, id string, layout []sectionFact) *indexSnapshot {
	data := store.load(id)
	if data == nil {
		return nil
	}
	snap, err := decodeIndexHead(data)
	if err != nil || !bytes.Equal(snap.buildID, b.BuildID) || len(snap.layout) != len(layout) {
		return nil
	}
	for i, s := range layout {
		if snap.layout[i] != s {
			return nil
		}
		if _, ok := snap.sections[s.name]; ok != s.compressed() {
			return nil
		}
	}
	if len(snap.sections) > len(layout) {
		return nil
	}
	return snap
}

// restoreIndex builds the binary's tables from cached units, after checking that every DIE
// offset they name lies in .debug_info and that each unit's DIE is where they say.
func (b *Binary) restoreIndex(scans []*cuScan) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("malformed DWARF: %v", r)
		}
	}()
	hdrs, _ := unitHeaders(b.secs.info, b.Arch.ByteOrder)
	b.warmUnits(hdrs)
	limit := dwarf.Offset(len(b.secs.info))
	for _, r := range scans {
		if err := r.checkOffsets(limit); err != nil {
			return err
		}
		cu := r.cu
		e, err := b.entryAt(cu.off)
		if err != nil {
			return err
		}
		if e.Tag != dwarf.TagCompileUnit && e.Tag != dwarf.TagPartialUnit {
			return fmt.Errorf("no unit DIE at %#x", cu.off)
		}
		cu.bin, cu.entry = b, e
	}
	b.merge(scans)
	for _, r := range scans {
		for _, f := range r.cu.files {
			b.files[f] = append(b.files[f], r.cu)
		}
	}
	return nil
}

// checkOffsets reports a DIE offset of the unit's index at or past limit.
func (r *cuScan) checkOffsets(limit dwarf.Offset) error {
	offs := []dwarf.Offset{r.cu.off}
	for _, f := range r.funcs {
		offs = append(offs, f.off, f.spec, f.origin)
	}
	for _, g := range r.globals {
		offs = append(offs, g.off, g.spec)
	}
	for _, list := range [][]typeDecl{r.types, r.enumerators, r.typeQual} {
		for _, t := range list {
			offs = append(offs, t.off)
		}
	}
	for _, d := range r.declParent {
		offs = append(offs, d[0], d[1])
	}
	for o := range r.declNames {
		offs = append(offs, o)
	}
	offs = append(offs, r.declExt...)
	for _, o := range offs {
		if o >= limit {
			return fmt.Errorf("DIE offset %#x past .debug_info (%#x bytes)", o, limit)
		}
	}
	return nil
}

// IndexStats counts, over the binaries the cache has finished opening, the indexes built from
// DWARF and those taken from the persistent index cache.
func (c *Cache) IndexStats() (built, cached int) {
	c.mu.Lock()
	seen := map[*cacheEntry]bool{}
	for _, e := range c.byID {
		seen[e] = true
	}
	for _, e := range c.byFile {
		seen[e] = true
	}
	c.mu.Unlock()
	for e := range seen {
		if !e.loaded.Load() || e.bin == nil {
			continue
		}
		st := e.bin.Stats()
		built += st.IndexBuilds
		if st.IndexCached {
			cached++
		}
	}
	return built, cached
}
