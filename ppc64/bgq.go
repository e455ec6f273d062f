package ppc64

import (
	"encoding/binary"
	"fmt"

	"github.com/hpcdap/hpcdap/cdti"
)

// BGQRegs is one thread's registers as a Blue Gene/Q CNK gives them through CDTI v6:
// GetGeneralRegs, GetSpecialRegs, GetFloatRegs (32 QPX registers of four doublewords) and
// GetDebugRegs.
type BGQRegs struct {
	GPR     [32]uint64
	Special cdti.SpecialRegs
	FPR     [32]cdti.QPX
	Debug   cdti.DebugRegs
}

// BGQQuery returns the four query commands that read a thread's BGQRegs, in the order
// FromBGQAcks takes their acks.
func BGQQuery(tid uint32) []cdti.Command {
	return []cdti.Command{&cdti.GetGeneralRegs{ThreadID: tid}, &cdti.GetSpecialRegs{ThreadID: tid},
		&cdti.GetFloatRegs{ThreadID: tid}, &cdti.GetDebugRegs{ThreadID: tid}}
}

// FromBGQAcks fills r from the results of BGQQuery's commands. The general and special sets
// are required; a failed float or debug query leaves those registers zero (the CNK answers
// every one of them).
func (r *BGQRegs) FromBGQAcks(rs []cdti.Result) error {
	if len(rs) != 4 {
		return fmt.Errorf("ppc64: BG/Q registers: %d results, want 4", len(rs))
	}
	for i, want := range []cdti.CommandType{cdti.TypeGetGeneralRegsAck, cdti.TypeGetSpecialRegsAck} {
		if rs[i].Code != cdti.CmdSuccess {
			return fmt.Errorf("ppc64: BG/Q registers: %v: %v", want-1, rs[i].Code)
		}
	}
	g, ok1 := rs[0].Ack.(*cdti.GetGeneralRegsAck)
	s, ok2 := rs[1].Ack.(*cdti.GetSpecialRegsAck)
	if !ok1 || !ok2 {
		return fmt.Errorf("ppc64: BG/Q registers: answered with %T and %T", rs[0].Ack, rs[1].Ack)
	}
	r.GPR, r.Special = g.GPR, s.Regs
	if f, ok := rs[2].Ack.(*cdti.GetFloatRegsAck); ok && rs[2].Code == cdti.CmdSuccess {
		r.FPR = f.FPR
	}
	if d, ok := rs[3].Ack.(*cdti.GetDebugRegsAck); ok && rs[3].Code == cdti.CmdSuccess {
		r.Debug = d.Regs
	}
	return nil
}

// Native returns the registers as the Linux sets the symbol code reads, pt_regs and the FPR
// set, in byte order order.
func (r *BGQRegs) Native(order binary.ByteOrder) (gp, fp []byte) {
	p := PtRegsFromBGQ(r.GPR, r.Special)
	f := FPRegsFromBGQ(r.FPR, r.Special.FPSCR)
	return p.Marshal(order), f.Marshal(order)
}

// SetNative returns the CDTI v6 update commands that write Linux-layout register sets back
// (gp and fp as Native returns them; either may be nil): SetGeneralRegs and SetSpecialRegs
// for pt_regs, SetFloatRegs (QPX elements 1–3 kept from r) and SetSpecialRegs for the FPRs
// and FPSCR.
func (r *BGQRegs) SetNative(tid uint32, gp, fp []byte, order binary.ByteOrder) ([]cdti.Command, error) {
	special := r.Special
	var cmds []cdti.Command
	if gp != nil {
		var p PtRegs
		if err := p.Unmarshal(gp, order); err != nil {
			return nil, err
		}
		var gpr [32]uint64
		gpr, special = p.BGQ(special.FPSCR)
		cmds = append(cmds, &cdti.SetGeneralRegs{ThreadID: tid, GPR: gpr})
	}
	if fp != nil {
		var f FPRegs
		if err := f.Unmarshal(fp, order); err != nil {
			return nil, err
		}
		special.FPSCR = f.FPSCR
		cmds = append(cmds, &cdti.SetFloatRegs{ThreadID: tid, FPR: f.BGQ(r.FPR)})
	}
	return append(cmds, &cdti.SetSpecialRegs{ThreadID: tid, Regs: special}), nil
}

