package mpir

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
)

// Memory reads a process's memory (the launcher's, through its agent).
type Memory interface {
	// ReadMemory returns exactly n bytes at addr, or an error.
	ReadMemory(ctx context.Context, addr uint64, n int) ([]byte, error)
}

// Auxiliary-vector keys (elf.h) used to find the program headers.
const (
	atPhdr  = 3
	atPhent = 4
	atPhnum = 5
	atBase  = 7
	atEntry = 9
)

// Auxv is a process's auxiliary vector, key → value.
type Auxv map[uint64]uint64

// ParseAuxv turns (key, value) words, as GetAuxVectorsAck carries them, into an Auxv. It stops
// at AT_NULL.
func ParseAuxv(words []uint64) Auxv {
	a := make(Auxv)
	for i := 0; i+1 < len(words); i += 2 {
		if words[i] == 0 {
			break
		}
		a[words[i]] = words[i+1]
	}
	return a
}

// Entry is the program's entry point (AT_ENTRY), 0 if absent.
func (a Auxv) Entry() uint64 { return a[atEntry] }

// Object is one ELF object loaded in a process.
type Object struct {
	Path    string // file name as the dynamic linker recorded it (the executable's is supplied by the caller)
	Bias    uint64 // load bias: run-time address − link-time address
	Dynamic uint64 // run-time address of its dynamic section (0 if unknown)
}

// Limits that keep a corrupt or hostile process image from making the walk run away.
const (
	maxObjects = 4096
	maxPath    = 4096
	phdrSize   = 56 // Elf64_Phdr
	dynSize    = 16 // Elf64_Dyn
	maxPhnum   = 1024
	maxDynamic = 64 << 10
)

// Program header and dynamic tags used here.
const (
	ptLoad    = 1
	ptDynamic = 2
	ptPhdr    = 6
	dtNull    = 0
	dtDebug   = 21
)

// phdr is the part of an Elf64_Phdr the walk needs.
type phdr struct {
	typ    uint32
	off    uint64
	vaddr  uint64
	memsz  uint64
	filesz uint64
}

// parsePhdrs decodes n 64-bit program headers of entry size ent.
func parsePhdrs(b []byte, n, ent int, order binary.ByteOrder) ([]phdr, error) {
	if ent < phdrSize || n <= 0 || n > maxPhnum || len(b) < n*ent {
		return nil, fmt.Errorf("program headers: %d entries of %d bytes in %d bytes", n, ent, len(b))
	}
	out := make([]phdr, n)
	for i := range out {
		e := b[i*ent:]
		out[i] = phdr{typ: order.Uint32(e), off: order.Uint64(e[8:]), vaddr: order.Uint64(e[16:]),
			filesz: order.Uint64(e[32:]), memsz: order.Uint64(e[40:])}
	}
	return out, nil
}

// programBias computes the executable's load bias from where its program headers are mapped.
// With PT_PHDR it is exact; without, the headers are assumed to follow the 64-byte ELF header
// in the segment that maps file offset 0, as every linker places them.
func programBias(phdrAddr uint64, ph []phdr) (uint64, error) {
	for _, p := range ph {
		if p.typ == ptPhdr {
			return phdrAddr - p.vaddr, nil
		}
	}
	for _, p := range ph {
		if p.typ == ptLoad && p.off == 0 {
			return phdrAddr - 64 - p.vaddr, nil
		}
	}
	return 0, errors.New("program headers have neither PT_PHDR nor a PT_LOAD at offset 0")
}

// dynValue returns the value of the first entry with tag in a dynamic section.
func dynValue(b []byte, tag int64, order binary.ByteOrder) (uint64, bool) {
	for i := 0; i+dynSize <= len(b); i += dynSize {
		t := int64(order.Uint64(b[i:]))
		if t == dtNull {
			break
		}
		if t == tag {
			return order.Uint64(b[i+8:]), true
		}
	}
	return 0, false
}

