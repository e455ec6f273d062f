package symbols

import (
	"github.com/hpcdap/hpcdap/bpcode"
)

// Every word a compiled operand leaves on the stack is its value extended to 64 bits as its
// type says (signed: sign-extended, otherwise zero-extended); a float or double is the bits
// of a float64.

// scalar classifies a stripped type for arithmetic.
type scalar int

const (
	scNone scalar = iota
	scInt
	scFloat
	scPointer
)

func classify(t *Type) (scalar, *Type) {
	s := t.Strip()
	if s == nil {
		return scNone, nil
	}
	switch s.Kind {
	case KindInt, KindUint, KindBool, KindChar:
		return scInt, s
	case KindEnum:
		if s.Size > 0 {
			return scInt, s
		}
	case KindFloat:
		if s.Size == 4 || s.Size == 8 {
			return scFloat, s
		}
	case KindPointer:
		return scPointer, s
	}
	return scNone, s
}

// rvalue makes v a word on the stack. Arrays decay to a pointer to their first element.
func (c *compiler) rvalue(v cv) (cv, error) {
	if v.loc == locWord {
		return v, nil
	}
	k, s := classify(v.t)
	if s != nil && s.Kind == KindArray && v.loc == locMem {
		return cv{t: &Type{Kind: KindPointer, Size: int64(c.b.Arch.PtrSize), Elem: s.Elem}}, nil
	}
	if k == scNone {
		return cv{}, notCompiled("a value of type %s", typeLabel(v.t))
	}
	size := s.Size
	if size != 1 && size != 2 && size != 4 && size != 8 {
		return cv{}, notCompiled("a value of %d bytes", size)
	}
	if v.loc == locReg {
		if k == scFloat {
			return cv{}, notCompiled("a floating-point value in a register")
		}
		if err := c.reg(v.reg); err != nil {
			return cv{}, err
		}
	} else {
		c.bld.Sized(bpcode.OpLoad, int(size))
	}
	c.normalize(k, s)
	return cv{t: v.t}, nil
}

// normalize extends the word on the stack to the canonical form of its type.
func (c *compiler) normalize(k scalar, s *Type) {
	switch {
	case k == scFloat && s.Size == 4:
		c.bld.Emit(bpcode.OpF32)
	case k == scInt && s.Size < 8 && signed(s):
		c.bld.Sized(bpcode.OpSext, int(s.Size))
	case (k == scInt || k == scPointer) && s.Size < 8:
		c.bld.Sized(bpcode.OpZext, int(s.Size))
	}
}

func typeLabel(t *Type) string {
	if t == nil {
		return "void"
	}
	if t.Name != "" {
		return t.Name
	}
	if s := t.Strip(); s != nil && s.Keyword != "" {
		return s.Keyword
	}
	return "this kind"
}

// truth leaves 0 or 1 for the operand as C's if tests it.
func (c *compiler) truth(v cv) error {
	v, err := c.rvalue(v)
	if err != nil {
		return err
	}
	k, _ := classify(v.t)
	if k == scFloat {
		c.bld.Const(0)
		c.bld.Emit(bpcode.OpFNe)
		return nil
	}
	c.bld.Emit(bpcode.OpLNot)
	c.bld.Emit(bpcode.OpLNot)
	return nil
}

func (c *compiler) resultInt() cv { return cv{t: c.intType(4, true)} }

