package bpcode

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// Machine is what a program reads: the trapped thread's registers by DWARF number and its
// process's memory.
type Machine interface {
	Register(dwarf int) (uint64, error)
	ReadMemory(addr uint64, buf []byte) error
}

// ModuleBiases is a Machine that knows where the modules of a program's module table (a list
// the program travels with) are loaded: the load bias of module i.
type ModuleBiases interface {
	ModuleBias(i int) (uint64, error)
}

// errAssert is the failure of OpAssert.
var errAssert = errors.New("bpcode: not the place the program was compiled for")

// Eval runs the program against m, with bias as the load bias of the binary it was compiled
// for, and returns the word it leaves. Errors (a register or memory that cannot be read, a
// division by zero) end it.
func (p *Program) Eval(m Machine, bias uint64) (uint64, error) {
	var st [MaxStack + 1]uint64
	sp := 0
	code := p.Code
	order := binary.ByteOrder(binary.LittleEndian)
	if p.BigEndian {
		order = binary.BigEndian
	}
	pop := func() uint64 {
		if sp == 0 {
			return 0 // not reached: Decode checked the depth
		}
		sp--
		return st[sp]
	}
	push := func(v uint64) {
		if sp < len(st) {
			st[sp] = v
			sp++
		}
	}
	for i := 0; i < len(code); {
		op := Op(code[i])
		n := op.operandSize()
		if i+1+n > len(code) {
			return 0, fmt.Errorf("bpcode: %v at %d: operand past the end", op, i)
		}
		arg := code[i+1 : i+1+n]
		next := i + 1 + n
		switch op {
		case OpConst:
			push(binary.LittleEndian.Uint64(arg))
		case OpReg:
			r := int(binary.LittleEndian.Uint16(arg))
			v, err := m.Register(r)
			if err != nil {
				return 0, fmt.Errorf("register %d: %w", r, err)
			}
			push(v)
		case OpBias:
			push(bias)
		case OpLoad:
			addr := pop()
			var buf [8]byte
			s := int(arg[0])
			if err := m.ReadMemory(addr, buf[:s]); err != nil {
				return 0, fmt.Errorf("Cannot access memory at address %#x", addr)
			}
			switch s {
			case 1:
				push(uint64(buf[0]))
			case 2:
				push(uint64(order.Uint16(buf[:])))
			case 4:
				push(uint64(order.Uint32(buf[:])))
			default:
				push(order.Uint64(buf[:]))
			}
		case OpSext:
			v, bits := pop(), 64-8*uint(arg[0])
			push(uint64(int64(v<<bits) >> bits))
		case OpZext:
			v, bits := pop(), 64-8*uint(arg[0])
			push(v << bits >> bits)
		case OpNeg:
			push(-pop())
		case OpNot:
			push(^pop())
		case OpLNot:
			push(b2u(pop() == 0))
		case OpFNeg:
			push(math.Float64bits(-math.Float64frombits(pop())))
		case OpS2F:
			push(math.Float64bits(float64(int64(pop()))))
		case OpU2F:
			push(math.Float64bits(float64(pop())))
		case OpF2S:
			push(uint64(int64(math.Float64frombits(pop()))))
		case OpF32:
			push(math.Float64bits(float64(math.Float32frombits(uint32(pop())))))
		case OpDup:
			v := pop()
			push(v)
			push(v)
		case OpSwap:
			b, a := pop(), pop()
			push(b)
			push(a)
		case OpPop:
			pop()
		case OpIfZero:
			if pop() == 0 {
				next = int(binary.LittleEndian.Uint16(arg))
			}
		case OpGoto:
			next = int(binary.LittleEndian.Uint16(arg))
		case OpModBias:
			mb, ok := m.(ModuleBiases)
			if !ok {
				return 0, fmt.Errorf("bpcode: module %d: no module table", arg[0])
			}
			v, err := mb.ModuleBias(int(arg[0]))
			if err != nil {
				return 0, err
			}
			push(v)
		case OpAssert:
			if pop() == 0 {
				return 0, errAssert
			}
		default:
			b, a := pop(), pop()
			v, err := binop(op, a, b)
			if err != nil {
				return 0, err
			}
			push(v)
		}
		if next <= i {
			return 0, fmt.Errorf("bpcode: %v at %d jumps backward", op, i)
		}
		i = next
	}
	if sp != 1 {
		return 0, fmt.Errorf("bpcode: program ends with %d words on the stack", sp)
	}
	return st[0], nil
}

func b2u(c bool) uint64 {
	if c {
		return 1
	}
	return 0
}