// BGQReg is one register of BGQRegs under its BG/Q name.
type BGQReg struct {
	Name string
	// Words holds its value: one doubleword, or the four of a QPX register, element 0 (the
	// scalar FPR) first.
	Words []uint64
	// Alias is the name the expression evaluator knows it by ($pc for iar), "" if none.
	Alias string
}

// bgqSpecial and bgqDebug are the BG/Q special and debug registers in their selectors' order.
var (
	bgqSpecial = []cdti.SpecialReg{cdti.RegIAR, cdti.RegLR, cdti.RegMSR, cdti.RegCR, cdti.RegCTR, cdti.RegXER,
		cdti.RegFPSCR, cdti.RegDEAR, cdti.RegESR}
	bgqDebug = []cdti.DebugReg{cdti.RegDBCR0, cdti.RegDBCR1, cdti.RegDBCR2, cdti.RegDBCR3, cdti.RegDAC1,
		cdti.RegDAC2, cdti.RegDAC3, cdti.RegDAC4, cdti.RegIAC1, cdti.RegIAC2, cdti.RegIAC3, cdti.RegIAC4, cdti.RegDBSR}
)

// List returns every register by its BG/Q name: the GPRs r0–r31, the special registers (iar,
// lr, msr, cr, ctr, xer, fpscr, dear, esr), the FPRs f0–f31 as QPX quads, and the debug
// registers (dbcr0–dbcr3, dac1–dac4, iac1–iac4, dbsr).
func (r *BGQRegs) List() []BGQReg {
	out := make([]BGQReg, 0, 32+len(bgqSpecial)+32+len(bgqDebug))
	for i, v := range r.GPR {
		n := fmt.Sprintf("r%d", i)
		out = append(out, BGQReg{Name: n, Words: []uint64{v}, Alias: n})
	}
	for _, s := range bgqSpecial {
		alias := s.String()
		switch s {
		case cdti.RegIAR:
			alias = "pc"
		case cdti.RegFPSCR, cdti.RegDEAR, cdti.RegESR:
			alias = ""
		}
		out = append(out, BGQReg{Name: s.String(), Words: []uint64{r.Special.Get(s)}, Alias: alias})
	}
	for i, q := range r.FPR {
		n := fmt.Sprintf("f%d", i)
		out = append(out, BGQReg{Name: n, Words: q[:], Alias: n})
	}
	for _, d := range bgqDebug {
		out = append(out, BGQReg{Name: d.String(), Words: []uint64{r.Debug.Get(d)}})
	}
	return out
}

// SetCommand returns the CDTI v6 command that writes v into the register named name (a
// BG/Q name, as List gives them): SetGeneralReg, SetSpecialReg, SetDebugReg, or for an FPR
// SetFloatReg with v in element 0 and the quad's other elements kept.
func (r *BGQRegs) SetCommand(tid uint32, name string, v uint64) (cdti.Command, error) {
	var n int
	if _, err := fmt.Sscanf(name, "r%d", &n); err == nil && name == fmt.Sprintf("r%d", n) && n < 32 {
		return &cdti.SetGeneralReg{ThreadID: tid, Reg: cdti.GeneralReg(n), Value: v}, nil
	}
	if _, err := fmt.Sscanf(name, "f%d", &n); err == nil && name == fmt.Sprintf("f%d", n) && n < 32 {
		q := r.FPR[n]
		q[0] = v
		return &cdti.SetFloatReg{ThreadID: tid, Reg: cdti.FloatReg(n), Value: q}, nil
	}
	for _, s := range bgqSpecial {
		if s.String() == name {
			return &cdti.SetSpecialReg{ThreadID: tid, Reg: s, Value: v}, nil
		}
	}
	for _, d := range bgqDebug {
		if d.String() == name {
			return &cdti.SetDebugReg{ThreadID: tid, Reg: d, Value: v}, nil
		}
	}
	return nil, fmt.Errorf("ppc64: no BG/Q register %q", name)
}
