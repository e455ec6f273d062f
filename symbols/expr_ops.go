package symbols

import (
	"errors"
	"fmt"
	"math"
)

func (e *evaluator) unary(n *node) (*Value, error) {
	x, err := e.eval(n.kids[0])
	if err != nil {
		return nil, err
	}
	if n.text != "&" {
		x = rval(x)
	}
	switch n.text {
	case "*":
		d, err := x.Deref()
		if err != nil {
			if s := x.Type.Strip(); s != nil && s.Kind == KindArray {
				return x.Index(s.Dims[0].lower())
			}
			return nil, err
		}
		return e.resolve(d)
	case "&":
		if s := x.Type.Strip(); s != nil && s.Kind == KindFunc {
			if a, ok := x.Address(); ok {
				pt := &Type{Kind: KindPointer, Size: int64(e.p.Arch.PtrSize), Elem: x.Type, Lang: e.lang}
				return e.mkInt(pt, a), nil
			}
		}
		return x.AddressOf()
	case "!":
		t, err := truth(x)
		if err != nil {
			return nil, err
		}
		return e.mkBool(!t), nil
	}
	if x.optOut {
		return nil, ErrOptimizedOut
	}
	if isFloatType(x.Type) {
		f, err := x.Float()
		if err != nil {
			return nil, err
		}
		switch n.text {
		case "-":
			return e.mkFloat(x.Type.Strip(), -f), nil
		case "+":
			return e.mkFloat(x.Type.Strip(), f), nil
		}
		return nil, fmt.Errorf("Argument to complement operation not an integer, boolean.")
	}
	if !isIntegral(x.Type) {
		return nil, fmt.Errorf("Argument to arithmetic operation not a number or boolean.")
	}
	t := e.promote1(x.Type)
	u, err := e.intOf(x)
	if err != nil {
		return nil, err
	}
	switch n.text {
	case "-":
		u = -u
	case "~":
		u = ^u
	}
	return e.mkInt(t, u), nil
}

// intOf returns an integral value sign- or zero-extended to 64 bits.
func (e *evaluator) intOf(v *Value) (uint64, error) {
	if signed(v.Type.Strip()) {
		i, err := v.Int()
		return uint64(i), err
	}
	return v.Uint()
}

// promote1 is C's integer promotion of one operand (promotedInt) as a type of the program's
// language.
func (e *evaluator) promote1(t *Type) *Type {
	if e.lang == LangFortran {
		return e.longType(false)
	}
	return e.intTypeOf(promotedInt(t))
}

// promote2 is the usual arithmetic conversion of two integral operands (convertedInt), as
// gdb's binop_promote does it.
func (e *evaluator) promote2(a, b *Type) *Type {
	size, sgn := convertedInt(a, b)
	if e.lang == LangFortran {
		return e.longType(!sgn)
	}
	return e.intTypeOf(size, sgn)
}

// intTypeOf is the C integer type of size bytes (int, or long above 4) and signedness.
func (e *evaluator) intTypeOf(size int64, sgn bool) *Type {
	switch {
	case size > 4:
		return e.longType(!sgn)
	case sgn:
		return e.builtin("int")
	}
	return e.builtin("unsigned int")
}

func (e *evaluator) binary(n *node) (*Value, error) {
	op := n.text
	if op == "&&" || op == "||" {
		a, err := e.eval(n.kids[0])
		if err != nil {
			return nil, err
		}
		ta, err := truth(a)
		if err != nil {
			return nil, err
		}
		// The right operand is evaluated even when it does not decide the result, as gdb
		// does to learn its type: its errors (an optimized-out variable) surface.
		b, err := e.eval(n.kids[1])
		if err != nil {
			return nil, err
		}
		if op == "&&" && !ta {
			return e.mkBool(false), nil
		}
		if op == "||" && ta {
			if _, err := b.Bytes(); err != nil {
				return nil, err
			}
			return e.mkBool(true), nil
		}
		tb, err := truth(b)
		if err != nil {
			return nil, err
		}
		return e.mkBool(tb), nil
	}
	a, err := e.eval(n.kids[0])
	if err != nil {
		return nil, err
	}
	b, err := e.eval(n.kids[1])
	if err != nil {
		return nil, err
	}
	if op == "," {
		return b, nil
	}
	if op == "@" {
		return e.artificialArray(a, b)
	}
	return e.arith(op, a, b)
}

