package symbols

import (
	"debug/dwarf"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/hpcdap/hpcdap/arch"
	"github.com/hpcdap/hpcdap/bpcode"
	"github.com/hpcdap/hpcdap/symbols/dwbuf"
	"github.com/hpcdap/hpcdap/symbols/dwop"
)

// ErrNotCompiled wraps the reason an expression cannot be compiled for an agent: the front
// end then evaluates it itself.
var ErrNotCompiled = errors.New("cannot be evaluated by the agent")

// CheckSyntax reports a syntax error in an expression, in C or, failing that, Fortran syntax;
// names are not looked up.
func CheckSyntax(expr string) error {
	var first error
	for _, fortran := range []bool{false, true} {
		for _, types := range []bool{false, true} {
			_, err := parseExpr(expr, fortran, func(string) bool { return types })
			if err == nil {
				return nil
			}
			if first == nil {
				first = err
			}
		}
	}
	return first
}

// CompileCondition compiles a breakpoint condition for evaluation in the agent at the
// binary's link-time address pc: locals and parameters by their DWARF location at pc, the
// binary's globals (relative to its load bias), the main executable's thread-local variables
// (tlsAddress), pointer dereference, array indexing, struct
// and union members, arithmetic, comparisons, logical and bit operators, and integer,
// character and floating-point literals of C and C++; in Fortran code the same over integer,
// logical and real scalars, with Fortran's operators (.and., /=, .eqv., ...), its decimal
// literals and .true./.false., names in any case, dummy arguments passed by reference, and
// integer arithmetic in 8 bytes as the evaluator does it. What it cannot compile (other
// operators, intrinsics and calls, registers other than general ones, bit fields, values the
// DWARF locates by a longer computation) is an error wrapping ErrNotCompiled.
func (b *Binary) CompileCondition(expr string, pc uint64) (prog *bpcode.Program, err error) {
	defer func() {
		if r := recover(); r != nil {
			prog, err = nil, fmt.Errorf("compile %q: internal error: %v: %w", expr, r, ErrNotCompiled)
		}
	}()
	c, n, err := b.compilerAt(expr, pc)
	if err != nil {
		return nil, err
	}
	v, err := c.expr(n)
	if err != nil {
		return nil, err
	}
	if err := c.truth(v); err != nil {
		return nil, err
	}
	return c.bld.Program(b.Arch.ByteOrder == binary.BigEndian)
}

// CompileValue compiles an expression of a log message for evaluation in the agent at pc, as
// CompileCondition does, with the format its value is printed in: integers (decimal), chars
// (number and quoted character) and booleans. Other types (floating-point, pointers,
// enumerations, aggregates) are left to the front end's printing: an error wrapping
// ErrNotCompiled.
func (b *Binary) CompileValue(expr string, pc uint64) (*bpcode.Program, bpcode.Format, error) {
	c, n, err := b.compilerAt(expr, pc)
	if err != nil {
		return nil, 0, err
	}
	return c.value(expr, n)
}

// value compiles the value of the expression n (parsed from expr) and its format.
func (c *compiler) value(expr string, n *node) (prog *bpcode.Program, f bpcode.Format, err error) {
	defer func() {
		if r := recover(); r != nil {
			prog, err = nil, fmt.Errorf("compile %q: internal error: %v: %w", expr, r, ErrNotCompiled)
		}
	}()
	v, err := c.expr(n)
	if err != nil {
		return nil, 0, err
	}
	k, s := classify(v.t)
	switch {
	case k != scInt || s.Kind == KindEnum:
		return nil, 0, notCompiled("printing a value of type %s", typeLabel(v.t))
	case s.Kind == KindChar:
		f = bpcode.FmtChar
	case s.Kind == KindBool && c.lang == LangFortran:
		return nil, 0, notCompiled("printing a Fortran logical") // .TRUE. and .FALSE.
	case s.Kind == KindBool:
		f = bpcode.FmtBool
	case signed(s):
		f = bpcode.FmtSigned
	default:
		f = bpcode.FmtUnsigned
	}
	if _, err := c.rvalue(v); err != nil {
		return nil, 0, err
	}
	prog, err = c.bld.Program(c.b.Arch.ByteOrder == binary.BigEndian)
	return prog, f, err
}

