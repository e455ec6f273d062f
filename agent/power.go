package agent

import (
	"debug/elf"
	"encoding/binary"

	"github.com/hpcdap/hpcdap/cdti"
	"github.com/hpcdap/hpcdap/ppc64"
	"github.com/hpcdap/hpcdap/target"
)

// Power targets (EM_PPC64, either byte order) get the CNK's own register commands, answered
// from the back end's Linux register sets (pt_regs and the FPR set) converted to the BG/Q
// layouts: GetGeneralRegs (r0–r31), GetSpecialRegs (iar, lr, msr, cr, ctr, xer, fpscr, and
// dear/esr from pt_regs' dar/dsisr), GetFloatRegs (each FPR in element 0 of its QPX register,
// elements 1–3 zero: Linux on Power has no QPX), and the matching Set commands. GetDebugRegs
// answers all zeros: the back ends for Power (QEMU user mode) have no debug facility, and no
// DAC or IAC is armed. SetDebugReg(s) answer CmdHwdUnavail.
//
// Breakpoints follow the CNK: SetBreakpoint takes any trap word (TOOL_ISTRAP: tw, td, twi, tdi
// with any TO) at a 4-byte-aligned address and writes that very word; ResetBreakpoint must
// present a word that is not a trap.

// isPower reports whether the process is 64-bit Power.
func (p *proc) isPower() bool { return p.info.Machine == elf.EM_PPC64 }

// order is the target's byte order (big-endian if unknown, as on BG/Q).
func (p *proc) order() binary.ByteOrder {
	if p.info.ByteOrder != nil {
		return p.info.ByteOrder
	}
	return binary.BigEndian
}

// powerRegs reads a stopped thread's pt_regs and FPR set.
func (p *proc) powerRegs(tid int, float bool) (ppc64.PtRegs, ppc64.FPRegs, error) {
	var gp ppc64.PtRegs
	var fp ppc64.FPRegs
	b, err := p.tp.Registers(tid, target.RegsGeneral)
	if err != nil {
		return gp, fp, err
	}
	if err := gp.Unmarshal(b, p.order()); err != nil {
		return gp, fp, err
	}
	if float {
		b, err := p.tp.Registers(tid, target.RegsFloat)
		if err != nil {
			return gp, fp, err
		}
		if err := fp.Unmarshal(b, p.order()); err != nil {
			return gp, fp, err
		}
	}
	return gp, fp, nil
}

// powerQuery answers the Power register queries; handled is false for any other command.
func (p *proc) powerQuery(th *pthread, c cdti.Command) (r cdti.Result, handled bool) {
	if !p.isPower() {
		return cdti.Result{}, false
	}
	tid := uint32(th.tid)
	var ack cdti.Ack
	read := func(float bool, fill func(ppc64.PtRegs, ppc64.FPRegs)) cdti.Result {
		code := p.pause([]int{th.tid}, func() cdti.CmdReturnCode {
			gp, fp, err := p.powerRegs(th.tid, float)
			if err != nil {
				p.a.logf("agent: rank %d: tid %d: read registers: %v", p.rank, th.tid, err)
				return cdti.CmdTIDinval
			}
			fill(gp, fp)
			return cdti.CmdSuccess
		})
		if code != cdti.CmdSuccess {
			return fail(code, tid)
		}
		return ok(ack)
	}
	switch c.(type) {
	case *cdti.GetGeneralRegs:
		a := &cdti.GetGeneralRegsAck{ThreadID: tid}
		ack = a
		return read(false, func(gp ppc64.PtRegs, _ ppc64.FPRegs) { a.GPR = gp.GPR }), true
	case *cdti.GetSpecialRegs:
		a := &cdti.GetSpecialRegsAck{ThreadID: tid}
		ack = a
		return read(true, func(gp ppc64.PtRegs, fp ppc64.FPRegs) { _, a.Regs = gp.BGQ(fp.FPSCR) }), true
	case *cdti.GetFloatRegs:
		a := &cdti.GetFloatRegsAck{ThreadID: tid}
		ack = a
		return read(true, func(_ ppc64.PtRegs, fp ppc64.FPRegs) { a.FPR = fp.BGQ([32]cdti.QPX{}) }), true
	case *cdti.GetDebugRegs:
		return ok(&cdti.GetDebugRegsAck{ThreadID: tid}), true
	}
	return cdti.Result{}, false
}

