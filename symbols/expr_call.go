package symbols

import (
	"debug/dwarf"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"
)

// Function calls in expressions. The evaluator classifies the callee and its arguments with
// the debugging information and hands the call to a Caller, which runs it in the process; the
// layers below (the adapter, its agent) own the run control and the machine's calling
// convention.

// Caller runs a function of the debugged process for an expression that calls one. Call
// returns the value the function returned, as Call.Return classifies it (an integer register,
// or the bits of a float or double); errors say why the call did not return (a signal, a
// timeout), with the process put back as it was.
type Caller interface {
	Call(c *Call) (uint64, error)
}

// ArgKind classifies an argument or return value for a calling convention.
type ArgKind int

const (
	ArgVoid    ArgKind = iota // no value (returns only)
	ArgInt                    // integers, pointers, enums, bool, char: extended to 64 bits
	ArgFloat32                // a float's IEEE single bits
	ArgFloat64                // a double's IEEE double bits
	// ArgData: an address in Call.Data, which the caller copies into the process (on the
	// calling thread's stack); Bits is the offset in Data.
	ArgData
)

// CallArg is one argument of a Call.
type CallArg struct {
	Kind ArgKind
	Bits uint64
}

// Call is one function call for a Caller.
type Call struct {
	Name  string // the function as the expression names it, for messages
	Entry uint64 // code address (Power ELFv2: the global entry point)
	TOC   uint64 // Power ELFv1: r2 from the function's descriptor (0: unknown)
	// IFunc: Entry is a GNU indirect function's resolver, called with AT_HWCAP to find the
	// function; the Caller does both calls.
	IFunc  bool
	Args   []CallArg
	Data   []byte
	Return ArgKind
}

// EvalOptions adjusts one evaluation.
type EvalOptions struct {
	// Caller runs the functions an expression calls; nil refuses calls.
	Caller Caller
}

// EvalWith evaluates an expression in the frame's scope, as Eval does, with options.
func (f *Frame) EvalWith(expr string, o EvalOptions) (*Value, error) {
	return f.proc.evalWith(expr, f, o)
}

// EvalWith evaluates an expression outside any frame (globals only), with options.
func (p *Process) EvalWith(expr string, o EvalOptions) (*Value, error) {
	return p.evalWith(expr, nil, o)
}

// errNoCalls is the answer to a call where no Caller serves the evaluation.
var errNoCalls = errors.New("calling functions in the debugged program is not supported here")

// callFunction evaluates a call of the function (or pointer to function) fn. ret, when not
// nil, is the type a cast around the call gives a function whose return type is unknown.
func (e *evaluator) callFunction(fn *Value, args []*node, ret *Type) (*Value, error) {
	return e.callFunctionThis(fn, args, ret, nil)
}