// arith applies a binary arithmetic, comparison or bit operator with C's conversions.
func (e *evaluator) arith(op string, a, b *Value) (*Value, error) {
	a, b = rval(a), rval(b)
	if a.optOut || b.optOut {
		return nil, ErrOptimizedOut
	}
	// Pointer arithmetic and comparisons.
	if isPointerish(a.Type) || isPointerish(b.Type) {
		return e.pointerArith(op, a, b)
	}
	if !(isIntegral(a.Type) || isFloatType(a.Type)) || !(isIntegral(b.Type) || isFloatType(b.Type)) {
		return nil, fmt.Errorf("Argument to arithmetic operation not a number or boolean.")
	}
	if isFloatType(a.Type) || isFloatType(b.Type) {
		t := a.Type.Strip()
		switch {
		case !isFloatType(a.Type):
			t = b.Type.Strip()
		case isFloatType(b.Type) && b.Type.Strip().Size > t.Size:
			t = b.Type.Strip()
		}
		x, err := numAsFloat(e, a)
		if err != nil {
			return nil, err
		}
		y, err := numAsFloat(e, b)
		if err != nil {
			return nil, err
		}
		if t.Size == 4 {
			x, y = float64(float32(x)), float64(float32(y))
		}
		switch op {
		case "+":
			return e.mkFloat(t, x+y), nil
		case "-":
			return e.mkFloat(t, x-y), nil
		case "*":
			return e.mkFloat(t, x*y), nil
		case "/":
			return e.mkFloat(t, x/y), nil
		case "**":
			return e.mkFloat(t, math.Pow(x, y)), nil
		case "==":
			return e.mkBool(x == y), nil
		case "!=":
			return e.mkBool(x != y), nil
		case "<":
			return e.mkBool(x < y), nil
		case ">":
			return e.mkBool(x > y), nil
		case "<=":
			return e.mkBool(x <= y), nil
		case ">=":
			return e.mkBool(x >= y), nil
		}
		return nil, fmt.Errorf("Integer only operation %s.", op)
	}
	t := e.promote2(a.Type, b.Type)
	if op == "<<" || op == ">>" {
		t = e.promote1(a.Type)
	}
	x, err := e.intOf(a)
	if err != nil {
		return nil, err
	}
	y, err := e.intOf(b)
	if err != nil {
		return nil, err
	}
	unsigned := t.Kind == KindUint
	bits := uint(t.Size * 8)
	trunc := func(u uint64) uint64 {
		if bits >= 64 {
			return u
		}
		u &= 1<<bits - 1
		if !unsigned && u&(1<<(bits-1)) != 0 {
			u |= ^uint64(0) << bits
		}
		return u
	}
	x, y = trunc(x), trunc(y)
	sx, sy := int64(x), int64(y)
	less := func() bool {
		if unsigned {
			return x < y
		}
		return sx < sy
	}
	switch op {
	case "+":
		return e.mkInt(t, trunc(x+y)), nil
	case "-":
		return e.mkInt(t, trunc(x-y)), nil
	case "*":
		return e.mkInt(t, trunc(x*y)), nil
	case "/", "%":
		if y == 0 {
			return nil, errors.New("Division by zero")
		}
		var r uint64
		switch {
		case unsigned && op == "/":
			r = x / y
		case unsigned:
			r = x % y
		case op == "/":
			r = uint64(sx / sy)
		default:
			r = uint64(sx % sy)
		}
		return e.mkInt(t, trunc(r)), nil
	case "**":
		r := int64(1)
		for i := int64(0); i < sy; i++ {
			r *= sx
		}
		return e.mkInt(t, trunc(uint64(r))), nil
	case "&":
		return e.mkInt(t, x&y), nil
	case "|":
		return e.mkInt(t, x|y), nil
	case "^":
		return e.mkInt(t, x^y), nil
	case "<<":
		return e.mkInt(t, trunc(x<<(y&63))), nil
	case ">>":
		if unsigned {
			return e.mkInt(t, x>>(y&63)), nil
		}
		return e.mkInt(t, trunc(uint64(sx>>(y&63)))), nil
	case "==":
		return e.mkBool(x == y), nil
	case "!=":
		return e.mkBool(x != y), nil
	case "<":
		return e.mkBool(less()), nil
	case ">=":
		return e.mkBool(!less()), nil
	case ">":
		return e.mkBool(!less() && x != y), nil
	case "<=":
		return e.mkBool(less() || x == y), nil
	}
	return nil, fmt.Errorf("unsupported operator %s", op)
}

