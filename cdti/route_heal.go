package cdti

import (
	"slices"
	"sync"
)

// isCut reports whether c lost the ranks of the agent at addr: the agent could not be
// reached when the tree healed, or it had dropped the tool's session.
func (r *Router) isCut(c *Conn, addr string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cut[c][addr]
}

// rankCut reports whether c lost rank (below this agent).
func (r *Router) rankCut(c *Conn, rank uint32) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	p, ok := r.path[rank]
	return ok && r.cut[c][p[len(p)-1].Addr]
}

// markCut records that c lost the ranks of the agent at addr.
func (r *Router) markCut(c *Conn, addr string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cut == nil {
		r.cut = make(map[*Conn]map[string]bool)
	}
	if r.cut[c] == nil {
		r.cut[c] = make(map[string]bool)
	}
	r.cut[c][addr] = true
}

// route returns the agent at addr among those below, or nil.
func (r *Router) route(addr string) *Route {
	r.mu.Lock()
	defer r.mu.Unlock()
	var find func(rts []Route) *Route
	find = func(rts []Route) *Route {
		for i := range rts {
			if rts[i].Addr == addr {
				return &rts[i]
			}
			if rt := find(rts[i].Children); rt != nil {
				return rt
			}
		}
		return nil
	}
	return find(r.children)
}

// heal makes the tree whole again for c after its link to rt broke: rt is dialed again (and
// resumes the session if it is still there), or else its children are adopted, each the same
// way. It returns the ranks c lost: those of the agents that could not be reached, and the
// whole subtree of an agent that had dropped the session.
func (r *Router) heal(c *Conn, rt *Route) (lost []uint32) {
	if r.isCut(c, rt.Addr) {
		lost = nil // already lost: its children were adopted then
	} else {
		_, err := r.linkHealed(c, rt.Addr, true)
		if err == nil {
			return nil
		}
		if _, ok := err.(errDropped); ok {
			var cutAll func(rt *Route)
			cutAll = func(rt *Route) {
				r.markCut(c, rt.Addr)
				for i := range rt.Children {
					cutAll(&rt.Children[i])
				}
			}
			cutAll(rt)
			return subtreeRanks(rt)
		}
		r.markCut(c, rt.Addr)
		lost = slices.Clone(rt.Ranks)
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range rt.Children { // at once: a child that does not answer delays no other
		wg.Go(func() {
			l := r.heal(c, &rt.Children[i])
			mu.Lock()
			lost = append(lost, l...)
			mu.Unlock()
		})
	}
	wg.Wait()
	return lost
}

// notifyLost tells c's tool that it lost ranks: one Notify of kind NotifyTypeUnreachable per
// rank, each carrying their number, the losses of different links not interleaved.
func (r *Router) notifyLost(c *Conn, ranks []uint32) {
	r.notifyMu.Lock()
	defer r.notifyMu.Unlock()
	for _, rank := range ranks {
		n := &Notify{Header: Header{Rank: rank}, Kind: NotifyTypeUnreachable, Lost: uint32(len(ranks))}
		if c.Notify(n) != nil {
			return
		}
	}
}

// subtreeRanks lists the ranks of rt and every agent below it.
func subtreeRanks(rt *Route) []uint32 {
	out := slices.Clone(rt.Ranks)
	for i := range rt.Children {
		out = append(out, subtreeRanks(&rt.Children[i])...)
	}
	return out
}

// unreachableReply answers request h for a rank whose agent cannot be reached.
func unreachableReply(h Header) Message { return ReplyTo(h, RequestFailed, ErrorCodeUnreachable) }

// linkBroke is the end of readLink when c's link l to the agent at addr failed: it heals the
// tree for c, tells c's tool what it lost, and answers what was outstanding on l.
func (r *Router) linkBroke(c *Conn, addr string, l *link) {
	upLost := c.transportLost()
	l.mu.Lock()
	l.dead, l.upLost = true, upLost
	pending, parts := l.pending, l.parts
	l.pending, l.parts = nil, nil
	l.mu.Unlock()
	l.nc.Close()
	if c.Context().Err() != nil || r.ending.Load() {
		// The tool left (the link closed with it), or, at the tool's own Router, is
		// leaving, or this agent is ending (StopHealing): the agents' end that follows the
		// session's is no loss to heal.
		for _, w := range parts {
			close(w.ch)
		}
		return
	}
	if upLost {
		// This agent lost its own way up: the agent above answered what was outstanding. It
		// heals the tree only once an agent above resumes c: if none does, that ancestor
		// adopted the children itself (healing here would take them back).
		for _, w := range parts {
			close(w.ch)
		}
		if c.awaitTransport() {
			r.healFrom(c, addr)
		}
		return
	}
	r.healFrom(c, addr)
	for _, h := range pending {
		if r.rankCut(c, h.Rank) {
			c.Send(unreachableReply(h))
		} else {
			c.Send(ReplyTo(h, RequestFailed, ErrorCodeTimedOut)) // its answer was lost on the way
		}
	}
	for _, w := range parts {
		close(w.ch)
	}
}

// healFrom heals the tree for c after its link to the agent at addr broke (heal), logs it, and
// tells c's tool which ranks it lost.
func (r *Router) healFrom(c *Conn, addr string) {
	rt := r.route(addr)
	if rt == nil {
		return
	}
	lost := r.heal(c, rt)
	r.logf("cdti: router: the link to the agent at %s broke: tree healed, %d rank(s) lost", addr, len(lost))
	if len(lost) > 0 {
		r.notifyLost(c, lost)
	}
}

// held is a request that waits for a heal of the tree before it goes its way.
type held struct {
	h     Header
	frame []byte
	p     []*Route
}

// wait sends request h (encoded as frame, for a rank at the end of path p) on its way once
// the link it met, broken or being dialed, is healed, off c's only reader. The requests of
// one rank that wait so go in the order they came, and a later request for that rank waits
// behind them (queueBehind), so that none overtakes another. A request that meets a broken
// link again once healed (healed) goes its way alone.
func (r *Router) wait(c *Conn, h Header, frame []byte, p []*Route, healed bool) {
	if healed {
		go r.relayAlong(c, h, frame, p, true)
		return
	}
	r.mu.Lock()
	if r.queueBehind(c, h, frame, p) {
		r.mu.Unlock()
		return
	}
	if r.waiting == nil {
		r.waiting = make(map[*Conn]map[uint32][]held)
	}
	if r.waiting[c] == nil {
		r.waiting[c] = make(map[uint32][]held)
	}
	r.waiting[c][h.Rank] = []held{{h, frame, p}}
	r.mu.Unlock()
	go func() {
		for {
			r.mu.Lock()
			q := r.waiting[c][h.Rank]
			if len(q) == 0 {
				delete(r.waiting[c], h.Rank)
				r.mu.Unlock()
				return
			}
			next := q[0]
			r.waiting[c][h.Rank] = q[1:]
			r.mu.Unlock()
			r.relayAlong(c, next.h, next.frame, next.p, true)
		}
	}()
}

// queueBehind puts request h at the end of the requests of its rank that wait for a heal on
// c, if there are any, and reports whether it did. r.mu must be held.
func (r *Router) queueBehind(c *Conn, h Header, frame []byte, p []*Route) bool {
	q, ok := r.waiting[c][h.Rank]
	if !ok {
		return false
	}
	r.waiting[c][h.Rank] = append(q, held{h, frame, p})
	return true
}
