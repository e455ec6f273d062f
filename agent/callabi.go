package agent

import (
	"encoding/binary"
	"math"

	"github.com/hpcdap/hpcdap/amd64"
	"github.com/hpcdap/hpcdap/cdti"
	"github.com/hpcdap/hpcdap/ppc64"
)

// callABI places the arguments of a CallFunction as a machine's calling convention wants them.
type callABI interface {
	// setup returns the register sets for the call and the stack memory to write first. gp and
	// fp are the thread's sets when the call starts; ret is the return address (a planted trap).
	setup(gp, fp []byte, c *cdti.CallFunction, ret uint64) (callSetup, bool)
	// result reads the return value of kind k from the registers after the return.
	result(gp, fp []byte, k cdti.CallKind) uint64
}

// callSetup is a thread prepared for a call.
type callSetup struct {
	gp, fp []byte
	writes []memWrite
}

// memWrite is memory to write before the call (arguments on the stack, the return address).
type memWrite struct {
	addr uint64
	data []byte
}

// callABIFor returns the calling convention of the process's machine, or nil.
func (p *proc) callABIFor() callABI {
	switch {
	case p.mach != nil:
		return sysvAMD64{}
	case p.isPower():
		return powerABI{order: p.order(), elfv1: p.order() == binary.BigEndian}
	}
	return nil
}

// argBits is an argument's 64-bit value: a CallData argument becomes the address of the
// stack copy of the data plus its offset.
func argBits(a cdti.CallArg, data uint64) uint64 {
	if a.Kind == cdti.CallData {
		return data + a.Value
	}
	return a.Value
}

// sysvAMD64 is the System V AMD64 calling convention: integer-class arguments in rdi, rsi,
// rdx, rcx, r8, r9, floating-point ones in xmm0–xmm7, the rest on the stack in order; the stack
// pointer 16-byte aligned before the return address is pushed; the 128-byte red zone below
// the interrupted code's stack pointer left alone; al an upper bound of the vector registers
// used (for variadic functions); the direction flag clear. Values return in rax or xmm0.
type sysvAMD64 struct{}

func (sysvAMD64) setup(gp, fp []byte, c *cdti.CallFunction, ret uint64) (callSetup, bool) {
	if len(gp) < amd64.UserRegsSize || len(fp) < amd64.OffXMM0+8*16 {
		return callSetup{}, false
	}
	s := callSetup{gp: append([]byte(nil), gp...), fp: append([]byte(nil), fp...)}
	sp := amd64.Reg(gp, amd64.OffRSP) - amd64.RedZone
	var data uint64
	if len(c.Data) > 0 {
		sp = (sp - uint64(len(c.Data))) &^ 15
		data = sp
		s.writes = append(s.writes, memWrite{data, c.Data})
	}
	intRegs := amd64.IntArgOffsets
	var stack []uint64
	ni, nf := 0, 0
	for _, a := range c.Args {
		v := argBits(a, data)
		switch a.Kind {
		case cdti.CallFloat32, cdti.CallFloat64:
			if nf < 8 {
				xmm := s.fp[amd64.OffXMM0+16*nf : amd64.OffXMM0+16*nf+16]
				clear(xmm)
				if a.Kind == cdti.CallFloat32 {
					le.PutUint32(xmm, uint32(v))
				} else {
					le.PutUint64(xmm, v)
				}
				nf++
				continue
			}
		default:
			if ni < len(intRegs) {
				amd64.SetReg(s.gp, intRegs[ni], v)
				ni++
				continue
			}
		}
		stack = append(stack, v)
	}
	sp = (sp - 8*uint64(len(stack))) &^ 15
	frame := make([]byte, 8+8*len(stack))
	le.PutUint64(frame, ret)
	for i, v := range stack {
		le.PutUint64(frame[8+8*i:], v)
	}
	sp -= 8 // the return address, as the call instruction pushes it
	s.writes = append(s.writes, memWrite{sp, frame})
	amd64.SetReg(s.gp, amd64.OffRSP, sp)
	amd64.SetPC(s.gp, c.Entry) // orig_rax = -1: not inside a system call, no restart on resume
	amd64.SetReg(s.gp, amd64.OffRAX, uint64(nf))
	amd64.SetReg(s.gp, amd64.OffEFLAGS, amd64.Reg(gp, amd64.OffEFLAGS)&^amd64.FlagDF)
	s.fp[amd64.OffFTW] = 0
	return s, true
}

