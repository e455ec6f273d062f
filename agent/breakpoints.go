package agent

import (
	"errors"
	"fmt"

	"github.com/hpcdap/hpcdap/cdti"
)

// breakpoint is one planted trap. The table keeps the original bytes, so that reads show the
// program's own instructions, writes over a trap update the original and keep the trap, and the
// trap can be stepped over and removed exactly.
type breakpoint struct {
	addr   uint64
	orig   []byte          // the instruction bytes the trap replaced
	owners map[uint32]bool // tool ids; internalOwner for the agent's own traps
	lifted bool            // the original bytes are in memory for a step over
	trap   []byte          // the trap written (nil: the machine's Arch.BreakInstr)
}

// trapBytes is the trap instruction b plants.
func (b *breakpoint) trapBytes(p *proc) []byte {
	if b.trap != nil {
		return b.trap
	}
	return p.info.Arch.BreakInstr
}

// internalOwner owns the agent's own breakpoints (the entry-point trap of DynamicNotifyStart).
// Tool id 0 is never a tool's (Attach refuses it).
const internalOwner = 0

func (b *breakpoint) internalOnly() bool {
	return len(b.owners) == 1 && b.owners[internalOwner]
}

var errNoTrap = errors.New("no trap instruction for this machine")

// setBreakpoint plants a trap at addr for owner, or adds owner to the trap already there.
func (p *proc) setBreakpoint(addr uint64, owner uint32) error {
	return p.setBreakpointWord(addr, owner, nil)
}

// setBreakpointWord is setBreakpoint with a trap instruction of the tool's choosing (Power:
// any trap word); nil means the machine's Arch.BreakInstr.
func (p *proc) setBreakpointWord(addr uint64, owner uint32, word []byte) error {
	if b := p.bps[addr]; b != nil {
		b.owners[owner] = true
		return nil
	}
	trap := word
	if trap == nil {
		trap = p.info.Arch.BreakInstr
	}
	if len(trap) == 0 {
		return errNoTrap
	}
	orig := make([]byte, len(trap))
	if n, err := p.tp.ReadMemory(addr, orig); err != nil || n != len(orig) {
		return fmt.Errorf("read %#x: %w", addr, errOrShort(err))
	}
	p.a.journal.trap(p.pid, addr, orig)
	if n, err := p.tp.WriteMemory(addr, trap); err != nil || n != len(trap) {
		if n > 0 { // put back what was overwritten
			p.tp.WriteMemory(addr, orig[:n])
		}
		p.a.journal.clear(p.pid, addr)
		return fmt.Errorf("write %#x: %w", addr, errOrShort(err))
	}
	p.bps[addr] = &breakpoint{addr: addr, orig: orig, owners: map[uint32]bool{owner: true}, trap: word}
	return nil
}

func errOrShort(err error) error {
	if err == nil {
		return errors.New("short transfer")
	}
	return err
}

// resetBreakpoint removes owner from the trap at addr and restores the original bytes when no
// owner is left. It reports false when owner had no trap there.
func (p *proc) resetBreakpoint(addr uint64, owner uint32) bool {
	b := p.bps[addr]
	if b == nil || !b.owners[owner] {
		return false
	}
	delete(b.owners, owner)
	if c := p.conds[addr]; c != nil && c.owner == owner {
		delete(p.conds, addr)
	}
	if len(b.owners) > 0 {
		return true
	}
	p.removeTrap(b)
	p.dropHits(addr)
	return true
}

// dropHits forgets the queued notifications of hits of the breakpoint at addr, which is gone:
// each such thread was put back on addr, where the original instruction now stands, and runs
// it when the process next runs, as if the trap had never been there. Without this, a tool
// that removed a breakpoint after one thread's hit was reported would still be told of the
// other threads that hit it at the same time.
func (p *proc) dropHits(addr uint64) {
	kept := p.pending[:0]
	for _, n := range p.pending {
		if n.reason == cdti.SignalBreakpoint && n.inst == addr {
			if th := p.threads[n.tid]; th != nil {
				th.sig = 0
			}
			continue
		}
		kept = append(kept, n)
	}
	p.pending = kept
}

// removeTrap restores the original bytes and forgets the trap.
func (p *proc) removeTrap(b *breakpoint) {
	delete(p.bps, b.addr)
	delete(p.conds, b.addr)
	if b.lifted || p.exited || p.tp == nil {
		p.a.journal.clear(p.pid, b.addr)
		return
	}
	if _, err := p.tp.WriteMemory(b.addr, b.orig); err != nil {
		p.a.logf("agent: rank %d: restore instruction at %#x: %v", p.rank, b.addr, err)
		return
	}
	p.a.journal.clear(p.pid, b.addr)
}

// removeOwner removes every trap of owner.
func (p *proc) removeOwner(owner uint32) {
	for _, b := range p.bps {
		if b.owners[owner] {
			p.resetBreakpoint(b.addr, owner)
		}
	}
}

// clearTraps removes every trap, whoever owns it.
func (p *proc) clearTraps() {
	for _, b := range p.bps {
		p.removeTrap(b)
	}
	p.startBP, p.startSig = 0, 0
}

// liftTrap puts the original bytes back for a step over; plantTrap ends it.
func (p *proc) liftTrap(b *breakpoint) error {
	if b.lifted {
		return nil
	}
	if _, err := p.tp.WriteMemory(b.addr, b.orig); err != nil {
		return err
	}
	b.lifted = true
	p.a.journal.clear(p.pid, b.addr)
	return nil
}

func (p *proc) plantTrap(b *breakpoint) error {
	if !b.lifted {
		return nil
	}
	b.lifted = false
	p.a.journal.trap(p.pid, b.addr, b.orig)
	_, err := p.tp.WriteMemory(b.addr, b.trapBytes(p))
	return err
}

// shadowRead replaces planted traps in buf (read at addr) by the original bytes.
func (p *proc) shadowRead(addr uint64, buf []byte) {
	if len(p.bps) == 0 {
		return
	}
	end := addr + uint64(len(buf))
	for _, b := range p.bps {
		if b.lifted || b.addr+uint64(len(b.orig)) <= addr || b.addr >= end {
			continue
		}
		for i, c := range b.orig {
			if a := b.addr + uint64(i); a >= addr && a < end {
				buf[a-addr] = c
			}
		}
	}
}

// shadowWrite prepares data (to be written at addr) for memory holding traps: the bytes that
// fall on a trap become its new original, and the trap bytes are written in their place.
func (p *proc) shadowWrite(addr uint64, data []byte) []byte {
	if len(p.bps) == 0 {
		return data
	}
	end := addr + uint64(len(data))
	var out []byte
	for _, b := range p.bps {
		trap := b.trapBytes(p)
		if b.addr+uint64(len(b.orig)) <= addr || b.addr >= end {
			continue
		}
		if out == nil {
			out = append([]byte(nil), data...)
		}
		for i := range b.orig {
			a := b.addr + uint64(i)
			if a < addr || a >= end {
				continue
			}
			b.orig[i] = data[a-addr]
			if !b.lifted {
				out[a-addr] = trap[i]
			}
		}
		if !b.lifted {
			p.a.journal.trap(p.pid, b.addr, b.orig) // a new original under the trap
		}
	}
	if out == nil {
		return data
	}
	return out
}