// callFunctionThis is callFunction with, for a C++ member function, the object's address.
func (e *evaluator) callFunctionThis(fn *Value, args []*node, ret *Type, this *uint64) (*Value, error) {
	if e.caller == nil {
		return nil, errNoCalls
	}
	name := fn.Name
	ft := fn.Type.Strip()
	if e.lang == LangFortran || ft.Lang == LangFortran {
		// Fortran passes arguments by reference, with hidden lengths for strings.
		return nil, fmt.Errorf("calling the Fortran procedure %s from an expression is not supported", name)
	}
	var entry, toc uint64
	if ft.Kind == KindPointer {
		p, err := fn.Uint()
		if err != nil {
			return nil, err
		}
		ft = ft.Elem.Strip()
		if ft == nil || ft.Kind != KindFunc {
			return nil, fmt.Errorf("Cannot perform a function call through a pointer to `%s'.", fn.Type)
		}
		entry = p
		if e.p.Arch.ELFv1() {
			// A function pointer is the address of a descriptor.
			var err error
			if entry, toc, err = e.p.ReadDescriptor(p); err != nil {
				return nil, err
			}
		}
	} else {
		a, ok := fn.Address()
		if !ok {
			return nil, fmt.Errorf("Invalid function `%s'.", name)
		}
		entry = a
		if e.p.Arch.ELFv1() {
			if e.inOPD(entry) {
				// A dereferenced function pointer: the address of a descriptor.
				var err error
				if entry, toc, err = e.p.ReadDescriptor(entry); err != nil {
					return nil, err
				}
			} else {
				toc = e.tocOf(fn.mod, entry)
			}
		}
	}
	rt := ft.Elem
	if rt != nil && rt.Kind == KindUnspecified {
		rt = nil // assembly code's DWARF: the return type is not known
	}
	if ret != nil {
		rt = ret
	}
	if rt == nil {
		return nil, fmt.Errorf("'%s' has unknown return type; cast the call to its declared return type", name)
	}
	c := &Call{Name: name, Entry: entry, TOC: toc, IFunc: fn.ifunc}
	var err error
	if c.Return, err = e.callKind(rt, "returns"); err != nil {
		return nil, err
	}
	params := ft.Params
	if this != nil {
		c.Args = append(c.Args, CallArg{Kind: ArgInt, Bits: *this})
		if len(params) > 0 {
			params = params[1:]
		}
	}
	if ft.Prototyped && len(args) < len(params) {
		return nil, errors.New("Too few arguments in function call.")
	}
	for i, param := range params { // refused before any argument is evaluated (and runs code)
		if ps := param.Strip(); ft.Prototyped && i < len(args) && ps != nil && (ps.Kind == KindStruct || ps.Kind == KindUnion) {
			return nil, fmt.Errorf("passing `%s' by value (argument %d) is not supported", param, i+1)
		}
	}
	for i, a := range args {
		v, err := e.eval(a)
		if err != nil {
			return nil, err
		}
		var param *Type
		if ft.Prototyped && i < len(params) {
			param = params[i]
		}
		arg, err := e.callArg(c, rval(v), param, i+1)
		if err != nil {
			return nil, err
		}
		c.Args = append(c.Args, arg)
	}
	bits, err := e.caller.Call(c)
	if err != nil {
		return nil, err
	}
	s := rt.Strip()
	switch c.Return {
	case ArgVoid:
		return newBytesValue(e.p, e.mod, e.f, voidType, []byte{0}), nil
	case ArgFloat32, ArgFloat64:
		b := make([]byte, s.Size)
		putUint(b, bits, e.p.Arch)
		return newBytesValue(e.p, e.mod, e.f, rt, b), nil
	}
	v := e.mkInt(s, bits)
	v.Type = rt
	return v, nil
}

// callKind classifies a parameter or return type for the calling convention.
func (e *evaluator) callKind(t *Type, what string) (ArgKind, error) {
	s := t.Strip()
	if s == nil {
		return ArgVoid, fmt.Errorf("a function that %s an unknown type cannot be called", what)
	}
	switch s.Kind {
	case KindVoid:
		return ArgVoid, nil
	case KindInt, KindUint, KindBool, KindChar, KindEnum, KindPointer, KindRef, KindRvalueRef:
		if s.Size > 8 {
			break
		}
		return ArgInt, nil
	case KindFloat:
		switch s.Size {
		case 4:
			return ArgFloat32, nil
		case 8:
			return ArgFloat64, nil
		}
	}
	return ArgVoid, fmt.Errorf("calling a function that %s `%s' is not supported", what, t)
}

// callArg converts argument number n to the parameter's type (or, without one, applies C's
// default promotions) and classifies it.
func (e *evaluator) callArg(c *Call, v *Value, param *Type, n int) (CallArg, error) {
	vs := v.Type.Strip()
	if vs == nil {
		return CallArg{}, fmt.Errorf("argument %d has an unknown type", n)
	}
	if param != nil {
		ps := param.Strip()
		if ps != nil && (ps.Kind == KindRef || ps.Kind == KindRvalueRef) {
			// A reference parameter takes the object's address.
			a, ok := v.Address()
			if !ok {
				return CallArg{}, fmt.Errorf("argument %d: a reference needs an object in memory", n)
			}
			return CallArg{Kind: ArgInt, Bits: a}, nil
		}
		if ps != nil && (ps.Kind == KindStruct || ps.Kind == KindUnion) {
			return CallArg{}, fmt.Errorf("passing `%s' by value (argument %d) is not supported", param, n)
		}
	}
	switch vs.Kind {
	case KindArray, KindString:
		// An array decays to a pointer to its first element; one that lives only in the
		// expression (a string literal) is copied into the process for the call.
		if a, ok := v.Address(); ok {
			return CallArg{Kind: ArgInt, Bits: a}, nil
		}
		b, err := v.Bytes()
		if err != nil {
			return CallArg{}, err
		}
		off := uint64(len(c.Data))
		c.Data = append(c.Data, b...)
		if vs.Kind == KindString {
			c.Data = append(c.Data, 0)
		}
		for len(c.Data)%8 != 0 {
			c.Data = append(c.Data, 0)
		}
		return CallArg{Kind: ArgData, Bits: off}, nil
	case KindFunc:
		a, ok := v.Address()
		if !ok {
			return CallArg{}, fmt.Errorf("argument %d: function without an address", n)
		}
		return CallArg{Kind: ArgInt, Bits: a}, nil
	case KindStruct, KindUnion:
		return CallArg{}, fmt.Errorf("passing `%s' by value (argument %d) is not supported", v.Type, n)
	}
	if param == nil {
		// Default promotions: float to double, small integers to int.
		switch {
		case vs.Kind == KindFloat && vs.Size < 8:
			param = e.builtin("double")
		case vs.Kind == KindFloat:
			param = v.Type
		case isIntegral(v.Type) && vs.Size < 4:
			param = e.builtin("int")
		default:
			param = v.Type
		}
	}
	k, err := e.callKind(param, "takes")
	if err != nil {
		return CallArg{}, fmt.Errorf("argument %d: %w", n, err)
	}
	cv, err := e.convert(v, param)
	if err != nil {
		return CallArg{}, fmt.Errorf("argument %d: %w", n, err)
	}
	switch k {
	case ArgFloat32:
		f, err := cv.Float()
		return CallArg{Kind: k, Bits: uint64(math.Float32bits(float32(f)))}, err
	case ArgFloat64:
		f, err := cv.Float()
		return CallArg{Kind: k, Bits: math.Float64bits(f)}, err
	}
	ps := param.Strip()
	if ps.Kind == KindInt || (ps.Kind == KindChar && ps.Encoding == ateSignedChar) ||
		(ps.Kind == KindEnum && ps.Elem != nil && ps.Elem.Strip().Kind == KindInt) {
		i, err := cv.Int()
		return CallArg{Kind: ArgInt, Bits: uint64(i)}, err
	}
	u, err := cv.Uint()
	return CallArg{Kind: ArgInt, Bits: u}, err
}

