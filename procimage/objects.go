package procimage

import (
	"debug/elf"
	"fmt"
)

// Object is one ELF object loaded in a process.
type Object struct {
	Path    string // file name as the dynamic linker recorded it (the executable's is supplied by the caller)
	Bias    uint64 // load bias: run-time address − link-time address
	Dynamic uint64 // run-time address of its dynamic section (0 if unknown)
}

// MaxPath bounds the file names read from the link map.
const MaxPath = 4096

// Objects lists the ELF objects loaded in a process, the executable first: auxv → program
// headers (the executable's load bias) → PT_DYNAMIC → DT_DEBUG → r_debug → link map. exe
// names the executable (the list records it as ""). The dynamic linker fills DT_DEBUG before
// the program's entry point runs: before that (or for a static program) only the executable
// is listed.
func (im Image) Objects(aux Auxv, exe string) ([]Object, error) {
	ex, err := im.Executable(aux)
	if err != nil {
		return nil, err
	}
	main := Object{Path: exe, Bias: ex.Bias, Dynamic: ex.Dynamic}
	if ex.Dynamic == 0 {
		return []Object{main}, nil // static program
	}
	rdebug, err := im.DebugAddr(ex.Dynamic, ex.DynamicSize)
	if err != nil {
		return nil, err
	}
	if rdebug == 0 {
		return []Object{main}, nil // not yet filled in by the dynamic linker
	}
	rd, err := im.RDebug(rdebug)
	if err != nil {
		return nil, err
	}
	ents, err := im.LinkObjects(rd.Map, nil)
	if err != nil {
		return nil, err
	}
	objs := []Object{main}
	for i, e := range ents {
		if i == 0 && e.Path == "" {
			objs[0].Dynamic = e.Ld // the executable's own entry
		} else if e.Path != "" {
			objs = append(objs, Object{Path: e.Path, Bias: e.Addr, Dynamic: e.Ld})
		}
	}
	return objs, nil
}

// Executable is where the executable of a process lies, as its program headers in memory say.
type Executable struct {
	Bias        uint64 // load bias
	Dynamic     uint64 // run-time address of PT_DYNAMIC (0: a static program)
	DynamicSize uint64 // its p_memsz
}

// Executable finds the executable's load bias and dynamic section from the program headers the
// auxiliary vector points to (AT_PHDR, AT_PHNUM, AT_PHENT).
func (im Image) Executable(aux Auxv) (Executable, error) {
	ph, phAddr, err := im.ProgramHeaders(aux)
	if err != nil {
		return Executable{}, err
	}
	bias, err := ProgramBias(phAddr, ph, im.Layout)
	if err != nil {
		return Executable{}, err
	}
	ex := Executable{Bias: bias}
	for _, p := range ph {
		if p.Type == elf.PT_DYNAMIC {
			ex.Dynamic, ex.DynamicSize = bias+p.Vaddr, p.Memsz
			break
		}
	}
	return ex, nil
}

// LinkObject is one entry of the link map with its file name read.
type LinkObject struct {
	LinkEntry
	Path string // the name l_name points to ("" for the executable and for unnamed entries)
}

// NameReader reads the file name of a link-map entry; LinkObjects' callers pass one to reuse
// names already read, or to read them under other rules.
type NameReader func(e LinkEntry) (string, error)

// LinkObjects walks the link map from its first entry (r_debug.r_map) as LinkMap does and
// reads each entry's name with name; nil reads it with CString (at most MaxPath bytes), an
// unreadable name then being an error.
func (im Image) LinkObjects(first uint64, name NameReader) ([]LinkObject, error) {
	ents, err := im.LinkMap(first)
	if err != nil {
		return nil, err
	}
	if name == nil {
		name = func(e LinkEntry) (string, error) {
			s, err := im.CString(e.Name, MaxPath)
			if err != nil {
				return "", fmt.Errorf("procimage: l_name of link_map at %#x: %w", e.Node, err)
			}
			return s, nil
		}
	}
	out := make([]LinkObject, len(ents))
	for i, e := range ents {
		s, err := name(e)
		if err != nil {
			return nil, err
		}
		out[i] = LinkObject{LinkEntry: e, Path: s}
	}
	return out, nil
}
