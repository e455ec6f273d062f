package symbols

import (
	"debug/dwarf"
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/hpcdap/hpcdap/symbols/cfi"
)

// DefaultDebugDirs are the directories searched for separate debug files, as gdb's
// debug-file-directory.
var DefaultDebugDirs = []string{"/usr/lib/debug"}

// Options control how a Binary is opened.
type Options struct {
	// DebugDirs replaces DefaultDebugDirs when non-nil.
	DebugDirs []string
	// IndexCacheDir is the directory of the persistent index cache (DefaultIndexCacheDir
	// gives the user's); "" reads every binary's DWARF afresh.
	IndexCacheDir string
}

// Binary is one ELF executable or shared object with its debugging information, independent
// of any process. Addresses taken and returned by its methods are link-time addresses.
type Binary struct {
	Path      string   // the object file
	DebugPath string   // the separate debug file DWARF came from, or "" when it was in Path
	BuildID   []byte   // GNU build-id, or nil
	Arch      *Arch    // machine
	Type      elf.Type // ET_EXEC, ET_DYN (PIE or shared object)
	Entry     uint64   // e_entry (code address; ELFv1 descriptors resolved)

	rawEntry    uint64    // e_entry as in the file (an .opd descriptor on ELFv1)
	file        *elf.File // the object itself, kept open for code bytes
	osfile      *os.File
	loads       []elf.ProgHeader
	progs       []elf.ProgHeader // every program header, in file order
	syms        *symtab
	opd         *opdTable
	dw          *dwarf.Data
	tlsSeg      *elf.ProgHeader
	frames      *cfi.Table
	secs        dwarfSections
	cus         []*compUnit
	funcs       []*Function
	franges     []funcRange // sorted by lo
	cranges     []cuRange   // sorted by lo
	globals     map[string][]dieRef
	types       map[string][]dieRef
	enumerators map[string][]dieRef    // enumeration constant -> enumeration type
	files       map[string][]*compUnit // full source path -> CUs whose line tables name it
	mainFn      string                 // name of the program's main function for unwinding

	declNames map[dwarf.Offset]string // qualified names of named subprograms and declarations
	fidx      funcIndex

	inlOnce     sync.Once
	inlByOrigin map[dwarf.Offset][]inlineInstance // abstract function DIE -> inlined copies
	inlByName   map[string][]inlineInstance       // function name -> inlined copies
	typeNames   map[dwarf.Offset]string           // qualified names of types declared in scopes
	declParent  map[dwarf.Offset]dwarf.Offset     // member function declaration -> class

	typeMu    sync.Mutex
	typeCache map[dwarf.Offset]*Type
	stats     LoadStats
}

// LoadStats counts what indexing a Binary found; it is reported by benchmarks and tools.
type LoadStats struct {
	CompileUnits int
	Functions    int
	Globals      int
	DIEs         int
	Symbols      int
	FDEs         int
	// IndexBuilds counts the walks over every DIE (0 or 1); IndexCached is true when the
	// index came from the persistent cache instead.
	IndexBuilds int
	IndexCached bool
}

// dwarfSections holds the raw DWARF sections the package decodes itself (debug/dwarf handles
// the rest).
type dwarfSections struct {
	info, loc, loclists, addr, rnglists, strOffsets []byte
	all                                             map[string][]byte // every section read, by name
}

// dieRef names a DIE inside the binary.
type dieRef struct {
	off dwarf.Offset
	cu  *compUnit
	ext bool // a global with external linkage (visible from other compile units and modules)
}

type funcRange struct {
	lo, hi uint64
	fn     *Function
}

type cuRange struct {
	lo, hi uint64
	cu     *compUnit
}

// Open reads an ELF file and its debugging information (from the file itself or from a
// separate debug file found by build-id or .gnu_debuglink) and indexes it. Callers that may
// open one binary many times should go through a Cache.
func Open(path string, opts *Options) (*Binary, error) {
	if opts == nil {
		opts = &Options{}
	}
	dirs := opts.DebugDirs
	if dirs == nil {
		dirs = DefaultDebugDirs
	}
	osf, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("symbols: open %s: %w", path, err)
	}
	f, err := elf.NewFile(osf)
	if err != nil {
		osf.Close()
		return nil, fmt.Errorf("symbols: open %s: %w", path, err)
	}
	b, err := newBinary(path, osf, f, dirs, indexStore{dir: opts.IndexCacheDir})
	if err != nil {
		osf.Close()
		return nil, err
	}
	return b, nil
}

