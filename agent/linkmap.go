package agent

import (
	"errors"
	"fmt"

	"github.com/hpcdap/hpcdap/cdti"
	"github.com/hpcdap/hpcdap/procimage"
)

// getLinkMap answers GetLinkMap: the dynamic linker's link map walked here, with the reader
// the front end uses over CDTI (procimage), through the process's memory as its program has
// it. It only reads: whatever fails, the process is as it was.
func (p *proc) getLinkMap(tid uint32, c *cdti.GetLinkMap) cdti.Result {
	im, decodable := p.image()
	if !decodable {
		return fail(cdti.CmdInval, tid) // a target whose words this agent cannot decode
	}
	if c.Dynamic != 0 && int(c.DynamicSize) < 2*im.PtrSize {
		return fail(cdti.CmdParmErr, tid) // not one dynamic entry
	}
	lm, code := p.walkLinkMap(im, c.Dynamic, uint64(c.DynamicSize), c.RDebug)
	if code != cdti.CmdSuccess {
		return fail(code, tid)
	}
	if lm.rdebug == 0 {
		return ok(&cdti.GetLinkMapAck{ThreadID: tid}) // a static program: no link map
	}
	a := &cdti.GetLinkMapAck{ThreadID: tid, RDebug: lm.rdebug, Brk: lm.rd.Brk, State: uint32(lm.rd.State),
		Entries: make([]cdti.LinkMapEntry, len(lm.objs))}
	for i, o := range lm.objs {
		if len(o.Path) > cdti.MaxExePathSize {
			return fail(cdti.CmdParmErr, tid)
		}
		a.Entries[i] = cdti.LinkMapEntry{Bias: o.Addr, Node: o.Node, Name: o.Path}
	}
	if a.EncodedSize() > int(c.Limit()) {
		return fail(cdti.CmdLngthErr, tid)
	}
	return ok(a)
}

// image is the process's memory as its program has it, for procimage; false for a target
// whose words this agent cannot decode.
func (p *proc) image() (procimage.Image, bool) {
	im := procimage.Image{Mem: imageMemory{p}, Layout: procimage.Layout{Order: p.info.ByteOrder, PtrSize: p.info.PtrSize}}
	return im, im.Order != nil && (im.PtrSize == 4 || im.PtrSize == 8)
}

// linkMap is a walk of the dynamic linker's link map: r_debug's address (0: a static
// program, which has none), r_debug, and its objects in link-map order.
type linkMap struct {
	rdebug uint64
	rd     procimage.RDebug
	objs   []procimage.LinkObject
}

// linkCache is what walks of a process's link map learned that holds for the life of its
// program image: r_debug's address, set once by the dynamic linker (0 until then). Entries'
// names are read at every walk: a library loaded where a closed one was can reuse its entry,
// its name's block, its bias and its dynamic section's place, and differ in its name alone.
type linkCache struct {
	rdebug uint64
}

// walkLinkMap walks the link map from r_debug at rdebug, or, when 0, from the dynamic section
// at dyn (size bytes), or, when 0 too, the one the auxiliary vector's program headers name.
func (p *proc) walkLinkMap(im procimage.Image, dyn, size, rdebug uint64) (linkMap, cdti.CmdReturnCode) {
	own := rdebug == 0 && dyn == 0 // found here, not told: kept for the next walk
	if own {
		rdebug = p.links.rdebug
	}
	if rdebug == 0 {
		if dyn == 0 {
			ex, err := im.Executable(procimage.AuxvFromWords(p.auxWords()))
			if err != nil {
				return linkMap{}, cdti.CmdParmErr
			}
			if ex.Dynamic == 0 {
				return linkMap{}, cdti.CmdSuccess // a static program: no link map
			}
			dyn, size = ex.Dynamic, ex.DynamicSize
		}
		var err error
		if rdebug, err = im.DebugAddr(dyn, size); err != nil {
			return linkMap{}, cdti.CmdParmErr
		}
		if rdebug == 0 {
			return linkMap{}, cdti.CmdAddrErr // the dynamic linker has not set r_debug up yet
		}
	}
	rd, err := im.RDebug(rdebug)
	if err != nil {
		return linkMap{}, cdti.CmdParmErr
	}
	// A name that cannot be read leaves its entry out, as the front end's own walk does.
	objs, err := im.LinkObjects(rd.Map, func(e procimage.LinkEntry) (string, error) {
		name, _ := im.CString(e.Name, procimage.MaxPath)
		return name, nil
	})
	if err != nil || len(objs) > cdti.MaxLinkMapEntries { // (procimage's own bound is the same)
		return linkMap{}, cdti.CmdParmErr
	}
	if own {
		p.links.rdebug = rdebug
	}
	return linkMap{rdebug: rdebug, rd: rd, objs: objs}, cdti.CmdSuccess
}

// moduleBiases returns the load bias of every module of the process by its link-map name,
// the executable's as "" (a static program's from its program headers); read once a stop.
func (p *proc) moduleBiases() (map[string]uint64, error) {
	stopped := p.allStopped()
	if stopped && p.biasesAt == p.evSeen+1 {
		return p.biases, nil
	}
	m, err := p.readModuleBiases()
	if err == nil && stopped {
		p.biases, p.biasesAt = m, p.evSeen+1
	}
	return m, err
}

// readModuleBiases is moduleBiases read from the process.
func (p *proc) readModuleBiases() (map[string]uint64, error) {
	im, decodable := p.image()
	if !decodable {
		return nil, errors.New("no image of this target")
	}
	lm, code := p.walkLinkMap(im, 0, 0, 0)
	if code != cdti.CmdSuccess {
		return nil, fmt.Errorf("link map: %v", code)
	}
	out := make(map[string]uint64, len(lm.objs)+1)
	for i, o := range lm.objs {
		if i == 0 {
			out[""] = o.Addr // the executable
		} else if o.Path != "" {
			out[o.Path] = o.Addr
		}
	}
	if lm.rdebug == 0 {
		ex, err := im.Executable(procimage.AuxvFromWords(p.auxWords()))
		if err != nil {
			return nil, err
		}
		out[""] = ex.Bias
	}
	return out, nil
}

// imageMemory reads the process for procimage, as its program has it.
type imageMemory struct{ p *proc }

func (m imageMemory) ReadAt(b []byte, addr uint64) (int, error) {
	return programMemory{m.p}.ReadMemory(addr, b)
}
