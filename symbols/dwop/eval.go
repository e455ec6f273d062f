package dwop

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/hpcdap/hpcdap/symbols/dwbuf"
)

// ErrUnavailable marks a value that the program state cannot supply: a register not saved in
// an outer frame, an entry value with no matching call site, an empty location. Debuggers show
// such values as "<optimized out>"; callers test with errors.Is.
var ErrUnavailable = errors.New("value is not available")

// PieceKind says where one piece of an object lives.
type PieceKind uint8

// Kinds of location.
const (
	PieceMemory          PieceKind = iota + 1 // at Addr in memory
	PieceRegister                             // in register Reg
	PieceValue                                // an implicit value (Value bytes)
	PieceImplicitPointer                      // a pointer to the object described by DIE PtrDIE, plus PtrOffset
	PieceUndefined                            // optimized out
)

// Piece is one part of a location. A simple location is a single piece with SizeBits 0,
// meaning the whole object.
type Piece struct {
	Kind       PieceKind
	Addr       uint64
	Reg        uint64
	Value      []byte // PieceValue: bytes in target order; take LowBytes for a smaller object
	Stack      bool   // PieceValue produced by DW_OP_stack_value (an integer of the stack's width)
	PtrDIE     uint64 // PieceImplicitPointer: .debug_info offset of the pointed-to variable
	PtrOffset  int64
	SizeBits   uint64
	OffsetBits uint64 // DW_OP_bit_piece offset into the source
}

// Location is the result of evaluating a location expression.
type Location struct {
	Pieces []Piece
}

// Simple reports whether the location is one piece covering the whole object.
func (l Location) Simple() bool { return len(l.Pieces) == 1 && l.Pieces[0].SizeBits == 0 }

// BaseType describes a typed stack entry (DWARF 5 typed operations).
type BaseType struct {
	Size     int
	Encoding int // DW_ATE_*
}

// DW_ATE values used for typed stack arithmetic.
const (
	ateAddress     = 0x01
	ateBoolean     = 0x02
	ateFloat       = 0x04
	ateSigned      = 0x05
	ateSignedChar  = 0x06
	ateUnsigned    = 0x07
	ateUnsignedChr = 0x08
)

// Env supplies what an expression may refer to. Nil functions make the operations that need
// them fail with a clear error.
type Env struct {
	AddrSize int              // bytes in an address (the generic type)
	Order    binary.ByteOrder // target byte order
	Offset64 bool             // 64-bit DWARF (offset size 8 in DW_OP_call_ref, implicit_pointer)
	Version  int              // DWARF version of the unit (implicit_pointer reference size in v2)
	CUOffset uint64           // .debug_info offset of the unit, for CU-relative type references
	AddrBias uint64           // added to DW_OP_addr operands (the module's load bias)

	Mem           func(addr uint64, p []byte) error
	Reg           func(reg uint64) (uint64, error)
	RegBytes      func(reg uint64) ([]byte, error)
	FrameBase     func() (uint64, error)
	CFA           func() (uint64, error)
	ObjectAddress func() (uint64, error)
	TLS           func(offset uint64) (uint64, error)
	EntryValue    func(expr []byte) (uint64, error)
	ParameterRef  func(die uint64) (uint64, error)
	Call          func(die uint64) ([]byte, error)
	BaseType      func(die uint64) (BaseType, error) // die is absolute
	AddrIndex     func(index uint64) (uint64, error)
	VariableValue func(die uint64) (uint64, error)
	// Initial is pushed before evaluation (the CFA for CFI register rules, an object address
	// for DW_AT_data_member_location).
	Initial []uint64
}

type entry struct {
	v uint64
	t *BaseType // nil: generic
}

type machine struct {
	env    *Env
	stack  []entry
	pieces []Piece
	depth  int
	steps  int // operations executed, over nested DW_OP_call evaluations too
}

const maxSteps = 1 << 16

