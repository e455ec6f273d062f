package agent

import (
	"errors"
	"sort"

	"github.com/hpcdap/hpcdap/amd64"
	"github.com/hpcdap/hpcdap/target"
)

// Out-of-line execution. A thread that continues from a planted breakpoint must execute the
// instruction the trap replaced. Lifting the trap and single-stepping costs a second stop and
// the stopping of every other thread (none may run through the lifted address unseen).
// Instead the agent copies the instruction into a slot of a scratch page it mapped in the
// process, followed by an absolute jump back to the next instruction, points the thread at
// the slot and lets it run: one stop per hit, the trap stays, the other threads run on, and
// several threads pass the same trap at once, each through its own slot. A RIP-relative
// operand is adjusted to reach the same address from the slot (the page lies within ±2 GiB
// of the code); relative jumps, conditional jumps and calls are carried out on the registers
// instead (passBranch); what neither can do exactly (syscall, loop, traps, what the decoder
// does not know) is stepped over as before.
//
// A thread that stops while in its slot (an interrupt, a signal, a fault of the displaced
// instruction) is put back where it would be without the slot: on the breakpoint, still to
// pass it, when the instruction had not run, or after the instruction when only the jump back
// had not; nobody else ever sees a PC in a scratch page.

// Scratch pages: slotSize bytes per slot, one slot per thread and page.
const (
	slotSize        = 32
	scratchPageSize = 4096
	slotsPerPage    = scratchPageSize / slotSize
	maxScratchPages = 8
)

// scratchPage is one page the agent mapped in the process (read and execute only: only the
// agent writes it) for out-of-line copies.
type scratchPage struct {
	base  uint64
	owner map[int]int // tid → slot
	free  []int       // slots owned by no thread
	held  [slotsPerPage][]byte
}

func newScratchPage(base uint64) *scratchPage {
	pg := &scratchPage{base: base, owner: make(map[int]int)}
	for i := slotsPerPage - 1; i >= 0; i-- {
		pg.free = append(pg.free, i)
	}
	return pg
}

// slot returns tid's slot in the page, giving it one if it has none (ok false: all taken).
func (pg *scratchPage) slot(tid int) (int, bool) {
	if i, ok := pg.owner[tid]; ok {
		return i, true
	}
	if len(pg.free) == 0 {
		return 0, false
	}
	i := pg.free[len(pg.free)-1]
	pg.free = pg.free[:len(pg.free)-1]
	pg.owner[tid] = i
	return i, true
}

// oolPass is a thread sent through a slot: where the slot is, and the breakpoint's
// instruction it holds.
type oolPass struct {
	slot uint64 // 0: none
	addr uint64
	n    int
}

// passCounts counts how threads went past breakpoints they had hit: by emulating the
// instruction, by carrying out a branch on the registers, through a slot, or by lifting the trap and single-stepping with the other
// threads stopped.
type passCounts struct {
	emulated, branched, outOfLine, stepped uint64
}

// passResult is what passOutOfLine did.
type passResult int

const (
	passNo       passResult = iota // not possible here: step over the lifted trap
	passDone                       // the thread is set up to run the instruction in its slot
	passBranched                   // the branch is carried out: the thread is at its destination
	passNeedPage                   // possible once a scratch page near the code is mapped
)

// passOutOfLine sets th, standing on breakpoint b, up to go past it without lifting the trap:
// a branch is carried out on its registers, another instruction is copied to th's slot and
// th pointed at it. Not with a signal to deliver (its handler must run first, from the
// breakpoint), nor with a watchpoint armed on the thread (a watchpoint hit in the slot is
// left to the path that reports it exactly), nor for a back end that is not local.
func (p *proc) passOutOfLine(th *pthread, b *breakpoint) passResult {
	if p.mach == nil || p.scratchOff || th.sig != 0 || th.watch[0] != nil || th.watch[1] != nil {
		return passNo
	}
	pm, local := p.tp.(target.MemoryAsProcess)
	if !local {
		return passNo
	}
	code := make([]byte, amd64.MaxInstLen)
	n, _ := programMemory{p}.ReadMemory(b.addr, code)
	code = code[:n]
	if n == 0 {
		return passNo
	}
	if br, ok := amd64.DecodeBranch(code, b.addr); ok {
		if p.passBranch(th, b, br, pm) {
			return passBranched
		}
		return passNo
	}
	for _, pg := range p.scratch {
		i, ok := pg.slot(th.tid)
		if !ok {
			continue
		}
		slot := pg.base + uint64(i*slotSize)
		out, k, err := amd64.OutOfLine(code, b.addr, slot)
		if errors.Is(err, amd64.ErrOutOfReach) {
			continue
		}
		if err != nil {
			return passNo
		}
		if string(pg.held[i]) != string(out) {
			if w, err := p.tp.WriteMemory(slot, out); err != nil || w != len(out) {
				pg.held[i] = nil
				return passNo
			}
			pg.held[i] = out
		}
		if err := p.tp.SetPC(th.tid, slot); err != nil {
			return passNo
		}
		th.atBreak, th.pc = false, slot
		th.ool = oolPass{slot: slot, addr: b.addr, n: k}
		return passDone
	}
	if len(p.scratch) >= maxScratchPages {
		return passNo
	}
	if _, _, err := amd64.OutOfLine(code, b.addr, b.addr); err != nil {
		return passNo // not relocatable anywhere: no page would help
	}
	return passNeedPage
}

