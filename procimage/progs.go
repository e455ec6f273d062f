package procimage

import (
	"debug/elf"
	"errors"
	"fmt"
)

// Prog is the part of a program header (Elf32_Phdr or Elf64_Phdr) a debugger needs.
type Prog struct {
	Type   elf.ProgType
	Off    uint64
	Vaddr  uint64
	Filesz uint64
	Memsz  uint64
}

// Limits that keep a corrupt or hostile process image from making a read run away.
const (
	maxPhnum   = 1024
	maxDynamic = 64 << 10
)

// progSize is the size of one program header in l's ELF class.
func (l Layout) progSize() int {
	if l.PtrSize == 4 {
		return 32 // Elf32_Phdr
	}
	return 56 // Elf64_Phdr
}

// dynSize is the size of one dynamic entry in l's ELF class.
func (l Layout) dynSize() int { return 2 * l.PtrSize }

// DecodeProgs decodes n program headers of ent bytes each (ent ≥ the class's header size).
func DecodeProgs(b []byte, n, ent int, l Layout) ([]Prog, error) {
	if err := l.check(); err != nil {
		return nil, err
	}
	if ent < l.progSize() || n <= 0 || n > maxPhnum || len(b)/ent < n {
		return nil, fmt.Errorf("procimage: program headers: %d entries of %d bytes in %d bytes", n, ent, len(b))
	}
	out := make([]Prog, n)
	o := l.Order
	for i := range out {
		e := b[i*ent:]
		if l.PtrSize == 4 {
			out[i] = Prog{Type: elf.ProgType(o.Uint32(e)), Off: uint64(o.Uint32(e[4:])), Vaddr: uint64(o.Uint32(e[8:])),
				Filesz: uint64(o.Uint32(e[16:])), Memsz: uint64(o.Uint32(e[20:]))}
		} else {
			out[i] = Prog{Type: elf.ProgType(o.Uint32(e)), Off: o.Uint64(e[8:]), Vaddr: o.Uint64(e[16:]),
				Filesz: o.Uint64(e[32:]), Memsz: o.Uint64(e[40:])}
		}
	}
	return out, nil
}

// ProgramHeaders reads the executable's program headers where the auxiliary vector says the
// kernel mapped them (AT_PHDR, AT_PHNUM, AT_PHENT), and returns them with their run-time
// address.
func (im Image) ProgramHeaders(aux Auxv) ([]Prog, uint64, error) {
	if err := im.check(); err != nil {
		return nil, 0, err
	}
	addr, phnum, phent := aux[AtPhdr], aux[AtPhnum], aux[AtPhent]
	if phent == 0 {
		phent = uint64(im.progSize())
	}
	if addr == 0 || phnum == 0 || phnum > maxPhnum || phent < uint64(im.progSize()) || phent > 4*uint64(im.progSize()) {
		return nil, 0, fmt.Errorf("procimage: auxv has no usable AT_PHDR/AT_PHNUM/AT_PHENT (%#x, %d, %d)", addr, phnum, phent)
	}
	b, err := im.read(addr, int(phnum*phent))
	if err != nil {
		return nil, 0, fmt.Errorf("procimage: read program headers at %#x: %w", addr, err)
	}
	ph, err := DecodeProgs(b, int(phnum), int(phent), im.Layout)
	return ph, addr, err
}

// ProgramBias computes an executable's load bias (run-time address − link-time address) from
// where its program headers are mapped. With PT_PHDR it is exact; without, the headers are
// taken to follow the ELF header (52 or 64 bytes) in the segment that maps file offset 0, as
// every linker places them.
func ProgramBias(phdrAddr uint64, ph []Prog, l Layout) (uint64, error) {
	for _, p := range ph {
		if p.Type == elf.PT_PHDR {
			return phdrAddr - p.Vaddr, nil
		}
	}
	ehdr := uint64(64)
	if l.PtrSize == 4 {
		ehdr = 52
	}
	for _, p := range ph {
		if p.Type == elf.PT_LOAD && p.Off == 0 {
			return phdrAddr - ehdr - p.Vaddr, nil
		}
	}
	return 0, errors.New("procimage: program headers have neither PT_PHDR nor a PT_LOAD at offset 0")
}

// DynamicValue returns the value of the first entry with tag in the bytes of a dynamic
// section, which ends at DT_NULL or at the end of b.
func DynamicValue(b []byte, tag elf.DynTag, l Layout) (uint64, bool) {
	if l.check() != nil {
		return 0, false
	}
	n := l.dynSize()
	for i := 0; i+n <= len(b); i += n {
		t := l.word(b[i:])
		if l.PtrSize == 4 {
			t = uint64(int64(int32(t))) // d_tag is signed
		}
		if t == uint64(elf.DT_NULL) {
			break
		}
		if t == uint64(int64(tag)) {
			return l.word(b[i+l.PtrSize:]), true
		}
	}
	return 0, false
}

// DebugAddr reads the dynamic section of size bytes at dyn (capped at 64 KiB) and returns its
// DT_DEBUG value: the address of r_debug, or 0 while the dynamic linker has not filled it in.
func (im Image) DebugAddr(dyn, size uint64) (uint64, error) {
	if err := im.check(); err != nil {
		return 0, err
	}
	n := int(min(size, maxDynamic))
	n -= n % im.dynSize()
	if n <= 0 {
		return 0, nil
	}
	b, err := im.read(dyn, n)
	if err != nil {
		return 0, fmt.Errorf("procimage: read dynamic section at %#x: %w", dyn, err)
	}
	v, _ := DynamicValue(b, elf.DT_DEBUG, im.Layout)
	return v, nil
}
