package symbols

import (
	"debug/dwarf"
	"fmt"
	"strings"
)

// Child is one element of an aggregate for a variables view: a member, a base class, an
// array element, or the object a pointer points to.
type Child struct {
	Name  string // as shown: "x", "<Base>", "[3]", "(2)", "*p"
	Expr  string // an expression that evaluates to the child (DAP's evaluateName)
	Value *Value
}

// NumChildren returns how many children the value has, without reading them: members of a
// struct, elements along the first dimension of an array (the last for Fortran), one for a
// pointer to an object, the referent's children for a C++ reference. Scalars, strings,
// character pointers and optimized-out values have none.
func (v *Value) NumChildren() int {
	if v.optOut || v.err != nil || v.state != "" {
		return 0
	}
	s := v.Type.Strip()
	if s == nil {
		return 0
	}
	switch s.Kind {
	case KindStruct, KindUnion:
		n := 0
		for _, f := range s.Fields {
			if ft := f.Type.Strip(); ft == nil || ft.Kind != KindFunc {
				n++
			}
		}
		return n
	case KindArray:
		if isCharType(s.Elem) && s.Lang != LangFortran {
			return 0 // shown as a string
		}
		dims, err := arrayDims(v.Type)
		if err != nil || len(dims) == 0 {
			return 0
		}
		if s.Lang == LangFortran || s.ColumnMajor {
			return int(dims[len(dims)-1].count)
		}
		return int(dims[0].count)
	case KindPointer:
		if v.synthetic != nil {
			return 1
		}
		et := s.Elem.Strip()
		if et == nil || et.Kind == KindVoid || et.Kind == KindFunc || (et.Kind == KindChar && et.Size == 1) {
			return 0
		}
		if u, err := v.Uint(); err != nil || u == 0 {
			return 0
		}
		return 1
	case KindRef, KindRvalueRef:
		if d, err := v.Deref(); err == nil {
			return d.NumChildren()
		}
	case KindString:
		return int(s.StrLen.Const)
	}
	return 0
}

// Children returns count children starting at start (clipped to the available range). They
// are read lazily, so paging through a large array costs only what is shown.
func (v *Value) Children(start, count int) ([]Child, error) {
	n := v.NumChildren()
	if start < 0 || start > n {
		return nil, fmt.Errorf("symbols: %s: children %d+%d out of range (%d)", v.Name, start, count, n)
	}
	if count < 0 || start+count > n {
		count = n - start
	}
	s := v.Type.Strip()
	expr := v.Name
	if strings.ContainsAny(expr, " +-*/&|<>=!?:,") {
		expr = "(" + expr + ")"
	}
	var out []Child
	switch s.Kind {
	case KindRef, KindRvalueRef:
		d, err := v.Deref()
		if err != nil {
			return nil, err
		}
		d.Name = v.Name
		return d.Children(start, count)
	case KindPointer:
		d, err := v.Deref()
		if err != nil {
			return nil, err
		}
		if dd, err := v.proc.resolveDynamic(d); err == nil {
			d = dd
		}
		d.Name = "*" + expr
		return []Child{{Name: "*" + v.Name, Expr: "*" + expr, Value: d}}, nil
	case KindStruct, KindUnion:
		i := 0
		sep := "."
		if s.Lang == LangFortran {
			sep = "%"
		}
		for _, f := range s.Fields {
			if ft := f.Type.Strip(); ft != nil && ft.Kind == KindFunc {
				continue
			}
			if i >= start && i < start+count {
				c := v.member(f)
				if f.Type.IsDynamic() {
					if r, err := v.proc.resolveDynamic(c); err == nil {
						c = r
					}
				}
				name, cexpr := f.Name, expr+sep+f.Name
				switch {
				case f.Base:
					name = "<" + f.Type.String() + ">"
					cexpr = "(" + f.Type.String() + ")" + expr
				case f.Static:
					cexpr = f.Type.String() + "::" + f.Name
					if q := v.mod.Bin.declNames[f.off]; q != "" {
						cexpr = q
					}
				case f.Name == "":
					name = "<anonymous>"
					cexpr = expr
				}
				c.Name = cexpr
				out = append(out, Child{Name: name, Expr: cexpr, Value: c})
			}
			i++
		}
		return out, nil
	case KindString:
		for i := start; i < start+count; i++ {
			c := v.sub("", s.Elem, int64(i))
			c.Name = fmt.Sprintf("%s(%d:%d)", expr, i+1, i+1)
			out = append(out, Child{Name: fmt.Sprintf("(%d)", i+1), Expr: c.Name, Value: c})
		}
		return out, nil
	case KindArray:
		dims, err := arrayDims(v.Type)
		if err != nil {
			return nil, err
		}
		if s.Lang == LangFortran || s.ColumnMajor {
			return v.fortranChildren(s, dims, expr, start, count)
		}
		d := dims[0]
		et := subArrayType(v.Type)
		if len(dims) > 1 {
			for k := range et.Dims {
				et.Dims[k].Stride = DynAttr{Set: true, Const: dims[k+1].stride}
			}
		}
		for i := start; i < start+count; i++ {
			c := v.sub("", et, int64(i)*d.stride)
			idx := d.lower + int64(i)
			c.Name = fmt.Sprintf("%s[%d]", expr, idx)
			out = append(out, Child{Name: fmt.Sprintf("[%d]", idx), Expr: c.Name, Value: c})
		}
		return out, nil
	}
	return nil, nil
}