// Eval evaluates a location expression.
func Eval(expr []byte, env *Env) (loc Location, err error) {
	m := &machine{env: env}
	for _, v := range env.Initial {
		m.push(v)
	}
	if len(expr) == 0 {
		return Location{Pieces: []Piece{{Kind: PieceUndefined}}}, nil
	}
	cur, err := m.run(expr)
	if err != nil {
		return Location{}, err
	}
	if len(m.pieces) > 0 {
		return Location{Pieces: m.pieces}, nil
	}
	if cur.Kind == 0 {
		return Location{Pieces: []Piece{{Kind: PieceUndefined}}}, nil
	}
	return Location{Pieces: []Piece{cur}}, nil
}

// EvalValue evaluates an expression that computes a value (DW_AT_upper_bound, CFA rules) and
// returns the top of the stack.
func EvalValue(expr []byte, env *Env) (uint64, error) {
	m := &machine{env: env}
	for _, v := range env.Initial {
		m.push(v)
	}
	cur, err := m.run(expr)
	if err != nil {
		return 0, err
	}
	switch cur.Kind {
	case PieceMemory:
		return cur.Addr, nil
	case PieceValue:
		if cur.Stack && len(cur.Value) <= 8 {
			return uintFromBytes(cur.Value, env.Order), nil
		}
	case PieceRegister:
		if env.Reg == nil {
			return 0, errors.New("dwop: no registers")
		}
		return env.Reg(cur.Reg)
	}
	return 0, fmt.Errorf("dwop: expression does not compute a value")
}

func (m *machine) push(v uint64) { m.stack = append(m.stack, entry{v: v}) }

func (m *machine) pop() (entry, error) {
	if len(m.stack) == 0 {
		return entry{}, errors.New("dwop: stack underflow")
	}
	e := m.stack[len(m.stack)-1]
	m.stack = m.stack[:len(m.stack)-1]
	return e, nil
}

func (m *machine) addrMask() uint64 {
	if m.env.AddrSize == 4 {
		return 0xffffffff
	}
	return ^uint64(0)
}

