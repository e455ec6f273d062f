package adapter

import (
	"debug/elf"
	"fmt"

	"github.com/hpcdap/hpcdap/cdti"
	"github.com/hpcdap/hpcdap/ppc64"
	"github.com/hpcdap/hpcdap/symbols"
)

// regSlot is where a register lives in the operating system's native register sets.
type regSlot struct {
	name  string
	dwarf int // DWARF number (-1: none)
	set   cdti.RegisterSet
	off   int
	size  int
}

// amd64Regs lists the registers the Registers scope shows on x86-64, in gdb's "info
// registers" order, with their offsets in user_regs_struct and user_fpregs_struct.
var amd64Regs = func() []regSlot {
	gp := []struct {
		name  string
		dwarf int
		off   int
	}{
		{"rax", 0, 80}, {"rbx", 3, 40}, {"rcx", 2, 88}, {"rdx", 1, 96}, {"rsi", 4, 104}, {"rdi", 5, 112},
		{"rbp", 6, 32}, {"rsp", 7, 152}, {"r8", 8, 72}, {"r9", 9, 64}, {"r10", 10, 56}, {"r11", 11, 48},
		{"r12", 12, 24}, {"r13", 13, 16}, {"r14", 14, 8}, {"r15", 15, 0}, {"rip", 16, 128},
		{"eflags", 49, 144}, {"cs", 51, 136}, {"ss", 52, 160}, {"fs_base", 58, 168}, {"gs_base", 59, 176},
	}
	var out []regSlot
	for _, g := range gp {
		out = append(out, regSlot{name: g.name, dwarf: g.dwarf, set: cdti.RegSetGeneral, off: g.off, size: 8})
	}
	for i := range 16 {
		out = append(out, regSlot{name: fmt.Sprintf("xmm%d", i), dwarf: 17 + i, set: cdti.RegSetFloat, off: 160 + 16*i, size: 16})
	}
	for i := range 8 {
		out = append(out, regSlot{name: fmt.Sprintf("st%d", i), dwarf: 33 + i, set: cdti.RegSetFloat, off: 32 + 16*i, size: 10})
	}
	out = append(out, regSlot{name: "mxcsr", dwarf: 64, set: cdti.RegSetFloat, off: 24, size: 4})
	return out
}()

// ppc64Regs lists the Power registers in pt_regs order.
var ppc64Regs = func() []regSlot {
	var out []regSlot
	for i := range 32 {
		out = append(out, regSlot{name: fmt.Sprintf("r%d", i), dwarf: i, set: cdti.RegSetGeneral, off: 8 * i, size: 8})
	}
	out = append(out,
		regSlot{name: "pc", dwarf: symbols.PPC64PC, set: cdti.RegSetGeneral, off: 8 * ppc64.PtNIP, size: 8},
		regSlot{name: "msr", dwarf: symbols.PPC64MSR, set: cdti.RegSetGeneral, off: 8 * (ppc64.PtNIP + 1), size: 8},
		regSlot{name: "ctr", dwarf: symbols.PPC64CTR, set: cdti.RegSetGeneral, off: 8 * (ppc64.PtNIP + 3), size: 8},
		regSlot{name: "lr", dwarf: symbols.PPC64LR, set: cdti.RegSetGeneral, off: 8 * (ppc64.PtNIP + 4), size: 8},
		regSlot{name: "xer", dwarf: symbols.PPC64XER, set: cdti.RegSetGeneral, off: 8 * (ppc64.PtNIP + 5), size: 8},
		regSlot{name: "cr", dwarf: symbols.PPC64CR, set: cdti.RegSetGeneral, off: 8 * (ppc64.PtNIP + 6), size: 8},
	)
	for i := range 32 {
		out = append(out, regSlot{name: fmt.Sprintf("f%d", i), dwarf: 32 + i, set: cdti.RegSetFloat, off: 8 * i, size: 8})
	}
	return out
}()

// regSlots returns the register table of a machine.
func regSlots(arch *symbols.Arch) []regSlot {
	if arch.Machine == elf.EM_X86_64 {
		return amd64Regs
	}
	return ppc64Regs
}

// registerValue formats register slot s from native sets, as gdb's "info registers" shows
// the raw value (hex for integer registers, bytes for vector ones).
func registerValue(arch *symbols.Arch, s regSlot, gp, fp []byte) (string, bool) {
	src := gp
	if s.set == cdti.RegSetFloat {
		src = fp
	}
	if s.off+s.size > len(src) {
		return "", false
	}
	b := src[s.off : s.off+s.size]
	switch s.size {
	case 8:
		return fmt.Sprintf("%#x", arch.ByteOrder.Uint64(b)), true
	case 4:
		return fmt.Sprintf("%#x", arch.ByteOrder.Uint32(b)), true
	}
	// Wide registers: hex bytes, most significant first (as gdb's uint128 view).
	v := "0x"
	for i := len(b) - 1; i >= 0; i-- {
		v += fmt.Sprintf("%02x", b[i])
	}
	return v, true
}

// patchNative returns the native set holding DWARF register reg with its bytes replaced by
// value (target order), for SetRegisterSet.
func patchNative(arch *symbols.Arch, gp, fp []byte, reg int, value []byte) (cdti.RegisterSet, []byte, error) {
	for _, s := range regSlots(arch) {
		if s.dwarf != reg {
			continue
		}
		src := gp
		if s.set == cdti.RegSetFloat {
			src = fp
		}
		if s.off+s.size > len(src) {
			break
		}
		data := append([]byte(nil), src...)
		v := make([]byte, s.size)
		copy(v, value)
		copy(data[s.off:], v)
		return s.set, data, nil
	}
	return 0, nil, fmt.Errorf("register %s cannot be written", arch.RegName(reg))
}

// patchByName is patchNative for a register named in the Registers scope.
func patchByName(arch *symbols.Arch, gp, fp []byte, name string, v uint64) (cdti.RegisterSet, []byte, error) {
	for _, s := range regSlots(arch) {
		if s.name != name || s.size > 8 {
			continue
		}
		src := gp
		if s.set == cdti.RegSetFloat {
			src = fp
		}
		if s.off+s.size > len(src) {
			break
		}
		data := append([]byte(nil), src...)
		switch s.size {
		case 8:
			arch.ByteOrder.PutUint64(data[s.off:], v)
		case 4:
			arch.ByteOrder.PutUint32(data[s.off:], uint32(v))
		}
		return s.set, data, nil
	}
	return 0, nil, fmt.Errorf("register %s cannot be written", name)
}
