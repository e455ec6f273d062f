// Package cfi decodes DWARF call frame information (.eh_frame and .debug_frame) of either byte
// order, in 32- and 64-bit DWARF, and computes the unwinding rules that hold at a program
// counter.
package cfi

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sort"

	"github.com/hpcdap/hpcdap/symbols/dwbuf"
)

// Options describe one section being parsed.
type Options struct {
	EH      bool             // .eh_frame layout (CIE pointers relative, augmentations, pointer encodings)
	Addr    uint64           // the section's link-time address, for pc-relative pointers
	DataRel uint64           // base for DW_EH_PE_datarel (the GOT on some machines)
	TextRel uint64           // base for DW_EH_PE_textrel
	Order   binary.ByteOrder // target byte order
	PtrSize int              // 4 or 8
}

// CIE is a common information entry.
type CIE struct {
	Version      uint8
	Augmentation string
	CodeAlign    uint64
	DataAlign    int64
	RAReg        uint64
	Initial      []byte // initial instructions
	FDEEncoding  byte   // pointer encoding of FDE addresses ('R')
	LSDAEncoding byte   // 'L'
	Signal       bool   // 'S': frames are signal trampolines
	AddrSize     int
	opts         Options
}

// FDE is a frame description entry covering [Begin, End).
type FDE struct {
	Begin, End   uint64
	CIE          *CIE
	Instructions []byte
}

// Table is a sorted set of FDEs from one binary's sections.
type Table struct {
	fdes   []*FDE
	sorted bool
}

// NewTable returns an empty table.
func NewTable() *Table { return &Table{} }

// Len returns the number of FDEs.
func (t *Table) Len() int { return len(t.fdes) }

// FDEs returns the entries, sorted after Sort.
func (t *Table) FDEs() []*FDE { return t.fdes }

// Sort orders the entries by start address and drops later duplicates of a range, keeping the
// first parsed (parse .eh_frame before .debug_frame to prefer it).
func (t *Table) Sort() {
	sort.SliceStable(t.fdes, func(i, j int) bool { return t.fdes[i].Begin < t.fdes[j].Begin })
	out := t.fdes[:0]
	for _, f := range t.fdes {
		if n := len(out); n > 0 && out[n-1].Begin == f.Begin && out[n-1].End == f.End {
			continue
		}
		out = append(out, f)
	}
	t.fdes = out
	t.sorted = true
}

// Lookup returns the FDE covering pc, or nil.
func (t *Table) Lookup(pc uint64) *FDE {
	if !t.sorted {
		t.Sort()
	}
	i := sort.Search(len(t.fdes), func(i int) bool { return t.fdes[i].Begin > pc }) - 1
	// Ranges may nest or overlap (a zero-length FDE before a real one); walk back a little.
	for k := i; k >= 0 && k > i-4; k-- {
		if f := t.fdes[k]; pc >= f.Begin && pc < f.End {
			return f
		}
	}
	return nil
}

// DWARF pointer encodings used in .eh_frame.
const (
	peAbsptr  = 0x00
	peULEB    = 0x01
	peUdata2  = 0x02
	peUdata4  = 0x03
	peUdata8  = 0x04
	peSLEB    = 0x09
	peSdata2  = 0x0a
	peSdata4  = 0x0b
	peSdata8  = 0x0c
	pePCRel   = 0x10
	peTextRel = 0x20
	peDataRel = 0x30
	peFuncRel = 0x40
	peAligned = 0x50
	peIndir   = 0x80
	peOmit    = 0xff
)

// Parse decodes a whole .eh_frame or .debug_frame section and adds its FDEs to the table.
func (t *Table) Parse(data []byte, o Options) (err error) {
	if o.Order == nil {
		return errors.New("cfi: no byte order")
	}
	if o.PtrSize != 4 && o.PtrSize != 8 {
		return fmt.Errorf("cfi: pointer size %d", o.PtrSize)
	}
	cies := map[uint64]*CIE{}
	off := uint64(0)
	for off < uint64(len(data)) {
		start := off
		r := dwbuf.New(data, int(off), o.Order)
		length := uint64(r.U32())
		is64 := false
		if length == 0xffffffff {
			length = r.U64()
			is64 = true
		}
		if r.Err != nil {
			return fmt.Errorf("cfi: entry at %#x: truncated length", start)
		}
		if length == 0 {
			if o.EH {
				break // .eh_frame terminator
			}
			off = uint64(r.Off)
			continue
		}
		body := uint64(r.Off)
		end := body + length
		if end > uint64(len(data)) || end < body {
			return fmt.Errorf("cfi: entry at %#x: length %d runs past the section", start, length)
		}
		idPos := uint64(r.Off)
		var id uint64
		if is64 {
			id = r.U64()
		} else {
			id = uint64(r.U32())
		}
		isCIE := (o.EH && id == 0) || (!o.EH && (id == 0xffffffff || (is64 && id == ^uint64(0))))
		r.Data = data[:end]
		if isCIE {
			c, err := parseCIE(r, o, is64)
			if err != nil {
				return fmt.Errorf("cfi: CIE at %#x: %w", start, err)
			}
			cies[start] = c
		} else {
			var cieOff uint64
			if o.EH {
				cieOff = idPos - id
			} else {
				cieOff = id
			}
			c := cies[cieOff]
			if c == nil {
				c, err = t.cieAt(data, cieOff, o)
				if err != nil {
					return fmt.Errorf("cfi: FDE at %#x: %w", start, err)
				}
				cies[cieOff] = c
			}
			f, err := parseFDE(r, c, o, body)
			if err != nil {
				return fmt.Errorf("cfi: FDE at %#x: %w", start, err)
			}
			if f != nil && f.End > f.Begin {
				t.fdes = append(t.fdes, f)
				t.sorted = false
			}
		}
		off = end
	}
	return nil
}

