package symbols

import (
	"debug/dwarf"
	"sync"
)

// funcIndex maps subprogram DIEs (definitions, their specifications and abstract origins) to
// functions, for call-site targets.
type funcIndex struct {
	once  sync.Once
	byDIE map[dwarf.Offset]*Function

	nameOnce sync.Once
	byName   map[string][]*Function // FunctionsNamed's answers, built at its first call
}

func (b *Binary) functionForDIE(off dwarf.Offset) *Function {
	b.fidx.once.Do(func() {
		b.fidx.byDIE = make(map[dwarf.Offset]*Function, len(b.funcs))
		for _, f := range b.funcs {
			b.fidx.byDIE[f.off] = f
			for _, o := range []dwarf.Offset{f.spec, f.origin} {
				if o != 0 {
					if _, ok := b.fidx.byDIE[o]; !ok {
						b.fidx.byDIE[o] = f
					}
				}
			}
		}
	})
	if f := b.fidx.byDIE[off]; f != nil {
		return f
	}
	// A declaration (often in another unit): find the definition by name.
	if name := b.nameOfDIE(off, b.declNames); name != "" {
		if fs := b.FunctionsNamed(name); len(fs) == 1 {
			return fs[0]
		}
	}
	return nil
}

// tailStep is one function left by a tail call: the function and its tail call site.
type tailStep struct {
	fn *Function
	cs *callSite
}

// tailCallFrames reconstructs, as gdb does, the frames of functions that tail-called their
// way from the caller's call target to the callee: the caller's call site names the function
// it called, and that function's DW_AT_call_tail_call sites lead on to the callee. The frames
// are returned innermost first.
func (p *Process) tailCallFrames(f, c *Frame) []*Frame {
	if f.Function == nil || c.Function == nil || f.Module == nil || c.Module != f.Module ||
		f.Kind == FrameSignal || c.Kind == FrameSignal {
		return nil
	}
	b := c.Module.Bin
	root, err := c.Function.scopeTree()
	if err != nil {
		return nil
	}
	cs := root.callSites[c.PC-c.Module.Bias]
	if cs == nil || cs.tail {
		return nil
	}
	addr, err := c.callTarget(cs)
	if err != nil || addr == f.Function.Entry+f.Module.Bias || addr < c.Module.Bias {
		return nil
	}
	target := b.funcForPC(addr - c.Module.Bias)
	if target == nil || target == f.Function || target.Entry != addr-c.Module.Bias {
		return nil
	}
	var paths [][]tailStep
	var walk func(fn *Function, path []tailStep, depth int)
	walk = func(fn *Function, path []tailStep, depth int) {
		if depth > 8 || len(paths) > 16 {
			return
		}
		tr, err := fn.scopeTree()
		if err != nil {
			return
		}
		for _, s := range tr.callSites {
			if !s.tail || s.origin == 0 {
				continue
			}
			next := b.functionForDIE(s.origin)
			if next == nil {
				continue
			}
			np := append(append([]tailStep(nil), path...), tailStep{fn, s})
			if next == f.Function {
				paths = append(paths, np)
				continue
			}
			seen := false
			for _, st := range path {
				seen = seen || st.fn == next
			}
			if !seen {
				walk(next, np, depth+1)
			}
		}
	}
	walk(target, nil, 0)
	if len(paths) == 0 {
		return nil
	}
	// Keep only the steps every path agrees on, from the caller's side (gdb keeps the common
	// prefix and suffix; a single path is the usual case).
	steps := paths[0]
	for _, pth := range paths[1:] {
		n := 0
		for n < len(steps) && n < len(pth) && steps[n] == pth[n] {
			n++
		}
		steps = steps[:n]
	}
	var out []*Frame
	for i := len(steps) - 1; i >= 0; i-- {
		st := steps[i]
		tf := &Frame{Kind: FrameTailCall, PC: st.cs.returnPC + c.Module.Bias, Module: c.Module, Function: st.fn,
			Name: st.fn.Name, proc: p, regs: c.regs, lookupPC: st.cs.returnPC - 1, Uncertain: c.Uncertain}
		if tr, err := st.fn.scopeTree(); err == nil {
			ch := tr.chainAt(tf.lookupPC)
			tf.chain = ch
			for k := len(ch) - 1; k > 0; k-- {
				if ch[k].kind == scopeInlined {
					tf.Name = ch[k].name
					break
				}
			}
		}
		if l, ok := b.LineForPC(tf.lookupPC); ok {
			tf.Line, tf.HasLine = l, true
		}
		out = append(out, tf)
	}
	return out
}
