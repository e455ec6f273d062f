package symbols

import (
	"debug/dwarf"
	"fmt"
	"strings"
)

// TypeKind classifies types.
type TypeKind int

// Type kinds.
const (
	KindVoid TypeKind = iota
	KindInt
	KindUint
	KindBool
	KindChar // 1-byte character types (signed or unsigned by Encoding)
	KindFloat
	KindComplex
	KindPointer
	KindRef       // C++ lvalue reference
	KindRvalueRef // C++ rvalue reference
	KindArray
	KindStruct // struct or class
	KindUnion
	KindEnum
	KindTypedef
	KindQualified // const / volatile / restrict / atomic wrapper
	KindFunc
	KindString // Fortran CHARACTER
	KindPtrToMember
	KindUnspecified // nullptr_t and other unspecified types
)

// DWARF base type encodings.
const (
	ateAddress      = 0x01
	ateBoolean      = 0x02
	ateComplexFloat = 0x03
	ateFloat        = 0x04
	ateSigned       = 0x05
	ateSignedChar   = 0x06
	ateUnsigned     = 0x07
	ateUnsignedChar = 0x08
	ateUTF          = 0x10
)

// Type is a C, C++ or Fortran type read from DWARF.
type Type struct {
	Kind     TypeKind
	Name     string // the type's own name ("int", "point_t", "node", "integer(kind=4)")
	Size     int64  // bytes; -1 when not known statically
	Encoding int    // DW_ATE_* for base types
	Elem     *Type  // pointee, element, typedef target, qualified type, enum base, return type
	// Qualifiers of a KindQualified type.
	Const, Volatile, Restrict bool
	Keyword                   string // "struct", "class", "union", "enum" (for C names)
	Fields                    []*Field
	Enumerators               []Enumerator
	FlagEnum                  bool // enumerators are disjoint bit sets: print values as (A | B)
	Dims                      []Dim
	Params                    []*Type
	Variadic                  bool
	Prototyped                bool // a C function type declared with a prototype
	Incomplete                bool // a declaration only
	Lang                      Language
	// Fortran dynamic arrays and strings.
	DataLocation []byte  // DW_AT_data_location (descriptor → data)
	Allocated    DynAttr // DW_AT_allocated
	Associated   DynAttr // DW_AT_associated
	StrLen       DynAttr // KindString length when not constant
	ColumnMajor  bool

	off dwarf.Offset
	cu  *compUnit
}

// Field is a member of a struct, class or union (or a base class).
type Field struct {
	Name       string
	Type       *Type
	Offset     int64 // byte offset of the member (of its storage unit for bit fields)
	BitSize    int64 // non-zero for bit fields
	BitOffset  int64 // bit offset from the start of the object, for bit fields
	Base       bool  // a base class (DW_TAG_inheritance)
	Virtual    bool  // virtual base (offset is dynamic)
	Static     bool  // static data member (value lives elsewhere)
	Artificial bool
	off        dwarf.Offset
}

// Enumerator is one named value of an enumeration.
type Enumerator struct {
	Name  string
	Value int64
}

// Dim is one dimension of an array; bounds may be dynamic (Fortran descriptors, C VLAs).
type Dim struct {
	Lower, Upper, Count, Stride DynAttr
}

// DynAttr is an attribute whose value is a constant, a DWARF expression evaluated against
// the object's address, or the value of another variable (a DIE reference).
type DynAttr struct {
	Set   bool
	Const int64
	Expr  []byte
	Ref   dwarf.Offset
}

func (d DynAttr) isConst() bool { return d.Set && d.Expr == nil && d.Ref == 0 }

// Strip removes typedefs and qualifiers.
func (t *Type) Strip() *Type {
	for t != nil && (t.Kind == KindTypedef || t.Kind == KindQualified) {
		t = t.Elem
	}
	return t
}

