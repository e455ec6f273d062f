package symbols

import (
	"bytes"
	"debug/dwarf"
	"errors"
	"fmt"

	"github.com/hpcdap/hpcdap/symbols/dwop"
)

// physical returns the physical frame an inline frame lives in (the frame itself otherwise).
func (f *Frame) physical() *Frame {
	if f.phys != nil {
		return f.phys
	}
	return f
}

// cfa returns the frame's canonical frame address, computing it from CFI when the unwinder
// has not done so yet.
func (f *Frame) cfa() (uint64, error) {
	pf := f.physical()
	if pf.CFA != 0 {
		return pf.CFA, nil
	}
	if pf.Module == nil {
		return 0, errors.New("symbols: no CFA: pc in no known object")
	}
	fde := pf.Module.Bin.frames.Lookup(pf.lookupPC)
	if fde == nil {
		// No CFI: the frame-pointer (or back-chain) heuristic gives the CFA.
		if _, err := f.proc.heuristicUnwind(pf); err != nil || pf.CFA == 0 {
			return 0, fmt.Errorf("symbols: no call frame information at %#x", pf.PC)
		}
		return pf.CFA, nil
	}
	row, err := fde.RowAt(pf.lookupPC)
	if err != nil {
		return 0, err
	}
	if _, err := f.proc.applyRow(pf, row); err != nil && pf.CFA == 0 {
		return 0, err
	}
	return pf.CFA, nil
}

// env builds the expression environment of a frame for DIEs of compile unit cu.
func (p *Process) env(mod *Module, f *Frame, cu *compUnit) *dwop.Env {
	b := mod.Bin
	e := &dwop.Env{
		AddrSize: p.Arch.PtrSize,
		Order:    p.Arch.ByteOrder,
		AddrBias: mod.Bias,
		Mem:      func(addr uint64, buf []byte) error { return p.ReadMemory(buf, addr) },
	}
	if cu != nil {
		e.Offset64 = cu.is64
		e.Version = cu.Version
		e.CUOffset = cu.unitOff
		e.AddrIndex = func(i uint64) (uint64, error) {
			a, err := b.debugAddr(cu, i)
			return a + mod.Bias, err
		}
	}
	e.BaseType = func(die uint64) (dwop.BaseType, error) {
		t, err := b.typeAt(dwarf.Offset(die))
		if err != nil {
			return dwop.BaseType{}, err
		}
		return dwop.BaseType{Size: int(t.Size), Encoding: t.Encoding}, nil
	}
	e.Call = func(die uint64) ([]byte, error) {
		ent, err := b.entryAt(dwarf.Offset(die))
		if err != nil {
			return nil, err
		}
		if ex, ok := ent.Val(dwarf.AttrLocation).([]byte); ok {
			return ex, nil
		}
		return nil, nil
	}
	if f != nil {
		regs := f.regs
		e.Reg = func(n uint64) (uint64, error) {
			v, ok := regs.Get(int(n))
			if !ok {
				return 0, fmt.Errorf("register %d: %w", n, dwop.ErrUnavailable)
			}
			return v, nil
		}
		e.RegBytes = func(n uint64) ([]byte, error) {
			v, ok := regs.Bytes(int(n))
			if !ok {
				return nil, fmt.Errorf("register %d: %w", n, dwop.ErrUnavailable)
			}
			return v, nil
		}
		e.CFA = f.cfa
		e.FrameBase = func() (uint64, error) { return f.frameBase() }
		e.EntryValue = func(expr []byte) (uint64, error) { return f.entryValue(expr, nil) }
		e.ParameterRef = func(die uint64) (uint64, error) { return f.entryValue(nil, &die) }
		if p.TLS != nil {
			e.TLS = func(off uint64) (uint64, error) { return p.TLS.TLSAddress(f.threadRegs(), mod, off) }
		}
	}
	if e.TLS == nil && p.TLS != nil {
		e.TLS = func(off uint64) (uint64, error) { return p.TLS.TLSAddress(nil, mod, off) }
	}
	e.VariableValue = func(die uint64) (uint64, error) {
		v, err := p.dieValue(mod, f, dwarf.Offset(die))
		if err != nil {
			return 0, err
		}
		return v.Uint()
	}
	return e
}

