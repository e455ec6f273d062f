package symbols

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/hpcdap/hpcdap/bpcode"
)

// FormatOptions control how values are rendered. The zero value means gdb's defaults.
type FormatOptions struct {
	MaxElements     int // elements of an array or characters of a string (default 200)
	RepeatThreshold int // runs longer than this collapse to "<repeats N times>" (default 10)
}

func (o *FormatOptions) norm() FormatOptions {
	r := FormatOptions{MaxElements: 200, RepeatThreshold: 10}
	if o != nil {
		if o.MaxElements > 0 {
			r.MaxElements = o.MaxElements
		}
		if o.RepeatThreshold > 0 {
			r.RepeatThreshold = o.RepeatThreshold
		}
	}
	return r
}

// String renders the value as gdb does in "info locals" and inside aggregates.
func (v *Value) String() string { return v.Format(nil) }

// Format renders the value with options.
func (v *Value) Format(o *FormatOptions) string {
	f := &formatter{opts: o.norm()}
	f.value(v, 0)
	return f.sb.String()
}

// PrintString renders the value as gdb's "print" command does: like String, but a pointer
// is preceded by its type ("(int *) 0x601040 <g>"), except for plain character pointers.
func (v *Value) PrintString() string {
	f := &formatter{opts: (*FormatOptions)(nil).norm()}
	s := v.Type.Strip()
	if s != nil && v.Type.Lang != LangFortran && (s.Kind == KindPointer || s.Kind == KindRef || s.Kind == KindRvalueRef) &&
		!v.optOut && v.err == nil {
		if !(v.Type.Kind == KindPointer && v.Type.Name == "" && v.Type.Elem != nil && isPlainChar(v.Type.Elem)) {
			f.sb.WriteString("(" + v.Type.String() + ") ")
		}
	}
	if s != nil && s.Kind == KindFunc {
		f.sb.WriteString("{" + v.Type.String() + "} ")
	}
	if s != nil && v.Type.Lang == LangFortran && s.Kind == KindPointer && !v.optOut && v.err == nil {
		f.sb.WriteString("(" + fortranTypeName(v.Type) + ") ")
	}
	f.value(v, 0)
	return f.sb.String()
}

// isPlainChar reports whether t is "char", possibly qualified (gdb omits the pointer type of
// char strings).
func isPlainChar(t *Type) bool {
	for t != nil && t.Kind == KindQualified {
		t = t.Elem
	}
	return t != nil && t.Kind == KindChar && t.Name == "char"
}

type formatter struct {
	sb   strings.Builder
	opts FormatOptions
}

func (f *formatter) w(s string) { f.sb.WriteString(s) }

func (f *formatter) value(v *Value, depth int) {
	switch {
	case v.optOut:
		f.w("<optimized out>")
		return
	case v.state != "":
		f.w("<" + v.state + ">")
		return
	case v.synthetic != nil:
		f.w("<synthetic pointer>")
		return
	case v.err != nil:
		f.w("<error: " + v.err.Error() + ">")
		return
	}
	if depth > 32 {
		f.w("...")
		return
	}
	t := v.Type
	s := t.Strip()
	if s == nil || s.Kind == KindVoid { // the value of a call of a void function
		f.w("void")
		return
	}
	fortran := t.Lang == LangFortran || s.Lang == LangFortran
	switch s.Kind {
	case KindStruct, KindUnion:
		if fortran {
			f.fortranStruct(v, s, depth)
		} else {
			f.cStruct(v, s, depth)
		}
		return
	case KindArray:
		if fortran {
			if isCharType(s.Elem) {
				f.charArray(v, s, '\'', false)
			} else {
				f.fortranArray(v, s, depth)
			}
			return
		}
		if isCharType(s.Elem) && s.Elem.Strip().Size == 1 {
			f.charArray(v, s, '"', true)
			return
		}
		f.cArray(v, s, depth)
		return
	case KindString:
		f.charArray(v, s, '\'', false)
		return
	case KindRef, KindRvalueRef:
		addr, err := v.Uint()
		if err != nil {
			f.scalarErr(err)
			return
		}
		f.w("@" + hexAddr(addr) + ": ")
		d, err := v.Deref()
		if err != nil {
			f.w("<error: " + err.Error() + ">")
			return
		}
		f.value(d, depth+1)
		return
	case KindFunc:
		if a, ok := v.Address(); ok {
			f.w(hexAddr(a))
			f.symbolSuffix(v.proc, a)
		}
		return
	}
	b, err := v.scalarBytes()
	if err != nil {
		f.scalarErr(err)
		return
	}
	f.scalar(v, s, b, fortran)
}