// compilerAt parses expr and prepares a compiler for the function at pc.
func (b *Binary) compilerAt(expr string, pc uint64) (*compiler, *node, error) {
	fn := b.FunctionAt(pc)
	if fn == nil {
		return nil, nil, fmt.Errorf("no function at %#x: %w", pc, ErrNotCompiled)
	}
	lang := fn.Language()
	if lang != LangC && lang != LangCPlusPlus && lang != LangFortran {
		return nil, nil, fmt.Errorf("%s code: %w", lang, ErrNotCompiled)
	}
	c := &compiler{b: b, fn: fn, pc: pc, lang: lang}
	root, err := fn.scopeTree()
	if err != nil {
		return nil, nil, err
	}
	for _, s := range root.chainAt(pc) {
		c.chain = append([]*scope{s}, c.chain...)
	}
	n, err := parseExpr(expr, lang == LangFortran, func(name string) bool { _, ok := b.types[name]; return ok })
	if err != nil {
		return nil, nil, err
	}
	return c, n, nil
}

// compiler turns an expression tree into bpcode.
type compiler struct {
	b     *Binary
	fn    *Function
	pc    uint64
	lang  Language
	chain []*scope // innermost first, up to the function
	bld   bpcode.Builder
	// frame, when not nil, recovers the registers of a caller's frame from the thread's
	// (CompileValueInStack); without it the program reads the thread's own.
	frame *unwound
	// mods, when not nil, is the program's module table (CompileValueInStack): addresses are
	// relative to a module's bias there (OpModBias), biasOf's for a global, instead of the
	// one bias the program is evaluated with (OpBias). exe is the program's executable,
	// whose globals a library's frame sees.
	mods   *modTable
	biasOf *Module
	exe    *Module
}

// reg emits a push of register n of the frame compiled for.
func (c *compiler) reg(n int) error {
	if c.frame != nil {
		return c.frame.emit(&c.bld, n)
	}
	c.bld.Reg(n)
	return nil
}

// cv is a compiled operand: where its code left it.
type cv struct {
	t   *Type
	loc int // locWord: the value is on the stack; locMem: its address is; locReg: in register reg
	reg int
}

const (
	locWord = iota
	locMem
	locReg
)

func notCompiled(format string, args ...any) error {
	return fmt.Errorf(format+": %w", append(args, ErrNotCompiled)...)
}

func (c *compiler) intType(size int64, signed bool) *Type {
	k, name := KindInt, "int"
	if !signed {
		k, name = KindUint, "unsigned int"
	}
	if size == 8 {
		name = strings.Replace(name, "int", "long", 1)
	}
	return &Type{Kind: k, Name: name, Size: size, Lang: c.lang}
}

var doubleType = &Type{Kind: KindFloat, Name: "double", Size: 8}

func (c *compiler) expr(n *node) (cv, error) {
	switch n.op {
	case "int":
		return c.intLit(n.text)
	case "char":
		s, err := strconv.Unquote("'" + n.text + "'")
		if err != nil || len(s) != 1 {
			return cv{}, notCompiled("character constant '%s'", n.text)
		}
		c.bld.Const(uint64(int64(int8(s[0]))))
		if c.lang == LangCPlusPlus {
			return cv{t: &Type{Kind: KindChar, Name: "char", Size: 1, Encoding: ateSignedChar}}, nil
		}
		return cv{t: c.intType(4, true)}, nil
	case "float":
		text := strings.TrimRight(n.text, "fFlL")
		bits := 64
		switch n.text[len(n.text)-1] {
		case 'f', 'F':
			bits = 32 // a float constant: rounded to float, then compared as a double
		case 'l', 'L':
			return cv{}, notCompiled("a long double constant")
		}
		f, err := strconv.ParseFloat(text, bits)
		if err != nil {
			return cv{}, notCompiled("number %q", n.text)
		}
		c.bld.Const(math.Float64bits(f))
		return cv{t: doubleType}, nil
	case "bool": // Fortran's .true. and .false.
		c.bld.Const(boolWord(n.text == ".true."))
		return cv{t: &Type{Kind: KindBool, Name: "logical(kind=4)", Size: 4, Lang: c.lang}}, nil
	case "ident":
		if c.lang == LangCPlusPlus && (n.text == "true" || n.text == "false") {
			c.bld.Const(boolWord(n.text == "true"))
			return cv{t: c.intType(4, true)}, nil
		}
		return c.ident(n.text)
	case "unary":
		return c.unary(n)
	case "binary":
		return c.binary(n)
	case "index":
		return c.index(n)
	case "member", "arrow":
		return c.member(n)
	}
	return cv{}, notCompiled("%s", describeNode(n))
}

