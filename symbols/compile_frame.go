package symbols

import (
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/hpcdap/hpcdap/arch"
	"github.com/hpcdap/hpcdap/bpcode"
	"github.com/hpcdap/hpcdap/symbols/cfi"
)

// CompileValueInStack compiles expr, as CompileValue does, for an agent to evaluate in
// frames[k] of a stopped thread's stack (Process.Stack's frames), in any process stopped at
// the same place of the same program, wherever its modules are loaded: the program starts
// from the thread's registers, recovers those of each caller up to frames[k] with the call
// frame information the front end's unwind used, and asserts (bpcode.OpAssert) that every
// physical frame's pc is the one frames has, relative to its module's load bias, so that in a
// process stopped anywhere else it fails instead of reading another frame. Its addresses are
// relative to the biases of the modules it returns (bpcode.OpModBias i: mods[i]), which the
// agent finds in the process's link map. A frame through a signal handler, found without call frame
// information, or below rules other than a register's saved slot or value (an expression) is
// an error wrapping ErrNotCompiled; so are outer frames on Power, whose volatile registers
// the front end's unwind clears.
func CompileValueInStack(frames []*Frame, k int, expr string) (*bpcode.Program, bpcode.Format, []*Module, error) {
	if k < 0 || k >= len(frames) {
		return nil, 0, nil, fmt.Errorf("no frame %d: %w", k, ErrNotCompiled)
	}
	f := frames[k]
	if f.Function == nil || f.Module == nil {
		return nil, 0, nil, notCompiled("frame %d has no function", k)
	}
	phys := k // the physical frame whose registers f has: an inline frame's is further out
	switch f.Kind {
	case FrameNormal:
	case FrameInline:
		for phys < len(frames) && frames[phys] != f.phys {
			phys++
		}
		if phys == len(frames) {
			return nil, 0, nil, notCompiled("frame %d: its physical frame is not in the stack", k)
		}
	default:
		return nil, 0, nil, notCompiled("frame %d is a %s frame", k, f.Kind)
	}
	us, err := unwindTo(frames, phys)
	if err != nil {
		return nil, 0, nil, err
	}
	lang := f.Function.Language()
	if lang != LangC && lang != LangCPlusPlus && lang != LangFortran {
		return nil, 0, nil, fmt.Errorf("%s code: %w", lang, ErrNotCompiled)
	}
	if err := f.ensureChain(); err != nil {
		return nil, 0, nil, err
	}
	b := f.Module.Bin
	mods := &modTable{}
	c := &compiler{b: b, fn: f.Function, pc: f.lookupPC, lang: lang, frame: us[len(us)-1], mods: mods,
		biasOf: f.Module, exe: f.proc.Executable()}
	c.chain = f.scopeChain() // the blocks the front end's lookup sees from f, innermost first
	n, err := parseExpr(expr, lang == LangFortran, func(name string) bool { _, ok := b.types[name]; return ok })
	if err != nil {
		return nil, 0, nil, err
	}
	if err := checkPlace(&c.bld, us, mods); err != nil {
		return nil, 0, nil, err
	}
	prog, format, err := c.value(expr, n)
	return prog, format, mods.mods, err
}

// CompilePlace compiles a program that answers 1 in a thread stopped at the place of
// frames[0] to frames[k] (every physical frame's pc, recovered as CompileValueInStack
// recovers them) and fails anywhere else: the ranks where an expression fails as it failed
// in frames, for reasons of the code alone, are found by it.
func CompilePlace(frames []*Frame, k int) (*bpcode.Program, []*Module, error) {
	if k < 0 || k >= len(frames) {
		return nil, nil, fmt.Errorf("no frame %d: %w", k, ErrNotCompiled)
	}
	us, err := unwindTo(frames, k)
	if err != nil {
		return nil, nil, err
	}
	var b bpcode.Builder
	mods := &modTable{}
	if err := checkPlace(&b, us, mods); err != nil {
		return nil, nil, err
	}
	b.Const(1)
	prog, err := b.Program(frames[0].proc.Arch.ByteOrder == binary.BigEndian)
	return prog, mods.mods, err
}

// unwindTo returns the registers of the physical frames of frames[0] to frames[k], innermost
// first, as code.
func unwindTo(frames []*Frame, k int) ([]*unwound, error) {
	var phys []*Frame
	for _, x := range frames[:k+1] {
		switch x.Kind {
		case FrameNormal:
			if x.Module == nil {
				return nil, notCompiled("frame %d is in no known module", x.Level)
			}
			phys = append(phys, x)
		case FrameSignal:
			return nil, notCompiled("frame %d is a signal handler's", x.Level)
		}
	}
	if len(phys) == 0 {
		return nil, notCompiled("no physical frame")
	}
	a := frames[0].proc.Arch
	if len(phys) > 1 && a.IsPower() {
		return nil, notCompiled("a caller's frame on Power")
	}
	us := []*unwound{{arch: a, pc: phys[0].PC, mod: phys[0].Module}}
	for i, x := range phys[1:] {
		cf := phys[i]
		if x.Uncertain || cf.Module == nil {
			return nil, notCompiled("frame %d was found without call frame information", x.Level)
		}
		fde := cf.Module.Bin.frames.Lookup(cf.lookupPC)
		if fde == nil {
			return nil, notCompiled("no call frame information at %#x", cf.PC)
		}
		row, err := fde.RowAt(cf.lookupPC)
		if err != nil {
			return nil, notCompiled("call frame information at %#x: %v", cf.PC, err)
		}
		us = append(us, &unwound{arch: a, callee: us[i], row: row, pc: x.PC, mod: x.Module})
	}
	return us, nil
}