// fortranChildren splits a Fortran array along its last dimension: elements of a vector,
// sections "a(:,j)" of a matrix.
func (v *Value) fortranChildren(s *Type, dims []dimInfo, expr string, start, count int) ([]Child, error) {
	last := dims[len(dims)-1]
	var sub *Type
	if len(dims) > 1 {
		t := &Type{Kind: KindArray, Lang: LangFortran, Elem: s.Elem, ColumnMajor: true}
		for _, d := range dims[:len(dims)-1] {
			t.Dims = append(t.Dims, Dim{Lower: DynAttr{Set: true, Const: d.lower},
				Count: DynAttr{Set: true, Const: d.count}, Stride: DynAttr{Set: true, Const: d.stride}})
		}
		t.Size = t.staticArraySize()
		sub = t
	} else {
		sub = s.Elem
	}
	var out []Child
	for i := start; i < start+count; i++ {
		idx := last.lower + int64(i)
		c := v.sub("", sub, int64(i)*last.stride)
		name := fmt.Sprintf("(%d)", idx)
		if len(dims) > 1 {
			name = "(" + strings.Repeat(":,", len(dims)-1) + fmt.Sprint(idx) + ")"
		}
		c.Name = expr + name
		out = append(out, Child{Name: name, Expr: c.Name, Value: c})
	}
	return out, nil
}

// Statics returns the variables with static storage defined in the frame's compile unit
// (globals and file statics), for an IDE's "Globals" scope, sorted by name.
func (f *Frame) Statics() ([]*Value, error) {
	if f.Function == nil {
		return nil, nil
	}
	b := f.Module.Bin
	cu := f.Function.cu
	// The index holds qualified names and their unqualified aliases; keep the qualified one.
	names := map[dwarf.Offset]string{}
	for name, refs := range b.globals {
		for _, r := range refs {
			if r.cu == cu && len(name) > len(names[r.off]) {
				names[r.off] = name
			}
		}
	}
	var out []*Value
	for off, name := range names {
		v, err := f.proc.dieValue(f.Module, f, off)
		if err != nil {
			continue
		}
		v.Name = name
		out = append(out, v)
	}
	sortValues(out)
	return out, nil
}

func sortValues(vs []*Value) {
	for i := 1; i < len(vs); i++ {
		for j := i; j > 0 && vs[j].Name < vs[j-1].Name; j-- {
			vs[j], vs[j-1] = vs[j-1], vs[j]
		}
	}
}

// RegisterValue is one register of a frame for an IDE's "Registers" scope.
type RegisterValue struct {
	Name  string
	Value uint64
}

// Registers returns the frame's known registers by DWARF number order (recovered registers
// in outer frames; registers the unwinder could not recover are absent).
func (f *Frame) Registers() []RegisterValue {
	var out []RegisterValue
	a := f.proc.Arch
	for n := 0; n < a.NumRegs; n++ {
		name := a.RegName(n)
		if name == "" {
			continue
		}
		if v, ok := f.regs.Get(n); ok {
			out = append(out, RegisterValue{Name: name, Value: v})
		}
	}
	return out
}
