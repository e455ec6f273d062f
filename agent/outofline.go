package agent

import (
	"errors"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/hpcdap/hpcdap/amd64"
	"github.com/hpcdap/hpcdap/cdti"
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
// instruction, by carrying out a branch on the registers, through a slot, or by lifting the
// trap and single-stepping with the other threads stopped. atTrap counts the passes of the
// first three kinds made in the same request as the resumption, straight from the trap's stop,
// and hooked those of them made where the back end reaped the stop (trapHook).
type passCounts struct {
	emulated, branched, outOfLine, stepped, atTrap, hooked uint64
}

// passResult says how a thread standing on a breakpoint goes past it.
type passResult int

const (
	passNo        passResult = iota // only by stepping over the lifted trap
	passEmulated                    // the instruction is emulated (emulate)
	passBranched                    // the branch is carried out on the registers
	passOutOfLine                   // the thread runs the instruction in its slot
	passNeedPage                    // out of line, once a scratch page near the code is mapped
)

// passOver works out how th, standing on breakpoint b with the general registers regs (rip at
// b), goes past it without lifting the trap, and makes the memory accesses that takes: an
// emulated instruction's, a call's push, the copy into th's slot. It returns the registers to
// resume th with, which the caller writes (and, for passOutOfLine, th.ool, which the caller
// clears if it cannot). Nothing passes this way with a signal to deliver (its handler must run
// first, from the breakpoint), nor with a watchpoint armed on the thread (an emulated access
// would not trigger it, and one the slot's copy triggers is left to the path that reports it
// exactly); through a back end that cannot access memory as the process does (not local),
// only what touches no memory (no scratch page either).
func (p *proc) passOver(th *pthread, b *breakpoint, regs []byte) ([]byte, passResult) {
	if p.mach == nil || th.sig != 0 || th.watch[0] != nil || th.watch[1] != nil {
		return nil, passNo
	}
	pm, _ := p.tp.(target.MemoryAsProcess) // nil: only what touches no memory passes here
	code := make([]byte, amd64.MaxInstLen)
	n, _ := programMemory{p}.ReadMemory(b.addr, code)
	code = code[:n]
	if n == 0 {
		return nil, passNo
	}
	if e, ok := p.mach.emulate(code, regs); ok && p.emulateAccess(e, pm) {
		return e.regs, passEmulated
	}
	// An emulated access the process may not make is left to the processor, in the slot,
	// where it faults as it should.
	if br, ok := amd64.DecodeBranch(code, b.addr); ok {
		if br.Call && p.shadowStack() {
			return nil, passNo // a call carried out here would miss the shadow stack
		}
		if out, ok := p.branch(b, br, regs, pm); ok {
			return out, passBranched
		}
		return nil, passNo
	}
	if pm == nil {
		return nil, passNo // no scratch page through a back end that is not local
	}
	return p.outOfLine(th, b, code, regs)
}

// shadowStack reports whether the process runs with a CET shadow stack (x86_Thread_features
// of /proc/PID/status lists shstk), read once per image: there, only the processor may push
// return addresses.
func (p *proc) shadowStack() bool {
	if p.shstk == 0 {
		p.shstk = 1
		b, _ := os.ReadFile("/proc/" + strconv.Itoa(p.pid) + "/status")
		for _, line := range strings.Split(string(b), "\n") {
			if f, ok := strings.CutPrefix(line, "x86_Thread_features:"); ok && strings.Contains(f, "shstk") {
				p.shstk = 2
			}
		}
	}
	return p.shstk == 2
}

// emulateAccess makes e's memory access with the process's own rights: one that would fault
// in the process (a null or unmapped slot, a read-only page, a guard page) fails here and is
// left to the processor.
func (p *proc) emulateAccess(e emulation, pm target.MemoryAsProcess) bool {
	if (e.loadSize > 0 || e.storeSize > 0) && pm == nil {
		return false
	}
	if e.loadSize > 0 {
		var v [8]byte
		if k, err := pm.ReadMemoryAsProcess(e.load, v[:e.loadSize]); err != nil || k != e.loadSize {
			return false
		}
		amd64.SetReg(e.regs, e.loadReg, le.Uint64(v[:]))
	}
	if e.storeSize > 0 {
		if k, err := pm.WriteMemoryAsProcess(e.store, e.value[:e.storeSize]); err != nil || k != e.storeSize {
			return false
		}
	}
	return true
}

// outOfLine copies the instruction code at b into th's slot of a scratch page that reaches
// its operands, and returns regs with rip at the slot.
func (p *proc) outOfLine(th *pthread, b *breakpoint, code, regs []byte) ([]byte, passResult) {
	if p.scratchOff {
		return nil, passNo
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
			return nil, passNo
		}
		if string(pg.held[i]) != string(out) {
			if w, err := p.tp.WriteMemory(slot, out); err != nil || w != len(out) {
				pg.held[i] = nil
				return nil, passNo
			}
			pg.held[i] = out
		}
		th.ool = oolPass{slot: slot, addr: b.addr, n: k}
		moved := append([]byte(nil), regs...)
		amd64.SetReg(moved, amd64.OffRIP, slot)
		return moved, passOutOfLine
	}
	if len(p.scratch) >= maxScratchPages {
		return nil, passNo
	}
	if _, _, err := amd64.OutOfLine(code, b.addr, b.addr); err != nil {
		return nil, passNo // not relocatable anywhere: no page would help
	}
	return nil, passNeedPage
}

