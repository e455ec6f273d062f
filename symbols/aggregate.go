package symbols

import (
	"fmt"
)

// Deref returns the object a pointer (or C++ reference) points to.
func (v *Value) Deref() (*Value, error) {
	s := v.Type.Strip()
	if s == nil || (s.Kind != KindPointer && s.Kind != KindRef && s.Kind != KindRvalueRef) {
		return nil, fmt.Errorf("Attempt to take contents of a non-pointer value.")
	}
	et := s.Elem
	if et == nil || et.Strip() == nil || et.Strip().Kind == KindVoid {
		return nil, fmt.Errorf("Attempt to take contents of a non-pointer value.")
	}
	name := "*" + v.Name
	if v.synthetic != nil {
		target, err := v.proc.dieValue(v.mod, v.frame, v.synthetic.die)
		if err != nil {
			return nil, err
		}
		c := target.reinterpret(et, v.synthetic.off)
		c.Name = name
		return c, nil
	}
	addr, err := v.Uint()
	if err != nil {
		return nil, err
	}
	c := newMemValue(v.proc, v.mod, v.frame, et, addr)
	c.Name = name
	if et.IsDynamic() {
		return v.proc.resolveDynamic(c)
	}
	return c, nil
}

// reinterpret views the bytes at byte offset off of v as type t.
func (v *Value) reinterpret(t *Type, off int64) *Value {
	if v.inMem && v.data == nil && !v.optOut && v.err == nil {
		return newMemValue(v.proc, v.mod, v.frame, t, v.addr+uint64(off))
	}
	c := &Value{Type: t, proc: v.proc, mod: v.mod, frame: v.frame, reg: -1}
	b, err := v.Bytes()
	if err != nil {
		c.err = err
		if v.optOut {
			c.optOut, c.err = true, nil
		}
		return c
	}
	n := t.Size
	if off < 0 || n < 0 || off+n > int64(len(b)) {
		c.err = fmt.Errorf("access outside the object")
		return c
	}
	c.data = b[off : off+n]
	if v.unavail != nil {
		c.unavail = v.unavail[off : off+n]
	}
	return c
}

// AddressOf returns a pointer to the value ("&x"); only values in memory have one.
func (v *Value) AddressOf() (*Value, error) {
	if !v.inMem || v.bitSize != 0 {
		if v.reg >= 0 {
			return nil, fmt.Errorf("Address requested for identifier %q which is in register $%s", v.Name,
				v.proc.Arch.RegName(v.reg))
		}
		return nil, fmt.Errorf("Attempt to take address of value not located in memory.")
	}
	pt := &Type{Kind: KindPointer, Size: int64(v.proc.Arch.PtrSize), Elem: v.Type, Lang: v.Type.Lang}
	b := make([]byte, v.proc.Arch.PtrSize)
	putUint(b, v.addr, v.proc.Arch)
	c := newBytesValue(v.proc, v.mod, v.frame, pt, b)
	c.Name = "&" + v.Name
	return c, nil
}

func putUint(b []byte, u uint64, a *Arch) {
	if a.ByteOrder.String() == "BigEndian" {
		for i := len(b) - 1; i >= 0; i-- {
			b[i] = byte(u)
			u >>= 8
		}
		return
	}
	for i := range b {
		b[i] = byte(u)
		u >>= 8
	}
}

// Field returns the member of a struct, class or union by name, searching anonymous members
// and base classes as the language does.
func (v *Value) Field(name string) (*Value, error) {
	s := v.Type.Strip()
	if s != nil && (s.Kind == KindRef || s.Kind == KindRvalueRef) {
		d, err := v.Deref()
		if err != nil {
			return nil, err
		}
		return d.Field(name)
	}
	if s == nil || (s.Kind != KindStruct && s.Kind != KindUnion) {
		return nil, fmt.Errorf("Attempt to extract a component of a value that is not a structure.")
	}
	if c := v.findField(name, 0); c != nil {
		return c, nil
	}
	return nil, fmt.Errorf("There is no member named %s.", name)
}

func (v *Value) findField(name string, depth int) *Value {
	if depth > 16 {
		return nil
	}
	s := v.Type.Strip()
	if s == nil {
		return nil
	}
	for _, f := range s.Fields {
		if f.Name == name && !f.Base {
			return v.member(f)
		}
	}
	for _, f := range s.Fields {
		if f.Name == "" || f.Base {
			if f.Static || f.Virtual {
				continue
			}
			if c := v.member(f).findField(name, depth+1); c != nil {
				return c
			}
		}
	}
	return nil
}

// member returns the value of a struct field.
func (v *Value) member(f *Field) *Value {
	name := v.Name + "." + f.Name
	if f.Static {
		c, err := v.proc.staticMember(v.mod, f)
		if err != nil {
			return &Value{Name: name, Type: f.Type, proc: v.proc, mod: v.mod, frame: v.frame, reg: -1, err: err}
		}
		c.Name = name
		return c
	}
	if f.BitSize > 0 {
		// Bit fields: keep the containing bytes and the bit position.
		byteOff := f.BitOffset / 8
		c := v.sub(name, &Type{Kind: KindUint, Size: (f.BitOffset%8 + f.BitSize + 7) / 8}, byteOff)
		c.Type = f.Type
		c.bitOff = f.BitOffset % 8
		c.bitSize = f.BitSize
		if !c.inMem && c.data == nil && !c.optOut && c.err == nil {
			c.err = fmt.Errorf("bit field outside the value")
		}
		return c
	}
	return v.sub(name, f.Type, f.Offset)
}

// staticMember finds the definition of a C++ static data member.
func (p *Process) staticMember(mod *Module, f *Field) (*Value, error) {
	name := mod.Bin.declNames[f.off]
	if name == "" {
		name = f.Name
	}
	return p.LookupGlobal(name, nil)
}
