package symbols

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"sort"

	"github.com/hpcdap/hpcdap/arch"
)

// Regs is the register file of one frame, indexed by DWARF register number. Frame 0 gets its
// registers from the process (the adapter fills them from native register sets, or a core file
// from NT_PRSTATUS); the unwinder derives each caller's Regs from its callee's. A register
// the unwinder cannot recover is absent, and a variable living in it reads as optimized out.
type Regs struct {
	arch  *Arch
	vals  []uint64
	known []uint64  // bit set over vals
	wide  []wideReg // registers wider than 8 bytes (xmm, x87), by register number
	// wideShared is set when wide is shared with other frames' Regs (derive): it is copied
	// before it changes. The call frame information of these machines does not restore the
	// wide registers, so the frames of a stack share one list instead of a copy each.
	wideShared bool
}

// wideReg is the contents of one register wider than 8 bytes, in target memory order.
type wideReg struct {
	n int
	b []byte
}

// NewRegs returns an empty register file for arch.
func NewRegs(arch *Arch) *Regs {
	return &Regs{arch: arch, vals: make([]uint64, arch.NumRegs), known: make([]uint64, (arch.NumRegs+63)/64)}
}

// derive returns a copy of r for its caller's frame, sharing r's wide registers.
func (r *Regs) derive() *Regs {
	c := &Regs{arch: r.arch, vals: append([]uint64(nil), r.vals...), known: append([]uint64(nil), r.known...)}
	if r.wide != nil {
		c.wide, c.wideShared = r.wide, true
		r.wideShared = true
	}
	return c
}

// wideAt returns wide register n's index in r.wide and whether it is there.
func (r *Regs) wideAt(n int) (int, bool) {
	return sort.Find(len(r.wide), func(i int) int { return n - r.wide[i].n })
}

// wideBytes returns wide register n's contents.
func (r *Regs) wideBytes(n int) ([]byte, bool) {
	if i, ok := r.wideAt(n); ok {
		return r.wide[i].b, true
	}
	return nil, false
}

// dropWide forgets wide register n's contents.
func (r *Regs) dropWide(n int) {
	if i, ok := r.wideAt(n); ok {
		r.ownWide()
		r.wide = slices.Delete(r.wide, i, i+1)
	}
}

// ownWide makes r's wide registers its own before a change.
func (r *Regs) ownWide() {
	if r.wideShared {
		r.wide, r.wideShared = slices.Clone(r.wide), false
	}
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
	r.dropWide(n)
}

// SetBytes stores a register wider than 8 bytes (vector or x87), given in target memory order.
// Its low 8 bytes also become its integer value.
func (r *Regs) SetBytes(n int, b []byte) { r.setWide(n, append([]byte(nil), b...)) }

// setWide is SetBytes with b kept, not copied.
func (r *Regs) setWide(n int, b []byte) {
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
	r.ownWide()
	if i, ok := r.wideAt(n); ok {
		r.wide[i].b = b
	} else {
		r.wide = slices.Insert(r.wide, i, wideReg{n, b})
	}
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
	if b, ok := r.wideBytes(n); ok {
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
	r.dropWide(n)
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
	c.wide = slices.Clone(r.wide)
	return c
}

// RegsFromNative decodes the operating system's native register sets — x86-64
// user_regs_struct and user_fpregs_struct, or Power pt_regs and the FPR set, as ptrace and core
// files lay them out — into a Regs, by the machine's register table. Registers the machine
// does not name for expressions (segment selectors, mxcsr) are left out. The floating-point
// set is read only when it holds all its registers; fp may be nil.
func RegsFromNative(a *Arch, gp, fp []byte) (*Regs, error) {
	if len(a.Registers) == 0 {
		return nil, errors.New("symbols: no native register layout for " + a.Name)
	}
	var needGP, needFP int
	for _, s := range a.Registers {
		if a.RegName(s.DWARF) == "" {
			continue
		}
		switch s.Set {
		case arch.General:
			needGP = max(needGP, s.Off+s.Size)
		case arch.Float:
			needFP = max(needFP, s.Off+s.Size)
		}
	}
	if len(gp) < needGP {
		return nil, fmt.Errorf("symbols: %s %s: %d bytes, want at least %d", a.Name, a.GeneralSet, len(gp), needGP)
	}
	r := NewRegs(a)
	// The wide registers' contents share one allocation.
	var wideSize, wideRegs int
	for _, s := range a.Registers {
		if a.RegName(s.DWARF) != "" && s.Size != 8 {
			wideSize += s.Size
			wideRegs++
		}
	}
	buf := make([]byte, 0, wideSize)
	r.wide = make([]wideReg, 0, wideRegs)
	for _, s := range a.Registers {
		if a.RegName(s.DWARF) == "" {
			continue
		}
		var b []byte
		switch s.Set {
		case arch.General:
			b = gp[s.Off : s.Off+s.Size]
		case arch.Float:
			if len(fp) < needFP {
				continue
			}
			b = fp[s.Off : s.Off+s.Size]
		}
		if s.Size == 8 {
			v := a.ByteOrder.Uint64(b)
			r.Set(s.DWARF, v)
			if alias, ok := a.Alias(s.DWARF); ok {
				r.Set(alias, v)
			}
		} else {
			at := len(buf)
			buf = append(buf, b...)
			r.setWide(s.DWARF, buf[at:len(buf):len(buf)])
		}
	}
	return r, nil
}
