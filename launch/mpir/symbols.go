package mpir

import (
	"bytes"
	"debug/elf"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"sync"
	"syscall"
)

// Names of the MPIR symbols this package uses.
const (
	SymBreakpoint       = "MPIR_Breakpoint"
	SymBeingDebugged    = "MPIR_being_debugged"
	SymDebugState       = "MPIR_debug_state"
	SymProctable        = "MPIR_proctable"
	SymProctableSize    = "MPIR_proctable_size"
	SymDebugAbortString = "MPIR_debug_abort_string"
	SymTotalviewJobID   = "totalview_jobid"
	SymTotalviewStepID  = "totalview_stepid"
	// The tool daemon launch extension (Open MPI 4's orterun, BG/Q runjob) and BG/Q's rank
	// subset: char arrays in the starter.
	SymExecutablePath  = "MPIR_executable_path"
	SymServerArguments = "MPIR_server_arguments"
	SymSubsetAttach    = "MPIR_subset_attach"
)

// symbolNames are the symbols LookupFile reports.
var symbolNames = []string{SymBreakpoint, SymBeingDebugged, SymDebugState, SymProctable, SymProctableSize,
	SymDebugAbortString, SymTotalviewJobID, SymTotalviewStepID, SymExecutablePath, SymServerArguments, SymSubsetAttach}

// Source says where a file's MPIR symbols were found.
type Source string

// Sources, in the order LookupFile tries them.
const (
	SourceDynsym     Source = ".dynsym"
	SourceSymtab     Source = ".symtab"
	SourceDebugFile  Source = "debug file"
	SourceKnownBuild Source = "known build"
)

// FileSymbols are the MPIR symbols one ELF file defines, as link-time values (add the load
// bias for run-time addresses).
type FileSymbols struct {
	Path    string
	BuildID string            // hex GNU build ID, "" if the file has none
	Source  Source            // where the values came from
	Values  map[string]uint64 // symbol name → st_value, only the symbols present
	Sizes   map[string]uint64 // symbol name → st_size, where the table records one
}

// Has reports whether the file defines everything launch mode needs: the breakpoint function,
// the table pointer and its size, and the debug state.
func (s *FileSymbols) Has() bool {
	for _, n := range []string{SymBreakpoint, SymProctable, SymProctableSize, SymDebugState} {
		if _, ok := s.Values[n]; !ok {
			return false
		}
	}
	return true
}

// knownBuild holds MPIR offsets (relative to the load base) of a stripped launcher whose
// binary exports none of them.
type knownBuild struct {
	name   string
	values map[string]uint64
}

// knownBuilds maps GNU build IDs to MPIR offsets recovered by disassembly: Debian 12's
// mpiexec.hydra 4.0.2-3+b1 (not linked with -rdynamic, no .symtab). It defines no
// MPIR_being_debugged that matters: hydra calls MPIR_Breakpoint unconditionally.
var knownBuilds = map[string]knownBuild{
	"9209a3e4986dcad4f6e74bc9d56feeb8da5e6939": {name: "mpiexec.hydra 4.0.2 (Debian 12)", values: map[string]uint64{
		SymBreakpoint:    0x32770,
		SymDebugState:    0xcc670,
		SymProctableSize: 0xcc67c,
		SymProctable:     0xcc680,
	}},
}

// DebugRoot is where separate debug files are looked up by build ID
// (DebugRoot/.build-id/xx/yyyy.debug).
var DebugRoot = "/usr/lib/debug"

// ErrNoSymbols means a file defines none of the MPIR symbols by any source.
var ErrNoSymbols = errors.New("no MPIR symbols")

