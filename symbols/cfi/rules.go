package cfi

import (
	"errors"
	"fmt"

	"github.com/hpcdap/hpcdap/symbols/dwbuf"
)

// RuleKind says how a register of the caller is recovered.
type RuleKind uint8

// Register rules of DWARF 5 §6.4.1.
const (
	RuleUndefined     RuleKind = iota // the register cannot be recovered
	RuleSameValue                     // unchanged from the callee
	RuleOffset                        // saved in memory at CFA+Offset
	RuleValOffset                     // value is CFA+Offset
	RuleRegister                      // saved in register Reg
	RuleExpression                    // saved at the address the expression computes (CFA pushed first)
	RuleValExpression                 // value is what the expression computes (CFA pushed first)
	RuleUnspecified                   // no rule given: callee-saved registers keep their value
)

// Rule is how one register is recovered.
type Rule struct {
	Kind   RuleKind
	Offset int64
	Reg    uint64
	Expr   []byte
}

// CFARule is how the canonical frame address is computed: register plus offset, or an
// expression.
type CFARule struct {
	Reg    uint64
	Offset int64
	Expr   []byte // non-nil: DW_CFA_def_cfa_expression
}

// Row is the unwinding table row in effect at a pc.
type Row struct {
	CFA    CFARule
	Regs   map[uint64]Rule
	RAReg  uint64
	Signal bool // the frame is a signal trampoline ('S' augmentation)
	// ArgsSize is the last DW_CFA_GNU_args_size seen.
	ArgsSize uint64
}

// Rule returns the rule for register n (RuleUnspecified when none was given).
func (r *Row) Rule(n uint64) Rule {
	if rule, ok := r.Regs[n]; ok {
		return rule
	}
	return Rule{Kind: RuleUnspecified}
}

// CFA opcodes.
const (
	cfaAdvanceLoc        = 0x40
	cfaOffset            = 0x80
	cfaRestore           = 0xc0
	cfaNop               = 0x00
	cfaSetLoc            = 0x01
	cfaAdvanceLoc1       = 0x02
	cfaAdvanceLoc2       = 0x03
	cfaAdvanceLoc4       = 0x04
	cfaOffsetExtended    = 0x05
	cfaRestoreExtended   = 0x06
	cfaUndefined         = 0x07
	cfaSameValue         = 0x08
	cfaRegister          = 0x09
	cfaRememberState     = 0x0a
	cfaRestoreState      = 0x0b
	cfaDefCFA            = 0x0c
	cfaDefCFARegister    = 0x0d
	cfaDefCFAOffset      = 0x0e
	cfaDefCFAExpression  = 0x0f
	cfaExpression        = 0x10
	cfaOffsetExtendedSF  = 0x11
	cfaDefCFASF          = 0x12
	cfaDefCFAOffsetSF    = 0x13
	cfaValOffset         = 0x14
	cfaValOffsetSF       = 0x15
	cfaValExpression     = 0x16
	cfaMIPSAdvanceLoc8   = 0x1d
	cfaGNUWindowSave     = 0x2d // also DW_CFA_AARCH64_negate_ra_state
	cfaGNUArgsSize       = 0x2e
	cfaGNUNegOffsetExtSF = 0x2f
)

type state struct {
	cfa  CFARule
	regs map[uint64]Rule
}

func (s state) clone() state {
	m := make(map[uint64]Rule, len(s.regs))
	for k, v := range s.regs {
		m[k] = v
	}
	return state{cfa: s.cfa, regs: m}
}

// RowAt runs the CIE's initial instructions and the FDE's instructions up to pc and returns
// the row in effect there.
func (f *FDE) RowAt(pc uint64) (*Row, error) {
	if pc < f.Begin || pc >= f.End {
		return nil, fmt.Errorf("cfi: pc %#x outside FDE [%#x,%#x)", pc, f.Begin, f.End)
	}
	c := f.CIE
	init := state{regs: map[uint64]Rule{}}
	row := &Row{RAReg: c.RAReg, Signal: c.Signal}
	if _, err := execute(c, c.Initial, &init, nil, ^uint64(0), f.Begin, row); err != nil {
		return nil, fmt.Errorf("cfi: CIE initial instructions: %w", err)
	}
	cur := init.clone()
	if _, err := execute(c, f.Instructions, &cur, &init, pc, f.Begin, row); err != nil {
		return nil, fmt.Errorf("cfi: FDE at %#x: %w", f.Begin, err)
	}
	row.CFA = cur.cfa
	row.Regs = cur.regs
	return row, nil
}

