package symbols

import (
	"fmt"
	"strings"
)

// call handles "f(...)": Fortran subscripts and sections; function calls are refused.
func (e *evaluator) call(n *node) (*Value, error) { return e.callWith(n, nil) }

// callWith evaluates a call or (Fortran) subscript; ret is the type of a cast around it.
func (e *evaluator) callWith(n *node, ret *Type) (*Value, error) {
	if e.lang == LangFortran && n.kids[0].op == "ident" {
		if v, ok, err := e.fortranIntrinsic(n.kids[0].text, n.kids[1:]); ok {
			return v, err
		}
	}
	if v, ok, err := e.methodCall(n, ret); ok {
		return v, err
	}
	base, err := e.callee(n.kids[0])
	if err != nil {
		return nil, err
	}
	if isCallable(base) {
		return e.callFunction(base, n.kids[1:], ret)
	}
	s := base.Type.Strip()
	if s == nil || (s.Kind != KindArray && s.Kind != KindString) {
		return nil, fmt.Errorf("cannot subscript something of type `%s'", base.Type)
	}
	args := n.kids[1:]
	hasRange := false
	for _, a := range args {
		if a.op == "range" {
			hasRange = true
		}
	}
	if !hasRange {
		idx := make([]int64, len(args))
		for i, a := range args {
			v, err := e.eval(a)
			if err != nil {
				return nil, err
			}
			if idx[i], err = v.Int(); err != nil {
				return nil, err
			}
		}
		if s.Kind == KindString {
			if len(idx) != 1 {
				return nil, fmt.Errorf("wrong number of subscripts")
			}
			return base.Index(idx[0])
		}
		v, err := base.IndexN(idx)
		if err != nil {
			return nil, err
		}
		return e.resolve(v)
	}
	return e.section(base, args)
}

// section evaluates a Fortran array section or substring a(lo:hi, ...).
func (e *evaluator) section(base *Value, args []*node) (*Value, error) {
	s := base.Type.Strip()
	bound := func(x *node, def int64) (int64, error) {
		if x == nil {
			return def, nil
		}
		v, err := e.eval(x)
		if err != nil {
			return 0, err
		}
		return v.Int()
	}
	if s.Kind == KindString {
		if len(args) != 1 {
			return nil, fmt.Errorf("wrong number of subscripts")
		}
		lo, err := bound(args[0].kids[0], 1)
		if err != nil {
			return nil, err
		}
		hi, err := bound(args[0].kids[1], s.StrLen.Const)
		if err != nil {
			return nil, err
		}
		if lo < 1 || hi > s.StrLen.Const || hi < lo-1 {
			return nil, fmt.Errorf("no such vector element")
		}
		t := &Type{Kind: KindString, Lang: LangFortran, Size: hi - lo + 1, Elem: s.Elem,
			StrLen: DynAttr{Set: true, Const: hi - lo + 1}}
		return base.sub(base.Name, t, lo-1), nil
	}
	dims, err := arrayDims(base.Type)
	if err != nil {
		return nil, err
	}
	if len(args) != len(dims) {
		return nil, fmt.Errorf("wrong number of subscripts")
	}
	off := int64(0)
	var nd []Dim
	for k, a := range args {
		d := dims[k]
		if a.op != "range" {
			v, err := e.eval(a)
			if err != nil {
				return nil, err
			}
			i, err := v.Int()
			if err != nil {
				return nil, err
			}
			if i < d.lower || i >= d.lower+d.count {
				return nil, fmt.Errorf("no such vector element")
			}
			off += (i - d.lower) * d.stride
			continue
		}
		lo, err := bound(a.kids[0], d.lower)
		if err != nil {
			return nil, err
		}
		hi, err := bound(a.kids[1], d.lower+d.count-1)
		if err != nil {
			return nil, err
		}
		if lo < d.lower || hi >= d.lower+d.count || hi < lo-1 {
			return nil, fmt.Errorf("array slice out of bounds")
		}
		off += (lo - d.lower) * d.stride
		nd = append(nd, Dim{Lower: DynAttr{Set: true, Const: 1}, Count: DynAttr{Set: true, Const: hi - lo + 1},
			Stride: DynAttr{Set: true, Const: d.stride}})
	}
	t := &Type{Kind: KindArray, Lang: LangFortran, Elem: s.Elem, Dims: nd, ColumnMajor: true}
	// The section's extent in memory, from its first to its last element.
	end := int64(0)
	for _, d := range nd {
		end += (d.Count.Const - 1) * d.Stride.Const
	}
	t.Size = end + s.Elem.Size
	if !base.inMem {
		return nil, fmt.Errorf("array sections need the array in memory")
	}
	v := newMemValue(e.p, base.mod, e.f, t, base.addr+uint64(off))
	v.Name = base.Name
	return v, nil
}

// assign implements "=" and the compound assignments, writing through the target's memory or
// frame-0 register.
func (e *evaluator) assign(n *node) (*Value, error) {
	lhs, err := e.eval(n.kids[0])
	if err != nil {
		return nil, err
	}
	rhs, err := e.eval(n.kids[1])
	if err != nil {
		return nil, err
	}
	if op := strings.TrimSuffix(n.text, "="); op != "" {
		if rhs, err = e.arith(op, lhs, rhs); err != nil {
			return nil, err
		}
	}
	return e.store(lhs, rhs)
}