// IsDynamic reports whether the type's layout depends on the object (descriptor-based
// arrays, variable-length arrays, deferred-length strings).
func (t *Type) IsDynamic() bool {
	s := t.Strip()
	if s == nil {
		return false
	}
	if s.DataLocation != nil || s.Allocated.Set || s.Associated.Set {
		return true
	}
	if s.Kind == KindString && s.StrLen.Set && !s.StrLen.isConst() {
		return true
	}
	if s.Kind == KindArray {
		for _, d := range s.Dims {
			for _, a := range []DynAttr{d.Lower, d.Upper, d.Count, d.Stride} {
				if a.Set && !a.isConst() {
					return true
				}
			}
		}
	}
	return false
}

// typeAt reads the type DIE at off (cached per binary).
func (b *Binary) typeAt(off dwarf.Offset) (*Type, error) {
	b.typeMu.Lock()
	t, ok := b.typeCache[off]
	b.typeMu.Unlock()
	if ok {
		return t, nil
	}
	building := map[dwarf.Offset]*Type{}
	t, err := b.readType(off, building)
	if err != nil {
		return nil, err
	}
	b.typeMu.Lock()
	for k, v := range building {
		if _, ok := b.typeCache[k]; !ok {
			b.typeCache[k] = v
		}
	}
	t = b.typeCache[off]
	b.typeMu.Unlock()
	return t, nil
}

var voidType = &Type{Kind: KindVoid, Name: "void", Size: 1}

