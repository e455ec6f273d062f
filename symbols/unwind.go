package symbols

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"

	"github.com/hpcdap/hpcdap/amd64"
	"github.com/hpcdap/hpcdap/ppc64"
	"github.com/hpcdap/hpcdap/symbols/cfi"
	"github.com/hpcdap/hpcdap/symbols/dwop"
)

// FrameKind classifies stack frames.
type FrameKind int

// Frame kinds.
const (
	FrameNormal   FrameKind = iota // a function activation
	FrameInline                    // a virtual frame for an inlined call inside the physical frame below it
	FrameSignal                    // a signal trampoline ("<signal handler called>")
	FrameTailCall                  // a function that left by a tail call, reconstructed from call sites
)

// String names the frame kind as gdb's frame types ("normal", "inline", "sigtramp", "tailcall").
func (k FrameKind) String() string {
	switch k {
	case FrameInline:
		return "inline"
	case FrameSignal:
		return "sigtramp"
	case FrameTailCall:
		return "tailcall"
	}
	return "normal"
}

// Frame is one frame of a call stack. Inlined calls appear as their own frames (Kind
// FrameInline) sharing the registers of the physical frame they live in.
type Frame struct {
	Level    int
	Kind     FrameKind
	PC       uint64    // run-time pc: the stopped pc for frame 0, the return address above it
	CFA      uint64    // canonical frame address of the physical frame (0 if unknown)
	Module   *Module   // nil when the pc is in no known object
	Function *Function // the out-of-line function, or nil
	// Name is the function as gdb names the frame: the inlined callee for inline frames, the
	// ELF symbol when there is no DWARF, "" when nothing is known.
	Name string
	// Line is the source position: for callers, the line of the call.
	Line Line
	// HasLine reports whether Line is meaningful.
	HasLine bool
	// Uncertain is set when the frame was found by heuristics (frame pointer, back chain)
	// rather than call frame information: unwinding may be wrong from here on.
	Uncertain bool

	proc     *Process
	regs     *Regs
	exact    bool   // PC is not a return address (frame 0, or interrupted by a signal)
	lookupPC uint64 // link-time pc used for symbol lookups
	inline   *scope // for inline frames: the inlined call's scope
	phys     *Frame // the physical frame this (inline) frame belongs to
	caller   *Frame // next older physical frame, for entry values
	callee   *Frame // next younger physical frame
	chain    []*scope
}

// Regs returns the frame's registers (shared with the other frames of the same physical
// frame).
func (f *Frame) Regs() *Regs { return f.regs }

// Process returns the process the frame belongs to.
func (f *Frame) Process() *Process { return f.proc }

// StackOptions control unwinding.
type StackOptions struct {
	// MaxFrames bounds the number of frames returned (0: 256).
	MaxFrames int
	// PastMain continues past the program's main function (gdb's "backtrace past-main").
	PastMain bool
	// HideInlineAtEntry hides inlined calls whose first instruction is frame 0's pc, as gdb
	// does unless it stopped at a user breakpoint set in that inlined function (a step into
	// the call then reveals it).
	HideInlineAtEntry bool
}

