package symbols

import (
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// MappingOptions say how to turn a process's file mappings into modules.
type MappingOptions struct {
	// Executable is the program; when empty it is recognised among the mappings by Entry.
	Executable string
	// Entry is the process's AT_ENTRY (0 when unknown), used to find the load bias of a
	// position-independent executable that no mapping names.
	Entry uint64
	// Cache loads binaries (once per build-id); nil uses a private cache.
	Cache *Cache
	// SysRoot is prefixed to the mapped paths (objects of another machine or a copied root).
	SysRoot string
}

// ModulesFromMappings builds the module list of a process from its file-backed mappings — a
// core's NT_FILE note, or /proc/PID/maps as an agent reports it — loading each ELF object
// through the cache and placing it at the bias its first mapping implies. The executable
// comes first. Mapped files that are not ELF objects are ignored.
func ModulesFromMappings(files []MappedFile, opts *MappingOptions) ([]*Module, error) {
	if opts == nil {
		opts = &MappingOptions{}
	}
	cache := opts.Cache
	if cache == nil {
		cache = NewCache(nil)
	}
	// The mapping at file offset 0 of each file locates its ELF header.
	var objs []MappedFile
	seen := map[string]bool{}
	for _, f := range files {
		if f.Offset != 0 || seen[f.Path] {
			continue
		}
		seen[f.Path] = true
		objs = append(objs, f)
	}
	exe := opts.Executable
	var exeMod *Module
	if exe != "" {
		bin, err := cache.Open(exe)
		if err != nil {
			return nil, fmt.Errorf("executable: %w", err)
		}
		bias := uint64(0)
		found := false
		for _, o := range objs {
			if sameFile(o.Path, exe) {
				bias, found = o.Start-bin.linkBase(), true
				break
			}
		}
		if !found && opts.Entry != 0 && bin.Type == elf.ET_DYN {
			bias = opts.Entry - bin.rawEntry
		}
		exeMod = NewModule(bin, exe, bias)
	}
	var mods []*Module
	for _, o := range objs {
		if exeMod != nil && sameFile(o.Path, exe) {
			continue
		}
		p := o.Path
		if opts.SysRoot != "" {
			p = filepath.Join(opts.SysRoot, p)
		}
		bin, err := cache.Open(p)
		if err != nil {
			continue // not an ELF object (a data file mapped by the program) or missing
		}
		m := NewModule(bin, o.Path, o.Start-bin.linkBase())
		isExe := bin.Type == elf.ET_EXEC || (opts.Entry != 0 && bin.rawEntry+m.Bias == opts.Entry)
		if exeMod == nil && isExe {
			exeMod = m
			continue
		}
		mods = append(mods, m)
	}
	if exeMod == nil && len(mods) == 0 {
		return nil, errors.New("no executable given and none among the mappings")
	}
	if exeMod != nil {
		mods = append([]*Module{exeMod}, mods...)
	}
	return mods, nil
}

// sameFile reports whether two paths name one file.
func sameFile(a, b string) bool {
	if a == b {
		return true
	}
	sa, err1 := os.Stat(a)
	sb, err2 := os.Stat(b)
	return err1 == nil && err2 == nil && os.SameFile(sa, sb)
}