func (c *compiler) unary(n *node) (cv, error) {
	if n.text == "&" {
		v, err := c.expr(n.kids[0])
		if err != nil {
			return cv{}, err
		}
		if v.loc != locMem {
			return cv{}, notCompiled("the address of a value not in memory")
		}
		return cv{t: &Type{Kind: KindPointer, Size: int64(c.b.Arch.PtrSize), Elem: v.t}}, nil
	}
	if n.text == "!" {
		v, err := c.expr(n.kids[0])
		if err != nil {
			return cv{}, err
		}
		if err := c.truth(v); err != nil {
			return cv{}, err
		}
		c.bld.Emit(bpcode.OpLNot)
		return c.resultInt(), nil
	}
	v, err := c.expr(n.kids[0])
	if err != nil {
		return cv{}, err
	}
	if v, err = c.rvalue(v); err != nil {
		return cv{}, err
	}
	k, s := classify(v.t)
	switch n.text {
	case "*":
		if k != scPointer {
			return cv{}, notCompiled("dereference of a %s", typeLabel(v.t))
		}
		if s.Elem == nil || s.Elem.Strip() == nil {
			return cv{}, notCompiled("dereference of a void pointer")
		}
		return cv{t: s.Elem, loc: locMem}, nil
	case "+":
		return c.promote(v), nil
	case "-":
		if k == scFloat {
			c.bld.Emit(bpcode.OpFNeg)
			return cv{t: doubleType}, nil
		}
		if k != scInt {
			return cv{}, notCompiled("negation of a %s", typeLabel(v.t))
		}
		v = c.promote(v)
		c.bld.Emit(bpcode.OpNeg)
		_, ps := classify(v.t)
		c.normalize(scInt, ps)
		return v, nil
	case "~":
		if k != scInt {
			return cv{}, notCompiled("~ of a %s", typeLabel(v.t))
		}
		v = c.promote(v)
		c.bld.Emit(bpcode.OpNot)
		_, ps := classify(v.t)
		c.normalize(scInt, ps)
		return v, nil
	}
	return cv{}, notCompiled("operator %s", n.text)
}

// promote applies the integer promotions to an integer word (a no-op on the word itself).
func (c *compiler) promote(v cv) cv {
	k, _ := classify(v.t)
	if k == scInt && c.lang == LangFortran {
		return cv{t: c.intType(8, true)} // as the evaluator promotes Fortran's integers
	}
	if k == scInt {
		return cv{t: c.intType(promotedInt(v.t))}
	}
	if k == scFloat {
		return cv{t: doubleType}
	}
	return v
}

// arithType is the common type of two integer operands (the usual arithmetic conversions).
func (c *compiler) arithType(a, b *Type) *Type {
	size, sgn := convertedInt(a, b)
	if c.lang == LangFortran {
		size = 8
	}
	return c.intType(size, sgn)
}

func (c *compiler) binary(n *node) (cv, error) {
	switch n.text {
	case "&&", "||":
		return c.logical(n)
	}
	a, err := c.operand(n.kids[0])
	if err != nil {
		return cv{}, err
	}
	// The right operand's code follows the left's; a conversion of the left one, known only
	// after the right is compiled, is applied under it with swaps.
	b, err := c.operand(n.kids[1])
	if err != nil {
		return cv{}, err
	}
	ka, sa := classify(a.t)
	kb, sb := classify(b.t)
	op := n.text
	if ka == scPointer || kb == scPointer {
		return c.pointerOp(op, a, b, ka, kb, sa, sb)
	}
	if ka == scNone || kb == scNone {
		return cv{}, notCompiled("operator %s on %s and %s", op, typeLabel(a.t), typeLabel(b.t))
	}
	if ka == scFloat || kb == scFloat {
		if kb != scFloat {
			c.toFloat(sb)
		}
		if ka != scFloat {
			c.bld.Emit(bpcode.OpSwap)
			c.toFloat(sa)
			c.bld.Emit(bpcode.OpSwap)
		}
		return c.floatOp(op)
	}
	t := c.arithType(a.t, b.t)
	uns := t.Kind == KindUint
	if op == "<<" || op == ">>" {
		t = c.promote(a).t
		uns = t.Kind == KindUint
	} else if t.Size == 8 && uns {
		// Operands were extended by their own signedness; as unsigned 64-bit words they
		// already have the values C's conversion gives.
	} else if t.Size == 4 && uns {
		// int and unsigned int: the signed operand becomes its 32-bit unsigned value.
		c.bld.Sized(bpcode.OpZext, 4)
		c.bld.Emit(bpcode.OpSwap)
		c.bld.Sized(bpcode.OpZext, 4)
		c.bld.Emit(bpcode.OpSwap)
	}
	_, ts := classify(t)
	switch op {
	case "+", "-", "*", "&", "|", "^", "<<":
		c.bld.Emit(map[string]bpcode.Op{"+": bpcode.OpAdd, "-": bpcode.OpSub, "*": bpcode.OpMul,
			"&": bpcode.OpAnd, "|": bpcode.OpOr, "^": bpcode.OpXor, "<<": bpcode.OpShl}[op])
		c.normalize(scInt, ts)
		return cv{t: t}, nil
	case ">>":
		c.bld.Emit(pick(uns, bpcode.OpShrU, bpcode.OpShrS))
		c.normalize(scInt, ts)
		return cv{t: t}, nil
	case "/":
		c.bld.Emit(pick(uns, bpcode.OpDivU, bpcode.OpDivS))
		c.normalize(scInt, ts)
		return cv{t: t}, nil
	case "%":
		c.bld.Emit(pick(uns, bpcode.OpRemU, bpcode.OpRemS))
		c.normalize(scInt, ts)
		return cv{t: t}, nil
	}
	return c.compare(op, uns)
}