// Objects lists the ELF objects loaded in a process, the executable first, by walking the
// dynamic linker's r_debug list from the executable's DT_DEBUG entry. exe names the
// executable (the list records it as ""). The dynamic linker fills DT_DEBUG before the
// program's entry point runs: before that (or for a static program) only the executable is
// listed.
func Objects(ctx context.Context, mem Memory, order binary.ByteOrder, aux Auxv, exe string) ([]Object, error) {
	phAddr, phnum, phent := aux[atPhdr], int(aux[atPhnum]), int(aux[atPhent])
	if phent == 0 {
		phent = phdrSize
	}
	if phAddr == 0 || phnum <= 0 || phnum > maxPhnum || phent < phdrSize || phent > 4*phdrSize {
		return nil, fmt.Errorf("mpir: objects: auxv has no usable AT_PHDR/AT_PHNUM/AT_PHENT (%#x, %d, %d)", phAddr, phnum, phent)
	}
	b, err := mem.ReadMemory(ctx, phAddr, phnum*phent)
	if err != nil {
		return nil, fmt.Errorf("mpir: objects: read program headers at %#x: %w", phAddr, err)
	}
	ph, err := parsePhdrs(b, phnum, phent, order)
	if err != nil {
		return nil, fmt.Errorf("mpir: objects: %w", err)
	}
	bias, err := programBias(phAddr, ph)
	if err != nil {
		return nil, fmt.Errorf("mpir: objects: %w", err)
	}
	main := Object{Path: exe, Bias: bias}
	var dyn *phdr
	for i := range ph {
		if ph[i].typ == ptDynamic {
			dyn = &ph[i]
			break
		}
	}
	if dyn == nil {
		return []Object{main}, nil // static program
	}
	main.Dynamic = bias + dyn.vaddr
	n := min(int(dyn.memsz), maxDynamic)
	n -= n % dynSize
	if n <= 0 {
		return []Object{main}, nil
	}
	db, err := mem.ReadMemory(ctx, main.Dynamic, n)
	if err != nil {
		return nil, fmt.Errorf("mpir: objects: read dynamic section at %#x: %w", main.Dynamic, err)
	}
	rdebug, ok := dynValue(db, dtDebug, order)
	if !ok || rdebug == 0 {
		return []Object{main}, nil // not yet filled by the dynamic linker
	}
	rb, err := mem.ReadMemory(ctx, rdebug, 16)
	if err != nil {
		return nil, fmt.Errorf("mpir: objects: read r_debug at %#x: %w", rdebug, err)
	}
	objs := []Object{main}
	seen := map[uint64]bool{}
	for lm := order.Uint64(rb[8:]); lm != 0; {
		if seen[lm] || len(seen) >= maxObjects {
			return nil, fmt.Errorf("mpir: objects: link_map list loops or exceeds %d entries at %#x", maxObjects, lm)
		}
		seen[lm] = true
		e, err := mem.ReadMemory(ctx, lm, 40)
		if err != nil {
			return nil, fmt.Errorf("mpir: objects: read link_map at %#x: %w", lm, err)
		}
		lAddr, lName, lLd, lNext := order.Uint64(e), order.Uint64(e[8:]), order.Uint64(e[16:]), order.Uint64(e[24:])
		name := ""
		if lName != 0 {
			if name, err = ReadString(ctx, mem, lName, maxPath); err != nil {
				return nil, fmt.Errorf("mpir: objects: read l_name at %#x: %w", lName, err)
			}
		}
		if len(seen) == 1 && name == "" {
			objs[0].Dynamic = lLd // the executable's own entry
		} else if name != "" {
			objs = append(objs, Object{Path: name, Bias: lAddr, Dynamic: lLd})
		}
		lm = lNext
	}
	return objs, nil
}

// ReadString reads a NUL-terminated string of at most max bytes at addr. It reads up to page
// boundaries so that a short string at the end of a mapping does not fail.
func ReadString(ctx context.Context, mem Memory, addr uint64, max int) (string, error) {
	const page = 4096
	start := addr
	var out []byte
	for len(out) < max {
		n := int(page - addr%page)
		n = min(n, max-len(out), 512)
		b, err := mem.ReadMemory(ctx, addr, n)
		if err != nil {
			return "", err
		}
		for i, c := range b {
			if c == 0 {
				return string(append(out, b[:i]...)), nil
			}
		}
		out = append(out, b...)
		addr += uint64(n)
	}
	return "", fmt.Errorf("string at %#x longer than %d bytes", start, max)
}