func numAsFloat(e *evaluator, v *Value) (float64, error) {
	if isFloatType(v.Type) {
		return v.Float()
	}
	u, err := e.intOf(v)
	if err != nil {
		return 0, err
	}
	s := v.Type.Strip()
	if s.Kind == KindUint || (s.Kind == KindChar && s.Encoding == ateUnsignedChar) {
		return float64(u), nil
	}
	return float64(int64(u)), nil
}

// pointerOf returns the address and pointee type of a pointer or (decayed) array operand.
func (e *evaluator) pointerOf(v *Value) (uint64, *Type, error) {
	s := v.Type.Strip()
	if s.Kind == KindArray {
		a, ok := v.Address()
		if !ok {
			return 0, nil, fmt.Errorf("Attempt to take address of value not located in memory.")
		}
		return a, s.Elem, nil
	}
	u, err := v.Uint()
	return u, s.Elem, err
}

func (e *evaluator) pointerArith(op string, a, b *Value) (*Value, error) {
	pa, pb := isPointerish(a.Type), isPointerish(b.Type)
	switch {
	case pa && pb:
		x, ta, err := e.pointerOf(a)
		if err != nil {
			return nil, err
		}
		y, _, err := e.pointerOf(b)
		if err != nil {
			return nil, err
		}
		switch op {
		case "-":
			sz := ta.Size
			if sz <= 0 {
				sz = 1
			}
			return e.mkInt(e.longType(false), uint64((int64(x)-int64(y))/sz)), nil
		case "==":
			return e.mkBool(x == y), nil
		case "!=":
			return e.mkBool(x != y), nil
		case "<":
			return e.mkBool(x < y), nil
		case ">":
			return e.mkBool(x > y), nil
		case "<=":
			return e.mkBool(x <= y), nil
		case ">=":
			return e.mkBool(x >= y), nil
		}
		return nil, fmt.Errorf("Argument to arithmetic operation not a number or boolean.")
	case pa && isIntegral(b.Type) && (op == "+" || op == "-"):
		return e.offsetPointer(a, b, op == "-")
	case pb && isIntegral(a.Type) && op == "+":
		return e.offsetPointer(b, a, false)
	case op == "==" || op == "!=":
		// Pointer compared with an integer (usually 0).
		p, i := a, b
		if pb {
			p, i = b, a
		}
		x, _, err := e.pointerOf(p)
		if err != nil {
			return nil, err
		}
		y, err := e.intOf(i)
		if err != nil {
			return nil, err
		}
		return e.mkBool((x == y) == (op == "==")), nil
	}
	return nil, fmt.Errorf("Argument to arithmetic operation not a number or boolean.")
}