func (f *formatter) scalarErr(err error) {
	if err == ErrOptimizedOut {
		f.w("<optimized out>")
		return
	}
	f.w("<error: " + err.Error() + ">")
}

func isCharType(t *Type) bool {
	s := t.Strip()
	return s != nil && s.Kind == KindChar
}

func hexAddr(a uint64) string { return "0x" + strconv.FormatUint(a, 16) }

// symbolSuffix appends " <sym+off>" for an address covered by an ELF symbol.
func (f *formatter) symbolSuffix(p *Process, addr uint64) {
	if p == nil {
		return
	}
	if s, off, ok := p.SymbolAt(addr); ok {
		name := demangle(s.Name)
		if off == 0 {
			f.w(" <" + name + ">")
		} else {
			f.w(fmt.Sprintf(" <%s+%d>", name, off))
		}
	}
}

func (f *formatter) scalar(v *Value, s *Type, b []byte, fortran bool) {
	a := v.proc.Arch
	switch s.Kind {
	case KindBool:
		u := uintFrom(b, a)
		switch {
		case fortran && u == 0:
			f.w(".FALSE.")
		case fortran:
			f.w(".TRUE.")
		case u == 0:
			f.w("false")
		case u == 1:
			f.w("true")
		default:
			f.w(strconv.FormatUint(u, 10))
		}
	case KindChar:
		if fortran {
			f.w("'" + bpcode.EscapeChar(b[0], '\'', new(bool)) + "'")
			return
		}
		n, _ := v.Int()
		if s.Encoding == ateUnsignedChar || s.Encoding == ateUTF {
			u, _ := v.Uint()
			f.w(strconv.FormatUint(u, 10))
		} else {
			f.w(strconv.FormatInt(n, 10))
		}
		prefix := ""
		if s.Encoding == ateUTF {
			prefix = "u8"
		}
		f.w(" " + prefix + "'" + bpcode.EscapeChar(b[len(b)-1], '\'', new(bool)) + "'")
	case KindInt:
		n, _ := v.Int()
		f.w(strconv.FormatInt(n, 10))
	case KindUint, KindUnspecified:
		u, _ := v.Uint()
		if s.Kind == KindUnspecified {
			f.w(hexAddr(u))
			return
		}
		f.w(strconv.FormatUint(u, 10))
	case KindFloat:
		f.w(formatFloatBytes(b, a))
	case KindComplex:
		h := len(b) / 2
		re, im := formatFloatBytes(b[:h], a), formatFloatBytes(b[h:], a)
		if fortran {
			f.w("(" + re + "," + im + ")")
		} else {
			f.w(re + " + " + im + "i")
		}
	case KindEnum:
		n, _ := v.Int()
		if s.Elem != nil && (s.Elem.Strip().Kind == KindUint || s.Elem.Strip().Kind == KindChar) {
			u, _ := v.Uint()
			n = int64(u)
		}
		f.enum(s, n)
	case KindPointer:
		f.pointer(v, s, uintFrom(b, a), fortran)
	case KindPtrToMember:
		f.w(strconv.FormatInt(int64(uintFrom(b, a)), 10))
	default:
		f.w(strconv.FormatUint(uintFrom(b, a), 10))
	}
}