// LookupFile finds the MPIR symbols of one ELF file: .dynsym, then .symtab, then the debug file
// named by its build ID, then the table of known builds. The first source that defines
// MPIR_Breakpoint wins. A file without any gives ErrNoSymbols. What a file's tables hold is
// read once per version of the file (tablesOf).
func LookupFile(path string) (*FileSymbols, error) {
	t, err := tablesOf(path, false)
	if err != nil {
		return nil, fmt.Errorf("mpir: symbols of %s: %w", path, err)
	}
	id := t.buildID
	out := &FileSymbols{Path: path, BuildID: id}
	if t.vals != nil {
		out.Source, out.Values, out.Sizes = t.src, maps.Clone(t.vals), maps.Clone(t.sizes)
		return out, nil
	}
	if id != "" && len(id) > 2 {
		dbg := filepath.Join(DebugRoot, ".build-id", id[:2], id[2:]+".debug")
		if dt, err := tablesOf(dbg, true); err == nil && dt.vals != nil {
			out.Source, out.Values, out.Sizes = SourceDebugFile, maps.Clone(dt.vals), maps.Clone(dt.sizes)
			return out, nil
		}
	}
	if kb, ok := knownBuilds[id]; ok {
		out.Source = SourceKnownBuild
		out.Values = make(map[string]uint64, len(kb.values))
		for k, v := range kb.values {
			out.Values[k] = v
		}
		return out, nil
	}
	return nil, fmt.Errorf("mpir: symbols of %s: %w", path, ErrNoSymbols)
}

// fileTables is what one ELF file's own symbol tables say: its build ID and, when one of
// them defines MPIR_Breakpoint, the MPIR symbols of the first that does.
type fileTables struct {
	buildID string
	src     Source            // .dynsym or .symtab (.symtab alone for a debug file)
	vals    map[string]uint64 // nil: neither table defines MPIR_Breakpoint
	sizes   map[string]uint64 // their sizes, where the table records one
}

// fileVersion identifies one version of a file: its path, and its inode, size and
// modification time, which a rewrite or a replacement changes.
type fileVersion struct {
	path       string
	debugFile  bool
	dev, ino   uint64
	size, nsec int64
}

// tables holds fileTables by fileVersion: a launcher and its libraries are read once per
// process, not at every launch (the launcher's libraries include libc, whose debug file's
// symbol table is large), and again when a file changes.
var tables sync.Map

// tablesOf reads the symbol tables of path (a debug file: its .symtab only), or returns what
// they held when this version of the file was read before. Failures are not kept.
func tablesOf(path string, debugFile bool) (*fileTables, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	key := fileVersion{path: path, debugFile: debugFile, size: st.Size(), nsec: st.ModTime().UnixNano()}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		key.dev, key.ino = uint64(sys.Dev), sys.Ino
	}
	if t, ok := tables.Load(key); ok {
		return t.(*fileTables), nil
	}
	f, err := elf.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	t := &fileTables{buildID: buildID(f)}
	try := func(src Source, syms []elf.Symbol) bool {
		vals, sizes := pick(syms)
		if _, ok := vals[SymBreakpoint]; !ok {
			return false
		}
		t.src, t.vals, t.sizes = src, vals, sizes
		return true
	}
	if debugFile {
		if syms, err := f.Symbols(); err == nil {
			try(SourceSymtab, syms)
		}
	} else if syms, err := f.DynamicSymbols(); err != nil || !try(SourceDynsym, syms) {
		if syms, err := f.Symbols(); err == nil {
			try(SourceSymtab, syms)
		}
	}
	tables.Store(key, t)
	return t, nil
}

// pick keeps the defined MPIR symbols of a symbol table: their values and sizes.
func pick(syms []elf.Symbol) (vals, sizes map[string]uint64) {
	want := make(map[string]bool, len(symbolNames))
	for _, n := range symbolNames {
		want[n] = true
	}
	vals, sizes = make(map[string]uint64), make(map[string]uint64)
	for _, s := range syms {
		if want[s.Name] && s.Section != elf.SHN_UNDEF {
			vals[s.Name] = s.Value
			if s.Size > 0 {
				sizes[s.Name] = s.Size
			}
		}
	}
	return vals, sizes
}

// buildID returns the hex GNU build ID of an ELF file, or "".
func buildID(f *elf.File) string {
	for _, p := range f.Progs {
		if p.Type != elf.PT_NOTE {
			continue
		}
		b, err := io.ReadAll(io.LimitReader(p.Open(), 1<<20)) // Filesz is the file's word, not a bound
		if err != nil {
			continue
		}
		if id := noteBuildID(b, f.ByteOrder, p.Align); id != "" {
			return id
		}
	}
	return ""
}

