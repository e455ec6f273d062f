package cfi

import (
	"encoding/binary"
	"errors"
	"fmt"
)

var errTruncated = errors.New("truncated")

// reader decodes the primitive encodings of CFI; the first failure sticks in err and later
// reads return zero.
type reader struct {
	b     []byte
	off   int
	order binary.ByteOrder
	err   error
}

func (r *reader) need(n int) bool {
	if r.err != nil {
		return false
	}
	if n < 0 || r.off+n > len(r.b) || r.off+n < r.off {
		r.err = errTruncated
		return false
	}
	return true
}

func (r *reader) u8() byte {
	if !r.need(1) {
		return 0
	}
	v := r.b[r.off]
	r.off++
	return v
}

func (r *reader) u16() uint16 {
	if !r.need(2) {
		return 0
	}
	v := r.order.Uint16(r.b[r.off:])
	r.off += 2
	return v
}

func (r *reader) u32() uint32 {
	if !r.need(4) {
		return 0
	}
	v := r.order.Uint32(r.b[r.off:])
	r.off += 4
	return v
}

func (r *reader) u64() uint64 {
	if !r.need(8) {
		return 0
	}
	v := r.order.Uint64(r.b[r.off:])
	r.off += 8
	return v
}

func (r *reader) skip(n int) {
	if r.need(n) {
		r.off += n
	}
}

func (r *reader) uleb() uint64 {
	var v uint64
	var shift uint
	for {
		if !r.need(1) {
			return 0
		}
		c := r.b[r.off]
		r.off++
		if shift < 64 {
			v |= uint64(c&0x7f) << shift
		}
		shift += 7
		if c&0x80 == 0 {
			return v
		}
	}
}

func (r *reader) sleb() int64 {
	var v int64
	var shift uint
	for {
		if !r.need(1) {
			return 0
		}
		c := r.b[r.off]
		r.off++
		if shift < 64 {
			v |= int64(c&0x7f) << shift
		}
		shift += 7
		if c&0x80 == 0 {
			if shift < 64 && c&0x40 != 0 {
				v |= -1 << shift
			}
			return v
		}
	}
}

func (r *reader) cstring() string {
	start := r.off
	for {
		if !r.need(1) {
			return ""
		}
		c := r.b[r.off]
		r.off++
		if c == 0 {
			return string(r.b[start : r.off-1])
		}
	}
}

// encoded reads a pointer in DW_EH_PE encoding enc. Only pc-relative, data- and text-relative
// applications are resolvable statically; an indirect pointer is returned unresolved (it
// only occurs for personality routines, whose value the unwinder does not need).
func (r *reader) encoded(enc byte, o Options, funcBase uint64) (uint64, error) {
	if enc == peOmit {
		return 0, nil
	}
	pos := o.Addr + uint64(r.off)
	if enc&0x70 == peAligned {
		a := o.PtrSize
		for r.off%a != 0 {
			r.off++
		}
		pos = o.Addr + uint64(r.off)
	}
	var v uint64
	switch enc & 0x0f {
	case peAbsptr:
		if o.PtrSize == 4 {
			v = uint64(r.u32())
		} else {
			v = r.u64()
		}
	case peULEB:
		v = r.uleb()
	case peUdata2:
		v = uint64(r.u16())
	case peUdata4:
		v = uint64(r.u32())
	case peUdata8:
		v = r.u64()
	case peSLEB:
		v = uint64(r.sleb())
	case peSdata2:
		v = uint64(int64(int16(r.u16())))
	case peSdata4:
		v = uint64(int64(int32(r.u32())))
	case peSdata8:
		v = r.u64()
	default:
		return 0, fmt.Errorf("unknown pointer encoding %#x", enc)
	}
	if r.err != nil {
		return 0, r.err
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