// inOPD reports whether a run-time address lies in the .opd section (of function
// descriptors) of its module.
func (e *evaluator) inOPD(addr uint64) bool {
	m := e.p.ModuleAt(addr)
	if m == nil || m.Bin.opd == nil {
		return false
	}
	o := m.Bin.opd
	a := addr - m.Bias
	return a >= o.addr && a < o.addr+uint64(len(o.data))
}

// tocOf finds the TOC pointer of an ELFv1 function from its descriptor in the module's .opd,
// read from the process (where it is relocated). 0 when there is none.
func (e *evaluator) tocOf(m *Module, entry uint64) uint64 {
	if m == nil {
		m = e.p.ModuleAt(entry)
	}
	if m == nil || m.Bin.opd == nil {
		return 0
	}
	o := m.Bin.opd
	code := entry - m.Bias
	for off := 0; off+24 <= len(o.data); off += 24 {
		if o.order.Uint64(o.data[off:]) != code {
			continue
		}
		if _, toc, err := e.p.ReadDescriptor(o.addr + uint64(off) + m.Bias); err == nil {
			return toc
		}
		return o.order.Uint64(o.data[off+8:]) + m.Bias
	}
	return 0
}

// ReadDescriptor reads an ELFv1 function descriptor (big-endian ppc64) at addr in the process:
// the function's code address, then its TOC pointer.
func (p *Process) ReadDescriptor(addr uint64) (entry, toc uint64, err error) {
	var d [16]byte
	if err := p.ReadMemory(d[:], addr); err != nil {
		return 0, 0, err
	}
	return binary.BigEndian.Uint64(d[:]), binary.BigEndian.Uint64(d[8:]), nil
}

// minimalFunction finds a function that has an ELF symbol but no debugging information
// (libc's strlen): a value of function type whose return type is unknown.
func (e *evaluator) minimalFunction(name string) *Value {
	for _, m := range e.p.mods {
		for _, s := range m.Bin.syms.named(name) {
			if !s.Func {
				continue
			}
			t := &Type{Kind: KindFunc, Size: 1, Lang: e.lang}
			v := newMemValue(e.p, m, e.f, t, s.Addr+m.Bias)
			v.Name = name
			v.ifunc = s.IFunc
			return v
		}
	}
	return nil
}

// callee evaluates the function part of a call: as an expression, or, for a name with no
// debugging information, from the ELF symbols.
func (e *evaluator) callee(n *node) (*Value, error) {
	v, err := e.eval(n)
	if err == nil || n.op != "ident" {
		return v, err
	}
	if fv := e.minimalFunction(n.text); fv != nil {
		return fv, nil
	}
	return nil, err
}

// isCallable reports whether a value can be called.
func isCallable(v *Value) bool {
	s := v.Type.Strip()
	if s == nil {
		return false
	}
	if s.Kind == KindFunc {
		return true
	}
	return s.Kind == KindPointer && s.Elem != nil && s.Elem.Strip() != nil && s.Elem.Strip().Kind == KindFunc
}

