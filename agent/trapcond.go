package agent

import (
	"fmt"

	"github.com/hpcdap/hpcdap/amd64"
	"github.com/hpcdap/hpcdap/arch"
	"github.com/hpcdap/hpcdap/bpcode"
	"github.com/hpcdap/hpcdap/cdti"
	"github.com/hpcdap/hpcdap/target"
)

// trapCond is what the agent decides itself at one of a tool's traps (SetTrapCondition): the
// site's condition, evaluated in the trapped thread, and its hit count.
type trapCond struct {
	owner uint32 // the tool that set it
	site  *bpcode.Site
	bias  uint64
	hits  uint64 // hits whose condition held
}

// setTrapCondition answers SetTrapCondition: the trap at the address must be one t planted;
// an empty site removes the condition.
func (p *proc) setTrapCondition(t *tool, tid uint32, c *cdti.SetTrapCondition) cdti.Result {
	if p.a.noTrapConds {
		return fail(cdti.CmdInval, tid)
	}
	b := p.bps[c.Address]
	if b == nil || !b.owners[t.id] {
		return fail(cdti.CmdParmErr, tid)
	}
	var hits uint64 // the count of the condition replaced or removed
	old := p.conds[c.Address]
	mine := old != nil && old.owner == t.id
	if mine {
		hits = old.hits
	}
	if len(c.Site) == 0 {
		if mine {
			delete(p.conds, c.Address)
		}
		return ok(&cdti.SetTrapConditionAck{ThreadID: tid, Hits: hits})
	}
	site, err := bpcode.DecodeSite(c.Site)
	if err != nil {
		p.a.logf("agent: rank %d: trap condition at %#x: %v", p.rank, c.Address, err)
		return fail(cdti.CmdParmErr, tid)
	}
	if len(site.Log) > 0 && !p.a.capturingOutput() {
		// A log message goes out with the ranks' output: without its capture the tool prints it.
		return fail(cdti.CmdParmErr, tid)
	}
	if p.conds == nil {
		p.conds = make(map[uint64]*trapCond)
	}
	start := c.Hits
	if start == cdti.TrapHitsCarryOn {
		start = hits
	}
	p.conds[c.Address] = &trapCond{owner: t.id, site: site, bias: c.Bias, hits: start}
	if h, ok := p.tp.(target.TrapHooker); ok && !p.hooked {
		h.SetTrapHook(p.trapHook)
		p.hooked = true
	}
	return ok(&cdti.SetTrapConditionAck{ThreadID: tid, Hits: hits})
}

// decide applies c at a hit of trap b by th: whether the hit is reported, and whether because
// the condition could not be evaluated. regs, when not nil, are th's general registers at the
// stop (its PC aside, which is the trap's address). A trap another tool shares, or a condition set by a
// tool that no longer holds control, reports every hit as it would without a condition.
func (p *proc) decide(th *pthread, b *breakpoint, c *trapCond, regs []byte) (stop, failed bool) {
	if !p.decides(b, c) {
		return true, false
	}
	holds, stop, msg, err := c.judge(&trapMachine{p: p, tid: th.tid, gp: regs})
	if err != nil {
		return true, true
	}
	p.count(c, holds, msg)
	return stop, false
}

// judge evaluates c at a hit seen through m, with no effect yet: whether its condition holds,
// whether the hit stops (the condition holds and so does the hit condition, counting this
// hit), and a log point's message (a log point never stops).
func (c *trapCond) judge(m *trapMachine) (holds, stop bool, msg string, err error) {
	ok, err := c.site.Condition(m, c.bias)
	switch {
	case err != nil || !ok:
		return false, false, "", err
	case !c.site.HitOp.Holds(c.hits+1, c.site.HitN):
		return true, false, "", nil
	case len(c.site.Log) > 0:
		return true, false, c.site.Message(m, c.bias), nil
	}
	return true, true, "", nil
}

// count records a judged hit: counted when its condition held, and a log point's message sent
// out with the rank's output (stream "log").
func (p *proc) count(c *trapCond, holds bool, msg string) {
	if holds {
		c.hits++
	}
	if msg != "" {
		p.a.output.publish(OutputParams{Rank: int(p.rank), Stream: LogStream, Text: msg})
	}
}