// readType builds a Type; building breaks cycles (struct node { struct node *next; }).
func (b *Binary) readType(off dwarf.Offset, building map[dwarf.Offset]*Type) (t *Type, err error) {
	if t, ok := building[off]; ok {
		return t, nil
	}
	b.typeMu.Lock()
	t, ok := b.typeCache[off]
	b.typeMu.Unlock()
	if ok {
		return t, nil
	}
	defer func() {
		if r := recover(); r != nil {
			t, err = nil, fmt.Errorf("symbols: type at %#x: malformed DWARF: %v", off, r)
		}
	}()
	r := b.dw.Reader()
	r.Seek(off)
	e, err := r.Next()
	if err != nil || e == nil {
		return nil, fmt.Errorf("symbols: type at %#x: %v", off, err)
	}
	cu := b.cuForOffset(off)
	t = &Type{off: off, cu: cu, Size: -1}
	if cu != nil {
		t.Lang = cu.Lang
	}
	building[off] = t
	t.Name, _ = e.Val(dwarf.AttrName).(string)
	if q, ok := b.typeNames[off]; ok && t.Lang == LangCPlusPlus {
		t.Name = q
	}
	if v, ok := e.Val(dwarf.AttrByteSize).(int64); ok {
		t.Size = v
	}
	t.Incomplete, _ = e.Val(dwarf.AttrDeclaration).(bool)
	elem := func() (*Type, error) {
		ref, ok := e.Val(dwarf.AttrType).(dwarf.Offset)
		if !ok {
			return voidType, nil
		}
		return b.readType(ref, building)
	}
	switch e.Tag {
	case dwarf.TagBaseType:
		enc, _ := e.Val(dwarf.AttrEncoding).(int64)
		t.Encoding = int(enc)
		switch enc {
		case ateBoolean:
			t.Kind = KindBool
		case ateFloat:
			t.Kind = KindFloat
		case ateComplexFloat:
			t.Kind = KindComplex
		case ateSignedChar, ateUnsignedChar:
			t.Kind = KindChar
			if t.Size > 1 {
				t.Kind = KindInt
				if enc == ateUnsignedChar {
					t.Kind = KindUint
				}
			}
		case ateSigned:
			t.Kind = KindInt
		case ateUTF:
			t.Kind = KindChar
			if t.Size > 1 {
				t.Kind = KindUint
			}
		default:
			t.Kind = KindUint
		}
	case dwarf.TagUnspecifiedType:
		t.Kind = KindUnspecified
		if t.Size < 0 {
			t.Size = int64(b.Arch.PtrSize)
		}
	case dwarf.TagPointerType, dwarf.TagReferenceType, dwarf.TagRvalueReferenceType:
		t.Kind = map[dwarf.Tag]TypeKind{dwarf.TagPointerType: KindPointer,
			dwarf.TagReferenceType: KindRef, dwarf.TagRvalueReferenceType: KindRvalueRef}[e.Tag]
		if t.Size < 0 {
			t.Size = int64(b.Arch.PtrSize)
		}
		if t.Elem, err = elem(); err != nil {
			return nil, err
		}
	case dwarf.TagPtrToMemberType:
		t.Kind = KindPtrToMember
		if t.Size < 0 {
			t.Size = int64(b.Arch.PtrSize)
		}
		if t.Elem, err = elem(); err != nil {
			return nil, err
		}
	case dwarf.TagTypedef:
		t.Kind = KindTypedef
		if t.Elem, err = elem(); err != nil {
			return nil, err
		}
		t.Size = t.Elem.Size
	case dwarf.TagConstType, dwarf.TagVolatileType, dwarf.TagRestrictType, dwarf.TagAtomicType:
		t.Kind = KindQualified
		t.Const = e.Tag == dwarf.TagConstType
		t.Volatile = e.Tag == dwarf.TagVolatileType
		t.Restrict = e.Tag == dwarf.TagRestrictType
		if t.Elem, err = elem(); err != nil {
			return nil, err
		}
		t.Size = t.Elem.Size
	case dwarf.TagStructType, dwarf.TagClassType, dwarf.TagUnionType:
		t.Kind = KindStruct
		t.Keyword = "struct"
		if e.Tag == dwarf.TagClassType {
			t.Keyword = "class"
		}
		if e.Tag == dwarf.TagUnionType {
			t.Kind = KindUnion
			t.Keyword = "union"
		}
		if e.Children {
			if err := b.readMembers(r, t, building); err != nil {
				return nil, err
			}
		}
	case dwarf.TagEnumerationType:
		t.Kind = KindEnum
		t.Keyword = "enum"
		if ref, ok := e.Val(dwarf.AttrType).(dwarf.Offset); ok {
			if t.Elem, err = b.readType(ref, building); err != nil {
				return nil, err
			}
		}
		// C++ enumerators are named in their scope: "geo::TopLeft", and for a scoped
		// enumeration "geo::Kind::Circle".
		prefix := ""
		if t.Lang == LangCPlusPlus {
			if ec, _ := e.Val(dwarf.AttrEnumClass).(bool); ec && t.Name != "" {
				prefix = t.Name + "::"
			} else {
				prefix = enclosingScope(t.Name + "::")
			}
		}
		if e.Children {
			mask := uint64(0)
			flag := true
			for {
				c, err := r.Next()
				if err != nil {
					return nil, err
				}
				if c == nil || c.Tag == 0 {
					break
				}
				if c.Tag == dwarf.TagEnumerator {
					n, _ := c.Val(dwarf.AttrName).(string)
					v, _ := c.Val(dwarf.AttrConstValue).(int64)
					t.Enumerators = append(t.Enumerators, Enumerator{prefix + n, v})
					if v < 0 {
						flag = false
					} else if uint64(v)&mask != 0 {
						flag = false
					} else {
						mask |= uint64(v)
					}
				}
				if c.Children {
					r.SkipChildren()
				}
			}
			t.FlagEnum = flag && len(t.Enumerators) > 0
		}
	case dwarf.TagArrayType:
		t.Kind = KindArray
		if t.Elem, err = elem(); err != nil {
			return nil, err
		}
		if o, ok := e.Val(dwarf.AttrOrdering).(int64); ok && o == 1 {
			t.ColumnMajor = true
		}
		t.DataLocation, _ = e.Val(dwarf.AttrDataLocation).([]byte)
		t.Allocated = dynAttr(e, dwarf.AttrAllocated)
		t.Associated = dynAttr(e, dwarf.AttrAssociated)
		if e.Children {
			for {
				c, err := r.Next()
				if err != nil {
					return nil, err
				}
				if c == nil || c.Tag == 0 {
					break
				}
				if c.Tag == dwarf.TagSubrangeType {
					d := Dim{Lower: dynAttr(c, dwarf.AttrLowerBound), Upper: dynAttr(c, dwarf.AttrUpperBound),
						Count: dynAttr(c, dwarf.AttrCount), Stride: dynAttr(c, dwarf.AttrStride)}
					if !d.Lower.Set && t.Lang == LangFortran {
						d.Lower = DynAttr{Set: true, Const: 1}
					}
					t.Dims = append(t.Dims, d)
				} else if c.Tag == dwarf.TagEnumerationType {
					t.Dims = append(t.Dims, Dim{})
				}
				if c.Children {
					r.SkipChildren()
				}
			}
		}
		if t.Size < 0 && !t.IsDynamic() {
			t.Size = t.staticArraySize()
		}
	case dwarf.TagStringType:
		t.Kind = KindString
		t.DataLocation, _ = e.Val(dwarf.AttrDataLocation).([]byte)
		if t.Size >= 0 {
			t.StrLen = DynAttr{Set: true, Const: t.Size}
		} else {
			t.StrLen = dynAttr(e, dwarf.AttrStringLength)
			if !t.StrLen.Set && e.Children {
				// gfortran also describes the length as a subrange of the string.
				for {
					c, err := r.Next()
					if err != nil || c == nil || c.Tag == 0 {
						break
					}
					if c.Tag == dwarf.TagSubrangeType {
						t.StrLen = dynAttr(c, dwarf.AttrUpperBound)
					}
				}
			}
		}
		if n, ok := e.Val(dwarf.AttrStringLengthByteSize).(int64); ok {
			_ = n
		}
		// gdb treats the characters of a string as C chars ("102 'f'").
		t.Elem = &Type{Kind: KindChar, Name: "char", Size: 1, Encoding: ateSignedChar, Lang: LangC}
	case dwarf.TagSubroutineType:
		t.Kind = KindFunc
		t.Prototyped, _ = e.Val(dwarf.AttrPrototyped).(bool)
		if t.Elem, err = elem(); err != nil {
			return nil, err
		}
		if t.Size < 0 {
			t.Size = 1
		}
		if e.Children {
			for {
				c, err := r.Next()
				if err != nil {
					return nil, err
				}
				if c == nil || c.Tag == 0 {
					break
				}
				switch c.Tag {
				case dwarf.TagFormalParameter:
					if ref, ok := c.Val(dwarf.AttrType).(dwarf.Offset); ok {
						pt, err := b.readType(ref, building)
						if err != nil {
							return nil, err
						}
						t.Params = append(t.Params, pt)
					}
				case dwarf.TagUnspecifiedParameters:
					t.Variadic = true
				}
				if c.Children {
					r.SkipChildren()
				}
			}
		}
	default:
		t.Kind = KindVoid
		if t.Name == "" {
			t.Name = fmt.Sprintf("<unsupported type %v>", e.Tag)
		}
	}
	return t, nil
}

