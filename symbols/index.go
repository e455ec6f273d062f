package symbols

import (
	"debug/dwarf"
	"fmt"
	"runtime"
	"sort"
	"strings"
	"sync"
)

// DWARF language codes the package distinguishes.
const (
	langC89        = 0x01
	langC          = 0x02
	langCPlusPlus  = 0x04
	langFortran77  = 0x07
	langFortran90  = 0x08
	langC99        = 0x0c
	langFortran95  = 0x0e
	langCPlusPlus3 = 0x19
	langC11        = 0x1d
	langCPlusPlus1 = 0x1a
	langCPlusPlus4 = 0x21
	langFortran03  = 0x22
	langFortran08  = 0x23
	langC17        = 0x2c
)

// Language is the source language of a compile unit.
type Language int

// Languages.
const (
	LangUnknown Language = iota
	LangC
	LangCPlusPlus
	LangFortran
)

// String names the language ("c", "c++", "fortran").
func (l Language) String() string {
	switch l {
	case LangC:
		return "c"
	case LangCPlusPlus:
		return "c++"
	case LangFortran:
		return "fortran"
	}
	return "unknown"
}

func langOf(code int64) Language {
	switch code {
	case langC89, langC, langC99, langC11, langC17:
		return LangC
	case langCPlusPlus, langCPlusPlus1, langCPlusPlus3, langCPlusPlus4:
		return LangCPlusPlus
	case langFortran77, langFortran90, langFortran95, langFortran03, langFortran08:
		return LangFortran
	}
	return LangUnknown
}

// compUnit is one DWARF compile unit.
type compUnit struct {
	bin        *Binary
	unitOff    uint64       // offset of the unit header in .debug_info
	off        dwarf.Offset // offset of the unit DIE
	entry      *dwarf.Entry
	Name       string
	CompDir    string
	Producer   string
	Lang       Language
	Version    int
	AddrSize   int
	is64       bool
	lowPC      uint64
	addrBase   uint64
	locBase    uint64
	locOnce    sync.Once
	hasLocList bool // some variable uses a location list: gdb trusts its locations

	lineOnce sync.Once
	lines    *lineTable
	lineErr  error
	files    []string // line table file names, resolved
}

// gcc reports whether the unit was produced by GCC (prologue analysis trusts it).
func (cu *compUnit) gcc() bool { return strings.HasPrefix(cu.Producer, "GNU ") }

// unitHeader is what the package needs from a .debug_info unit header.
type unitHeader struct {
	start    uint64
	dieOff   uint64
	end      uint64
	version  int
	addrSize int
	is64     bool
}

// unitHeaders walks the unit headers of .debug_info.
func unitHeaders(info []byte, order interface {
	Uint16([]byte) uint16
	Uint32([]byte) uint32
	Uint64([]byte) uint64
}) ([]unitHeader, error) {
	var out []unitHeader
	off := uint64(0)
	for off+11 <= uint64(len(info)) {
		h := unitHeader{start: off}
		p := off
		l := uint64(order.Uint32(info[p:]))
		p += 4
		if l == 0xffffffff {
			if p+8 > uint64(len(info)) {
				return out, fmt.Errorf("unit at %#x: truncated", off)
			}
			l = order.Uint64(info[p:])
			p += 8
			h.is64 = true
		}
		h.end = p + l
		if h.end > uint64(len(info)) || h.end < p {
			return out, fmt.Errorf("unit at %#x: length %d past the section", off, l)
		}
		if p+2 > h.end {
			return out, fmt.Errorf("unit at %#x: truncated header", off)
		}
		h.version = int(order.Uint16(info[p:]))
		p += 2
		offSize := uint64(4)
		if h.is64 {
			offSize = 8
		}
		if h.version >= 5 {
			if p+2 > h.end {
				return out, fmt.Errorf("unit at %#x: truncated header", off)
			}
			ut := info[p]
			h.addrSize = int(info[p+1])
			p += 2 + offSize
			switch ut {
			case 0x02, 0x06: // type, split_type
				p += 8 + offSize
			case 0x04, 0x05: // skeleton, split_compile
				p += 8
			}
		} else {
			p += offSize
			if p >= h.end {
				return out, fmt.Errorf("unit at %#x: truncated header", off)
			}
			h.addrSize = int(info[p])
			p++
		}
		h.dieOff = p
		out = append(out, h)
		off = h.end
	}
	return out, nil
}

