package ppc64

import (
	"encoding/binary"
	"fmt"
)

// Trap words the project plants or meets (ppc64.md §2.3). Each is an instruction word; store it
// in the target's byte order with PutWord.
const (
	// TrapWordLinux is `tw 31,r0,r0`, spelled `trap`: gdb's software breakpoint on Linux.
	TrapWordLinux uint32 = 0x7fe00008
	// TrapWordCNK is `tw 12,r2,r2` (`twge r2,r2`), the Compute Node Kernel's default
	// breakpoint (TOOL_BREAKPOINT_INSTRUCTION). It always traps because r2 equals itself.
	TrapWordCNK uint32 = 0x7d821008
	// TrapWordTWI is `twi 31,r0,0` (`twui r0,0`), an unconditional D-form trap.
	TrapWordTWI uint32 = 0x0fe00000
	// TrapWordTD is `td 31,r0,r0` (`tdu r0,r0`), an unconditional doubleword trap.
	TrapWordTD uint32 = 0x7fe00088
	// TrapWordTDI is `tdi 31,r0,0` (`tdui r0,0`), an unconditional doubleword D-form trap.
	TrapWordTDI uint32 = 0x0be00000
	// TrapWordNever is `twi 0,r0,0`: TO = 0 never traps, yet the CNK counts it as a trap word.
	TrapWordNever uint32 = 0x0c000000

	// FastTrapBase is the CNK fast breakpoint `twi 14,r31,0x8000|n` with n = 0
	// (TOOL_FASTTRAP_INSTRUCTION); breakpoint n is FastTrapBase | n.
	FastTrapBase uint32 = 0x0ddf8000
	// FastTrapMask selects the fixed bits of a fast-trap word (TOOL_ISFASTTRAP).
	FastTrapMask uint32 = 0xffff8000
	// MaxFastTrap is the largest fast breakpoint number.
	MaxFastTrap = 0x7fff
)

// TO condition bits of a trap instruction. The instruction traps if any selected comparison
// of a (RA) with b (RB or the sign-extended SI) holds.
const (
	TOLessSigned      uint8 = 16 // a < b, signed
	TOGreaterSigned   uint8 = 8  // a > b, signed
	TOEqual           uint8 = 4  // a = b
	TOLessUnsigned    uint8 = 2  // a < b, unsigned
	TOGreaterUnsigned uint8 = 1  // a > b, unsigned
	TOAlways          uint8 = 31 // every condition: traps unconditionally
)

// TrapOp names one of the four fixed-point trap instructions.
type TrapOp uint8

// The trap instructions.
const (
	TW  TrapOp = iota + 1 // tw TO,RA,RB: X-form, compares the low 32 bits
	TD                    // td TO,RA,RB: X-form, compares 64 bits
	TWI                   // twi TO,RA,SI: D-form, low 32 bits against sign-extended SI
	TDI                   // tdi TO,RA,SI: D-form, 64 bits against sign-extended SI
)

// String returns the mnemonic.
func (op TrapOp) String() string {
	switch op {
	case TW:
		return "tw"
	case TD:
		return "td"
	case TWI:
		return "twi"
	case TDI:
		return "tdi"
	}
	return fmt.Sprintf("TrapOp(%d)", uint8(op))
}

// Form is an instruction format of the Power ISA.
type Form uint8

// The two formats trap instructions come in.
const (
	XForm Form = iota + 1 // register-register (tw, td): the "normal" trap form
	DForm                 // register-immediate (twi, tdi): the form of the CNK's fast traps
)

// String names the form.
func (f Form) String() string {
	switch f {
	case XForm:
		return "X-form"
	case DForm:
		return "D-form"
	}
	return fmt.Sprintf("Form(%d)", uint8(f))
}

// Form reports the instruction format of op.
func (op TrapOp) Form() Form {
	if op == TWI || op == TDI {
		return DForm
	}
	return XForm
}

