package dwop

import (
	"errors"
	"fmt"
	"math"
)

// Arithmetic on stack entries: generic (address-sized, signed for division and comparison)
// and typed (DWARF 5 base types, including floating point).

func isFloat(t *BaseType) bool { return t != nil && t.Encoding == ateFloat }

func isSigned(t *BaseType) bool {
	return t == nil || t.Encoding == ateSigned || t.Encoding == ateSignedChar
}

func toFloat(e entry) float64 {
	if e.t.Size == 4 {
		return float64(math.Float32frombits(uint32(e.v)))
	}
	return math.Float64frombits(e.v)
}

func fromFloat(f float64, t *BaseType) uint64 {
	if t.Size == 4 {
		return uint64(math.Float32bits(float32(f)))
	}
	return math.Float64bits(f)
}

// signExtend interprets v as a signed integer of the entry's size.
func signExtend(e entry, addrSize int) int64 {
	size := addrSize
	if e.t != nil {
		size = e.t.Size
	}
	if size >= 8 {
		return int64(e.v)
	}
	shift := 64 - 8*uint(size)
	return int64(e.v<<shift) >> shift
}

func convert(e entry, t *BaseType, addrSize int) entry {
	switch {
	case isFloat(e.t) && isFloat(t):
		return entry{v: fromFloat(toFloat(e), t), t: t}
	case isFloat(e.t):
		f := toFloat(e)
		if isSigned(t) {
			return entry{v: uint64(int64(f)), t: t}
		}
		return entry{v: uint64(f), t: t}
	case isFloat(t):
		if isSigned(e.t) {
			return entry{v: fromFloat(float64(signExtend(e, addrSize)), t), t: t}
		}
		return entry{v: fromFloat(float64(e.v), t), t: t}
	}
	v := e.v
	if isSigned(e.t) {
		v = uint64(signExtend(e, addrSize))
	}
	if t != nil && t.Size < 8 {
		v &= (1 << (8 * uint(t.Size))) - 1
	}
	return entry{v: v, t: t}
}

func (m *machine) unary(op byte) error {
	a, err := m.pop()
	if err != nil {
		return err
	}
	if isFloat(a.t) {
		f := toFloat(a)
		switch op {
		case OpAbs:
			f = math.Abs(f)
		case OpNeg:
			f = -f
		default:
			return errors.New("dwop: DW_OP_not on a floating-point value")
		}
		a.v = fromFloat(f, a.t)
	} else {
		switch op {
		case OpAbs:
			if s := signExtend(a, m.env.AddrSize); s < 0 {
				a.v = uint64(-s)
			}
		case OpNeg:
			a.v = uint64(-signExtend(a, m.env.AddrSize))
		case OpNot:
			a.v = ^a.v
		}
	}
	m.stack = append(m.stack, a)
	return nil
}

func (m *machine) binary(op byte) error {
	b, err := m.pop()
	if err != nil {
		return err
	}
	a, err := m.pop()
	if err != nil {
		return err
	}
	res := entry{t: a.t}
	if isFloat(a.t) || isFloat(b.t) {
		if !isFloat(a.t) || !isFloat(b.t) {
			return errors.New("dwop: arithmetic mixes floating-point and integer entries")
		}
		x, y := toFloat(a), toFloat(b)
		cmp := func(c bool) {
			res = entry{}
			if c {
				res.v = 1
			}
		}
		switch op {
		case OpPlus:
			res.v = fromFloat(x+y, a.t)
		case OpMinus:
			res.v = fromFloat(x-y, a.t)
		case OpMul:
			res.v = fromFloat(x*y, a.t)
		case OpDiv:
			res.v = fromFloat(x/y, a.t)
		case OpEq:
			cmp(x == y)
		case OpNe:
			cmp(x != y)
		case OpLt:
			cmp(x < y)
		case OpLe:
			cmp(x <= y)
		case OpGt:
			cmp(x > y)
		case OpGe:
			cmp(x >= y)
		default:
			return fmt.Errorf("dwop: %s on floating-point values", OpName(op))
		}
		m.stack = append(m.stack, res)
		return nil
	}
	sa, sb := signExtend(a, m.env.AddrSize), signExtend(b, m.env.AddrSize)
	signed := isSigned(a.t)
	cmp := func(lt, eq bool) {
		res = entry{}
		var c bool
		switch op {
		case OpEq:
			c = eq
		case OpNe:
			c = !eq
		case OpLt:
			c = lt
		case OpLe:
			c = lt || eq
		case OpGt:
			c = !lt && !eq
		case OpGe:
			c = !lt
		}
		if c {
			res.v = 1
		}
	}
	switch op {
	case OpAnd:
		res.v = a.v & b.v
	case OpOr:
		res.v = a.v | b.v
	case OpXor:
		res.v = a.v ^ b.v
	case OpPlus:
		res.v = a.v + b.v
	case OpMinus:
		res.v = a.v - b.v
	case OpMul:
		res.v = a.v * b.v
	case OpDiv:
		if b.v == 0 {
			return errors.New("dwop: division by zero")
		}
		if signed {
			res.v = uint64(sa / sb)
		} else {
			res.v = a.v / b.v
		}
	case OpMod:
		if b.v == 0 {
			return errors.New("dwop: modulo by zero")
		}
		if signed && a.t != nil {
			res.v = uint64(sa % sb)
		} else {
			res.v = a.v % b.v
		}
	case OpShl:
		if b.v >= 64 {
			res.v = 0
		} else {
			res.v = a.v << b.v
		}
	case OpShr:
		if b.v >= 64 {
			res.v = 0
		} else {
			res.v = a.v >> b.v
		}
	case OpShra:
		if b.v >= 64 {
			b.v = 63
		}
		res.v = uint64(sa >> b.v)
	case OpEq, OpNe, OpLt, OpLe, OpGt, OpGe:
		if signed {
			cmp(sa < sb, sa == sb)
		} else {
			cmp(a.v < b.v, a.v == b.v)
		}
	}
	if res.t == nil && m.env.AddrSize == 4 {
		res.v &= 0xffffffff
	}
	m.stack = append(m.stack, res)
	return nil
}