// powerUpdate answers the Power register updates; handled is false for any other command.
func (p *proc) powerUpdate(th *pthread, c cdti.Command) (r cdti.Result, handled bool) {
	if !p.isPower() {
		return cdti.Result{}, false
	}
	tid := uint32(th.tid)
	// write changes the general set (and with float, the FPR set) of the stopped thread.
	write := func(float bool, change func(*ppc64.PtRegs, *ppc64.FPRegs) cdti.CmdReturnCode) cdti.Result {
		code := p.pause([]int{th.tid}, func() cdti.CmdReturnCode {
			gp, fp, err := p.powerRegs(th.tid, float)
			if err != nil {
				return cdti.CmdTIDinval
			}
			if code := change(&gp, &fp); code != cdti.CmdSuccess {
				return code
			}
			if err := p.tp.SetRegisters(th.tid, target.RegsGeneral, gp.Marshal(p.order())); err != nil {
				p.a.logf("agent: rank %d: tid %d: write registers: %v", p.rank, th.tid, err)
				return cdti.CmdParmErr
			}
			if float {
				if err := p.tp.SetRegisters(th.tid, target.RegsFloat, fp.Marshal(p.order())); err != nil {
					p.a.logf("agent: rank %d: tid %d: write float registers: %v", p.rank, th.tid, err)
					return cdti.CmdParmErr
				}
			}
			th.pc = 0 // re-read: the tool may have moved it
			return cdti.CmdSuccess
		})
		if code != cdti.CmdSuccess {
			return fail(code, tid)
		}
		return ok(&cdti.BareAck{ThreadID: tid})
	}
	switch c := c.(type) {
	case *cdti.SetGeneralReg:
		if c.Reg < 0 || c.Reg >= cdti.NumGPRegs {
			return fail(cdti.CmdParmErr, tid), true
		}
		return write(false, func(gp *ppc64.PtRegs, _ *ppc64.FPRegs) cdti.CmdReturnCode {
			gp.GPR[c.Reg] = c.Value
			return cdti.CmdSuccess
		}), true
	case *cdti.SetGeneralRegs:
		return write(false, func(gp *ppc64.PtRegs, _ *ppc64.FPRegs) cdti.CmdReturnCode {
			gp.GPR = c.GPR
			return cdti.CmdSuccess
		}), true
	case *cdti.SetSpecialReg:
		if c.Reg < cdti.RegIAR || c.Reg > cdti.RegESR {
			return fail(cdti.CmdParmErr, tid), true
		}
		return write(true, func(gp *ppc64.PtRegs, fp *ppc64.FPRegs) cdti.CmdReturnCode {
			_, s := gp.BGQ(fp.FPSCR)
			s.Set(c.Reg, c.Value)
			setSpecial(gp, fp, s)
			return cdti.CmdSuccess
		}), true
	case *cdti.SetSpecialRegs:
		return write(true, func(gp *ppc64.PtRegs, fp *ppc64.FPRegs) cdti.CmdReturnCode {
			setSpecial(gp, fp, c.Regs)
			return cdti.CmdSuccess
		}), true
	case *cdti.SetFloatReg:
		if c.Reg < 0 || c.Reg >= cdti.NumFPRegs {
			return fail(cdti.CmdParmErr, tid), true
		}
		return write(true, func(_ *ppc64.PtRegs, fp *ppc64.FPRegs) cdti.CmdReturnCode {
			fp.FPR[c.Reg] = c.Value[0]
			return cdti.CmdSuccess
		}), true
	case *cdti.SetFloatRegs:
		return write(true, func(_ *ppc64.PtRegs, fp *ppc64.FPRegs) cdti.CmdReturnCode {
			for i, q := range c.FPR {
				fp.FPR[i] = q[0]
			}
			return cdti.CmdSuccess
		}), true
	case *cdti.SetDebugReg, *cdti.SetDebugRegs:
		return fail(cdti.CmdHwdUnavail, tid), true
	case *cdti.InstallTrapHandler:
		if c.Handler == ppc64.SigDfl {
			return fail(cdti.CmdAddrErr, tid), true
		}
		return p.installTrapHandler(th, c.Handler), true
	case *cdti.RemoveTrapHandler:
		return p.installTrapHandler(th, ppc64.SigDfl), true
	}
	return cdti.Result{}, false
}