// checkPlace appends code that asserts each frame's pc, relative to its module's bias.
func checkPlace(b *bpcode.Builder, us []*unwound, mods *modTable) error {
	for _, u := range us {
		if err := u.emit(b, u.arch.PCReg); err != nil {
			return err
		}
		if err := mods.bias(b, u.mod); err != nil {
			return err
		}
		b.Const(u.pc - u.mod.Bias)
		b.Emit(bpcode.OpAdd)
		b.Emit(bpcode.OpEq)
		b.Emit(bpcode.OpAssert)
	}
	return nil
}

// modTable is the module table of a program: the modules whose load biases it reads.
type modTable struct{ mods []*Module }

// maxModules bounds a module table (OpModBias's operand is one byte).
const maxModules = 256

// bias appends a push of m's load bias in the process the program runs in.
func (t *modTable) bias(b *bpcode.Builder, m *Module) error {
	i := slices.Index(t.mods, m)
	if i < 0 {
		if len(t.mods) == maxModules {
			return notCompiled("more than %d modules", maxModules)
		}
		i = len(t.mods)
		t.mods = append(t.mods, m)
	}
	b.ModBias(i)
	return nil
}

// unwound is one physical frame's registers as code that computes them: frame 0's are the
// thread's; a caller's are recovered from its callee's by the callee's CFI row, as the front
// end's unwind does (Process.applyRow): the stack pointer is the callee's CFA, the pc the
// return address column, a register without a rule keeps the callee's value.
type unwound struct {
	arch   *arch.Arch
	callee *unwound // nil: frame 0
	row    *cfi.Row // the callee's row
	pc     uint64   // the frame's pc where the front end unwound it
	mod    *Module  // the module of that pc
}

// emit appends code that pushes register n of the frame.
func (u *unwound) emit(b *bpcode.Builder, n int) error {
	if u.callee == nil {
		b.Reg(n)
		return nil
	}
	if n == u.arch.PCReg {
		n = int(u.row.RAReg)
		if r, ok := u.row.Regs[u.row.RAReg]; !ok || r.Kind == cfi.RuleUndefined {
			return notCompiled("no return address in the row")
		}
	}
	rule := u.row.Rule(uint64(n))
	switch rule.Kind {
	case cfi.RuleSameValue, cfi.RuleUnspecified:
		if n == u.arch.SPReg {
			return u.cfa(b)
		}
		return u.callee.emit(b, n)
	case cfi.RuleOffset:
		if err := u.cfa(b); err != nil {
			return err
		}
		b.Const(uint64(rule.Offset))
		b.Emit(bpcode.OpAdd)
		b.Sized(bpcode.OpLoad, u.arch.PtrSize)
		return nil
	case cfi.RuleValOffset:
		if err := u.cfa(b); err != nil {
			return err
		}
		b.Const(uint64(rule.Offset))
		b.Emit(bpcode.OpAdd)
		return nil
	case cfi.RuleRegister:
		return u.callee.emit(b, int(rule.Reg))
	}
	return notCompiled("register %d of a caller's frame (rule %d)", n, rule.Kind)
}

// cfa appends code that pushes the callee's CFA.
func (u *unwound) cfa(b *bpcode.Builder) error {
	if u.row.CFA.Expr != nil {
		return notCompiled("a CFA computed by an expression")
	}
	if err := u.callee.emit(b, int(u.row.CFA.Reg)); err != nil {
		return err
	}
	b.Const(uint64(u.row.CFA.Offset))
	b.Emit(bpcode.OpAdd)
	return nil
}

// exeGlobal compiles a global of the executable with external linkage, seen from a library's
// frame, as the front end's lookup finds it after the frame's own binary: relative to the
// executable's bias, after checking that the executable there is the one compiled for (its
// build-id's bytes in memory).
func (c *compiler) exeGlobal(name string) (cv, error) {
	exe := c.exe
	var pick *dieRef
	for i, r := range exe.Bin.globals[name] {
		if r.ext {
			pick = &exe.Bin.globals[name][i]
			break
		}
	}
	if pick == nil {
		return cv{}, notCompiled("no symbol %q in this binary or the executable", name)
	}
	at, ok := exe.Bin.buildIDAddr()
	if !ok {
		return cv{}, notCompiled("%s: the executable's build-id is not loaded", name)
	}
	id := exe.Bin.BuildID
	for off := 0; off < len(id); {
		n := 8
		for n > len(id)-off {
			n /= 2
		}
		if err := c.mods.bias(&c.bld, exe); err != nil {
			return cv{}, err
		}
		c.bld.Const(at + uint64(off))
		c.bld.Emit(bpcode.OpAdd)
		c.bld.Sized(bpcode.OpLoad, n)
		c.bld.Const(uintFrom(id[off:off+n], exe.Bin.Arch))
		c.bld.Emit(bpcode.OpEq)
		c.bld.Emit(bpcode.OpAssert)
		off += n
	}
	b, biasOf := c.b, c.biasOf
	c.b, c.biasOf = exe.Bin, exe
	defer func() { c.b, c.biasOf = b, biasOf }()
	return c.variable(name, pick.off)
}
