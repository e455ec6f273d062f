package threaddb

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
)

// ErrNoThreadLibrary means no module holds glibc's thread debugging descriptors: the program is
// not linked with glibc's thread library, its libc is not loaded yet, or a static executable was
// stripped of its symbol table.
var ErrNoThreadLibrary = errors.New("threaddb: no thread library descriptors (_thread_db_*) found")

// Module is one object loaded into the target process, as the debugger's agent reports it from the
// dynamic linker's link map (r_debug) or from /proc/PID/maps.
type Module struct {
	Path string // the object's ELF file, as this debugger can open it
	Bias uint64 // load bias: run-time address minus link-time address (0 for a non-PIE executable)
}

// Library is the thread library found in one module: the descriptors glibc exports for debuggers,
// decoded from the ELF file (they are constants, so no target memory is read for them), and the
// target description that comes with the file.
type Library struct {
	Module  Module           // the module that holds the descriptors (libc.so.6, or a static executable)
	Machine elf.Machine      // EM_X86_64 or EM_PPC64
	Order   binary.ByteOrder // the target's byte order, from EI_DATA
	PtrSize int              // bytes in a target pointer
	Version string           // __nptl_version, e.g. "2.36"

	// Static is true when the thread list heads are plain variables (_dl_stack_user and
	// _dl_stack_used, a statically linked program) rather than fields of ld.so's _rtld_global.
	Static bool

	descs map[string]Desc   // keyed by the name after "_thread_db_"
	sizes map[string]uint32 // _thread_db_sizeof_<T>, keyed by T
	// constThreadArea is x86_64's "ps_get_thread_area index" (25 = FS); hasConstThreadArea says
	// whether the library uses that method rather than a register descriptor.
	constThreadArea    uint32
	hasConstThreadArea bool

	syms map[string]uint64 // link-time values of the variables this package reads
}

// variableNames are the data symbols the thread walk needs besides the descriptors. Later names
// serve older glibc layouts and static executables.
var variableNames = []string{
	"__nptl_version",
	"__nptl_rtld_global",
	"_rtld_global",
	"__nptl_nthreads",
	"__pthread_keys",
	"__nptl_initial_report_events",
	"_dl_stack_user",
	"_dl_stack_used",
	"_dl_tls_dtv_slotinfo_list",
	"__stack_user",
	"stack_used",
}

// Desc returns the descriptor _thread_db_<name>.
func (l *Library) Desc(name string) (Desc, bool) {
	d, ok := l.descs[name]
	return d, ok
}

// Sizeof returns _thread_db_sizeof_<typ>, the size in bytes of a glibc structure.
func (l *Library) Sizeof(typ string) (uint32, bool) {
	s, ok := l.sizes[typ]
	return s, ok
}

// DescNames lists the descriptor names found (without the "_thread_db_" prefix), for diagnostics.
func (l *Library) DescNames() []string {
	names := make([]string, 0, len(l.descs)+len(l.sizes))
	for n := range l.descs {
		names = append(names, n)
	}
	for n := range l.sizes {
		names = append(names, "sizeof_"+n)
	}
	if l.hasConstThreadArea {
		names = append(names, "const_thread_area")
	}
	return names
}

// ConstThreadArea returns the ps_get_thread_area index glibc names in _thread_db_const_thread_area
// (x86_64: 25, the FS segment), if the library uses that method to find a thread's descriptor.
func (l *Library) ConstThreadArea() (uint32, bool) {
	return l.constThreadArea, l.hasConstThreadArea
}

// symbolFile is the part of an ELF file this package needs: its header facts and its defined
// symbols by name, from .dynsym and .symtab together.
type symbolFile struct {
	f    *elf.File
	syms map[string]elf.Symbol
}

// openSymbols parses an ELF file and indexes its defined symbols. debug/elf is defensive about
// malformed input, but a panic on a hostile file must still become an error.
func openSymbols(r io.ReaderAt, name string) (sf *symbolFile, err error) {
	defer func() {
		if p := recover(); p != nil {
			sf, err = nil, fmt.Errorf("threaddb: read %s: malformed ELF file (%v)", name, p)
		}
	}()
	if sz, ok := r.(sizer); ok {
		if err := checkSections(r, sz.Size()); err != nil {
			return nil, fmt.Errorf("threaddb: read %s: %w", name, err)
		}
	}
	f, err := elf.NewFile(r)
	if err != nil {
		return nil, fmt.Errorf("threaddb: read %s: %w", name, err)
	}
	sf = &symbolFile{f: f, syms: make(map[string]elf.Symbol)}
	for _, load := range []func() ([]elf.Symbol, error){f.DynamicSymbols, f.Symbols} {
		syms, err := load()
		if err != nil && !errors.Is(err, elf.ErrNoSymbols) {
			return nil, fmt.Errorf("threaddb: read %s: symbols: %w", name, err)
		}
		for _, s := range syms {
			if s.Section == elf.SHN_UNDEF || s.Name == "" {
				continue
			}
			if _, seen := sf.syms[s.Name]; !seen {
				sf.syms[s.Name] = s
			}
		}
	}
	return sf, nil
}