// Stack unwinds the call stack of a thread whose frame-0 registers are regs.
func (p *Process) Stack(regs *Regs, opts *StackOptions) ([]*Frame, error) {
	if opts == nil {
		opts = &StackOptions{}
	}
	max := opts.MaxFrames
	if max <= 0 {
		max = 256
	}
	if _, ok := regs.PC(); !ok {
		return nil, errors.New("symbols: unwind: no program counter")
	}
	var out []*Frame
	var prevPhys *Frame
	pc, _ := regs.PC()
	f := p.physicalFrame(regs, pc, true)
	lastCFA := uint64(0)
	for len(out) < max {
		f.callee = prevPhys
		if prevPhys != nil && prevPhys.caller == nil {
			prevPhys.caller = f
		}
		for _, fr := range p.expandInline(f, len(out) == 0 && opts.HideInlineAtEntry) {
			if len(out) >= max {
				break
			}
			fr.Level = len(out)
			out = append(out, fr)
		}
		if !opts.PastMain && f.Module != nil && f.Module == p.Executable() && f.Function != nil &&
			f.Function.Name == f.Module.Bin.mainFn {
			break
		}
		if p.insideEntryFunc(f) {
			break // nothing called the program's entry point (gdb's "backtrace past-entry" off)
		}
		next, signal, guessed, err := p.unwindOne(f)
		if err != nil || next == nil {
			break
		}
		npc, ok := next.PC()
		if !ok || npc < minCodeAddr && p.ModuleAt(npc) == nil {
			break // no return address: 0, or a small number such as an argument count
		}
		// Guard against loops: the stack must move (a signal frame may reuse the CFA).
		if f.CFA != 0 && f.CFA == lastCFA && !signal && f.Kind != FrameSignal {
			break
		}
		lastCFA = f.CFA
		c := p.physicalFrame(next, npc, signal)
		c.Uncertain = f.Uncertain || guessed
		// Functions that tail-called their way to f get frames of their own.
		prev := f
		for _, tf := range p.tailCallFrames(f, c) {
			if len(out) >= max {
				break
			}
			tf.callee, prev.caller = prev, tf
			tf.CFA = f.CFA
			tf.Level = len(out)
			out = append(out, tf)
			prev = tf
		}
		prev.caller = c
		prevPhys = prev
		f = c
	}
	return out, nil
}

// minCodeAddr bounds the addresses no code lives at (Linux maps nothing in the first page): a
// caller's pc below it, in no module, is not a return address.
const minCodeAddr = 0x1000

// errOutermost reports a frame whose call frame information says it has no caller.
var errOutermost = errors.New("outermost frame")

// insideEntryFunc reports whether f is in the function that holds the executable's entry
// point (_start), which nothing called.
func (p *Process) insideEntryFunc(f *Frame) bool {
	exe := p.Executable()
	if exe == nil || f.Module != exe || exe.Bin.Entry == 0 {
		return false
	}
	entry := exe.Bin.Entry
	if f.Function != nil {
		return f.Function.Contains(entry)
	}
	s, ok := exe.Bin.Symbol(f.lookupPC)
	return ok && s.Func && (s.Addr == entry || s.Addr < entry && entry < s.Addr+s.Size)
}

// physicalFrame fills in what is known about the frame at pc.
func (p *Process) physicalFrame(regs *Regs, pc uint64, exact bool) *Frame {
	f := &Frame{Kind: FrameNormal, PC: pc, proc: p, regs: regs, exact: exact}
	lookup := pc
	if !exact {
		lookup = pc - 1
	}
	f.Module = p.ModuleAt(pc)
	if f.Module == nil {
		return f
	}
	b := f.Module.Bin
	f.lookupPC = lookup - f.Module.Bias
	if b.dw != nil {
		f.Function = b.funcForPC(f.lookupPC)
	}
	if f.Function != nil {
		f.Name = f.Function.Name
	} else if s, ok := b.Symbol(f.lookupPC); ok {
		f.Name = demangle(s.Name)
	}
	if fde := b.frames.Lookup(f.lookupPC); fde != nil && fde.CIE.Signal {
		f.Kind = FrameSignal
	} else if p.isSigtramp(f) {
		f.Kind = FrameSignal
	}
	if f.Kind == FrameSignal {
		// The trampoline's own symbol (the lookup pc may lie just before it).
		f.Function = nil
		f.Name = ""
		if s, ok := b.Symbol(pc - f.Module.Bias); ok {
			f.Name = demangle(s.Name)
		}
	} else if l, ok := b.LineForPC(f.lookupPC); ok {
		f.Line, f.HasLine = l, true
	}
	return f
}