// Doubleword reports whether op compares 64 bits (td, tdi) rather than the low 32 (tw, twi).
func (op TrapOp) Doubleword() bool { return op == TD || op == TDI }

// Trap is a decoded trap instruction. Every bit of the word is represented, so Encode of a
// decoded word gives the word back.
type Trap struct {
	Op TrapOp
	TO uint8 // condition bits, 0..31
	RA uint8 // 0..31
	RB uint8 // 0..31; X-form only
	SI int16 // D-form only
	// Rc is bit 31 of an X-form word. The ISA reserves it (a set bit makes an invalid form),
	// but the CNK's trap test ignores it, so such words still count as traps there.
	Rc bool
}

// Primary and extended opcodes of the trap instructions.
const (
	opcodeTDI = 2
	opcodeTWI = 3
	opcodeX   = 31
	xoTW      = 4
	xoTD      = 68
)

// Encode returns the instruction word, or an error naming the field that is out of range.
func (t Trap) Encode() (uint32, error) {
	if t.TO > 31 {
		return 0, fmt.Errorf("ppc64: encode %v: TO %d out of range 0..31", t.Op, t.TO)
	}
	if t.RA > 31 {
		return 0, fmt.Errorf("ppc64: encode %v: RA %d out of range 0..31", t.Op, t.RA)
	}
	w := uint32(t.TO)<<21 | uint32(t.RA)<<16
	switch t.Op {
	case TW, TD:
		if t.RB > 31 {
			return 0, fmt.Errorf("ppc64: encode %v: RB %d out of range 0..31", t.Op, t.RB)
		}
		if t.SI != 0 {
			return 0, fmt.Errorf("ppc64: encode %v: X-form has no immediate (SI %d)", t.Op, t.SI)
		}
		xo := uint32(xoTW)
		if t.Op == TD {
			xo = xoTD
		}
		w |= opcodeX<<26 | uint32(t.RB)<<11 | xo<<1
		if t.Rc {
			w |= 1
		}
	case TWI, TDI:
		if t.RB != 0 || t.Rc {
			return 0, fmt.Errorf("ppc64: encode %v: D-form has no RB or Rc field", t.Op)
		}
		op := uint32(opcodeTWI)
		if t.Op == TDI {
			op = opcodeTDI
		}
		w |= op<<26 | uint32(uint16(t.SI))
	default:
		return 0, fmt.Errorf("ppc64: encode trap: unknown operation %v", t.Op)
	}
	return w, nil
}

// DecodeTrap decodes w if it is a trap instruction by the CNK's rule (IsTrap): any tw, td, twi
// or tdi, with any TO value and with the X-form Rc bit ignored.
func DecodeTrap(w uint32) (Trap, bool) {
	t := Trap{TO: uint8(w >> 21 & 31), RA: uint8(w >> 16 & 31)}
	switch w >> 26 {
	case opcodeTDI:
		t.Op, t.SI = TDI, int16(uint16(w))
	case opcodeTWI:
		t.Op, t.SI = TWI, int16(uint16(w))
	case opcodeX:
		switch w >> 1 & 0x3ff {
		case xoTW:
			t.Op = TW
		case xoTD:
			t.Op = TD
		default:
			return Trap{}, false
		}
		t.RB = uint8(w >> 11 & 31)
		t.Rc = w&1 != 0
	default:
		return Trap{}, false
	}
	return t, true
}

// IsTrap is the CNK's TOOL_ISTRAP: every tdi and twi (primary opcodes 2 and 3), and tw and td
// (opcode 31, extended opcodes 4 and 68, Rc ignored), whatever the TO field says. SetBreakpoint
// accepts exactly these words, and a 4-byte SetMemory of one into shared text plants a breakpoint.
func IsTrap(w uint32) bool {
	return w&0xf8000000 == 0x08000000 || w&0xfc00077e == 0x7c000008
}

