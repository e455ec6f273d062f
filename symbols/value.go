package symbols

import (
	"debug/dwarf"
	"debug/elf"
	"errors"
	"fmt"
	"math"

	"github.com/hpcdap/hpcdap/symbols/dwop"
)

// ErrOptimizedOut reports a value the compiler did not keep at this point of the program.
var ErrOptimizedOut = errors.New("value has been optimized out")

// Value is a value of the debugged program: a typed piece of memory, a register, or bytes
// computed from DWARF (implicit values, composite locations). Contents are read lazily, so
// large aggregates cost nothing until their elements are asked for.
type Value struct {
	Name string // the variable name or expression that produced the value
	Type *Type  // concrete type (dynamic bounds resolved)

	proc  *Process
	frame *Frame  // evaluation context for registers; nil for values outside any frame
	mod   *Module // module whose DWARF describes Type

	inMem   bool // the value lives in memory at addr
	addr    uint64
	reg     int // register holding the whole value (-1 when not a register lvalue)
	bitOff  int64
	bitSize int64 // non-zero for bit fields: bits at bitOff from addr (or data)

	data      []byte // contents when known
	unavail   []bool // bytes that were optimized out, nil when all are available
	optOut    bool
	implicit  bool         // described by DWARF but not stored anywhere (no lvalue)
	synthetic *implicitPtr // the value is a pointer that exists only in the debug info
	err       error        // reading the contents failed
	// state is "not allocated" / "not associated" for Fortran allocatables and pointers.
	state string
	ifunc bool // a function known by an STT_GNU_IFUNC symbol: its address is the resolver's
}

// implicitPtr records a DW_OP_implicit_pointer: a pointer to the variable at DIE die, plus off.
type implicitPtr struct {
	die dwarf.Offset
	off int64
}

// OptimizedOut reports whether the whole value is unavailable.
func (v *Value) OptimizedOut() bool { return v.optOut }

// Err returns the error reading the value, if any.
func (v *Value) Err() error { return v.err }

// Address returns the value's memory address, if it lives in memory.
func (v *Value) Address() (uint64, bool) { return v.addr, v.inMem && v.bitSize == 0 }

// newMemValue makes a value living in memory.
func newMemValue(p *Process, mod *Module, f *Frame, t *Type, addr uint64) *Value {
	return &Value{Type: t, proc: p, mod: mod, frame: f, inMem: true, addr: addr, reg: -1}
}

// newBytesValue makes a value from known bytes.
func newBytesValue(p *Process, mod *Module, f *Frame, t *Type, b []byte) *Value {
	return &Value{Type: t, proc: p, mod: mod, frame: f, data: b, reg: -1}
}

func optimizedOut(p *Process, mod *Module, f *Frame, t *Type) *Value {
	return &Value{Type: t, proc: p, mod: mod, frame: f, optOut: true, reg: -1}
}

// size returns the byte size of the value's type, or an error for incomplete types.
func (v *Value) size() (int64, error) {
	s := v.Type.Strip()
	if s == nil || v.Type.Size < 0 {
		if s != nil && s.Size >= 0 {
			return s.Size, nil
		}
		return 0, fmt.Errorf("symbols: %s: type %s has no size", v.Name, v.Type)
	}
	return v.Type.Size, nil
}

// Bytes returns the value's contents, reading memory if needed.
func (v *Value) Bytes() ([]byte, error) {
	if v.optOut {
		return nil, ErrOptimizedOut
	}
	if v.err != nil {
		return nil, v.err
	}
	if v.data != nil {
		return v.data, nil
	}
	if !v.inMem {
		return nil, fmt.Errorf("symbols: %s: no contents", v.Name)
	}
	n, err := v.size()
	if err != nil {
		return nil, err
	}
	if v.bitSize > 0 {
		n = (v.bitOff%8 + v.bitSize + 7) / 8
	}
	if n > 64<<20 {
		return nil, fmt.Errorf("symbols: %s: %d bytes is too large to read at once", v.Name, n)
	}
	b := make([]byte, n)
	if err := v.proc.ReadMemory(b, v.addr+uint64(v.bitOff/8)); err != nil {
		v.err = fmt.Errorf("Cannot access memory at address %#x", v.addr+uint64(v.bitOff/8))
		return nil, v.err
	}
	v.data = b
	return b, nil
}

// MaxValueSize bounds the size of a value read whole (gdb's max-value-size): larger
// aggregates are only read element by element.
var MaxValueSize int64 = 65536

// Fetch reads the value's contents now, as gdb does before printing a variable or an
// expression result, and reports why it cannot be read. Optimized-out values fetch without
// error (they print as "<optimized out>").
func (v *Value) Fetch() error {
	if v.optOut || v.state != "" || v.synthetic != nil {
		return nil
	}
	if v.err != nil {
		return v.err
	}
	if v.data != nil || !v.inMem {
		return nil
	}
	n, err := v.size()
	if err != nil {
		return nil // incomplete types print what they can
	}
	if n > MaxValueSize {
		return fmt.Errorf("value requires %d bytes, which is more than max-value-size", n)
	}
	_, err = v.Bytes()
	return err
}

