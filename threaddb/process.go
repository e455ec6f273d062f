package threaddb

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"syscall"
)

// Memory reads the target process's memory: CDTI GetMemory over the network, /proc/PID/mem or
// ptrace against a live Linux process, PT_LOAD segments of a core file. ReadAt reads len(p)
// bytes at addr; a short read must return an error, as io.ReaderAt does. The method set is the
// one package symbols reads through, so one implementation serves both.
type Memory interface {
	ReadAt(p []byte, addr uint64) (int, error)
}

// Threads describes the target's kernel threads.
type Threads interface {
	// LWPs lists the process's kernel thread ids (CNK TIDs on Blue Gene/Q).
	LWPs() ([]int, error)
	// ThreadPointer returns an LWP's raw thread-pointer register: the FS base on x86_64, r13 on
	// ppc64. Machine-specific biases are applied by this package, not by the implementation.
	ThreadPointer(lwp int) (uint64, error)
}

// Status says how much a thread list could learn from the thread library.
type Status int

const (
	// StatusReady means the threads come from the thread library's lists, with their pthread_t.
	StatusReady Status = iota
	// StatusNotInitialized means the thread library is loaded but has not set up its thread list
	// yet (the program is still starting): threads are reported by LWP only. libthread_db does
	// the same, because the thread register may still hold garbage left by exec.
	StatusNotInitialized
	// StatusNoLibrary means no module holds thread library descriptors: threads are reported by
	// LWP only.
	StatusNoLibrary
)

// String describes the status for messages.
func (s Status) String() string {
	switch s {
	case StatusReady:
		return "ready"
	case StatusNotInitialized:
		return "thread library not initialised"
	case StatusNoLibrary:
		return "no thread library"
	}
	return fmt.Sprintf("Status(%d)", int(s))
}

// ErrNotInitialized means the thread library has not initialised its thread list yet.
var ErrNotInitialized = errors.New("threaddb: thread library not initialised yet")

// ThreadList is the result of one walk of the target's threads.
type ThreadList struct {
	Status  Status
	Threads []Thread
}

// Process maps the threads of one target process. Only constants are cached (the descriptors,
// symbol addresses, the address of ld.so's _rtld_global once the loader has set it, and
// whether the thread library has initialised its list, which it never undoes): every call
// reads the thread lists afresh, so threads created or exited between stops are seen. A
// Process is safe for concurrent use if its Memory and Threads are.
//
// When modules are loaded or unloaded (for example once libc.so.6 has been mapped), call Open
// again with the new module list.
type Process struct {
	pid  int
	mem  Memory
	thr  Threads
	lib  *Library
	vars map[string]uint64 // run-time addresses of variables

	span fieldSpan

	mu     sync.Mutex
	ready  bool              // the thread list was seen initialised: it stays so until exec
	rtld   uint64            // run-time address of _rtld_global, cached once non-zero
	modIDs map[Module]uint64 // TLS module ids found by ModuleID
}

// Open finds the thread library among a process's loaded modules and prepares to walk its
// threads. Module files are read on the debugger's side; target memory is not read until a query.
// A process without a thread library is not an error: its queries report LWPs only
// (StatusNoLibrary). A module file that cannot be read is skipped, unless no thread library was
// found, in which case the failures are returned since the library may have been among them.
func Open(pid int, modules []Module, mem Memory, thr Threads) (*Process, error) {
	if mem == nil {
		return nil, fmt.Errorf("threaddb: open process %d: no Memory", pid)
	}
	p := &Process{pid: pid, mem: mem, thr: thr, vars: make(map[string]uint64), modIDs: make(map[Module]uint64)}
	type found struct {
		m    Module
		syms map[string]uint64
	}
	var others []found
	var failures []string
	for _, m := range modules {
		lib, syms, err := readModule(m, p.lib == nil)
		if err != nil {
			if isLibraryError(err) {
				return nil, fmt.Errorf("threaddb: open process %d: %w", pid, err)
			}
			failures = append(failures, err.Error())
			continue
		}
		if lib != nil && p.lib == nil {
			p.lib = lib
			if lib.selfContained() {
				break // later modules cannot add anything the walk needs
			}
			continue
		}
		others = append(others, found{m, syms})
	}
	if p.lib == nil {
		if len(failures) > 0 {
			return nil, fmt.Errorf("threaddb: open process %d: no thread library found; unreadable modules: %s",
				pid, strings.Join(failures, "; "))
		}
		return p, nil
	}
	// Variables resolve in the thread library first, then in the other modules in load order.
	for n, v := range p.lib.syms {
		p.vars[n] = v + p.lib.Module.Bias
	}
	for _, o := range others {
		for n, v := range o.syms {
			if _, ok := p.vars[n]; !ok {
				p.vars[n] = v + o.m.Bias
			}
		}
	}
	span, err := newFieldSpan(p.lib)
	if err != nil {
		return nil, fmt.Errorf("threaddb: open process %d: %w", pid, err)
	}
	p.span = span
	return p, nil
}