// run executes expr; it returns the pending (not yet pieced) location, if any.
func (m *machine) run(expr []byte) (Piece, error) {
	m.depth++
	defer func() { m.depth-- }()
	if m.depth > 8 {
		return Piece{}, errors.New("dwop: expressions nest too deeply")
	}
	env := m.env
	r := dwbuf.New(expr, 0, env.Order)
	var cur Piece // location produced by reg/implicit ops, awaiting a piece op
	for r.Off < len(r.Data) {
		if m.steps++; m.steps > maxSteps {
			return Piece{}, errors.New("dwop: expression does not terminate")
		}
		pos := r.Off
		op := r.U8()
		if cur.Kind != 0 && op != OpPiece && op != OpBitPiece && op != OpNop && op != OpGNUUninit {
			return Piece{}, fmt.Errorf("dwop: %s after a register or implicit location", OpName(op))
		}
		switch {
		case op >= OpLit0 && op <= OpLit31:
			m.push(uint64(op - OpLit0))
			continue
		case op >= OpReg0 && op <= OpReg31:
			cur = Piece{Kind: PieceRegister, Reg: uint64(op - OpReg0)}
			continue
		case op >= OpBreg0 && op <= OpBreg31:
			off := r.Sleb()
			v, err := m.reg(uint64(op - OpBreg0))
			if err != nil {
				return Piece{}, err
			}
			m.push(v + uint64(off))
			continue
		}
		switch op {
		case OpAddr:
			m.push(r.Addr(env.AddrSize) + env.AddrBias)
		case OpDeref, OpDerefSize, OpDerefType, OpGNUDerefType:
			size := env.AddrSize
			var bt *BaseType
			if op != OpDeref {
				size = int(r.U8())
			}
			if op == OpDerefType || op == OpGNUDerefType {
				t, err := m.baseType(r.Uleb())
				if err != nil {
					return Piece{}, err
				}
				bt = t
			}
			a, err := m.pop()
			if err != nil {
				return Piece{}, err
			}
			v, err := m.load(a.v, size)
			if err != nil {
				return Piece{}, err
			}
			m.stack = append(m.stack, entry{v: v, t: bt})
		case OpConst1u:
			m.push(uint64(r.U8()))
		case OpConst1s:
			m.push(uint64(int64(int8(r.U8()))))
		case OpConst2u:
			m.push(uint64(r.U16()))
		case OpConst2s:
			m.push(uint64(int64(int16(r.U16()))))
		case OpConst4u:
			m.push(uint64(r.U32()))
		case OpConst4s:
			m.push(uint64(int64(int32(r.U32()))))
		case OpConst8u, OpConst8s:
			m.push(r.U64())
		case OpConstu:
			m.push(r.Uleb())
		case OpConsts:
			m.push(uint64(r.Sleb()))
		case OpDup:
			if len(m.stack) < 1 {
				return Piece{}, errors.New("dwop: DW_OP_dup on empty stack")
			}
			m.stack = append(m.stack, m.stack[len(m.stack)-1])
		case OpDrop:
			if _, err := m.pop(); err != nil {
				return Piece{}, err
			}
		case OpOver:
			if len(m.stack) < 2 {
				return Piece{}, errors.New("dwop: DW_OP_over needs two entries")
			}
			m.stack = append(m.stack, m.stack[len(m.stack)-2])
		case OpPick:
			i := int(r.U8())
			if i >= len(m.stack) {
				return Piece{}, fmt.Errorf("dwop: DW_OP_pick %d with %d entries", i, len(m.stack))
			}
			m.stack = append(m.stack, m.stack[len(m.stack)-1-i])
		case OpSwap:
			n := len(m.stack)
			if n < 2 {
				return Piece{}, errors.New("dwop: DW_OP_swap needs two entries")
			}
			m.stack[n-1], m.stack[n-2] = m.stack[n-2], m.stack[n-1]
		case OpRot:
			n := len(m.stack)
			if n < 3 {
				return Piece{}, errors.New("dwop: DW_OP_rot needs three entries")
			}
			m.stack[n-1], m.stack[n-2], m.stack[n-3] = m.stack[n-2], m.stack[n-3], m.stack[n-1]
		case OpAbs, OpNeg, OpNot:
			if err := m.unary(op); err != nil {
				return Piece{}, err
			}
		case OpAnd, OpDiv, OpMinus, OpMod, OpMul, OpOr, OpPlus, OpShl, OpShr, OpShra, OpXor,
			OpEq, OpGe, OpGt, OpLe, OpLt, OpNe:
			if err := m.binary(op); err != nil {
				return Piece{}, err
			}
		case OpPlusUconst:
			a, err := m.pop()
			if err != nil {
				return Piece{}, err
			}
			a.v += r.Uleb()
			m.stack = append(m.stack, a)
		case OpBra:
			off := int16(r.U16())
			c, err := m.pop()
			if err != nil {
				return Piece{}, err
			}
			if c.v != 0 {
				if err := jump(r, int(off)); err != nil {
					return Piece{}, err
				}
			}
		case OpSkip:
			if err := jump(r, int(int16(r.U16()))); err != nil {
				return Piece{}, err
			}
		case OpRegx:
			cur = Piece{Kind: PieceRegister, Reg: r.Uleb()}
		case OpFbreg:
			off := r.Sleb()
			if env.FrameBase == nil {
				return Piece{}, errors.New("dwop: DW_OP_fbreg outside a function")
			}
			fb, err := env.FrameBase()
			if err != nil {
				return Piece{}, err
			}
			m.push(fb + uint64(off))
		case OpBregx:
			reg := r.Uleb()
			off := r.Sleb()
			v, err := m.reg(reg)
			if err != nil {
				return Piece{}, err
			}
			m.push(v + uint64(off))
		case OpPiece, OpBitPiece:
			var size, offset uint64
			if op == OpPiece {
				size = r.Uleb() * 8
			} else {
				size = r.Uleb()
				offset = r.Uleb()
			}
			p := cur
			cur = Piece{}
			if p.Kind == 0 {
				if len(m.stack) == 0 {
					p = Piece{Kind: PieceUndefined}
				} else {
					a, _ := m.pop()
					p = Piece{Kind: PieceMemory, Addr: a.v}
				}
			}
			p.SizeBits, p.OffsetBits = size, offset
			m.pieces = append(m.pieces, p)
		case OpNop, OpGNUUninit:
		case OpPushObjectAddress:
			if env.ObjectAddress == nil {
				return Piece{}, errors.New("dwop: DW_OP_push_object_address without an object")
			}
			a, err := env.ObjectAddress()
			if err != nil {
				return Piece{}, err
			}
			m.push(a)
		case OpCall2, OpCall4, OpCallRef:
			var die uint64
			switch op {
			case OpCall2:
				die = env.CUOffset + uint64(r.U16())
			case OpCall4:
				die = env.CUOffset + uint64(r.U32())
			default:
				die = r.Offset(env.Offset64)
			}
			if env.Call == nil {
				return Piece{}, fmt.Errorf("dwop: %s unsupported here", OpName(op))
			}
			sub, err := env.Call(die)
			if err != nil {
				return Piece{}, err
			}
			p, err := m.run(sub)
			if err != nil {
				return Piece{}, err
			}
			if p.Kind != 0 {
				cur = p
			}
		case OpFormTLSAddress, OpGNUPushTLSAddress:
			a, err := m.pop()
			if err != nil {
				return Piece{}, err
			}
			if env.TLS == nil {
				return Piece{}, errors.New("dwop: thread-local storage is not available")
			}
			v, err := env.TLS(a.v)
			if err != nil {
				return Piece{}, err
			}
			m.push(v)
		case OpCallFrameCFA:
			if env.CFA == nil {
				return Piece{}, errors.New("dwop: no canonical frame address")
			}
			v, err := env.CFA()
			if err != nil {
				return Piece{}, err
			}
			m.push(v)
		case OpImplicitValue:
			n := r.Uleb()
			b := r.Bytes(n)
			cur = Piece{Kind: PieceValue, Value: append([]byte(nil), b...)}
		case OpStackValue:
			e, err := m.pop()
			if err != nil {
				return Piece{}, err
			}
			size := env.AddrSize
			if e.t != nil {
				size = e.t.Size
			}
			b := make([]byte, 8)
			env.Order.PutUint64(b, e.v)
			if env.Order == binary.BigEndian {
				b = b[8-min(size, 8):]
			} else {
				b = b[:min(size, 8)]
			}
			cur = Piece{Kind: PieceValue, Value: b, Stack: true}
		case OpImplicitPointer, OpGNUImplicitPtr:
			var die uint64
			if env.Version <= 2 {
				die = r.Addr(env.AddrSize)
			} else {
				die = r.Offset(env.Offset64)
			}
			cur = Piece{Kind: PieceImplicitPointer, PtrDIE: die, PtrOffset: r.Sleb()}
		case OpAddrx, OpConstx, OpGNUAddrIndex, OpGNUConstIndex:
			idx := r.Uleb()
			if env.AddrIndex == nil {
				return Piece{}, fmt.Errorf("dwop: %s without .debug_addr", OpName(op))
			}
			v, err := env.AddrIndex(idx)
			if err != nil {
				return Piece{}, err
			}
			m.push(v)
		case OpEntryValue, OpGNUEntryValue:
			n := r.Uleb()
			sub := r.Bytes(n)
			if env.EntryValue == nil {
				return Piece{}, fmt.Errorf("dwop: entry value: %w", ErrUnavailable)
			}
			v, err := env.EntryValue(sub)
			if err != nil {
				return Piece{}, err
			}
			m.push(v)
		case OpConstType, OpGNUConstType:
			t, err := m.baseType(r.Uleb())
			if err != nil {
				return Piece{}, err
			}
			n := int(r.U8())
			b := r.Bytes(uint64(n))
			if n > 8 {
				return Piece{}, fmt.Errorf("dwop: %d-byte typed constant unsupported", n)
			}
			m.stack = append(m.stack, entry{v: uintFromBytes(b, env.Order), t: t})
		case OpRegvalType, OpGNURegvalType:
			reg := r.Uleb()
			t, err := m.baseType(r.Uleb())
			if err != nil {
				return Piece{}, err
			}
			v, err := m.reg(reg)
			if err != nil {
				return Piece{}, err
			}
			if t != nil && t.Size < 8 {
				v &= (1 << (8 * uint(t.Size))) - 1
			}
			m.stack = append(m.stack, entry{v: v, t: t})
		case OpConvert, OpGNUConvert, OpReinterpret, OpGNUReinterpret:
			t, err := m.baseType(r.Uleb())
			if err != nil {
				return Piece{}, err
			}
			e, err := m.pop()
			if err != nil {
				return Piece{}, err
			}
			if op == OpConvert || op == OpGNUConvert {
				e = convert(e, t, env.AddrSize)
			} else {
				e.t = t
			}
			m.stack = append(m.stack, e)
		case OpGNUParameterRef:
			die := env.CUOffset + uint64(r.U32())
			if env.ParameterRef == nil {
				return Piece{}, fmt.Errorf("dwop: parameter reference: %w", ErrUnavailable)
			}
			v, err := env.ParameterRef(die)
			if err != nil {
				return Piece{}, err
			}
			m.push(v)
		case OpGNUVariableValue:
			die := r.Offset(env.Offset64)
			if env.VariableValue == nil {
				return Piece{}, errors.New("dwop: DW_OP_GNU_variable_value unsupported here")
			}
			v, err := env.VariableValue(die)
			if err != nil {
				return Piece{}, err
			}
			m.push(v)
		case OpXderef, OpXderefSize, OpXderefType:
			return Piece{}, fmt.Errorf("dwop: %s (address spaces) unsupported", OpName(op))
		default:
			return Piece{}, fmt.Errorf("dwop: unknown operation %#x at offset %d", op, pos)
		}
		if r.Err != nil {
			return Piece{}, fmt.Errorf("dwop: %s at offset %d: %w", OpName(op), pos, r.Err)
		}
	}
	if r.Err != nil {
		return Piece{}, r.Err
	}
	if cur.Kind != 0 {
		return cur, nil
	}
	if len(m.pieces) > 0 {
		return Piece{}, nil
	}
	if len(m.stack) == 0 {
		if m.depth > 1 {
			return Piece{}, nil
		}
		return Piece{}, errors.New("dwop: expression leaves an empty stack")
	}
	if m.depth > 1 {
		return Piece{}, nil // a DW_OP_call leaves its result on the shared stack
	}
	top := m.stack[len(m.stack)-1]
	return Piece{Kind: PieceMemory, Addr: top.v & m.addrMask()}, nil
}