// Reread returns the value as memory holds it now: a copy of v without the contents read
// before, so that its next use reads them again (after the program's memory was written).
// Values that do not live in memory (registers, computed values) are returned as they are.
func (v *Value) Reread() *Value {
	if !v.inMem || v.implicit || v.synthetic != nil || v.optOut || v.unavail != nil || v.state != "" {
		return v
	}
	nv := *v
	nv.data, nv.err = nil, nil
	return &nv
}

// available reports whether the byte range [off, off+n) of the value is available.
func (v *Value) available(off, n int64) bool {
	if v.optOut {
		return false
	}
	if v.unavail == nil {
		return true
	}
	for i := off; i < off+n && i < int64(len(v.unavail)); i++ {
		if i >= 0 && v.unavail[i] {
			return false
		}
	}
	return true
}

// sub returns the part of v at byte offset off with type t (a member or an element).
func (v *Value) sub(name string, t *Type, off int64) *Value {
	c := &Value{Name: name, Type: t, proc: v.proc, mod: v.mod, frame: v.frame, reg: -1, implicit: v.implicit}
	switch {
	case v.optOut:
		c.optOut = true
	case v.err != nil:
		c.err = v.err
	case v.synthetic != nil:
		c.optOut = true
	case v.inMem && v.data == nil:
		c.inMem, c.addr = true, v.addr+uint64(off)
	default:
		n := t.Size
		if n < 0 {
			n = 0
		}
		if off < 0 || off+n > int64(len(v.data)) {
			if v.inMem {
				// Beyond what was read (a strided section): read the part itself.
				c.inMem, c.addr = true, v.addr+uint64(off)
				return c
			}
			c.err = fmt.Errorf("symbols: %s: part [%d,%d) outside the value", name, off, off+n)
			return c
		}
		c.data = v.data[off : off+n]
		if v.unavail != nil {
			c.unavail = v.unavail[off : off+n]
			all := n > 0
			for _, u := range c.unavail {
				all = all && u
			}
			if all {
				c.optOut = true
			}
		}
		if v.inMem {
			c.inMem, c.addr = true, v.addr+uint64(off)
		}
	}
	return c
}

// Uint returns the value as an unsigned integer (pointers, enums, integers, booleans).
func (v *Value) Uint() (uint64, error) {
	b, err := v.scalarBytes()
	if err != nil {
		return 0, err
	}
	return uintFrom(b, v.proc.Arch), nil
}

// Int returns the value as a signed integer, sign-extending from its size.
func (v *Value) Int() (int64, error) {
	b, err := v.scalarBytes()
	if err != nil {
		return 0, err
	}
	u := uintFrom(b, v.proc.Arch)
	n := uint(len(b)) * 8
	if v.bitSize > 0 {
		n = uint(v.bitSize)
	}
	if n < 64 && n > 0 {
		shift := 64 - n
		return int64(u<<shift) >> shift, nil
	}
	return int64(u), nil
}

// scalarBytes returns the bytes of a scalar, extracting bit fields into an integer of the
// field's type size (low bits).
func (v *Value) scalarBytes() ([]byte, error) {
	b, err := v.Bytes()
	if err != nil {
		return nil, err
	}
	if !v.available(0, int64(len(b))) {
		return nil, ErrOptimizedOut
	}
	if v.bitSize == 0 {
		return b, nil
	}
	// Assemble the containing bytes as a big integer in target order, then extract.
	a := v.proc.Arch
	var word uint64
	start := v.bitOff % 8
	nbytes := (start + v.bitSize + 7) / 8
	if a.ByteOrder.String() == "BigEndian" {
		for i := int64(0); i < nbytes; i++ {
			word = word<<8 | uint64(b[i])
		}
		word >>= uint(nbytes*8 - start - v.bitSize)
	} else {
		for i := nbytes - 1; i >= 0; i-- {
			word = word<<8 | uint64(b[i])
		}
		word >>= uint(start)
	}
	if v.bitSize < 64 {
		word &= (1 << uint(v.bitSize)) - 1
	}
	size := v.Type.Strip().Size
	if size <= 0 || size > 8 {
		size = 8
	}
	out := make([]byte, size)
	if a.ByteOrder.String() == "BigEndian" {
		for i := size - 1; i >= 0; i-- {
			out[i] = byte(word)
			word >>= 8
		}
	} else {
		for i := int64(0); i < size; i++ {
			out[i] = byte(word)
			word >>= 8
		}
	}
	return out, nil
}

// Float returns a floating-point value as float64 (long double is rounded).
func (v *Value) Float() (float64, error) {
	b, err := v.scalarBytes()
	if err != nil {
		return 0, err
	}
	return floatFromBytes(b, v.proc.Arch)
}

