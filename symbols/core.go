package symbols

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"sync"

	"github.com/hpcdap/hpcdap/arch"
	"github.com/hpcdap/hpcdap/procimage"
)

// Core is an ELF core file opened for post-mortem debugging: its threads' registers, its
// memory (with text the core lacks read from the mapped files), and the modules it had
// mapped.
type Core struct {
	Path    string
	Arch    *Arch
	Threads []*CoreThread
	Files   []MappedFile // NT_FILE: file-backed mappings
	Auxv    procimage.Auxv
	// Process describes the dead process; pass it to Stack, Eval and friends.
	Process *Process

	osf   *os.File
	segs  []coreSeg
	mu    sync.Mutex
	files map[string]*os.File
}

// CoreThread is one thread of a core file.
type CoreThread struct {
	Pid    int   // LWP id
	Signal int   // pending signal (pr_cursig)
	Regs   *Regs // registers from NT_PRSTATUS and NT_FPREGSET
}

// MappedFile is a file-backed mapping recorded in NT_FILE.
type MappedFile struct {
	Start, End uint64 // run-time address range
	Offset     uint64 // file offset of Start
	Path       string
}

type coreSeg struct {
	vaddr, memsz, filesz, off uint64
}

// CoreOptions control OpenCore.
type CoreOptions struct {
	// Executable is the program that dumped core; when empty it is taken from NT_FILE.
	Executable string
	// Cache loads binaries (once per build-id); nil uses a private cache.
	Cache *Cache
	// SysRoot is prefixed to the paths of shared objects named by the core (for cores from
	// another machine); empty means the paths as recorded.
	SysRoot string
}

// OpenCore reads an ELF core file and the objects it had mapped.
func OpenCore(path string, opts *CoreOptions) (c *Core, err error) {
	if opts == nil {
		opts = &CoreOptions{}
	}
	osf, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("symbols: open core %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			osf.Close()
		}
		if r := recover(); r != nil {
			osf.Close()
			c, err = nil, fmt.Errorf("symbols: open core %s: malformed: %v", path, r)
		}
	}()
	ef, err := elf.NewFile(osf)
	if err != nil {
		return nil, fmt.Errorf("symbols: open core %s: %w", path, err)
	}
	if ef.Type != elf.ET_CORE {
		return nil, fmt.Errorf("symbols: open core %s: not a core file (%v)", path, ef.Type)
	}
	arch, err := ArchFor(ef.Machine, ef.ByteOrder)
	if err != nil {
		return nil, fmt.Errorf("symbols: open core %s: %w", path, err)
	}
	c = &Core{Path: path, Arch: arch, osf: osf, Auxv: procimage.Auxv{}, files: map[string]*os.File{}}
	for _, p := range ef.Progs {
		switch p.Type {
		case elf.PT_LOAD:
			c.segs = append(c.segs, coreSeg{vaddr: p.Vaddr, memsz: p.Memsz, filesz: p.Filesz, off: p.Off})
		case elf.PT_NOTE:
			// Filesz is the file's word: read what the file holds before trusting it.
			b, err := io.ReadAll(p.Open())
			if err == nil && uint64(len(b)) != p.Filesz {
				err = fmt.Errorf("segment of %d bytes, the file holds %d", p.Filesz, len(b))
			}
			if err != nil {
				return nil, fmt.Errorf("symbols: open core %s: read notes: %w", path, err)
			}
			if err := c.parseNotes(b, ef); err != nil {
				return nil, fmt.Errorf("symbols: open core %s: %w", path, err)
			}
		}
	}
	sort.Slice(c.segs, func(i, j int) bool { return c.segs[i].vaddr < c.segs[j].vaddr })
	if len(c.Threads) == 0 {
		return nil, fmt.Errorf("symbols: open core %s: no NT_PRSTATUS note", path)
	}
	c.Process = NewProcess(arch, c)
	if err := c.loadModules(opts); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *Core) parseNotes(b []byte, ef *elf.File) error {
	var cur *CoreThread
	for _, n := range parseNotes(b, ef.ByteOrder) {
		switch {
		case n.Type == uint32(elf.NT_PRSTATUS) && n.Name == "CORE":
			if len(n.Desc) < 112 {
				return fmt.Errorf("NT_PRSTATUS: %d bytes", len(n.Desc))
			}
			o := ef.ByteOrder
			t := &CoreThread{Signal: int(o.Uint16(n.Desc[12:])), Pid: int(int32(o.Uint32(n.Desc[32:])))}
			regs, err := RegsFromNative(c.Arch, n.Desc[112:], nil)
			if err != nil {
				return fmt.Errorf("NT_PRSTATUS of LWP %d: %w", t.Pid, err)
			}
			t.Regs = regs
			c.Threads = append(c.Threads, t)
			cur = t
		case n.Type == uint32(elf.NT_FPREGSET) && n.Name == "CORE" && cur != nil:
			gp := make([]byte, 48*8)
			// Re-decode with the float registers; general registers are already set.
			if r, err := RegsFromNative(c.Arch, gp, n.Desc); err == nil {
				for i := 0; i < c.Arch.NumRegs; i++ {
					if _, has := cur.Regs.Get(i); has {
						continue
					}
					if b, ok := r.wideBytes(i); ok {
						cur.Regs.SetBytes(i, b)
					} else if v, ok := r.Get(i); ok && isFloatReg(c.Arch, i) {
						cur.Regs.Set(i, v)
					}
				}
			}
		case n.Type == ntAUXV && n.Name == "CORE":
			a, err := procimage.ParseAuxv(n.Desc, procimage.Layout{Order: ef.ByteOrder, PtrSize: c.Arch.PtrSize})
			if err != nil {
				return fmt.Errorf("NT_AUXV: %w", err)
			}
			c.Auxv = a
		case n.Type == 0x46494c45 && n.Name == "CORE": // NT_FILE
			files, err := parseNTFile(n.Desc, ef.ByteOrder)
			if err != nil {
				return err
			}
			c.Files = files
		}
	}
	return nil
}

