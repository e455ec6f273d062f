package symbols

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
)

// Regs is the register file of one frame, indexed by DWARF register number. Frame 0 gets its
// registers from the process (the adapter fills them from native register sets, or a core file
// from NT_PRSTATUS); the unwinder derives each caller's Regs from its callee's. A register
// the unwinder cannot recover is absent, and a variable living in it reads as optimized out.
type Regs struct {
	arch  *Arch
	vals  []uint64
	known []uint64       // bit set over vals
	wide  map[int][]byte // registers wider than 8 bytes (xmm, x87), in memory order
}

// NewRegs returns an empty register file for arch.
func NewRegs(arch *Arch) *Regs {
	return &Regs{arch: arch, vals: make([]uint64, arch.NumRegs), known: make([]uint64, (arch.NumRegs+63)/64)}
}

// Arch returns the machine the registers belong to.
func (r *Regs) Arch() *Arch { return r.arch }

// Set stores the value of register n.
func (r *Regs) Set(n int, v uint64) {
	if n < 0 || n >= len(r.vals) {
		return
	}
	r.vals[n] = v
	r.known[n/64] |= 1 << (n % 64)
	if r.wide != nil {
		delete(r.wide, n)
	}
}

// SetBytes stores a register wider than 8 bytes (vector or x87), given in target memory order.
// Its low 8 bytes also become its integer value.
func (r *Regs) SetBytes(n int, b []byte) {
	if n < 0 || n >= len(r.vals) {
		return
	}
	var lo [8]byte
	copy(lo[:], b)
	v := r.arch.ByteOrder.Uint64(lo[:])
	if r.arch.ByteOrder == binary.BigEndian && len(b) < 8 {
		v >>= 8 * (8 - uint(len(b)))
	}
	r.vals[n] = v
	r.known[n/64] |= 1 << (n % 64)
	if r.wide == nil {
		r.wide = map[int][]byte{}
	}
	r.wide[n] = append([]byte(nil), b...)
}

// Get returns the value of register n and whether it is known.
func (r *Regs) Get(n int) (uint64, bool) {
	if r == nil || n < 0 || n >= len(r.vals) || r.known[n/64]&(1<<(n%64)) == 0 {
		return 0, false
	}
	return r.vals[n], true
}

// Bytes returns register n's contents in target memory order: its full width for wide
// registers, otherwise 8 bytes.
func (r *Regs) Bytes(n int) ([]byte, bool) {
	v, ok := r.Get(n)
	if !ok {
		return nil, false
	}
	if b, ok := r.wide[n]; ok {
		return b, true
	}
	b := make([]byte, 8)
	r.arch.ByteOrder.PutUint64(b, v)
	return b, true
}

// Clear forgets register n.
func (r *Regs) Clear(n int) {
	if n < 0 || n >= len(r.vals) {
		return
	}
	r.known[n/64] &^= 1 << (n % 64)
	delete(r.wide, n)
}

// PC returns the program counter.
func (r *Regs) PC() (uint64, bool) { return r.Get(r.arch.PCReg) }

// SP returns the stack pointer.
func (r *Regs) SP() (uint64, bool) { return r.Get(r.arch.SPReg) }

// Count returns how many registers are known.
func (r *Regs) Count() int {
	n := 0
	for _, w := range r.known {
		n += bits.OnesCount64(w)
	}
	return n
}

// Clone returns an independent copy.
func (r *Regs) Clone() *Regs {
	c := &Regs{arch: r.arch, vals: append([]uint64(nil), r.vals...), known: append([]uint64(nil), r.known...)}
	if r.wide != nil {
		c.wide = make(map[int][]byte, len(r.wide))
		for k, v := range r.wide {
			c.wide[k] = v
		}
	}
	return c
}

// RegsFromNative decodes the operating system's native register sets — x86-64
// user_regs_struct and user_fpregs_struct, or Power pt_regs and the FPR set, as ptrace and core
// files lay them out — into a Regs. fp may be nil.
func RegsFromNative(arch *Arch, gp, fp []byte) (*Regs, error) {
	r := NewRegs(arch)
	o := arch.ByteOrder
	switch arch.Name {
	case "amd64":
		// user_regs_struct field order.
		order := []int{15, 14, 13, 12, AMD64RBP, AMD64RBX, 11, 10, 9, 8, AMD64RAX, AMD64RCX,
			AMD64RDX, AMD64RSI, AMD64RDI, -1 /* orig_rax */, AMD64RIP, -2 /* cs */, AMD64RFLAGS,
			AMD64RSP, -3 /* ss */, AMD64FSBase, AMD64GSBase}
		if len(gp) < len(order)*8 {
			return nil, fmt.Errorf("symbols: x86-64 user_regs_struct: %d bytes, want %d", len(gp), 27*8)
		}
		for i, n := range order {
			if n >= 0 {
				r.Set(n, o.Uint64(gp[i*8:]))
			}
		}
		if len(fp) >= 512 {
			for i := 0; i < 8; i++ {
				r.SetBytes(AMD64ST0+i, fp[32+16*i:32+16*i+10])
			}
			for i := 0; i < 16; i++ {
				r.SetBytes(AMD64XMM0+i, fp[160+16*i:160+16*i+16])
			}
		}
	case "ppc64", "ppc64le":
		if len(gp) < 39*8 {
			return nil, fmt.Errorf("symbols: ppc64 pt_regs: %d bytes, want at least %d", len(gp), 39*8)
		}
		for i := 0; i < 32; i++ {
			r.Set(i, o.Uint64(gp[i*8:]))
		}
		r.Set(PPC64PC, o.Uint64(gp[32*8:]))
		r.Set(PPC64MSR, o.Uint64(gp[33*8:]))
		ctr, lr := o.Uint64(gp[35*8:]), o.Uint64(gp[36*8:])
		r.Set(PPC64CTR, ctr)
		r.Set(PPC64CTRSPR, ctr)
		r.Set(PPC64LR, lr)
		r.Set(PPC64LRSPR, lr)
		r.Set(PPC64XER, o.Uint64(gp[37*8:]))
		r.Set(PPC64CR, o.Uint64(gp[38*8:]))
		if len(fp) >= 32*8 {
			for i := 0; i < 32; i++ {
				r.Set(PPC64F0+i, o.Uint64(fp[i*8:]))
			}
		}
	default:
		return nil, errors.New("symbols: no native register layout for " + arch.Name)
	}
	return r, nil
}