// hasThreadDB reports whether the file defines glibc's thread debugging descriptors.
func (sf *symbolFile) hasThreadDB() bool {
	_, ok := sf.syms[DescPrefix+"sizeof_pthread"]
	return ok
}

// symbolBytes reads n bytes of a symbol's initial contents from the file.
func (sf *symbolFile) symbolBytes(s elf.Symbol, n int) ([]byte, error) {
	if s.Section >= elf.SHN_LORESERVE || int(s.Section) >= len(sf.f.Sections) {
		return nil, fmt.Errorf("symbol %s: section index %d holds no data", s.Name, s.Section)
	}
	sec := sf.f.Sections[s.Section]
	if sec.Type == elf.SHT_NOBITS {
		return nil, fmt.Errorf("symbol %s: section %s has no file contents", s.Name, sec.Name)
	}
	if s.Value < sec.Addr || s.Value-sec.Addr > sec.Size || uint64(n) > sec.Size-(s.Value-sec.Addr) {
		return nil, fmt.Errorf("symbol %s at %#x: %d bytes do not fit section %s [%#x, %#x)",
			s.Name, s.Value, n, sec.Name, sec.Addr, sec.Addr+sec.Size)
	}
	// Open rather than ReadAt: it also serves compressed sections, whose ReaderAt is nil.
	r := sec.Open()
	if _, err := r.Seek(int64(s.Value-sec.Addr), io.SeekStart); err != nil {
		return nil, fmt.Errorf("symbol %s: seek in section %s: %w", s.Name, sec.Name, err)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, fmt.Errorf("symbol %s: read section %s: %w", s.Name, sec.Name, err)
	}
	return b, nil
}

// ReadLibrary decodes the thread library descriptors of one module's ELF file. It returns
// ErrNoThreadLibrary if the file has none. If r has a Size method (bytes.Reader,
// io.SectionReader), damaged section headers are rejected before any large allocation.
func ReadLibrary(r io.ReaderAt, m Module) (lib *Library, err error) {
	defer func() {
		if p := recover(); p != nil {
			lib, err = nil, fmt.Errorf("threaddb: read %s: malformed ELF file (%v)", m.Path, p)
		}
	}()
	sf, err := openSymbols(r, m.Path)
	if err != nil {
		return nil, err
	}
	if !sf.hasThreadDB() {
		return nil, fmt.Errorf("threaddb: %s: %w", m.Path, ErrNoThreadLibrary)
	}
	return sf.library(m)
}

// library decodes the descriptors of a file that has them (hasThreadDB).
func (sf *symbolFile) library(m Module) (*Library, error) {
	f := sf.f
	l := &Library{
		Module:  m,
		Machine: f.Machine,
		Order:   f.ByteOrder,
		descs:   make(map[string]Desc),
		sizes:   make(map[string]uint32),
		syms:    make(map[string]uint64),
	}
	fail := func(format string, args ...any) error {
		return fmt.Errorf("threaddb: read thread library %s: %s", m.Path, fmt.Sprintf(format, args...))
	}
	switch f.Class {
	case elf.ELFCLASS64:
		l.PtrSize = 8
	default:
		return nil, fail("ELF class %v is not supported (64-bit targets only)", f.Class)
	}
	switch f.Machine {
	case elf.EM_X86_64, elf.EM_PPC64:
	default:
		return nil, fail("machine %v is not supported (EM_X86_64, EM_PPC64)", f.Machine)
	}
	if f.ByteOrder == nil {
		return nil, fail("no byte order in the ELF header")
	}

	for name, s := range sf.syms {
		if !strings.HasPrefix(name, DescPrefix) {
			continue
		}
		short := strings.TrimPrefix(name, DescPrefix)
		switch {
		case strings.HasPrefix(short, "sizeof_") || short == "const_thread_area":
			b, err := sf.symbolBytes(s, 4)
			if err != nil {
				return nil, fail("%v", err)
			}
			v := f.ByteOrder.Uint32(b)
			if short == "const_thread_area" {
				l.constThreadArea, l.hasConstThreadArea = v, true
				continue
			}
			if v&0xff000000 != 0 {
				return nil, fail("%s = %#x looks byte-swapped", name, v)
			}
			l.sizes[strings.TrimPrefix(short, "sizeof_")] = v
		default:
			b, err := sf.symbolBytes(s, DescSize)
			if err != nil {
				return nil, fail("%v", err)
			}
			d, err := DecodeDesc(b, f.ByteOrder)
			if err != nil {
				return nil, fail("%s: %v", name, err)
			}
			l.descs[short] = d
		}
	}

	for _, n := range variableNames {
		if s, ok := sf.syms[n]; ok {
			l.syms[n] = s.Value
		}
	}
	if s, ok := sf.syms["__nptl_version"]; ok {
		n := int(s.Size)
		if n <= 0 || n > 32 {
			n = 32
		}
		b, err := sf.symbolBytes(s, n)
		if err != nil {
			// A version string at the very end of a section may be shorter than 32 bytes.
			b, err = sf.symbolBytes(s, int(s.Size))
		}
		if err != nil {
			return nil, fail("__nptl_version: %v", err)
		}
		if i := bytes.IndexByte(b, 0); i >= 0 {
			b = b[:i]
		}
		l.Version = string(b)
	} else {
		// libthread_db refuses a library without this symbol (TD_NOLIBTHREAD).
		return nil, fail("no __nptl_version symbol")
	}

	return l, l.validate()
}

