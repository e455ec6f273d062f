package symbols

import (
	"debug/dwarf"
	"fmt"
	"slices"
	"sort"
	"sync"
)

// Function is an out-of-line function (a DWARF subprogram with code). Addresses are link-time.
type Function struct {
	Name        string      // qualified as gdb shows it: "walk", "ns::Shape::area", "mymod::show"
	LinkageName string      // mangled name, when the DWARF gives one
	Entry       uint64      // entry address (start of the first range)
	Low, High   uint64      // lowest and highest address covered
	Ranges      [][2]uint64 // code ranges [lo, hi)
	External    bool
	DeclLine    int

	off    dwarf.Offset
	cu     *compUnit
	spec   dwarf.Offset
	origin dwarf.Offset
	isMain bool

	treeOnce sync.Once
	tree     *scope
	treeErr  error
}

// Language returns the source language of the function's compile unit.
func (f *Function) Language() Language { return f.cu.Lang }

// Contains reports whether a link-time pc lies in the function's code.
func (f *Function) Contains(pc uint64) bool { return inRanges(f.Ranges, pc) }

func inRanges(rg [][2]uint64, pc uint64) bool {
	for _, r := range rg {
		if pc >= r[0] && pc < r[1] {
			return true
		}
	}
	return false
}

// FunctionAt returns the out-of-line function containing a link-time pc, or nil.
func (b *Binary) FunctionAt(pc uint64) *Function {
	if b.dw == nil {
		return nil
	}
	return b.funcForPC(pc)
}

// Functions returns every function with code, in DWARF order.
func (b *Binary) Functions() []*Function { return b.funcs }

// FunctionsNamed returns the functions whose qualified name, unqualified name or linkage name
// equals name, in DWARF order. Names are indexed at the first call: an expression's every
// identifier not found in its frame is looked up here, in every module (libc's thousands of
// functions among them), rank by rank.
func (b *Binary) FunctionsNamed(name string) []*Function {
	b.fidx.nameOnce.Do(func() {
		byName := make(map[string][]*Function, 2*len(b.funcs))
		for _, f := range b.funcs {
			short := unqualified(f.Name)
			byName[f.Name] = append(byName[f.Name], f)
			if f.LinkageName != f.Name {
				byName[f.LinkageName] = append(byName[f.LinkageName], f)
			}
			if short != f.Name && short != f.LinkageName {
				byName[short] = append(byName[short], f)
			}
		}
		b.fidx.byName = byName
	})
	return slices.Clone(b.fidx.byName[name])
}

func unqualified(n string) string {
	depth := 0
	for i := len(n) - 1; i > 0; i-- {
		switch n[i] {
		case '>':
			depth++
		case '<':
			depth--
		case ':':
			if depth == 0 && n[i-1] == ':' {
				return n[i+1:]
			}
		}
	}
	return n
}

// scopeKind distinguishes the nodes of a function's block tree.
type scopeKind uint8

const (
	scopeFunction scopeKind = iota
	scopeBlock
	scopeInlined
)

// scope is a node of a function's block tree: the function itself, a lexical block, or an
// inlined call.
type scope struct {
	kind     scopeKind
	ranges   [][2]uint64
	entry    uint64
	off      dwarf.Offset
	name     string // inlined callee's name
	origin   dwarf.Offset
	callFile int // index into the unit's line-table file list
	callLine int
	callCol  int
	declLine int
	vars     []varDecl
	children []*scope
	parent   *scope
	// callSites is filled on the root only: call sites of the whole function by return pc.
	callSites map[uint64]*callSite
}

// varDecl is a variable or parameter declared in a scope.
type varDecl struct {
	off        dwarf.Offset // DIE with the location (concrete), or the abstract DIE
	abstract   dwarf.Offset // abstract origin DIE, 0 if none
	name       string
	param      bool
	artificial bool
	noLocation bool // an abstract declaration with no concrete instance here
	constBlock bool // DW_AT_const_value in block form
	external   bool // a declaration of a global (extern inside a function)
}

// callSite describes a call made from a function, for entry-value resolution.
type callSite struct {
	returnPC uint64
	params   []callSiteParam
	tail     bool         // DW_AT_call_tail_call: a jump that does not return here
	origin   dwarf.Offset // DW_AT_call_origin: the called subprogram's DIE
	target   []byte       // DW_AT_call_target: expression computing the called address
}