// threadRegs returns the registers of frame 0 of the frame's thread (TLS is per thread).
func (f *Frame) threadRegs() *Regs {
	x := f.physical()
	for x.callee != nil {
		x = x.callee
	}
	return x.regs
}

// frameBase evaluates DW_AT_frame_base of the frame's out-of-line function.
func (f *Frame) frameBase() (uint64, error) {
	if f.Function == nil {
		return 0, errors.New("symbols: no function for frame base")
	}
	b := f.Module.Bin
	ent, err := b.entryAt(f.Function.off)
	if err != nil {
		return 0, err
	}
	expr, err := b.locationExpr(f.Function.cu, ent.AttrField(dwarf.AttrFrameBase), f.lookupPC)
	if err != nil {
		return 0, err
	}
	if expr == nil {
		return 0, fmt.Errorf("symbols: frame base of %s: %w", f.Function.Name, dwop.ErrUnavailable)
	}
	env := f.proc.env(f.Module, f, f.Function.cu)
	env.FrameBase = nil
	loc, err := dwop.Eval(expr, env)
	if err != nil {
		return 0, err
	}
	pc := loc.Pieces[0]
	switch pc.Kind {
	case dwop.PieceMemory:
		return pc.Addr, nil
	case dwop.PieceRegister:
		v, ok := f.regs.Get(int(pc.Reg))
		if !ok {
			return 0, fmt.Errorf("symbols: frame base register %d: %w", pc.Reg, dwop.ErrUnavailable)
		}
		return v, nil
	}
	return 0, errors.New("symbols: frame base is not an address")
}

// locationExpr returns the expression of a location-class attribute at a link-time pc:
// the expression itself, or the matching entry of a location list (nil when none matches).
func (b *Binary) locationExpr(cu *compUnit, fld *dwarf.Field, pc uint64) ([]byte, error) {
	if fld == nil {
		return nil, nil
	}
	switch v := fld.Val.(type) {
	case []byte:
		return v, nil
	case int64:
		off := uint64(v)
		if fld.Class == dwarf.ClassLocList {
			o, err := b.locListIndex(cu, off)
			if err != nil {
				return nil, err
			}
			off = o
		}
		return b.locListExpr(cu, off, pc)
	}
	return nil, fmt.Errorf("symbols: unexpected location form %v", fld.Class)
}

// caller returns the next older physical frame, unwinding one level if the stack was not
// unwound that far.
func (f *Frame) callerFrame() (*Frame, error) {
	pf := f.physical()
	if pf.caller != nil {
		return pf.caller, nil
	}
	next, signal, guessed, err := f.proc.unwindOne(pf)
	if err != nil {
		return nil, err
	}
	pc, ok := next.PC()
	if !ok || pc == 0 {
		return nil, errors.New("symbols: outermost frame")
	}
	c := f.proc.physicalFrame(next, pc, signal)
	c.Uncertain = guessed || pf.Uncertain
	c.callee = pf
	pf.caller = c
	return c, nil
}

