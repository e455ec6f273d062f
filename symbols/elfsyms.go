package symbols

import (
	"debug/elf"
	"sort"
)

// Symbol is an ELF symbol (gdb's "minimal symbol"): what is known of code and data without
// DWARF. Addresses are link-time.
type Symbol struct {
	Name  string
	Addr  uint64 // code address for functions (ELFv1 descriptors already resolved)
	Size  uint64
	Func  bool // STT_FUNC or STT_GNU_IFUNC
	IFunc bool // STT_GNU_IFUNC: Addr is the resolver that returns the function's address
	Local bool // STB_LOCAL
	// localEntry is the ELFv2 offset from global to local entry point (ppc64le).
	localEntry uint64
}

// symtab holds a binary's ELF symbols sorted by address.
type symtab struct {
	syms   []Symbol
	byName map[string][]int
}

// loadSymbols merges .symtab of the debug file and the object with .dynsym. On ELFv1
// (big-endian ppc64) function symbols point at .opd descriptors; they are replaced by the
// code address read from the descriptor, as gdb's "dot symbols" are.
func loadSymbols(files []*elf.File, opd *opdTable, ppc64le bool) *symtab {
	st := &symtab{byName: map[string][]int{}}
	type key struct {
		name string
		addr uint64
	}
	seen := map[key]bool{}
	add := func(list []elf.Symbol) {
		for _, s := range list {
			typ := elf.ST_TYPE(s.Info)
			if s.Name == "" || s.Section == elf.SHN_UNDEF || typ == elf.STT_SECTION || typ == elf.STT_FILE ||
				typ == elf.STT_TLS {
				continue
			}
			if s.Section == elf.SHN_ABS && s.Value == 0 {
				continue
			}
			fn := typ == elf.STT_FUNC || typ == elf.STT_GNU_IFUNC
			addr := s.Value
			if fn && opd != nil {
				if code, ok := opd.entry(addr); ok {
					addr = code
				}
			}
			k := key{s.Name, addr}
			if seen[k] {
				continue
			}
			seen[k] = true
			sym := Symbol{Name: s.Name, Addr: addr, Size: s.Size, Func: fn, IFunc: typ == elf.STT_GNU_IFUNC,
				Local: elf.ST_BIND(s.Info) == elf.STB_LOCAL}
			if fn && ppc64le {
				if v := (s.Other >> 5) & 7; v >= 2 && v <= 6 {
					sym.localEntry = uint64(((1 << v) >> 2) << 2)
				}
			}
			st.syms = append(st.syms, sym)
		}
	}
	for _, f := range files {
		if f == nil {
			continue
		}
		if syms, err := f.Symbols(); err == nil {
			add(syms)
		}
	}
	for _, f := range files {
		if f == nil {
			continue
		}
		if syms, err := f.DynamicSymbols(); err == nil {
			add(syms)
		}
	}
	// gdb's order: by address, then by name; among aliases the last one wins.
	sort.Slice(st.syms, func(i, j int) bool {
		a, b := &st.syms[i], &st.syms[j]
		if a.Addr != b.Addr {
			return a.Addr < b.Addr
		}
		return a.Name < b.Name
	})
	for i, s := range st.syms {
		st.byName[s.Name] = append(st.byName[s.Name], i)
	}
	return st
}

// lookup returns the symbol covering addr as gdb chooses it ("<g_nodes+72>"): the last (by
// name) symbol with a size at the highest address at or below addr, if addr lies within it;
// otherwise a sizeless symbol above it, which only counts for code.
func (st *symtab) lookup(addr uint64) (Symbol, bool) {
	i := sort.Search(len(st.syms), func(i int) bool { return st.syms[i].Addr > addr }) - 1
	zero := -1
	for i >= 0 && st.syms[i].Size == 0 {
		if zero < 0 {
			zero = i
		}
		i--
	}
	if i < 0 || addr >= st.syms[i].Addr+st.syms[i].Size {
		if zero < 0 {
			return Symbol{}, false
		}
		i = zero
	}
	s := st.syms[i]
	if s.Size == 0 && !s.Func {
		return Symbol{}, false
	}
	return s, true
}

// named returns the symbols with an exact name.
func (st *symtab) named(name string) []Symbol {
	var out []Symbol
	for _, i := range st.byName[name] {
		out = append(out, st.syms[i])
	}
	return out
}

// opdTable resolves ELFv1 function descriptors from the .opd section of a file.
type opdTable struct {
	addr  uint64
	data  []byte
	order interface{ Uint64([]byte) uint64 }
}

func loadOPD(f *elf.File) *opdTable {
	if f.Machine != elf.EM_PPC64 || f.ByteOrder.String() != "BigEndian" {
		return nil
	}
	s := f.Section(".opd")
	if s == nil || s.Type == elf.SHT_NOBITS {
		return nil
	}
	b, err := s.Data()
	if err != nil {
		return nil
	}
	return &opdTable{addr: s.Addr, data: b, order: f.ByteOrder}
}

// entry returns the code address stored in the descriptor at addr.
func (o *opdTable) entry(addr uint64) (uint64, bool) {
	if addr < o.addr || addr+8 > o.addr+uint64(len(o.data)) {
		return 0, false
	}
	return o.order.Uint64(o.data[addr-o.addr:]), true
}