// expandInline returns the frames of one physical frame: its inlined calls, innermost first,
// then the frame itself positioned at the outermost call site.
func (p *Process) expandInline(f *Frame, hideAtEntry bool) []*Frame {
	if f.Function == nil || f.Kind == FrameSignal {
		return []*Frame{f}
	}
	root, err := f.Function.scopeTree()
	if err != nil || root == nil {
		return []*Frame{f}
	}
	chain := root.chainAt(f.lookupPC)
	f.chain = chain
	var inl []*scope
	for i := len(chain) - 1; i > 0; i-- {
		if chain[i].kind == scopeInlined {
			inl = append(inl, chain[i])
		}
	}
	if hideAtEntry && f.exact {
		for len(inl) > 0 && inl[0].entry == f.lookupPC {
			inl = inl[1:]
		}
	}
	if len(inl) == 0 {
		return []*Frame{f}
	}
	cu := f.Function.cu
	var out []*Frame
	line, hasLine := f.Line, f.HasLine
	for i, s := range inl {
		fr := &Frame{Kind: FrameInline, PC: f.PC, CFA: f.CFA, Module: f.Module, Function: f.Function,
			Name: s.name, Line: line, HasLine: hasLine, proc: p, regs: f.regs, exact: f.exact,
			lookupPC: f.lookupPC, inline: s, phys: f, Uncertain: f.Uncertain}
		// The inlined call's blocks: from its scope down to the next inner inlined call.
		fr.chain = chain
		if i > 0 {
			fr.chain = chainBelow(chain, inl[i-1])
		}
		out = append(out, fr)
		// The next outer frame is positioned at this call.
		line = Line{File: cu.fileName(s.callFile), Line: s.callLine, Column: s.callCol}
		hasLine = s.callLine != 0
	}
	f.Line, f.HasLine = line, hasLine
	// The physical frame's blocks stop below the outermost inlined call.
	f.chain = chainBelow(chain, inl[len(inl)-1])
	out = append(out, f)
	return out
}

// chainBelow returns the scopes of chain above the inlined call s (the caller's blocks).
func chainBelow(chain []*scope, s *scope) []*scope {
	for i, c := range chain {
		if c == s {
			return chain[:i]
		}
	}
	return chain
}

// unwindOne computes the caller's registers. signal reports that the caller was interrupted
// by a signal (its pc is exact); guessed that no call frame information was used.
func (p *Process) unwindOne(f *Frame) (next *Regs, signal, guessed bool, err error) {
	if f.Module != nil {
		b := f.Module.Bin
		if fde := b.frames.Lookup(f.lookupPC); fde != nil {
			row, err := fde.RowAt(f.lookupPC)
			if err == nil {
				next, err = p.applyRow(f, row)
				if err == nil {
					return next, row.Signal, false, nil
				}
				if errors.Is(err, errOutermost) {
					return nil, false, false, err // no guessing past the end the CFI marks
				}
			}
		}
	}
	if f.Kind == FrameSignal {
		if next, err := p.sigtrampRegs(f); err == nil {
			return next, true, false, nil
		}
	}
	next, err = p.heuristicUnwind(f)
	return next, false, true, err
}