// methodCall evaluates obj.f(args) and p->f(args) where f is a C++ member function of the
// object's class: the object's address is the hidden first argument (this). ok is false when
// the callee is not a member function.
func (e *evaluator) methodCall(n *node, ret *Type) (v *Value, ok bool, err error) {
	k := n.kids[0]
	if (k.op != "member" && k.op != "arrow") || e.lang == LangFortran {
		return nil, false, nil
	}
	obj, err := e.eval(k.kids[0])
	if err != nil {
		return nil, false, nil // the ordinary path reports it
	}
	obj = rval(obj)
	if s := obj.Type.Strip(); s != nil && s.Kind == KindPointer {
		if obj, err = obj.Deref(); err != nil {
			return nil, false, nil
		}
	}
	st := obj.Type.Strip()
	if st == nil || st.Kind != KindStruct {
		return nil, false, nil
	}
	if _, err := obj.Field(k.text); err == nil {
		return nil, false, nil // a data member (a pointer to function, say)
	}
	fv, off, slot, err := e.findMethod(st, k.text, len(n.kids)-1)
	if err != nil {
		return nil, true, err
	}
	if fv == nil {
		return nil, true, fmt.Errorf("Couldn't find method %s::%s", st.Name, k.text)
	}
	this, inMem := obj.Address()
	if !inMem {
		return nil, true, fmt.Errorf("cannot call method %s::%s on an object that is not in memory", st.Name, k.text)
	}
	this += uint64(off)
	if slot >= 0 {
		// A virtual function: the object's virtual table (its first word) says which
		// function its dynamic type has in that slot: a code address, or an ELFv1 descriptor,
		// which is what a pointer to the function holds.
		ps := uint64(e.p.Arch.PtrSize)
		vtbl, err := e.p.readUint(this, int(ps))
		if err != nil {
			return nil, true, err
		}
		target, err := e.p.readUint(vtbl+uint64(slot)*ps, int(ps))
		if err != nil {
			return nil, true, err
		}
		pt := &Type{Kind: KindPointer, Size: int64(ps), Elem: fv.Type, Lang: e.lang}
		ptr := e.mkInt(pt, target)
		ptr.Name = fv.Name
		fv = ptr
	}
	v, err = e.callFunctionThis(fv, n.kids[1:], ret, &this)
	return v, true, err
}

// findMethod finds member function name of class st or, failing that, of its non-virtual base
// classes (off: where the base lies in the object). Among overloads, the one taking nargs
// arguments is preferred. slot is the virtual-table slot of a virtual function, else -1.
func (e *evaluator) findMethod(st *Type, name string, nargs int) (fv *Value, off int64, slot int, err error) {
	slot = -1
	for _, m := range e.p.mods {
		for _, fn := range m.Bin.Functions() {
			if fn.Name != st.Name+"::"+name && !strings.HasSuffix(fn.Name, "::"+st.Name+"::"+name) {
				continue
			}
			cand := e.p.functionValue(m, e.f, fn, fn.Name)
			if fv == nil || len(cand.Type.Params) == nargs+1 { // this + the arguments
				fv, slot = cand, m.Bin.vtableSlot(fn)
			}
		}
	}
	if fv != nil {
		return fv, 0, slot, nil
	}
	for _, f := range st.Fields {
		bt := f.Type.Strip()
		if !f.Base || bt == nil || bt.Kind != KindStruct {
			continue
		}
		bv, boff, bslot, err := e.findMethod(bt, name, nargs)
		if err != nil || bv == nil {
			continue
		}
		if f.Virtual {
			return nil, 0, -1, fmt.Errorf("calling %s through the virtual base %s is not supported", bv.Name, bt.Name)
		}
		return bv, f.Offset + boff, bslot, nil
	}
	return nil, 0, -1, nil
}

// vtableSlot returns the virtual-table slot of a virtual member function (from
// DW_AT_vtable_elem_location on its declaration, DW_OP_constu n), or -1.
func (b *Binary) vtableSlot(fn *Function) int {
	for _, off := range []dwarf.Offset{fn.off, fn.spec} {
		if off == 0 {
			continue
		}
		ent, err := b.entryAt(off)
		if err != nil {
			continue
		}
		loc, ok := ent.Val(dwarf.AttrVtableElemLoc).([]byte)
		if !ok || len(loc) < 2 || loc[0] != 0x10 { // DW_OP_constu
			continue
		}
		n, shift := 0, 0
		for _, c := range loc[1:] {
			n |= int(c&0x7f) << shift
			shift += 7
			if c&0x80 == 0 {
				return n
			}
		}
	}
	return -1
}
