package debugger

import (
	"context"
	"debug/elf"
	"errors"
	"fmt"

	"github.com/hpcdap/hpcdap/cdti"
	"github.com/hpcdap/hpcdap/procimage"
	"github.com/hpcdap/hpcdap/symbols"
)

// A rank's shared objects come from the dynamic linker's link map (r_debug, found through
// DT_DEBUG in the executable's dynamic section). An hpcdap agent walks it next to the process
// and answers the whole list to one GetLinkMap, sent with GetAuxVectors (readModulesLocked),
// and at the rank's first load with GetTargetInfo too (loadLocked): one exchange a rank;
// behind a CNK, or an agent that refuses it or whose list does not fit its answer, the front
// end walks it here, word group by word group and name by name over GetMemory (linkMap). Both
// walks are procimage's.

// linkMapAnswer takes the link map from an agent's answer to GetLinkMap. answered is false
// when the agent does not know the command (CmdInval), the list does not fit its answer
// (CmdLngthErr) or the agent could not walk it (CmdParmErr): the front end then walks the map
// itself.
// With consistent, a map the dynamic linker is changing is errLinkMapChanging.
func (rs *rankSymbols) linkMapAnswer(r cdti.Result, consistent bool) (libs []linkedObject, answered bool, err error) {
	switch r.Code {
	case cdti.CmdSuccess:
	case cdti.CmdInval, cdti.CmdLngthErr, cdti.CmdParmErr:
		// Walked here instead: an agent that does not know the command, a list over one
		// answer, or one the agent could not walk (a back end without the auxiliary vector
		// finds no dynamic section, where the front end's own ELF headers do).
		return nil, false, nil
	case cdti.CmdAddrErr:
		return nil, true, errors.New("r_debug not set up yet")
	default:
		return nil, true, fmt.Errorf("read the link map: %v", r.Code)
	}
	a, ok := r.Ack.(*cdti.GetLinkMapAck)
	if !ok {
		return nil, true, fmt.Errorf("read the link map: answered %T", r.Ack)
	}
	// Names are not remembered: the next list comes whole from the agent too, and a walk
	// here (a list grown too large) reads them all again.
	rs.lmNames = nil
	if a.RDebug == 0 {
		return nil, true, nil // a static executable
	}
	rs.rdebug, rs.rbrk = a.RDebug, a.Brk
	if consistent && procimage.RState(a.State) != procimage.RTConsistent {
		return nil, true, errLinkMapChanging
	}
	for i, e := range a.Entries {
		if e.Name != "" && i > 0 {
			libs = append(libs, linkedObject{path: e.Name, bias: e.Bias})
		}
	}
	return libs, true, nil
}

// errLinkMapChanging is a link map read while the dynamic linker is between the two r_brk
// calls that bracket every change (r_debug.r_state is RT_ADD or RT_DELETE): only the second
// call sees a consistent map worth taking.
var errLinkMapChanging = errors.New("the dynamic linker is changing the link map")

// image is the rank's process image read directly through CDTI (not through the per-stop
// cache: the link map changes while the rank runs).
func (rs *rankSymbols) image(ctx context.Context, arch *symbols.Arch) procimage.Image {
	return procimage.Image{Mem: cdtiImage{ctx: ctx, rs: rs},
		Layout: procimage.Layout{Order: arch.ByteOrder, PtrSize: arch.PtrSize}}
}

// cdtiImage reads a rank's memory with CDTI GetMemory for procimage.
type cdtiImage struct {
	ctx context.Context
	rs  *rankSymbols
}

func (m cdtiImage) ReadAt(p []byte, addr uint64) (int, error) {
	b, err := m.rs.client().ReadMemory(m.ctx, m.rs.num(), 0, addr, len(p), cdti.SpecAccessUseThreadState)
	return copy(p, b), err
}

// lmEntry identifies a link-map entry: its address, its name pointer and its load bias.
type lmEntry struct{ node, name, bias uint64 }

// linkedObject is one entry of the link map.
type linkedObject struct {
	path string
	bias uint64
}

// linkMap walks r_debug.r_map from the executable's DT_DEBUG entry. With consistent, a map
// the dynamic linker is changing is errLinkMapChanging.
func (rs *rankSymbols) linkMap(ctx context.Context, exe *symbols.Binary, bias uint64, consistent bool) ([]linkedObject, error) {
	dyn, ok := exe.ProgHeader(elf.PT_DYNAMIC)
	if !ok {
		return nil, nil // static executable
	}
	im := rs.image(ctx, rs.arch)
	rdebug := rs.rdebug // set once by the dynamic linker, never moved
	if rdebug == 0 {
		var err error
		if rdebug, err = im.DebugAddr(dyn.Vaddr+bias, min(dyn.Memsz, 8192)); err != nil {
			return nil, err
		}
		if rdebug == 0 {
			return nil, errors.New("r_debug not set up yet")
		}
		rs.rdebug = rdebug
	}
	rd, err := im.RDebug(rdebug)
	if err != nil {
		return nil, err
	}
	rs.rbrk = rd.Brk // the dynamic linker calls it around every change
	if consistent && rd.Changing() {
		return nil, errLinkMapChanging
	}
	names := map[lmEntry]string{}
	// Names already read are not read again; one that cannot be read leaves its entry out.
	ents, err := im.LinkObjects(rd.Map, func(e procimage.LinkEntry) (string, error) {
		key := lmEntry{node: e.Node, name: e.Name, bias: e.Addr}
		name, seen := rs.lmNames[key]
		if !seen {
			name, _ = im.CString(e.Name, procimage.MaxPath)
		}
		if name != "" {
			names[key] = name
		}
		return name, nil
	})
	if err != nil {
		return nil, err
	}
	var out []linkedObject
	for i, e := range ents {
		if e.Path != "" && i > 0 {
			out = append(out, linkedObject{path: e.Path, bias: e.Addr})
		}
	}
	rs.lmNames = nil
	if rs.libWait {
		rs.lmNames = names
	}
	return out, nil
}