// libraryError marks a failure to decode a module that does hold thread library descriptors:
// such a module is not skipped quietly.
type libraryError struct{ err error }

func (e *libraryError) Error() string { return e.err.Error() }
func (e *libraryError) Unwrap() error { return e.err }

func isLibraryError(err error) bool {
	var le *libraryError
	return errors.As(err, &le)
}

// moduleKey identifies what readModule read: the file (device, inode, size and modification
// time, so that a rebuilt file is read again) and whether the thread library was wanted.
type moduleKey struct {
	dev, ino      uint64
	size, modTime int64
	wantLib       bool
}

// moduleRead is what readModule found in a file, for any load bias.
type moduleRead struct {
	lib  *Library // Module unset; never changed once decoded
	syms map[string]uint64
}

// moduleCache holds readModule's results: every rank of a job loads the same libc, and parsing
// its symbol tables for each one cost most of the first thread listing of a large job.
var moduleCache = struct {
	sync.Mutex
	m map[moduleKey]moduleRead
}{m: map[moduleKey]moduleRead{}}

// maxCachedModules bounds the cache (a long-lived server sees many builds).
const maxCachedModules = 256

// readModule reads one module's symbols and, if wantLib, its thread library descriptors; a
// file already read (same identity) is not parsed again.
func readModule(m Module, wantLib bool) (lib *Library, syms map[string]uint64, err error) {
	var key moduleKey
	if st, serr := os.Stat(m.Path); serr == nil {
		if sys, ok := st.Sys().(*syscall.Stat_t); ok {
			key = moduleKey{dev: uint64(sys.Dev), ino: sys.Ino, size: st.Size(), modTime: st.ModTime().UnixNano(), wantLib: wantLib}
		}
	}
	if key.ino != 0 {
		moduleCache.Lock()
		r, ok := moduleCache.m[key]
		moduleCache.Unlock()
		if ok {
			return r.withModule(m)
		}
	}
	lib, syms, err = parseModule(m, wantLib)
	if err == nil && key.ino != 0 {
		r := moduleRead{lib: lib, syms: syms}
		if lib != nil {
			l := *lib
			l.Module = Module{}
			r.lib = &l
		}
		moduleCache.Lock()
		if len(moduleCache.m) >= maxCachedModules {
			clear(moduleCache.m)
		}
		moduleCache.m[key] = r
		moduleCache.Unlock()
	}
	return lib, syms, err
}

// withModule gives a cached result the module (its load bias) it is read for now.
func (r moduleRead) withModule(m Module) (*Library, map[string]uint64, error) {
	if r.lib == nil {
		return nil, r.syms, nil
	}
	l := *r.lib
	l.Module = m
	return &l, nil, nil
}

