package symbols

import (
	"debug/dwarf"
	"fmt"
	"strings"
)

// cuScan is what one compile unit contributes to the index.
type cuScan struct {
	cu          *compUnit
	cuRanges    [][2]uint64
	funcs       []*Function
	globals     []globalDecl
	types       []typeDecl
	enumerators []typeDecl
	typeQual    []typeDecl        // qualified names of types in namespaces and classes
	declParent  [][2]dwarf.Offset // member function declaration -> its class
	declNames   map[dwarf.Offset]string
	declExt     []dwarf.Offset // declarations of names with external linkage
	dies        int
}

type globalDecl struct {
	name string
	spec dwarf.Offset
	off  dwarf.Offset
	ext  bool // DW_AT_external on the definition (or on its declaration: see declExt)
}

type typeDecl struct {
	name string
	off  dwarf.Offset
}

type scanScope struct {
	tag    dwarf.Tag
	off    dwarf.Offset
	prefix string // qualified-name prefix for children ("ns::Klass::")
	inFunc bool
}

// scanUnit reads every DIE of one unit.
func (b *Binary) scanUnit(h unitHeader) (res *cuScan, err error) {
	defer func() {
		if r := recover(); r != nil {
			res, err = nil, fmt.Errorf("malformed DWARF: %v", r)
		}
	}()
	r := b.dw.Reader()
	r.Seek(dwarf.Offset(h.dieOff))
	e, err := r.Next()
	if err != nil {
		return nil, err
	}
	if e == nil || (e.Tag != dwarf.TagCompileUnit && e.Tag != dwarf.TagPartialUnit) {
		return nil, nil // type units and skeletons carry no code of their own
	}
	cu := &compUnit{bin: b, unitOff: h.start, off: e.Offset, entry: e, Version: h.version,
		AddrSize: h.addrSize, is64: h.is64}
	cu.Name, _ = e.Val(dwarf.AttrName).(string)
	cu.CompDir, _ = e.Val(dwarf.AttrCompDir).(string)
	cu.Producer, _ = e.Val(dwarf.AttrProducer).(string)
	if l, ok := e.Val(dwarf.AttrLanguage).(int64); ok {
		cu.Lang = langOf(l)
	}
	if v, ok := e.Val(dwarf.AttrLowpc).(uint64); ok {
		cu.lowPC = v
	}
	if v, ok := e.Val(dwarf.AttrAddrBase).(int64); ok {
		cu.addrBase = uint64(v)
	}
	if v, ok := e.Val(dwarf.AttrLoclistsBase).(int64); ok {
		cu.locBase = uint64(v)
	}
	res = &cuScan{cu: cu, declNames: map[dwarf.Offset]string{}}
	if rg, err := b.dw.Ranges(e); err == nil {
		res.cuRanges = rg
	}
	if !e.Children {
		return res, nil
	}
	stack := []scanScope{{tag: e.Tag}}
	for {
		e, err := r.Next()
		if err != nil {
			return nil, err
		}
		if e == nil {
			break
		}
		if e.Tag == 0 {
			stack = stack[:len(stack)-1]
			if len(stack) == 0 {
				break
			}
			continue
		}
		res.dies++
		parent := stack[len(stack)-1]
		name, _ := e.Val(dwarf.AttrName).(string)
		qual := parent.prefix + name
		child := scanScope{tag: e.Tag, off: e.Offset, prefix: parent.prefix, inFunc: parent.inFunc}
		decl, _ := e.Val(dwarf.AttrDeclaration).(bool)
		switch e.Tag {
		case dwarf.TagNamespace:
			if name == "" {
				name = "(anonymous namespace)"
			}
			child.prefix = parent.prefix + name + "::"
		case dwarf.TagModule:
			child.prefix = parent.prefix + name + "::"
			res.declNames[e.Offset] = parent.prefix + name
		case dwarf.TagStructType, dwarf.TagClassType, dwarf.TagUnionType, dwarf.TagEnumerationType:
			if e.Tag != dwarf.TagEnumerationType && cu.Lang == LangC && e.Children {
				// C members declare nothing the index needs.
				if name != "" && !decl && !parent.inFunc {
					res.types = append(res.types, typeDecl{name: qual, off: e.Offset})
				}
				r.SkipChildren()
				continue
			}
			if name != "" {
				child.prefix = qual + "::"
				if !decl && !parent.inFunc {
					res.types = append(res.types, typeDecl{name: qual, off: e.Offset})
				}
				if qual != name && !parent.inFunc {
					res.typeQual = append(res.typeQual, typeDecl{name: qual, off: e.Offset})
				}
			}
		case dwarf.TagEnumerator:
			if parent.tag == dwarf.TagEnumerationType && name != "" {
				// Findable plain, qualified by the enumeration, and qualified by its scope.
				res.enumerators = append(res.enumerators, typeDecl{name: name, off: parent.off})
				if parent.prefix != "" {
					res.enumerators = append(res.enumerators, typeDecl{name: parent.prefix + name, off: parent.off})
					if scope := enclosingScope(parent.prefix); scope != "" {
						res.enumerators = append(res.enumerators, typeDecl{name: scope + name, off: parent.off})
					}
				}
			}
		case dwarf.TagBaseType, dwarf.TagTypedef:
			if name != "" && !parent.inFunc {
				res.types = append(res.types, typeDecl{name: qual, off: e.Offset})
				if qual != name {
					res.typeQual = append(res.typeQual, typeDecl{name: qual, off: e.Offset})
				}
			}
		case dwarf.TagSubprogram:
			if name != "" {
				res.declNames[e.Offset] = qual
			}
			if ln, ok := e.Val(dwarf.AttrLinkageName).(string); ok && cu.Lang == LangC {
				res.declNames[e.Offset] = ln
			}
			if decl && (parent.tag == dwarf.TagStructType || parent.tag == dwarf.TagClassType || parent.tag == dwarf.TagUnionType) {
				res.declParent = append(res.declParent, [2]dwarf.Offset{e.Offset, parent.off})
			}
			if !decl {
				if f := b.newFunction(e, cu, qual, name); f != nil {
					res.funcs = append(res.funcs, f)
				}
			}
			child.inFunc = true
			if cu.Lang != LangFortran && e.Children {
				// Only Fortran nests procedures; function bodies are read when needed.
				r.SkipChildren()
				continue
			}
		case dwarf.TagVariable, dwarf.TagMember:
			ext, _ := e.Val(dwarf.AttrExternal).(bool)
			if e.Tag == dwarf.TagMember && !(decl && ext) {
				break
			}
			if decl {
				if name != "" {
					res.declNames[e.Offset] = qual
				}
				if ext {
					res.declExt = append(res.declExt, e.Offset)
				}
				break
			}
			if parent.inFunc {
				break
			}
			spec, _ := e.Val(dwarf.AttrSpecification).(dwarf.Offset)
			gname := qual
			if name == "" {
				gname = ""
			}
			res.globals = append(res.globals, globalDecl{name: gname, spec: spec, off: e.Offset, ext: ext})
		}
		if e.Children {
			stack = append(stack, child)
		}
	}
	return res, nil
}

