package dwop

import (
	"encoding/binary"
	"errors"
	"math"
	"testing"
)

// testEnv has registers rN = 100*N and memory where every 8-byte word at address a holds
// a+1000.
func testEnv() *Env {
	return &Env{
		AddrSize: 8, Order: binary.LittleEndian, Version: 5, CUOffset: 0x100,
		Reg: func(n uint64) (uint64, error) {
			if n == 99 {
				return 0, ErrUnavailable
			}
			return 100 * n, nil
		},
		Mem: func(addr uint64, p []byte) error {
			var w [8]byte
			binary.LittleEndian.PutUint64(w[:], addr+1000)
			copy(p, w[:])
			return nil
		},
		FrameBase:  func() (uint64, error) { return 5000, nil },
		CFA:        func() (uint64, error) { return 6000, nil },
		EntryValue: func(expr []byte) (uint64, error) { return 42, nil },
		BaseType: func(die uint64) (BaseType, error) {
			switch die {
			case 0x110:
				return BaseType{Size: 8, Encoding: ateFloat}, nil
			case 0x120:
				return BaseType{Size: 4, Encoding: ateSigned}, nil
			}
			return BaseType{}, errors.New("no such type")
		},
	}
}

func uleb(v uint64) []byte {
	var b []byte
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v != 0 {
			b = append(b, c|0x80)
			continue
		}
		return append(b, c)
	}
}

