package debugger

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/hpcdap/hpcdap/cdti"
)

// Planting. The agent owns what lies under a trap: it keeps the original instruction, shows it
// in memory reads and takes writes over a trap into it. The adapter keeps only which of its
// uses want a trap at an address (user breakpoints, steps, the link-map watch), since a CDTI
// ResetBreakpoint takes the tool's trap away whole; when the last use goes it asks the agent
// for the original instruction, which ResetBreakpoint must present.

// site is one trapped address of one rank: who in the adapter wants the trap.
type site struct {
	user bool // a user breakpoint wants it
	temp int  // steps and the link-map watch that want it
	// stale: nobody wants it, but its removal failed (the original instruction could not be
	// read, or the reset was refused): the trap is still planted, and the next sync removes it.
	stale bool
	// sentCond is the site the agent decides at this trap (cdti.SetTrapCondition), for the
	// user breakpoint condBP; "" when every hit is reported.
	sentCond string
	condBP   int
}

// rankTrap is the trap instruction of r and its byte order.
func rankTrap(r *Rank) ([]byte, binary.ByteOrder) {
	rs := &r.sym
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return rs.arch.Trap(), rs.arch.ByteOrder
}

// byConn groups ranks by the agent connection that serves them: one group per node, or, through
// the tree of agents, one group of every rank.
func byConn(ranks []*Rank) map[*cdti.Client][]*Rank {
	out := map[*cdti.Client][]*Rank{}
	for _, r := range ranks {
		out[r.node.client] = append(out[r.node.client], r)
	}
	return out
}

// eachNode runs f for the ranks of each agent connection, the connections in parallel.
func (b *breakpoints) eachNode(what string, ranks []*Rank, f func(rs []*Rank)) {
	var wg sync.WaitGroup
	for _, rs := range byConn(ranks) {
		wg.Go(func() {
			defer b.j.recoverPanic(fmt.Sprintf("%s of node %s", what, rs[0].node.host))
			f(rs)
		})
	}
	wg.Wait()
}

// trapPlan is what one rank's traps need to match the breakpoints.
type trapPlan struct {
	r       *Rank
	trap    []byte
	order   binary.ByteOrder
	want    map[uint64][]*Breakpoint // address → the breakpoints that want a trap there
	adds    []uint64
	removes []uint64
	origs   map[uint64][]byte // the original instruction under each of removes, from the agent
	conds   []condCmd         // what the agent decides at the traps kept (after adds)
}

// sync makes what is planted in each of ranks match the breakpoints, node by node: the plans
// of the node's ranks are made, then go out together on the node's connection, each rank's
// a query for the original instructions under the traps that go (the agent has them) and one
// SetBreakpoint/ResetBreakpoint list. A CDTI message addresses one rank (its header's), so a
// node's batch is one command list per rank, pipelined on the one connection.
func (b *breakpoints) sync(ctx context.Context, ranks []*Rank) {
	b.eachNode("breakpoints", ranks, func(rs []*Rank) {
		var plans []*trapPlan
		for _, r := range rs {
			if p := b.plan(ctx, r); p != nil {
				plans = append(plans, p)
			}
		}
		// Plans alike on many ranks go as collectives; every other plan at once, the requests
		// sharing the node's connection.
		plans = b.syncCollective(ctx, plans)
		var wg sync.WaitGroup
		for _, p := range plans {
			wg.Go(func() {
				defer b.j.recoverPanic(fmt.Sprintf("breakpoints of rank %d", p.r.Num))
				p.origs = b.originals(ctx, p.r, p.trap, p.removes)
				b.rememberOriginals(ctx, p.r, p.trap, p.adds)
				b.send(ctx, p)
			})
		}
		wg.Wait()
	})
}

