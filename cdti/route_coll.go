package cdti

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"
	"sync"
	"time"
)

// QuietStopper is implemented by a Router's Local handler to take part in a Collective with
// CollectiveQuietStop. QuietStop is called before the commands are applied to rank for c's
// tool: the stop a StopProcess among them starts is then kept from the tool (no Notify). The
// function it returns is called after them, always: it waits, until ctx ends, for that stop
// to be complete and reports whether it is (the stop is then the tool's notification in
// flight, never sent); otherwise nothing stays quiet, and a stop that completes later is
// notified as usual.
type QuietStopper interface {
	QuietStop(c *Conn, rank uint32) (wait func(ctx context.Context) bool)
}

// partsWait receives the parts of one child's CollectiveAck.
type partsWait struct {
	ch   chan []byte // closed if the link fails
	quit chan struct{}
}

// moreFollows reports whether an encoded CollectiveAck or GatherStacksAck says that more parts
// of the answer follow.
func moreFollows(h Header, b []byte) bool {
	switch {
	case h.ReturnCode != Success || len(b) < collectiveBase:
		return false
	case h.Type == MsgCollectiveAck:
		return be.Uint32(b[40:])&1 != 0
	case h.Type == MsgGatherStacksAck:
		return be.Uint32(b[52:])&1 != 0
	}
	return false
}

// collectiveLocalWorkers bounds the ranks of one agent a collective handles at once.
const collectiveLocalWorkers = 64

// collective answers a Collective: its own ranks of the set through Local, each child's share
// of the set forwarded once, and every answer reduced into one (or, if too large, several)
// CollectiveAck.
func (r *Router) collective(c *Conn, h Header, frame []byte) error {
	m, err := DecodeMessage(frame)
	if err != nil {
		return err
	}
	req := m.(*Collective)
	red := NewReduction(req.Kind)
	var mu sync.Mutex
	want := make(map[uint32]bool, req.Ranks.Count())
	for _, x := range req.Ranks.Ranks() {
		want[x] = true
	}
	// share returns the ranks of the set among ranks, taking them out of want.
	share := func(ranks []uint32) []uint32 {
		var out []uint32
		mu.Lock()
		defer mu.Unlock()
		for _, x := range ranks {
			if want[x] {
				out = append(out, x)
				delete(want, x)
			}
		}
		return out
	}
	merge := func(f func()) {
		mu.Lock()
		f()
		mu.Unlock()
	}
	var wg sync.WaitGroup
	var visit func(rt *Route, sub []uint32)
	visit = func(rt *Route, sub []uint32) {
		defer wg.Done()
		set := RanksOf(sub...)
		if !r.isCut(c, rt.Addr) {
			a, err := r.collectFrom(c, rt, req, set)
			if err == nil {
				merge(func() { red.Merge(a) })
				return
			}
			if _, slow := err.(errSlow); slow {
				merge(func() { red.Add(AckGroup{Ranks: set, Code: RequestFailed, ErrorCode: ErrorCodeTimedOut}) })
				return
			}
			if errors.Is(err, errLinkBroke) {
				// The answer was lost with the link, the commands perhaps applied: the ranks
				// the healed tree still reaches did not answer in time, the others are lost.
				var lost, late []uint32
				for _, x := range sub {
					if r.rankCut(c, x) {
						lost = append(lost, x)
					} else {
						late = append(late, x)
					}
				}
				merge(func() {
					if len(lost) > 0 {
						red.Unreachable(RanksOf(lost...))
					}
					if len(late) > 0 {
						red.Add(AckGroup{Ranks: RanksOf(late...), Code: RequestFailed, ErrorCode: ErrorCodeTimedOut})
					}
				})
				return
			}
		}
		// rt is lost: its own ranks are unreachable, its children (adopted, or reached
		// directly) are asked.
		in := make(map[uint32]bool, len(sub))
		for _, x := range sub {
			in[x] = true
		}
		var own []uint32
		for _, x := range rt.Ranks {
			if in[x] {
				own = append(own, x)
			}
		}
		if len(own) > 0 {
			merge(func() { red.Unreachable(RanksOf(own...)) })
		}
		for i := range rt.Children {
			var kid []uint32
			for _, x := range subtreeRanks(&rt.Children[i]) {
				if in[x] {
					kid = append(kid, x)
				}
			}
			if len(kid) > 0 {
				wg.Add(1)
				go visit(&rt.Children[i], kid)
			}
		}
	}
	for _, rt := range r.Children() {
		if sub := share(subtreeRanks(&rt)); len(sub) > 0 {
			wg.Add(1)
			go visit(&rt, sub)
		}
	}
	// What no child serves is this agent's (or no agent's: Local refuses it as a CNK would).
	var local []uint32
	for _, x := range req.Ranks.Ranks() {
		if want[x] {
			local = append(local, x)
		}
	}
	r.applyLocal(c, h, req, local, func(g AckGroup) { merge(func() { red.Add(g) }) })
	wg.Wait()
	for _, part := range red.Ack(h.Reply(Success)).Split() {
		if err := c.Send(part); err != nil {
			return err
		}
	}
	return nil
}