// IsFastTrap is the CNK's TOOL_ISFASTTRAP: the words `twi 14,r31,0x8000|n`.
func IsFastTrap(w uint32) bool { return w&FastTrapMask == FastTrapBase }

// FastTrapWord returns the CNK fast breakpoint word number n (0..MaxFastTrap).
func FastTrapWord(n int) (uint32, error) {
	if n < 0 || n > MaxFastTrap {
		return 0, fmt.Errorf("ppc64: fast trap number %d out of range 0..%d", n, MaxFastTrap)
	}
	return FastTrapBase | uint32(n), nil
}

// FastTrapNumber returns n for a fast-trap word. (The CNK's TOOL_FASTTRAP_NUMBER masks with
// the fixed bits and so does not give n; n is the low 15 bits.)
func FastTrapNumber(w uint32) (int, bool) {
	if !IsFastTrap(w) {
		return 0, false
	}
	return int(w &^ FastTrapMask), true
}

// TrapClass is how the CNK classifies an instruction word (ppc64.md §2.4).
type TrapClass uint8

// The CNK's classes of instruction words.
const (
	NotTrap    TrapClass = iota // not a trap instruction
	NormalTrap                  // a trap: a Notify to the controlling tool when it fires
	FastTrap                    // a fast trap: no Notify when fast breakpoints are enabled
)

// String names the class.
func (c TrapClass) String() string {
	switch c {
	case NotTrap:
		return "not a trap"
	case NormalTrap:
		return "normal trap"
	case FastTrap:
		return "fast trap"
	}
	return fmt.Sprintf("TrapClass(%d)", uint8(c))
}

// Classify applies the CNK's two tests to w. A fast-trap word behaves as a normal breakpoint
// while the controlling tool has fast breakpoints disabled; see NotifyRequired.
func Classify(w uint32) TrapClass {
	switch {
	case IsFastTrap(w):
		return FastTrap
	case IsTrap(w):
		return NormalTrap
	}
	return NotTrap
}

// NotifyRequired is the breakpoint half of the CNK's Tool_IsNotifyRequired: when a SIGTRAP
// with si_code TRAP_BRKPT is taken at a word w, the tool is notified unless w is a fast trap
// and fast breakpoints are enabled for it. (Whether SIGTRAP is in the tool's notify set is
// decided separately.)
func NotifyRequired(w uint32, fastBreakEnabled bool) bool {
	return !(fastBreakEnabled && IsFastTrap(w))
}

// Traps reports whether the instruction traps when RA holds ra and, for the X-form, RB holds
// rb. rb is ignored for the D-form, which compares with SI, and when RA and RB name the same
// register, which holds one value.
func (t Trap) Traps(ra, rb uint64) bool {
	switch {
	case t.Op.Form() == DForm:
		rb = uint64(int64(t.SI))
	case t.RA == t.RB:
		rb = ra
	}
	var sa, sb int64
	var ua, ub uint64
	if t.Op.Doubleword() {
		sa, sb, ua, ub = int64(ra), int64(rb), ra, rb
	} else {
		sa, sb = int64(int32(ra)), int64(int32(rb))
		ua, ub = uint64(uint32(ra)), uint64(uint32(rb))
	}
	return t.TO&TOLessSigned != 0 && sa < sb ||
		t.TO&TOGreaterSigned != 0 && sa > sb ||
		t.TO&TOEqual != 0 && ua == ub ||
		t.TO&TOLessUnsigned != 0 && ua < ub ||
		t.TO&TOGreaterUnsigned != 0 && ua > ub
}