// noteBuildID scans a note segment for NT_GNU_BUILD_ID.
func noteBuildID(b []byte, order interface{ Uint32([]byte) uint32 }, align uint64) string {
	al := 4
	if align == 8 {
		al = 8
	}
	round := func(n int) int { return (n + al - 1) &^ (al - 1) }
	for len(b) >= 12 {
		nsz, dsz, typ := int(order.Uint32(b)), int(order.Uint32(b[4:])), order.Uint32(b[8:])
		if nsz < 0 || dsz < 0 || nsz > len(b) || dsz > len(b) {
			return ""
		}
		off := 12
		nameEnd := off + nsz
		descOff := off + round(nsz)
		descEnd := descOff + dsz
		if nameEnd > len(b) || descEnd > len(b) {
			return ""
		}
		if typ == 3 && bytes.Equal(bytes.TrimRight(b[off:nameEnd], "\x00"), []byte("GNU")) {
			return hex.EncodeToString(b[descOff:descEnd])
		}
		next := descOff + round(dsz)
		if next > len(b) || next <= 0 {
			return ""
		}
		b = b[next:]
	}
	return ""
}

// Symbols are the run-time addresses of a launcher's MPIR symbols (0: absent).
type Symbols struct {
	File             *FileSymbols // the file that defines them
	Bias             uint64       // its load bias
	Breakpoint       uint64
	BeingDebugged    uint64
	DebugState       uint64
	Proctable        uint64
	ProctableSize    uint64
	DebugAbortString uint64
	TotalviewJobID   uint64
	TotalviewStepID  uint64
	// The tool daemon launch extension's arrays and BG/Q's subset, with their sizes in bytes
	// (0 when the file does not say).
	ExecutablePath, ServerArguments, SubsetAttach             uint64
	ExecutablePathSize, ServerArgumentsSize, SubsetAttachSize int
}

// Resolve looks for the MPIR symbols in every object (in load order, executable first) and
// returns the run-time addresses from the first file that defines them all (see
// FileSymbols.Has). It reads the files from the local file system.
func Resolve(objs []Object) (*Symbols, error) {
	var tried []string
	for _, o := range objs {
		if o.Path == "" {
			continue
		}
		if _, err := os.Stat(o.Path); err != nil {
			tried = append(tried, fmt.Sprintf("%s: %v", o.Path, err))
			continue
		}
		fs, err := LookupFile(o.Path)
		if err != nil {
			continue
		}
		if !fs.Has() {
			tried = append(tried, fmt.Sprintf("%s: only %d of the MPIR symbols", o.Path, len(fs.Values)))
			continue
		}
		at := func(name string) uint64 {
			if v, ok := fs.Values[name]; ok {
				return o.Bias + v
			}
			return 0
		}
		size := func(name string) int { return int(min(fs.Sizes[name], 1<<20)) }
		return &Symbols{File: fs, Bias: o.Bias, Breakpoint: at(SymBreakpoint), BeingDebugged: at(SymBeingDebugged),
			DebugState: at(SymDebugState), Proctable: at(SymProctable), ProctableSize: at(SymProctableSize),
			DebugAbortString: at(SymDebugAbortString), TotalviewJobID: at(SymTotalviewJobID),
			TotalviewStepID: at(SymTotalviewStepID), ExecutablePath: at(SymExecutablePath),
			ServerArguments: at(SymServerArguments), SubsetAttach: at(SymSubsetAttach),
			ExecutablePathSize: size(SymExecutablePath), ServerArgumentsSize: size(SymServerArguments),
			SubsetAttachSize: size(SymSubsetAttach)}, nil
	}
	msg := fmt.Sprintf("mpir: %d loaded objects searched", len(objs))
	if len(tried) > 0 {
		msg += " (" + fmt.Sprint(tried) + ")"
	}
	return nil, fmt.Errorf("%s: %w", msg, ErrNoSymbols)
}
