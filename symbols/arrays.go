package symbols

import (
	"debug/dwarf"
	"fmt"

	"github.com/hpcdap/hpcdap/symbols/dwop"
)

// dimInfo is one dimension of an array with resolved bounds.
type dimInfo struct {
	lower, count int64
	stride       int64 // bytes between consecutive indices of this dimension
}

// dims returns the resolved dimensions of an array value's type, outermost (C) or first
// (Fortran) dimension first, with byte strides.
func arrayDims(t *Type) ([]dimInfo, error) {
	s := t.Strip()
	if s == nil || s.Kind != KindArray {
		return nil, fmt.Errorf("symbols: %s is not an array", t)
	}
	es := s.Elem.Size
	if es < 0 {
		if st := s.Elem.Strip(); st != nil {
			es = st.Size
		}
	}
	out := make([]dimInfo, len(s.Dims))
	for i, d := range s.Dims {
		n := d.constLen()
		if n < 0 {
			return nil, fmt.Errorf("symbols: array bounds of %s are not known", t)
		}
		out[i] = dimInfo{lower: d.lower(), count: n}
	}
	// Default strides: C row-major (last index fastest), Fortran column-major.
	stride := es
	if s.Lang == LangFortran || s.ColumnMajor {
		for i := range out {
			out[i].stride = stride
			stride *= out[i].count
		}
	} else {
		for i := len(out) - 1; i >= 0; i-- {
			out[i].stride = stride
			stride *= out[i].count
		}
	}
	for i, d := range s.Dims {
		if d.Stride.isConst() && d.Stride.Const != 0 {
			out[i].stride = d.Stride.Const
		}
	}
	return out, nil
}

// subArrayType returns the type of v[i] for a multi-dimensional C array: the array of the
// remaining dimensions.
func subArrayType(t *Type) *Type {
	s := t.Strip()
	if len(s.Dims) <= 1 {
		return s.Elem
	}
	n := *s
	n.Dims = s.Dims[1:]
	n.Name = ""
	n.Size = n.staticArraySize()
	return &n
}

// Index returns element i of an array (C semantics: along the first dimension, from the
// array's lower bound) or the object i elements past a pointer.
func (v *Value) Index(i int64) (*Value, error) {
	s := v.Type.Strip()
	switch {
	case s == nil:
		return nil, fmt.Errorf("cannot subscript %s", v.Name)
	case s.Kind == KindPointer:
		base, err := v.Deref()
		if err != nil {
			return nil, err
		}
		es := base.Type.Size
		if es <= 0 {
			return nil, fmt.Errorf("cannot subscript pointer to incomplete type %s", base.Type)
		}
		if !base.inMem {
			if i == 0 {
				return base, nil
			}
			return nil, fmt.Errorf("cannot subscript %s: the pointer has no address", v.Name)
		}
		c := newMemValue(v.proc, v.mod, v.frame, base.Type, base.addr+uint64(i*es))
		c.Name = fmt.Sprintf("%s[%d]", v.Name, i)
		return c, nil
	case s.Kind == KindArray:
		dims, err := arrayDims(v.Type)
		if err != nil {
			return nil, err
		}
		if s.Lang == LangFortran {
			return v.IndexN([]int64{i})
		}
		d := dims[0]
		off := (i - d.lower) * d.stride
		et := subArrayType(v.Type)
		c := v.sub(fmt.Sprintf("%s[%d]", v.Name, i), et, off)
		if len(s.Dims) > 1 && len(dims) > 1 && et.Kind == KindArray {
			// Keep non-default strides of the remaining dimensions.
			for k := range et.Dims {
				et.Dims[k].Stride = DynAttr{Set: true, Const: dims[k+1].stride}
			}
		}
		if !v.inMem && (off < 0 || off+et.Size > int64(len(v.data))) {
			return nil, fmt.Errorf("no such vector element")
		}
		return c, nil
	case s.Kind == KindString:
		n := s.StrLen.Const
		if i < 1 || i > n {
			return nil, fmt.Errorf("no such vector element")
		}
		return v.sub(fmt.Sprintf("%s(%d)", v.Name, i), s.Elem, i-1), nil
	}
	return nil, fmt.Errorf("cannot subscript something of type `%s'", v.Type)
}