func pick(c bool, a, b bpcode.Op) bpcode.Op {
	if c {
		return a
	}
	return b
}

// operand compiles an operand of an arithmetic operator to a word.
func (c *compiler) operand(n *node) (cv, error) {
	v, err := c.expr(n)
	if err != nil {
		return cv{}, err
	}
	return c.rvalue(v)
}

func (c *compiler) toFloat(s *Type) {
	if signed(s) {
		c.bld.Emit(bpcode.OpS2F)
	} else {
		c.bld.Emit(bpcode.OpU2F)
	}
}

func (c *compiler) floatOp(op string) (cv, error) {
	switch op {
	case "+", "-", "*", "/":
		c.bld.Emit(map[string]bpcode.Op{"+": bpcode.OpFAdd, "-": bpcode.OpFSub, "*": bpcode.OpFMul, "/": bpcode.OpFDiv}[op])
		return cv{t: doubleType}, nil
	case "==":
		c.bld.Emit(bpcode.OpFEq)
	case "!=":
		c.bld.Emit(bpcode.OpFNe)
	case "<":
		c.bld.Emit(bpcode.OpFLt)
	case "<=":
		c.bld.Emit(bpcode.OpFLe)
	case ">":
		c.bld.Emit(bpcode.OpSwap)
		c.bld.Emit(bpcode.OpFLt)
	case ">=":
		c.bld.Emit(bpcode.OpSwap)
		c.bld.Emit(bpcode.OpFLe)
	default:
		return cv{}, notCompiled("operator %s on floating-point values", op)
	}
	return c.resultInt(), nil
}

// compare compiles a comparison of two integer words.
func (c *compiler) compare(op string, uns bool) (cv, error) {
	switch op {
	case "==":
		c.bld.Emit(bpcode.OpEq)
	case "!=":
		c.bld.Emit(bpcode.OpNe)
	case "<":
		c.bld.Emit(pick(uns, bpcode.OpLtU, bpcode.OpLtS))
	case "<=":
		c.bld.Emit(pick(uns, bpcode.OpLeU, bpcode.OpLeS))
	case ">":
		c.bld.Emit(bpcode.OpSwap)
		c.bld.Emit(pick(uns, bpcode.OpLtU, bpcode.OpLtS))
	case ">=":
		c.bld.Emit(bpcode.OpSwap)
		c.bld.Emit(pick(uns, bpcode.OpLeU, bpcode.OpLeS))
	default:
		return cv{}, notCompiled("operator %s", op)
	}
	return c.resultInt(), nil
}

// pointerOp compiles pointer arithmetic and comparison.
func (c *compiler) pointerOp(op string, a, b cv, ka, kb scalar, sa, sb *Type) (cv, error) {
	elemSize := func(p *Type) (uint64, error) {
		if p.Elem == nil || p.Elem.Strip() == nil || p.Elem.Strip().Size <= 0 {
			return 0, notCompiled("arithmetic on a pointer to an incomplete type")
		}
		return uint64(p.Elem.Strip().Size), nil
	}
	switch {
	case ka == scPointer && kb == scInt && (op == "+" || op == "-"):
		n, err := elemSize(sa)
		if err != nil {
			return cv{}, err
		}
		c.bld.Const(n)
		c.bld.Emit(bpcode.OpMul)
		c.bld.Emit(pick(op == "+", bpcode.OpAdd, bpcode.OpSub))
		return cv{t: a.t}, nil
	case ka == scInt && kb == scPointer && op == "+":
		n, err := elemSize(sb)
		if err != nil {
			return cv{}, err
		}
		c.bld.Emit(bpcode.OpSwap)
		c.bld.Const(n)
		c.bld.Emit(bpcode.OpMul)
		c.bld.Emit(bpcode.OpAdd)
		return cv{t: b.t}, nil
	case ka == scPointer && kb == scPointer && op == "-":
		n, err := elemSize(sa)
		if err != nil {
			return cv{}, err
		}
		c.bld.Emit(bpcode.OpSub)
		c.bld.Const(n)
		c.bld.Emit(bpcode.OpDivS)
		return cv{t: c.intType(8, true)}, nil
	case (ka == scPointer || ka == scInt) && (kb == scPointer || kb == scInt):
		return c.compare(op, true)
	}
	return cv{}, notCompiled("operator %s on a pointer", op)
}

