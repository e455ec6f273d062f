package symbols

import (
	"debug/elf"
	"encoding/binary"
	"fmt"
)

// Arch describes the machine facts the symbol layer needs: byte order, pointer size and the
// DWARF register numbering of the architecture.
type Arch struct {
	Name      string           // "amd64", "ppc64" (big-endian ELFv1) or "ppc64le" (ELFv2)
	Machine   elf.Machine      // ELF e_machine
	ByteOrder binary.ByteOrder // data byte order
	PtrSize   int              // bytes in a pointer

	PCReg int // DWARF number of the program counter (pseudo-register on Power)
	SPReg int // stack pointer
	FPReg int // frame pointer used by the fallback unwinder (rbp; r1 on Power)
	LRReg int // link register, or -1 where the return address lives on the stack
	// RAReg is the default return-address column of CFI on this machine.
	RAReg int
	// NumRegs bounds the DWARF register numbers a Regs holds for this machine.
	NumRegs int

	regNames map[int]string
	regNums  map[string]int
}

// DWARF register numbers on x86-64 (System V psABI).
const (
	AMD64RAX    = 0
	AMD64RDX    = 1
	AMD64RCX    = 2
	AMD64RBX    = 3
	AMD64RSI    = 4
	AMD64RDI    = 5
	AMD64RBP    = 6
	AMD64RSP    = 7
	AMD64R8     = 8
	AMD64RIP    = 16 // the return-address column
	AMD64XMM0   = 17
	AMD64ST0    = 33
	AMD64RFLAGS = 49
	AMD64FSBase = 58
	AMD64GSBase = 59
)

// DWARF register numbers on 64-bit Power as gcc emits them in .eh_frame and .debug_info
// (0-31 GPRs, 32-63 FPRs). The link register and CTR appear both as gcc's 65/66 and as the
// ABI's SPR-based 108/109; Regs built by this package fill both.
const (
	PPC64R1      = 1
	PPC64R2      = 2
	PPC64F0      = 32
	PPC64LR      = 65
	PPC64CTR     = 66
	PPC64LRSPR   = 108
	PPC64CTRSPR  = 109
	PPC64CR      = 64
	PPC64XER     = 76
	PPC64PC      = 120 // not a DWARF register: where Regs keeps the next instruction address
	PPC64MSR     = 121 // likewise, the machine state register
	ppc64NumRegs = 122
)

var amd64Arch = func() *Arch {
	a := &Arch{Name: "amd64", Machine: elf.EM_X86_64, ByteOrder: binary.LittleEndian, PtrSize: 8,
		PCReg: AMD64RIP, SPReg: AMD64RSP, FPReg: AMD64RBP, LRReg: -1, RAReg: AMD64RIP, NumRegs: 67}
	names := []string{"rax", "rdx", "rcx", "rbx", "rsi", "rdi", "rbp", "rsp",
		"r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15", "rip"}
	a.regNames = map[int]string{}
	for i, n := range names {
		a.regNames[i] = n
	}
	for i := 0; i < 16; i++ {
		a.regNames[AMD64XMM0+i] = fmt.Sprintf("xmm%d", i)
	}
	for i := 0; i < 8; i++ {
		a.regNames[AMD64ST0+i] = fmt.Sprintf("st%d", i)
	}
	a.regNames[AMD64RFLAGS] = "eflags"
	a.regNames[AMD64FSBase] = "fs_base"
	a.regNames[AMD64GSBase] = "gs_base"
	a.index()
	return a
}()

func newPPC64Arch(name string, order binary.ByteOrder) *Arch {
	a := &Arch{Name: name, Machine: elf.EM_PPC64, ByteOrder: order, PtrSize: 8,
		PCReg: PPC64PC, SPReg: PPC64R1, FPReg: PPC64R1, LRReg: PPC64LR, RAReg: PPC64LR,
		NumRegs: ppc64NumRegs}
	a.regNames = map[int]string{}
	for i := 0; i < 32; i++ {
		a.regNames[i] = fmt.Sprintf("r%d", i)
		a.regNames[PPC64F0+i] = fmt.Sprintf("f%d", i)
	}
	a.regNames[PPC64CR] = "cr"
	a.regNames[PPC64LR] = "lr"
	a.regNames[PPC64CTR] = "ctr"
	a.regNames[PPC64XER] = "xer"
	a.regNames[PPC64PC] = "pc"
	a.regNames[PPC64MSR] = "msr"
	a.index()
	a.regNums["lr"] = PPC64LR
	return a
}

var (
	ppc64Arch   = newPPC64Arch("ppc64", binary.BigEndian)
	ppc64leArch = newPPC64Arch("ppc64le", binary.LittleEndian)
)

func (a *Arch) index() {
	a.regNums = make(map[string]int, len(a.regNames))
	for n, s := range a.regNames {
		a.regNums[s] = n
	}
	if a.Machine == elf.EM_X86_64 {
		a.regNums["pc"] = AMD64RIP
		a.regNums["sp"] = AMD64RSP
		a.regNums["fp"] = AMD64RBP
	} else {
		a.regNums["sp"] = PPC64R1
	}
}

// ArchFor returns the Arch of an ELF machine and byte order, or an error for machines the
// package does not support.
func ArchFor(m elf.Machine, order binary.ByteOrder) (*Arch, error) {
	switch {
	case m == elf.EM_X86_64:
		return amd64Arch, nil
	case m == elf.EM_PPC64 && order == binary.BigEndian:
		return ppc64Arch, nil
	case m == elf.EM_PPC64:
		return ppc64leArch, nil
	}
	return nil, fmt.Errorf("symbols: unsupported machine %v", m)
}

// RegName returns the conventional name of DWARF register n ("rbp", "r31"), or "" when the
// number means nothing on this machine.
func (a *Arch) RegName(n int) string { return a.regNames[n] }

// RegNum returns the DWARF number of a register named as gdb names it ("rsp", "r1", "pc").
func (a *Arch) RegNum(name string) (int, bool) {
	n, ok := a.regNums[name]
	return n, ok
}

// isPPC64 reports whether the machine is 64-bit Power of either byte order.
func (a *Arch) isPPC64() bool { return a.Machine == elf.EM_PPC64 }

// ELFv1 reports whether function symbols point at .opd descriptors (big-endian ppc64).
func (a *Arch) ELFv1() bool { return a.Machine == elf.EM_PPC64 && a.ByteOrder == binary.BigEndian }
