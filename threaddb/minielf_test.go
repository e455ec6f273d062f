package threaddb_test

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"sort"
	"strings"
	"testing"
)

// miniSym is one symbol of a small synthetic ELF file: data symbols go to .rodata with their
// bytes; bss symbols get an address in .bss and no contents.
type miniSym struct {
	name string
	data []byte // nil for a .bss symbol
	addr uint64 // .bss address (ignored for data symbols)
}

const (
	miniRodata = 0x1000
	miniBss    = 0x10000
	miniBssLen = 0x100000
)

// miniELF writes a minimal 64-bit ELF shared object holding the given symbols in .dynsym, so
// fuzzing starts from small inputs that still carry glibc's real descriptors.
func miniELF(order binary.ByteOrder, machine elf.Machine, syms []miniSym) []byte {
	var rodata, dynstr, dynsym bytes.Buffer
	dynstr.WriteByte(0)
	dynsym.Write(make([]byte, 24)) // the null symbol
	for _, s := range syms {
		nameOff := dynstr.Len()
		dynstr.WriteString(s.name)
		dynstr.WriteByte(0)
		var e [24]byte
		order.PutUint32(e[0:], uint32(nameOff))
		e[4] = byte(elf.STB_GLOBAL)<<4 | byte(elf.STT_OBJECT)
		if s.data != nil {
			order.PutUint16(e[6:], 1)
			order.PutUint64(e[8:], miniRodata+uint64(rodata.Len()))
			order.PutUint64(e[16:], uint64(len(s.data)))
			rodata.Write(s.data)
			for rodata.Len()%4 != 0 {
				rodata.WriteByte(0)
			}
		} else {
			order.PutUint16(e[6:], 2)
			order.PutUint64(e[8:], s.addr)
			order.PutUint64(e[16:], 8)
		}
		dynsym.Write(e[:])
	}
	shstr := []byte("\x00.rodata\x00.bss\x00.dynsym\x00.dynstr\x00.shstrtab\x00")
	name := func(n string) uint32 { return uint32(bytes.Index(shstr, []byte("\x00"+n+"\x00")) + 1) }

	var out bytes.Buffer
	out.Write(make([]byte, 64)) // header, filled in below
	place := func(b []byte) uint64 {
		for out.Len()%8 != 0 {
			out.WriteByte(0)
		}
		off := uint64(out.Len())
		out.Write(b)
		return off
	}
	roOff := place(rodata.Bytes())
	symOff := place(dynsym.Bytes())
	strOff := place(dynstr.Bytes())
	shOff := place(shstr)
	for out.Len()%8 != 0 {
		out.WriteByte(0)
	}
	shdrOff := uint64(out.Len())
	type sh struct {
		name, typ      uint32
		flags, addr    uint64
		off, size      uint64
		link, info     uint32
		align, entsize uint64
	}
	shdrs := []sh{
		{},
		{name(".rodata"), uint32(elf.SHT_PROGBITS), uint64(elf.SHF_ALLOC), miniRodata, roOff, uint64(rodata.Len()), 0, 0, 8, 0},
		{name(".bss"), uint32(elf.SHT_NOBITS), uint64(elf.SHF_ALLOC | elf.SHF_WRITE), miniBss, 0, miniBssLen, 0, 0, 8, 0},
		{name(".dynsym"), uint32(elf.SHT_DYNSYM), uint64(elf.SHF_ALLOC), 0, symOff, uint64(dynsym.Len()), 4, 1, 8, 24},
		{name(".dynstr"), uint32(elf.SHT_STRTAB), uint64(elf.SHF_ALLOC), 0, strOff, uint64(dynstr.Len()), 0, 0, 1, 0},
		{name(".shstrtab"), uint32(elf.SHT_STRTAB), 0, 0, shOff, uint64(len(shstr)), 0, 0, 1, 0},
	}
	for _, s := range shdrs {
		var b [64]byte
		order.PutUint32(b[0:], s.name)
		order.PutUint32(b[4:], s.typ)
		order.PutUint64(b[8:], s.flags)
		order.PutUint64(b[16:], s.addr)
		order.PutUint64(b[24:], s.off)
		order.PutUint64(b[32:], s.size)
		order.PutUint32(b[40:], s.link)
		order.PutUint32(b[44:], s.info)
		order.PutUint64(b[48:], s.align)
		order.PutUint64(b[56:], s.entsize)
		out.Write(b[:])
	}
	img := out.Bytes()
	h := img[:64]
	copy(h, []byte{0x7f, 'E', 'L', 'F', byte(elf.ELFCLASS64), 0, byte(elf.EV_CURRENT)})
	h[5] = byte(elf.ELFDATA2LSB)
	if order == binary.BigEndian {
		h[5] = byte(elf.ELFDATA2MSB)
	}
	order.PutUint16(h[16:], uint16(elf.ET_DYN))
	order.PutUint16(h[18:], uint16(machine))
	order.PutUint32(h[20:], uint32(elf.EV_CURRENT))
	order.PutUint64(h[40:], shdrOff)
	order.PutUint16(h[52:], 64)
	order.PutUint16(h[58:], 64)
	order.PutUint16(h[60:], uint16(len(shdrs)))
	order.PutUint16(h[62:], uint16(len(shdrs)-1))
	return img
}

// threadDBSymbols copies the descriptor symbols and __nptl_version of a real file, read with
// debug/elf alone.
func threadDBSymbols(t testing.TB, path string) (binary.ByteOrder, elf.Machine, []miniSym) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, _ := f.DynamicSymbols()
	more, _ := f.Symbols()
	seen := map[string]bool{}
	var out []miniSym
	for _, s := range append(syms, more...) {
		if seen[s.Name] || s.Section == elf.SHN_UNDEF || !(strings.HasPrefix(s.Name, "_thread_db_") || s.Name == "__nptl_version") {
			continue
		}
		seen[s.Name] = true
		out = append(out, miniSym{name: s.Name, data: rawSymbol(t, path, s.Name, int(s.Size))})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return f.ByteOrder, f.Machine, out
}