func (f *formatter) enum(s *Type, n int64) {
	for _, e := range s.Enumerators {
		if e.Value == n {
			f.w(e.Name)
			return
		}
	}
	if !s.FlagEnum {
		f.w(strconv.FormatInt(n, 10))
		return
	}
	val := uint64(n)
	first := true
	for _, e := range s.Enumerators {
		if val&uint64(e.Value) != 0 {
			if first {
				f.w("(")
				first = false
			} else {
				f.w(" | ")
			}
			val &^= uint64(e.Value)
			f.w(e.Name)
		}
	}
	switch {
	case val != 0 && first:
		f.w("(unknown: 0x" + strconv.FormatUint(val, 16) + ")")
	case val != 0:
		f.w(" | unknown: 0x" + strconv.FormatUint(val, 16) + ")")
	case first:
		f.w("0")
	default:
		f.w(")")
	}
}

func (f *formatter) pointer(v *Value, s *Type, addr uint64, fortran bool) {
	et := s.Elem.Strip()
	f.w(hexAddr(addr))
	if et != nil && et.Kind == KindFunc {
		f.symbolSuffix(v.proc, addr)
		return
	}
	f.symbolSuffix(v.proc, addr)
	textual := et != nil && et.Kind == KindChar && et.Size == 1
	if fortran {
		textual = et != nil && et.Size == 1 && (et.Kind == KindInt || et.Kind == KindChar)
	}
	if textual && addr != 0 {
		f.w(" ")
		f.cString(v.proc, addr)
	}
}

// cString prints the NUL-terminated string at addr (gdb's val_print_string).
func (f *formatter) cString(p *Process, addr uint64) {
	max := f.opts.MaxElements
	buf := make([]byte, 0, 64)
	var readErr bool
	chunk := make([]byte, 1)
	found := false
	for len(buf) < max {
		if err := p.ReadMemory(chunk, addr+uint64(len(buf))); err != nil {
			readErr = true
			break
		}
		buf = append(buf, chunk[0])
		if chunk[0] == 0 {
			found = true
			break
		}
	}
	force := false
	if !found && !readErr {
		if err := p.ReadMemory(chunk, addr+uint64(len(buf))); err == nil && chunk[0] != 0 {
			force = true
		}
	}
	if !readErr || len(buf) > 0 {
		f.printstr(buf, '"', true, force)
	}
	if readErr {
		f.w(fmt.Sprintf("<error: Cannot access memory at address %#x>", addr+uint64(len(buf))))
	}
}

// charArray prints a character array or Fortran string.
func (f *formatter) charArray(v *Value, s *Type, quote byte, cTerm bool) {
	b, err := v.Bytes()
	if err != nil {
		f.scalarErr(err)
		return
	}
	n := len(b)
	if es := s.Elem.Strip(); es != nil && es.Size > 1 {
		n = len(b) / int(es.Size)
	}
	f.printstr(b[:n], quote, cTerm, false)
}

// printstr is gdb's generic_printstr for single-byte characters.
func (f *formatter) printstr(b []byte, quote byte, cTerm, force bool) {
	if cTerm && !force && len(b) > 0 && b[len(b)-1] == 0 {
		b = b[:len(b)-1]
	}
	if len(b) == 0 {
		f.w(string([]byte{quote, quote}))
		return
	}
	type group struct {
		c   byte
		rep int
	}
	var groups []group
	i := 0
	count := 0
	for i < len(b) && count < f.opts.MaxElements {
		j := i + 1
		for j < len(b) && b[j] == b[i] {
			j++
		}
		groups = append(groups, group{b[i], j - i})
		count += j - i
		i = j
	}
	finished := i >= len(b)
	const (
		start = iota
		single
		repeat
	)
	last := start
	needEscape := false
	for _, g := range groups {
		if g.rep > f.opts.RepeatThreshold {
			if last == single {
				f.sb.WriteByte(quote)
			}
			if last != start {
				f.w(", ")
			}
			f.w("'" + bpcode.EscapeChar(g.c, quote, &needEscape) + "'")
			f.w(fmt.Sprintf(" <repeats %d times>", g.rep))
			last = repeat
			continue
		}
		if last != single {
			if last != start {
				f.w(", ")
			}
			f.sb.WriteByte(quote)
		}
		for k := 0; k < g.rep; k++ {
			f.w(bpcode.EscapeChar(g.c, quote, &needEscape))
		}
		last = single
	}
	if last == single {
		f.sb.WriteByte(quote)
	}
	if force || !finished {
		f.w("...")
	}
}