func newBinary(path string, osf *os.File, f *elf.File, dirs []string, store indexStore) (b *Binary, err error) {
	defer func() {
		// debug/dwarf and debug/elf are not hardened against malformed input; a panic from
		// them on a corrupt file becomes an error.
		if r := recover(); r != nil {
			b, err = nil, fmt.Errorf("symbols: open %s: malformed object: %v", path, r)
		}
	}()
	arch, err := ArchFor(f.Machine, f.ByteOrder)
	if err != nil {
		return nil, fmt.Errorf("symbols: open %s: %w", path, err)
	}
	if f.Class != elf.ELFCLASS64 {
		return nil, fmt.Errorf("symbols: open %s: only 64-bit ELF is supported", path)
	}
	b = &Binary{Path: path, Arch: arch, Type: f.Type, Entry: f.Entry, rawEntry: f.Entry, file: f, osfile: osf,
		typeCache: map[dwarf.Offset]*Type{}}
	b.BuildID = buildID(f)
	for _, p := range f.Progs {
		b.progs = append(b.progs, p.ProgHeader)
		switch p.Type {
		case elf.PT_LOAD:
			b.loads = append(b.loads, p.ProgHeader)
		case elf.PT_TLS:
			h := p.ProgHeader
			b.tlsSeg = &h
		}
	}
	b.opd = loadOPD(f)
	if b.opd != nil {
		if e, ok := b.opd.entry(f.Entry); ok {
			b.Entry = e
		}
	}

	dwf := f
	var dbg *elf.File
	if !hasDWARF(f) {
		if p := findDebugFile(path, f, b.BuildID, dirs); p != "" {
			df, err := elf.Open(p)
			if err == nil {
				if id := buildID(df); b.BuildID != nil && id != nil && string(id) != string(b.BuildID) {
					df.Close()
				} else {
					dbg, dwf, b.DebugPath = df, df, p
				}
			}
		}
	}
	if dbg != nil {
		defer dbg.Close()
	}
	// The ELF symbols and the call frame information are read beside the DWARF: neither
	// needs the other, and the DWARF takes longest.
	side := make(chan error, 1)
	go func() {
		defer func() {
			if r := recover(); r != nil {
				side <- fmt.Errorf("symbols: open %s: malformed object: %v", path, r)
			}
		}()
		b.syms = loadSymbols([]*elf.File{dbg, f}, b.opd, arch.Name == "ppc64le")
		b.stats.Symbols = len(b.syms.syms)
		if err := b.loadFrames(f, dbg); err != nil {
			side <- fmt.Errorf("symbols: open %s: %w", path, err)
			return
		}
		side <- nil
	}()
	var dwErr error
	if hasDWARF(dwf) {
		if err := b.loadDWARF(dwf, store); err != nil {
			dwErr = fmt.Errorf("symbols: open %s: DWARF: %w", path, err)
		}
	}
	if err := <-side; err != nil {
		return nil, err
	}
	if dwErr != nil {
		return nil, dwErr
	}
	return b, nil
}

// loadFrames parses .eh_frame of the object and .debug_frame of whichever file has it.
func (b *Binary) loadFrames(f, dbg *elf.File) error {
	t := cfi.NewTable()
	if s := f.Section(".eh_frame"); s != nil && s.Type != elf.SHT_NOBITS {
		data, err := s.Data()
		if err != nil {
			return fmt.Errorf("read .eh_frame: %w", err)
		}
		if err := t.Parse(data, cfi.Options{EH: true, Addr: s.Addr, Order: f.ByteOrder, PtrSize: 8}); err != nil {
			return fmt.Errorf(".eh_frame: %w", err)
		}
	}
	for _, ff := range []*elf.File{f, dbg} {
		if ff == nil {
			continue
		}
		data, err := sectionData(ff, ".debug_frame")
		if err != nil {
			return err
		}
		if data != nil {
			if err := t.Parse(data, cfi.Options{Order: ff.ByteOrder, PtrSize: 8}); err != nil {
				return fmt.Errorf(".debug_frame: %w", err)
			}
			break
		}
	}
	t.Sort()
	b.frames = t
	b.stats.FDEs = t.Len()
	return nil
}

// loadDWARF reads the DWARF sections and indexes compile units, functions, globals and types,
// or takes the index (and the decompressed sections) from the persistent cache when it holds
// this file's, and stores it there after building it.
func (b *Binary) loadDWARF(f *elf.File, store indexStore) error {
	id := b.BuildIDString()
	if id == "" {
		store.dir = "" // without a build-id nothing says that a cache entry is this file's
	}
	layout := dwarfLayout(f)
	if store.dir != "" {
		if snap := b.cachedIndex(store, id, layout); snap != nil {
			// The units decode while debug/dwarf reads the unit headers and abbreviations.
			decoded := make(chan error, 1)
			go func() { decoded <- snap.decodeScans() }()
			err := b.openDWARF(f, snap.sections)
			if derr := <-decoded; err == nil && derr == nil && b.restoreIndex(snap.scans) == nil {
				b.stats.IndexCached = true
				return nil
			}
			// A damaged entry: build the index from the file and replace it.
		}
	}
	if err := b.openDWARF(f, nil); err != nil {
		return err
	}
	scans, err := b.index()
	if err != nil {
		return err
	}
	if store.dir != "" {
		store.store(id, encodeIndex(&indexSnapshot{buildID: b.BuildID, layout: layout,
			sections: b.compressedSections(layout), scans: scans}))
	}
	return nil
}

