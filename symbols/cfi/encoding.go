package cfi

import (
	"fmt"

	"github.com/hpcdap/hpcdap/symbols/dwbuf"
)

// encoded reads a pointer in DW_EH_PE encoding enc. Only pc-relative, data- and text-relative
// applications are resolvable statically; an indirect pointer is returned unresolved (it
// only occurs for personality routines, whose value the unwinder does not need).
func encoded(r *dwbuf.Buf, enc byte, o Options, funcBase uint64) (uint64, error) {
	if enc == peOmit {
		return 0, nil
	}
	pos := o.Addr + uint64(r.Off)
	if enc&0x70 == peAligned {
		a := o.PtrSize
		for r.Off%a != 0 {
			r.Off++
		}
		pos = o.Addr + uint64(r.Off)
	}
	var v uint64
	switch enc & 0x0f {
	case peAbsptr:
		if o.PtrSize == 4 {
			v = uint64(r.U32())
		} else {
			v = r.U64()
		}
	case peULEB:
		v = r.Uleb()
	case peUdata2:
		v = uint64(r.U16())
	case peUdata4:
		v = uint64(r.U32())
	case peUdata8:
		v = r.U64()
	case peSLEB:
		v = uint64(r.Sleb())
	case peSdata2:
		v = uint64(int64(int16(r.U16())))
	case peSdata4:
		v = uint64(int64(int32(r.U32())))
	case peSdata8:
		v = r.U64()
	default:
		return 0, fmt.Errorf("unknown pointer encoding %#x", enc)
	}
	if r.Err != nil {
		return 0, r.Err
	}
	switch enc & 0x70 {
	case 0, peAligned:
	case pePCRel:
		v += pos
	case peTextRel:
		v += o.TextRel
	case peDataRel:
		v += o.DataRel
	case peFuncRel:
		v += funcBase
	default:
		return 0, fmt.Errorf("unknown pointer application %#x", enc&0x70)
	}
	if o.PtrSize == 4 {
		v &= 0xffffffff
	}
	return v, nil
}
