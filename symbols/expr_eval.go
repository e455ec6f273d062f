package symbols

import (
	"debug/elf"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Eval evaluates an expression in the scope of the frame: its locals and parameters, then
// globals. The syntax is C's (C++ scope names allowed) or Fortran's, following the language
// of the frame's function. Supported: identifiers, literals, registers ($pc, $sp, $rax),
// . -> % [] and Fortran subscripts and sections, unary * & - ! ~, arithmetic, comparison,
// logical and bit operators, casts to base types and pointers, sizeof, ?:, the gdb
// artificial-array operator @, and assignment (=, +=, -=, *=, /=).
func (f *Frame) Eval(expr string) (*Value, error) { return f.proc.eval(expr, f) }

// Eval evaluates an expression outside any frame (globals only).
func (p *Process) Eval(expr string) (*Value, error) { return p.eval(expr, nil) }

type evaluator struct {
	p      *Process
	f      *Frame
	lang   Language
	mod    *Module
	caller Caller // runs the functions the expression calls (nil: calls are refused)
}

func (p *Process) eval(expr string, f *Frame) (*Value, error) {
	return p.evalWith(expr, f, EvalOptions{})
}

func (p *Process) evalWith(expr string, f *Frame, o EvalOptions) (v *Value, err error) {
	defer func() {
		if r := recover(); r != nil {
			v, err = nil, fmt.Errorf("symbols: evaluating %q: internal error: %v", expr, r)
		}
	}()
	e := &evaluator{p: p, f: f, lang: LangC, caller: o.Caller}
	if f != nil && f.Function != nil {
		e.lang = f.Function.Language()
		e.mod = f.Module
	} else if exe := p.Executable(); exe != nil {
		e.mod = exe
		if len(exe.Bin.cus) > 0 {
			e.lang = exe.Bin.cus[0].Lang
		}
	}
	if e.lang == LangUnknown {
		e.lang = LangC
	}
	n, err := parseExpr(expr, e.lang == LangFortran, e.isTypeName)
	if err != nil {
		return nil, err
	}
	v, err = e.eval(n)
	if err != nil {
		return nil, err
	}
	if err := v.Fetch(); err != nil {
		return nil, err
	}
	return v, nil
}

func (e *evaluator) isTypeName(name string) bool {
	if e.mod == nil {
		return false
	}
	_, ok := e.mod.Bin.types[name]
	return ok
}

// builtin returns a base type by gdb's name, taken from the program's DWARF when present so
// that names print as the program spells them.
func (e *evaluator) builtin(name string) *Type {
	size := map[string]int64{"char": 1, "signed char": 1, "unsigned char": 1, "short": 2, "unsigned short": 2,
		"int": 4, "unsigned int": 4, "long": 8, "unsigned long": 8, "long long": 8, "unsigned long long": 8,
		"float": 4, "double": 8, "long double": 16, "bool": 1, "_Bool": 1,
		"integer(kind=4)": 4, "integer(kind=8)": 8, "real(kind=4)": 4, "real(kind=8)": 8, "logical(kind=4)": 4}
	n, ok := size[name]
	if !ok {
		return nil
	}
	t := &Type{Name: name, Size: n, Lang: e.lang}
	switch {
	case strings.Contains(name, "char"):
		t.Kind, t.Encoding = KindChar, ateSignedChar
		if strings.HasPrefix(name, "unsigned") {
			t.Encoding = ateUnsignedChar
		}
	case name == "float" || name == "double" || name == "long double" || strings.HasPrefix(name, "real"):
		t.Kind, t.Encoding = KindFloat, ateFloat
		if name == "long double" && e.p.Arch.Machine == elf.EM_X86_64 {
			t.Size = 16
		}
	case name == "bool" || name == "_Bool" || strings.HasPrefix(name, "logical"):
		t.Kind, t.Encoding = KindBool, ateBoolean
	case strings.HasPrefix(name, "unsigned"):
		t.Kind, t.Encoding = KindUint, ateUnsigned
	default:
		t.Kind, t.Encoding = KindInt, ateSigned
	}
	return t
}

func (e *evaluator) boolType() *Type {
	switch e.lang {
	case LangCPlusPlus:
		return e.builtin("bool")
	case LangFortran:
		return e.builtin("logical(kind=4)")
	}
	return e.builtin("int")
}

func (e *evaluator) intType() *Type {
	if e.lang == LangFortran {
		return e.builtin("integer(kind=4)")
	}
	return e.builtin("int")
}

func (e *evaluator) longType(unsigned bool) *Type {
	if unsigned {
		return e.builtin("unsigned long")
	}
	return e.builtin("long")
}

// keywordLiteral returns the value of a literal the language spells as a keyword: C++'s true,
// false and nullptr (a null pointer that compares with and converts to any pointer). C has
// none (C23's true and false are macros in the C libraries gdb reads), so there they are
// names like any other.
func (e *evaluator) keywordLiteral(name string) *Value {
	if e.lang != LangCPlusPlus {
		return nil
	}
	switch name {
	case "true", "false":
		v := e.mkInt(e.boolType(), 0)
		if name == "true" {
			v = e.mkInt(e.boolType(), 1)
		}
		return v
	case "nullptr":
		return e.mkInt(&Type{Kind: KindPointer, Size: int64(e.p.Arch.PtrSize), Elem: voidType, Lang: e.lang}, 0)
	}
	return nil
}

// mkInt makes an integer (or bool/char) value of type t.
func (e *evaluator) mkInt(t *Type, v uint64) *Value {
	b := make([]byte, t.Size)
	putUint(b, v, e.p.Arch)
	return newBytesValue(e.p, e.mod, e.f, t, b)
}

func (e *evaluator) mkFloat(t *Type, f float64) *Value {
	b := make([]byte, t.Size)
	switch t.Size {
	case 4:
		putUint(b, uint64(math.Float32bits(float32(f))), e.p.Arch)
	case 8:
		putUint(b, math.Float64bits(f), e.p.Arch)
	default:
		// Arithmetic on long double is done in double precision.
		t = e.builtin("double")
		b = make([]byte, 8)
		putUint(b, math.Float64bits(f), e.p.Arch)
	}
	return newBytesValue(e.p, e.mod, e.f, t, b)
}

func (e *evaluator) mkBool(c bool) *Value {
	if c {
		return e.mkInt(e.boolType(), 1)
	}
	return e.mkInt(e.boolType(), 0)
}

func (e *evaluator) eval(n *node) (*Value, error) {
	switch n.op {
	case "ident":
		return e.ident(n.text)
	case "int":
		return e.intLit(n.text)
	case "float":
		s := strings.TrimRight(n.text, "fFlL")
		if i := strings.IndexByte(s, '_'); i >= 0 {
			s = s[:i]
		}
		s = strings.NewReplacer("d", "e", "D", "e").Replace(s)
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return nil, fmt.Errorf("Invalid number \"%s\".", n.text)
		}
		t := e.builtin("double")
		if strings.HasSuffix(n.text, "f") || strings.HasSuffix(n.text, "F") {
			t = e.builtin("float")
		}
		if e.lang == LangFortran {
			t = e.builtin("real(kind=4)")
			if strings.ContainsAny(n.text, "dD") || strings.HasSuffix(n.text, "_8") {
				t = e.builtin("real(kind=8)")
			}
		}
		return e.mkFloat(t, f), nil
	case "char":
		c, err := parseCharLit(n.text)
		if err != nil {
			return nil, err
		}
		return e.mkInt(e.builtin("char"), uint64(c)), nil
	case "string":
		b := append([]byte(n.text), 0)
		t := &Type{Kind: KindArray, Size: int64(len(b)), Elem: e.builtin("char"), Lang: e.lang,
			Dims: []Dim{{Count: DynAttr{Set: true, Const: int64(len(b))}}}}
		if e.lang == LangFortran {
			b = b[:len(b)-1]
			t = &Type{Kind: KindString, Size: int64(len(b)), Lang: LangFortran,
				StrLen: DynAttr{Set: true, Const: int64(len(b))}, Elem: e.builtin("char")}
		}
		return newBytesValue(e.p, e.mod, e.f, t, b), nil
	case "bool":
		return e.mkBool(n.text == ".true."), nil
	case "reg":
		return e.register(n.text)
	case "unary":
		return e.unary(n)
	case "binary":
		return e.binary(n)
	case "index":
		a, err := e.eval(n.kids[0])
		if err != nil {
			return nil, err
		}
		i, err := e.eval(n.kids[1])
		if err != nil {
			return nil, err
		}
		a, i = rval(a), rval(i)
		if isIntegral(a.Type) && !isIntegral(i.Type) {
			a, i = i, a // i[a]
		}
		k, err := i.Int()
		if err != nil {
			return nil, err
		}
		v, err := a.Index(k)
		if err != nil {
			return nil, err
		}
		return e.resolve(v)
	case "call":
		return e.call(n)
	case "member", "arrow":
		v, err := e.eval(n.kids[0])
		if err != nil {
			return nil, err
		}
		if s := v.Type.Strip(); s != nil && s.Kind == KindPointer {
			if v, err = v.Deref(); err != nil {
				return nil, err
			}
		}
		name := n.text
		if e.lang == LangFortran {
			name = strings.ToLower(name)
		}
		m, err := v.Field(name)
		if err != nil {
			return nil, err
		}
		return e.resolve(m)
	case "cast":
		t, err := e.typeOf(n.typ)
		if err != nil {
			return nil, err
		}
		var v *Value
		if n.kids[0].op == "call" {
			v, err = e.callWith(n.kids[0], t) // the cast gives an unknown return type
		} else {
			v, err = e.eval(n.kids[0])
		}
		if err != nil {
			return nil, err
		}
		return e.convert(v, t)
	case "sizeof":
		var size int64
		if n.typ != nil {
			t, err := e.typeOf(n.typ)
			if err != nil {
				return nil, err
			}
			size = t.Size
		} else {
			v, err := e.eval(n.kids[0])
			if err != nil {
				return nil, err
			}
			size = v.Type.Size
			if size < 0 {
				size = v.Type.Strip().Size
			}
		}
		return e.mkInt(e.longType(true), uint64(size)), nil
	case "assign":
		return e.assign(n)
	case "cond":
		c, err := e.eval(n.kids[0])
		if err != nil {
			return nil, err
		}
		t, err := truth(c)
		if err != nil {
			return nil, err
		}
		if t {
			return e.eval(n.kids[1])
		}
		return e.eval(n.kids[2])
	case "range":
		return nil, errors.New("array sections are only valid as subscripts")
	}
	return nil, fmt.Errorf("unsupported expression")
}