type callSiteParam struct {
	loc   []byte       // DW_AT_location: where the callee finds the parameter (DW_OP_regN)
	value []byte       // DW_AT_call_value: the value in the caller's frame
	param dwarf.Offset // DW_AT_call_parameter / abstract origin: the callee's parameter DIE
}

// Contains reports whether the scope covers pc.
func (s *scope) contains(pc uint64) bool { return inRanges(s.ranges, pc) }

// tree returns the function's block tree, reading it on first use.
func (f *Function) scopeTree() (*scope, error) {
	f.treeOnce.Do(func() {
		defer func() {
			if r := recover(); r != nil {
				f.treeErr = fmt.Errorf("symbols: read scopes of %s: malformed DWARF: %v", f.Name, r)
			}
		}()
		f.tree, f.treeErr = f.cu.bin.readScopes(f)
	})
	return f.tree, f.treeErr
}

// readScopes reads a function's DIE subtree.
func (b *Binary) readScopes(f *Function) (*scope, error) {
	r := b.dw.Reader()
	r.Seek(f.off)
	e, err := r.Next()
	if err != nil {
		return nil, fmt.Errorf("symbols: read %s: %w", f.Name, err)
	}
	root := &scope{kind: scopeFunction, ranges: f.Ranges, entry: f.Entry, off: f.off, name: f.Name,
		callSites: map[uint64]*callSite{}}
	root.origin, _ = e.Val(dwarf.AttrAbstractOrigin).(dwarf.Offset)
	if e.Children {
		if err := b.readChildren(r, root, root, f.cu); err != nil {
			return nil, fmt.Errorf("symbols: read scopes of %s: %w", f.Name, err)
		}
	}
	if root.origin != 0 {
		b.inheritAbstract(root, root.origin, root, f.cu)
	}
	return root, nil
}