// binop applies a two-operand operation.
func binop(op Op, a, b uint64) (uint64, error) {
	fa, fb := math.Float64frombits(a), math.Float64frombits(b)
	switch op {
	case OpAdd:
		return a + b, nil
	case OpSub:
		return a - b, nil
	case OpMul:
		return a * b, nil
	case OpDivS, OpRemS, OpDivU, OpRemU:
		if b == 0 {
			return 0, fmt.Errorf("Division by zero")
		}
		switch op {
		case OpDivS:
			if int64(b) == -1 {
				return -a, nil // MinInt64 / -1 wraps, as the machine's would not trap here
			}
			return uint64(int64(a) / int64(b)), nil
		case OpRemS:
			if int64(b) == -1 {
				return 0, nil
			}
			return uint64(int64(a) % int64(b)), nil
		case OpDivU:
			return a / b, nil
		}
		return a % b, nil
	case OpAnd:
		return a & b, nil
	case OpOr:
		return a | b, nil
	case OpXor:
		return a ^ b, nil
	case OpShl:
		if b >= 64 {
			return 0, nil
		}
		return a << b, nil
	case OpShrS:
		if b >= 64 {
			b = 63
		}
		return uint64(int64(a) >> b), nil
	case OpShrU:
		if b >= 64 {
			return 0, nil
		}
		return a >> b, nil
	case OpEq:
		return b2u(a == b), nil
	case OpNe:
		return b2u(a != b), nil
	case OpLtS:
		return b2u(int64(a) < int64(b)), nil
	case OpLtU:
		return b2u(a < b), nil
	case OpLeS:
		return b2u(int64(a) <= int64(b)), nil
	case OpLeU:
		return b2u(a <= b), nil
	case OpFAdd:
		return math.Float64bits(fa + fb), nil
	case OpFSub:
		return math.Float64bits(fa - fb), nil
	case OpFMul:
		return math.Float64bits(fa * fb), nil
	case OpFDiv:
		return math.Float64bits(fa / fb), nil
	case OpFEq:
		return b2u(fa == fb), nil
	case OpFNe:
		return b2u(fa != fb), nil
	case OpFLt:
		return b2u(fa < fb), nil
	case OpFLe:
		return b2u(fa <= fb), nil
	}
	return 0, fmt.Errorf("bpcode: unknown operation %v", op)
}

// Builder assembles a program. Labels are patched when the code is finished.
type Builder struct {
	code    []byte
	fixups  map[int]int // operand offset → label
	targets []int       // label → code offset (-1 until placed)
}

// Emit appends an operation without operand.
func (b *Builder) Emit(op Op) { b.code = append(b.code, byte(op)) }

// Const appends a push of v.
func (b *Builder) Const(v uint64) {
	b.code = append(b.code, byte(OpConst))
	b.code = binary.LittleEndian.AppendUint64(b.code, v)
}

// Reg appends a push of DWARF register r.
func (b *Builder) Reg(r int) {
	b.code = append(b.code, byte(OpReg))
	b.code = binary.LittleEndian.AppendUint16(b.code, uint16(r))
}

// ModBias appends a push of the load bias of module i of the program's module table.
func (b *Builder) ModBias(i int) { b.code = append(b.code, byte(OpModBias), byte(i)) }

// Sized appends Load, Sext or Zext of n bytes.
func (b *Builder) Sized(op Op, n int) { b.code = append(b.code, byte(op), byte(n)) }

// Label returns a new label, to be placed with Place.
func (b *Builder) Label() int {
	b.targets = append(b.targets, -1)
	return len(b.targets) - 1
}

// Place puts label l at the current end of the code.
func (b *Builder) Place(l int) { b.targets[l] = len(b.code) }

// Jump appends IfZero or Goto to label l.
func (b *Builder) Jump(op Op, l int) {
	if b.fixups == nil {
		b.fixups = map[int]int{}
	}
	b.code = append(b.code, byte(op))
	b.fixups[len(b.code)] = l
	b.code = append(b.code, 0, 0)
}

// Program patches the jumps and checks the result as Decode would.
func (b *Builder) Program(bigEndian bool) (*Program, error) {
	code := append([]byte(nil), b.code...)
	for at, l := range b.fixups {
		t := b.targets[l]
		if t < 0 || t > 0xffff {
			return nil, fmt.Errorf("bpcode: label %d not placed", l)
		}
		binary.LittleEndian.PutUint16(code[at:], uint16(t))
	}
	p := &Program{BigEndian: bigEndian, Code: code}
	if err := p.check(); err != nil {
		return nil, err
	}
	return p, nil
}
