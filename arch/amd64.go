package arch

import (
	"debug/elf"
	"encoding/binary"
	"fmt"

	"github.com/hpcdap/hpcdap/amd64"
)

var amd64Arch = func() *Arch {
	a := &Arch{Name: "amd64", Machine: elf.EM_X86_64, ByteOrder: binary.LittleEndian, PtrSize: 8,
		PCReg: amd64.DwarfRIP, SPReg: amd64.DwarfRSP, FPReg: amd64.DwarfRBP, LRReg: -1,
		RAReg: amd64.DwarfRIP, TPReg: amd64.DwarfFSBase, NumRegs: amd64.DwarfCount,
		GeneralSet: "user_regs_struct", PCAfterTrap: amd64.PCAfterTrap, InstAlign: 1,
		MaxInstLen: amd64.MaxInstLen, trap: []byte{amd64.TrapByte}, isa: amd64ISA{}}
	gp := []struct {
		name  string
		dwarf int
		off   int
	}{
		{"rax", amd64.DwarfRAX, amd64.OffRAX}, {"rbx", amd64.DwarfRBX, amd64.OffRBX},
		{"rcx", amd64.DwarfRCX, amd64.OffRCX}, {"rdx", amd64.DwarfRDX, amd64.OffRDX},
		{"rsi", amd64.DwarfRSI, amd64.OffRSI}, {"rdi", amd64.DwarfRDI, amd64.OffRDI},
		{"rbp", amd64.DwarfRBP, amd64.OffRBP}, {"rsp", amd64.DwarfRSP, amd64.OffRSP},
	}
	for _, g := range gp {
		a.Registers = append(a.Registers, Register{Name: g.name, DWARF: g.dwarf, Set: General, Off: g.off, Size: 8})
	}
	for i := 8; i < 16; i++ {
		a.Registers = append(a.Registers, Register{Name: fmt.Sprintf("r%d", i), DWARF: amd64.DwarfR8 + i - 8,
			Set: General, Off: amd64.GPROffsets[i], Size: 8})
	}
	a.Registers = append(a.Registers,
		Register{Name: "rip", DWARF: amd64.DwarfRIP, Set: General, Off: amd64.OffRIP, Size: 8},
		Register{Name: "eflags", DWARF: amd64.DwarfRFLAGS, Set: General, Off: amd64.OffEFLAGS, Size: 8},
		Register{Name: "cs", DWARF: amd64.DwarfCS, Set: General, Off: amd64.OffCS, Size: 8},
		Register{Name: "ss", DWARF: amd64.DwarfSS, Set: General, Off: amd64.OffSS, Size: 8},
		Register{Name: "fs_base", DWARF: amd64.DwarfFSBase, Set: General, Off: amd64.OffFSBase, Size: 8},
		Register{Name: "gs_base", DWARF: amd64.DwarfGSBase, Set: General, Off: amd64.OffGSBase, Size: 8})
	for i := range 16 {
		a.Registers = append(a.Registers, Register{Name: fmt.Sprintf("xmm%d", i), DWARF: amd64.DwarfXMM0 + i,
			Set: Float, Off: amd64.OffXMM0 + amd64.XMMSize*i, Size: amd64.XMMSize})
	}
	for i := range 8 {
		a.Registers = append(a.Registers, Register{Name: fmt.Sprintf("st%d", i), DWARF: amd64.DwarfST0 + i,
			Set: Float, Off: amd64.OffST0 + amd64.STSlot*i, Size: amd64.STSize})
	}
	a.Registers = append(a.Registers, Register{Name: "mxcsr", DWARF: amd64.DwarfMXCSR, Set: Float, Off: amd64.OffMXCSR, Size: 4})

	// The names expressions and unwinding know: the integer registers, rip, the vector and
	// x87 registers, eflags and the segment bases.
	a.regNames = map[int]string{}
	for _, r := range a.Registers {
		switch r.DWARF {
		case amd64.DwarfCS, amd64.DwarfSS, amd64.DwarfMXCSR:
		default:
			a.regNames[r.DWARF] = r.Name
		}
	}
	a.index()
	a.regNums["pc"] = amd64.DwarfRIP
	a.regNums["sp"] = amd64.DwarfRSP
	a.regNums["fp"] = amd64.DwarfRBP
	return a
}()

// amd64ISA decodes x86-64 instructions.
type amd64ISA struct{}

func (amd64ISA) decodeCall(code []byte, pc uint64) (bool, uint64, bool) {
	call, n, err := amd64.DecodeCall(code)
	if err != nil {
		return false, 0, false
	}
	return call, pc + uint64(n), true
}

func (amd64ISA) callTarget(code []byte, pc uint64) (uint64, bool) {
	return amd64.CallTarget(code, pc)
}

func (amd64ISA) instLen(code []byte) int {
	if inst, err := amd64.Decode(code); err == nil {
		return inst.Len
	}
	return 1
}

func (amd64ISA) disassemble(code []byte, pc uint64, sym func(uint64) (string, uint64)) (string, int, error) {
	return amd64.Disassemble(code, pc, sym)
}

func (amd64ISA) accessAddress(code []byte, pc uint64, gp []byte) (uint64, bool) {
	return amd64.AccessAddress(code, pc, gp)
}