// branch carries out branch br at b on a copy of regs: the destination from the registers
// (or, for a call through memory, read with the process's rights), the return address pushed
// for a call (written with them too, so that a bad stack faults in the process, not here).
func (p *proc) branch(b *breakpoint, br amd64.Branch, regs []byte, pm target.MemoryAsProcess) ([]byte, bool) {
	dest, load, ok := br.Dest(regs)
	if !ok || ((load || br.Call) && pm == nil) {
		return nil, false
	}
	if load {
		var v [8]byte
		if k, err := pm.ReadMemoryAsProcess(dest, v[:]); err != nil || k != len(v) {
			return nil, false
		}
		dest = le.Uint64(v[:])
	}
	out := append([]byte(nil), regs...)
	if br.Call {
		var v [8]byte
		le.PutUint64(v[:], b.addr+uint64(br.Len))
		sp := amd64.Reg(regs, amd64.OffRSP) - 8
		if k, err := pm.WriteMemoryAsProcess(sp, v[:]); err != nil || k != len(v) {
			return nil, false
		}
		amd64.SetReg(out, amd64.OffRSP, sp)
	}
	amd64.SetReg(out, amd64.OffRIP, dest)
	return out, true
}

// passed records that th went past its breakpoint as how says, resuming at the registers
// regs.
func (p *proc) passed(th *pthread, how passResult, regs []byte) {
	switch how {
	case passEmulated:
		p.passes.emulated++
	case passBranched:
		p.passes.branched++
	case passOutOfLine:
		p.passes.outOfLine++
	}
	th.atBreak = false
	th.pc = amd64.Reg(regs, amd64.OffRIP)
}

// passInPlace passes th, stopped on breakpoint b with its PC moved back onto it, over b
// without lifting the trap when passOver can, writing its registers; passNo and passNeedPage
// leave th as it was.
func (p *proc) passInPlace(th *pthread, b *breakpoint) passResult {
	if p.mach == nil {
		return passNo
	}
	regs, err := p.tp.Registers(th.tid, target.RegsGeneral)
	if err != nil || p.mach.pc(regs) != b.addr {
		return passNo
	}
	out, how := p.passOver(th, b, regs)
	switch how {
	case passEmulated, passBranched, passOutOfLine:
		if err := p.tp.SetRegisters(th.tid, target.RegsGeneral, out); err != nil {
			th.ool = oolPass{}
			return passNo
		}
		p.passed(th, how, out)
	}
	return how
}

// passAtTrap passes th over breakpoint b straight from the trap's stop, when nothing else
// waits to move or stop the process: regs are the registers the back end read with the stop
// (rip past the trap), and the new ones are written with the resumption in one request. It
// reports false when th must go the usual way (its PC moved back onto the breakpoint).
func (p *proc) passAtTrap(th *pthread, b *breakpoint, regs []byte) bool {
	rr, ok := p.tp.(target.RegsResumer)
	if !ok || len(regs) < amd64.UserRegsSize || !p.mayRunNow(th) {
		return false
	}
	if !p.passTrap(th, b, regs, func(out []byte) error { return rr.ResumeWithRegisters(th.tid, out, 0) }) {
		return false
	}
	th.sig = 0
	th.stopped, th.pc = false, 0
	return true
}

