package ppc64

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// ABI is one of the two 64-bit PowerPC ELF ABIs (ppc64.md §3).
type ABI uint8

// The 64-bit PowerPC ELF ABIs.
const (
	ABIUnknown ABI = iota
	// ELFv1: big-endian ppc64 (and BG/Q). Function symbols point at .opd descriptors.
	ELFv1
	// ELFv2: ppc64le. Function symbols point at the global entry point; st_other gives the
	// offset of the local entry point.
	ELFv2
)

// String names the ABI.
func (a ABI) String() string {
	switch a {
	case ELFv1:
		return "ELFv1"
	case ELFv2:
		return "ELFv2"
	}
	return "unknown ABI"
}

// efABIMask selects the ABI version in e_flags (EF_PPC64_ABI).
const efABIMask = 3

// ReadABI tells the ABI of a 64-bit PowerPC ELF file from its header's e_flags (which
// debug/elf does not keep), falling back to the byte order when the flags leave it unspecified
// (0): big-endian files are then ELFv1, little-endian ones ELFv2.
func ReadABI(r io.ReaderAt) (ABI, error) {
	var h [64]byte
	if _, err := r.ReadAt(h[:], 0); err != nil {
		return ABIUnknown, fmt.Errorf("ppc64: read ELF header: %w", err)
	}
	if !bytes.Equal(h[:4], []byte(elf.ELFMAG)) || elf.Class(h[elf.EI_CLASS]) != elf.ELFCLASS64 {
		return ABIUnknown, errors.New("ppc64: not a 64-bit ELF file")
	}
	var order binary.ByteOrder
	switch elf.Data(h[elf.EI_DATA]) {
	case elf.ELFDATA2MSB:
		order = binary.BigEndian
	case elf.ELFDATA2LSB:
		order = binary.LittleEndian
	default:
		return ABIUnknown, fmt.Errorf("ppc64: ELF byte order %d unknown", h[elf.EI_DATA])
	}
	if m := elf.Machine(order.Uint16(h[18:])); m != elf.EM_PPC64 {
		return ABIUnknown, fmt.Errorf("ppc64: ELF machine is %v, not EM_PPC64", m)
	}
	switch flags := order.Uint32(h[48:]); flags & efABIMask {
	case 1:
		return ELFv1, nil
	case 2:
		return ELFv2, nil
	case 0:
		if order == binary.LittleEndian {
			return ELFv2, nil
		}
		return ELFv1, nil
	default:
		return ABIUnknown, fmt.Errorf("ppc64: ELF e_flags %#x names no known ABI", flags)
	}
}

// LocalEntryOffset decodes the ELFv2 local-entry field of st_other (bits 5–7): the distance in
// bytes from a function's global entry point to its local entry point. Values 0 and 1 mean a
// single entry point; 7 is reserved and an error.
func LocalEntryOffset(stOther uint8) (uint64, error) {
	v := stOther >> 5
	if v == 7 {
		return 0, fmt.Errorf("ppc64: st_other %#x: local-entry field 7 is reserved", stOther)
	}
	return uint64((1<<v)>>2) << 2, nil
}

// Descriptor is an ELFv1 function descriptor, three doublewords in .opd.
type Descriptor struct {
	Entry uint64 // the code address: where the function's instructions start
	TOC   uint64 // the value of r2 the function expects
	Env   uint64 // the environment pointer (unused by C)
}

// DescriptorSize is the size of an ELFv1 function descriptor in bytes.
const DescriptorSize = 24

// ParseDescriptor decodes a descriptor from its bytes (ELFv1 is big-endian, but the order is
// the caller's to give).
func ParseDescriptor(b []byte, order binary.ByteOrder) (Descriptor, error) {
	if len(b) < DescriptorSize {
		return Descriptor{}, fmt.Errorf("ppc64: function descriptor: %d bytes, need %d", len(b), DescriptorSize)
	}
	return Descriptor{Entry: order.Uint64(b), TOC: order.Uint64(b[8:]), Env: order.Uint64(b[16:])}, nil
}