// Unconditional reports whether the instruction traps whatever the registers hold: for
// example `trap` (TO = 31), the CNK's `tw 12,r2,r2` (RA = RB and TO selects "equal"), and the
// CNK's fast trap, whose TO = 14 covers every value of r31 against its negative immediate.
func (t Trap) Unconditional() bool {
	if t.TO&TOEqual == 0 {
		return false // a = b is always possible and would not trap
	}
	if t.Op.Form() == XForm {
		if t.RA == t.RB {
			return true // a = b always
		}
		// Every combination of signed and unsigned order is possible between two registers.
		return t.covers(true, true) && t.covers(true, false) && t.covers(false, true) && t.covers(false, false)
	}
	// D-form: b is fixed, so only some combinations of orders can occur. Work in the
	// comparison width w with M = 2^(w-1); values ≥ M are negative when signed.
	bits := uint(32)
	b := uint64(uint32(int32(t.SI)))
	if t.Op.Doubleword() {
		bits, b = 64, uint64(int64(t.SI))
	}
	m := uint64(1) << (bits - 1)
	top := m<<1 - 1 // 2^w - 1, also correct for w = 64 by wrap-around
	neg := b >= m
	// Feasibility of (signed less, unsigned less), (signed less, unsigned greater), ...
	sltUlt := (!neg && b > 0) || (neg && b > m)
	sltUgt := !neg
	sgtUlt := neg
	sgtUgt := (!neg && b < m-1) || (neg && b < top)
	return (!sltUlt || t.covers(true, true)) && (!sltUgt || t.covers(true, false)) &&
		(!sgtUlt || t.covers(false, true)) && (!sgtUgt || t.covers(false, false))
}

// covers reports whether TO selects a condition true when a is signed-less (or greater) and
// unsigned-less (or greater) than b.
func (t Trap) covers(signedLess, unsignedLess bool) bool {
	s, u := TOGreaterSigned, TOGreaterUnsigned
	if signedLess {
		s = TOLessSigned
	}
	if unsignedLess {
		u = TOLessUnsigned
	}
	return t.TO&(s|u) != 0
}

// toMnemonic holds binutils' extended mnemonic suffixes by TO value.
var toMnemonic = map[uint8]string{
	TOGreaterUnsigned:              "lgt",
	TOLessUnsigned:                 "llt",
	TOEqual:                        "eq",
	TOEqual | TOGreaterUnsigned:    "lge",
	TOEqual | TOLessUnsigned:       "lle",
	TOGreaterSigned:                "gt",
	TOGreaterSigned | TOEqual:      "ge",
	TOLessSigned:                   "lt",
	TOLessSigned | TOEqual:         "le",
	TOLessSigned | TOGreaterSigned: "ne",
	TOAlways:                       "u",
}

// String spells the instruction as GNU objdump does: `trap`, extended mnemonics such as
// `twge r2,r2` and `twui r0,0` where binutils has one, and the plain form otherwise. A word with
// the reserved Rc bit set is not a valid instruction and is spelled `.long 0x...`.
func (t Trap) String() string {
	if t.Rc {
		w, err := t.Encode()
		if err != nil {
			return "(" + err.Error() + ")"
		}
		return fmt.Sprintf(".long 0x%x", w)
	}
	name := t.Op.String()
	suffix, ext := toMnemonic[t.TO]
	switch t.Op.Form() {
	case XForm:
		if t.Op == TW && t.TO == TOAlways && t.RA == 0 && t.RB == 0 {
			return "trap"
		}
		if ext {
			return fmt.Sprintf("%s%s r%d,r%d", name[:2], suffix, t.RA, t.RB)
		}
		return fmt.Sprintf("%s %d,r%d,r%d", name, t.TO, t.RA, t.RB)
	default:
		if ext {
			return fmt.Sprintf("%s%si r%d,%d", name[:2], suffix, t.RA, t.SI)
		}
		return fmt.Sprintf("%s %d,r%d,%d", name, t.TO, t.RA, t.SI)
	}
}

// PutWord returns the four bytes of instruction word w in byte order order, as they lie in
// the target's memory.
func PutWord(order binary.ByteOrder, w uint32) []byte {
	b := make([]byte, 4)
	order.PutUint32(b, w)
	return b
}