// passBranch carries out branch br at b for th: the destination from its registers (or, for
// a call through memory, read with the process's rights), the return address pushed for a
// call (written with them too, so that a bad stack faults in the process, not here).
func (p *proc) passBranch(th *pthread, b *breakpoint, br amd64.Branch, pm target.MemoryAsProcess) bool {
	regs, err := p.tp.Registers(th.tid, target.RegsGeneral)
	if err != nil || amd64.Reg(regs, amd64.OffRIP) != b.addr {
		return false
	}
	dest, load, ok := br.Dest(regs)
	if !ok {
		return false
	}
	if load {
		var v [8]byte
		if k, err := pm.ReadMemoryAsProcess(dest, v[:]); err != nil || k != len(v) {
			return false
		}
		dest = le.Uint64(v[:])
	}
	if br.Call {
		var v [8]byte
		le.PutUint64(v[:], b.addr+uint64(br.Len))
		sp := amd64.Reg(regs, amd64.OffRSP) - 8
		if k, err := pm.WriteMemoryAsProcess(sp, v[:]); err != nil || k != len(v) {
			return false
		}
		amd64.SetReg(regs, amd64.OffRSP, sp)
	}
	amd64.SetReg(regs, amd64.OffRIP, dest)
	if err := p.tp.SetRegisters(th.tid, target.RegsGeneral, regs); err != nil {
		return false
	}
	th.atBreak, th.pc = false, dest
	return true
}

// mapScratch maps a scratch page as close to near as a free range allows, with a system call
// injected into th (every thread stopped). A failure turns out-of-line execution off for the
// process, which then steps over its breakpoints as before.
func (p *proc) mapScratch(th *pthread, near uint64) {
	maps, err := readMaps(p.pid)
	if err != nil {
		p.a.logf("agent: rank %d: scratch page: %v", p.rank, err)
		p.scratchOff = true
		return
	}
	hint := scratchHint(maps, near)
	p.mapping = true
	defer func() { p.mapping = false }()
	r, code := p.injectSyscall(th, amd64.SysMmap, hint, scratchPageSize, protRX, mapScratchFlags, ^uint64(0), 0)
	if r < 0 && r > -4096 && hint != 0 {
		// The range was taken meanwhile, or the kernel refuses it: anywhere will do for
		// instructions without a RIP-relative operand.
		r, code = p.injectSyscall(th, amd64.SysMmap, 0, scratchPageSize, protRX, mapPrivAnn, ^uint64(0), 0)
	}
	if code != 0 || (r < 0 && r > -4096) {
		p.a.logf("agent: rank %d: scratch page near %#x: mmap: %d (code %v): breakpoints are stepped over", p.rank, near, r, code)
		p.scratchOff = true
		return
	}
	p.scratch = append(p.scratch, newScratchPage(uint64(r)))
}

// Arguments of the scratch page's mmap: executable, not writable by the program, and at the
// address asked for or not at all (MAP_FIXED_NOREPLACE).
const (
	protRX          = 0x1 | 0x4
	mapScratchFlags = mapPrivAnn | 0x100000
)

// scratchHint picks the address of a free page nearest to near: the page just below a
// mapping with free space under it. Not below the stack (its guard gap) nor above the heap
// (where brk grows); 0 when there is none.
func scratchHint(maps []mapping, near uint64) uint64 {
	const lowest, highest = 1 << 16, 1<<47 - scratchPageSize
	sort.Slice(maps, func(i, j int) bool { return maps[i].start < maps[j].start })
	var best, bestDist uint64
	for i, m := range maps {
		below := uint64(lowest)
		if i > 0 {
			below = maps[i-1].end
			if maps[i-1].path == "[heap]" {
				continue
			}
		}
		if m.path == "[stack]" || m.start > highest+scratchPageSize || m.start < below+scratchPageSize {
			continue
		}
		cand := m.start - scratchPageSize
		dist := max(cand, near) - min(cand, near)
		if best == 0 || dist < bestDist {
			best, bestDist = cand, dist
		}
	}
	return best
}

// leaveSlot puts a thread that stopped in its slot back where it would stand without it, and
// forgets the slot; it returns the breakpoint's address when the instruction had not run
// (the thread is then to pass the breakpoint again, without hitting it anew).
func (p *proc) leaveSlot(th *pthread, ev *target.Event) (back uint64) {
	o := th.ool
	th.ool = oolPass{}
	if ev.Kind != target.EventSignal && ev.Kind != target.EventStopped {
		return 0
	}
	pc := ev.PC
	if pc == 0 {
		pc, _ = p.tp.PC(th.tid)
	}
	var to uint64
	switch pc {
	case o.slot:
		to, back = o.addr, o.addr
	case o.slot + uint64(o.n):
		to = o.addr + uint64(o.n)
	default:
		return 0
	}
	if err := p.tp.SetPC(th.tid, to); err != nil {
		p.a.logf("agent: rank %d: tid %d: move pc from its scratch slot %#x to %#x: %v", p.rank, th.tid, pc, to, err)
		return 0
	}
	ev.PC = to
	return back
}

// dropSlots frees tid's slots (the thread is gone).
func (p *proc) dropSlots(tid int) {
	for _, pg := range p.scratch {
		if i, ok := pg.owner[tid]; ok {
			delete(pg.owner, tid)
			pg.free = append(pg.free, i)
		}
	}
}