// resolve gives dynamic (Fortran) values their concrete type.
func (e *evaluator) resolve(v *Value) (*Value, error) {
	if v.Type.IsDynamic() {
		return e.p.resolveDynamic(v)
	}
	return v, nil
}

func (e *evaluator) ident(name string) (*Value, error) {
	if e.lang == LangFortran {
		name = strings.ToLower(name)
	}
	if v := e.keywordLiteral(name); v != nil {
		return v, nil
	}
	var v *Value
	var err error
	if e.f != nil {
		v, err = e.f.lookup(name, true)
	} else {
		v, err = e.p.lookupScoped(name, nil, true)
	}
	if err != nil {
		return nil, err
	}
	if v.err != nil {
		return nil, v.err
	}
	return v, nil
}

// paramTypes returns the types of a function's formal parameters.
func (b *Binary) paramTypes(fn *Function) []*Type {
	root, err := fn.scopeTree()
	if err != nil {
		return nil
	}
	var out []*Type
	for _, d := range root.vars {
		if d.param {
			off := d.off
			if d.noLocation {
				off = d.abstract
			}
			if t, err := b.declType(off); err == nil {
				out = append(out, t)
			}
		}
	}
	return out
}

func (e *evaluator) intLit(text string) (*Value, error) {
	s := strings.ToLower(text)
	if i := strings.IndexByte(s, '_'); i >= 0 && e.lang == LangFortran {
		s = s[:i]
	}
	unsigned := strings.Contains(s, "u")
	long := strings.Contains(s, "l")
	s = strings.TrimRight(s, "ul")
	var u uint64
	var err error
	switch {
	case strings.HasPrefix(s, "0x"):
		u, err = strconv.ParseUint(s[2:], 16, 64)
	case len(s) > 1 && s[0] == '0' && e.lang != LangFortran:
		u, err = strconv.ParseUint(s[1:], 8, 64)
	default:
		u, err = strconv.ParseUint(s, 10, 64)
	}
	if err != nil {
		return nil, fmt.Errorf("Invalid number \"%s\".", text)
	}
	if e.lang == LangFortran {
		if u > math.MaxInt32 {
			return e.mkInt(e.builtin("integer(kind=8)"), u), nil
		}
		return e.mkInt(e.builtin("integer(kind=4)"), u), nil
	}
	switch {
	case !long && !unsigned && u <= math.MaxInt32:
		return e.mkInt(e.builtin("int"), u), nil
	case !long && unsigned && u <= math.MaxUint32:
		return e.mkInt(e.builtin("unsigned int"), u), nil
	case !unsigned && u <= math.MaxInt64:
		return e.mkInt(e.builtin("long"), u), nil
	}
	return e.mkInt(e.builtin("unsigned long"), u), nil
}

