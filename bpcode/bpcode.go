// Package bpcode is the bytecode of breakpoint conditions and log points that an agent
// evaluates at the trap, next to the process, instead of reporting every hit to the front end.
//
// A Program is a small stack machine over 64-bit words, the registers of the trapped thread
// (by DWARF number) and the memory of its process. The front end compiles an expression for
// one binary and one breakpoint address (package symbols knows where each variable lives at
// that pc); the agent decodes it, which checks it completely, and evaluates it at every hit.
// Jumps go forward only, so a program ends after at most as many instructions as it holds;
// the stack depth at every instruction is known when the program is decoded, so evaluation
// never underflows or overflows it. Floating-point words hold the bits of a float64.
//
// A Site is everything the agent decides at one breakpoint address: the condition, the hit
// condition counted over the hits where the condition holds, and a log message whose
// expressions are programs too. It travels in the cdti extension command SetTrapCondition.
//
// The package uses only the standard library: both the agent and the front end import it.
package bpcode

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Op is one instruction's operation code.
type Op byte

// The operations. Operands follow the opcode byte, little-endian: Const an 8-byte word,
// Reg a 2-byte DWARF register number, Load/Sext/Zext a 1-byte size in bytes, ModBias a 1-byte
// module index, IfZero and Goto a 2-byte absolute offset in the code, forward of the
// instruction.
const (
	OpConst   Op = 1 + iota // push the operand
	OpReg                   // push the register's value
	OpBias                  // push the load bias of the binary the program was compiled for
	OpLoad                  // pop an address, push the n bytes there (target byte order), zero-extended
	OpSext                  // sign-extend the low n bytes of the top
	OpZext                  // keep the low n bytes of the top
	OpAdd                   // a b → a+b
	OpSub                   // a b → a-b
	OpMul                   // a b → a*b
	OpDivS                  // signed a/b (b = 0 is an error)
	OpDivU                  // unsigned a/b
	OpRemS                  // signed a%b
	OpRemU                  // unsigned a%b
	OpAnd                   // bitwise and
	OpOr                    // bitwise or
	OpXor                   // bitwise exclusive or
	OpShl                   // a << b (b ≥ 64 gives 0)
	OpShrS                  // arithmetic a >> b
	OpShrU                  // logical a >> b
	OpNeg                   // -a
	OpNot                   // ^a
	OpLNot                  // a == 0 (1 or 0)
	OpEq                    // a == b
	OpNe                    // a != b
	OpLtS                   // signed a < b
	OpLtU                   // unsigned a < b
	OpLeS                   // signed a <= b
	OpLeU                   // unsigned a <= b
	OpFAdd                  // float64 a+b
	OpFSub                  // float64 a-b
	OpFMul                  // float64 a*b
	OpFDiv                  // float64 a/b
	OpFNeg                  // float64 -a
	OpFEq                   // float64 a == b
	OpFNe                   // float64 a != b
	OpFLt                   // float64 a < b
	OpFLe                   // float64 a <= b
	OpS2F                   // signed integer → float64
	OpU2F                   // unsigned integer → float64
	OpF2S                   // float64 → signed integer (truncated)
	OpF32                   // float32 bits (low 32) → float64 bits
	OpDup                   // a → a a
	OpSwap                  // a b → b a
	OpPop                   // a →
	OpIfZero                // pop a; when a == 0 jump to the operand
	OpGoto                  // jump to the operand
	OpAssert                // pop a; when a == 0 the program fails (a place it was not compiled for)
	OpModBias               // push the load bias of module n of the program's module table (ModuleBiases)
	opCount
)

var opNames = [...]string{OpConst: "const", OpReg: "reg", OpBias: "bias", OpLoad: "load", OpSext: "sext",
	OpZext: "zext", OpAdd: "add", OpSub: "sub", OpMul: "mul", OpDivS: "divs", OpDivU: "divu", OpRemS: "rems",
	OpRemU: "remu", OpAnd: "and", OpOr: "or", OpXor: "xor", OpShl: "shl", OpShrS: "shrs", OpShrU: "shru",
	OpNeg: "neg", OpNot: "not", OpLNot: "lnot", OpEq: "eq", OpNe: "ne", OpLtS: "lts", OpLtU: "ltu",
	OpLeS: "les", OpLeU: "leu", OpFAdd: "fadd", OpFSub: "fsub", OpFMul: "fmul", OpFDiv: "fdiv",
	OpFNeg: "fneg", OpFEq: "feq", OpFNe: "fne", OpFLt: "flt", OpFLe: "fle", OpS2F: "s2f", OpU2F: "u2f",
	OpF2S: "f2s", OpF32: "f32", OpDup: "dup", OpSwap: "swap", OpPop: "pop", OpIfZero: "ifzero", OpGoto: "goto",
	OpAssert: "assert", OpModBias: "modbias"}

func (o Op) String() string {
	if o > 0 && o < opCount {
		return opNames[o]
	}
	return fmt.Sprintf("Op(%d)", byte(o))
}