// parseModule reads one module's ELF file.
func parseModule(m Module, wantLib bool) (lib *Library, syms map[string]uint64, err error) {
	defer func() {
		if p := recover(); p != nil {
			lib, syms, err = nil, nil, fmt.Errorf("threaddb: read %s: malformed ELF file (%v)", m.Path, p)
		}
	}()
	f, err := os.Open(m.Path)
	if err != nil {
		return nil, nil, fmt.Errorf("threaddb: read module: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, nil, fmt.Errorf("threaddb: read module: %w", err)
	}
	sf, err := openSymbols(io.NewSectionReader(f, 0, st.Size()), m.Path)
	if err != nil {
		return nil, nil, err
	}
	if wantLib && sf.hasThreadDB() {
		lib, err := sf.library(m)
		if err != nil {
			return nil, nil, &libraryError{err}
		}
		return lib, nil, nil
	}
	syms = make(map[string]uint64)
	for _, n := range variableNames {
		if s, ok := sf.syms[n]; ok {
			syms[n] = s.Value
		}
	}
	return nil, syms, nil
}

// Library returns the thread library in use, or nil if none was found.
func (p *Process) Library() *Library { return p.lib }

// Pid returns the process id given to Open.
func (p *Process) Pid() int { return p.pid }

// Status reports whether the thread library is present and initialised, reading one or two
// words of target memory.
func (p *Process) Status() (Status, error) {
	if p.lib == nil {
		return StatusNoLibrary, nil
	}
	p.mu.Lock()
	ready := p.ready
	p.mu.Unlock()
	if ready {
		return StatusReady, nil
	}
	h, err := p.heads()
	if errors.Is(err, ErrNotInitialized) {
		return StatusNotInitialized, nil
	}
	if err != nil {
		return 0, err
	}
	if h.userNext == 0 {
		return StatusNotInitialized, nil
	}
	p.markReady()
	return StatusReady, nil
}

// markReady remembers that the thread library has initialised its thread list.
func (p *Process) markReady() {
	p.mu.Lock()
	p.ready = true
	p.mu.Unlock()
}

// read fills b from target memory, naming what was read on error.
func (p *Process) read(addr uint64, b []byte, what string) error {
	n, err := p.mem.ReadAt(b, addr)
	if err == nil && n < len(b) {
		err = io.ErrUnexpectedEOF
	}
	if err != nil {
		return fmt.Errorf("threaddb: read %s at %#x (%d bytes): %w", what, addr, len(b), err)
	}
	return nil
}

// readWord reads one pointer-sized word.
func (p *Process) readWord(addr uint64, what string) (uint64, error) {
	var b [8]byte
	w := b[:p.lib.PtrSize]
	if err := p.read(addr, w, what); err != nil {
		return 0, err
	}
	return loadScalar(w, uint32(8*p.lib.PtrSize), p.lib.Order)
}

// fetch reads element idx of the field d of the object at base (glibc's DB_GET_FIELD).
func (p *Process) fetch(name string, base, idx uint64, what string) (uint64, error) {
	d, ok := p.lib.descs[name]
	if !ok {
		return 0, fmt.Errorf("threaddb: read %s: descriptor %s%s missing in %s", what, DescPrefix, name, p.lib.Module.Path)
	}
	if !d.Scalar() {
		return 0, fmt.Errorf("threaddb: read %s: %s%s is %d bits, not a loadable value", what, DescPrefix, name, d.Bits)
	}
	addr, err := d.ElemAddr(base, idx)
	if err != nil {
		return 0, fmt.Errorf("threaddb: read %s: %s%s: %w", what, DescPrefix, name, err)
	}
	var b [8]byte
	v := b[:d.Bytes()]
	if err := p.read(addr, v, what); err != nil {
		return 0, err
	}
	return loadScalar(v, d.Bits, p.lib.Order)
}

// local decodes element idx of field name of the object at objAddr from a copy of target memory
// that was read from bufAddr (glibc's DB_GET_FIELD_LOCAL).
func (p *Process) local(name string, buf []byte, bufAddr, objAddr, idx uint64) (uint64, error) {
	d, ok := p.lib.descs[name]
	if !ok {
		return 0, fmt.Errorf("threaddb: descriptor %s%s missing in %s", DescPrefix, name, p.lib.Module.Path)
	}
	if !d.Scalar() {
		return 0, fmt.Errorf("threaddb: %s%s is %d bits, not a loadable value", DescPrefix, name, d.Bits)
	}
	addr, err := d.ElemAddr(objAddr, idx)
	if err != nil {
		return 0, err
	}
	if addr < bufAddr || addr-bufAddr > uint64(len(buf)) || d.Bytes() > uint64(len(buf))-(addr-bufAddr) {
		return 0, fmt.Errorf("threaddb: field %s%s at %#x lies outside the %d bytes read at %#x",
			DescPrefix, name, addr, len(buf), bufAddr)
	}
	return loadScalar(buf[addr-bufAddr:], d.Bits, p.lib.Order)
}

// rtldGlobal returns the run-time address of ld.so's _rtld_global, or ErrNotInitialized if the
// pointer libc keeps to it has not been relocated yet.
func (p *Process) rtldGlobal() (uint64, error) {
	p.mu.Lock()
	cached := p.rtld
	p.mu.Unlock()
	if cached != 0 {
		return cached, nil
	}
	var addr uint64
	if v, ok := p.vars["__nptl_rtld_global"]; ok {
		a, err := p.readWord(v, "__nptl_rtld_global")
		if err != nil {
			return 0, err
		}
		if a == 0 {
			return 0, fmt.Errorf("%w: __nptl_rtld_global is still 0", ErrNotInitialized)
		}
		addr = a
	} else if v, ok := p.vars["_rtld_global"]; ok {
		addr = v
	} else {
		return 0, fmt.Errorf("threaddb: neither __nptl_rtld_global nor _rtld_global is defined by the loaded modules")
	}
	p.mu.Lock()
	p.rtld = addr
	p.mu.Unlock()
	return addr, nil
}

// listHeads holds the addresses of the two thread list heads and their first links.
type listHeads struct {
	user, used         uint64 // addresses of the list_t heads
	userNext, usedNext uint64 // their next pointers
}

// heads locates the thread list heads (_dl_stack_user and _dl_stack_used) and reads their next
// pointers, in one read when they are adjacent.
func (p *Process) heads() (listHeads, error) {
	var h listHeads
	if p.lib.Static {
		var ok bool
		if h.user, ok = p.varAddr("_dl_stack_user", "__stack_user"); !ok {
			return h, fmt.Errorf("threaddb: no _dl_stack_user symbol in %s", p.lib.Module.Path)
		}
		if h.used, ok = p.varAddr("_dl_stack_used", "stack_used"); !ok {
			return h, fmt.Errorf("threaddb: no _dl_stack_used symbol in %s", p.lib.Module.Path)
		}
	} else {
		rg, err := p.rtldGlobal()
		if err != nil {
			return h, err
		}
		h.user = rg + uint64(p.lib.descs["rtld_global__dl_stack_user"].Offset)
		h.used = rg + uint64(p.lib.descs["rtld_global__dl_stack_used"].Offset)
	}
	next := p.lib.descs["list_t_next"]
	lo, hi := min(h.user, h.used), max(h.user, h.used)
	word := uint64(p.lib.PtrSize)
	if hi-lo <= 64 {
		buf := make([]byte, hi-lo+uint64(next.Offset)+word)
		if err := p.read(lo, buf, "thread list heads"); err != nil {
			return h, err
		}
		var err error
		if h.userNext, err = loadScalar(buf[h.user-lo+uint64(next.Offset):], next.Bits, p.lib.Order); err != nil {
			return h, err
		}
		if h.usedNext, err = loadScalar(buf[h.used-lo+uint64(next.Offset):], next.Bits, p.lib.Order); err != nil {
			return h, err
		}
		return h, nil
	}
	var err error
	if h.userNext, err = p.fetch("list_t_next", h.user, 0, "_dl_stack_user.next"); err != nil {
		return h, err
	}
	if h.usedNext, err = p.fetch("list_t_next", h.used, 0, "_dl_stack_used.next"); err != nil {
		return h, err
	}
	return h, nil
}

// varAddr returns the run-time address of the first of names that is defined.
func (p *Process) varAddr(names ...string) (uint64, bool) {
	for _, n := range names {
		if v, ok := p.vars[n]; ok {
			return v, true
		}
	}
	return 0, false
}
