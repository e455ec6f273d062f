package launch

import (
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
)

// Dependency is one object a program loads at start-up.
type Dependency struct {
	Name     string // the DT_NEEDED entry (for the interpreter: its PT_INTERP path)
	Path     string // the file the dynamic linker opens, as it names it (not symlink-resolved)
	NeededBy string // the object whose DT_NEEDED named it ("" for the interpreter)
}

// Resolver finds a program's shared libraries as glibc's dynamic linker does: for each
// DT_NEEDED name without a slash, in order, the DT_RPATH of the requesting object and of the
// objects that loaded it up to the executable (only for objects without DT_RUNPATH, which
// voids DT_RPATH), LD_LIBRARY_PATH, the requesting object's DT_RUNPATH, /etc/ld.so.cache,
// then the system directories (the last two skipped for DF_1_NODEFLIB objects). $ORIGIN,
// $LIB and $PLATFORM are expanded; candidates of another ELF class or machine are skipped.
// Objects are loaded breadth first and a name already loaded (by DT_NEEDED name or SONAME)
// or a file already loaded under another name is not loaded again.
//
// Not modelled: glibc-hwcaps subdirectories, LD_PRELOAD, and secure-execution (setuid)
// restrictions.
type Resolver struct {
	// LibraryPath is LD_LIBRARY_PATH split at ':' and ';'. Nil means no LD_LIBRARY_PATH.
	LibraryPath []string
	// CachePath is the loader cache (default /etc/ld.so.cache; "" after construction means
	// the default). A missing cache is not an error: the loader works without one.
	CachePath string
	// SystemDirs replaces the default system directories for the program's machine.
	SystemDirs []string
	// Platform is $PLATFORM (default: the machine's name, as AT_PLATFORM gives it on x86-64).
	Platform string

	once  sync.Once
	cache *LDCache
}

// NewResolver returns a Resolver that uses LD_LIBRARY_PATH from env (nil: this process's
// environment).
func NewResolver(env []string) *Resolver {
	if env == nil {
		env = os.Environ()
	}
	r := &Resolver{}
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "LD_LIBRARY_PATH="); ok {
			r.LibraryPath = splitPathList(v)
		}
	}
	return r
}

// splitPathList splits a library path as the loader does (':' or ';'); an empty element
// means the current directory.
func splitPathList(v string) []string {
	if v == "" {
		return nil
	}
	parts := strings.FieldsFunc(v, func(r rune) bool { return r == ':' || r == ';' })
	if len(parts) == 0 {
		return nil
	}
	for i, p := range parts {
		if p == "" {
			parts[i] = "."
		}
	}
	return parts
}

// elfObject is what the resolver needs of one ELF file.
type elfObject struct {
	path    string
	origin  string
	class   elf.Class
	machine elf.Machine
	interp  string
	needed  []string
	rpath   []string // void when runpath is set
	runpath []string
	soname  string
	nodef   bool
	loader  *elfObject
	id      fileID
}

type fileID struct{ dev, ino uint64 }

func statID(path string) (fileID, bool) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return fileID{}, false
	}
	return fileID{uint64(st.Dev), st.Ino}, true
}

// readObject reads the dynamic information of an ELF file.
func readObject(path string) (*elfObject, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	o := &elfObject{path: path, class: f.Class, machine: f.Machine}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			// Filesz is the file's word, not a bound: an interpreter path is short.
			if b, err := io.ReadAll(io.LimitReader(p.Open(), 4096)); err == nil {
				o.interp = strings.TrimRight(string(b), "\x00")
			}
		}
	}
	if f.Section(".dynamic") == nil && dynamicProg(f) == nil {
		return o, nil // static
	}
	if o.needed, err = f.DynString(elf.DT_NEEDED); err != nil {
		return nil, err
	}
	runpath, _ := f.DynString(elf.DT_RUNPATH)
	rpath, _ := f.DynString(elf.DT_RPATH)
	for _, s := range runpath {
		o.runpath = append(o.runpath, splitPathList(s)...)
	}
	if len(runpath) == 0 {
		for _, s := range rpath {
			o.rpath = append(o.rpath, splitPathList(s)...)
		}
	}
	if s, _ := f.DynString(elf.DT_SONAME); len(s) > 0 {
		o.soname = s[0]
	}
	if v, err := f.DynValue(elf.DT_FLAGS_1); err == nil && len(v) > 0 && v[0]&uint64(elf.DF_1_NODEFLIB) != 0 {
		o.nodef = true
	}
	o.id, _ = statID(path)
	return o, nil
}