// applyLocal applies a Collective's commands to each of ranks through Local, as the Query or
// Update of that rank would be, and hands each answer to add. What Local defers until after
// a rank's ack (Conn.AfterReply: CNK resumes a process, or sends its next Notify, after its
// UpdateAck) runs as soon as that rank's answer is taken, as if its ack had been written.
func (r *Router) applyLocal(c *Conn, h Header, req *Collective, ranks []uint32, add func(AckGroup)) {
	if len(ranks) == 0 {
		return
	}
	if !localServes(r.Local, req.Kind) {
		// No agent serves them (Relay refuses them the same way one by one).
		add(AckGroup{Ranks: RanksOf(ranks...), Code: ToolRankNotFound})
		return
	}
	rh := h
	rh.Type = req.Kind
	one, err := EncodeLax(req.request(rh))
	if err != nil { // cannot happen: it was decoded from a valid Collective
		add(AckGroup{Ranks: RanksOf(ranks...), Code: RequestFailed})
		return
	}
	var qs QuietStopper
	if req.Flags&CollectiveQuietStop != 0 && req.Kind == MsgUpdate {
		qs, _ = r.Local.(QuietStopper)
	}
	// One rank's Update at a time holds the Conn's AfterReply list: what the agent does after
	// an Update's ack (a CNK's resumption, its next Notify) follows that ack. Queries defer
	// nothing: the ranks' Queries run side by side, each rank's on its own.
	serial := req.Kind != MsgQuery
	workers := min(len(ranks), collectiveLocalWorkers)
	if !serial {
		workers = min(workers, runtime.NumCPU()) // a Query's work is the agent's and its tracers'
	}
	var dispatchMu sync.Mutex
	work := make(chan uint32)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			b := make([]byte, len(one))
			for rank := range work {
				copy(b, one)
				be.PutUint32(b[4:], rank)
				var wait func(context.Context) bool
				if qs != nil {
					wait = qs.QuietStop(c, rank)
				}
				if !serial {
					add(*r.applyOne(c, req, rank, b))
					continue
				}
				dispatchMu.Lock()
				c.amu.Lock()
				c.inRequest = true
				c.amu.Unlock()
				g := r.applyOne(c, req, rank, b)
				c.amu.Lock()
				c.inRequest = false
				after := c.after
				c.after = nil
				c.amu.Unlock()
				dispatchMu.Unlock()
				for _, f := range after {
					f()
				}
				if wait != nil {
					quietStopped(c, g, wait, r.timeout())
				}
				add(*g)
			}
		})
	}
	for _, x := range ranks {
		work <- x
	}
	close(work)
	wg.Wait()
}

// quietStopped completes a quiet stop: a StopProcess answered Stopping waits for the stop and
// becomes Reported if it completed.
func quietStopped(c *Conn, g *AckGroup, wait func(context.Context) bool, timeout time.Duration) {
	var stop *StopProcessAck
	for _, res := range g.Results {
		if a, ok := res.Ack.(*StopProcessAck); ok && res.Code == CmdSuccess && a.Stopping {
			stop = a
		}
	}
	ctx, cancel := context.WithTimeout(c.Context(), SubtreeWait(timeout, 1)/2)
	defer cancel()
	if stop == nil {
		cancel() // nothing to wait for: only undo the arrangement
	}
	if wait(ctx) && stop != nil {
		stop.Reported = true
	}
}

// applyOne answers one rank's Query or Update (frame) through Local, as an AckGroup of that
// rank, the thread ids of acks to commands that named thread 0 set to 0.
func (r *Router) applyOne(c *Conn, req *Collective, rank uint32, frame []byte) (g *AckGroup) {
	g = &AckGroup{Ranks: RankRanges{{rank, rank, 1}}}
	h, _ := ParseHeader(frame)
	defer func() {
		if p := recover(); p != nil {
			c.srv.logf("cdti: connection %d: collective: rank %d: panic: %v\n%s", c.id, rank, p, debug.Stack())
			g.Code, g.Results = RequestFailed, nil
		}
	}()
	reply, err := c.dispatch(r.Local, h, frame)
	if err != nil || reply == nil {
		g.Code = RequestFailed
		return g
	}
	rh := reply.Hdr()
	g.Code, g.ErrorCode = rh.ReturnCode, rh.ErrorCode
	switch a := reply.(type) {
	case *QueryAck:
		g.Results = a.Results
	case *UpdateAck:
		g.Results = a.Results
	}
	if g.Code != Success {
		g.Results = nil
		return g
	}
	// Normalize the thread ids on the encoded reply, then read it back.
	b := encodeGroupReply(ackFor(req.Kind), g)
	for i, cmd := range req.Commands {
		if i >= len(g.Results) || cmd.Thread() != 0 {
			continue
		}
		if off := be.Uint32(b[44+DescriptorSize*i+4:]); off != 0 && int(off)+4 <= len(b) {
			clear(b[off : off+4])
		}
	}
	hb, _ := ParseHeader(b)
	if m, err := decReply(hb, b); err == nil {
		switch a := m.(type) {
		case *QueryAck:
			g.Results = a.Results
		case *UpdateAck:
			g.Results = a.Results
		}
	}
	return g
}

// collectFrom forwards a Collective, its set cut to set, to the child rt and returns the
// subtree's reduced answer.
func (r *Router) collectFrom(c *Conn, rt *Route, req *Collective, set RankRanges) (*CollectiveAck, error) {
	sub := *req
	sub.Ranks = set
	frame, err := EncodeLax(&sub)
	if err != nil {
		return nil, err
	}
	frames, err := r.askParts(c, rt.Addr, SubtreeWait(r.timeout(), rt.Height()), req.SequenceID, frame)
	if err != nil {
		return nil, err
	}
	var parts []*CollectiveAck
	for _, b := range frames {
		m, err := DecodeMessage(b)
		if err != nil {
			return nil, err
		}
		a, ok := m.(*CollectiveAck)
		if !ok || a.ReturnCode != Success {
			return nil, fmt.Errorf("agent %s: collective: %v", rt.Addr, m.Hdr().ReturnCode)
		}
		parts = append(parts, a)
	}
	return joinCollective(parts), nil
}