func (e *evaluator) register(name string) (*Value, error) {
	if e.f == nil {
		return nil, fmt.Errorf("No registers.")
	}
	a := e.p.Arch
	n, ok := a.RegNum(name)
	if !ok {
		return nil, fmt.Errorf("History has not yet reached $%s.", name)
	}
	v, ok := e.f.regs.Get(n)
	if !ok {
		return optimizedOut(e.p, e.mod, e.f, e.longType(false)), nil
	}
	switch n {
	case a.PCReg:
		ft := &Type{Kind: KindFunc, Size: 1, Elem: voidType, Lang: e.lang}
		t := &Type{Kind: KindPointer, Size: int64(a.PtrSize), Elem: ft, Lang: e.lang}
		return e.mkInt(t, v), nil
	case a.SPReg, a.FPReg:
		t := &Type{Kind: KindPointer, Size: int64(a.PtrSize), Elem: voidType, Lang: e.lang}
		return e.mkInt(t, v), nil
	}
	if isFloatReg(a, n) {
		b, _ := e.f.regs.Bytes(n)
		if len(b) >= 8 {
			return newBytesValue(e.p, e.mod, e.f, e.builtin("double"), append([]byte(nil), b[:8]...)), nil
		}
	}
	return e.mkInt(e.longType(false), v), nil
}

