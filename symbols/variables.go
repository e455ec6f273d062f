package symbols

import (
	"debug/dwarf"
	"errors"
	"fmt"

	"github.com/hpcdap/hpcdap/symbols/dwop"
)

// Variable is a variable or parameter visible in a frame.
type Variable struct {
	Name       string
	Param      bool
	Artificial bool // compiler-generated (C++ "this", Fortran hidden string lengths)
	// ConstBlock marks a variable whose value is a DWARF block constant (gdb leaves those out
	// of "info locals").
	ConstBlock bool
	// Declaration marks a local declaration of a global (extern inside a function).
	Declaration bool

	frame *Frame
	decl  varDecl
	value *Value
	err   error
}

// String renders the variable as gdb's "info locals" does: "name = value", or the error that
// kept the value from being read.
func (v *Variable) String() string {
	val := v.Value()
	if err := val.Fetch(); err != nil {
		return fmt.Sprintf("%s = <error reading variable %s (%s)>", v.Name, v.Name, err)
	}
	return v.Name + " = " + val.String()
}

// Value returns the variable's value (read lazily; errors are carried by the value).
func (v *Variable) Value() *Value {
	if v.value == nil && v.err == nil {
		v.value, v.err = v.frame.proc.varValue(v.frame.Module, v.frame, v.decl)
		if v.err != nil {
			v.value = &Value{Name: v.Name, Type: voidType, proc: v.frame.proc, frame: v.frame, reg: -1, err: v.err}
		}
		v.value.Name = v.Name
	}
	return v.value
}

// scopeChain returns the blocks whose variables are visible in the frame, innermost first,
// ending with the frame's function (or inlined call) scope.
func (f *Frame) scopeChain() []*scope {
	out := make([]*scope, 0, len(f.chain))
	for i := len(f.chain) - 1; i >= 0; i-- {
		out = append(out, f.chain[i])
		if k := f.chain[i].kind; k == scopeInlined || k == scopeFunction {
			break
		}
	}
	return out
}

// Args returns the frame's parameters in declaration order.
func (f *Frame) Args() ([]*Variable, error) {
	if err := f.ensureChain(); err != nil {
		return nil, err
	}
	ch := f.scopeChain()
	if len(ch) == 0 {
		return nil, nil
	}
	fn := ch[len(ch)-1]
	var out []*Variable
	for _, d := range fn.vars {
		if d.param && d.name != "" {
			out = append(out, f.newVariable(d))
		}
	}
	return out, nil
}

// Locals returns the frame's local variables visible at its pc: innermost block first, each
// block's variables in declaration order (shadowed variables are included, as gdb lists
// them).
func (f *Frame) Locals() ([]*Variable, error) {
	if err := f.ensureChain(); err != nil {
		return nil, err
	}
	var out []*Variable
	for _, s := range f.scopeChain() {
		for _, d := range s.vars {
			if d.param || d.name == "" {
				continue // nameless variables (descriptor temporaries) are not shown
			}
			out = append(out, f.newVariable(d))
		}
	}
	return out, nil
}

func (f *Frame) newVariable(d varDecl) *Variable {
	return &Variable{Name: d.name, Param: d.param, Artificial: d.artificial, ConstBlock: d.constBlock,
		Declaration: d.external, frame: f, decl: d}
}

// ensureChain computes the frame's block chain when the frame was not made by Stack.
func (f *Frame) ensureChain() error {
	if f.chain != nil || f.Function == nil {
		return nil
	}
	root, err := f.Function.scopeTree()
	if err != nil {
		return err
	}
	f.chain = root.chainAt(f.lookupPC)
	return nil
}

// Lookup finds a variable by name as the program sees it from this frame: locals and
// parameters (innermost first), then the function's static variables, then (lookupScoped)
// the compile unit's statics, the program's globals, and the libraries' external globals.
func (f *Frame) Lookup(name string) (*Value, error) { return f.lookup(name, false) }

// lookup is Lookup that also finds enumerators and functions when constants is set.
func (f *Frame) lookup(name string, constants bool) (*Value, error) {
	if err := f.ensureChain(); err != nil {
		return nil, err
	}
	chain := f.scopeChain()
	for _, s := range chain {
		for i := len(s.vars) - 1; i >= 0; i-- {
			d := s.vars[i]
			if d.name == name {
				return f.newVariable(d).Value(), nil
			}
		}
	}
	// C++: members of the object "this" points to, then template value parameters.
	if len(chain) > 0 && f.Function != nil && f.Function.Language() == LangCPlusPlus {
		fn := chain[len(chain)-1]
		for _, d := range fn.vars {
			if d.name == "this" && d.param {
				this := f.newVariable(d).Value()
				if obj, err := this.Deref(); err == nil {
					if m := obj.findField(name, 0); m != nil {
						m.Name = "this->" + name
						return m, nil
					}
				}
			}
		}
		if v := f.templateParam(name); v != nil {
			return v, nil
		}
	}
	return f.proc.lookupScoped(name, f, constants)
}

// templateParam finds a template value parameter of the frame's function or of the class it
// is a member of.
func (f *Frame) templateParam(name string) *Value {
	b := f.Module.Bin
	dies := []dwarf.Offset{f.Function.off}
	if f.Function.spec != 0 {
		if cls, ok := b.declParent[f.Function.spec]; ok {
			dies = append(dies, cls)
		}
	}
	for _, die := range dies {
		r := b.dw.Reader()
		r.Seek(die)
		e, err := r.Next()
		if err != nil || e == nil || !e.Children {
			continue
		}
		for {
			c, err := r.Next()
			if err != nil || c == nil || c.Tag == 0 {
				break
			}
			if c.Tag == dwarf.TagTemplateValueParameter {
				if n, _ := c.Val(dwarf.AttrName).(string); n == name {
					if v, err := f.proc.dieValue(f.Module, f, c.Offset); err == nil {
						v.Name = name
						return v
					}
				}
			}
			if c.Children {
				r.SkipChildren()
			}
		}
	}
	return nil
}