func (m *machine) reg(n uint64) (uint64, error) {
	if m.env.Reg == nil {
		return 0, fmt.Errorf("dwop: register %d: %w", n, ErrUnavailable)
	}
	return m.env.Reg(n)
}

func (m *machine) baseType(off uint64) (*BaseType, error) {
	if off == 0 {
		return nil, nil // the generic type
	}
	if m.env.BaseType == nil {
		return nil, errors.New("dwop: typed operation without type information")
	}
	t, err := m.env.BaseType(m.env.CUOffset + off)
	if err != nil {
		return nil, err
	}
	return &t, nil
}

func (m *machine) load(addr uint64, size int) (uint64, error) {
	if size <= 0 || size > 8 {
		return 0, fmt.Errorf("dwop: dereference of %d bytes", size)
	}
	if m.env.Mem == nil {
		return 0, errors.New("dwop: no memory")
	}
	b := make([]byte, size)
	if err := m.env.Mem(addr&m.addrMask(), b); err != nil {
		return 0, err
	}
	return uintFromBytes(b, m.env.Order), nil
}

func uintFromBytes(b []byte, order binary.ByteOrder) uint64 {
	var v uint64
	if order == binary.BigEndian {
		for _, c := range b {
			v = v<<8 | uint64(c)
		}
	} else {
		for i := len(b) - 1; i >= 0; i-- {
			v = v<<8 | uint64(b[i])
		}
	}
	return v
}

// LowBytes returns the n least significant bytes of an integer held in b (target order), the
// part an object smaller than a register or stack entry occupies.
func LowBytes(b []byte, n int, order binary.ByteOrder) []byte {
	if n >= len(b) {
		return b
	}
	if order == binary.BigEndian {
		return b[len(b)-n:]
	}
	return b[:n]
}