func boolWord(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

func describeNode(n *node) string {
	switch n.op {
	case "call":
		return "a function call"
	case "assign":
		return "an assignment"
	case "reg":
		return "a register"
	case "cast":
		return "a cast"
	}
	return "operator " + n.op
}

// intLit compiles an integer literal with C's rules for its type.
func (c *compiler) intLit(text string) (cv, error) {
	if c.lang == LangFortran {
		return c.fortranIntLit(text)
	}
	s := strings.ToLower(text)
	unsigned := false
	long := false
	for len(s) > 0 && (s[len(s)-1] == 'u' || s[len(s)-1] == 'l') {
		if s[len(s)-1] == 'u' {
			unsigned = true
		} else {
			long = true
		}
		s = s[:len(s)-1]
	}
	v, err := strconv.ParseUint(s, 0, 64)
	if err != nil && strings.HasPrefix(s, "0") && len(s) > 1 && s[1] >= '0' && s[1] <= '9' {
		v, err = strconv.ParseUint(s[1:], 8, 64)
	}
	if err != nil {
		return cv{}, notCompiled("number %q", text)
	}
	decimal := !strings.HasPrefix(s, "0") || s == "0"
	var t *Type
	switch {
	case !long && !unsigned && v <= math.MaxInt32:
		t = c.intType(4, true)
	case !long && (unsigned || !decimal) && v <= math.MaxUint32:
		t = c.intType(4, false)
	case !unsigned && v <= math.MaxInt64:
		t = c.intType(8, true)
	default:
		t = c.intType(8, false)
	}
	c.bld.Const(v)
	return cv{t: t}, nil
}

// ident compiles a variable: a local or parameter visible at pc, then a global of the binary.
func (c *compiler) ident(name string) (cv, error) {
	if c.lang == LangFortran {
		name = strings.ToLower(name) // Fortran's names know no case; its DWARF's are lower case
	}
	for _, s := range c.chain {
		for i := len(s.vars) - 1; i >= 0; i-- {
			if d := s.vars[i]; d.name == name {
				if d.noLocation {
					return cv{}, notCompiled("%s has no location", name)
				}
				if d.external {
					return c.global(name)
				}
				return c.variable(name, d.off)
			}
		}
	}
	return c.global(name)
}

func (c *compiler) global(name string) (cv, error) {
	refs := c.b.globals[name]
	var pick *dieRef
	for i, r := range refs {
		if r.cu == c.fn.cu {
			pick = &refs[i]
			break
		}
		if r.ext && pick == nil {
			pick = &refs[i]
		}
	}
	if pick == nil && c.exe != nil && c.exe.Bin != c.b && c.biasOf != c.exe {
		return c.exeGlobal(name)
	}
	if pick == nil {
		if len(c.b.FunctionsNamed(name)) > 0 {
			return cv{}, notCompiled("function %s", name)
		}
		return cv{}, notCompiled("no symbol %q in this binary", name)
	}
	return c.variable(name, pick.off)
}

// variable compiles the location of the variable DIE at off.
func (c *compiler) variable(name string, off dwarf.Offset) (cv, error) {
	b := c.b
	e, err := b.entryAt(off)
	if err != nil {
		return cv{}, err
	}
	t, err := b.declType(off)
	if err != nil {
		return cv{}, err
	}
	if t.IsDynamic() {
		return cv{}, notCompiled("%s has a dynamic type", name)
	}
	fld := e.AttrField(dwarf.AttrLocation)
	if fld == nil {
		return cv{}, notCompiled("%s has no location", name)
	}
	expr, err := b.locationExpr(b.cuForOffset(off), fld, c.pc)
	if err != nil {
		return cv{}, err
	}
	if expr == nil {
		return cv{}, notCompiled("%s is optimized out at %#x", name, c.pc)
	}
	return c.location(name, expr, t)
}

// location compiles a one-operation location expression: an address, a register, or a
// register or the frame base plus an offset.
func (c *compiler) location(name string, expr []byte, t *Type) (cv, error) {
	r := dwbuf.New(expr, 0, c.b.Arch.ByteOrder)
	op := r.U8()
	switch {
	case op == dwop.OpAddr:
		a := r.Addr(c.b.Arch.PtrSize)
		if c.mods != nil {
			if err := c.mods.bias(&c.bld, c.biasOf); err != nil {
				return cv{}, err
			}
		} else {
			c.bld.Emit(bpcode.OpBias)
		}
		c.bld.Const(a)
		c.bld.Emit(bpcode.OpAdd)
	case op >= dwop.OpReg0 && op <= dwop.OpReg31, op == dwop.OpRegx:
		n := int(op - dwop.OpReg0)
		if op == dwop.OpRegx {
			n = int(r.Uleb())
		}
		if r.Err != nil || r.Off != len(expr) {
			return cv{}, notCompiled("location of %s", name)
		}
		if reg, ok := c.b.Arch.Register(n); !ok || reg.Set != arch.General {
			return cv{}, notCompiled("%s lives in a register that is not a general one", name)
		}
		return cv{t: t, loc: locReg, reg: n}, nil
	case op >= dwop.OpBreg0 && op <= dwop.OpBreg31, op == dwop.OpBregx:
		n := int(op - dwop.OpBreg0)
		if op == dwop.OpBregx {
			n = int(r.Uleb())
		}
		off := r.Sleb()
		if err := c.reg(n); err != nil {
			return cv{}, err
		}
		c.bld.Const(uint64(off))
		c.bld.Emit(bpcode.OpAdd)
	case op == dwop.OpFbreg:
		off := r.Sleb()
		if err := c.frameBase(); err != nil {
			return cv{}, err
		}
		c.bld.Const(uint64(off))
		c.bld.Emit(bpcode.OpAdd)
	case op == dwop.OpConst8u && len(expr) == 10 && (expr[9] == dwop.OpFormTLSAddress || expr[9] == dwop.OpGNUPushTLSAddress):
		if err := c.tlsAddress(name, r.U64()); err != nil {
			return cv{}, err
		}
		r.U8()
	default:
		return cv{}, notCompiled("location of %s (%s)", name, dwop.OpName(op))
	}
	if r.Err == nil && r.Off == len(expr)-1 && expr[r.Off] == dwop.OpDeref {
		// The address is in memory there: a dummy argument passed by reference.
		c.bld.Sized(bpcode.OpLoad, c.b.Arch.PtrSize)
		r.U8()
	}
	if r.Err != nil || r.Off != len(expr) {
		return cv{}, notCompiled("location of %s (%s)", name,
			dwop.Disassemble(expr, c.b.Arch.ByteOrder, c.b.Arch.PtrSize))
	}
	return cv{t: t, loc: locMem}, nil
}

// frameBase compiles DW_AT_frame_base of the function at pc: the CFA (from the call frame
// information at pc, a register plus an offset) or a register plus an offset.
func (c *compiler) frameBase() error {
	ent, err := c.b.entryAt(c.fn.off)
	if err != nil {
		return err
	}
	expr, err := c.b.locationExpr(c.fn.cu, ent.AttrField(dwarf.AttrFrameBase), c.pc)
	if err != nil || expr == nil {
		return notCompiled("frame base of %s", c.fn.Name)
	}
	r := dwbuf.New(expr, 0, c.b.Arch.ByteOrder)
	op := r.U8()
	switch {
	case op == dwop.OpCallFrameCFA && len(expr) == 1:
		fde := c.b.frames.Lookup(c.pc)
		if fde == nil {
			return notCompiled("no call frame information at %#x", c.pc)
		}
		row, err := fde.RowAt(c.pc)
		if err != nil || row.CFA.Expr != nil {
			return notCompiled("CFA at %#x", c.pc)
		}
		if err := c.reg(int(row.CFA.Reg)); err != nil {
			return err
		}
		c.bld.Const(uint64(row.CFA.Offset))
		c.bld.Emit(bpcode.OpAdd)
		return nil
	case op >= dwop.OpBreg0 && op <= dwop.OpBreg31:
		off := r.Sleb()
		if r.Err != nil || r.Off != len(expr) {
			break
		}
		if err := c.reg(int(op - dwop.OpBreg0)); err != nil {
			return err
		}
		c.bld.Const(uint64(off))
		c.bld.Emit(bpcode.OpAdd)
		return nil
	case op >= dwop.OpReg0 && op <= dwop.OpReg31 && len(expr) == 1:
		return c.reg(int(op - dwop.OpReg0))
	}
	return notCompiled("frame base of %s (%s)", c.fn.Name, dwop.Disassemble(expr, c.b.Arch.ByteOrder, c.b.Arch.PtrSize))
}

// fortranIntLit compiles a Fortran integer literal: decimal digits (a leading zero is not
// octal) with an optional kind suffix (_8), integer(kind=4) unless it needs 8 bytes, as the
// evaluator reads it.
func (c *compiler) fortranIntLit(text string) (cv, error) {
	s := text
	if i := strings.IndexByte(s, '_'); i >= 0 {
		s = s[:i]
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return cv{}, notCompiled("number %q", text)
	}
	c.bld.Const(v)
	if v > math.MaxInt32 {
		return cv{t: c.intType(8, true)}, nil
	}
	return cv{t: c.intType(4, true)}, nil
}

// tlsAddress compiles the address of a thread-local variable at offset off of the binary's TLS
// block, for the thread that hit the breakpoint. Only the main executable's block is at an
// offset from the thread pointer known before the program runs: on x86-64 (TLS variant II)
// the block ends there, l_tls_offset = the block's size rounded up to its alignment (with the
// segment's first-byte offset, as the dynamic linker lays it out). A shared library's block
// is placed at run time: its variables are left to the front end, which reads the thread's.
func (c *compiler) tlsAddress(name string, off uint64) error {
	seg, ok := c.b.TLSSegment()
	_, interp := c.b.ProgHeader(elf.PT_INTERP)
	var soname []string
	if c.b.file != nil {
		soname, _ = c.b.file.DynString(elf.DT_SONAME)
	}
	switch {
	case !ok:
		return notCompiled("thread-local %s outside a TLS segment", name)
	case c.b.Arch.Machine != elf.EM_X86_64:
		return notCompiled("thread-local %s on %s", name, c.b.Arch.Name)
	case c.b.Type != elf.ET_EXEC && !interp, len(soname) > 0:
		// A library (one with a name to be loaded by, as libc.so.6, which can also run as a
		// program): its block is placed at run time.
		return notCompiled("thread-local %s of a shared library", name)
	}
	align := max(seg.Align, 1)
	first := -(seg.Vaddr & (align - 1)) & (align - 1)
	tlsOffset := (seg.Memsz-first+align-1)/align*align + first
	reg, ok := c.b.Arch.Register(c.b.Arch.TPReg)
	if !ok || reg.Set != arch.General {
		return notCompiled("thread-local %s: no thread pointer", name)
	}
	if err := c.reg(c.b.Arch.TPReg); err != nil {
		return err
	}
	c.bld.Const(off - tlsOffset)
	c.bld.Emit(bpcode.OpAdd)
	return nil
}