// LookupGlobal finds a global variable (or module variable, or static) by name as frame f
// sees it (see lookupScoped); f may be nil: then as the program sees it.
func (p *Process) LookupGlobal(name string, f *Frame) (*Value, error) {
	return p.lookupScoped(name, f, false)
}

// varValue computes the value of a scope variable.
func (p *Process) varValue(mod *Module, f *Frame, d varDecl) (*Value, error) {
	b := mod.Bin
	if d.noLocation {
		t, err := b.declType(d.abstract)
		if err != nil {
			return nil, err
		}
		return optimizedOut(p, mod, f, t), nil
	}
	if d.external {
		if v, err := p.LookupGlobal(d.name, f); err == nil {
			return v, nil
		}
	}
	return p.dieValue(mod, f, d.off)
}

// declType returns the type of a variable DIE, following its abstract origin.
func (b *Binary) declType(off dwarf.Offset) (*Type, error) {
	for i := 0; i < 4; i++ {
		e, err := b.entryAt(off)
		if err != nil {
			return nil, err
		}
		if t, ok := e.Val(dwarf.AttrType).(dwarf.Offset); ok {
			return b.typeAt(t)
		}
		o, ok := e.Val(dwarf.AttrAbstractOrigin).(dwarf.Offset)
		if !ok {
			o, ok = e.Val(dwarf.AttrSpecification).(dwarf.Offset)
		}
		if !ok {
			return voidType, nil
		}
		off = o
	}
	return voidType, nil
}

// dieValue computes the value of the variable described by the DIE at off, in frame f (nil
// for globals outside any frame).
func (p *Process) dieValue(mod *Module, f *Frame, off dwarf.Offset) (*Value, error) {
	b := mod.Bin
	e, err := b.entryAt(off)
	if err != nil {
		return nil, err
	}
	cu := b.cuForOffset(off)
	t, err := b.declType(off)
	if err != nil {
		return nil, err
	}
	name, _ := e.Val(dwarf.AttrName).(string)
	if cv := e.AttrField(dwarf.AttrConstValue); cv != nil {
		v := newBytesValue(p, mod, f, t, constBytes(cv, t, p.Arch))
		v.Name = name
		return v, nil
	}
	fld := e.AttrField(dwarf.AttrLocation)
	if fld == nil {
		// A declaration: the definition may be elsewhere (extern, or a class static member).
		if decl, _ := e.Val(dwarf.AttrDeclaration).(bool); decl && name != "" {
			if v, err := p.LookupGlobal(name, nil); err == nil {
				return v, nil
			}
		}
		if o, ok := e.Val(dwarf.AttrAbstractOrigin).(dwarf.Offset); ok {
			if oe, err := b.entryAt(o); err == nil {
				if cv := oe.AttrField(dwarf.AttrConstValue); cv != nil {
					return newBytesValue(p, mod, f, t, constBytes(cv, t, p.Arch)), nil
				}
			}
		}
		// A definition the assembler made (an alias, such as libc's environ for __environ):
		// the ELF symbol of its name locates it, as gdb's minimal symbols do.
		if decl, _ := e.Val(dwarf.AttrDeclaration).(bool); !decl {
			sname := name
			if spec, ok := e.Val(dwarf.AttrSpecification).(dwarf.Offset); ok && sname == "" {
				sname = b.declNames[spec]
			}
			for _, s := range b.syms.named(sname) {
				if sname == "" {
					break
				}
				if !s.Func && s.Addr != 0 {
					v := newMemValue(p, mod, f, t, s.Addr+mod.Bias)
					v.Name = sname
					return v, nil
				}
			}
		}
		return optimizedOut(p, mod, f, t), nil
	}
	pc := uint64(0)
	if f != nil {
		pc = f.lookupPC
	}
	expr, err := b.locationExpr(cu, fld, pc)
	if err != nil {
		return nil, err
	}
	if expr == nil {
		return optimizedOut(p, mod, f, t), nil
	}
	env := p.env(mod, f, cu)
	loc, err := dwop.Eval(expr, env)
	if err != nil {
		if errors.Is(err, dwop.ErrUnavailable) {
			return optimizedOut(p, mod, f, t), nil
		}
		return nil, fmt.Errorf("%s: location %s: %w", name,
			dwop.Disassemble(expr, p.Arch.ByteOrder, p.Arch.PtrSize), err)
	}
	v := p.valueAt(mod, f, t, loc)
	v.Name = name
	if t.IsDynamic() {
		return p.resolveDynamic(v)
	}
	return v, nil
}

// constBytes encodes DW_AT_const_value in the type's size and the target byte order.
func constBytes(f *dwarf.Field, t *Type, a *Arch) []byte {
	switch v := f.Val.(type) {
	case []byte:
		return v
	case string:
		b := append([]byte(v), 0)
		if t.Size > 0 && int64(len(b)) > t.Size {
			b = b[:t.Size]
		}
		return b
	case int64:
		n := t.Size
		if n <= 0 || n > 8 {
			n = 8
		}
		b := make([]byte, 8)
		a.ByteOrder.PutUint64(b, uint64(v))
		if a.ByteOrder.String() == "BigEndian" {
			return b[8-n:]
		}
		return b[:n]
	}
	return nil
}