// Entry is where a function starts, as a debugger needs it.
type Entry struct {
	Name string
	// Global is the function's entry as other modules call it: the descriptor's code address
	// (ELFv1) or st_value (ELFv2).
	Global uint64
	// Local is where a breakpoint catches every call: the code address (ELFv1), or the local
	// entry point, global + the st_other offset (ELFv2).
	Local uint64
	// Descriptor is the .opd address the symbol names (ELFv1 only).
	Descriptor uint64
	// TOC is the descriptor's TOC pointer (ELFv1 only).
	TOC  uint64
	Size uint64 // st_size: the size of the code
}

// Breakpoint returns the address at which a breakpoint catches every call of the function.
func (e Entry) Breakpoint() uint64 { return e.Local }

// Resolver maps function symbols of one 64-bit PowerPC ELF file to code addresses. Addresses
// are those of the file; a position-independent file loaded at a bias needs the bias added
// (a descriptor read from the running process's memory is already relocated).
type Resolver struct {
	f     *elf.File
	abi   ABI
	order binary.ByteOrder
	opd   *elf.Section
	data  []byte            // .opd contents
	rel   map[uint64]uint64 // R_PPC64_RELATIVE addends by address, for descriptors left 0 in the file
	syms  []elf.Symbol
}

// ErrNoSymbol reports a name that is not a function symbol of the file.
var ErrNoSymbol = errors.New("ppc64: no such function symbol")

// NewResolver reads the 64-bit PowerPC ELF file r for symbol resolution.
func NewResolver(r io.ReaderAt) (*Resolver, error) {
	abi, err := ReadABI(r)
	if err != nil {
		return nil, err
	}
	f, err := elf.NewFile(r)
	if err != nil {
		return nil, fmt.Errorf("ppc64: %w", err)
	}
	return newResolver(f, abi)
}

func newResolver(f *elf.File, abi ABI) (*Resolver, error) {
	var err error
	r := &Resolver{f: f, abi: abi, order: f.ByteOrder}
	if abi == ELFv1 {
		r.opd = f.Section(".opd")
		if r.opd != nil && r.opd.Type != elf.SHT_NOBITS {
			if r.data, err = r.opd.Data(); err != nil {
				return nil, fmt.Errorf("ppc64: read .opd: %w", err)
			}
		}
		r.rel = relativeRelocs(f)
	}
	syms, err := f.Symbols()
	if err != nil && !errors.Is(err, elf.ErrNoSymbols) {
		return nil, fmt.Errorf("ppc64: read symbols: %w", err)
	}
	dyn, err := f.DynamicSymbols()
	if err != nil && !errors.Is(err, elf.ErrNoSymbols) {
		return nil, fmt.Errorf("ppc64: read dynamic symbols: %w", err)
	}
	r.syms = append(syms, dyn...)
	return r, nil
}

// File returns the parsed ELF file.
func (r *Resolver) File() *elf.File { return r.f }

// ABI returns the file's ABI.
func (r *Resolver) ABI() ABI { return r.abi }

// Descriptor reads the ELFv1 function descriptor at addr from the file's .opd section.
func (r *Resolver) Descriptor(addr uint64) (Descriptor, error) {
	if r.opd == nil || r.data == nil {
		return Descriptor{}, fmt.Errorf("ppc64: descriptor at %#x: file has no .opd section", addr)
	}
	if addr < r.opd.Addr || addr-r.opd.Addr+DescriptorSize > uint64(len(r.data)) {
		return Descriptor{}, fmt.Errorf("ppc64: descriptor at %#x: outside .opd [%#x, %#x)",
			addr, r.opd.Addr, r.opd.Addr+uint64(len(r.data)))
	}
	d, err := ParseDescriptor(r.data[addr-r.opd.Addr:], r.order)
	if err != nil {
		return Descriptor{}, err
	}
	// In a position-independent file the loader fills descriptors from relocations; the
	// linker normally writes the same values into the file, but take the addends if not.
	if d.Entry == 0 {
		d.Entry = r.rel[addr]
	}
	if d.TOC == 0 {
		d.TOC = r.rel[addr+8]
	}
	return d, nil
}