// readMembers reads the children of a struct, class or union DIE.
func (b *Binary) readMembers(r *dwarf.Reader, t *Type, building map[dwarf.Offset]*Type) error {
	for {
		c, err := r.Next()
		if err != nil {
			return err
		}
		if c == nil || c.Tag == 0 {
			return nil
		}
		switch c.Tag {
		case dwarf.TagMember, dwarf.TagInheritance, dwarf.TagVariable:
			f := &Field{off: c.Offset, Base: c.Tag == dwarf.TagInheritance}
			f.Name, _ = c.Val(dwarf.AttrName).(string)
			f.Artificial, _ = c.Val(dwarf.AttrArtificial).(bool)
			ext, _ := c.Val(dwarf.AttrExternal).(bool)
			decl, _ := c.Val(dwarf.AttrDeclaration).(bool)
			f.Static = c.Tag == dwarf.TagVariable || (decl && ext) || (decl && c.AttrField(dwarf.AttrDataMemberLoc) == nil && c.Tag == dwarf.TagMember && !f.Base)
			if v, ok := c.Val(dwarf.AttrVirtuality).(int64); ok && v != 0 {
				f.Virtual = true
			}
			if ref, ok := c.Val(dwarf.AttrType).(dwarf.Offset); ok {
				ft, err := b.readType(ref, building)
				if err != nil {
					return err
				}
				f.Type = ft
			} else {
				f.Type = voidType
			}
			switch v := c.Val(dwarf.AttrDataMemberLoc).(type) {
			case int64:
				f.Offset = v
			case []byte:
				// Old-style location expression "DW_OP_plus_uconst N".
				if len(v) > 1 && v[0] == 0x23 {
					f.Offset = int64(uleb(v[1:]))
				} else {
					f.Virtual = f.Virtual || f.Base
				}
			}
			if bs, ok := c.Val(dwarf.AttrBitSize).(int64); ok {
				f.BitSize = bs
				if dbo, ok := c.Val(dwarf.AttrDataBitOffset).(int64); ok {
					f.BitOffset = dbo
					f.Offset = dbo / 8
				} else if bo, ok := c.Val(dwarf.AttrBitOffset).(int64); ok {
					// DWARF 2/3: offset of the field's most significant bit within a storage
					// unit of DW_AT_byte_size bytes at data_member_location.
					unit, _ := c.Val(dwarf.AttrByteSize).(int64)
					if unit == 0 {
						unit = f.Type.Size
					}
					if b.Arch.ByteOrder.String() == "BigEndian" {
						f.BitOffset = f.Offset*8 + bo
					} else {
						f.BitOffset = f.Offset*8 + unit*8 - bo - bs
					}
				} else {
					f.BitOffset = f.Offset * 8
				}
			}
			t.Fields = append(t.Fields, f)
		}
		if c.Children {
			r.SkipChildren()
		}
	}
}