// logical compiles && and || with C's short circuit.
func (c *compiler) logical(n *node) (cv, error) {
	a, err := c.expr(n.kids[0])
	if err != nil {
		return cv{}, err
	}
	if err := c.truth(a); err != nil {
		return cv{}, err
	}
	short, end := c.bld.Label(), c.bld.Label()
	if n.text == "||" {
		c.bld.Emit(bpcode.OpLNot) // jump (to true) when the left side holds
	}
	c.bld.Jump(bpcode.OpIfZero, short)
	b, err := c.expr(n.kids[1])
	if err != nil {
		return cv{}, err
	}
	if err := c.truth(b); err != nil {
		return cv{}, err
	}
	c.bld.Jump(bpcode.OpGoto, end)
	c.bld.Place(short)
	c.bld.Const(boolWord(n.text == "||"))
	c.bld.Place(end)
	return c.resultInt(), nil
}

// index compiles a[i]: an array in memory or a pointer, indexed by an integer.
func (c *compiler) index(n *node) (cv, error) {
	base, err := c.expr(n.kids[0])
	if err != nil {
		return cv{}, err
	}
	_, s := classify(base.t)
	var elem *Type
	switch {
	case s != nil && s.Kind == KindArray && base.loc == locMem:
		elem = s.Elem
	default:
		if base, err = c.rvalue(base); err != nil {
			return cv{}, err
		}
		k, ps := classify(base.t)
		if k != scPointer {
			return cv{}, notCompiled("subscript of a %s", typeLabel(base.t))
		}
		elem = ps.Elem
	}
	if elem == nil || elem.Strip() == nil || elem.Strip().Size <= 0 || len(s.Dims) > 1 {
		return cv{}, notCompiled("subscript of this array")
	}
	i, err := c.operand(n.kids[1])
	if err != nil {
		return cv{}, err
	}
	if k, _ := classify(i.t); k != scInt {
		return cv{}, notCompiled("a subscript that is not an integer")
	}
	c.bld.Const(uint64(elem.Strip().Size))
	c.bld.Emit(bpcode.OpMul)
	c.bld.Emit(bpcode.OpAdd)
	return cv{t: elem, loc: locMem}, nil
}

// member compiles s.f and p->f.
func (c *compiler) member(n *node) (cv, error) {
	v, err := c.expr(n.kids[0])
	if err != nil {
		return cv{}, err
	}
	if n.op == "arrow" {
		if v, err = c.rvalue(v); err != nil {
			return cv{}, err
		}
		k, ps := classify(v.t)
		if k != scPointer {
			return cv{}, notCompiled("-> on a %s", typeLabel(v.t))
		}
		v = cv{t: ps.Elem, loc: locMem}
	}
	if v.loc != locMem {
		return cv{}, notCompiled("a member of a value not in memory")
	}
	s := v.t.Strip()
	if s == nil || (s.Kind != KindStruct && s.Kind != KindUnion) {
		return cv{}, notCompiled("member %s of a %s", n.text, typeLabel(v.t))
	}
	for _, f := range s.Fields {
		if f.Name != n.text {
			continue
		}
		if f.BitSize != 0 || f.Static || f.Virtual {
			return cv{}, notCompiled("member %s (a bit field, static or virtual)", n.text)
		}
		c.bld.Const(uint64(f.Offset))
		c.bld.Emit(bpcode.OpAdd)
		return cv{t: f.Type, loc: locMem}, nil
	}
	return cv{}, notCompiled("member %s (not a direct member)", n.text)
}