// plan works out which traps r needs and which it no longer needs (nil: nothing to do).
func (b *breakpoints) plan(ctx context.Context, r *Rank) *trapPlan {
	mods, err := r.sym.modules(ctx, false)
	if err != nil {
		return nil
	}
	p := &trapPlan{r: r, want: map[uint64][]*Breakpoint{}}
	p.trap, p.order = rankTrap(r)
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, bp := range b.allUser() {
		if !bp.Ranks.Contains(r.Num) || !bp.Resolved {
			continue
		}
		if bp.Kind == bpEntry && b.entryDone(r) {
			continue
		}
		for _, a := range bp.addrsFor(mods) {
			p.want[a] = append(p.want[a], bp)
		}
	}
	sites := b.sites[r]
	if sites == nil {
		sites = map[uint64]*site{}
		b.sites[r] = sites
	}
	for a := range p.want {
		if s := sites[a]; s != nil && (s.user || s.temp > 0 || s.stale) {
			s.user, s.stale = true, false
			continue
		}
		p.adds = append(p.adds, a)
	}
	for a, s := range sites {
		if (s.user || s.stale) && p.want[a] == nil {
			s.user, s.stale = false, false
			if s.temp == 0 {
				p.removes = append(p.removes, a)
				delete(sites, a)
			}
		}
	}
	slices.Sort(p.adds)
	b.planConds(p, mods, sites)
	if len(p.adds) == 0 && len(p.removes) == 0 && len(p.conds) == 0 {
		return nil
	}
	slices.Sort(p.removes)
	return p
}

// originals returns the instructions under the traps at addrs of r: an hpcdap agent's memory
// reads show the original bytes where a trap is planted; behind a BG/Q CNK they are those
// rememberOriginals read before planting. An address it cannot tell is left out.
func (b *breakpoints) originals(ctx context.Context, r *Rank, trap []byte, addrs []uint64) map[uint64][]byte {
	if len(addrs) == 0 {
		return nil
	}
	if r.behindCNK() {
		out := map[uint64][]byte{}
		b.origMu.Lock()
		defer b.origMu.Unlock()
		for _, a := range addrs {
			if o := b.cnkOrigs[r][a]; o != nil {
				out[a] = o
			} else {
				b.j.logf("rank %d: the instruction under the trap at %#x was not read before it was planted", r.Num, a)
			}
		}
		return out
	}
	return b.readUnder(ctx, r, trap, addrs)
}

// rememberOriginals reads, behind a BG/Q CNK, the instructions at addrs of r where a trap is
// about to go and none was read before (see cnkOrigs); against an hpcdap agent it does
// nothing.
func (b *breakpoints) rememberOriginals(ctx context.Context, r *Rank, trap []byte, addrs []uint64) {
	if len(addrs) == 0 || !r.behindCNK() {
		return
	}
	var unread []uint64
	b.origMu.Lock()
	for _, a := range addrs {
		if b.cnkOrigs[r][a] == nil {
			unread = append(unread, a)
		}
	}
	b.origMu.Unlock()
	got := b.readUnder(ctx, r, trap, unread)
	b.origMu.Lock()
	defer b.origMu.Unlock()
	if b.cnkOrigs == nil {
		b.cnkOrigs = map[*Rank]map[uint64][]byte{}
	}
	if b.cnkOrigs[r] == nil {
		b.cnkOrigs[r] = map[uint64][]byte{}
	}
	for a, o := range got {
		if !bytes.Equal(o, trap) {
			b.cnkOrigs[r][a] = o
		}
	}
}

// cnkPlaced records that the trap at addr of r is planted (or, with planted false, removed),
// behind a BG/Q CNK: reads then show the original there (shadowCNK).
func (b *breakpoints) cnkPlaced(r *Rank, addr uint64, planted bool) {
	if !r.behindCNK() {
		return
	}
	b.origMu.Lock()
	defer b.origMu.Unlock()
	if !planted {
		delete(b.cnkPlanted[r], addr)
		return
	}
	if b.cnkPlanted == nil {
		b.cnkPlanted = map[*Rank]map[uint64]bool{}
	}
	if b.cnkPlanted[r] == nil {
		b.cnkPlanted[r] = map[uint64]bool{}
	}
	b.cnkPlanted[r][addr] = true
}

// shadowCNK puts the original instructions over the traps planted in p, read at addr of r
// behind a BG/Q CNK, whose memory shows them: what a user reads is the program, as an hpcdap
// agent's reads show it. It takes no lock but origMu: memory is read with other locks held.
func (b *breakpoints) shadowCNK(r *Rank, addr uint64, p []byte) {
	b.origMu.Lock()
	defer b.origMu.Unlock()
	end := addr + uint64(len(p))
	for a := range b.cnkPlanted[r] {
		orig := b.cnkOrigs[r][a]
		for i, c := range orig {
			if x := a + uint64(i); x >= addr && x < end {
				p[x-addr] = c
			}
		}
	}
}