// setSpecial stores the BG/Q special registers into pt_regs and the FPR set.
func setSpecial(gp *ppc64.PtRegs, fp *ppc64.FPRegs, s cdti.SpecialRegs) {
	n := ppc64.PtRegsFromBGQ(gp.GPR, s)
	n.OrigGPR3, n.SoftE, n.Trap, n.Result = gp.OrigGPR3, gp.SoftE, gp.Trap, gp.Result
	*gp = n
	fp.FPSCR = s.FPSCR
}

// setPowerBreakpoint answers SetBreakpoint on Power: insn must be a trap word (TOOL_ISTRAP)
// and addr 4-byte aligned and mapped; the word is written as given.
func (p *proc) setPowerBreakpoint(t *tool, tid uint32, addr uint64, insn uint32) cdti.Result {
	if !ppc64.IsTrap(insn) || addr%4 != 0 || !p.mapped(addr, 4) {
		return fail(cdti.CmdParmErr, tid)
	}
	if err := p.setBreakpointWord(addr, t.id, ppc64.PutWord(p.order(), insn)); err != nil {
		p.a.logf("agent: rank %d: set breakpoint %#x: %v", p.rank, addr, err)
		return fail(cdti.CmdBrkptFail, tid)
	}
	return ok(&cdti.BareAck{ThreadID: tid})
}

// resetPowerBreakpoint answers ResetBreakpoint on Power: insn must be the original
// instruction, which is not a trap, and the trap one the tool set.
func (p *proc) resetPowerBreakpoint(t *tool, tid uint32, addr uint64, insn uint32) cdti.Result {
	b := p.bps[addr]
	orig := ppc64.PutWord(p.order(), insn)
	if ppc64.IsTrap(insn) || b == nil || !b.owners[t.id] || string(orig) != string(b.orig) {
		return fail(cdti.CmdParmErr, tid)
	}
	p.resetBreakpoint(addr, t.id)
	return ok(&cdti.BareAck{ThreadID: tid})
}

// powerTrapGone reports whether the word at addr is no longer a trap (a breakpoint removed
// after a thread hit it: the CNK re-executes the instruction).
func (p *proc) powerTrapGone(addr uint64) bool {
	var w [4]byte
	if n, err := p.tp.ReadMemory(addr, w[:]); err != nil || n != 4 {
		return false
	}
	return !ppc64.IsTrap(p.order().Uint32(w[:]))
}

// powerEntry turns AT_ENTRY into a code address: under ELFv1 (big-endian ppc64) it is the
// address of _start's function descriptor, whose first doubleword is the code address.
func (p *proc) powerEntry(entry uint64) uint64 {
	if entry == 0 || p.order() != binary.BigEndian {
		return entry
	}
	var d [8]byte
	if n, err := p.tp.ReadMemory(entry, d[:]); err != nil || n != 8 {
		return entry
	}
	return binary.BigEndian.Uint64(d[:])
}

// Instruction words the back-chain walk recognises.
const (
	ppcBLR        uint32 = 0x4e800020 // blr
	ppcMFLR       uint32 = 0x7c0802a6 // mflr r0: a function that saves its return address
	ppcStduR1Mask uint32 = 0xffff0003 // stdu r1,d(r1): opcode 62, RS = RA = 1, XO = 1
	ppcStduR1     uint32 = 0xf8210001
	ppcStduxR1    uint32 = 0x7c21016a // stdux r1,r1,r0 (frames too large for a displacement)
	ppcStduxMask  uint32 = 0xffff07ff
	ppcAddiR1Mask uint32 = 0xffe00000 // addi r1,rA,d: the epilogue pops the frame
	ppcAddiR1     uint32 = 0x38200000
	ppcLdR1       uint32 = 0xe8210000 // ld r1,0(r1): the epilogue of a large frame
	ppcScanAhead         = 32         // words frameState looks ahead of the pc
	ppcScanBack          = 256        // words it looks behind for the LR save
)

// powerFrame is what the innermost frame's code says about it.
type powerFrame struct {
	allocated bool // the function's stack frame is pushed (r1 points at it)
	prologue  bool // ... not yet: its allocating store is ahead
	savesLR   bool // the function saves its return address (mflr r0 behind the pc)
}

