package debugger

import (
	"context"
	"fmt"
	"strings"

	"github.com/hpcdap/hpcdap/cdti"
)

// syncCollective sends the trap plans that are alike on many ranks reached through one
// connection as collectives: for each set of ranks with the same traps to add and remove, one
// collective GetMemory list reads the originals under the traps that go, and each distinct
// SetBreakpoint/ResetBreakpoint list (the originals may differ) is sent once to its ranks. It
// returns the plans left to send rank by rank: those with conditions the agent decides (their
// hit counts are the rank's own), behind a CNK, alone of their kind, or whose collective could
// not be sent.
func (b *breakpoints) syncCollective(ctx context.Context, plans []*trapPlan) (rest []*trapPlan) {
	if len(plans) < 2 {
		return plans
	}
	byRank := map[*Rank]*trapPlan{}
	var ranks []*Rank
	for _, p := range plans {
		if len(p.conds) > 0 || len(p.adds)+len(p.removes) > cdti.MaxCommands {
			rest = append(rest, p)
			continue
		}
		byRank[p.r] = p
		ranks = append(ranks, p.r)
	}
	groups, single := b.j.collectiveGroups(ranks)
	for _, r := range single {
		rest = append(rest, byRank[r])
	}
	for _, g := range groups {
		alike := map[string][]*trapPlan{}
		var keys []string
		for _, r := range g {
			p := byRank[r]
			k := fmt.Sprintf("%x %x %x %v", p.trap, p.adds, p.removes, p.order)
			if alike[k] == nil {
				keys = append(keys, k)
			}
			alike[k] = append(alike[k], p)
		}
		for _, k := range keys {
			if ps := alike[k]; len(ps) > 1 {
				rest = append(rest, b.sendAlike(ctx, ps)...)
			} else {
				rest = append(rest, ps...)
			}
		}
	}
	return rest
}

// sendAlike sends plans with the same traps to add and remove, on ranks sharing a connection,
// as collectives, and returns those it could not send.
func (b *breakpoints) sendAlike(ctx context.Context, ps []*trapPlan) (rest []*trapPlan) {
	ranks := make([]*Rank, len(ps))
	for i, p := range ps {
		ranks[i] = p.r
	}
	p0 := ps[0]
	if len(p0.removes) > 0 {
		// An hpcdap agent's reads show the original instruction under a trap.
		cmds := make([]cdti.Command, len(p0.removes))
		for i, a := range p0.removes {
			cmds[i] = &cdti.GetMemory{Addr: a, Length: uint32(len(p0.trap))}
		}
		out, err := b.j.collective(ctx, ranks, 0, cmds...)
		if err != nil {
			return ps
		}
		for _, p := range ps {
			a := out[p.r]
			p.origs = map[uint64][]byte{}
			for i, addr := range p.removes {
				if a.err != nil || i >= len(a.res) || a.res[i].Code != cdti.CmdSuccess {
					b.j.logf("rank %d: read the instruction at %#x: %v", p.r.Num, addr, a.err)
					continue
				}
				if m, ok := a.res[i].Ack.(*cdti.GetMemoryAck); ok && len(m.Data) == len(p.trap) {
					p.origs[addr] = m.Data
				}
			}
		}
	}
	type list struct {
		cmds   []cdti.Command
		unread map[*trapPlan][]uint64
		plans  []*trapPlan
	}
	lists := map[string]*list{}
	var keys []string
	for _, p := range ps {
		cmds, unread := b.commands(p)
		var k strings.Builder
		for _, c := range cmds {
			fmt.Fprintf(&k, "%T%+v;", c, c)
		}
		l := lists[k.String()]
		if l == nil {
			l = &list{cmds: cmds, unread: map[*trapPlan][]uint64{}}
			lists[k.String()] = l
			keys = append(keys, k.String())
		}
		l.unread[p] = unread
		l.plans = append(l.plans, p)
	}
	for _, k := range keys {
		l := lists[k]
		if len(l.cmds) == 0 {
			for _, p := range l.plans {
				b.record(p, nil, l.unread[p], nil, nil)
			}
			continue
		}
		if len(l.plans) == 1 {
			p := l.plans[0]
			res, err := p.r.node.client.UpdateBatch(ctx, uint32(p.r.Num), l.cmds)
			b.record(p, l.cmds, l.unread[p], res, err)
			continue
		}
		lr := make([]*Rank, len(l.plans))
		for i, p := range l.plans {
			lr[i] = p.r
		}
		out, err := b.j.collective(ctx, lr, 0, l.cmds...)
		if err != nil {
			rest = append(rest, l.plans...)
			continue
		}
		for _, p := range l.plans {
			a := out[p.r]
			b.record(p, l.cmds, l.unread[p], a.res, a.err)
		}
	}
	return rest
}