func dynamicProg(f *elf.File) *elf.Prog {
	for _, p := range f.Progs {
		if p.Type == elf.PT_DYNAMIC {
			return p
		}
	}
	return nil
}

// multiarch is the Debian triplet of a machine.
func multiarch(m elf.Machine, class elf.Class) string {
	switch m {
	case elf.EM_X86_64:
		return "x86_64-linux-gnu"
	case elf.EM_AARCH64:
		return "aarch64-linux-gnu"
	case elf.EM_PPC64:
		return "powerpc64le-linux-gnu" // the little-endian flavour is what Debian ships
	case elf.EM_386:
		return "i386-linux-gnu"
	}
	return ""
}

// systemDirs are the loader's built-in directories for a machine: Debian's multiarch layout
// when it exists on this system, otherwise the lib64 layout.
func (r *Resolver) systemDirs(o *elfObject) []string {
	if r.SystemDirs != nil {
		return r.SystemDirs
	}
	if t := multiarch(o.machine, o.class); t != "" {
		if st, err := os.Stat("/lib/" + t); err == nil && st.IsDir() {
			return []string{"/lib/" + t, "/usr/lib/" + t, "/lib", "/usr/lib"}
		}
	}
	if o.class == elf.ELFCLASS64 {
		return []string{"/lib64", "/usr/lib64"}
	}
	return []string{"/lib", "/usr/lib"}
}

// cacheArch is the architecture flag of cache entries for a machine (0: no cache lookup).
func cacheArch(m elf.Machine) (int32, bool) {
	switch m {
	case elf.EM_X86_64:
		return ldFlagX8664, true
	case elf.EM_AARCH64:
		return ldFlagAArch64, true
	case elf.EM_PPC64:
		return ldFlagPowerPC64, true
	}
	return 0, false
}

func (r *Resolver) ldCache() *LDCache {
	r.once.Do(func() {
		p := r.CachePath
		if p == "" {
			p = "/etc/ld.so.cache"
		}
		if c, err := ReadLDCache(p); err == nil {
			r.cache = c
		}
	})
	return r.cache
}

// expand substitutes $ORIGIN, $LIB and $PLATFORM (also in ${...} form) in a path element.
func (r *Resolver) expand(dir string, o *elfObject) string {
	if !strings.Contains(dir, "$") {
		return dir
	}
	lib := "lib"
	if t := multiarch(o.machine, o.class); t != "" {
		if _, err := os.Stat("/lib/" + t); err == nil {
			lib = "lib/" + t
		}
	}
	platform := r.Platform
	if platform == "" {
		platform = machineName(o.machine)
	}
	repl := strings.NewReplacer("${ORIGIN}", o.origin, "$ORIGIN", o.origin, "${LIB}", lib, "$LIB", lib,
		"${PLATFORM}", platform, "$PLATFORM", platform)
	return repl.Replace(dir)
}

func machineName(m elf.Machine) string {
	switch m {
	case elf.EM_X86_64:
		return "x86_64"
	case elf.EM_AARCH64:
		return "aarch64"
	case elf.EM_PPC64:
		return "ppc64le"
	}
	return runtime.GOARCH
}

// ErrNotFound means a needed library could not be located.
var ErrNotFound = errors.New("not found")