// readUnder reads the instruction (the trap's size) at each of addrs of r in one query. An
// address it cannot read is left out.
func (b *breakpoints) readUnder(ctx context.Context, r *Rank, trap []byte, addrs []uint64) map[uint64][]byte {
	if len(addrs) == 0 {
		return nil
	}
	cmds := make([]cdti.Command, len(addrs))
	for i, a := range addrs {
		cmds[i] = &cdti.GetMemory{Addr: a, Length: uint32(len(trap))}
	}
	res, err := r.node.client.QueryBatch(ctx, uint32(r.Num), cmds)
	out := map[uint64][]byte{}
	for i, a := range addrs {
		if i >= len(res) || res[i].Code != cdti.CmdSuccess {
			why := fmt.Sprint(err)
			if i < len(res) {
				why = res[i].Code.String()
			}
			b.j.logf("rank %d: read the instruction at %#x: %s", r.Num, a, why)
			continue
		}
		if ack, ok := res[i].Ack.(*cdti.GetMemoryAck); ok && len(ack.Data) == len(trap) {
			out[a] = ack.Data
		}
	}
	return out
}

// send plants and removes the traps of one rank's plan in one command list, and records where
// planting failed.
func (b *breakpoints) send(ctx context.Context, p *trapPlan) {
	cmds, unread := b.commands(p)
	var res []cdti.Result
	var err error
	if len(cmds) > 0 {
		res, err = p.r.node.client.UpdateBatch(ctx, uint32(p.r.Num), cmds)
	}
	b.record(p, cmds, unread, res, err)
}

// commands returns the command list of a plan, and the traps to remove whose original
// instruction is not known (they stay, stale).
func (b *breakpoints) commands(p *trapPlan) (cmds []cdti.Command, unread []uint64) {
	r := p.r
	for _, a := range p.adds {
		cmds = append(cmds, &cdti.SetBreakpoint{Addr: a, Instruction: cdti.InstructionValue(p.order, p.trap)})
	}
	for _, a := range p.removes {
		if orig := p.origs[a]; orig != nil {
			cmds = append(cmds, &cdti.ResetBreakpoint{Addr: a, Instruction: cdti.InstructionValue(p.order, orig)})
		} else {
			unread = append(unread, a)
		}
	}
	for _, c := range p.conds {
		// The agent counts on from the front end's count of the breakpoint's hits.
		b.j.mu.Lock()
		hits := uint64(r.hits[c.bp])
		b.j.mu.Unlock()
		if c.carryOn {
			hits = cdti.TrapHitsCarryOn
		}
		cmds = append(cmds, &cdti.SetTrapCondition{Address: c.addr, Bias: c.bias, Hits: hits, Site: c.site})
	}
	return cmds, unread
}

// record records what a plan's command list did (res, or the error of the whole list): where
// planting failed, which traps stay because their removal failed, and the hit counts the
// agent handed back.
func (b *breakpoints) record(p *trapPlan, cmds []cdti.Command, unread []uint64, res []cdti.Result, err error) {
	r := p.r
	var counts []hitCount // hit counts the agent hands back, recorded once b.mu is released
	defer func() { b.j.setHits(r, counts) }()
	b.mu.Lock()
	defer b.mu.Unlock()
	sites := b.sites[r]
	if sites == nil {
		sites = map[uint64]*site{}
		b.sites[r] = sites
	}
	for _, a := range unread {
		b.keepStale(sites, a)
	}
	for i, c := range cmds {
		ok := err == nil && i < len(res) && res[i].Code == cdti.CmdSuccess
		why := "not sent"
		if err != nil {
			why = err.Error()
		} else if i < len(res) {
			why = res[i].Code.String()
		}
		switch c := c.(type) {
		case *cdti.SetBreakpoint:
			if !ok {
				for _, bp := range p.want[c.Addr] {
					if bp.Failures == nil {
						bp.Failures = map[int]string{}
					}
					bp.Failures[r.Num] = fmt.Sprintf("plant at %#x: %s", c.Addr, why)
				}
				continue
			}
			if s := sites[c.Addr]; s != nil {
				s.user = true // a step planted it meanwhile: the agent keeps one trap
			} else {
				sites[c.Addr] = &site{user: true}
			}
			b.cnkPlaced(r, c.Addr, true)
		case *cdti.SetTrapCondition:
			code := cdti.CmdSuccess
			if i < len(res) {
				code = res[i].Code
			} else if err == nil {
				err = errors.New("not answered")
			}
			var ack *cdti.SetTrapConditionAck
			if i < len(res) {
				ack, _ = res[i].Ack.(*cdti.SetTrapConditionAck)
			}
			if hc, ok := b.condResult(r, sites, c, condBPOf(p.conds, c.Address), code, ack, err); ok {
				counts = append(counts, hc)
			}
		case *cdti.ResetBreakpoint:
			if !ok {
				b.j.logf("rank %d: remove the trap at %#x: %s", r.Num, c.Addr, why)
				b.keepStale(sites, c.Addr)
			} else {
				b.cnkPlaced(r, c.Addr, false)
			}
		}
	}
}