// openDWARF reads the DWARF sections of f (those in cached first, decompressed already) into
// the standard library's reader.
func (b *Binary) openDWARF(f *elf.File, cached map[string][]byte) error {
	get := func(n string) []byte {
		if d, ok := cached[n]; ok {
			return d
		}
		d, _ := sectionData(f, n)
		return d
	}
	abbrev, info, str := get(".debug_abbrev"), get(".debug_info"), get(".debug_str")
	line, ranges, aranges := get(".debug_line"), get(".debug_ranges"), get(".debug_aranges")
	d, err := dwarf.New(abbrev, aranges, nil, info, line, nil, ranges, str)
	if err != nil {
		return err
	}
	for _, n := range []string{".debug_addr", ".debug_line_str", ".debug_str_offsets", ".debug_rnglists"} {
		if data := get(n); data != nil {
			if err := d.AddSection(n, data); err != nil {
				return fmt.Errorf("section %s: %w", n, err)
			}
		}
	}
	if types := get(".debug_types"); types != nil {
		if err := d.AddTypes("debug_types", types); err != nil {
			return fmt.Errorf("section .debug_types: %w", err)
		}
	}
	b.dw = d
	b.secs = dwarfSections{info: info, loc: get(".debug_loc"), loclists: get(".debug_loclists"),
		addr: get(".debug_addr"), rnglists: get(".debug_rnglists"), strOffsets: get(".debug_str_offsets"),
		all: map[string][]byte{}}
	for _, n := range dwarfSectionNames {
		if d := get(n); d != nil {
			b.secs.all[n] = d
		}
	}
	return nil
}

// Close releases the object file. Methods that need code bytes fail afterwards.
func (b *Binary) Close() error {
	if b.osfile == nil {
		return nil
	}
	err := b.osfile.Close()
	b.osfile = nil
	return err
}

// HasDWARF reports whether debugging information was found.
func (b *Binary) HasDWARF() bool { return b.dw != nil }

// DWARF returns the standard library's view of the debugging information, or nil.
func (b *Binary) DWARF() *dwarf.Data { return b.dw }

// Stats returns counts gathered while indexing.
func (b *Binary) Stats() LoadStats { return b.stats }

// Symbols returns the ELF symbol covering a link-time address, as gdb annotates pointers
// ("<g_nodes+72>").
func (b *Binary) Symbol(addr uint64) (Symbol, bool) { return b.syms.lookup(addr) }

// LookupSymbol returns the ELF symbols with an exact name.
func (b *Binary) LookupSymbol(name string) []Symbol { return b.syms.named(name) }

// TLSSegment returns the PT_TLS program header (the initial image of the object's
// thread-local storage), for the thread library that resolves TLS addresses.
func (b *Binary) TLSSegment() (elf.ProgHeader, bool) {
	if b.tlsSeg == nil {
		return elf.ProgHeader{}, false
	}
	return *b.tlsSeg, true
}

// ProgHeader returns the object's first program header of type t (PT_PHDR, PT_DYNAMIC, ...).
func (b *Binary) ProgHeader(t elf.ProgType) (elf.ProgHeader, bool) {
	for _, p := range b.progs {
		if p.Type == t {
			return p, true
		}
	}
	return elf.ProgHeader{}, false
}

// LoadSegments returns the PT_LOAD program headers.
func (b *Binary) LoadSegments() []elf.ProgHeader { return b.loads }

// ReadCode reads bytes of the file image at a link-time address (from PT_LOAD segments), for
// code that a process's memory may not provide (a core file without text).
func (b *Binary) ReadCode(p []byte, addr uint64) (int, error) {
	if b.osfile == nil {
		return 0, errors.New("symbols: binary closed")
	}
	// A separate debug file keeps the program headers but not the code.
	for _, s := range b.file.Sections {
		if s.Flags&elf.SHF_ALLOC != 0 && addr >= s.Addr && addr < s.Addr+s.Size && s.Type == elf.SHT_NOBITS &&
			s.Flags&elf.SHF_EXECINSTR != 0 {
			return 0, fmt.Errorf("symbols: read %s at %#x: no code in this file", b.Path, addr)
		}
	}
	for _, l := range b.loads {
		if addr >= l.Vaddr && addr < l.Vaddr+l.Filesz {
			off := addr - l.Vaddr
			n := uint64(len(p))
			if off+n > l.Filesz {
				n = l.Filesz - off
			}
			m, err := b.osfile.ReadAt(p[:n], int64(l.Off+off))
			if m > 0 && m == int(n) && n < uint64(len(p)) {
				return m, fmt.Errorf("symbols: read %s at %#x: past end of segment", b.Path, addr+n)
			}
			return m, err
		}
	}
	return 0, fmt.Errorf("symbols: read %s at %#x: not in a loaded segment", b.Path, addr)
}

// linkBase returns the lowest PT_LOAD virtual address rounded down to its alignment; the load
// bias of a mapping is its start minus this.
func (b *Binary) linkBase() uint64 {
	for _, l := range b.loads {
		a := l.Align
		if a == 0 {
			a = 1
		}
		return l.Vaddr &^ (a - 1)
	}
	return 0
}
