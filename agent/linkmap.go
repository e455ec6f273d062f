package agent

import (
	"github.com/hpcdap/hpcdap/cdti"
	"github.com/hpcdap/hpcdap/procimage"
)

// getLinkMap answers GetLinkMap: the dynamic linker's link map walked here, with the reader
// the front end uses over CDTI (procimage), through the process's memory as its program has
// it. It only reads: whatever fails, the process is as it was.
func (p *proc) getLinkMap(tid uint32, c *cdti.GetLinkMap) cdti.Result {
	im := procimage.Image{Mem: imageMemory{p}, Layout: procimage.Layout{Order: p.info.ByteOrder, PtrSize: p.info.PtrSize}}
	if im.Order == nil || (im.PtrSize != 4 && im.PtrSize != 8) {
		return fail(cdti.CmdInval, tid) // a target whose words this agent cannot decode
	}
	rdebug := c.RDebug
	if c.Dynamic != 0 && int(c.DynamicSize) < 2*im.PtrSize {
		return fail(cdti.CmdParmErr, tid) // not one dynamic entry
	}
	if rdebug == 0 {
		dyn, size := c.Dynamic, uint64(c.DynamicSize)
		if dyn == 0 {
			ex, err := im.Executable(procimage.AuxvFromWords(p.auxWords()))
			if err != nil {
				return fail(cdti.CmdParmErr, tid)
			}
			if ex.Dynamic == 0 {
				return ok(&cdti.GetLinkMapAck{ThreadID: tid}) // a static program: no link map
			}
			dyn, size = ex.Dynamic, ex.DynamicSize
		}
		var err error
		if rdebug, err = im.DebugAddr(dyn, size); err != nil {
			return fail(cdti.CmdParmErr, tid)
		}
		if rdebug == 0 {
			return fail(cdti.CmdAddrErr, tid) // the dynamic linker has not set r_debug up yet
		}
	}
	rd, err := im.RDebug(rdebug)
	if err != nil {
		return fail(cdti.CmdParmErr, tid)
	}
	// A name that cannot be read leaves its entry out, as the front end's own walk does.
	objs, err := im.LinkObjects(rd.Map, func(e procimage.LinkEntry) (string, error) {
		name, _ := im.CString(e.Name, procimage.MaxPath)
		return name, nil
	})
	if err != nil || len(objs) > cdti.MaxLinkMapEntries { // (procimage's own bound is the same)
		return fail(cdti.CmdParmErr, tid)
	}
	a := &cdti.GetLinkMapAck{ThreadID: tid, RDebug: rdebug, Brk: rd.Brk, State: uint32(rd.State),
		Entries: make([]cdti.LinkMapEntry, len(objs))}
	for i, o := range objs {
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

// imageMemory reads the process for procimage, as its program has it.
type imageMemory struct{ p *proc }

func (m imageMemory) ReadAt(b []byte, addr uint64) (int, error) {
	return programMemory{m.p}.ReadMemory(addr, b)
}