// Resolve returns what a program loads besides itself, in load order: its interpreter first,
// then every DT_NEEDED library, breadth first. If some library cannot be found the error lists
// each missing name and who needs it; the libraries found are returned with it.
func (r *Resolver) Resolve(program string) ([]Dependency, error) {
	main, err := readObject(program)
	if err != nil {
		return nil, fmt.Errorf("launch: dependencies of %s: %w", program, err)
	}
	if real, err := filepath.EvalSymlinks(program); err == nil {
		if abs, err := filepath.Abs(real); err == nil {
			main.origin = filepath.Dir(abs)
		}
	}
	var out []Dependency
	loaded := []*elfObject{main}
	if main.interp != "" {
		out = append(out, Dependency{Name: main.interp, Path: main.interp})
		// The interpreter is loaded first; libc's DT_NEEDED names it by its SONAME.
		if in, err := readObject(main.interp); err == nil {
			in.path = main.interp
			loaded = append(loaded, in)
		}
	}
	queue := []*elfObject{main}
	var missing []string
	for len(queue) > 0 {
		o := queue[0]
		queue = queue[1:]
		for _, name := range o.needed {
			if isLoaded(loaded, name) {
				continue
			}
			dep, err := r.find(name, o, main)
			if err != nil {
				missing = append(missing, fmt.Sprintf("%s (needed by %s)", name, o.path))
				continue
			}
			if dup := sameFile(loaded, dep.id); dup != nil {
				continue
			}
			dep.loader = o
			loaded = append(loaded, dep)
			queue = append(queue, dep)
			out = append(out, Dependency{Name: name, Path: dep.path, NeededBy: o.path})
		}
	}
	if len(missing) > 0 {
		return out, fmt.Errorf("launch: dependencies of %s: %s: %w", program, strings.Join(missing, ", "), ErrNotFound)
	}
	return out, nil
}

func isLoaded(loaded []*elfObject, name string) bool {
	for _, l := range loaded[1:] {
		if l.soname == name || filepath.Base(l.path) == name || l.path == name {
			return true
		}
	}
	return false
}

func sameFile(loaded []*elfObject, id fileID) *elfObject {
	if id == (fileID{}) {
		return nil
	}
	for _, l := range loaded {
		if l.id == id {
			return l
		}
	}
	return nil
}

// find locates one needed name for requester o in a program whose executable is main.
func (r *Resolver) find(name string, o, main *elfObject) (*elfObject, error) {
	if strings.Contains(name, "/") {
		return r.candidate(name, main)
	}
	try := func(dirs []string, owner *elfObject) *elfObject {
		for _, d := range dirs {
			d = strings.TrimRight(r.expand(d, owner), "/")
			if c, err := r.candidate(d+"/"+name, main); err == nil {
				return c
			}
		}
		return nil
	}
	if len(o.runpath) == 0 {
		for l := o; l != nil; l = l.loader {
			if c := try(l.rpath, l); c != nil {
				return c, nil
			}
		}
	}
	if c := try(r.LibraryPath, main); c != nil { // $ORIGIN here is the executable's

		return c, nil
	}
	if c := try(o.runpath, o); c != nil {
		return c, nil
	}
	if !o.nodef {
		if arch, ok := cacheArch(main.machine); ok {
			if c := r.ldCache(); c != nil {
				if p, ok := c.Lookup(name, arch); ok {
					if obj, err := r.candidate(p, main); err == nil {
						return obj, nil
					}
				}
			}
		}
		if c := try(r.systemDirs(main), o); c != nil {
			return c, nil
		}
	}
	return nil, ErrNotFound
}

// candidate opens a file the loader would try and checks that it suits the program.
func (r *Resolver) candidate(path string, main *elfObject) (*elfObject, error) {
	c, err := readObject(path)
	if err != nil {
		return nil, err
	}
	if c.class != main.class || c.machine != main.machine {
		return nil, fmt.Errorf("%s: %v %v, program is %v %v", path, c.class, c.machine, main.class, main.machine)
	}
	// Like the loader, take the directory of the name as opened, without resolving symlinks
	// or "..", made absolute with the working directory.
	c.origin = "."
	if i := strings.LastIndexByte(path, '/'); i > 0 {
		c.origin = path[:i]
	} else if i == 0 {
		c.origin = "/"
	}
	if !strings.HasPrefix(c.origin, "/") {
		if wd, err := os.Getwd(); err == nil {
			c.origin = wd + "/" + c.origin
		}
	}
	return c, nil
}
