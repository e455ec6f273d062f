package threaddb

import (
	"debug/elf"
	"encoding/binary"
	"fmt"
	"io"
)

// sizer is implemented by readers that know their length (bytes.Reader, io.SectionReader).
type sizer interface{ Size() int64 }

// checkSections rejects a 64-bit ELF file whose section headers claim contents beyond the end of
// the file. debug/elf would otherwise allocate buffers of the claimed size (up to megabytes per
// section) before it discovers the file is short, which makes damaged files slow to reject.
func checkSections(r io.ReaderAt, size int64) error {
	var ident [elf.EI_NIDENT]byte
	if _, err := r.ReadAt(ident[:], 0); err != nil {
		return fmt.Errorf("ELF header: %w", err)
	}
	if string(ident[:4]) != elf.ELFMAG {
		return fmt.Errorf("not an ELF file")
	}
	if elf.Class(ident[elf.EI_CLASS]) != elf.ELFCLASS64 {
		return fmt.Errorf("ELF class %v is not supported (64-bit targets only)", elf.Class(ident[elf.EI_CLASS]))
	}
	var order binary.ByteOrder
	switch elf.Data(ident[elf.EI_DATA]) {
	case elf.ELFDATA2LSB:
		order = binary.LittleEndian
	case elf.ELFDATA2MSB:
		order = binary.BigEndian
	default:
		return fmt.Errorf("unknown ELF data encoding %d", ident[elf.EI_DATA])
	}
	var hdr [64]byte
	if _, err := r.ReadAt(hdr[:], 0); err != nil {
		return fmt.Errorf("ELF header: %w", err)
	}
	shoff := order.Uint64(hdr[40:])
	shentsize := uint64(order.Uint16(hdr[58:]))
	shnum := uint64(order.Uint16(hdr[60:]))
	if shoff == 0 {
		return nil
	}
	if shentsize < 64 {
		return fmt.Errorf("section header size %d is too small", shentsize)
	}
	type shdr struct {
		typ     elf.SectionType
		link    uint32
		off, sz uint64
	}
	read := func(i uint64) (shdr, error) {
		var sh [64]byte
		at := shoff + i*shentsize
		if at < shoff || at > uint64(size) || uint64(size)-at < 64 {
			return shdr{}, fmt.Errorf("section header %d lies past the end of the file", i)
		}
		if _, err := r.ReadAt(sh[:], int64(at)); err != nil {
			return shdr{}, fmt.Errorf("section header %d: %w", i, err)
		}
		return shdr{elf.SectionType(order.Uint32(sh[4:])), order.Uint32(sh[40:]), order.Uint64(sh[24:]), order.Uint64(sh[32:])}, nil
	}
	shstrndx := uint64(order.Uint16(hdr[62:]))
	if shnum == 0 || shstrndx == uint64(elf.SHN_XINDEX) {
		// Extended numbering: the count and the name table index are in section 0.
		s0, err := read(0)
		if err != nil {
			return err
		}
		if shnum == 0 {
			shnum = s0.sz
		}
		if shstrndx == uint64(elf.SHN_XINDEX) {
			shstrndx = uint64(s0.link)
		}
	}
	if shnum > uint64(size)/shentsize {
		return fmt.Errorf("%d section headers do not fit in %d bytes", shnum, size)
	}
	hdrs := make([]shdr, shnum)
	for i := range hdrs {
		h, err := read(uint64(i))
		if err != nil {
			return err
		}
		hdrs[i] = h
		if h.typ == elf.SHT_NOBITS || h.typ == elf.SHT_NULL {
			continue
		}
		if h.off > uint64(size) || h.sz > uint64(size)-h.off {
			return fmt.Errorf("section %d [%#x, +%#x) extends past the end of the file (%d bytes)", i, h.off, h.sz, size)
		}
	}
	// Tables debug/elf reads whole must have file contents: a NOBITS section reads as zeros of
	// whatever size it claims.
	table := func(i uint64, what string) error {
		if i >= shnum || hdrs[i].typ == elf.SHT_NOBITS {
			return fmt.Errorf("%s (section %d) has no contents in the file", what, i)
		}
		return nil
	}
	if shstrndx != uint64(elf.SHN_UNDEF) {
		if err := table(shstrndx, "section name table"); err != nil {
			return err
		}
	}
	for i, h := range hdrs {
		switch h.typ {
		case elf.SHT_SYMTAB, elf.SHT_DYNSYM, elf.SHT_DYNAMIC, elf.SHT_GNU_VERSYM, elf.SHT_GNU_VERDEF, elf.SHT_GNU_VERNEED:
			if err := table(uint64(h.link), fmt.Sprintf("string table of section %d", i)); err != nil {
				return err
			}
		}
	}
	return nil
}
