package agent

import (
	"bytes"

	"github.com/hpcdap/hpcdap/cdti"
)

// memReader reads target memory.
type memReader interface {
	ReadMemory(addr uint64, b []byte) (int, error)
}

// programMemory reads a process's memory as the program's code has it: planted traps show as
// the original instructions.
type programMemory struct{ p *proc }

func (m programMemory) ReadMemory(addr uint64, b []byte) (int, error) {
	n, err := m.p.tp.ReadMemory(addr, b)
	m.p.shadowRead(addr, b[:n])
	return n, err
}

// Stack walks. The agent walks the frame-pointer chain (rbp) and never reads DWARF: symbols and
// CFI unwinding belong to the front end (DESIGN decision 7), which asks for memory and
// registers when it wants an exact unwind. The walk is exact for code built with frame
// pointers (-fno-omit-frame-pointer, or -O0), including a stop on a function's first
// instructions: at a function entry (push %rbp not yet executed, with or without a leading
// endbr64), right after the push, and on a ret, frame 0's return address is read from the
// stack pointer instead of the frame pointer. Its limits: a function compiled without frame
// pointers does not appear, and its caller's frame may be skipped or, when rbp holds data, the
// walk ends early; it stops at the first frame pointer that does not grow toward the stack's
// start, leaves the stack mapping, or is zero.

// traceback walks a thread's stack from its registers: frame 0 is (pc, CFA), every later frame
// (return address, CFA). stackLo and stackHi bound the stack mapping (0, 0 when unknown).
func (m *machine) traceback(mem memReader, regs []byte, maxFrames int, stackLo, stackHi uint64) []cdti.TraceFrame {
	if maxFrames <= 0 {
		return nil
	}
	pc, sp, fp := m.pc(regs), m.sp(regs), m.fp(regs)
	inStack := func(a uint64) bool {
		if stackHi == 0 {
			return a != 0
		}
		return a >= stackLo && a+16 <= stackHi
	}
	read := func(a uint64) (uint64, bool) {
		var b [8]byte
		if n, err := mem.ReadMemory(a, b[:]); err != nil || n != 8 {
			return 0, false
		}
		return le.Uint64(b[:]), true
	}
	var frames []cdti.TraceFrame
	var ra uint64
	var ok bool
	next := fp // the caller's frame pointer, once frame 0's return address is known
	switch prologue(mem, pc) {
	case fnEntry, atRet:
		ra, ok = read(sp)
		frames = append(frames, cdti.TraceFrame{PC: pc, CFA: sp + 8})
	case afterPush:
		ra, ok = read(sp + 8)
		frames = append(frames, cdti.TraceFrame{PC: pc, CFA: sp + 16})
	default:
		if !inStack(fp) || fp < sp {
			return []cdti.TraceFrame{{PC: pc, CFA: 0}}
		}
		frames = append(frames, cdti.TraceFrame{PC: pc, CFA: fp + 16})
		ra, ok = read(fp + 8)
		next, _ = read(fp)
		if next != 0 && next <= fp {
			next = 0
		}
	}
	for ok && ra != 0 && len(frames) < maxFrames {
		if next == 0 || !inStack(next) || next&7 != 0 {
			frames = append(frames, cdti.TraceFrame{PC: ra, CFA: 0})
			break
		}
		frames = append(frames, cdti.TraceFrame{PC: ra, CFA: next + 16})
		var up uint64
		if ra, ok = read(next + 8); !ok {
			break
		}
		if up, ok = read(next); !ok {
			break
		}
		if up != 0 && up <= next {
			up = 0 // the chain must move toward the stack's start
		}
		next = up
	}
	if len(frames) > maxFrames {
		frames = frames[:maxFrames]
	}
	return frames
}

// Where a PC stands in a function's standard prologue or epilogue.
const (
	inBody    = iota
	fnEntry   // before push %rbp
	afterPush // after push %rbp, before mov %rsp,%rbp
	atRet     // on ret
)

var (
	endbr64  = []byte{0xf3, 0x0f, 0x1e, 0xfa}
	pushRBP  = []byte{0x55}
	movRBP   = []byte{0x48, 0x89, 0xe5}
	retInstr = []byte{0xc3}
)

// prologue classifies the instruction at pc.
func prologue(mem memReader, pc uint64) int {
	var code [8]byte
	n, _ := mem.ReadMemory(pc, code[:])
	c := code[:n]
	if bytes.HasPrefix(c, endbr64) {
		c = c[len(endbr64):]
	}
	switch {
	case bytes.HasPrefix(c, pushRBP):
		return fnEntry
	case bytes.HasPrefix(c, retInstr):
		return atRet
	case bytes.HasPrefix(c, movRBP):
		var prev [1]byte
		if k, _ := mem.ReadMemory(pc-1, prev[:]); k == 1 && prev[0] == pushRBP[0] {
			return afterPush
		}
	}
	return inBody
}

// stackInfo turns a traceback into GetThreadData's BG_Stack_Info list: for frame i, frameAddr
// is CFA−16, where the frame's saved rbp and return address are (or, before the push, will be)
// stored, and savedLR the return address into its caller (frame i+1's PC). Frames with an
// unknown CFA or no caller are left out.
func stackInfo(frames []cdti.TraceFrame) []cdti.StackFrame {
	var out []cdti.StackFrame
	for i := 0; i+1 < len(frames) && len(out) < cdti.MaxStackFrames; i++ {
		if frames[i].CFA < 16 {
			break
		}
		out = append(out, cdti.StackFrame{FrameAddr: frames[i].CFA - 16, SavedLR: frames[i+1].PC})
	}
	return out
}
