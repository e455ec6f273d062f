package agent

import (
	"bytes"
	"errors"
	"math/bits"

	"github.com/hpcdap/hpcdap/cdti"
	"github.com/hpcdap/hpcdap/target"
)

// Watchpoints follow the CNK's DAC model: each thread has two watch pairs (watch[0] and
// watch[1] of SetWatchpointAck), each watching one naturally aligned power-of-two range. On
// x86_64 a pair is two debug registers (DR0+DR1, DR2+DR3), so a pair watches up to 16 bytes.
const watchPairs = 2

// watchSpec is one watchpoint.
type watchSpec struct {
	addr   uint64
	length uint32
	typ    cdti.WatchType // as the tool asked
	owner  uint32
	pair   int
	prop   bool   // set on every thread (WatchPropagate)
	last   []byte // the watched bytes at the last hit, to tell a read from a write
}

func (w *watchSpec) end() uint64 { return w.addr + uint64(w.length) }

func (w *watchSpec) entry() cdti.WatchEntry {
	return cdti.WatchEntry{Addr: w.addr, Length: w.length, Type: w.typ}
}

// slotsPerPair is how many hardware slots back one pair.
func (p *proc) slotsPerPair() int { return p.info.Arch.WatchSlots / watchPairs }

// watchEntries reports th's two pairs.
func (p *proc) watchEntries(th *pthread) [2]cdti.WatchEntry {
	var out [2]cdti.WatchEntry
	for i, w := range th.watch {
		if w != nil {
			out[i] = w.entry()
		}
	}
	return out
}

// setWatchpoint applies SetWatchpoint on th for owner, with the CNK's checks in its order.
func (p *proc) setWatchpoint(th *pthread, owner uint32, addr uint64, length uint32, typ cdti.WatchType) cdti.CmdReturnCode {
	if length == 0 || bits.OnesCount32(length) != 1 {
		return cdti.CmdLngthErr
	}
	if addr == 0 || addr&uint64(length-1) != 0 {
		return cdti.CmdAddrErr
	}
	if !p.mapped(addr, uint64(length)) {
		return cdti.CmdAddrErr
	}
	if typ != cdti.WatchRead && typ != cdti.WatchWrite && typ != cdti.WatchReadWrite {
		return cdti.CmdParmErr
	}
	targets := []*pthread{th}
	if p.ctl.propagate {
		targets = targets[:0]
		for _, tid := range p.sortedTids() {
			targets = append(targets, p.threads[tid])
		}
	}
	w := &watchSpec{addr: addr, length: length, typ: typ, owner: owner, prop: p.ctl.propagate}
	for _, t := range targets {
		for _, o := range t.watch {
			if o != nil && o.addr < w.end() && addr < o.end() {
				return cdti.CmdWatchConflict
			}
		}
	}
	spp := p.slotsPerPair()
	if spp == 0 || uint64(length) > 8*uint64(spp) {
		return cdti.CmdHwdUnavail
	}
	w.pair = -1
	for k := range watchPairs {
		free := true
		for _, t := range targets {
			if t.watch[k] != nil {
				free = false
			}
		}
		if free {
			w.pair = k
			break
		}
	}
	if w.pair < 0 {
		return cdti.CmdHwdUnavail
	}
	w.last = make([]byte, length)
	p.tp.ReadMemory(addr, w.last)
	tids := make([]int, len(targets))
	for i, t := range targets {
		tids[i] = t.tid
	}
	return p.pause(tids, func() cdti.CmdReturnCode {
		var done []*pthread
		for _, t := range targets {
			if p.threads[t.tid] != t {
				continue // exited meanwhile
			}
			if err := p.programPair(t, w); err != nil {
				for _, d := range done {
					p.clearPair(d, w.pair)
				}
				p.a.logf("agent: rank %d: tid %d: set watchpoint %#x/%d: %v", p.rank, t.tid, addr, length, err)
				if errors.Is(err, target.ErrAddress) {
					return cdti.CmdAddrErr
				}
				return cdti.CmdHwdUnavail
			}
			done = append(done, t)
		}
		if w.prop {
			p.propWatch = append(p.propWatch, *w)
		}
		return cdti.CmdSuccess
	})
}

// programPair arms the hardware slots of pair w.pair on stopped thread th.
func (p *proc) programPair(th *pthread, w *watchSpec) error {
	spp := p.slotsPerPair()
	first := w.pair * spp
	kind := target.WatchWrite
	if w.typ != cdti.WatchWrite {
		kind = target.WatchReadWrite
		if w.typ == cdti.WatchRead {
			kind = target.WatchRead
		}
	}
	size := int(w.length)
	n := 1
	if size > 8 {
		n, size = size/8, 8
	}
	for i := range n {
		a := w.addr + uint64(i*size)
		err := p.tp.SetWatchpoint(th.tid, first+i, a, size, kind)
		if errors.Is(err, target.ErrUnsupported) && kind == target.WatchRead {
			// x86 cannot watch reads alone: watch both and tell reads from writes by value.
			kind = target.WatchReadWrite
			err = p.tp.SetWatchpoint(th.tid, first+i, a, size, kind)
		}
		if err != nil {
			for j := range i {
				p.tp.ClearWatchpoint(th.tid, first+j)
			}
			return err
		}
	}
	th.watch[w.pair] = w
	return nil
}