func cat(parts ...[]byte) []byte {
	var out []byte
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// TestValues checks stack arithmetic against the semantics DWARF 5 §2.5 defines.
func TestValues(t *testing.T) {
	f64 := make([]byte, 8)
	binary.LittleEndian.PutUint64(f64, math.Float64bits(2.5))
	cases := []struct {
		name string
		expr []byte
		want uint64
	}{
		{"lit add", []byte{OpLit0 + 3, OpLit0 + 4, OpPlus}, 7},
		{"dup mul", []byte{OpLit0 + 6, OpDup, OpMul}, 36},
		{"over minus", []byte{OpLit0 + 9, OpLit0 + 2, OpOver, OpMinus, OpDrop}, 9},
		{"pick", []byte{OpLit0 + 1, OpLit0 + 2, OpLit0 + 3, OpPick, 2}, 1},
		{"swap", []byte{OpLit0 + 10, OpLit0 + 3, OpSwap, OpMinus}, ^uint64(6)},
		// rot moves the top entry to third place: 1 2 3 becomes 3 1 2.
		{"rot", []byte{OpLit0 + 1, OpLit0 + 2, OpLit0 + 3, OpRot, OpDrop, OpDrop}, 3},
		{"signed div", []byte{OpConst1s, 0xf9, OpLit0 + 2, OpDiv}, ^uint64(2)},
		{"mod", []byte{OpLit0 + 17, OpLit0 + 5, OpMod}, 2},
		{"shifts", []byte{OpLit0 + 1, OpLit0 + 10, OpShl, OpLit0 + 3, OpShr}, 128},
		{"shra", []byte{OpConst1s, 0xf0, OpLit0 + 2, OpShra}, ^uint64(3)},
		{"compare", []byte{OpLit0 + 3, OpLit0 + 5, OpLt, OpLit0 + 5, OpLit0 + 5, OpGe, OpPlus}, 2},
		{"bra taken", []byte{OpLit0 + 1, OpBra, 4, 0, OpLit0 + 7, OpSkip, 1, 0, OpLit0 + 9}, 9},
		{"bra not taken", []byte{OpLit0, OpBra, 4, 0, OpLit0 + 7, OpSkip, 1, 0, OpLit0 + 9}, 7},
		{"abs neg not", []byte{OpConst1s, 0xfb, OpAbs, OpNeg, OpNot}, 4},
		{"breg", cat([]byte{OpBreg0 + 5}, []byte{0x7c}), 496},
		{"bregx deref", cat([]byte{OpBregx}, uleb(3), []byte{8, OpDeref}), 1308},
		{"deref_size", []byte{OpLit0 + 8, OpDerefSize, 2}, 1008},
		{"fbreg", []byte{OpFbreg, 0x74}, 4988},
		{"call_frame_cfa", []byte{OpCallFrameCFA}, 6000},
		{"plus_uconst", cat([]byte{OpLit0 + 1, OpPlusUconst}, uleb(300)), 301},
		{"entry value", []byte{OpEntryValue, 1, OpReg0 + 5, OpLit0 + 1, OpPlus}, 43},
		{"typed float to int", cat([]byte{OpConstType}, uleb(0x10), []byte{8}, f64,
			[]byte{OpConstType}, uleb(0x10), []byte{8}, f64, []byte{OpMul, OpConvert}, uleb(0x20)), 6},
	}
	for _, c := range cases {
		got, err := EvalValue(c.expr, testEnv())
		if err != nil || got != c.want {
			t.Errorf("%s (%s): got %d, %v; want %d", c.name, Disassemble(c.expr, binary.LittleEndian, 8), got, err, c.want)
		}
	}
}

// TestLocations checks the location kinds of DWARF 5 §2.6, using the spec's examples.
func TestLocations(t *testing.T) {
	// DW_OP_reg3 DW_OP_piece 4 DW_OP_reg10 DW_OP_piece 2: a 6-byte variable in two registers.
	loc, err := Eval([]byte{OpReg0 + 3, OpPiece, 4, OpReg0 + 10, OpPiece, 2}, testEnv())
	if err != nil || len(loc.Pieces) != 2 || loc.Pieces[0].Kind != PieceRegister || loc.Pieces[0].Reg != 3 ||
		loc.Pieces[0].SizeBits != 32 || loc.Pieces[1].Reg != 10 || loc.Pieces[1].SizeBits != 16 {
		t.Errorf("register pieces: %+v, %v", loc, err)
	}
	// DW_OP_breg11 44: memory at r11+44.
	loc, err = Eval([]byte{OpBreg0 + 11, 44}, testEnv())
	if err != nil || !loc.Simple() || loc.Pieces[0].Kind != PieceMemory || loc.Pieces[0].Addr != 1144 {
		t.Errorf("memory: %+v, %v", loc, err)
	}
	// An empty piece is optimized out; a value piece from the stack.
	loc, err = Eval([]byte{OpPiece, 4, OpLit0 + 7, OpStackValue, OpPiece, 4}, testEnv())
	if err != nil || loc.Pieces[0].Kind != PieceUndefined || loc.Pieces[1].Kind != PieceValue ||
		LowBytes(loc.Pieces[1].Value, 4, binary.LittleEndian)[0] != 7 {
		t.Errorf("optimized-out piece: %+v, %v", loc, err)
	}
	loc, err = Eval([]byte{OpImplicitValue, 3, 1, 2, 3}, testEnv())
	if err != nil || loc.Pieces[0].Kind != PieceValue || len(loc.Pieces[0].Value) != 3 {
		t.Errorf("implicit value: %+v, %v", loc, err)
	}
	loc, err = Eval([]byte{OpImplicitPointer, 0x44, 0, 0, 0, 0x08}, testEnv())
	if err != nil || loc.Pieces[0].Kind != PieceImplicitPointer || loc.Pieces[0].PtrDIE != 0x44 ||
		loc.Pieces[0].PtrOffset != 8 {
		t.Errorf("implicit pointer: %+v, %v", loc, err)
	}
	// A bit piece records its size and offset.
	loc, err = Eval([]byte{OpReg0 + 1, OpBitPiece, 3, 5}, testEnv())
	if err != nil || loc.Pieces[0].SizeBits != 3 || loc.Pieces[0].OffsetBits != 5 {
		t.Errorf("bit piece: %+v, %v", loc, err)
	}
	// An empty expression and an unavailable register.
	loc, err = Eval(nil, testEnv())
	if err != nil || loc.Pieces[0].Kind != PieceUndefined {
		t.Errorf("empty: %+v, %v", loc, err)
	}
	if _, err := Eval([]byte{OpBreg0 + 31, 0}, &Env{AddrSize: 8, Order: binary.LittleEndian}); !errors.Is(err, ErrUnavailable) {
		t.Errorf("missing register: %v", err)
	}
	if _, err := Eval([]byte{OpBregx, 99, 0}, testEnv()); !errors.Is(err, ErrUnavailable) {
		t.Errorf("unavailable register: %v", err)
	}
}

// TestErrors checks that malformed expressions fail cleanly.
func TestErrors(t *testing.T) {
	for _, expr := range [][]byte{
		{OpPlus},                    // underflow
		{0x01},                      // unknown operation
		{OpConst4u, 1, 2},           // truncated operand
		{OpLit0, OpSkip, 0x80, 0},   // branch out of range
		{OpLit0 + 1, OpLit0, OpDiv}, // division by zero
		{OpReg0 + 1, OpLit0},        // operation after a register location
	} {
		if _, err := Eval(expr, testEnv()); err == nil {
			t.Errorf("%x: no error", expr)
		}
	}
}