// applyRow evaluates a CFI row: the CFA, then every register of the caller.
func (p *Process) applyRow(f *Frame, row *cfi.Row) (*Regs, error) {
	regs := f.regs
	env := p.cfiEnv(regs)
	var cfa uint64
	if row.CFA.Expr != nil {
		v, err := dwop.EvalValue(row.CFA.Expr, env)
		if err != nil {
			return nil, fmt.Errorf("CFA expression: %w", err)
		}
		cfa = v
	} else {
		v, ok := regs.Get(int(row.CFA.Reg))
		if !ok {
			return nil, fmt.Errorf("CFA register %d unknown", row.CFA.Reg)
		}
		cfa = v + uint64(row.CFA.Offset)
	}
	f.CFA = cfa
	a := p.Arch
	// Registers without a rule keep their value (gdb treats "unspecified" as "same value").
	next := regs.derive()
	next.Set(a.SPReg, cfa)
	// On Power the ABI's volatile registers are not recovered without an explicit rule, as
	// gdb's ppc unwinder does (r0, r3-r12, f0-f13); other machines keep every register.
	if a.IsPower() {
		next.Clear(0)
		for i := 3; i <= 12; i++ {
			next.Clear(i)
		}
		for i := 0; i <= 13; i++ {
			next.Clear(ppc64.DwarfF0 + i)
		}
	}
	env.Initial = []uint64{cfa}
	raKnown := false
	for reg, rule := range row.Regs {
		n := int(reg)
		switch rule.Kind {
		case cfi.RuleUndefined:
			next.Clear(n)
		case cfi.RuleSameValue, cfi.RuleUnspecified:
		case cfi.RuleOffset:
			v, err := p.readUint(cfa+uint64(rule.Offset), a.PtrSize)
			if err != nil {
				next.Clear(n)
				continue
			}
			next.Set(n, v)
		case cfi.RuleValOffset:
			next.Set(n, cfa+uint64(rule.Offset))
		case cfi.RuleRegister:
			if v, ok := regs.Get(int(rule.Reg)); ok {
				next.Set(n, v)
			} else {
				next.Clear(n)
			}
		case cfi.RuleExpression:
			addr, err := dwop.EvalValue(rule.Expr, env)
			if err != nil {
				next.Clear(n)
				continue
			}
			v, err := p.readUint(addr, a.PtrSize)
			if err != nil {
				next.Clear(n)
				continue
			}
			next.Set(n, v)
		case cfi.RuleValExpression:
			v, err := dwop.EvalValue(rule.Expr, env)
			if err != nil {
				next.Clear(n)
				continue
			}
			next.Set(n, v)
		}
		if reg == row.RAReg {
			raKnown = true
		}
	}
	// The caller's pc is the return address column.
	ra, ok := next.Get(int(row.RAReg))
	if rr, has := row.Regs[row.RAReg]; has && rr.Kind == cfi.RuleUndefined {
		return nil, errOutermost
	}
	if !ok {
		return nil, errors.New("return address unknown")
	}
	_ = raKnown
	if a.IsPower() {
		next.Set(ppc64.DwarfPC, ra)
		// Keep both numberings of the link register coherent.
		if lr, ok := next.Get(ppc64.DwarfLR); ok {
			next.Set(ppc64.DwarfLRSPR, lr)
		}
	} else {
		next.Set(a.PCReg, ra)
	}
	return next, nil
}

// cfiEnv gives CFI expressions access to registers and memory.
func (p *Process) cfiEnv(regs *Regs) *dwop.Env {
	return &dwop.Env{
		AddrSize: p.Arch.PtrSize,
		Order:    p.Arch.ByteOrder,
		Mem:      func(addr uint64, b []byte) error { return p.ReadMemory(b, addr) },
		Reg: func(n uint64) (uint64, error) {
			v, ok := regs.Get(int(n))
			if !ok {
				return 0, fmt.Errorf("register %d: %w", n, dwop.ErrUnavailable)
			}
			return v, nil
		},
	}
}

// isSigtramp recognises a signal trampoline by its code when no CFI marks it.
func (p *Process) isSigtramp(f *Frame) bool {
	if p.Arch.Machine != elf.EM_X86_64 {
		return false
	}
	buf := make([]byte, len(amd64.RestoreRT))
	if err := p.readCode(buf, f.PC); err != nil {
		return false
	}
	return bytes.Equal(buf, amd64.RestoreRT)
}

// readCode reads instruction bytes from memory, or from the module's file when the memory
// (a core file) lacks text.
func (p *Process) readCode(b []byte, addr uint64) error {
	if err := p.ReadMemory(b, addr); err == nil {
		return nil
	}
	if m := p.ModuleAt(addr); m != nil {
		if n, err := m.Bin.ReadCode(b, addr-m.Bias); err == nil && n == len(b) {
			return nil
		}
	}
	return fmt.Errorf("symbols: read code at %#x", addr)
}

