// Package arch describes each machine the debugger supports in one value: its ELF identity,
// byte order and pointer size, its register file (DWARF numbers, names, and where each
// register lives in the operating system's native register sets), its breakpoint
// instruction and its instruction decoding. Symbols, the agent, the back ends and the
// adapter look a machine up once, by ELF machine and byte order, and ask the description
// instead of switching on the machine themselves. The facts come from the machine packages
// (amd64, ppc64); this package only assembles them.
package arch

import (
	"debug/elf"
	"encoding/binary"
	"fmt"
)

// Arch describes one machine.
type Arch struct {
	Name      string           // "amd64", "ppc64" (big-endian ELFv1) or "ppc64le" (ELFv2)
	Machine   elf.Machine      // ELF e_machine
	ByteOrder binary.ByteOrder // data byte order
	PtrSize   int              // bytes in a pointer

	PCReg int // DWARF number of the program counter (a pseudo-register on Power)
	SPReg int // stack pointer
	FPReg int // frame pointer used by the fallback unwinder (rbp; r1 on Power)
	LRReg int // link register, or -1 where the return address lives on the stack
	// RAReg is the default return-address column of CFI on this machine.
	RAReg int
	// TPReg is the thread-pointer register (fs_base; r13 on Power).
	TPReg int
	// NumRegs bounds the DWARF register numbers a register file holds for this machine.
	NumRegs int

	// Registers lists the registers a debugger shows, in gdb's "info registers" order, with
	// where each lives in the native register sets.
	Registers []Register
	// GeneralSet names the native general register set ("user_regs_struct", "pt_regs").
	GeneralSet string

	// PCAfterTrap is how far past a breakpoint's address the program counter stands when
	// the trap is reported (1 on x86-64, 0 on Power).
	PCAfterTrap uint64
	// InstAlign is the alignment of instructions: 1 on x86-64, 4 on Power.
	InstAlign int
	// MaxInstLen is the longest instruction in bytes.
	MaxInstLen int

	trap     []byte
	isa      isa
	regNames map[int]string
	regNums  map[string]int
	aliases  map[int]int
}

// Set names a native register set.
type Set uint8

// The native register sets.
const (
	General Set = iota + 1 // user_regs_struct; pt_regs
	Float                  // user_fpregs_struct (FXSAVE); the FPRs and FPSCR
)

// Register is one register of a machine and where it lives.
type Register struct {
	Name  string // as gdb names it
	DWARF int    // DWARF register number
	Set   Set    // the native set that holds it
	Off   int    // byte offset in that set
	Size  int    // bytes
}

// isa is a machine's instruction decoding.
type isa interface {
	decodeCall(code []byte, pc uint64) (call bool, next uint64, ok bool)
	callTarget(code []byte, pc uint64) (target uint64, ok bool)
	instLen(code []byte) int
	disassemble(code []byte, pc uint64, sym func(uint64) (string, uint64)) (string, int, error)
	accessAddress(code []byte, pc uint64, gp []byte) (uint64, bool)
}

// For returns the description of an ELF machine of byte order order, or an error for
// machines the debugger does not support.
func For(m elf.Machine, order binary.ByteOrder) (*Arch, error) {
	switch {
	case m == elf.EM_X86_64:
		return amd64Arch, nil
	case m == elf.EM_PPC64 && order == binary.BigEndian:
		return ppc64Arch, nil
	case m == elf.EM_PPC64:
		return ppc64leArch, nil
	}
	return nil, fmt.Errorf("unsupported machine %v", m)
}

// RegName returns the conventional name of DWARF register n ("rbp", "r31"), or "" when the
// number means nothing on this machine.
func (a *Arch) RegName(n int) string { return a.regNames[n] }

// RegNum returns the DWARF number of a register named as gdb names it ("rsp", "r1", "pc").
func (a *Arch) RegNum(name string) (int, bool) {
	n, ok := a.regNums[name]
	return n, ok
}

// Alias returns the second DWARF number under which register n also appears (Power's link
// register and CTR have two).
func (a *Arch) Alias(n int) (int, bool) {
	m, ok := a.aliases[n]
	return m, ok
}

// Register returns the register with DWARF number n.
func (a *Arch) Register(n int) (Register, bool) {
	for _, r := range a.Registers {
		if r.DWARF == n {
			return r, true
		}
	}
	return Register{}, false
}

// Trap returns a fresh copy of the machine's software breakpoint instruction in its byte
// order: int3 on x86-64, `trap` (tw 31,r0,r0) on Power.
func (a *Arch) Trap() []byte { return append([]byte(nil), a.trap...) }

// IsPower reports whether the machine is 64-bit Power of either byte order.
func (a *Arch) IsPower() bool { return a.Machine == elf.EM_PPC64 }

// ELFv1 reports whether function symbols point at .opd descriptors (big-endian ppc64).
func (a *Arch) ELFv1() bool { return a.Machine == elf.EM_PPC64 && a.ByteOrder == binary.BigEndian }

// DecodeCall reports whether the instruction at the start of code, which lies at pc, is a
// call, and the address after it; ok is false when code does not decode.
func (a *Arch) DecodeCall(code []byte, pc uint64) (call bool, next uint64, ok bool) {
	return a.isa.decodeCall(code, pc)
}

// CallTarget returns the address a direct call at the start of code, which lies at pc,
// calls; ok is false for an indirect call (through a register or memory) and for an
// instruction that is not a call.
func (a *Arch) CallTarget(code []byte, pc uint64) (target uint64, ok bool) {
	return a.isa.callTarget(code, pc)
}

// InstLen returns the length of the instruction at the start of code for walking a
// function's code: the decoded length on x86-64 (1 when it does not decode), the 4-byte word
// on Power.
func (a *Arch) InstLen(code []byte) int { return a.isa.instLen(code) }

// Disassemble prints the instruction at the start of code, which lies at pc, in GNU
// assembler syntax, and returns its length; sym names addresses where the syntax shows them
// (it may be nil).
func (a *Arch) Disassemble(code []byte, pc uint64, sym func(uint64) (string, uint64)) (text string, length int, err error) {
	return a.isa.disassemble(code, pc, sym)
}

// AccessAddress returns the data address the instruction at the start of code, which lies at
// pc, accesses, computed from gp, the native general set before it runs; ok is false where
// the machine's operands are not decoded (Power) or the instruction has no memory operand.
func (a *Arch) AccessAddress(code []byte, pc uint64, gp []byte) (uint64, bool) {
	return a.isa.accessAddress(code, pc, gp)
}

// index builds the name lookups from regNames.
func (a *Arch) index() {
	a.regNums = make(map[string]int, len(a.regNames))
	for n, s := range a.regNames {
		a.regNums[s] = n
	}
}
