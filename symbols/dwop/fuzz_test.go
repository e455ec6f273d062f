package dwop

import (
	"encoding/binary"
	"errors"
	"testing"
)

// FuzzEval runs arbitrary expressions against an environment with a little memory and a few
// registers; evaluation must end (with a location or an error) and never panic. Seeds are
// expressions gcc 12 emits.
func FuzzEval(f *testing.F) {
	seeds := [][]byte{
		{OpFbreg, 0x6c},                                            // DW_OP_fbreg -20
		{OpCallFrameCFA},                                           // frame base
		{OpAddr, 0x60, 0x40, 0, 0, 0, 0, 0, 0},                     // a global
		{OpBreg0 + 7, 8, OpDeref},                                  // rsp+8, deref
		{OpEntryValue, 1, OpReg0 + 5, OpStackValue},                // -O2 parameter
		{OpReg0 + 3, OpPiece, 4, OpLit0, OpStackValue, OpPiece, 4}, // composite
		{OpImplicitValue, 4, 1, 2, 3, 4},
		{OpPushObjectAddress, OpPlusUconst, 48, OpDeref}, // Fortran descriptor bound
		{OpConst8u, 1, 0, 0, 0, 0, 0, 0, 0, OpGNUPushTLSAddress},
		{OpLit0 + 1, OpLit0 + 2, OpLt, OpBra, 2, 0, OpLit0 + 5, OpSkip, 1, 0, OpLit0 + 7},
	}
	for _, s := range seeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, expr []byte) {
		mem := make([]byte, 256)
		env := &Env{
			AddrSize: 8, Order: binary.LittleEndian, Version: 5,
			Mem: func(addr uint64, p []byte) error {
				if addr > uint64(len(mem)) || addr+uint64(len(p)) > uint64(len(mem)) {
					return errors.New("out of range")
				}
				copy(p, mem[addr:])
				return nil
			},
			Reg: func(n uint64) (uint64, error) {
				if n > 16 {
					return 0, ErrUnavailable
				}
				return n * 8, nil
			},
			FrameBase:     func() (uint64, error) { return 128, nil },
			CFA:           func() (uint64, error) { return 136, nil },
			ObjectAddress: func() (uint64, error) { return 64, nil },
			EntryValue:    func([]byte) (uint64, error) { return 3, nil },
			BaseType:      func(uint64) (BaseType, error) { return BaseType{Size: 4, Encoding: 5}, nil },
			Call:          func(uint64) ([]byte, error) { return expr, nil },
		}
		_, _ = Eval(expr, env)
		_, _ = EvalValue(expr, env)
		_ = Disassemble(expr, binary.LittleEndian, 8)
	})
}