// operandSize is the number of operand bytes after the opcode.
func (o Op) operandSize() int {
	switch o {
	case OpConst:
		return 8
	case OpReg, OpIfZero, OpGoto:
		return 2
	case OpLoad, OpSext, OpZext, OpModBias:
		return 1
	}
	return 0
}

// stackEffect returns how many words o pops and pushes.
func (o Op) stackEffect() (pop, push int) {
	switch o {
	case OpConst, OpReg, OpBias, OpModBias:
		return 0, 1
	case OpLoad, OpSext, OpZext, OpNeg, OpNot, OpLNot, OpFNeg, OpS2F, OpU2F, OpF2S, OpF32:
		return 1, 1
	case OpDup:
		return 1, 2
	case OpSwap:
		return 2, 2
	case OpPop, OpIfZero, OpAssert:
		return 1, 0
	case OpGoto:
		return 0, 0
	}
	return 2, 1 // the binary operators
}

// Limits of a program.
const (
	MaxCode  = 4096 // bytes of code
	MaxStack = 32   // words on the stack
)

const version = 1

// Program is a decoded, checked condition or log-point expression.
type Program struct {
	BigEndian bool   // the target's byte order, for loads
	Code      []byte // the instructions
}

// Encode returns the program's wire form: version u8, flags u8 (bit 0 big-endian), code.
func (p *Program) Encode() []byte {
	b := []byte{version, 0}
	if p.BigEndian {
		b[1] = 1
	}
	return append(b, p.Code...)
}

// Decode reads and checks a program: known operations with their operands, jumps forward to
// an instruction, a stack depth that is the same on every path to an instruction, never
// below what the instruction pops nor above MaxStack, and one word at the end.
func Decode(b []byte) (*Program, error) {
	if len(b) < 2 {
		return nil, errors.New("bpcode: program: too short")
	}
	if b[0] != version {
		return nil, fmt.Errorf("bpcode: program: version %d, want %d", b[0], version)
	}
	if b[1]&^1 != 0 {
		return nil, fmt.Errorf("bpcode: program: unknown flags %#x", b[1])
	}
	p := &Program{BigEndian: b[1]&1 != 0, Code: append([]byte(nil), b[2:]...)}
	if err := p.check(); err != nil {
		return nil, err
	}
	return p, nil
}

// check verifies the code as Decode describes.
func (p *Program) check() error {
	code := p.Code
	if len(code) == 0 {
		return errors.New("bpcode: program: no code")
	}
	if len(code) > MaxCode {
		return fmt.Errorf("bpcode: program: %d bytes of code, at most %d", len(code), MaxCode)
	}
	// depth[i] is the stack depth on entry to the instruction at i (-1: not reached yet).
	depth := make([]int, len(code)+1)
	for i := range depth {
		depth[i] = -1
	}
	depth[0] = 0
	reach := func(at, d int) error {
		if depth[at] >= 0 && depth[at] != d {
			return fmt.Errorf("bpcode: program: stack depth %d and %d meet at %d", depth[at], d, at)
		}
		depth[at] = d
		return nil
	}
	start := make([]bool, len(code)+1)
	start[len(code)] = true
	for i := 0; i < len(code); {
		op := Op(code[i])
		if op == 0 || op >= opCount {
			return fmt.Errorf("bpcode: program: unknown operation %d at %d", code[i], i)
		}
		start[i] = true
		n := op.operandSize()
		if i+1+n > len(code) {
			return fmt.Errorf("bpcode: program: %v at %d: operand past the end", op, i)
		}
		arg := code[i+1 : i+1+n]
		next := i + 1 + n
		d := depth[i]
		if d < 0 {
			// Unreachable code after a goto: check its form only.
			i = next
			continue
		}
		pop, push := op.stackEffect()
		if d < pop {
			return fmt.Errorf("bpcode: program: %v at %d pops %d of %d words", op, i, pop, d)
		}
		d += push - pop
		if d > MaxStack {
			return fmt.Errorf("bpcode: program: more than %d words on the stack at %d", MaxStack, i)
		}
		switch op {
		case OpLoad, OpSext, OpZext:
			if s := arg[0]; s != 1 && s != 2 && s != 4 && s != 8 {
				return fmt.Errorf("bpcode: program: %v at %d: size %d", op, i, s)
			}
		case OpIfZero, OpGoto:
			t := int(binary.LittleEndian.Uint16(arg))
			if t <= i || t > len(code) {
				return fmt.Errorf("bpcode: program: %v at %d: target %d is not forward in the code", op, i, t)
			}
			if err := reach(t, d); err != nil {
				return err
			}
		}
		if op != OpGoto {
			if err := reach(next, d); err != nil {
				return err
			}
		}
		i = next
	}
	for t, d := range depth {
		if d >= 0 && !start[t] {
			return fmt.Errorf("bpcode: program: a jump lands inside the instruction before %d", t)
		}
	}
	if depth[len(code)] != 1 {
		return fmt.Errorf("bpcode: program: ends with %d words on the stack, want 1", depth[len(code)])
	}
	return nil
}
