package ppc64

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"

	"golang.org/x/arch/ppc64/ppc64asm"
)

// Inst is one decoded instruction.
type Inst struct {
	Addr   uint64        // where the instruction lies
	Len    int           // 4, or 8 for a prefixed instruction (Power ISA 3.1)
	Word   uint32        // the instruction word (the prefix word when Len is 8)
	Suffix uint32        // the second word of a prefixed instruction
	Op     ppc64asm.Op   // 0 when the word is not a known instruction
	Text   string        // GNU assembler syntax, spelled as GNU objdump spells it
	inst   ppc64asm.Inst // the decoder's view, for the formatting rules
}

// ErrShort reports fewer bytes than an instruction needs.
var ErrShort = errors.New("ppc64: truncated instruction")

// The decoder initialises package state on its first call; make that first call once, so
// concurrent callers do not race on it.
var decoderReady sync.Once

// Decode decodes the instruction at the start of b, which lies at addr in byte order order.
// A word that is not an instruction decodes as objdump shows it, `.long 0x...`, with Op 0 and
// Len 4; only fewer than 4 bytes (or a prefix without its suffix) give an error.
func Decode(b []byte, addr uint64, order binary.ByteOrder) (Inst, error) {
	if len(b) < 4 {
		return Inst{}, fmt.Errorf("ppc64: decode at %#x: %w (%d bytes)", addr, ErrShort, len(b))
	}
	decoderReady.Do(func() { ppc64asm.Decode([]byte{0x60, 0, 0, 0}, binary.BigEndian) })
	word := order.Uint32(b)
	in := Inst{Addr: addr, Len: 4, Word: word}
	d, err := ppc64asm.Decode(b, order)
	if err != nil || d.Op == 0 {
		if word>>26 == 1 && len(b) < 8 {
			return Inst{}, fmt.Errorf("ppc64: decode at %#x: %w (prefixed instruction)", addr, ErrShort)
		}
		in.Text = fmt.Sprintf(".long 0x%x", word)
		return in, nil
	}
	in.Op, in.Len, in.Suffix, in.inst = d.Op, d.Len, d.SuffixEnc, d
	in.Text = format(d, addr)
	return in, nil
}

// Disassemble decodes code, which lies at addr, instruction by instruction. Trailing bytes
// that do not make a whole word are left out.
func Disassemble(code []byte, addr uint64, order binary.ByteOrder) []Inst {
	var out []Inst
	for off := 0; off+4 <= len(code); {
		in, err := Decode(code[off:], addr+uint64(off), order)
		if err != nil {
			// A prefix at the very end: show it as data, as objdump does.
			w := order.Uint32(code[off:])
			in = Inst{Addr: addr + uint64(off), Len: 4, Word: w, Text: fmt.Sprintf(".long 0x%x", w)}
		}
		out = append(out, in)
		off += in.Len
	}
	return out
}

// String returns the instruction's text.
func (i Inst) String() string { return i.Text }

// Next returns the address of the instruction that follows i in memory.
func (i Inst) Next() uint64 { return i.Addr + uint64(i.Len) }

// Primary opcodes and XL-form extended opcodes of the branch instructions.
const (
	opcodeBC   = 16
	opcodeB    = 18
	opcodeXL   = 19
	xoBCLR     = 16
	xoBCCTR    = 528
	xoBCTAR    = 560
	boAlways   = 0x14 // BO bits that make a branch unconditional (1z1zz)
	boPCReader = 20
	biPCReader = 31
)

// BranchKind classifies a branch instruction.
type BranchKind uint8

// Kinds of branch.
const (
	NotBranch    BranchKind = iota
	BranchDirect            // b, ba, bc, bca and their linking forms: the target is in the word
	BranchLR                // bclr, bclrl (blr, blrl, ...): to the link register
	BranchCTR               // bcctr, bcctrl (bctr, bctrl, ...): to the count register
	BranchTAR               // bctar, bctarl: to the target address register
)

// Branch returns the kind of branch i is (NotBranch for any other instruction).
func (i Inst) Branch() BranchKind {
	if i.Len != 4 {
		return NotBranch
	}
	switch i.Word >> 26 {
	case opcodeB, opcodeBC:
		return BranchDirect
	case opcodeXL:
		switch i.Word >> 1 & 0x3ff {
		case xoBCLR:
			return BranchLR
		case xoBCCTR:
			return BranchCTR
		case xoBCTAR:
			return BranchTAR
		}
	}
	return NotBranch
}

// Links reports whether i is a branch that sets the link register (LK = 1).
func (i Inst) Links() bool { return i.Branch() != NotBranch && i.Word&1 != 0 }

// IsCall reports whether i calls a subroutine: a branch that sets the link register, such as
// bl, bctrl or blrl, so that a debugger stepping over it plants a breakpoint at Next. The idiom
// `bcl 20,31,.+4`, which only reads the program counter into the link register, is not a call.
func (i Inst) IsCall() bool {
	if !i.Links() {
		return false
	}
	if i.Word>>26 == opcodeBC && i.bo() == boPCReader && i.bi() == biPCReader {
		if t, ok := i.Target(); ok && t == i.Next() {
			return false
		}
	}
	return true
}

// IsReturn reports whether i is an unconditional return: blr.
func (i Inst) IsReturn() bool {
	return i.Branch() == BranchLR && !i.Links() && i.bo()&boAlways == boAlways
}

// Conditional reports whether i is a branch that may fall through to Next: its BO field tests
// a condition bit or decrements the count register.
func (i Inst) Conditional() bool {
	switch i.Branch() {
	case NotBranch:
		return false
	case BranchDirect:
		if i.Word>>26 == opcodeB {
			return false
		}
	}
	return i.bo()&boAlways != boAlways
}

// Target returns the destination of a direct branch (b, bl, bc, ... with absolute forms
// honoured). Branches through LR, CTR or TAR have no static target.
func (i Inst) Target() (uint64, bool) {
	if i.Branch() != BranchDirect {
		return 0, false
	}
	var disp int64
	if i.Word>>26 == opcodeB {
		disp = int64(int32(i.Word&0x03fffffc<<6) >> 6) // LI||0b00, sign-extended from 26 bits
	} else {
		disp = int64(int16(i.Word & 0xfffc)) // BD||0b00, sign-extended from 16 bits
	}
	if i.Word&2 != 0 { // AA: absolute address
		return uint64(disp), true
	}
	return i.Addr + uint64(disp), true
}

func (i Inst) bo() uint32 { return i.Word >> 21 & 31 }
func (i Inst) bi() uint32 { return i.Word >> 16 & 31 }