// store converts rhs to lhs's type and writes it.
func (e *evaluator) store(lhs, rhs *Value) (*Value, error) {
	lhs = rval(lhs) // assigning to a C++ reference assigns to the object it refers to
	if lhs.optOut || lhs.implicit {
		// The variable has no storage here (optimized out, or a value the debug information
		// computes): nothing is written and, as in gdb, the result is optimized out.
		return optimizedOut(e.p, lhs.mod, lhs.frame, lhs.Type), nil
	}
	ls := lhs.Type.Strip()
	var src []byte
	switch {
	case ls.Kind == KindStruct || ls.Kind == KindUnion || ls.Kind == KindArray || ls.Kind == KindString:
		rs := rhs.Type.Strip()
		if rs.Size != ls.Size && !(ls.Kind == KindString && rs.Kind == KindString) {
			return nil, fmt.Errorf("Invalid cast.")
		}
		b, err := rhs.Bytes()
		if err != nil {
			return nil, err
		}
		src = make([]byte, ls.Size)
		for i := range src {
			src[i] = ' ' // Fortran pads strings with blanks
		}
		if ls.Kind != KindString {
			for i := range src {
				src[i] = 0
			}
		}
		copy(src, b)
	default:
		c, err := e.convert(rhs, lhs.Type)
		if err != nil {
			return nil, err
		}
		if src, err = c.Bytes(); err != nil {
			return nil, err
		}
	}
	if lhs.bitSize > 0 {
		return e.storeBits(lhs, src)
	}
	switch {
	case lhs.inMem:
		w, ok := e.p.Mem.(MemoryWriter)
		if !ok {
			return nil, fmt.Errorf("cannot write memory: the process is read-only (a core file)")
		}
		if n, err := w.WriteAt(src, lhs.addr); err != nil || n != len(src) {
			return nil, fmt.Errorf("Cannot access memory at address %#x", lhs.addr)
		}
		nv := newMemValue(e.p, lhs.mod, lhs.frame, lhs.Type, lhs.addr)
		nv.Name = lhs.Name
		return nv, nil
	case lhs.reg >= 0 && lhs.frame != nil:
		if e.p.Regs == nil || lhs.frame.physical().callee != nil {
			return nil, fmt.Errorf("cannot write register %s: only frame 0 registers of a live process can be written",
				e.p.Arch.RegName(lhs.reg))
		}
		full, _ := lhs.frame.regs.Bytes(lhs.reg)
		buf := append([]byte(nil), full...)
		if e.p.Arch.ByteOrder.String() == "BigEndian" && len(buf) == 8 && len(src) < 8 {
			copy(buf[8-len(src):], src)
		} else {
			copy(buf, src)
		}
		if err := e.p.Regs.WriteRegister(lhs.reg, buf); err != nil {
			return nil, err
		}
		if len(buf) == 8 {
			lhs.frame.regs.Set(lhs.reg, uintFrom(buf, e.p.Arch))
		} else {
			lhs.frame.regs.SetBytes(lhs.reg, buf)
		}
		nv := newBytesValue(e.p, lhs.mod, lhs.frame, lhs.Type, src)
		nv.Name, nv.reg = lhs.Name, lhs.reg
		return nv, nil
	}
	return nil, fmt.Errorf("Left operand of assignment is not an lvalue.")
}

// storeBits writes a bit field with a read-modify-write of its containing bytes.
func (e *evaluator) storeBits(lhs *Value, src []byte) (*Value, error) {
	if !lhs.inMem {
		return nil, fmt.Errorf("Left operand of assignment is not an lvalue.")
	}
	w, ok := e.p.Mem.(MemoryWriter)
	if !ok {
		return nil, fmt.Errorf("cannot write memory: the process is read-only (a core file)")
	}
	val := uintFrom(src, e.p.Arch)
	start := lhs.bitOff % 8
	nbytes := (start + lhs.bitSize + 7) / 8
	addr := lhs.addr + uint64(lhs.bitOff/8)
	buf := make([]byte, nbytes)
	if err := e.p.ReadMemory(buf, addr); err != nil {
		return nil, err
	}
	word := uintFrom(buf, e.p.Arch)
	mask := uint64(1)<<uint(lhs.bitSize) - 1
	shift := uint(start)
	if e.p.Arch.ByteOrder.String() == "BigEndian" {
		shift = uint(nbytes*8 - start - lhs.bitSize)
	}
	word = word&^(mask<<shift) | (val&mask)<<shift
	putUint(buf, word, e.p.Arch)
	if _, err := w.WriteAt(buf, addr); err != nil {
		return nil, err
	}
	nv := *lhs
	nv.data = nil
	return &nv, nil
}

// Assign evaluates rhs and stores it into the lvalue lhs (DAP's setVariable), converting as
// an assignment in the frame's language does; it returns the new value. The process's memory
// must implement MemoryWriter (and Process.Regs must be set for frame-0 registers).
func (f *Frame) Assign(lhs, rhs string) (*Value, error) {
	p := f.proc
	e := &evaluator{p: p, f: f, lang: LangC, mod: f.Module}
	if f.Function != nil {
		e.lang = f.Function.Language()
	}
	fortran := e.lang == LangFortran
	ln, err := parseExpr(lhs, fortran, e.isTypeName)
	if err != nil {
		return nil, err
	}
	rn, err := parseExpr(rhs, fortran, e.isTypeName)
	if err != nil {
		return nil, err
	}
	l, err := e.eval(ln)
	if err != nil {
		return nil, err
	}
	r, err := e.eval(rn)
	if err != nil {
		return nil, err
	}
	return e.store(l, r)
}