// IndexN subscripts a Fortran array with one index per dimension (honouring lower bounds and
// strides); fewer indices than dimensions is an error.
func (v *Value) IndexN(idx []int64) (*Value, error) {
	s := v.Type.Strip()
	if s == nil || s.Kind != KindArray {
		if s != nil && s.Kind == KindString && len(idx) == 1 {
			return v.Index(idx[0])
		}
		return nil, fmt.Errorf("cannot subscript something of type `%s'", v.Type)
	}
	dims, err := arrayDims(v.Type)
	if err != nil {
		return nil, err
	}
	if len(idx) != len(dims) {
		return nil, fmt.Errorf("wrong number of subscripts")
	}
	off := int64(0)
	for k, i := range idx {
		d := dims[k]
		if i < d.lower || i >= d.lower+d.count {
			return nil, fmt.Errorf("no such vector element")
		}
		off += (i - d.lower) * d.stride
	}
	name := v.Name + "("
	for k, i := range idx {
		if k > 0 {
			name += ","
		}
		name += fmt.Sprint(i)
	}
	return v.sub(name+")", s.Elem, off), nil
}

// resolveDynamic gives a value whose type depends on the object (Fortran allocatable,
// pointer and assumed-shape arrays, deferred-length strings, C variable-length arrays) its
// concrete type, evaluating the type's expressions with the object's address.
func (p *Process) resolveDynamic(v *Value) (*Value, error) {
	s := v.Type.Strip()
	if v.optOut || v.err != nil {
		return v, nil
	}
	obj := v.addr
	if !v.inMem {
		if s.DataLocation != nil || s.Allocated.Set || s.Associated.Set {
			return optimizedOut(p, v.mod, v.frame, v.Type), nil
		}
	}
	cu := s.cu
	env := p.env(v.mod, v.frame, cu)
	env.ObjectAddress = func() (uint64, error) { return obj, nil }
	eval := func(a DynAttr) (int64, error) {
		switch {
		case a.isConst():
			return a.Const, nil
		case a.Expr != nil:
			u, err := dwop.EvalValue(a.Expr, env)
			return int64(u), err
		case a.Ref != 0:
			rv, err := p.dieValue(v.mod, v.frame, dwarf.Offset(a.Ref))
			if err != nil {
				return 0, err
			}
			return rv.Int()
		}
		return 0, nil
	}
	n := *s
	if s.Allocated.Set {
		a, err := eval(s.Allocated)
		if err != nil {
			return nil, err
		}
		if a == 0 {
			r := *v
			r.state = "not allocated"
			return &r, nil
		}
	}
	if s.Associated.Set {
		a, err := eval(s.Associated)
		if err != nil {
			return nil, err
		}
		if a == 0 {
			r := *v
			r.state = "not associated"
			return &r, nil
		}
	}
	data := obj
	if s.DataLocation != nil {
		u, err := dwop.EvalValue(s.DataLocation, env)
		if err != nil {
			return nil, err
		}
		data = u
	}
	n.DataLocation, n.Allocated, n.Associated = nil, DynAttr{}, DynAttr{}
	switch s.Kind {
	case KindArray:
		n.Dims = make([]Dim, len(s.Dims))
		for i, d := range s.Dims {
			lo := int64(0)
			if d.Lower.Set {
				x, err := eval(d.Lower)
				if err != nil {
					return nil, err
				}
				lo = x
			}
			var cnt int64
			switch {
			case d.Count.Set:
				x, err := eval(d.Count)
				if err != nil {
					return nil, err
				}
				cnt = x
			case d.Upper.Set:
				x, err := eval(d.Upper)
				if err != nil {
					return nil, err
				}
				cnt = x - lo + 1
			}
			if cnt < 0 {
				cnt = 0
			}
			nd := Dim{Lower: DynAttr{Set: true, Const: lo}, Count: DynAttr{Set: true, Const: cnt}}
			if d.Stride.Set {
				x, err := eval(d.Stride)
				if err != nil {
					return nil, err
				}
				nd.Stride = DynAttr{Set: true, Const: x}
			}
			n.Dims[i] = nd
		}
		n.Size = n.staticArraySize()
		if n.Elem.IsDynamic() {
			return nil, fmt.Errorf("symbols: arrays of dynamic types are not supported")
		}
	case KindString:
		l, err := eval(s.StrLen)
		if err != nil {
			return nil, err
		}
		n.StrLen = DynAttr{Set: true, Const: l}
		n.Size = l
	}
	r := newMemValue(p, v.mod, v.frame, &n, data)
	r.Name = v.Name
	if !v.inMem && s.DataLocation == nil {
		r = newBytesValue(p, v.mod, v.frame, &n, v.data)
		r.Name = v.Name
	}
	return r, nil
}