// validate checks that the descriptors the thread walk cannot do without are present and sane,
// and decides between the dynamic and static list-head layouts.
func (l *Library) validate() error {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("threaddb: thread library %s (glibc %q): %s", l.Module.Path, l.Version, fmt.Sprintf(format, args...))
	}
	size, ok := l.sizes["pthread"]
	if !ok || size == 0 {
		return fail("no usable _thread_db_sizeof_pthread")
	}
	// A struct pthread is a few KiB; anything far larger is not a descriptor table.
	if size > 1<<20 {
		return fail("sizeof(struct pthread) = %d is implausible", size)
	}
	for _, name := range []string{"pthread_list", "pthread_tid", "list_t_next"} {
		if _, ok := l.descs[name]; !ok {
			return fail("descriptor %s%s missing", DescPrefix, name)
		}
	}
	if err := l.fieldWithin("pthread_tid", 32, size); err != nil {
		return fail("%v", err)
	}
	if err := l.fieldWithin("pthread_list", 0, size); err != nil {
		return fail("%v", err)
	}
	for _, name := range []string{"list_t_next", "list_t_prev"} {
		d, ok := l.descs[name]
		if !ok {
			continue
		}
		if d.Bits != uint32(8*l.PtrSize) {
			return fail("%s%s is %d bits, want %d", DescPrefix, name, d.Bits, 8*l.PtrSize)
		}
		// list_t is two pointers; a far offset means the descriptor is damaged.
		if d.Offset > 64 {
			return fail("%s%s offset %d is implausible", DescPrefix, name, d.Offset)
		}
	}
	for _, name := range []string{"pthread_start_routine", "pthread_cancelhandling", "pthread_schedpolicy",
		"pthread_schedparam_sched_priority", "pthread_report_events", "pthread_specific", "pthread_dtvp"} {
		if _, ok := l.descs[name]; !ok {
			continue
		}
		want := uint32(0)
		if name != "pthread_specific" {
			want = l.descs[name].Bits
			if !l.descs[name].Scalar() {
				return fail("%s%s is %d bits, not a loadable value", DescPrefix, name, want)
			}
		}
		if name == "pthread_dtvp" && l.Machine == elf.EM_PPC64 {
			// On powerpc the DTV pointer lives in tcbhead_t, after struct pthread.
			continue
		}
		if err := l.fieldWithin(name, want, size); err != nil {
			return fail("%v", err)
		}
	}
	_, dynUser := l.descs["rtld_global__dl_stack_user"]
	_, dynUsed := l.descs["rtld_global__dl_stack_used"]
	// Without the _rtld_global field descriptors the heads are variables: _dl_stack_user and
	// _dl_stack_used in static programs, or __stack_user and stack_used in older glibc.
	l.Static = !(dynUser && dynUsed)
	switch l.Machine {
	case elf.EM_X86_64:
		if !l.hasConstThreadArea {
			return fail("no _thread_db_const_thread_area: cannot find a thread's descriptor from FS")
		}
	case elf.EM_PPC64:
		d, ok := l.descs["register64"]
		if !ok {
			return fail("no _thread_db_register64: cannot find a thread's descriptor from r13")
		}
		if d.Bits != 64 {
			return fail("_thread_db_register64 is %d bits, want 64", d.Bits)
		}
	}
	return nil
}

// selfContained reports whether the library's own module defines every variable the thread walk
// needs, so that no other module's symbols have to be read.
func (l *Library) selfContained() bool {
	has := func(n string) bool { _, ok := l.syms[n]; return ok }
	if l.Static {
		return has("_dl_stack_user") && has("_dl_stack_used")
	}
	return has("__nptl_rtld_global")
}

// fieldWithin checks that a struct pthread field descriptor fits inside the structure and, if
// bits is not 0, has that width.
func (l *Library) fieldWithin(name string, bits uint32, size uint32) error {
	d := l.descs[name]
	if bits != 0 && d.Bits != bits {
		return fmt.Errorf("%s%s is %d bits, want %d", DescPrefix, name, d.Bits, bits)
	}
	count := uint64(d.Count)
	if count == 0 {
		count = 1
	}
	if d.Bits%8 != 0 || uint64(d.Offset)+count*d.Bytes() > uint64(size) {
		return fmt.Errorf("%s%s %v does not fit in struct pthread (%d bytes)", DescPrefix, name, d, size)
	}
	return nil
}
