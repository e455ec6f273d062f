package cdti

import (
	"errors"
	"fmt"
	"sync"
	"time"
)

// The collectives of a Router that gather from every child: GatherStacks, and the wait for
// each child's answer, which may come in several parts.

// gather answers GatherStacks: Local's stacks merged with every child's tree.
func (r *Router) gather(c *Conn, h Header, frame []byte) error {
	m, err := DecodeMessage(frame)
	if err != nil {
		return err
	}
	req := m.(*GatherStacks)
	ack := &GatherStacksAck{Header: h.Reply(Success)}
	var mu sync.Mutex
	var wg sync.WaitGroup
	merge := func(t *StackTree) {
		mu.Lock()
		ack.Tree.Merge(t)
		mu.Unlock()
	}
	var visit func(rt *Route)
	visit = func(rt *Route) {
		defer wg.Done()
		if !r.isCut(c, rt.Addr) {
			t, err := r.gatherFrom(c, rt.Addr, rt.Height(), h.SequenceID, frame)
			if err == nil {
				merge(t)
				return
			}
			// Too slow this time (the subtree stays reachable), or the link broke and the
			// agent came back: the whole subtree did not answer.
			if _, slow := err.(errSlow); slow || (errors.Is(err, errLinkBroke) && !r.isCut(c, rt.Addr)) {
				merge(&StackTree{Unreachable: RanksOf(subtreeRanks(rt)...)})
				return
			}
		}
		// rt is lost: its own ranks are unreachable, its children (adopted, or reached
		// directly) are asked.
		merge(&StackTree{Unreachable: RanksOf(rt.Ranks...)})
		for i := range rt.Children {
			wg.Add(1)
			go visit(&rt.Children[i])
		}
	}
	children := r.Children()
	for i := range children {
		wg.Add(1)
		go visit(&children[i])
	}
	if x, ok := r.Local.(StackGatherer); ok {
		if t := x.GatherStacks(c, req); t != nil {
			merge(t)
		}
	}
	wg.Wait()
	parts, ok := ack.split()
	if !ok { // one rank's stack alone is over the limit
		rh := h.Reply(RequestFailed)
		rh.ErrorCode = uint32(ack.size())
		return c.Send(&GatherStacksAck{Header: rh})
	}
	for _, p := range parts {
		if err := c.Send(p); err != nil {
			return err
		}
	}
	return nil
}

// errSlow is gatherFrom's error for a child that did not answer in time but is still linked.
type errSlow struct{ error }

// SubtreeWait is how long one waits for an answer gathered from a subtree of the tree
// overlay height agents deep (a leaf: 1), out of timeout: the fraction height/(height+1). It
// shrinks on the way down, so an agent's wait ends before its parent's and the agent answers
// in time with what its own slow children did not send (the Router's collectives, and the
// agents' management call "tree").
func SubtreeWait(timeout time.Duration, height int) time.Duration {
	return timeout * time.Duration(height) / time.Duration(height+1)
}

// Height is the number of agents on the longest way down from rt (rt alone: 1).
func (rt *Route) Height() int {
	h := 0
	for i := range rt.Children {
		h = max(h, rt.Children[i].Height())
	}
	return h + 1
}

// gatherFrom asks one child, whose subtree is height agents deep, for its subtree's tree.
func (r *Router) gatherFrom(c *Conn, addr string, height int, seq uint32, frame []byte) (*StackTree, error) {
	parts, err := r.askParts(c, addr, SubtreeWait(r.timeout(), height), seq, frame)
	if err != nil {
		return nil, err
	}
	t := &StackTree{}
	for _, b := range parts {
		m, err := DecodeMessage(b)
		if err != nil {
			return nil, err
		}
		a, ok := m.(*GatherStacksAck)
		if !ok || a.ReturnCode != Success {
			return nil, fmt.Errorf("agent %s: gather stacks: %v", addr, m.Hdr().ReturnCode)
		}
		t.Merge(&a.Tree)
	}
	return t, nil
}

// askParts writes a collective request (frame, of sequence id seq) to the child at addr and
// returns the frames of its answer, the last one without "more", waiting at most wait. A
// child that does not answer in time is slow (errSlow), not lost: the link (and with it the
// tool's attachments in that subtree) stays, only this collective stops waiting for it, and
// the rest of its answer is dropped.
func (r *Router) askParts(c *Conn, addr string, wait time.Duration, seq uint32, frame []byte) ([][]byte, error) {
	l, err := r.linkHealed(c, addr, false)
	if err != nil {
		return nil, err
	}
	w := &partsWait{ch: make(chan []byte, 1), quit: make(chan struct{})}
	l.mu.Lock()
	if l.dead {
		l.mu.Unlock()
		<-l.healed
		return nil, errLinkBroke
	}
	l.parts[seq] = w
	l.mu.Unlock()
	giveUp := func() {
		close(w.quit)
		l.mu.Lock()
		if l.parts != nil && l.parts[seq] == w {
			delete(l.parts, seq)
		}
		l.mu.Unlock()
	}
	if err := l.write(frame); err != nil {
		giveUp()
		<-l.healed
		return nil, errLinkBroke
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	var parts [][]byte
	for {
		select {
		case b, ok := <-w.ch:
			if !ok { // the link broke: the tree is healed without it
				return nil, errLinkBroke
			}
			parts = append(parts, b)
			h, _ := ParseHeader(b)
			if !moreFollows(h, b) {
				return parts, nil
			}
			if len(parts) >= maxCollectiveParts {
				giveUp()
				return nil, fmt.Errorf("agent %s: %v: more than %d parts", addr, h.Type, maxCollectiveParts)
			}
		case <-timer.C:
			giveUp()
			return nil, errSlow{fmt.Errorf("agent %s: no answer in %v", addr, wait)}
		case <-c.Context().Done():
			giveUp()
			return nil, ErrPeerClosed
		}
	}
}