// keepStale records a trap at a whose removal failed, so that the next sync tries again
// (unless it is wanted again meanwhile). b.mu is held.
func (b *breakpoints) keepStale(sites map[uint64]*site, a uint64) {
	if sites[a] == nil {
		sites[a] = &site{stale: true}
	}
}

// plantTemp adds a step's reference to a trap at addr in r, planting it if needed.
func (b *breakpoints) plantTemp(ctx context.Context, r *Rank, addr uint64) error {
	b.mu.Lock()
	sites := b.sites[r]
	if sites == nil {
		sites = map[uint64]*site{}
		b.sites[r] = sites
	}
	if s := sites[addr]; s != nil {
		s.temp++
		b.mu.Unlock()
		b.clearAgentCond(ctx, r, addr) // the step needs every hit reported
		return nil
	}
	b.mu.Unlock()
	trap, order := rankTrap(r)
	b.rememberOriginals(ctx, r, trap, []uint64{addr})
	res, err := r.node.client.Update(ctx, uint32(r.Num), &cdti.SetBreakpoint{Addr: addr, Instruction: cdti.InstructionValue(order, trap)})
	if err != nil {
		return err
	}
	if res[0].Code != cdti.CmdSuccess {
		return fmt.Errorf("plant a breakpoint at %#x: %v", addr, res[0].Code)
	}
	b.mu.Lock()
	if s := sites[addr]; s != nil {
		s.temp++ // planted meanwhile by someone else: the agent keeps one trap
	} else {
		sites[addr] = &site{temp: 1}
	}
	b.mu.Unlock()
	b.cnkPlaced(r, addr, true)
	return nil
}

// removeTemp drops a step's reference to the traps at addrs, removing those no longer used:
// one query for their original instructions and one command list.
func (b *breakpoints) removeTemp(ctx context.Context, r *Rank, addrs ...uint64) {
	var gone []uint64
	resync := false
	b.mu.Lock()
	for _, a := range addrs {
		s := b.sites[r][a]
		if s == nil {
			continue
		}
		s.temp--
		if s.temp == 0 && s.user {
			resync = true // the agent may decide this trap's hits again
		}
		if s.temp > 0 || s.user {
			continue
		}
		s.stale = false
		delete(b.sites[r], a)
		gone = append(gone, a)
	}
	b.mu.Unlock()
	if resync {
		defer b.sync(ctx, []*Rank{r})
	}
	if len(gone) == 0 {
		return
	}
	p := &trapPlan{r: r, removes: gone}
	p.trap, p.order = rankTrap(r)
	p.origs = b.originals(ctx, r, p.trap, gone)
	b.send(ctx, p)
}

// isUserSite reports whether a user breakpoint is planted at addr in r.
func (b *breakpoints) isUserSite(r *Rank, addr uint64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.sites[r][addr]
	return s != nil && s.user
}

// condBP returns the breakpoint a plan's condition command at addr decides.
func condBPOf(conds []condCmd, addr uint64) int {
	for _, c := range conds {
		if c.addr == addr {
			return c.bp
		}
	}
	return 0
}
