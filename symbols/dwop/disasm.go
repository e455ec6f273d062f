package dwop

import (
	"encoding/binary"
	"errors"

	"github.com/hpcdap/hpcdap/symbols/dwbuf"
)

// jump moves by a signed displacement relative to the current offset.
func jump(r *dwbuf.Buf, d int) error {
	n := r.Off + d
	if n < 0 || n > len(r.Data) {
		return errors.New("dwop: branch outside the expression")
	}
	r.Off = n
	return nil
}

// Disassemble renders an expression as "DW_OP_breg7 8; DW_OP_deref" for messages and tests.
func Disassemble(expr []byte, order binary.ByteOrder, addrSize int) string {
	r := dwbuf.New(expr, 0, order)
	var out []byte
	for r.Off < len(r.Data) && r.Err == nil {
		if len(out) > 0 {
			out = append(out, "; "...)
		}
		op := r.U8()
		out = append(out, OpName(op)...)
		arg := func(v int64) { out = append(out, ' '); out = appendInt(out, v) }
		switch {
		case op >= OpBreg0 && op <= OpBreg31:
			arg(r.Sleb())
			continue
		case op >= OpLit0 && op <= OpReg31:
			continue
		}
		switch op {
		case OpAddr:
			arg(int64(r.Addr(addrSize)))
		case OpConst1u, OpPick, OpDerefSize:
			arg(int64(r.U8()))
		case OpConst1s:
			arg(int64(int8(r.U8())))
		case OpConst2u:
			arg(int64(r.U16()))
		case OpConst2s, OpBra, OpSkip:
			arg(int64(int16(r.U16())))
		case OpConst4u:
			arg(int64(r.U32()))
		case OpConst4s:
			arg(int64(int32(r.U32())))
		case OpConst8u, OpConst8s:
			arg(int64(r.U64()))
		case OpConstu, OpPlusUconst, OpRegx, OpPiece, OpAddrx, OpConstx:
			arg(int64(r.Uleb()))
		case OpConsts, OpFbreg:
			arg(r.Sleb())
		case OpBregx:
			arg(int64(r.Uleb()))
			arg(r.Sleb())
		case OpBitPiece:
			arg(int64(r.Uleb()))
			arg(int64(r.Uleb()))
		case OpImplicitValue, OpEntryValue, OpGNUEntryValue:
			n := r.Uleb()
			sub := r.Bytes(n)
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