// passTrap passes th over trap b from the registers regs it stopped with (its PC past the trap
// or on it), in one resume: the instruction emulated, branched or run out of line, then
// resume called with the registers to run on with. It reports whether th runs on.
func (p *proc) passTrap(th *pthread, b *breakpoint, regs []byte, resume func([]byte) error) bool {
	at := append([]byte(nil), regs...)
	amd64.SetReg(at, amd64.OffRIP, b.addr)
	out, how := p.passOver(th, b, at)
	switch how {
	case passEmulated, passBranched, passOutOfLine:
	default:
		return false
	}
	if err := resume(out); err != nil {
		th.ool = oolPass{}
		return false
	}
	p.passed(th, how, out)
	p.passes.atTrap++
	return true
}

// mayRunNow reports whether advance would let th run at once: nothing under way that holds
// the process, no notification to send, no thread being stopped (for a step over or a
// mapping that waits for every thread), th runnable.
func (p *proc) mayRunNow(th *pthread) bool {
	return p.runnable(th) && p.quiet()
}

// quiet reports whether nothing under way holds the process: no step over, injection,
// scratch mapping, notification or unwritten ack, no thread being stopped, the process
// started and not suspended.
func (p *proc) quiet() bool {
	if p.tp == nil || p.exited || p.stepOver != nil || p.capture != 0 || p.acks != 0 || p.mapping ||
		len(p.pending) != 0 || p.inflight != nil || !p.started || p.suspended {
		return false
	}
	for _, o := range p.threads {
		if o.interrupting {
			return false
		}
	}
	return true
}

// mapScratch maps a scratch page as close to near as a free range allows, with a system call
// injected into th (every thread stopped). A process that refuses the mapping, or whose
// injected call fails maxScratchTries times (signals keep interrupting it), runs without
// out-of-line execution: its breakpoints are stepped over as before.
func (p *proc) mapScratch(th *pthread, near uint64) {
	maps, err := readMaps(p.pid)
	if err != nil {
		p.a.logf("agent: rank %d: scratch page: %v: breakpoints are stepped over", p.rank, err)
		p.scratchOff = true
		return
	}
	hint := scratchHint(maps, near)
	p.mapping = true
	defer func() { p.mapping = false }()
	r, code := p.injectSyscall(th, amd64.SysMmap, hint, scratchPageSize, protRX, mapScratchFlags, ^uint64(0), 0)
	if code == cdti.CmdSuccess && r < 0 && r > -4096 && hint != 0 {
		// The range was taken meanwhile, or the kernel refuses it: anywhere will do for
		// instructions without a RIP-relative operand.
		r, code = p.injectSyscall(th, amd64.SysMmap, 0, scratchPageSize, protRX, mapPrivAnn, ^uint64(0), 0)
	}
	switch {
	case code != cdti.CmdSuccess:
		// The call could not run (a signal each time, or the thread ended): a later hit
		// tries again, a few times.
		if p.scratchTries++; p.scratchTries >= maxScratchTries {
			p.a.logf("agent: rank %d: scratch page near %#x: injected mmap: %v: breakpoints are stepped over", p.rank, near, code)
			p.scratchOff = true
		}
	case r < 0 && r > -4096:
		p.a.logf("agent: rank %d: scratch page near %#x: mmap: errno %d: breakpoints are stepped over", p.rank, near, -r)
		p.scratchOff = true
	default:
		p.scratch = append(p.scratch, newScratchPage(uint64(r)))
	}
}

// maxScratchTries is how many injected mmap calls may fail before a process goes without
// scratch pages.
const maxScratchTries = 3

// Arguments of the scratch page's mmap: executable, not writable by the program, and at the
// address asked for or not at all (MAP_FIXED_NOREPLACE).
const (
	protRX          = 0x1 | 0x4
	mapScratchFlags = mapPrivAnn | 0x100000
)

// scratchHint picks the address of a free page nearest to near: the page just below a
// mapping with free space under it. Not below the stack (its guard gap) nor within 4 GiB
// above the heap (where brk grows); 0 when there is none.
func scratchHint(maps []mapping, near uint64) uint64 {
	const lowest, highest, heapRoom = 1 << 16, 1<<47 - scratchPageSize, 1 << 32
	sort.Slice(maps, func(i, j int) bool { return maps[i].start < maps[j].start })
	var best, bestDist uint64
	for i, m := range maps {
		below := uint64(lowest)
		if i > 0 {
			below = maps[i-1].end
			if maps[i-1].path == "[heap]" {
				below += heapRoom
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