// entryValue resolves DW_OP_entry_value (expr: the register whose value at function entry is
// wanted) or DW_OP_GNU_parameter_ref (param: the callee's parameter DIE) from the call site in
// the caller, as gdb does: find the caller's DW_TAG_call_site returning to the caller's pc,
// find the parameter passed in that register, and evaluate its DW_AT_call_value in the
// caller's frame.
func (f *Frame) entryValue(expr []byte, param *uint64) (uint64, error) {
	pf := f.physical()
	if f.Kind == FrameInline {
		return 0, fmt.Errorf("entry value in an inlined call: %w", dwop.ErrUnavailable)
	}
	if pf.Function != nil && pf.Module == f.proc.Executable() && pf.Function.Name == pf.Module.Bin.mainFn {
		// gdb does not look past main for a caller (backtrace past-main is off).
		return 0, fmt.Errorf("entry value: main has no caller: %w", dwop.ErrUnavailable)
	}
	c, err := f.callerFrame()
	if err != nil || c.Function == nil || c.Kind == FrameSignal {
		return 0, fmt.Errorf("entry value: no caller frame: %w", dwop.ErrUnavailable)
	}
	root, err := c.Function.scopeTree()
	if err != nil {
		return 0, err
	}
	cs := root.callSites[c.PC-c.Module.Bias]
	if cs == nil {
		return 0, fmt.Errorf("entry value: no call site at %#x: %w", c.PC, dwop.ErrUnavailable)
	}
	// gdb insists that the call site called this very function; a call through a pointer
	// whose register the caller no longer holds cannot be verified.
	if pf.Function == nil {
		return 0, fmt.Errorf("entry value: no function: %w", dwop.ErrUnavailable)
	}
	target, err := c.callTarget(cs)
	if err != nil {
		return 0, fmt.Errorf("entry value: %v: %w", err, dwop.ErrUnavailable)
	}
	if target != pf.Function.Entry+pf.Module.Bias {
		return 0, fmt.Errorf("entry value: call site at %#x calls %#x, not %s: %w", c.PC, target,
			pf.Function.Name, dwop.ErrUnavailable)
	}
	deref := false
	var reg int = -1
	if expr != nil {
		switch {
		case len(expr) == 1 && expr[0] >= dwop.OpReg0 && expr[0] <= dwop.OpReg31:
			reg = int(expr[0] - dwop.OpReg0)
		case len(expr) >= 2 && expr[0] == dwop.OpRegx:
			reg = int(uleb(expr[1:]))
		case len(expr) == 2 && expr[0] >= dwop.OpBreg0 && expr[0] <= dwop.OpBreg31 && expr[1] == 0:
			reg, deref = int(expr[0]-dwop.OpBreg0), true
		default:
			return 0, fmt.Errorf("entry value of %s unsupported: %w",
				dwop.Disassemble(expr, f.proc.Arch.ByteOrder, f.proc.Arch.PtrSize), dwop.ErrUnavailable)
		}
	}
	for _, prm := range cs.params {
		match := false
		if param != nil {
			match = uint64(prm.param) == *param
		} else if len(prm.loc) > 0 {
			match = bytes.Equal(prm.loc, regExpr(reg))
		}
		if !match {
			continue
		}
		val := prm.value
		if deref {
			return 0, fmt.Errorf("entry value through memory: %w", dwop.ErrUnavailable)
		}
		if val == nil {
			return 0, fmt.Errorf("entry value: call site has no value: %w", dwop.ErrUnavailable)
		}
		env := c.proc.env(c.Module, c, c.Function.cu)
		return dwop.EvalValue(val, env)
	}
	return 0, fmt.Errorf("entry value: parameter not passed at the call site: %w", dwop.ErrUnavailable)
}

// regExpr encodes DW_OP_regN (or DW_OP_regx N).
func regExpr(n int) []byte {
	if n >= 0 && n < 32 {
		return []byte{byte(dwop.OpReg0 + n)}
	}
	b := []byte{dwop.OpRegx}
	u := uint64(n)
	for {
		c := byte(u & 0x7f)
		u >>= 7
		if u != 0 {
			b = append(b, c|0x80)
			continue
		}
		return append(b, c)
	}
}

// callTarget computes the run-time address a call site in frame c calls, as gdb does: a
// DW_AT_call_origin naming a declaration is found by its linkage name among the ELF symbols, one
// naming a definition by its own low pc (an abstract inline instance has none, so the target
// stays unknown), and a DW_AT_call_target expression is evaluated in the caller's frame.
func (c *Frame) callTarget(cs *callSite) (uint64, error) {
	b := c.Module.Bin
	switch {
	case cs.origin != 0:
		e, err := b.entryAt(cs.origin)
		if err != nil {
			return 0, err
		}
		if decl, _ := e.Val(dwarf.AttrDeclaration).(bool); decl {
			name, _ := e.Val(dwarf.AttrLinkageName).(string)
			if name == "" {
				name, _ = e.Val(attrMIPSLinkageName).(string)
			}
			if name == "" {
				name = b.nameOfDIE(cs.origin, b.declNames)
			}
			for _, m := range c.proc.mods {
				for _, s := range m.Bin.syms.named(name) {
					if s.Func {
						return s.Addr + m.Bias, nil
					}
				}
			}
			return 0, fmt.Errorf("call target %q not found", name)
		}
		rg, err := b.dw.Ranges(e)
		if err != nil || len(rg) == 0 {
			return 0, errors.New("DW_AT_call_target is not specified")
		}
		return rg[0][0] + c.Module.Bias, nil
	case cs.target != nil:
		return dwop.EvalValue(cs.target, c.proc.env(c.Module, c, c.Function.cu))
	}
	return 0, errors.New("DW_AT_call_target is not specified")
}
