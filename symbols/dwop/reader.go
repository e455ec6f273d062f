package dwop

import (
	"encoding/binary"
	"errors"
)

var errTruncated = errors.New("expression truncated")

// reader decodes operands; the first failure sticks in err.
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
		r.off = len(r.b)
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

func (r *reader) addr(size int) uint64 {
	if size == 4 {
		return uint64(r.u32())
	}
	return r.u64()
}

func (r *reader) offset(is64 bool) uint64 {
	if is64 {
		return r.u64()
	}
	return uint64(r.u32())
}

func (r *reader) bytes(n uint64) []byte {
	if n > uint64(len(r.b)) || !r.need(int(n)) {
		r.err = errTruncated
		r.off = len(r.b)
		return nil
	}
	b := r.b[r.off : r.off+int(n)]
	r.off += int(n)
	return b
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

// jump moves by a signed displacement relative to the current offset.
func (r *reader) jump(d int) error {
	n := r.off + d
	if n < 0 || n > len(r.b) {
		return errors.New("dwop: branch outside the expression")
	}
	r.off = n
	return nil
}

// Disassemble renders an expression as "DW_OP_breg7 8; DW_OP_deref" for messages and tests.
func Disassemble(expr []byte, order binary.ByteOrder, addrSize int) string {
	r := &reader{b: expr, order: order}
	var out []byte
	for r.off < len(r.b) && r.err == nil {
		if len(out) > 0 {
			out = append(out, "; "...)
		}
		op := r.u8()
		out = append(out, OpName(op)...)
		arg := func(v int64) { out = append(out, ' '); out = appendInt(out, v) }
		switch {
		case op >= OpBreg0 && op <= OpBreg31:
			arg(r.sleb())
			continue
		case op >= OpLit0 && op <= OpReg31:
			continue
		}
		switch op {
		case OpAddr:
			arg(int64(r.addr(addrSize)))
		case OpConst1u, OpPick, OpDerefSize:
			arg(int64(r.u8()))
		case OpConst1s:
			arg(int64(int8(r.u8())))
		case OpConst2u:
			arg(int64(r.u16()))
		case OpConst2s, OpBra, OpSkip:
			arg(int64(int16(r.u16())))
		case OpConst4u:
			arg(int64(r.u32()))
		case OpConst4s:
			arg(int64(int32(r.u32())))
		case OpConst8u, OpConst8s:
			arg(int64(r.u64()))
		case OpConstu, OpPlusUconst, OpRegx, OpPiece, OpAddrx, OpConstx:
			arg(int64(r.uleb()))
		case OpConsts, OpFbreg:
			arg(r.sleb())
		case OpBregx:
			arg(int64(r.uleb()))
			arg(r.sleb())
		case OpBitPiece:
			arg(int64(r.uleb()))
			arg(int64(r.uleb()))
		case OpImplicitValue, OpEntryValue, OpGNUEntryValue:
			n := r.uleb()
			sub := r.bytes(n)
			if op == OpImplicitValue {
				arg(int64(n))
			} else {
				out = append(out, " ("+Disassemble(sub, order, addrSize)+")"...)
			}
		default:
			// Operations with more complex operands are shown by name only; stop here
			// because their operand length is not decoded.
			if op != OpDeref && op != OpStackValue && op != OpCallFrameCFA && op != OpNop &&
				op != OpPushObjectAddress && op != OpFormTLSAddress && op != OpGNUPushTLSAddress &&
				!(op >= OpDup && op <= OpXor) && !(op >= OpEq && op <= OpNe) {
				return string(out) + " ..."
			}
		}
	}
	return string(out)
}

func appendInt(b []byte, v int64) []byte {
	if v < 0 {
		b = append(b, '-')
		v = -v
	}
	var tmp [20]byte
	i := len(tmp)
	for {
		i--
		tmp[i] = byte('0' + v%10)
		v /= 10
		if v == 0 {
			break
		}
	}
	return append(b, tmp[i:]...)
}