// cieAt parses a CIE that an FDE refers to before (or without) the sequential walk reaching it.
func (t *Table) cieAt(data []byte, off uint64, o Options) (*CIE, error) {
	if off >= uint64(len(data)) {
		return nil, fmt.Errorf("CIE pointer %#x outside the section", off)
	}
	r := dwbuf.New(data, int(off), o.Order)
	length := uint64(r.U32())
	is64 := false
	if length == 0xffffffff {
		length = r.U64()
		is64 = true
	}
	end := uint64(r.Off) + length
	if r.Err != nil || end > uint64(len(data)) {
		return nil, fmt.Errorf("CIE at %#x truncated", off)
	}
	if is64 {
		r.U64()
	} else {
		r.U32()
	}
	r.Data = data[:end]
	return parseCIE(r, o, is64)
}

func parseCIE(r *dwbuf.Buf, o Options, is64 bool) (*CIE, error) {
	c := &CIE{opts: o, AddrSize: o.PtrSize, FDEEncoding: peAbsptr, LSDAEncoding: peOmit}
	c.Version = r.U8()
	aug := r.CString()
	c.Augmentation = aug
	if c.Version >= 4 {
		c.AddrSize = int(r.U8())
		r.U8() // segment selector size
		if c.AddrSize != 4 && c.AddrSize != 8 {
			return nil, fmt.Errorf("address size %d", c.AddrSize)
		}
	}
	if aug == "eh" {
		r.Skip(o.PtrSize) // the old GNU "eh" augmentation carries a pointer
		aug = ""
	}
	c.CodeAlign = r.Uleb()
	c.DataAlign = r.Sleb()
	if c.Version == 1 {
		c.RAReg = uint64(r.U8())
	} else {
		c.RAReg = r.Uleb()
	}
	if len(aug) > 0 && aug[0] == 'z' {
		n := r.Uleb()
		augEnd := r.Off + int(n)
		if augEnd > len(r.Data) || augEnd < r.Off {
			return nil, errors.New("augmentation data runs past the entry")
		}
		for _, ch := range aug[1:] {
			switch ch {
			case 'R':
				c.FDEEncoding = r.U8()
			case 'L':
				c.LSDAEncoding = r.U8()
			case 'P':
				enc := r.U8()
				if _, err := encoded(r, enc, o, 0); err != nil {
					return nil, fmt.Errorf("personality: %w", err)
				}
			case 'S':
				c.Signal = true
			case 'B', 'G':
				// aarch64 BTI / MTE markers carry no data.
			default:
				// Unknown augmentation: the rest of the data is skipped via its length.
			}
		}
		r.Off = augEnd
	} else {
		for _, ch := range aug {
			if ch == 'S' {
				c.Signal = true
			}
		}
	}
	if r.Err != nil {
		return nil, r.Err
	}
	c.Initial = r.Data[r.Off:]
	return c, nil
}

func parseFDE(r *dwbuf.Buf, c *CIE, o Options, body uint64) (*FDE, error) {
	f := &FDE{CIE: c}
	var begin, n uint64
	var err error
	if o.EH {
		begin, err = encoded(r, c.FDEEncoding, o, 0)
		if err != nil {
			return nil, err
		}
		n, err = encoded(r, c.FDEEncoding&0x0f, o, 0)
		if err != nil {
			return nil, err
		}
	} else {
		if c.AddrSize == 4 {
			begin, n = uint64(r.U32()), uint64(r.U32())
		} else {
			begin, n = r.U64(), r.U64()
		}
	}
	f.Begin, f.End = begin, begin+n
	if len(c.Augmentation) > 0 && c.Augmentation[0] == 'z' {
		l := r.Uleb()
		r.Skip(int(l))
	}
	if r.Err != nil {
		return nil, r.Err
	}
	f.Instructions = r.Data[r.Off:]
	return f, nil
}