// isFloatReg reports whether DWARF register n lives in the machine's floating-point set.
func isFloatReg(a *Arch, n int) bool {
	r, ok := a.Register(n)
	return ok && r.Set == arch.Float
}

// parseNTFile decodes the NT_FILE note: count, page size, count (start, end, page offset)
// triples, then count NUL-terminated names.
func parseNTFile(b []byte, o interface{ Uint64([]byte) uint64 }) ([]MappedFile, error) {
	if len(b) < 16 {
		return nil, errors.New("NT_FILE: truncated")
	}
	count, page := o.Uint64(b), o.Uint64(b[8:])
	if count > uint64(len(b))/24 {
		return nil, fmt.Errorf("NT_FILE: %d entries do not fit", count)
	}
	p := 16
	out := make([]MappedFile, count)
	for i := range out {
		out[i].Start = o.Uint64(b[p:])
		out[i].End = o.Uint64(b[p+8:])
		out[i].Offset = o.Uint64(b[p+16:]) * page
		p += 24
	}
	names := b[p:]
	for i := range out {
		j := bytes.IndexByte(names, 0)
		if j < 0 {
			return nil, errors.New("NT_FILE: truncated names")
		}
		out[i].Path = string(names[:j])
		names = names[j+1:]
	}
	return out, nil
}

// ReadAt reads memory of the dead process: from the core's segments, and for ranges the core
// did not dump (text), from the files that were mapped there.
func (c *Core) ReadAt(p []byte, addr uint64) (int, error) {
	n := 0
	for n < len(p) {
		m, err := c.readSome(p[n:], addr+uint64(n))
		if m == 0 || err != nil {
			if err == nil {
				err = fmt.Errorf("address %#x not in the core", addr+uint64(n))
			}
			return n, err
		}
		n += m
	}
	return n, nil
}

func (c *Core) readSome(p []byte, addr uint64) (int, error) {
	i := sort.Search(len(c.segs), func(i int) bool { return c.segs[i].vaddr > addr }) - 1
	if i >= 0 {
		s := c.segs[i]
		if addr < s.vaddr+s.filesz {
			n := min(uint64(len(p)), s.vaddr+s.filesz-addr)
			return c.osf.ReadAt(p[:n], int64(s.off+addr-s.vaddr))
		}
		if addr < s.vaddr+s.memsz {
			if n, err := c.readMapped(p, addr); n > 0 {
				return n, err
			}
			// Not dumped and not file-backed: zero-filled (bss beyond file size).
			n := min(uint64(len(p)), s.vaddr+s.memsz-addr)
			for k := range p[:n] {
				p[k] = 0
			}
			return int(n), nil
		}
	}
	return c.readMapped(p, addr)
}

// readMapped reads from the file mapped at addr, per NT_FILE.
func (c *Core) readMapped(p []byte, addr uint64) (int, error) {
	for _, f := range c.Files {
		if addr < f.Start || addr >= f.End {
			continue
		}
		fh, err := c.openMapped(f.Path)
		if err != nil {
			return 0, err
		}
		n := min(uint64(len(p)), f.End-addr)
		m, err := fh.ReadAt(p[:n], int64(f.Offset+addr-f.Start))
		if m > 0 {
			return m, nil
		}
		return 0, err
	}
	return 0, fmt.Errorf("address %#x not in the core", addr)
}

func (c *Core) openMapped(path string) (*os.File, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if f, ok := c.files[path]; ok {
		if f == nil {
			return nil, fmt.Errorf("mapped file %s unavailable", path)
		}
		return f, nil
	}
	f, err := os.Open(path)
	if err != nil {
		c.files[path] = nil
		return nil, err
	}
	c.files[path] = f
	return f, nil
}

// Close releases the core and the mapped files it opened.
func (c *Core) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, f := range c.files {
		if f != nil {
			f.Close()
		}
	}
	c.files = map[string]*os.File{}
	return c.osf.Close()
}

// loadModules finds the executable and shared objects of the core and their load biases.
func (c *Core) loadModules(opts *CoreOptions) error {
	mods, err := ModulesFromMappings(c.Files, &MappingOptions{Executable: opts.Executable,
		Entry: c.Auxv.Entry(), Cache: opts.Cache, SysRoot: opts.SysRoot})
	if err != nil {
		return fmt.Errorf("symbols: core %s: %w", c.Path, err)
	}
	for _, m := range mods {
		c.Process.AddModule(m)
	}
	return nil
}