func (e *evaluator) offsetPointer(p, i *Value, neg bool) (*Value, error) {
	addr, et, err := e.pointerOf(p)
	if err != nil {
		return nil, err
	}
	k, err := e.intOf(i)
	if err != nil {
		return nil, err
	}
	sz := et.Size
	if et.Strip() == nil || et.Strip().Kind == KindVoid || sz <= 0 {
		sz = 1
	}
	off := int64(k) * sz
	if neg {
		off = -off
	}
	t := p.Type
	if s := t.Strip(); s.Kind == KindArray {
		t = &Type{Kind: KindPointer, Size: int64(e.p.Arch.PtrSize), Elem: s.Elem, Lang: e.lang}
	}
	return e.mkInt(t, addr+uint64(off)), nil
}

// artificialArray is gdb's "x@n": n objects of x's type starting at x's address.
func (e *evaluator) artificialArray(a, b *Value) (*Value, error) {
	n, err := b.Int()
	if err != nil {
		return nil, err
	}
	if n <= 0 {
		return nil, fmt.Errorf("Only values in memory can be extended with '@'.")
	}
	addr, ok := a.Address()
	if !ok {
		return nil, fmt.Errorf("Only values in memory can be extended with '@'.")
	}
	t := &Type{Kind: KindArray, Elem: a.Type, Lang: e.lang, Size: a.Type.Size * n,
		Dims: []Dim{{Count: DynAttr{Set: true, Const: n}}}}
	v := newMemValue(e.p, a.mod, e.f, t, addr)
	v.Name = a.Name + "@" + fmt.Sprint(n)
	return v, nil
}

// convert casts a value to type t (base types, pointers, enums).
func (e *evaluator) convert(v *Value, t *Type) (*Value, error) {
	v = rval(v)
	s := t.Strip()
	if s == nil {
		return nil, fmt.Errorf("Invalid cast.")
	}
	if v.optOut {
		return optimizedOut(e.p, e.mod, e.f, t), nil
	}
	vs := v.Type.Strip()
	switch s.Kind {
	case KindFloat:
		f, err := numAsFloat(e, v)
		if err != nil {
			return nil, err
		}
		if s.Size != 4 && s.Size != 8 {
			return nil, fmt.Errorf("cast to %d-byte floating point is not supported", s.Size)
		}
		r := e.mkFloat(s, f)
		r.Type = t
		return r, nil
	case KindInt, KindUint, KindChar, KindBool, KindEnum, KindPointer:
		var u uint64
		switch {
		case isFloatType(v.Type):
			f, err := v.Float()
			if err != nil {
				return nil, err
			}
			if s.Kind == KindUint || s.Kind == KindPointer {
				u = uint64(f)
			} else {
				u = uint64(int64(f))
			}
		case vs.Kind == KindArray || vs.Kind == KindFunc:
			a, ok := v.Address()
			if !ok {
				return nil, fmt.Errorf("Invalid cast.")
			}
			u = a
		case isIntegral(v.Type) || vs.Kind == KindPointer:
			x, err := e.intOf(v)
			if err != nil {
				return nil, err
			}
			u = x
		default:
			return nil, fmt.Errorf("Invalid cast.")
		}
		if s.Kind == KindBool && e.lang != LangFortran {
			if u != 0 {
				u = 1
			}
		}
		r := e.mkInt(t, u)
		if t.Size <= 0 {
			r = e.mkInt(s, u)
			r.Type = t
		}
		return r, nil
	case KindStruct, KindUnion, KindArray:
		if vs.Size == s.Size {
			if a, ok := v.Address(); ok {
				return newMemValue(e.p, v.mod, e.f, t, a), nil
			}
		}
	}
	return nil, fmt.Errorf("Invalid cast.")
}

// rval replaces a C++ reference by the object it refers to.
func rval(v *Value) *Value {
	if s := v.Type.Strip(); s != nil && (s.Kind == KindRef || s.Kind == KindRvalueRef) && !v.optOut && v.err == nil {
		if d, err := v.Deref(); err == nil {
			return d
		}
	}
	return v
}
