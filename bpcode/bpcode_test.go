package bpcode

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
)

// mem is a machine with a few registers and one readable range.
type mem struct {
	regs map[int]uint64
	base uint64
	data []byte
}

// ModuleBias places module 0 at 0x400000 and module 1 at 0x7f0000000000.
func (m *mem) ModuleBias(i int) (uint64, error) {
	switch i {
	case 0:
		return 0x400000, nil
	case 1:
		return 0x7f0000000000, nil
	}
	return 0, fmt.Errorf("module %d unknown", i)
}

func (m *mem) Register(r int) (uint64, error) {
	v, ok := m.regs[r]
	if !ok {
		return 0, errors.New("no such register")
	}
	return v, nil
}

func (m *mem) ReadMemory(addr uint64, buf []byte) error {
	if addr < m.base || addr-m.base+uint64(len(buf)) > uint64(len(m.data)) || addr-m.base > uint64(len(m.data)) {
		return errors.New("unmapped")
	}
	copy(buf, m.data[addr-m.base:])
	return nil
}

// TestEvalOperations runs each operation against the value Go computes for it.
func TestEvalOperations(t *testing.T) {
	m := &mem{regs: map[int]uint64{6: 0x1000}, base: 0x1000, data: make([]byte, 64)}
	binary.LittleEndian.PutUint32(m.data[8:], uint32(0xfffffffe)) // int -2 at rbp+8
	binary.LittleEndian.PutUint32(m.data[16:], math.Float32bits(2.5))
	f := math.Float64bits
	cases := []struct {
		name  string
		build func(b *Builder)
		want  uint64
		err   string
	}{
		{"local int", func(b *Builder) { b.Reg(6); b.Const(8); b.Emit(OpAdd); b.Sized(OpLoad, 4); b.Sized(OpSext, 4) }, uint64(1<<64 - 2), ""},
		{"signed less", func(b *Builder) {
			b.Reg(6)
			b.Const(8)
			b.Emit(OpAdd)
			b.Sized(OpLoad, 4)
			b.Sized(OpSext, 4)
			b.Const(0)
			b.Emit(OpLtS)
		}, 1, ""},
		{"unsigned less", func(b *Builder) { b.Const(1<<64 - 2); b.Const(0); b.Emit(OpLtU) }, 0, ""},
		{"float", func(b *Builder) {
			b.Reg(6)
			b.Const(16)
			b.Emit(OpAdd)
			b.Sized(OpLoad, 4)
			b.Emit(OpF32)
			b.Const(f(0.5))
			b.Emit(OpFMul)
		}, f(1.25), ""},
		{"s2f", func(b *Builder) { b.Const(uint64(1<<64 - 3)); b.Emit(OpS2F) }, f(-3), ""},
		{"div", func(b *Builder) { b.Const(uint64(1<<64 - 7)); b.Const(2); b.Emit(OpDivS) }, uint64(1<<64 - 3), ""},
		{"rem", func(b *Builder) { b.Const(7); b.Const(4); b.Emit(OpRemU) }, 3, ""},
		{"div zero", func(b *Builder) { b.Const(7); b.Const(0); b.Emit(OpDivU) }, 0, "Division by zero"},
		{"bad pointer", func(b *Builder) { b.Const(8); b.Sized(OpLoad, 8) }, 0, "Cannot access memory at address 0x8"},
		{"no register", func(b *Builder) { b.Reg(99) }, 0, "register 99"},
		{"shift", func(b *Builder) { b.Const(1); b.Const(70); b.Emit(OpShl) }, 0, ""},
		{"swap sub", func(b *Builder) { b.Const(1); b.Const(5); b.Emit(OpSwap); b.Emit(OpSub) }, 4, ""},
		{"zext", func(b *Builder) { b.Const(0x1ff); b.Sized(OpZext, 1) }, 0xff, ""},
		{"bias", func(b *Builder) { b.Emit(OpBias); b.Const(3); b.Emit(OpAdd) }, 0x40003, ""},
		{"assert holds", func(b *Builder) { b.Reg(6); b.Const(0x1000); b.Emit(OpEq); b.Emit(OpAssert); b.Const(5) }, 5, ""},
		{"module bias", func(b *Builder) { b.ModBias(1); b.Const(3); b.Emit(OpAdd) }, 0x7f0000000003, ""},
		{"no module", func(b *Builder) { b.ModBias(5) }, 0, "module 5"},
		{"assert fails", func(b *Builder) { b.Reg(6); b.Const(0x2000); b.Emit(OpEq); b.Emit(OpAssert); b.Const(5) }, 0, "not the place"},
		{"and short-circuits", func(b *Builder) {
			// 0 && *(long*)8: the load is never reached.
			end, f := b.Label(), b.Label()
			b.Const(0)
			b.Jump(OpIfZero, f)
			b.Const(8)
			b.Sized(OpLoad, 8)
			b.Emit(OpLNot)
			b.Emit(OpLNot)
			b.Jump(OpGoto, end)
			b.Place(f)
			b.Const(0)
			b.Place(end)
		}, 0, ""},
	}
	for _, c := range cases {
		var b Builder
		c.build(&b)
		p, err := b.Program(false)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		q, err := Decode(p.Encode())
		if err != nil {
			t.Fatalf("%s: decode: %v", c.name, err)
		}
		got, err := q.Eval(m, 0x40000)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: error %v, want %q", c.name, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%s: %#x, %v; want %#x", c.name, got, err, c.want)
		}
	}
}

