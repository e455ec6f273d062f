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
	ph, phAddr, err := im.ProgramHeaders(aux)
	if err != nil {
		return nil, err
	}
	bias, err := ProgramBias(phAddr, ph, im.Layout)
	if err != nil {
		return nil, err
	}
	main := Object{Path: exe, Bias: bias}
	var dyn *Prog
	for i := range ph {
		if ph[i].Type == elf.PT_DYNAMIC {
			dyn = &ph[i]
			break
		}
	}
	if dyn == nil {
		return []Object{main}, nil // static program
	}
	main.Dynamic = bias + dyn.Vaddr
	rdebug, err := im.DebugAddr(main.Dynamic, dyn.Memsz)
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
	ents, err := im.LinkMap(rd.Map)
	if err != nil {
		return nil, err
	}
	objs := []Object{main}
	for i, e := range ents {
		name, err := im.CString(e.Name, MaxPath)
		if err != nil {
			return nil, fmt.Errorf("procimage: l_name of link_map at %#x: %w", e.Node, err)
		}
		if i == 0 && name == "" {
			objs[0].Dynamic = e.Ld // the executable's own entry
		} else if name != "" {
			objs = append(objs, Object{Path: name, Bias: e.Addr, Dynamic: e.Ld})
		}
	}
	return objs, nil
}
