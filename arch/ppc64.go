package arch

import (
	"debug/elf"
	"encoding/binary"
	"fmt"

	"github.com/hpcdap/hpcdap/ppc64"
)

var (
	ppc64Arch   = newPPC64("ppc64", binary.BigEndian)
	ppc64leArch = newPPC64("ppc64le", binary.LittleEndian)
)

func newPPC64(name string, order binary.ByteOrder) *Arch {
	a := &Arch{Name: name, Machine: elf.EM_PPC64, ByteOrder: order, PtrSize: 8,
		PCReg: ppc64.DwarfPC, SPReg: ppc64.DwarfR1, FPReg: ppc64.DwarfR1, LRReg: ppc64.DwarfLR,
		RAReg: ppc64.DwarfLR, TPReg: ppc64.DwarfR13, NumRegs: ppc64.DwarfCount,
		GeneralSet: "pt_regs", PCAfterTrap: 0, InstAlign: 4, MaxInstLen: 8,
		trap: ppc64.PutWord(order, ppc64.TrapWordLinux), isa: powerISA{order},
		aliases: map[int]int{ppc64.DwarfLR: ppc64.DwarfLRSPR, ppc64.DwarfCTR: ppc64.DwarfCTRSPR}}
	for i := range 32 {
		a.Registers = append(a.Registers, Register{Name: fmt.Sprintf("r%d", i), DWARF: i, Set: General, Off: 8 * i, Size: 8})
	}
	a.Registers = append(a.Registers,
		Register{Name: "pc", DWARF: ppc64.DwarfPC, Set: General, Off: 8 * ppc64.PtNIP, Size: 8},
		Register{Name: "msr", DWARF: ppc64.DwarfMSR, Set: General, Off: 8 * ppc64.PtMSR, Size: 8},
		Register{Name: "ctr", DWARF: ppc64.DwarfCTR, Set: General, Off: 8 * ppc64.PtCTR, Size: 8},
		Register{Name: "lr", DWARF: ppc64.DwarfLR, Set: General, Off: 8 * ppc64.PtLink, Size: 8},
		Register{Name: "xer", DWARF: ppc64.DwarfXER, Set: General, Off: 8 * ppc64.PtXER, Size: 8},
		Register{Name: "cr", DWARF: ppc64.DwarfCR, Set: General, Off: 8 * ppc64.PtCCR, Size: 8},
	)
	for i := range 32 {
		a.Registers = append(a.Registers, Register{Name: fmt.Sprintf("f%d", i), DWARF: ppc64.DwarfF0 + i, Set: Float, Off: 8 * i, Size: 8})
	}
	a.regNames = map[int]string{}
	for _, r := range a.Registers {
		a.regNames[r.DWARF] = r.Name
	}
	a.index()
	a.regNums["sp"] = ppc64.DwarfR1
	return a
}

// powerISA decodes Power instructions of one byte order.
type powerISA struct{ order binary.ByteOrder }

func (p powerISA) decodeCall(code []byte, pc uint64) (bool, uint64, bool) {
	inst, err := ppc64.Decode(code, pc, p.order)
	if err != nil {
		return false, 0, false
	}
	return inst.IsCall(), pc + uint64(inst.Len), true
}

func (p powerISA) callTarget(code []byte, pc uint64) (uint64, bool) {
	inst, err := ppc64.Decode(code, pc, p.order)
	if err != nil || !inst.IsCall() {
		return 0, false
	}
	return inst.Target()
}

func (powerISA) instLen([]byte) int { return 4 }

func (p powerISA) disassemble(code []byte, pc uint64, _ func(uint64) (string, uint64)) (string, int, error) {
	inst, err := ppc64.Decode(code, pc, p.order)
	if err != nil {
		return "", 0, err
	}
	return inst.Text, inst.Len, nil
}

func (powerISA) accessAddress([]byte, uint64, []byte) (uint64, bool) { return 0, false }
