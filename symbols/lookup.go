package symbols

import (
	"debug/dwarf"
	"fmt"
)

// Names outside a frame's blocks are found as the language's scope rules say: the frame's
// compile unit (its statics, enumerators and functions), then the names with external linkage
// of the frame's module and of the program, then what other compile units of the program keep
// to themselves (as gdb finds them), and the libraries last, only for their external names: a
// library's statics and enumerators are not the program's to name.

// tier orders where a definition is found, nearest first.
type tier int

const (
	tierFile          tier = iota // the frame's compile unit
	tierModule                    // external names of the frame's module
	tierProgram                   // external names of the executable
	tierProgramStatic             // internal names of other units of the frame's module or the executable
	tierLibrary                   // external names of other modules
	tierHidden                    // not visible from here
)

// tierOf says how a definition in unit cu of module m, with external linkage or not, is seen
// from frame f (nil: from the program, outside any frame).
func (p *Process) tierOf(f *Frame, m *Module, cu *compUnit, external bool) tier {
	exe := p.Executable()
	home := exe
	if f != nil && f.Module != nil {
		home = f.Module
	}
	switch {
	case f != nil && f.Function != nil && m == f.Module && cu == f.Function.cu:
		return tierFile
	case m == home && external:
		return tierModule
	case m == exe && external:
		return tierProgram
	case m == home || m == exe:
		return tierProgramStatic
	case external:
		return tierLibrary
	}
	return tierHidden
}

// nearestTier is the nearest tier anything in module m can have from frame f.
func (p *Process) nearestTier(f *Frame, m *Module) tier {
	switch {
	case f != nil && f.Function != nil && m == f.Module:
		return tierFile
	case f != nil && f.Module != nil && m == f.Module || (f == nil || f.Module == nil) && m == p.Executable():
		return tierModule
	case m == p.Executable():
		return tierProgram
	}
	return tierLibrary
}

// lookupScoped finds a name outside the frame's blocks: a variable and, when constants is
// set, an enumerator or a function. At the same distance a variable comes first.
func (p *Process) lookupScoped(name string, f *Frame, constants bool) (*Value, error) {
	best := tierHidden
	var found func() (*Value, error)
	consider := func(t tier, value func() (*Value, error)) {
		if t < best {
			best, found = t, value
		}
	}
	for _, m := range p.mods {
		if m.Bin.dw == nil {
			continue
		}
		for _, r := range m.Bin.globals[name] {
			consider(p.tierOf(f, m, r.cu, r.ext), func() (*Value, error) {
				v, err := p.dieValue(m, f, r.off)
				if err != nil {
					return nil, err
				}
				v.Name = name
				return v, nil
			})
		}
	}
	if constants {
		for _, m := range p.mods {
			if m.Bin.dw == nil {
				continue
			}
			for _, r := range m.Bin.enumerators[name] {
				// Enumerators have no linkage: each unit that declares them sees them.
				consider(p.tierOf(f, m, r.cu, false), func() (*Value, error) {
					return p.enumeratorValue(m, f, r, name)
				})
			}
		}
		if best > tierFile {
			for _, m := range p.mods {
				if m.Bin.dw == nil || p.nearestTier(f, m) >= best {
					continue // nothing in m can be nearer than what was found
				}
				for _, fn := range m.Bin.FunctionsNamed(name) {
					consider(p.tierOf(f, m, fn.cu, m.Bin.funcExternal(fn)), func() (*Value, error) {
						return p.functionValue(m, f, fn, name), nil
					})
				}
				// A global ELF symbol that names a function the debugging information knows
				// by another name (libc's puts is _IO_puts), as gdb's minimal symbols find it.
				for _, sym := range m.Bin.syms.named(name) {
					if !sym.Func || sym.Local {
						continue
					}
					if fn := m.Bin.FunctionAt(sym.Addr); fn != nil && fn.Entry == sym.Addr {
						consider(p.tierOf(f, m, nil, true), func() (*Value, error) {
							return p.functionValue(m, f, fn, name), nil
						})
					}
				}
			}
		}
	}
	if found == nil {
		return nil, &UnknownNameError{Name: name}
	}
	return found()
}

// UnknownNameError is an expression's failure on a name that nothing in scope has: no local,
// no global of any module, no function, type or enumeration constant. Where it is the reason,
// the same expression fails the same way in every frame of the same code with the same
// modules loaded, whatever the values.
type UnknownNameError struct{ Name string }

func (e *UnknownNameError) Error() string {
	return fmt.Sprintf("No symbol \"%s\" in current context.", e.Name)
}

// funcExternal reports whether a function has external linkage: marked so, or declared in a
// class (C++ member functions), or an out-of-line copy of a function that is.
func (b *Binary) funcExternal(fn *Function) bool {
	if fn.External || fn.spec != 0 {
		return true
	}
	if fn.origin != 0 {
		if e, err := b.entryAt(fn.origin); err == nil {
			ext, _ := e.Val(dwarf.AttrExternal).(bool)
			return ext
		}
	}
	return false
}

// enumeratorValue is the value of the enumeration constant name of the enumeration type at r.
func (p *Process) enumeratorValue(m *Module, f *Frame, r dieRef, name string) (*Value, error) {
	t, err := m.Bin.typeAt(r.off)
	if err != nil {
		return nil, err
	}
	for _, en := range t.Enumerators {
		if unqualified(en.Name) == unqualified(name) {
			b := make([]byte, t.Size)
			putUint(b, uint64(en.Value), p.Arch)
			return newBytesValue(p, m, f, t, b), nil
		}
	}
	return nil, &UnknownNameError{Name: name}
}

// functionValue is a function as a value: its address, of function type (a C++ method's
// declaration holds its type).
func (p *Process) functionValue(m *Module, f *Frame, fn *Function, name string) *Value {
	if m.Bin.isIFunc(fn, name) {
		// A GNU indirect function (libc's strlen): the code at its symbol is the resolver,
		// whose type is not the function's; a call runs the resolver first to find the
		// function, and needs the return type by a cast, as for a function known only by its
		// ELF symbol.
		v := newMemValue(p, m, f, &Type{Kind: KindFunc, Size: 1, Lang: fn.cu.Lang}, fn.Entry+m.Bias)
		v.Name, v.ifunc = name, true
		return v
	}
	t := &Type{Kind: KindFunc, Size: 1, Lang: fn.cu.Lang}
	for _, off := range []dwarf.Offset{fn.off, fn.spec} {
		ent, err := m.Bin.entryAt(off)
		if off == 0 || err != nil {
			continue
		}
		if pr, ok := ent.Val(dwarf.AttrPrototyped).(bool); ok {
			t.Prototyped = t.Prototyped || pr
		}
		if rt, ok := ent.Val(dwarf.AttrType).(dwarf.Offset); ok && t.Elem == nil {
			t.Elem, _ = m.Bin.typeAt(rt)
		}
	}
	if t.Lang == LangCPlusPlus {
		t.Prototyped = true // C++ functions always have prototypes
	}
	t.Params = m.Bin.paramTypes(fn)
	if t.Elem == nil {
		t.Elem = voidType
	}
	v := newMemValue(p, m, f, t, fn.Entry+m.Bias)
	v.Name = name
	return v
}

// isIFunc reports whether fn, known as name, is the resolver of a GNU indirect function.
func (b *Binary) isIFunc(fn *Function, name string) bool {
	for _, s := range b.syms.named(name) {
		if s.IFunc && s.Addr == fn.Entry {
			return true
		}
	}
	s, ok := b.syms.lookup(fn.Entry)
	return ok && s.IFunc && s.Addr == fn.Entry
}