// typeOf resolves a cast's type name.
func (e *evaluator) typeOf(tn *typeName) (*Type, error) {
	name := canonicalTypeName(tn.name)
	t := e.builtin(name)
	if t == nil && name == "void" {
		t = voidType
	}
	if t == nil && e.mod != nil {
		lookup := strings.TrimPrefix(strings.TrimPrefix(strings.TrimPrefix(name, "struct "), "union "), "enum ")
		for _, m := range append([]*Module{e.mod}, e.p.mods...) {
			if lt, err := m.Bin.LookupType(lookup); err == nil {
				t = lt
				break
			}
		}
	}
	if t == nil {
		return nil, &UnknownNameError{Name: tn.name}
	}
	for i := 0; i < tn.ptrs; i++ {
		t = &Type{Kind: KindPointer, Size: int64(e.p.Arch.PtrSize), Elem: t, Lang: e.lang}
	}
	return t, nil
}

// canonicalTypeName maps C spellings of base types to gdb's names ("long int" → "long").
func canonicalTypeName(s string) string {
	words := strings.Fields(s)
	var kept []string
	unsigned, signed, long, short := false, false, 0, false
	base := ""
	for _, w := range words {
		switch w {
		case "const", "volatile":
		case "unsigned":
			unsigned = true
		case "signed":
			signed = true
		case "long":
			long++
		case "short":
			short = true
		case "int":
			if base == "" {
				base = "int"
			}
		case "char", "double", "float", "_Bool", "bool", "void":
			base = w
		default:
			kept = append(kept, w)
		}
	}
	if len(kept) > 0 {
		return strings.Join(kept, " ")
	}
	switch {
	case base == "char" && unsigned:
		return "unsigned char"
	case base == "char" && signed:
		return "signed char"
	case base == "double" && long > 0:
		return "long double"
	case base == "char" || base == "double" || base == "float" || base == "_Bool" || base == "bool" || base == "void":
		return base
	}
	n := "int"
	switch {
	case short:
		n = "short"
	case long == 1:
		n = "long"
	case long >= 2:
		n = "long long"
	}
	if unsigned {
		return "unsigned " + n
	}
	return n
}

func isIntegral(t *Type) bool {
	s := t.Strip()
	return s != nil && (s.Kind == KindInt || s.Kind == KindUint || s.Kind == KindChar || s.Kind == KindBool || s.Kind == KindEnum)
}

func isFloatType(t *Type) bool {
	s := t.Strip()
	return s != nil && s.Kind == KindFloat
}

func isPointerish(t *Type) bool {
	s := t.Strip()
	return s != nil && (s.Kind == KindPointer || s.Kind == KindArray)
}

// truth converts a value to a condition.
func truth(v *Value) (bool, error) {
	v = rval(v)
	s := v.Type.Strip()
	if s != nil && s.Kind == KindFloat {
		f, err := v.Float()
		return f != 0, err
	}
	if s != nil && s.Kind == KindArray {
		return true, nil
	}
	u, err := v.Uint()
	return u != 0, err
}