// sigtrampRegs recovers the interrupted registers from the ucontext the kernel pushed
// (x86-64: rt_sigframe at the trampoline's stack pointer).
func (p *Process) sigtrampRegs(f *Frame) (*Regs, error) {
	if p.Arch.Machine != elf.EM_X86_64 {
		return nil, errors.New("no signal frame layout for " + p.Arch.Name)
	}
	sp, ok := f.regs.SP()
	if !ok {
		return nil, errors.New("no stack pointer")
	}
	// struct rt_sigframe { char *pretcode (already popped); struct ucontext uc; ... }.
	gregs := sp + amd64.UcontextGregs
	order := amd64.GregsDWARF
	buf := make([]byte, 8*len(order))
	if err := p.ReadMemory(buf, gregs); err != nil {
		return nil, err
	}
	next := NewRegs(p.Arch)
	for i, n := range order {
		next.Set(n, p.Arch.ByteOrder.Uint64(buf[8*i:]))
	}
	f.CFA = sp
	return next, nil
}

// heuristicUnwind is used where no CFI exists: the frame-pointer chain on x86-64, the back
// chain on Power. The result is flagged uncertain.
func (p *Process) heuristicUnwind(f *Frame) (*Regs, error) {
	a := p.Arch
	regs := f.regs
	next := NewRegs(a)
	switch a.Machine {
	case elf.EM_X86_64:
		sp, _ := regs.SP()
		// At a function's first instruction the return address is at the stack top; so it is
		// where a call through a null or wild pointer went to no object at all (as gdb
		// assumes for a pc of 0).
		atEntry := f.exact && (f.Module == nil || f.Function != nil && f.lookupPC == f.Function.Entry)
		if !atEntry && f.exact && f.Module != nil {
			if s, ok := f.Module.Bin.Symbol(f.lookupPC); ok && s.Func && s.Addr == f.lookupPC {
				atEntry = true
			}
		}
		if atEntry {
			ra, err := p.readUint(sp, 8)
			if err != nil {
				return nil, err
			}
			if v, ok := regs.Get(amd64.DwarfRBP); ok {
				next.Set(amd64.DwarfRBP, v)
			}
			next.Set(amd64.DwarfRSP, sp+8)
			next.Set(amd64.DwarfRIP, ra)
			f.CFA = sp + 8
			return next, nil
		}
		fp, ok := regs.Get(amd64.DwarfRBP)
		if !ok || fp == 0 || fp < sp {
			return nil, errors.New("no frame pointer")
		}
		savedFP, err := p.readUint(fp, 8)
		if err != nil {
			return nil, err
		}
		ra, err := p.readUint(fp+8, 8)
		if err != nil {
			return nil, err
		}
		next.Set(amd64.DwarfRBP, savedFP)
		next.Set(amd64.DwarfRSP, fp+16)
		next.Set(amd64.DwarfRIP, ra)
		f.CFA = fp + 16
		return next, nil
	case elf.EM_PPC64:
		// The Power ABIs keep a back chain: 0(r1) points at the caller's frame, whose LR
		// save slot (16 bytes in) holds the return address into the caller.
		sp, ok := regs.Get(ppc64.DwarfR1)
		if !ok || sp == 0 {
			return nil, errors.New("no stack pointer")
		}
		callerSP, err := p.readUint(sp, 8)
		if err != nil || callerSP <= sp {
			return nil, errors.New("back chain ends")
		}
		// The LR save slot of the caller's frame holds the return address once the function
		// has saved it; in frame 0 a leaf (or a function still in its prologue) has it in LR.
		var ra uint64
		if saved, err := p.readUint(callerSP+16, 8); err == nil && p.ModuleAt(saved) != nil {
			ra = saved
		} else if f.callee == nil && f.exact {
			ra, _ = regs.Get(ppc64.DwarfLR)
		}
		if ra == 0 {
			return nil, errors.New("back chain: no return address")
		}
		next.Set(ppc64.DwarfR1, callerSP)
		if v, ok := regs.Get(ppc64.DwarfR2); ok {
			next.Set(ppc64.DwarfR2, v)
		}
		next.Set(ppc64.DwarfPC, ra)
		next.Set(ppc64.DwarfLR, ra)
		f.CFA = callerSP
		return next, nil
	}
	return nil, errors.New("no fallback unwinder for " + a.Name)
}
