package symbols

import (
	"errors"
	"fmt"

	"github.com/hpcdap/hpcdap/symbols/dwbuf"
)

// locListExpr returns the location expression of a location list in effect at a link-time
// pc, or nil when the list has no entry for pc (the variable is optimized out there).
func (b *Binary) locListExpr(cu *compUnit, off uint64, pc uint64) ([]byte, error) {
	if cu.Version >= 5 {
		return b.locListsV5(cu, off, pc)
	}
	return b.locListsV4(cu, off, pc)
}

// locListsV4 walks a .debug_loc list (DWARF 2-4).
func (b *Binary) locListsV4(cu *compUnit, off uint64, pc uint64) ([]byte, error) {
	data := b.secs.loc
	if off >= uint64(len(data)) {
		return nil, fmt.Errorf("symbols: location list at %#x outside .debug_loc", off)
	}
	r := dwbuf.New(data, int(off), b.Arch.ByteOrder)
	base := cu.lowPC
	asz := cu.AddrSize
	if asz == 0 {
		asz = 8
	}
	maxAddr := ^uint64(0)
	if asz == 4 {
		maxAddr = 0xffffffff
	}
	for i := 0; i < 1<<20; i++ {
		lo, hi := r.Addr(asz), r.Addr(asz)
		if r.Err != nil {
			return nil, fmt.Errorf("symbols: location list at %#x: %w", off, r.Err)
		}
		if lo == 0 && hi == 0 {
			return nil, nil
		}
		if lo == maxAddr {
			base = hi
			continue
		}
		n := uint64(r.U16())
		expr := r.Bytes(n)
		if r.Err != nil {
			return nil, fmt.Errorf("symbols: location list at %#x: %w", off, r.Err)
		}
		if pc >= base+lo && pc < base+hi {
			return expr, nil
		}
	}
	return nil, errors.New("symbols: location list too long")
}

// DWARF 5 location list entry kinds.
const (
	lleEndOfList    = 0x00
	lleBaseAddressx = 0x01
	lleStartxEndx   = 0x02
	lleStartxLength = 0x03
	lleOffsetPair   = 0x04
	lleDefault      = 0x05
	lleBaseAddress  = 0x06
	lleStartEnd     = 0x07
	lleStartLength  = 0x08
	lleGNUViewPair  = 0x09
)

// locListsV5 walks a .debug_loclists list (DWARF 5), skipping GNU location-view pairs.
func (b *Binary) locListsV5(cu *compUnit, off uint64, pc uint64) ([]byte, error) {
	data := b.secs.loclists
	if off >= uint64(len(data)) {
		return nil, fmt.Errorf("symbols: location list at %#x outside .debug_loclists", off)
	}
	r := dwbuf.New(data, int(off), b.Arch.ByteOrder)
	base := cu.lowPC
	asz := cu.AddrSize
	if asz == 0 {
		asz = 8
	}
	var deflt []byte
	for i := 0; i < 1<<20; i++ {
		kind := r.U8()
		var lo, hi uint64
		hasRange := true
		switch kind {
		case lleEndOfList:
			return deflt, r.Err
		case lleBaseAddressx:
			a, err := b.debugAddr(cu, r.Uleb())
			if err != nil {
				return nil, err
			}
			base = a
			hasRange = false
		case lleStartxEndx:
			a, err1 := b.debugAddr(cu, r.Uleb())
			z, err2 := b.debugAddr(cu, r.Uleb())
			if err := errors.Join(err1, err2); err != nil {
				return nil, err
			}
			lo, hi = a, z
		case lleStartxLength:
			a, err := b.debugAddr(cu, r.Uleb())
			if err != nil {
				return nil, err
			}
			lo = a
			hi = a + r.Uleb()
		case lleOffsetPair:
			lo = base + r.Uleb()
			hi = base + r.Uleb()
		case lleDefault:
			n := r.Uleb()
			deflt = r.Bytes(n)
			hasRange = false
			continue
		case lleBaseAddress:
			base = r.Addr(asz)
			hasRange = false
		case lleStartEnd:
			lo, hi = r.Addr(asz), r.Addr(asz)
		case lleStartLength:
			lo = r.Addr(asz)
			hi = lo + r.Uleb()
		case lleGNUViewPair:
			r.Uleb()
			r.Uleb()
			hasRange = false
		default:
			return nil, fmt.Errorf("symbols: location list at %#x: unknown entry kind %#x", off, kind)
		}
		if r.Err != nil {
			return nil, fmt.Errorf("symbols: location list at %#x: %w", off, r.Err)
		}
		if !hasRange {
			continue
		}
		n := r.Uleb()
		expr := r.Bytes(n)
		if r.Err != nil {
			return nil, fmt.Errorf("symbols: location list at %#x: %w", off, r.Err)
		}
		if pc >= lo && pc < hi {
			return expr, nil
		}
	}
	return nil, errors.New("symbols: location list too long")
}

// debugAddr reads entry idx of the unit's .debug_addr table.
func (b *Binary) debugAddr(cu *compUnit, idx uint64) (uint64, error) {
	asz := uint64(cu.AddrSize)
	if asz == 0 {
		asz = 8
	}
	base := cu.addrBase
	if base == 0 {
		base = 8 // a lone unit's table starts after its header
	}
	p := base + idx*asz
	if p+asz > uint64(len(b.secs.addr)) {
		return 0, fmt.Errorf("symbols: .debug_addr index %d out of range", idx)
	}
	r := dwbuf.New(b.secs.addr, int(p), b.Arch.ByteOrder)
	return r.Addr(int(asz)), nil
}

// locListIndex resolves a DW_FORM_loclistx index to an offset in .debug_loclists.
func (b *Binary) locListIndex(cu *compUnit, idx uint64) (uint64, error) {
	base := cu.locBase
	sz := uint64(4)
	if cu.is64 {
		sz = 8
	}
	p := base + idx*sz
	if p+sz > uint64(len(b.secs.loclists)) {
		return 0, fmt.Errorf("symbols: location list index %d out of range", idx)
	}
	r := dwbuf.New(b.secs.loclists, int(p), b.Arch.ByteOrder)
	var v uint64
	if cu.is64 {
		v = r.U64()
	} else {
		v = uint64(r.U32())
	}
	return base + v, nil
}
