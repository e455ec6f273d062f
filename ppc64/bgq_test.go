package ppc64

import (
	"encoding/binary"
	"reflect"
	"testing"

	"github.com/hpcdap/hpcdap/cdti"
)

// bgqSample is a register file with every register distinct.
func bgqSample() BGQRegs {
	var b BGQRegs
	for i := range b.GPR {
		b.GPR[i] = 0x1000 + uint64(i)
	}
	b.Special = cdti.SpecialRegs{IAR: 0x10000a34, LR: 0x10000abc, MSR: 0x9000000102806900, CR: 0x24000222,
		CTR: 6, XER: 0x20040000, FPSCR: 0x4000, DEAR: 0xdea0, ESR: 0xe5}
	for i := range b.FPR {
		b.FPR[i] = cdti.QPX{0x4033800000000000 + uint64(i), 0x11 * uint64(i), 0x22, 0x33}
	}
	b.Debug = cdti.DebugRegs{DBCR0: 1, DBCR1: 2, DBCR2: 3, DBCR3: 4, DAC1: 5, DAC2: 6, DAC3: 7, DAC4: 8,
		IAC1: 9, IAC2: 10, IAC3: 11, IAC4: 12, DBSR: 13}
	return b
}

// TestBGQRegsNames checks the Registers scope's BG/Q names and values: r0–r31, the special
// registers, the FPRs as QPX quads, the debug registers, each with its own value.
func TestBGQRegsNames(t *testing.T) {
	b := bgqSample()
	got := map[string][]uint64{}
	var order []string
	for _, r := range b.List() {
		got[r.Name] = r.Words
		order = append(order, r.Name)
	}
	want := map[string][]uint64{"r0": {0x1000}, "r31": {0x101f}, "iar": {0x10000a34}, "lr": {0x10000abc},
		"msr": {0x9000000102806900}, "cr": {0x24000222}, "ctr": {6}, "xer": {0x20040000}, "fpscr": {0x4000},
		"dear": {0xdea0}, "esr": {0xe5}, "f0": {0x4033800000000000, 0, 0x22, 0x33},
		"f31": {0x4033800000000000 + 31, 0x11 * 31, 0x22, 0x33}, "dbcr0": {1}, "dbcr3": {4}, "dac1": {5},
		"dac4": {8}, "iac1": {9}, "iac4": {12}, "dbsr": {13}}
	for n, w := range want {
		if !reflect.DeepEqual(got[n], w) {
			t.Errorf("%s = %#x, want %#x", n, got[n], w)
		}
	}
	if len(order) != 32+9+32+13 || order[0] != "r0" || order[32] != "iar" || order[41] != "f0" || order[73] != "dbcr0" {
		t.Errorf("order %v", order)
	}
}

// TestBGQRegsNative checks the conversion to the Linux sets the unwinder reads and back to the
// v6 Set commands: a changed pt_regs and FPR set come back as the BG/Q values, QPX elements
// 1–3 kept.
func TestBGQRegsNative(t *testing.T) {
	b := bgqSample()
	for _, order := range []binary.ByteOrder{binary.BigEndian, binary.LittleEndian} {
		gp, fp := b.Native(order)
		var p PtRegs
		var f FPRegs
		if err := p.Unmarshal(gp, order); err != nil {
			t.Fatal(err)
		}
		if err := f.Unmarshal(fp, order); err != nil {
			t.Fatal(err)
		}
		if p.GPR != b.GPR || p.NIP != b.Special.IAR || p.Link != b.Special.LR || p.CCR != b.Special.CR ||
			p.DAR != b.Special.DEAR || f.FPR[3] != b.FPR[3][0] || f.FPSCR != b.Special.FPSCR {
			t.Fatalf("%v: native %+v %+v", order, p, f)
		}
		p.GPR[7], p.NIP = 77, 0x10000b00
		f.FPR[2], f.FPSCR = 0x3ff0000000000000, 0x8000
		cmds, err := b.SetNative(9, p.Marshal(order), f.Marshal(order), order)
		if err != nil {
			t.Fatal(err)
		}
		if len(cmds) != 3 {
			t.Fatalf("%d commands", len(cmds))
		}
		g := cmds[0].(*cdti.SetGeneralRegs)
		fl := cmds[1].(*cdti.SetFloatRegs)
		s := cmds[2].(*cdti.SetSpecialRegs)
		if g.ThreadID != 9 || g.GPR[7] != 77 || g.GPR[8] != b.GPR[8] || s.Regs.IAR != 0x10000b00 ||
			s.Regs.LR != b.Special.LR || s.Regs.FPSCR != 0x8000 ||
			fl.FPR[2] != (cdti.QPX{0x3ff0000000000000, 0x22, 0x22, 0x33}) || fl.FPR[5] != b.FPR[5] {
			t.Errorf("%v: set commands %+v %+v %+v", order, g, fl, s)
		}
	}
}

// TestBGQRegsSetCommand checks the command that writes one register by its BG/Q name.
func TestBGQRegsSetCommand(t *testing.T) {
	b := bgqSample()
	cases := []struct {
		name string
		want cdti.Command
	}{
		{"r13", &cdti.SetGeneralReg{ThreadID: 4, Reg: 13, Value: 5}},
		{"iar", &cdti.SetSpecialReg{ThreadID: 4, Reg: cdti.RegIAR, Value: 5}},
		{"esr", &cdti.SetSpecialReg{ThreadID: 4, Reg: cdti.RegESR, Value: 5}},
		{"dac2", &cdti.SetDebugReg{ThreadID: 4, Reg: cdti.RegDAC2, Value: 5}},
		{"f1", &cdti.SetFloatReg{ThreadID: 4, Reg: 1, Value: cdti.QPX{5, 0x11, 0x22, 0x33}}},
	}
	for _, c := range cases {
		got, err := b.SetCommand(4, c.name, 5)
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: %#v, %v; want %#v", c.name, got, err, c.want)
		}
	}
	for _, bad := range []string{"r32", "f32", "pc", "r1x", "", "sp"} {
		if _, err := b.SetCommand(4, bad, 1); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