// Func returns the entry of the function symbol sym.
func (r *Resolver) Func(sym elf.Symbol) (Entry, error) {
	if elf.ST_TYPE(sym.Info) != elf.STT_FUNC && elf.ST_TYPE(sym.Info) != elf.STT_GNU_IFUNC {
		return Entry{}, fmt.Errorf("ppc64: symbol %s: %w (type %v)", sym.Name, ErrNoSymbol, elf.ST_TYPE(sym.Info))
	}
	if sym.Section == elf.SHN_UNDEF {
		return Entry{}, fmt.Errorf("ppc64: symbol %s: undefined in this file", sym.Name)
	}
	e := Entry{Name: sym.Name, Size: sym.Size}
	switch r.abi {
	case ELFv1:
		if r.opd == nil || sym.Value < r.opd.Addr || sym.Value >= r.opd.Addr+r.opd.Size {
			// Symbols outside .opd (some assembly, local dot symbols) are code addresses.
			e.Global, e.Local = sym.Value, sym.Value
			return e, nil
		}
		d, err := r.Descriptor(sym.Value)
		if err != nil {
			return Entry{}, fmt.Errorf("ppc64: symbol %s: %w", sym.Name, err)
		}
		e.Descriptor, e.TOC, e.Global, e.Local = sym.Value, d.TOC, d.Entry, d.Entry
	case ELFv2:
		off, err := LocalEntryOffset(sym.Other)
		if err != nil {
			return Entry{}, fmt.Errorf("ppc64: symbol %s: %w", sym.Name, err)
		}
		e.Global, e.Local = sym.Value, sym.Value+off
	}
	return e, nil
}

// Lookup returns the entry of the function named name (from .symtab, else .dynsym).
func (r *Resolver) Lookup(name string) (Entry, error) {
	for _, s := range r.syms {
		if s.Name == name && s.Section != elf.SHN_UNDEF &&
			(elf.ST_TYPE(s.Info) == elf.STT_FUNC || elf.ST_TYPE(s.Info) == elf.STT_GNU_IFUNC) {
			return r.Func(s)
		}
	}
	return Entry{}, fmt.Errorf("ppc64: lookup %s: %w", name, ErrNoSymbol)
}

// Funcs returns the entries of every defined function symbol (.symtab, then .dynsym symbols
// that .symtab does not already hold). Local functions of different objects may share a name.
func (r *Resolver) Funcs() ([]Entry, error) {
	type key struct {
		name  string
		value uint64
	}
	seen := make(map[key]bool)
	var out []Entry
	for _, s := range r.syms {
		k := key{s.Name, s.Value}
		if seen[k] || s.Section == elf.SHN_UNDEF || elf.ST_TYPE(s.Info) != elf.STT_FUNC {
			continue
		}
		e, err := r.Func(s)
		if err != nil {
			return nil, err
		}
		seen[k] = true
		out = append(out, e)
	}
	return out, nil
}

// ProgramEntry returns the code address where execution starts: e_entry, which under ELFv1
// is a descriptor address (as is AT_ENTRY at run time).
func (r *Resolver) ProgramEntry() (uint64, error) {
	if r.abi != ELFv1 {
		return r.f.Entry, nil
	}
	if r.opd == nil || r.f.Entry < r.opd.Addr || r.f.Entry >= r.opd.Addr+r.opd.Size {
		return r.f.Entry, nil
	}
	d, err := r.Descriptor(r.f.Entry)
	if err != nil {
		return 0, fmt.Errorf("ppc64: program entry: %w", err)
	}
	return d.Entry, nil
}

// rPPC64Relative is the ELF relocation type R_PPC64_RELATIVE.
const rPPC64Relative = 22

// relativeRelocs collects the R_PPC64_RELATIVE addends of f's RELA sections by address.
func relativeRelocs(f *elf.File) map[uint64]uint64 {
	m := make(map[uint64]uint64)
	for _, s := range f.Sections {
		if s.Type != elf.SHT_RELA {
			continue
		}
		data, err := s.Data()
		if err != nil {
			continue
		}
		var rel elf.Rela64
		rd := bytes.NewReader(data)
		for binary.Read(rd, f.ByteOrder, &rel) == nil {
			if elf.R_TYPE64(rel.Info) == rPPC64Relative {
				m[rel.Off] = uint64(rel.Addend)
			}
		}
	}
	return m
}