func uleb(b []byte) uint64 {
	var v uint64
	var shift uint
	for _, c := range b {
		v |= uint64(c&0x7f) << shift
		shift += 7
		if c&0x80 == 0 {
			break
		}
	}
	return v
}

func dynAttr(e *dwarf.Entry, a dwarf.Attr) DynAttr {
	f := e.AttrField(a)
	if f == nil {
		return DynAttr{}
	}
	switch v := f.Val.(type) {
	case int64:
		return DynAttr{Set: true, Const: v}
	case uint64:
		return DynAttr{Set: true, Const: int64(v)}
	case []byte:
		if f.Class == dwarf.ClassBlock {
			// A constant in block form (old producers).
			var c int64
			for i := len(v) - 1; i >= 0; i-- {
				c = c<<8 | int64(v[i])
			}
			return DynAttr{Set: true, Const: c}
		}
		return DynAttr{Set: true, Expr: v}
	case dwarf.Offset:
		return DynAttr{Set: true, Ref: v}
	case bool:
		if v {
			return DynAttr{Set: true, Const: 1}
		}
		return DynAttr{Set: true, Const: 0}
	}
	return DynAttr{}
}

// dimLen returns the element count of a dimension with constant bounds, or -1.
func (d Dim) constLen() int64 {
	if d.Count.isConst() {
		return d.Count.Const
	}
	if d.Upper.isConst() {
		lo := int64(0)
		if d.Lower.Set {
			if !d.Lower.isConst() {
				return -1
			}
			lo = d.Lower.Const
		}
		n := d.Upper.Const - lo + 1
		if n < 0 {
			n = 0
		}
		return n
	}
	if !d.Upper.Set && !d.Count.Set {
		return 0 // flexible array member / unknown bound
	}
	return -1
}

func (d Dim) lower() int64 {
	if d.Lower.isConst() {
		return d.Lower.Const
	}
	return 0
}

// staticArraySize computes the size of an array whose bounds are constant: the span from its
// first to past its last element when explicit strides are given.
func (t *Type) staticArraySize() int64 {
	if t.Elem == nil || t.Elem.Size < 0 {
		return -1
	}
	n := t.Elem.Size
	strided := false
	for _, d := range t.Dims {
		l := d.constLen()
		if l < 0 {
			return -1
		}
		if l == 0 {
			return 0
		}
		n *= l
		strided = strided || (d.Stride.isConst() && d.Stride.Const != 0)
	}
	if !strided {
		return n
	}
	dims, err := arrayDims(t)
	if err != nil {
		return -1
	}
	span := t.Elem.Size
	for _, d := range dims {
		if d.stride < 0 {
			return -1
		}
		span += (d.count - 1) * d.stride
	}
	return span
}

// String returns the type as gdb names it in the program's language.
func (t *Type) String() string {
	if t.Lang == LangFortran {
		return fortranTypeName(t)
	}
	return strings.TrimSpace(cDecl(t, ""))
}