// newFunction makes a Function for a subprogram DIE that has code.
func (b *Binary) newFunction(e *dwarf.Entry, cu *compUnit, qual, name string) *Function {
	rg, err := b.dw.Ranges(e)
	if err != nil || len(rg) == 0 {
		return nil
	}
	var clean [][2]uint64
	for _, r := range rg {
		if r[1] > r[0] {
			clean = append(clean, r)
		}
	}
	if len(clean) == 0 {
		return nil
	}
	f := &Function{Ranges: clean, Entry: clean[0][0], off: e.Offset, cu: cu}
	if name != "" {
		f.Name = qual
	}
	f.LinkageName, _ = e.Val(dwarf.AttrLinkageName).(string)
	if f.LinkageName == "" {
		f.LinkageName, _ = e.Val(attrMIPSLinkageName).(string)
	}
	if cu.Lang == LangC && f.LinkageName != "" {
		// gdb names C functions by their assembler name (glibc's __GI_raise for raise).
		f.Name = f.LinkageName
	}
	f.External, _ = e.Val(dwarf.AttrExternal).(bool)
	if v, ok := e.Val(dwarf.AttrDeclLine).(int64); ok {
		f.DeclLine = int(v)
	}
	f.spec, _ = e.Val(dwarf.AttrSpecification).(dwarf.Offset)
	f.origin, _ = e.Val(dwarf.AttrAbstractOrigin).(dwarf.Offset)
	if m, ok := e.Val(dwarf.AttrMainSubprogram).(bool); ok && m {
		f.isMain = true
	}
	for _, r := range clean {
		if f.Low == 0 || r[0] < f.Low {
			f.Low = r[0]
		}
		if r[1] > f.High {
			f.High = r[1]
		}
	}
	return f
}

// enclosingScope drops the last component of a "a::b::" prefix ("geo::Kind::" → "geo::").
func enclosingScope(prefix string) string {
	p := strings.TrimSuffix(prefix, "::")
	if i := strings.LastIndex(p, "::"); i >= 0 {
		return p[:i+2]
	}
	return ""
}