// cStruct prints a C/C++ struct, class or union: "{a = 1, <Base> = {...}, static s = 2}".
func (f *formatter) cStruct(v *Value, s *Type, depth int) {
	v.preload()
	f.w("{")
	n := 0
	for _, fl := range s.Fields {
		if n > 0 {
			f.w(", ")
		}
		n++
		switch {
		case fl.Base:
			f.w("<" + fl.Type.String() + "> = ")
		case fl.Static:
			f.w("static " + fl.Name + " = ")
		case fl.Name != "":
			f.w(fl.Name + " = ")
		}
		c := v.member(fl)
		if fl.Name != "" && strings.HasPrefix(fl.Name, "_vptr.") {
			f.vptr(c)
			continue
		}
		f.value(c, depth+1)
	}
	if n == 0 {
		f.w("<No data fields>")
	}
	f.w("}")
}

// vptr prints a virtual table pointer as gdb does: "0x4010 <vtable for Circle+16>".
func (f *formatter) vptr(c *Value) {
	u, err := c.Uint()
	if err != nil {
		f.scalarErr(err)
		return
	}
	f.w(hexAddr(u))
	f.symbolSuffix(c.proc, u)
}

// fortranStruct prints a derived type: "( x = 1, y = 2 )".
func (f *formatter) fortranStruct(v *Value, s *Type, depth int) {
	f.w("( ")
	n := 0
	for _, fl := range s.Fields {
		if st := fl.Type.Strip(); st != nil && st.Kind == KindFunc {
			continue
		}
		if n > 0 {
			f.w(", ")
		}
		n++
		if fl.Name != "" {
			f.w(fl.Name + " = ")
		}
		c := v.member(fl)
		if fl.Type.IsDynamic() {
			if r, err := v.proc.resolveDynamic(c); err == nil {
				c = r
			}
		}
		f.value(c, depth+1)
	}
	f.w(" )")
}

// cArray prints a C array: "{1, 2, 3}", with runs collapsed and at most MaxElements shown.
func (f *formatter) cArray(v *Value, s *Type, depth int) {
	dims, err := arrayDims(v.Type)
	if err != nil {
		f.w("<error: " + err.Error() + ">")
		return
	}
	if len(dims) == 0 {
		f.w("{}")
		return
	}
	v.preload()
	d := dims[0]
	et := subArrayType(v.Type)
	if len(dims) > 1 {
		// Keep the strides of the remaining dimensions for sub-arrays.
		for k := range et.Dims {
			et.Dims[k].Stride = DynAttr{Set: true, Const: dims[k+1].stride}
		}
	}
	f.w("{")
	elem := func(i int64) *Value { return v.sub("", et, i*d.stride) }
	printed := 0
	i := int64(0)
	for ; i < d.count && printed < f.opts.MaxElements; i++ {
		if i != 0 {
			f.w(", ")
		}
		e := elem(i)
		reps := int64(1)
		for r := i + 1; r < d.count; r++ {
			if !sameContents(e, elem(r)) {
				break
			}
			reps++
		}
		f.value(e, depth+1)
		if reps > int64(f.opts.RepeatThreshold) {
			f.w(fmt.Sprintf(" <repeats %d times>", reps))
			i += reps - 1
			printed += f.opts.RepeatThreshold
		} else {
			printed++
		}
	}
	if i < d.count {
		f.w("...")
	}
	f.w("}")
}

// sameContents compares two element values byte for byte (availability included).
func sameContents(a, b *Value) bool {
	if a.optOut || b.optOut {
		return a.optOut && b.optOut
	}
	x, err1 := a.Bytes()
	y, err2 := b.Bytes()
	if err1 != nil || err2 != nil {
		return false
	}
	if len(x) != len(y) {
		return false
	}
	for i := range x {
		if x[i] != y[i] || a.available(int64(i), 1) != b.available(int64(i), 1) {
			return false
		}
	}
	return true
}