// decides reports whether the agent decides the hits of trap b by c: c's tool holds control
// and no other tool shares the trap.
func (p *proc) decides(b *breakpoint, c *trapCond) bool {
	if p.holder == nil || p.holder.id != c.owner {
		return false
	}
	for o := range b.owners {
		if o != c.owner && o != internalOwner {
			return false
		}
	}
	return true
}

// trapHook is the back end's trap hook (target.TrapHook): a hit of a conditional trap that
// does not stop (its condition false, its hit condition not met yet, or a log point), by a
// thread free to run on, is passed right where the back end reaped the stop, on its thread,
// with the registers it read then: no event, no hand-off between goroutines. The hit is
// counted and a log point's message (formatted before the thread runs on) published only
// once the thread is passed. Everything else, and anything while the process's goroutine is
// busy or has events of this process still to handle, is delivered as an event and decided
// by onSignal as before (evaluating a condition has no effect, so evaluating it again there
// is harmless).
func (p *proc) trapHook(ev *target.Event, seq uint64, resume func([]byte) error) bool {
	if !p.mu.TryLock() {
		return false
	}
	defer p.mu.Unlock()
	if seq != p.evSeen || p.tp == nil || p.mach == nil || !p.quiet() {
		return false
	}
	th := p.threads[ev.Tid]
	if th == nil || th.stopped || th.interrupting || th.held || th.stepReq || th.toolStep || p.pins[th.tid] != 0 {
		return false
	}
	if o := th.ool; o.slot != 0 && (ev.PC == o.slot || ev.PC == o.slot+uint64(o.n)) {
		return false // a stop in its slot: leaveSlot's
	}
	addr := ev.PC - p.info.Arch.PCAfterBreak
	b, c := p.bps[addr], p.conds[addr]
	if b == nil || c == nil || b.lifted || addr == p.startBP || !p.decides(b, c) || len(ev.Regs) < amd64.UserRegsSize {
		return false
	}
	holds, stop, msg, err := c.judge(&trapMachine{p: p, tid: th.tid, gp: ev.Regs, pc: addr})
	if err != nil || stop {
		return false
	}
	saved := *th
	th.ool = oolPass{}
	th.sig = 0
	if !p.passTrap(th, b, ev.Regs, resume) {
		*th = saved
		return false
	}
	p.passes.hooked++
	th.brk = addr
	th.pc = 0
	p.count(c, holds, msg)
	return true
}

// LogStream is the output stream of log-point messages the agent formats (SetTrapCondition).
const LogStream = "log"

// trapMachine is a trapped thread as a bpcode.Machine: its general registers by DWARF number
// (read once) and its process's memory as the program sees it (traps shadowed).
type trapMachine struct {
	p    *proc
	tid  int
	arch *arch.Arch
	gp   []byte
	pc   uint64 // the breakpoint's address (0: the thread's recorded PC)
}

func (m *trapMachine) Register(n int) (uint64, error) {
	if m.arch == nil {
		a, err := arch.For(m.p.info.Machine, m.p.info.ByteOrder)
		if err != nil {
			return 0, err
		}
		m.arch = a
	}
	if m.gp == nil {
		gp, err := m.p.tp.Registers(m.tid, target.RegsGeneral)
		if err != nil {
			return 0, err
		}
		m.gp = gp
	}
	r, ok := m.arch.Register(n)
	if !ok || r.Set != arch.General || r.Off+r.Size > len(m.gp) {
		return 0, fmt.Errorf("not a general register")
	}
	if n == m.arch.PCReg {
		if m.pc != 0 {
			return m.pc, nil
		}
		return m.p.threadPC(m.p.threads[m.tid]), nil // the breakpoint's address, not past the trap
	}
	raw := m.gp[r.Off : r.Off+r.Size]
	switch r.Size {
	case 8:
		return m.p.info.ByteOrder.Uint64(raw), nil
	case 4:
		return uint64(m.p.info.ByteOrder.Uint32(raw)), nil
	case 2:
		return uint64(m.p.info.ByteOrder.Uint16(raw)), nil
	}
	return 0, fmt.Errorf("register of %d bytes", r.Size)
}

func (m *trapMachine) ReadMemory(addr uint64, buf []byte) error {
	n, err := programMemory{m.p}.ReadMemory(addr, buf)
	if err != nil || n != len(buf) {
		return errOrShort(err)
	}
	return nil
}
