package debugger

import (
	"bytes"
	"context"

	"github.com/hpcdap/hpcdap/cdti"
	"github.com/hpcdap/hpcdap/symbols"
)

// The module list is read from the link map at some stops only (library loads are watched
// only while a breakpoint waits for one), so at a later stop it may be out of date: a
// library loaded since is missing, and one unloaded since may still be listed where another
// library now lies. A stack unwound with such a list names the new library's frames with the
// old one's symbols and follows the old one's call frame information.

// listedThisStop reports whether the module list was read from the link map at the rank's
// current stop.
func (rs *rankSymbols) listedThisStop() bool {
	gen := rs.rank.listGenNow() // before rs.mu: the job's lock is taken first, never after
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return gen.stopped && rs.modsGen == gen
}

// codeWindow is how many bytes of code around a frame's pc are compared with the module's
// file.
const codeWindow = 16

// framesInPlace reports whether every frame of a stack lies in a module the process still
// maps where the module list places it: each frame's module (other than the executable,
// which never moves) must hold, around the frame's pc, the same code in memory as in its
// file. A frame in no module is not in place.
func (rs *rankSymbols) framesInPlace(ctx context.Context, mods []*symbols.Module, frames []*symbols.Frame) bool {
	checked := map[*symbols.Module]bool{}
	for _, f := range frames {
		if f.PC == 0 || f.Module == nil && f.Kind == symbols.FrameSignal {
			continue
		}
		if f.Module == nil {
			return false
		}
		if checked[f.Module] || len(mods) > 0 && f.Module == mods[0] {
			continue
		}
		checked[f.Module] = true
		if !rs.codeMatches(ctx, f.Module, f.PC) {
			return false
		}
	}
	return true
}

// codeMatches reports whether the process holds m's code at pc, comparing the aligned window
// of bytes that holds the byte before pc (the end of the call, for a return address) in
// memory and in m's file. A window the file does not hold whole (a segment's edge) cannot
// tell, and counts as a match; memory that cannot be read does not.
func (rs *rankSymbols) codeMatches(ctx context.Context, m *symbols.Module, pc uint64) bool {
	at := (pc - 1) &^ (codeWindow - 1)
	if at < m.Lo {
		return true
	}
	file := make([]byte, codeWindow)
	if n, err := m.Bin.ReadCode(file, at-m.Bias); err != nil || n != len(file) {
		return true
	}
	mem, err := rs.client().ReadMemory(ctx, rs.num(), 0, at, codeWindow, cdti.SpecAccessUseThreadState)
	return err == nil && bytes.Equal(mem, file)
}