// readChildren reads the children of the DIE just returned by r into s (flattening blocks
// without code into s, as gdb does).
func (b *Binary) readChildren(r *dwarf.Reader, s, root *scope, cu *compUnit) error {
	for {
		e, err := r.Next()
		if err != nil {
			return err
		}
		if e == nil || e.Tag == 0 {
			return nil
		}
		switch e.Tag {
		case dwarf.TagVariable, dwarf.TagFormalParameter:
			s.vars = append(s.vars, b.varDeclOf(e))
			if e.Children {
				r.SkipChildren()
			}
		case dwarf.TagLexDwarfBlock, dwarf.TagInlinedSubroutine:
			rg, _ := b.dw.Ranges(e)
			rg = nonEmpty(rg)
			if len(rg) == 0 && e.Tag == dwarf.TagLexDwarfBlock {
				// A block without code: its children belong to the enclosing scope.
				origin, _ := e.Val(dwarf.AttrAbstractOrigin).(dwarf.Offset)
				if e.Children {
					if err := b.readChildren(r, s, root, cu); err != nil {
						return err
					}
				}
				if origin != 0 {
					b.inheritAbstract(s, origin, root, cu)
				}
				continue
			}
			if len(rg) == 0 {
				if e.Children {
					r.SkipChildren()
				}
				continue
			}
			c := &scope{kind: scopeBlock, ranges: rg, entry: rg[0][0], off: e.Offset, parent: s}
			c.origin, _ = e.Val(dwarf.AttrAbstractOrigin).(dwarf.Offset)
			if e.Tag == dwarf.TagInlinedSubroutine {
				c.kind = scopeInlined
				if v, ok := e.Val(dwarf.AttrEntrypc).(uint64); ok {
					c.entry = v
				}
				if v, ok := e.Val(dwarf.AttrCallFile).(int64); ok {
					c.callFile = int(v)
				}
				if v, ok := e.Val(dwarf.AttrCallLine).(int64); ok {
					c.callLine = int(v)
				}
				if v, ok := e.Val(dwarf.AttrCallColumn).(int64); ok {
					c.callCol = int(v)
				}
				if c.origin != 0 {
					c.name = b.nameOfDIE(c.origin, b.declNames)
					if oe, err := b.entryAt(c.origin); err == nil {
						if v, ok := oe.Val(dwarf.AttrDeclLine).(int64); ok {
							c.declLine = int(v)
						}
					}
				}
			}
			if e.Children {
				if err := b.readChildren(r, c, root, cu); err != nil {
					return err
				}
			}
			if c.origin != 0 {
				b.inheritAbstract(c, c.origin, root, cu)
			}
			if c.kind == scopeBlock && len(c.vars) == 0 {
				// gdb makes no block of a lexical block without symbols; its
				// inlined calls and inner blocks belong to the enclosing scope.
				for _, g := range c.children {
					g.parent = s
				}
				s.children = append(s.children, c.children...)
				continue
			}
			s.children = append(s.children, c)
		case dwarf.TagCallSite, tagGNUCallSite:
			cs := &callSite{}
			if v, ok := e.Val(dwarf.AttrCallReturnPC).(uint64); ok {
				cs.returnPC = v
			} else if v, ok := e.Val(dwarf.AttrLowpc).(uint64); ok {
				cs.returnPC = v // DW_TAG_GNU_call_site: low_pc is the return address
			}
			cs.tail, _ = e.Val(dwarf.AttrCallTailCall).(bool)
			if !cs.tail {
				cs.tail, _ = e.Val(attrGNUTailCall).(bool)
			}
			cs.target, _ = e.Val(dwarf.AttrCallTarget).([]byte)
			if cs.target == nil {
				cs.target, _ = e.Val(attrGNUCallSiteTarget).([]byte)
			}
			cs.origin, _ = e.Val(dwarf.AttrCallOrigin).(dwarf.Offset)
			if cs.origin == 0 {
				cs.origin, _ = e.Val(dwarf.AttrAbstractOrigin).(dwarf.Offset)
			}
			if e.Children {
				for {
					pe, err := r.Next()
					if err != nil {
						return err
					}
					if pe == nil || pe.Tag == 0 {
						break
					}
					if pe.Tag == dwarf.TagCallSiteParameter || pe.Tag == tagGNUCallSiteParameter {
						var p callSiteParam
						p.loc, _ = pe.Val(dwarf.AttrLocation).([]byte)
						p.value, _ = pe.Val(dwarf.AttrCallValue).([]byte)
						if p.value == nil {
							p.value, _ = pe.Val(attrGNUCallSiteValue).([]byte)
						}
						p.param, _ = pe.Val(dwarf.AttrCallParameter).(dwarf.Offset)
						if p.param == 0 {
							p.param, _ = pe.Val(dwarf.AttrAbstractOrigin).(dwarf.Offset)
						}
						cs.params = append(cs.params, p)
					}
					if pe.Children {
						r.SkipChildren()
					}
				}
			}
			if cs.returnPC != 0 {
				root.callSites[cs.returnPC] = cs
			}
		default:
			if e.Children {
				r.SkipChildren()
			}
		}
	}
}

func nonEmpty(rg [][2]uint64) [][2]uint64 {
	out := rg[:0:0]
	for _, r := range rg {
		if r[1] > r[0] {
			out = append(out, r)
		}
	}
	return out
}

// varDeclOf describes a variable DIE, taking what it lacks from its abstract origin.
func (b *Binary) varDeclOf(e *dwarf.Entry) varDecl {
	v := varDecl{off: e.Offset, param: e.Tag == dwarf.TagFormalParameter}
	v.name, _ = e.Val(dwarf.AttrName).(string)
	v.artificial, _ = e.Val(dwarf.AttrArtificial).(bool)
	v.external, _ = e.Val(dwarf.AttrDeclaration).(bool)
	if f := e.AttrField(dwarf.AttrConstValue); f != nil && f.Class == dwarf.ClassBlock {
		v.constBlock = true
	}
	if o, ok := e.Val(dwarf.AttrAbstractOrigin).(dwarf.Offset); ok {
		v.abstract = o
		if oe, err := b.entryAt(o); err == nil {
			if v.name == "" {
				v.name, _ = oe.Val(dwarf.AttrName).(string)
			}
			if a, ok := oe.Val(dwarf.AttrArtificial).(bool); ok {
				v.artificial = a
			}
			if f := oe.AttrField(dwarf.AttrConstValue); f != nil && f.Class == dwarf.ClassBlock &&
				e.AttrField(dwarf.AttrLocation) == nil && e.AttrField(dwarf.AttrConstValue) == nil {
				v.constBlock = true
			}
		}
	}
	return v
}

