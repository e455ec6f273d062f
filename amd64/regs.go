package amd64

import "encoding/binary"

// Byte offsets in the Linux x86-64 struct user_regs_struct (<sys/user.h>), the general
// register set of PTRACE_GETREGS and NT_PRSTATUS: 27 64-bit words.
const (
	OffR15     = 0
	OffR14     = 8
	OffR13     = 16
	OffR12     = 24
	OffRBP     = 32
	OffRBX     = 40
	OffR11     = 48
	OffR10     = 56
	OffR9      = 64
	OffR8      = 72
	OffRAX     = 80
	OffRCX     = 88
	OffRDX     = 96
	OffRSI     = 104
	OffRDI     = 112
	OffOrigRAX = 120 // the system call number at entry; -1 outside a system call
	OffRIP     = 128
	OffCS      = 136
	OffEFLAGS  = 144
	OffRSP     = 152
	OffSS      = 160
	OffFSBase  = 168
	OffGSBase  = 176
	OffDS      = 184
	OffES      = 192
	OffFS      = 200
	OffGS      = 208
	// UserRegsSize is the size of user_regs_struct in bytes.
	UserRegsSize = 216
)

// Byte offsets in struct user_fpregs_struct, the 512-byte FXSAVE area of PTRACE_GETFPREGS and
// NT_PRFPREG.
const (
	OffMXCSR = 24  // mxcsr, 4 bytes
	OffST0   = 32  // st0–st7: 16-byte slots holding 10-byte x87 registers
	OffXMM0  = 160 // xmm0–xmm15: 16 bytes each
	// FPRegsSize is the size of user_fpregs_struct in bytes.
	FPRegsSize = 512
	// STSize is the width of an x87 register; STSlot the stride of its slot.
	STSize, STSlot = 10, 16
	// XMMSize is the width of an SSE register.
	XMMSize = 16
)

// DWARF register numbers (System V x86-64 psABI, figure 3.36).
const (
	DwarfRAX    = 0
	DwarfRDX    = 1
	DwarfRCX    = 2
	DwarfRBX    = 3
	DwarfRSI    = 4
	DwarfRDI    = 5
	DwarfRBP    = 6
	DwarfRSP    = 7
	DwarfR8     = 8  // r8–r15 are 8–15
	DwarfRIP    = 16 // the return-address column
	DwarfXMM0   = 17 // xmm0–xmm15 are 17–32
	DwarfST0    = 33 // st0–st7 are 33–40
	DwarfRFLAGS = 49
	DwarfCS     = 51
	DwarfSS     = 52
	DwarfFSBase = 58
	DwarfGSBase = 59
	DwarfMXCSR  = 64
	// DwarfCount bounds the DWARF numbers the debugger keeps for a frame.
	DwarfCount = 67
)

// GPROffsets lists the user_regs_struct offset of each integer register by DWARF number
// (rax, rdx, rcx, rbx, rsi, rdi, rbp, rsp, r8–r15, rip).
var GPROffsets = [17]int{OffRAX, OffRDX, OffRCX, OffRBX, OffRSI, OffRDI, OffRBP, OffRSP,
	OffR8, OffR9, OffR10, OffR11, OffR12, OffR13, OffR14, OffR15, OffRIP}

// Reg returns the 64-bit register at byte offset off of a native register set, or 0 when the
// set is too short to hold it.
func Reg(regs []byte, off int) uint64 {
	if off < 0 || off+8 > len(regs) {
		return 0
	}
	return binary.LittleEndian.Uint64(regs[off:])
}

// SetReg stores v in the 64-bit register at byte offset off of a native register set; a set
// too short to hold it is left alone.
func SetReg(regs []byte, off int, v uint64) {
	if off >= 0 && off+8 <= len(regs) {
		binary.LittleEndian.PutUint64(regs[off:], v)
	}
}

// SetPC sets rip in a user_regs_struct and, as gdb does, orig_rax = -1: the kernel then does
// not restart an interrupted system call, which would move rip back by the size of the
// syscall instruction.
func SetPC(regs []byte, pc uint64) {
	SetReg(regs, OffRIP, pc)
	SetReg(regs, OffOrigRAX, ^uint64(0))
}

// More of user_fpregs_struct, and the flags and stack facts of the System V AMD64 ABI that a
// debugger calling a function in the target must respect.
const (
	// OffFTW is the abridged x87 tag word (1 byte): 0 is an empty register stack.
	OffFTW = 4
	// FlagDF is the direction flag in eflags, clear at every call.
	FlagDF = 1 << 10
	// RedZone is the area below the stack pointer that leaf code may use without moving it.
	RedZone = 128
)

// IntArgOffsets lists the user_regs_struct offsets of the integer argument registers of a
// call, in order: rdi, rsi, rdx, rcx, r8, r9.
var IntArgOffsets = [6]int{OffRDI, OffRSI, OffRDX, OffRCX, OffR8, OffR9}

// SyscallArgOffsets lists the offsets of the argument registers of a Linux system call, in
// order: rdi, rsi, rdx, r10, r8, r9. The call number goes in rax.
var SyscallArgOffsets = [6]int{OffRDI, OffRSI, OffRDX, OffR10, OffR8, OffR9}