// index walks every DIE once, in parallel over compile units, and builds the tables used by
// lookups. It returns what each unit contributed, for the persistent cache.
func (b *Binary) index() ([]*cuScan, error) {
	hdrs, err := unitHeaders(b.secs.info, b.Arch.ByteOrder)
	if err != nil && len(hdrs) == 0 {
		return nil, err
	}
	b.warmUnits(hdrs)
	b.stats.IndexBuilds++
	results := make([]*cuScan, len(hdrs))
	workers := runtime.GOMAXPROCS(0)
	if workers > len(hdrs) {
		workers = len(hdrs)
	}
	var wg sync.WaitGroup
	next := make(chan int, len(hdrs))
	for i := range hdrs {
		next <- i
	}
	close(next)
	errs := make([]error, len(hdrs))
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				results[i], errs[i] = b.scanUnit(hdrs[i])
			}
		}()
	}
	wg.Wait()
	for i, e := range errs {
		if e != nil {
			return nil, fmt.Errorf("unit at %#x: %w", hdrs[i].start, e)
		}
	}
	b.merge(results)
	b.indexFiles()
	return results, nil
}

// warmUnits seeks once into every unit: debug/dwarf caches each DWARF 5 unit's base offsets
// on the first Seek into it, and doing that before any concurrent reader keeps later readers
// read-only.
func (b *Binary) warmUnits(hdrs []unitHeader) {
	warm := b.dw.Reader()
	for _, h := range hdrs {
		warm.Seek(dwarf.Offset(h.dieOff))
	}
}

// merge builds the binary's tables from what its units contributed.
func (b *Binary) merge(results []*cuScan) {
	b.cus, b.funcs, b.franges, b.cranges, b.stats.DIEs = nil, nil, nil, nil, 0
	b.globals = map[string][]dieRef{}
	b.types = map[string][]dieRef{}
	b.enumerators = map[string][]dieRef{}
	b.typeNames = map[dwarf.Offset]string{}
	b.declParent = map[dwarf.Offset]dwarf.Offset{}
	b.files = map[string][]*compUnit{}
	declNames := map[dwarf.Offset]string{}
	b.declNames = declNames
	declExt := map[dwarf.Offset]bool{}
	for _, r := range results {
		if r == nil {
			continue
		}
		for k, v := range r.declNames {
			declNames[k] = v
		}
		for _, o := range r.declExt {
			declExt[o] = true
		}
	}
	for _, r := range results {
		if r == nil || r.cu == nil {
			continue
		}
		cu := r.cu
		b.cus = append(b.cus, cu)
		b.stats.DIEs += r.dies
		for _, rg := range r.cuRanges {
			b.cranges = append(b.cranges, cuRange{lo: rg[0], hi: rg[1], cu: cu})
		}
		for _, f := range r.funcs {
			if f.Name == "" && f.spec != 0 {
				f.Name = declNames[f.spec]
			}
			if f.Name == "" && f.origin != 0 {
				f.Name = b.nameOfDIE(f.origin, declNames)
			}
			b.funcs = append(b.funcs, f)
			for _, rg := range f.Ranges {
				b.franges = append(b.franges, funcRange{lo: rg[0], hi: rg[1], fn: f})
			}
			if f.isMain {
				b.mainFn = f.Name
			}
		}
		for _, g := range r.globals {
			name := g.name
			if name == "" && g.spec != 0 {
				name = declNames[g.spec]
			}
			if name == "" {
				continue
			}
			ref := dieRef{off: g.off, cu: cu, ext: g.ext || declExt[g.spec]}
			b.globals[name] = append(b.globals[name], ref)
			if i := strings.LastIndex(name, "::"); i >= 0 {
				// Also findable by the unqualified name, as gdb finds module variables.
				short := name[i+2:]
				b.globals[short] = append(b.globals[short], ref)
			}
		}
		for _, t := range r.types {
			b.types[t.name] = append(b.types[t.name], dieRef{off: t.off, cu: cu})
		}
		for _, t := range r.typeQual {
			b.typeNames[t.off] = t.name
		}
		for _, d := range r.declParent {
			b.declParent[d[0]] = d[1]
		}
		for _, t := range r.enumerators {
			b.enumerators[t.name] = append(b.enumerators[t.name], dieRef{off: t.off, cu: cu})
		}
	}
	if b.mainFn == "" {
		b.mainFn = "main"
	}
	sort.Slice(b.franges, func(i, j int) bool {
		if b.franges[i].lo != b.franges[j].lo {
			return b.franges[i].lo < b.franges[j].lo
		}
		return b.franges[i].hi > b.franges[j].hi
	})
	sort.Slice(b.cranges, func(i, j int) bool { return b.cranges[i].lo < b.cranges[j].lo })
	b.stats.CompileUnits = len(b.cus)
	b.stats.Functions = len(b.funcs)
	b.stats.Globals = len(b.globals)
}