// inheritAbstract adds to s the variables (and blocks without code) of the abstract origin
// that no concrete child of s refers to; gdb shows them as optimized out.
func (b *Binary) inheritAbstract(s *scope, origin dwarf.Offset, root *scope, cu *compUnit) {
	seen := map[dwarf.Offset]bool{}
	var mark func(x *scope)
	mark = func(x *scope) {
		for _, v := range x.vars {
			if v.abstract != 0 {
				seen[v.abstract] = true
			}
		}
		for _, c := range x.children {
			if c.origin != 0 && c.kind == scopeBlock {
				seen[c.origin] = true
			}
		}
	}
	mark(s)
	r := b.dw.Reader()
	r.Seek(origin)
	oe, err := r.Next()
	if err != nil || oe == nil || !oe.Children {
		return
	}
	var walk func(flatten bool)
	walk = func(flatten bool) {
		for {
			e, err := r.Next()
			if err != nil || e == nil || e.Tag == 0 {
				return
			}
			switch e.Tag {
			case dwarf.TagVariable, dwarf.TagFormalParameter:
				if !seen[e.Offset] {
					v := b.varDeclOf(e)
					v.abstract = e.Offset
					v.noLocation = e.AttrField(dwarf.AttrLocation) == nil && e.AttrField(dwarf.AttrConstValue) == nil
					s.vars = append(s.vars, v)
				}
				if e.Children {
					r.SkipChildren()
				}
			case dwarf.TagLexDwarfBlock:
				if seen[e.Offset] {
					if e.Children {
						r.SkipChildren()
					}
					continue
				}
				if e.Children {
					walk(true)
				}
			default:
				if e.Children {
					r.SkipChildren()
				}
			}
		}
	}
	walk(false)
}

// scopesAt returns the chain of scopes containing pc, outermost (the function) first.
func (s *scope) chainAt(pc uint64) []*scope {
	chain := []*scope{s}
	cur := s
	for {
		var next *scope
		for _, c := range cur.children {
			if c.contains(pc) {
				next = c
				break
			}
		}
		if next == nil {
			return chain
		}
		chain = append(chain, next)
		cur = next
	}
}

// innermostBlock returns the deepest scope containing pc (gdb's block_for_pc).
func (b *Binary) innermostBlock(pc uint64) *scope {
	f := b.funcForPC(pc)
	if f == nil {
		return nil
	}
	root, err := f.scopeTree()
	if err != nil || root == nil {
		return nil
	}
	ch := root.chainAt(pc)
	return ch[len(ch)-1]
}

// InlinedCall is one level of inlining at a pc: the inlined function and where it was
// called from.
type InlinedCall struct {
	Function string // the inlined callee
	CallFile string // where the call is
	CallLine int
	CallCol  int
	Entry    uint64 // link-time entry pc of the inlined instance
	Ranges   [][2]uint64
}

// InlineChain returns the inlined calls active at a link-time pc, innermost first. An empty
// result means pc is in the out-of-line function itself.
func (b *Binary) InlineChain(pc uint64) ([]InlinedCall, error) {
	f := b.funcForPC(pc)
	if f == nil {
		return nil, nil
	}
	root, err := f.scopeTree()
	if err != nil {
		return nil, err
	}
	var out []InlinedCall
	ch := root.chainAt(pc)
	for i := len(ch) - 1; i > 0; i-- {
		s := ch[i]
		if s.kind != scopeInlined {
			continue
		}
		out = append(out, InlinedCall{Function: s.name, CallFile: f.cu.fileName(s.callFile),
			CallLine: s.callLine, CallCol: s.callCol, Entry: s.entry, Ranges: s.ranges})
	}
	return out, nil
}

// fileName returns a line-table file name by index (DWARF 5 indexes from 0, earlier versions
// from 1).
func (cu *compUnit) fileName(i int) string {
	lt, err := cu.lineTable()
	if err != nil || lt == nil {
		return ""
	}
	if i >= 0 && i < len(lt.fileByIndex) {
		return lt.fileByIndex[i]
	}
	return ""
}

// sortFuncs orders functions by entry address (used by tests and tools).
func sortFuncs(fs []*Function) {
	sort.Slice(fs, func(i, j int) bool { return fs[i].Entry < fs[j].Entry })
}