// cDecl renders a C/C++ declarator around inner, the way gdb prints types.
func cDecl(t *Type, inner string) string {
	if t == nil {
		return "void" + spaced(inner)
	}
	switch t.Kind {
	case KindPointer, KindRef, KindRvalueRef:
		op := map[TypeKind]string{KindPointer: "*", KindRef: "&", KindRvalueRef: "&&"}[t.Kind]
		s := op + inner
		if e := t.Elem; e != nil && (e.Kind == KindArray || e.Kind == KindFunc) {
			s = "(" + s + ")"
		}
		return cDecl(t.Elem, s)
	case KindArray:
		dims := ""
		for _, d := range t.Dims {
			if n := d.constLen(); n > 0 || (n == 0 && d.Upper.Set) {
				dims += fmt.Sprintf("[%d]", n)
			} else {
				dims += "[]"
			}
		}
		return cDecl(t.Elem, inner+dims)
	case KindFunc:
		var ps []string
		for _, p := range t.Params {
			ps = append(ps, p.String())
		}
		if t.Variadic {
			ps = append(ps, "...")
		}
		if len(ps) == 0 && t.Lang == LangC && t.Prototyped {
			ps = []string{"void"}
		}
		return cDecl(t.Elem, inner+"("+strings.Join(ps, ", ")+")")
	case KindQualified:
		q := ""
		if t.Const {
			q = "const"
		} else if t.Volatile {
			q = "volatile"
		} else if t.Restrict {
			q = "restrict"
		}
		if e := t.Elem; e != nil && (e.Kind == KindPointer || e.Kind == KindRef) {
			return cDecl(e, " "+q+inner)
		}
		if q == "" {
			return cDecl(t.Elem, inner)
		}
		return q + " " + cDecl(t.Elem, inner)
	case KindStruct, KindUnion, KindEnum:
		name := t.Name
		if name == "" {
			name = "{...}"
		}
		if t.Lang == LangC {
			name = t.Keyword + " " + name
		}
		return name + spaced(inner)
	case KindVoid:
		n := t.Name
		if n == "" {
			n = "void"
		}
		return n + spaced(inner)
	default:
		return t.Name + spaced(inner)
	}
}

func spaced(inner string) string {
	if inner == "" {
		return ""
	}
	if inner[0] == ' ' {
		return inner
	}
	return " " + inner
}

// fortranTypeName renders a Fortran type as gdb does ("integer(kind=4)", "Type point").
func fortranTypeName(t *Type) string {
	switch t.Kind {
	case KindTypedef, KindQualified:
		if t.Name != "" {
			return t.Name
		}
		return fortranTypeName(t.Elem)
	case KindStruct, KindUnion:
		return "Type " + t.Name
	case KindPointer:
		return "PTR TO -> ( " + fortranTypeName(t.Elem) + " )"
	case KindString:
		if t.StrLen.isConst() {
			return fmt.Sprintf("character*%d", t.StrLen.Const)
		}
		return "character*(*)"
	case KindArray:
		var ds []string
		for _, d := range t.Dims {
			n := d.constLen()
			switch {
			case n < 0:
				ds = append(ds, ":")
			case d.lower() == 1:
				ds = append(ds, fmt.Sprint(n))
			default:
				ds = append(ds, fmt.Sprintf("%d:%d", d.lower(), d.lower()+n-1))
			}
		}
		return fortranTypeName(t.Elem) + " (" + strings.Join(ds, ",") + ")"
	case KindFunc:
		return fortranTypeName(t.Elem) + " ()"
	}
	if t.Name != "" {
		return t.Name
	}
	return "void"
}

// LookupType finds a named type (base types, typedefs, structs, enums) for casts.
func (b *Binary) LookupType(name string) (*Type, error) {
	refs := b.types[name]
	if len(refs) == 0 {
		return nil, fmt.Errorf("symbols: no type named %q", name)
	}
	// Prefer a complete definition.
	for _, r := range refs {
		t, err := b.typeAt(r.off)
		if err == nil && !t.Incomplete {
			return t, nil
		}
	}
	return b.typeAt(refs[0].off)
}