// nameOfDIE returns the (qualified, where known) name of a DIE, following
// DW_AT_specification and DW_AT_abstract_origin.
func (b *Binary) nameOfDIE(off dwarf.Offset, declNames map[dwarf.Offset]string) string {
	for depth := 0; depth < 8; depth++ {
		if n, ok := declNames[off]; ok && n != "" {
			return n
		}
		e, err := b.entryAt(off)
		if err != nil || e == nil {
			return ""
		}
		if n, ok := e.Val(dwarf.AttrName).(string); ok {
			return n
		}
		if s, ok := e.Val(dwarf.AttrSpecification).(dwarf.Offset); ok {
			off = s
			continue
		}
		if s, ok := e.Val(dwarf.AttrAbstractOrigin).(dwarf.Offset); ok {
			off = s
			continue
		}
		return ""
	}
	return ""
}

// entryAt reads the DIE at off.
func (b *Binary) entryAt(off dwarf.Offset) (*dwarf.Entry, error) {
	r := b.dw.Reader()
	r.Seek(off)
	e, err := r.Next()
	if err != nil {
		return nil, fmt.Errorf("read DIE at %#x: %w", off, err)
	}
	if e == nil {
		return nil, fmt.Errorf("no DIE at %#x", off)
	}
	return e, nil
}

// cuForOffset returns the compile unit containing a DIE offset.
func (b *Binary) cuForOffset(off dwarf.Offset) *compUnit {
	i := sort.Search(len(b.cus), func(i int) bool { return b.cus[i].off > off }) - 1
	if i < 0 {
		return nil
	}
	return b.cus[i]
}

// cuForPC returns the compile unit whose code covers a link-time pc.
func (b *Binary) cuForPC(pc uint64) *compUnit {
	if f := b.funcForPC(pc); f != nil {
		return f.cu
	}
	i := sort.Search(len(b.cranges), func(i int) bool { return b.cranges[i].lo > pc }) - 1
	for k := i; k >= 0 && k > i-64; k-- {
		if r := b.cranges[k]; pc >= r.lo && pc < r.hi {
			return r.cu
		}
	}
	return nil
}

// funcForPC returns the innermost out-of-line function whose ranges cover pc.
func (b *Binary) funcForPC(pc uint64) *Function {
	i := sort.Search(len(b.franges), func(i int) bool { return b.franges[i].lo > pc }) - 1
	var best *Function
	var bestSize uint64
	// Nested functions (Fortran contained procedures, GNU C nested functions) have their own
	// ranges; prefer the smallest range that covers pc.
	for k := i; k >= 0 && k > i-32; k-- {
		r := b.franges[k]
		if pc >= r.lo && pc < r.hi {
			if best == nil || r.hi-r.lo < bestSize {
				best, bestSize = r.fn, r.hi-r.lo
			}
		}
	}
	return best
}

// indexFiles maps every source file named by a line table to its compile units.
func (b *Binary) indexFiles() {
	for _, cu := range b.cus {
		if cu.entry == nil {
			continue
		}
		if _, ok := cu.entry.Val(dwarf.AttrStmtList).(int64); !ok {
			continue
		}
		lr, err := b.dw.LineReader(cu.entry)
		if err != nil || lr == nil {
			continue
		}
		seen := map[string]bool{}
		for _, f := range lr.Files() {
			if f == nil {
				continue
			}
			name := cu.absFileName(f.Name)
			if seen[name] {
				continue
			}
			seen[name] = true
			cu.files = append(cu.files, name)
			b.files[name] = append(b.files[name], cu)
		}
	}
}

// locationsValid reports whether some variable of the unit uses a location list; gdb then
// trusts the unit's variable locations from a function's first instruction (and places
// function breakpoints at the entry). It is computed on first use.
func (cu *compUnit) locationsValid() bool {
	cu.locOnce.Do(func() {
		defer func() { recover() }()
		r := cu.bin.dw.Reader()
		r.Seek(cu.off)
		e, err := r.Next()
		if err != nil || e == nil || !e.Children {
			return
		}
		depth := 1
		for depth > 0 {
			e, err := r.Next()
			if err != nil || e == nil {
				return
			}
			if e.Tag == 0 {
				depth--
				continue
			}
			if e.Tag == dwarf.TagVariable || e.Tag == dwarf.TagFormalParameter {
				if f := e.AttrField(dwarf.AttrLocation); f != nil &&
					(f.Class == dwarf.ClassLocListPtr || f.Class == dwarf.ClassLocList) {
					cu.hasLocList = true
					return
				}
			}
			if e.Children {
				switch e.Tag {
				case dwarf.TagStructType, dwarf.TagClassType, dwarf.TagUnionType, dwarf.TagEnumerationType,
					dwarf.TagArrayType, dwarf.TagSubroutineType:
					r.SkipChildren()
				default:
					depth++
				}
			}
		}
	})
	return cu.hasLocList
}