// TestDecodeRefuses checks that malformed programs are refused with a reason.
func TestDecodeRefuses(t *testing.T) {
	for _, c := range []struct {
		code []byte
		want string
	}{
		{[]byte{1, 0}, "no code"},
		{[]byte{2, 0, byte(OpBias)}, "version"},
		{[]byte{1, 0, 200}, "unknown operation"},
		{[]byte{1, 0, byte(OpAdd)}, "pops 2 of 0"},
		{[]byte{1, 0, byte(OpBias), byte(OpBias)}, "ends with 2"},
		{[]byte{1, 0, byte(OpConst), 1, 2}, "past the end"},
		{[]byte{1, 0, byte(OpBias), byte(OpLoad), 3}, "size 3"},
		{[]byte{1, 0, byte(OpBias), byte(OpGoto), 0, 0}, "not forward"},
		{[]byte{1, 0, byte(OpBias), byte(OpIfZero), 5, 0, byte(OpConst), 0, 0, 0, 0, 0, 0, 0, 0}, "inside the instruction"},
		{[]byte{1, 0, byte(OpBias), byte(OpBias), byte(OpIfZero), 6, 0, byte(OpBias)}, "meet"},
	} {
		_, err := Decode(c.code)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Decode(%v): %v, want %q", c.code, err, c.want)
		}
	}
}

// TestSiteRoundTrip encodes a site with a condition and a log message and decodes it.
func TestSiteRoundTrip(t *testing.T) {
	var b Builder
	b.Reg(0)
	b.Const(3)
	b.Emit(OpEq)
	cond, err := b.Program(false)
	if err != nil {
		t.Fatal(err)
	}
	var v Builder
	v.Reg(0)
	val, _ := v.Program(false)
	s := &Site{Cond: cond, HitOp: HitMod, HitN: 2, Log: []LogPart{{Text: "x="}, {Text: "", Format: FmtSigned, Expr: val}, {Text: " c=", Format: FmtChar, Expr: val}}}
	d, err := DecodeSite(s.Encode())
	if err != nil {
		t.Fatal(err)
	}
	m := &mem{regs: map[int]uint64{0: 65}}
	if ok, err := d.Condition(m, 0); ok || err != nil {
		t.Errorf("condition: %v %v", ok, err)
	}
	if got := d.Message(m, 0); got != "x=65 c=65 'A'\n" {
		t.Errorf("message %q", got)
	}
	if !d.HitOp.Holds(4, d.HitN) || d.HitOp.Holds(3, d.HitN) {
		t.Error("hit condition % 2 wrong")
	}
}

// FuzzDecodeEval decodes arbitrary programs and sites and runs what decodes: nothing may
// panic, and a decoded program ends (forward jumps) with one word or an error.
func FuzzDecodeEval(f *testing.F) {
	var b Builder
	l := b.Label()
	b.Reg(6)
	b.Const(8)
	b.Emit(OpAdd)
	b.Sized(OpLoad, 4)
	b.Sized(OpSext, 4)
	b.Emit(OpDup)
	b.Jump(OpIfZero, l)
	b.Const(1)
	b.Emit(OpDivS)
	b.Const(0)
	b.Place(l)
	b.Emit(OpPop)
	p, err := b.Program(false)
	if err == nil {
		f.Add(p.Encode())
		f.Add((&Site{Cond: p, HitOp: HitGE, HitN: 3, Log: []LogPart{{Text: "v ", Format: FmtSigned, Expr: p}}}).Encode())
	}
	f.Add([]byte{1, 0, byte(OpConst), 0, 0, 0, 0, 0, 0, 0, 0, byte(OpF32)})
	// A program of a frame's value: its pc checked relative to a module's bias, then a load.
	var v Builder
	v.Reg(16)
	v.ModBias(1)
	v.Const(0x1136)
	v.Emit(OpAdd)
	v.Emit(OpEq)
	v.Emit(OpAssert)
	v.ModBias(0)
	v.Const(8)
	v.Emit(OpAdd)
	v.Sized(OpLoad, 4)
	if p, err := v.Program(false); err == nil {
		f.Add(p.Encode())
	}
	m := &mem{regs: map[int]uint64{6: 0x1000, 7: 0x1010}, base: 0x1000, data: make([]byte, 64)}
	f.Fuzz(func(t *testing.T, data []byte) {
		if p, err := Decode(data); err == nil {
			if _, err := p.Eval(m, 0x1000); err != nil && strings.Contains(err.Error(), "stack") {
				t.Fatalf("checked program failed on its stack: %v", err)
			}
			if q, err := Decode(p.Encode()); err != nil || string(q.Code) != string(p.Code) {
				t.Fatalf("re-encoding: %v", err)
			}
		}
		if s, err := DecodeSite(data); err == nil {
			s.Condition(m, 0)
			s.Message(m, 0)
			if _, err := DecodeSite(s.Encode()); err != nil {
				t.Fatalf("re-encoding site: %v", err)
			}
		}
	})
}

// TestFormatChar: a char in an agent's log point prints as the front end and gdb print it.
// TestFormatBool prints a C bool as the front end does: a number other than 0 and 1 (a bool
// set byte-wise) as that number.
func TestFormatBool(t *testing.T) {
	for v, want := range map[uint64]string{0: "false", 1: "true", 2: "2", 255: "255"} {
		if got := FormatValue(FmtBool, v); got != want {
			t.Errorf("FormatValue(FmtBool, %d) = %s, want %s", v, got, want)
		}
	}
}

func TestFormatChar(t *testing.T) {
	for v, want := range map[uint64]string{
		'a': `97 'a'`, 0: `0 '\000'`, '\r': `13 '\r'`, '\a': `7 '\a'`, '\v': `11 '\v'`, '\'': `39 '\''`,
		'\\': `92 '\\'`, 0x7f: `127 '\177'`, ^uint64(0): `-1 '\377'`,
	} {
		if got := FormatValue(FmtChar, v); got != want {
			t.Errorf("FormatValue(FmtChar, %#x) = %s, want %s", v, got, want)
		}
	}
}