// execute interprets instructions until the location passes pc. init is the CIE's state for
// DW_CFA_restore (nil while running the CIE itself).
func execute(c *CIE, ins []byte, s *state, init *state, pc, loc uint64, row *Row) (uint64, error) {
	r := dwbuf.New(ins, 0, c.opts.Order)
	var stack []state
	restore := func(reg uint64) {
		if init != nil {
			if rule, ok := init.regs[reg]; ok {
				s.regs[reg] = rule
				return
			}
		}
		delete(s.regs, reg)
	}
	for r.Off < len(r.Data) {
		op := r.U8()
		var arg byte
		if op&0xc0 != 0 {
			arg = op & 0x3f
			op &= 0xc0
		}
		advance := func(delta uint64) bool {
			loc += delta * c.CodeAlign
			return loc > pc
		}
		switch op {
		case cfaAdvanceLoc:
			if advance(uint64(arg)) {
				return loc, nil
			}
		case cfaOffset:
			s.regs[uint64(arg)] = Rule{Kind: RuleOffset, Offset: int64(r.Uleb()) * c.DataAlign}
		case cfaRestore:
			restore(uint64(arg))
		case cfaNop:
		case cfaSetLoc:
			var v uint64
			var err error
			if c.opts.EH {
				v, err = encoded(r, c.FDEEncoding, c.opts, 0)
			} else if c.AddrSize == 4 {
				v = uint64(r.U32())
			} else {
				v = r.U64()
			}
			if err != nil {
				return loc, err
			}
			if v > pc {
				return loc, nil
			}
			loc = v
		case cfaAdvanceLoc1:
			if advance(uint64(r.U8())) {
				return loc, nil
			}
		case cfaAdvanceLoc2:
			if advance(uint64(r.U16())) {
				return loc, nil
			}
		case cfaAdvanceLoc4:
			if advance(uint64(r.U32())) {
				return loc, nil
			}
		case cfaMIPSAdvanceLoc8:
			if advance(r.U64()) {
				return loc, nil
			}
		case cfaOffsetExtended:
			reg := r.Uleb()
			s.regs[reg] = Rule{Kind: RuleOffset, Offset: int64(r.Uleb()) * c.DataAlign}
		case cfaRestoreExtended:
			restore(r.Uleb())
		case cfaUndefined:
			s.regs[r.Uleb()] = Rule{Kind: RuleUndefined}
		case cfaSameValue:
			s.regs[r.Uleb()] = Rule{Kind: RuleSameValue}
		case cfaRegister:
			reg := r.Uleb()
			s.regs[reg] = Rule{Kind: RuleRegister, Reg: r.Uleb()}
		case cfaRememberState:
			stack = append(stack, s.clone())
		case cfaRestoreState:
			if len(stack) == 0 {
				return loc, errors.New("DW_CFA_restore_state with empty stack")
			}
			// The CFA rule is part of the remembered state (DWARF 5 §6.4.2.4).
			top := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			*s = top
		case cfaDefCFA:
			s.cfa = CFARule{Reg: r.Uleb(), Offset: int64(r.Uleb())}
		case cfaDefCFARegister:
			s.cfa.Reg = r.Uleb()
			s.cfa.Expr = nil
		case cfaDefCFAOffset:
			s.cfa.Offset = int64(r.Uleb())
		case cfaDefCFAExpression:
			n := r.Uleb()
			s.cfa = CFARule{Expr: r.Bytes(n)}
		case cfaExpression:
			reg := r.Uleb()
			n := r.Uleb()
			s.regs[reg] = Rule{Kind: RuleExpression, Expr: r.Bytes(n)}
		case cfaOffsetExtendedSF:
			reg := r.Uleb()
			s.regs[reg] = Rule{Kind: RuleOffset, Offset: r.Sleb() * c.DataAlign}
		case cfaDefCFASF:
			s.cfa = CFARule{Reg: r.Uleb(), Offset: r.Sleb() * c.DataAlign}
		case cfaDefCFAOffsetSF:
			s.cfa.Offset = r.Sleb() * c.DataAlign
		case cfaValOffset:
			reg := r.Uleb()
			s.regs[reg] = Rule{Kind: RuleValOffset, Offset: int64(r.Uleb()) * c.DataAlign}
		case cfaValOffsetSF:
			reg := r.Uleb()
			s.regs[reg] = Rule{Kind: RuleValOffset, Offset: r.Sleb() * c.DataAlign}
		case cfaValExpression:
			reg := r.Uleb()
			n := r.Uleb()
			s.regs[reg] = Rule{Kind: RuleValExpression, Expr: r.Bytes(n)}
		case cfaGNUWindowSave:
			// SPARC register windows / aarch64 return-address signing: no effect on
			// the rules this package evaluates.
		case cfaGNUArgsSize:
			row.ArgsSize = r.Uleb()
		case cfaGNUNegOffsetExtSF:
			reg := r.Uleb()
			s.regs[reg] = Rule{Kind: RuleOffset, Offset: -int64(r.Uleb()) * c.DataAlign}
		default:
			return loc, fmt.Errorf("unknown CFA opcode %#x", op)
		}
		if r.Err != nil {
			return loc, r.Err
		}
	}
	return loc, nil
}
