package ppc64

import (
	"encoding/binary"
	"fmt"

	"github.com/hpcdap/hpcdap/cdti"
)

// Doubleword indices of the Linux ppc64 struct pt_regs (asm/ptrace.h PT_*): r0–r31 are 0–31.
const (
	PtNIP      = 32 // next instruction address: the program counter
	PtMSR      = 33
	PtOrigGPR3 = 34 // r3 at system call entry
	PtCTR      = 35
	PtLink     = 36
	PtXER      = 37
	PtCCR      = 38 // the condition register
	PtSoftE    = 39
	PtTrap     = 40 // the exception vector that entered the kernel
	PtDAR      = 41 // data address (BookE: DEAR)
	PtDSISR    = 42 // data storage interrupt status (BookE: ESR)
	PtResult   = 43
	// PtRegsCount is the number of doublewords in pt_regs.
	PtRegsCount = 44
	// PtRegsSize is the size of pt_regs in bytes.
	PtRegsSize = PtRegsCount * 8
)

// PtRegs is the Linux ppc64 general register set, struct pt_regs (user_pt_regs), as ptrace's
// PTRACE_GETREGS and core files give it and as libthread_db indexes it (r13 at byte 104).
type PtRegs struct {
	GPR                                     [32]uint64
	NIP, MSR, OrigGPR3, CTR, Link, XER, CCR uint64
	SoftE, Trap, DAR, DSISR, Result         uint64
}

// Words returns pointers to the registers in pt_regs order.
func (r *PtRegs) Words() [PtRegsCount]*uint64 {
	var w [PtRegsCount]*uint64
	for i := range r.GPR {
		w[i] = &r.GPR[i]
	}
	copy(w[32:], []*uint64{&r.NIP, &r.MSR, &r.OrigGPR3, &r.CTR, &r.Link, &r.XER, &r.CCR,
		&r.SoftE, &r.Trap, &r.DAR, &r.DSISR, &r.Result})
	return w
}

// Marshal returns the register set as bytes in byte order order.
func (r *PtRegs) Marshal(order binary.ByteOrder) []byte {
	b := make([]byte, PtRegsSize)
	for i, p := range r.Words() {
		order.PutUint64(b[8*i:], *p)
	}
	return b
}

// Unmarshal reads the register set from b in byte order order.
func (r *PtRegs) Unmarshal(b []byte, order binary.ByteOrder) error {
	if len(b) != PtRegsSize {
		return fmt.Errorf("ppc64: pt_regs: %d bytes, want %d", len(b), PtRegsSize)
	}
	for i, p := range r.Words() {
		*p = order.Uint64(b[8*i:])
	}
	return nil
}

// PtRegsFromBGQ builds pt_regs from the BG/Q general and special register sets
// (GetGeneralRegs, GetSpecialRegs). BG/Q is BookE, where pt_regs' dar and dsisr hold DEAR and
// ESR. orig_gpr3, softe, trap and result have no BG/Q counterpart and are 0.
func PtRegsFromBGQ(gpr [32]uint64, s cdti.SpecialRegs) PtRegs {
	return PtRegs{GPR: gpr, NIP: s.IAR, MSR: s.MSR, CTR: s.CTR, Link: s.LR, XER: s.XER, CCR: s.CR,
		DAR: s.DEAR, DSISR: s.ESR}
}

// BGQ splits r into the BG/Q general and special register sets. pt_regs has no FPSCR (it is
// in the floating-point set), so the caller supplies it.
func (r *PtRegs) BGQ(fpscr uint64) ([32]uint64, cdti.SpecialRegs) {
	return r.GPR, cdti.SpecialRegs{IAR: r.NIP, LR: r.Link, MSR: r.MSR, CR: r.CCR, CTR: r.CTR,
		XER: r.XER, FPSCR: fpscr, DEAR: r.DAR, ESR: r.DSISR}
}

// FPRegsSize is the size of the Linux ppc64 floating-point register set in bytes: 32 FPRs and
// the FPSCR, each a doubleword (elf_fpregset_t, PTRACE_GETFPREGS).
const FPRegsSize = 33 * 8

// FPRegs is the Linux ppc64 floating-point register set. The FPRs are raw IEEE double bits.
type FPRegs struct {
	FPR   [32]uint64
	FPSCR uint64
}

// Marshal returns the register set as bytes in byte order order.
func (f *FPRegs) Marshal(order binary.ByteOrder) []byte {
	b := make([]byte, FPRegsSize)
	for i, v := range f.FPR {
		order.PutUint64(b[8*i:], v)
	}
	order.PutUint64(b[256:], f.FPSCR)
	return b
}

// Unmarshal reads the register set from b in byte order order.
func (f *FPRegs) Unmarshal(b []byte, order binary.ByteOrder) error {
	if len(b) != FPRegsSize {
		return fmt.Errorf("ppc64: fpregs: %d bytes, want %d", len(b), FPRegsSize)
	}
	for i := range f.FPR {
		f.FPR[i] = order.Uint64(b[8*i:])
	}
	f.FPSCR = order.Uint64(b[256:])
	return nil
}

// FPRegsFromBGQ builds the floating-point set from BG/Q's QPX registers (GetFloatRegs) and
// the FPSCR (GetSpecialRegs). The scalar FPR is QPX element 0 (cdti-v6.md §7.2: the QPX
// convention, not stated in the CNK source).
func FPRegsFromBGQ(qpx [32]cdti.QPX, fpscr uint64) FPRegs {
	f := FPRegs{FPSCR: fpscr}
	for i, q := range qpx {
		f.FPR[i] = q[0]
	}
	return f
}

// BGQ returns the QPX registers with each scalar FPR stored in element 0. Elements 1–3 are
// taken from prev, since the Linux set does not hold them.
func (f *FPRegs) BGQ(prev [32]cdti.QPX) [32]cdti.QPX {
	out := prev
	for i, v := range f.FPR {
		out[i][0] = v
	}
	return out
}

// MSR bits the debugger reads.
const (
	MSRSF uint64 = 1 << 63 // 64-bit mode
	MSRLE uint64 = 1       // little-endian mode (MSR[LE], bit 63 in ISA numbering)
)

// MSRByteOrder returns the byte order a thread runs in, from its MSR.
func MSRByteOrder(msr uint64) binary.ByteOrder {
	if msr&MSRLE != 0 {
		return binary.LittleEndian
	}
	return binary.BigEndian
}

// DWARF register numbers on 64-bit Power as gcc emits them in .eh_frame and .debug_info
// (0–31 GPRs, 32–63 FPRs). The link register and CTR appear both as gcc's 65/66 and as the
// ABI's SPR-based 108/109. DwarfPC and DwarfMSR are no DWARF registers: they are where a
// debugger's register file keeps the next instruction address and the MSR.
const (
	DwarfR1     = 1  // the stack pointer
	DwarfR2     = 2  // the TOC pointer
	DwarfR13    = 13 // the thread pointer
	DwarfF0     = 32
	DwarfCR     = 64
	DwarfLR     = 65
	DwarfCTR    = 66
	DwarfXER    = 76
	DwarfLRSPR  = 108
	DwarfCTRSPR = 109
	DwarfPC     = 120
	DwarfMSR    = 121
	// DwarfCount bounds the numbers a register file holds.
	DwarfCount = 122
)