func floatFromBytes(b []byte, a *Arch) (float64, error) {
	switch len(b) {
	case 4:
		return float64(math.Float32frombits(uint32(uintFrom(b, a)))), nil
	case 8:
		return math.Float64frombits(uintFrom(b, a)), nil
	case 10, 12, 16:
		if a.Machine == elf.EM_X86_64 {
			f, _ := x87ToBig(b).Float64()
			return f, nil
		}
		if len(b) == 16 {
			// IBM long double (double-double) on Power: the sum of two doubles.
			hi := math.Float64frombits(uintFrom(b[:8], a))
			lo := math.Float64frombits(uintFrom(b[8:], a))
			return hi + lo, nil
		}
	}
	return 0, fmt.Errorf("symbols: %d-byte floating-point value unsupported", len(b))
}

// location turns an evaluated DWARF location into a value of type t.
func (p *Process) valueAt(mod *Module, f *Frame, t *Type, loc dwop.Location) *Value {
	if loc.Simple() {
		pc := loc.Pieces[0]
		switch pc.Kind {
		case dwop.PieceMemory:
			return newMemValue(p, mod, f, t, pc.Addr)
		case dwop.PieceRegister:
			v := p.regValue(mod, f, t, int(pc.Reg))
			return v
		case dwop.PieceValue:
			v := newBytesValue(p, mod, f, t, fitBytes(pc.Value, t, pc.Stack, p.Arch))
			v.implicit = true
			return v
		case dwop.PieceImplicitPointer:
			return &Value{Type: t, proc: p, mod: mod, frame: f, reg: -1,
				synthetic: &implicitPtr{die: dwarf.Offset(pc.PtrDIE), off: pc.PtrOffset}}
		default:
			return optimizedOut(p, mod, f, t)
		}
	}
	// A composite location: assemble the pieces.
	size := t.Size
	if size < 0 {
		size = 0
		for _, pc := range loc.Pieces {
			size += int64(pc.SizeBits / 8)
		}
	}
	data := make([]byte, size)
	unavail := make([]bool, size)
	bit := int64(0)
	any := false
	for _, pc := range loc.Pieces {
		n := int64(pc.SizeBits)
		if bit%8 != 0 || n%8 != 0 {
			// Sub-byte pieces: mark the bytes they touch unavailable unless memory.
			for i := bit / 8; i < (bit+n+7)/8 && i < size; i++ {
				unavail[i] = true
			}
			bit += n
			continue
		}
		off, nb := bit/8, n/8
		bit += n
		if off+nb > size {
			nb = size - off
		}
		if nb <= 0 {
			continue
		}
		var src []byte
		var ok bool
		switch pc.Kind {
		case dwop.PieceMemory:
			buf := make([]byte, nb)
			if err := p.ReadMemory(buf, pc.Addr); err == nil {
				src, ok = buf, true
			}
		case dwop.PieceRegister:
			if f != nil {
				if rb, has := f.regs.Bytes(int(pc.Reg)); has {
					src, ok = dwop.LowBytes(rb, int(nb), p.Arch.ByteOrder), true
					if p.Arch.Machine == elf.EM_X86_64 {
						src = rb[:min(int(nb), len(rb))]
					}
				}
			}
		case dwop.PieceValue:
			src, ok = dwop.LowBytes(pc.Value, int(nb), p.Arch.ByteOrder), true
		}
		if ok && int64(len(src)) >= nb {
			copy(data[off:off+nb], src)
			any = true
		} else {
			for i := off; i < off+nb; i++ {
				unavail[i] = true
			}
		}
	}
	if !any {
		return optimizedOut(p, mod, f, t)
	}
	v := newBytesValue(p, mod, f, t, data)
	v.unavail = unavail
	v.implicit = true
	return v
}

// regValue reads a value held in a register of frame f.
func (p *Process) regValue(mod *Module, f *Frame, t *Type, reg int) *Value {
	if f == nil {
		return optimizedOut(p, mod, f, t)
	}
	rb, ok := f.regs.Bytes(reg)
	if !ok {
		return optimizedOut(p, mod, f, t)
	}
	n := int(t.Size)
	if n <= 0 {
		n = len(rb)
	}
	var b []byte
	switch {
	case n > len(rb):
		// Larger than the register (e.g. a 16-byte long double in an x87 register slot).
		b = make([]byte, n)
		copy(b, rb)
	case p.Arch.Machine == elf.EM_X86_64:
		b = append([]byte(nil), rb[:n]...)
	default:
		b = append([]byte(nil), dwop.LowBytes(rb, n, p.Arch.ByteOrder)...)
	}
	v := newBytesValue(p, mod, f, t, b)
	v.reg = reg
	return v
}

// fitBytes sizes implicit value bytes to the type: a stack value is an integer whose low bytes
// are the object.
func fitBytes(b []byte, t *Type, stack bool, a *Arch) []byte {
	n := int(t.Size)
	if n <= 0 || n == len(b) {
		return b
	}
	if n < len(b) {
		if stack {
			return append([]byte(nil), dwop.LowBytes(b, n, a.ByteOrder)...)
		}
		return append([]byte(nil), b[:n]...)
	}
	out := make([]byte, n)
	if stack && a.ByteOrder.String() == "BigEndian" {
		copy(out[n-len(b):], b)
	} else {
		copy(out, b)
	}
	return out
}