// clearPair disarms pair k of stopped thread th.
func (p *proc) clearPair(th *pthread, k int) {
	spp := p.slotsPerPair()
	for i := range spp {
		if err := p.tp.ClearWatchpoint(th.tid, k*spp+i); err != nil && !errors.Is(err, target.ErrNoThread) {
			p.a.logf("agent: rank %d: tid %d: clear watch slot %d: %v", p.rank, th.tid, k*spp+i, err)
		}
	}
	th.watch[k] = nil
}

// resetWatchpoint applies ResetWatchpoint: the watchpoint at addr on th goes (from every
// thread if it was propagated).
func (p *proc) resetWatchpoint(th *pthread, addr uint64) cdti.CmdReturnCode {
	var w *watchSpec
	for _, o := range th.watch {
		if o != nil && o.addr == addr {
			w = o
		}
	}
	if w == nil {
		return cdti.CmdAddrErr
	}
	return p.removeWatches(func(o *watchSpec) bool {
		if w.prop {
			return o.prop && o.addr == w.addr && o.length == w.length
		}
		return o == w
	})
}

// removeWatches disarms every watchpoint that match selects, on every thread.
func (p *proc) removeWatches(match func(*watchSpec) bool) cdti.CmdReturnCode {
	kept := p.propWatch[:0]
	for _, w := range p.propWatch {
		if !match(&w) {
			kept = append(kept, w)
		}
	}
	p.propWatch = kept
	var tids []int
	for _, tid := range p.sortedTids() {
		for _, w := range p.threads[tid].watch {
			if w != nil && match(w) {
				tids = append(tids, tid)
				break
			}
		}
	}
	if len(tids) == 0 || p.tp == nil || p.exited {
		return cdti.CmdSuccess
	}
	return p.pause(tids, func() cdti.CmdReturnCode {
		for _, tid := range tids {
			th := p.threads[tid]
			if th == nil {
				continue
			}
			for k, w := range th.watch {
				if w != nil && match(w) {
					p.clearPair(th, k)
				}
			}
		}
		return cdti.CmdSuccess
	})
}

// propagateWatch arms the propagated watchpoints on a new (stopped) thread.
func (p *proc) propagateWatch(th *pthread) {
	for i := range p.propWatch {
		w := p.propWatch[i]
		if th.watch[w.pair] != nil {
			continue
		}
		if err := p.programPair(th, &w); err != nil {
			p.a.logf("agent: rank %d: tid %d: propagate watchpoint %#x: %v", p.rank, th.tid, w.addr, err)
		}
	}
}

// watchHit finds the watchpoint behind a watch trap and says whether it was a read or a write.
// ok is false for a trap that must not be reported: a slot no longer armed, or a write seen by
// a read-only watchpoint that x86 watches for reads and writes alike.
func (p *proc) watchHit(th *pthread, ev target.Event) (w *watchSpec, reason cdti.NotifySignalReason, ok bool) {
	spp := p.slotsPerPair()
	if spp == 0 {
		return nil, 0, false
	}
	k := ev.Slot / spp
	if k < 0 || k >= watchPairs || th.watch[k] == nil {
		return nil, 0, false
	}
	w = th.watch[k]
	if w.typ == cdti.WatchWrite {
		p.tp.ReadMemory(w.addr, w.last)
		return w, cdti.SignalWatchpointWrite, true
	}
	cur := make([]byte, w.length)
	p.tp.ReadMemory(w.addr, cur)
	changed := !bytes.Equal(cur, w.last)
	copy(w.last, cur)
	switch {
	case changed && w.typ == cdti.WatchRead:
		return nil, 0, false
	case changed:
		return w, cdti.SignalWatchpointWrite, true
	}
	return w, cdti.SignalWatchpointRead, true
}

// watchInstruction is the instAddress of a watchpoint Notify. x86 reports a data watchpoint
// after the access, with the PC on the next instruction. With DAC trap mode TrapAfterDAC that
// PC is reported; otherwise the agent finds the instruction that made the access (see
// machine.accessInstruction) and reports the PC only when it cannot.
func (p *proc) watchInstruction(th *pthread, ev target.Event, w *watchSpec) uint64 {
	if p.prefs.dacMode == cdti.TrapAfterDAC || p.mach == nil {
		return ev.PC
	}
	regs, err := p.tp.Registers(th.tid, target.RegsGeneral)
	if err != nil {
		return ev.PC
	}
	if a, ok := p.mach.accessInstruction(programMemory{p}, regs, ev.PC, w.addr, w.end()); ok {
		return a
	}
	return ev.PC
}

// mapped reports whether [addr, addr+n) can be read.
func (p *proc) mapped(addr, n uint64) bool {
	if n == 0 {
		return true
	}
	var b [1]byte
	if k, err := p.tp.ReadMemory(addr, b[:]); err != nil || k != 1 {
		return false
	}
	if k, err := p.tp.ReadMemory(addr+n-1, b[:]); err != nil || k != 1 {
		return false
	}
	return true
}