// frameState reads the code around pc: ahead, whether the prologue's store-with-update of r1
// (the frame is not pushed yet), the epilogue's pop of r1 (it still is), or a return (it was
// popped, or never pushed in a frameless leaf) comes first; behind, back to the previous
// function's return, whether the function saved its link register (leaf functions do not:
// their return address stays in the link register).
func (p *proc) frameState(pc uint64) powerFrame {
	mem := programMemory{p}
	f := powerFrame{allocated: true}
	ahead := make([]byte, 4*ppcScanAhead)
	n, _ := mem.ReadMemory(pc, ahead)
scan:
	for i := 0; i+4 <= n; i += 4 {
		switch w := p.order().Uint32(ahead[i:]); {
		case w&ppcStduR1Mask == ppcStduR1, w&ppcStduxMask == ppcStduxR1:
			f.allocated, f.prologue = false, true
			break scan
		case w&ppcAddiR1Mask == ppcAddiR1, w == ppcLdR1:
			break scan
		case w == ppcBLR:
			f.allocated = false
			break scan
		}
	}
	if pc < 4*ppcScanBack {
		return f
	}
	behind := make([]byte, 4*ppcScanBack)
	if n, _ := mem.ReadMemory(pc-uint64(len(behind)), behind); n == len(behind) {
		for i := len(behind) - 4; i >= 0; i -= 4 {
			w := p.order().Uint32(behind[i:])
			if w == ppcBLR {
				break
			}
			if w == ppcMFLR {
				f.savesLR = true
				break
			}
		}
	}
	return f
}

// powerTraceback walks the stack of a stopped Power thread through the back chain: each frame
// starts with the address of its caller's frame, and a function that saves its return address
// saves it 16 bytes into its caller's frame (the LR save doubleword of both the ELFv1 and
// ELFv2 ABIs). For the innermost frame, frameState tells whether its frame is pushed and
// whether its return address is in the link register (prologue, leaf function) or saved.
// Each frame's CFA is the address of its caller's frame, the stack pointer before the call.
// The walk ends at a back chain of 0 (the outermost frame), one that does not point up the
// stack, or after max frames. No symbols are read: code that does not follow the ABI's
// prologue conventions can make the innermost return address wrong.
func (p *proc) powerTraceback(tid int, max int) ([]cdti.TraceFrame, error) {
	gp, _, err := p.powerRegs(tid, false)
	if err != nil {
		return nil, err
	}
	mem := programMemory{p}
	read := func(addr uint64) (uint64, bool) {
		var b [8]byte
		if n, err := mem.ReadMemory(addr, b[:]); err != nil || n != 8 {
			return 0, false
		}
		return p.order().Uint64(b[:]), true
	}
	sp := gp.GPR[1]
	frames := []cdti.TraceFrame{{PC: gp.NIP, CFA: sp}}
	st := p.frameState(gp.NIP)
	cur := sp // the caller's frame
	if st.allocated {
		bc, ok := read(sp)
		if !ok || bc == 0 || bc <= sp {
			return frames, nil
		}
		cur = bc
	}
	frames[0].CFA = cur
	pc := gp.Link
	if st.savesLR && !st.prologue {
		var ok bool
		if pc, ok = read(cur + 16); !ok {
			return frames, nil
		}
	}
	for len(frames) < max && pc != 0 {
		bc, ok := read(cur)
		if !ok {
			break
		}
		frames = append(frames, cdti.TraceFrame{PC: pc, CFA: bc})
		if bc == 0 || bc <= cur {
			break
		}
		if pc, ok = read(bc + 16); !ok {
			break
		}
		cur = bc
	}
	return frames, nil
}

// getPowerTraceback answers GetTraceback on Power.
func (p *proc) getPowerTraceback(th *pthread, c *cdti.GetTraceback) cdti.Result {
	tid := uint32(th.tid)
	var frames []cdti.TraceFrame
	code := p.pause([]int{th.tid}, func() cdti.CmdReturnCode {
		var err error
		if frames, err = p.powerTraceback(th.tid, int(c.Limit())); err != nil {
			return cdti.CmdTIDinval
		}
		return cdti.CmdSuccess
	})
	if code != cdti.CmdSuccess {
		return fail(code, tid)
	}
	return ok(&cdti.GetTracebackAck{ThreadID: tid, Frames: frames})
}

// movePCBack puts a thread that trapped on a planted breakpoint back at its address. Where
// the trap leaves the pc on the trap itself (Power: Arch.PCAfterBreak is 0) there is nothing
// to write, which saves a round trip to a remote stub on every hit.
func (p *proc) movePCBack(tid int, pc, addr uint64) error {
	if pc == addr && pc != 0 {
		return nil
	}
	return p.tp.SetPC(tid, addr)
}