func (sysvAMD64) result(gp, fp []byte, k cdti.CallKind) uint64 {
	switch k {
	case cdti.CallFloat32:
		return uint64(le.Uint32(fp[amd64.OffXMM0:]))
	case cdti.CallFloat64:
		return le.Uint64(fp[amd64.OffXMM0:])
	}
	return amd64.Reg(gp, amd64.OffRAX)
}

// powerABI is the 64-bit PowerPC ELF calling convention, ELFv1 (big-endian: functions called
// through descriptors, r2 the callee's TOC, a 48-byte frame header) or ELFv2 (little-endian: r12
// the global entry point, from which the callee computes its TOC, a 32-byte header). Arguments
// map to the doublewords of the parameter save area after the header: the first eight also go
// in r3–r10, floating-point ones in f1–f13 as doubles (their GPR images are set too, as a
// variadic callee reads them). The 288-byte protected zone below the interrupted code's stack
// pointer is left alone; the new frame's back chain points at the old one. Values return in r3
// or f1.
type powerABI struct {
	order binary.ByteOrder
	elfv1 bool
}

const (
	ppcProtectedZone = 288
	ppcArgGPRs       = 8
	ppcArgFPRs       = 13
)

func (a powerABI) setup(gp, fp []byte, c *cdti.CallFunction, ret uint64) (callSetup, bool) {
	var g ppc64.PtRegs
	var f ppc64.FPRegs
	if g.Unmarshal(gp, a.order) != nil || f.Unmarshal(fp, a.order) != nil {
		return callSetup{}, false
	}
	var s callSetup
	oldSP := g.GPR[1]
	sp := oldSP - ppcProtectedZone
	var data uint64
	if len(c.Data) > 0 {
		sp = (sp - uint64(len(c.Data))) &^ 15
		data = sp
		s.writes = append(s.writes, memWrite{data, c.Data})
	}
	header := uint64(32)
	if a.elfv1 {
		header = 48
	}
	words := max(len(c.Args), ppcArgGPRs)
	frame := make([]byte, (header+8*uint64(words)+15)&^15)
	sp = (sp - uint64(len(frame))) &^ 15
	a.order.PutUint64(frame, oldSP) // the back chain
	nf := 0
	for i, arg := range c.Args {
		v := argBits(arg, data)
		if arg.Kind == cdti.CallFloat32 {
			v = math.Float64bits(float64(math.Float32frombits(uint32(v))))
		}
		a.order.PutUint64(frame[header+8*uint64(i):], v)
		if i < ppcArgGPRs {
			g.GPR[3+i] = v
		}
		if (arg.Kind == cdti.CallFloat32 || arg.Kind == cdti.CallFloat64) && nf < ppcArgFPRs {
			f.FPR[1+nf] = v
			nf++
		}
	}
	s.writes = append(s.writes, memWrite{sp, frame})
	g.GPR[1] = sp
	g.NIP, g.CTR, g.Link = c.Entry, c.Entry, ret
	if a.elfv1 {
		if c.TOC != 0 {
			g.GPR[2] = c.TOC
		}
	} else {
		g.GPR[12] = c.Entry
	}
	g.OrigGPR3, g.Trap = 0, 0 // not inside a system call: no restart on resume
	s.gp, s.fp = g.Marshal(a.order), f.Marshal(a.order)
	return s, true
}

func (a powerABI) result(gp, fp []byte, k cdti.CallKind) uint64 {
	var g ppc64.PtRegs
	var f ppc64.FPRegs
	g.Unmarshal(gp, a.order)
	f.Unmarshal(fp, a.order)
	switch k {
	case cdti.CallFloat32:
		return uint64(math.Float32bits(float32(math.Float64frombits(f.FPR[1]))))
	case cdti.CallFloat64:
		return f.FPR[1]
	}
	return g.GPR[3]
}
