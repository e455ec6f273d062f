package cdti

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"time"
)

// Route is one agent below a Router in the tree overlay: its address, the ranks it serves
// itself, and the agents below it.
type Route struct {
	Addr     string   `json:"addr"`
	Ranks    []uint32 `json:"ranks"`
	Children []Route  `json:"children,omitempty"`
}

// ErrorCodeUnreachable is the errorCode (EHOSTUNREACH) of the ack a Router sends for a
// request whose rank's agent cannot be reached; the returnCode is RequestFailed.
const ErrorCodeUnreachable = 113

// Router is a Server handler for an agent of the tree overlay. A message addressed (by its
// header's rank) to a rank this agent serves goes to Local, as if Local were the Server's
// handler; a message to a rank served below goes, unaltered, to the child on the way to it,
// over a connection of its own per upstream connection (so that a child sees each tool as
// the agent at the root sees it, and a tool that leaves releases its ranks everywhere), and
// every message that child sends back (acks and Notify) goes up unaltered.
//
// Faults. When a child's connection breaks, the agents below it lose that tool (they see its
// connection through the lost agent close, and release its ranks as after any tool's exit:
// nothing stays stopped or trapped); so for the upstream connection it served, every rank of
// that subtree is unreachable from then on: requests for them, and those outstanding on the
// link, are answered with their ack type, RequestFailed and ErrorCodeUnreachable, and
// GatherStacks names them in Unreachable. The tool hears of the loss at once: a Notify of kind
// NotifyTypeUnreachable for each rank of the subtree (Lost: their number), sent up before
// those answers. A child that cannot be dialed (lost before the
// connection used it, e.g. for a tool that attaches again) is bypassed: the message goes to
// the next agent on the way, so the lost agent's children are reached from their nearest live
// ancestor, and only the lost agent's own ranks are unreachable.
//
// Collective (see route_coll.go) goes down the same way, its rank set cut to each child's
// subtree, and comes back reduced into groups of identical answers.
//
// GatherStacks is a collective too: Router sends it once to each child, asks Local (a
// StackGatherer) for its own ranks, and answers one merged tree, naming the ranks of agents it
// could not reach in Unreachable. A child that does not answer in time (collectiveWait, which
// shrinks on the way down so that each agent answers before its parent stops waiting) has its
// subtree's ranks named in Unreachable for that gather only: its link is kept, so a slow agent
// cuts nothing off.
type Router struct {
	Local   any
	Token   []byte        // the session token, proved to each child as a tool proves it
	Timeout time.Duration // bounds a dial and a collective's wait; 0 means 30 s

	mu       sync.Mutex
	children []Route             // the agents directly below
	path     map[uint32][]*Route // rank → agents from the child down to the rank's agent
	links    map[*Conn]map[string]*link
	cut      map[*Conn]map[string]bool // per upstream connection: agents whose link to it broke
	lost     map[string]bool           // agents that could not be reached
	notifyMu sync.Mutex                // keeps one loss's notifications together
}

// StackGatherer is implemented by a Router's Local handler to take part in GatherStacks.
type StackGatherer interface {
	GatherStacks(c *Conn, m *GatherStacks) *StackTree
}

type link struct {
	nc      net.Conn
	wmu     sync.Mutex
	mu      sync.Mutex
	pending map[uint32]Header     // forwarded requests awaiting their ack
	parts   map[uint32]*partsWait // collectives awaiting their (perhaps split) ack
	dead    bool
}

func (r *Router) timeout() time.Duration {
	if r.Timeout > 0 {
		return r.Timeout
	}
	return 30 * time.Second
}

// SetChildren sets the agents below this one (each with its own subtree), replacing those
// set before. Connections to agents that stay are kept.
func (r *Router) SetChildren(children []Route) {
	path := make(map[uint32][]*Route)
	var walk func(rt *Route, above []*Route)
	walk = func(rt *Route, above []*Route) {
		p := append(append([]*Route(nil), above...), rt)
		for _, rank := range rt.Ranks {
			path[rank] = p
		}
		for i := range rt.Children {
			walk(&rt.Children[i], p)
		}
	}
	children = slices.Clone(children)
	for i := range children {
		walk(&children[i], nil)
	}
	r.mu.Lock()
	r.children, r.path = children, path
	r.lost = nil
	r.mu.Unlock()
}

// Children returns the agents below this one, as SetChildren set them.
func (r *Router) Children() []Route {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.children
}

// Opened passes the event on to Local.
func (r *Router) Opened(c *Conn) {
	if x, ok := r.Local.(OpenHandler); ok {
		x.Opened(c)
	}
}

// Closed closes the connections to the children made for c, then tells Local.
func (r *Router) Closed(c *Conn, err error) {
	r.mu.Lock()
	ls := r.links[c]
	delete(r.links, c)
	delete(r.cut, c)
	r.mu.Unlock()
	for _, l := range ls {
		l.nc.Close()
	}
	if x, ok := r.Local.(CloseHandler); ok {
		x.Closed(c, err)
	}
}

// Relay routes one frame (RelayHandler).
func (r *Router) Relay(c *Conn, frame []byte) error {
	h, _ := ParseHeader(frame)
	switch h.Type {
	case MsgGatherStacks:
		return r.gather(c, h, frame)
	case MsgCollective:
		return r.collective(c, h, frame)
	}
	r.mu.Lock()
	p, below := r.path[h.Rank]
	r.mu.Unlock()
	if !below || ackFor(h.Type) == 0 {
		return c.HandleWith(r.Local, frame)
	}
	if r.isCut(c, p) {
		return c.Send(unreachableReply(h))
	}
	for _, hop := range p {
		l, err := r.link(c, hop.Addr)
		if err != nil {
			if r.isCut(c, p) {
				break
			}
			continue // bypass a lost agent: its children are reached directly
		}
		if l.forward(h, frame) != nil {
			r.markCut(c, hop.Addr) // the link broke: the tool's attachments below it are gone
			break
		}
		return nil
	}
	return c.Send(unreachableReply(h))
}

// isCut reports whether the way down p crosses an agent whose link to c broke: the tool's
// attachments below it were dropped with that connection (the agents there released its
// ranks), so those ranks are unreachable for this tool, though a new tool reaches them.
func (r *Router) isCut(c *Conn, p []*Route) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, hop := range p {
		if r.cut[c][hop.Addr] {
			return true
		}
	}
	return false
}

// markCut records that c's link to addr broke (and that addr is lost for later tools).
func (r *Router) markCut(c *Conn, addr string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.lost == nil {
		r.lost = make(map[string]bool)
	}
	r.lost[addr] = true
	if r.cut == nil {
		r.cut = make(map[*Conn]map[string]bool)
	}
	if r.cut[c] == nil {
		r.cut[c] = make(map[string]bool)
	}
	r.cut[c][addr] = true
}

// notifyLost tells c's tool that the ranks of addr's subtree are cut off: one Notify of kind
// NotifyTypeUnreachable per rank, each carrying their number, the losses of different links
// not interleaved.
func (r *Router) notifyLost(c *Conn, addr string) {
	r.mu.Lock()
	var ranks []uint32
	var find func(rts []Route) bool
	find = func(rts []Route) bool {
		for i := range rts {
			if rts[i].Addr == addr {
				ranks = subtreeRanks(&rts[i])
				return true
			}
			if find(rts[i].Children) {
				return true
			}
		}
		return false
	}
	find(r.children)
	r.mu.Unlock()
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

// ReplyTo is the answer to request h that carries only a message-level result: the ack of
// h's message type (an ErrorAck for a type without one), return code rc, and errno as the
// header's errorCode.
func ReplyTo(h Header, rc ReturnCode, errno uint32) Message {
	rh := h.Reply(rc)
	rh.ErrorCode = errno
	switch h.Type {
	case MsgAttach:
		return &AttachAck{Header: rh}
	case MsgDetach:
		return &DetachAck{Header: rh}
	case MsgControl:
		return &ControlAck{Header: rh}
	case MsgQuery:
		return &QueryAck{Header: rh}
	case MsgUpdate:
		return &UpdateAck{Header: rh}
	case MsgGatherStacks:
		return &GatherStacksAck{Header: rh}
	case MsgCollective:
		return &CollectiveAck{Header: rh}
	}
	return &ErrorAck{rh}
}

// link returns c's connection to the agent at addr, dialing it on first use.
func (r *Router) link(c *Conn, addr string) (*link, error) {
	r.mu.Lock()
	if r.lost == nil {
		r.lost = make(map[string]bool)
	}
	if r.links == nil {
		r.links = make(map[*Conn]map[string]*link)
	}
	if r.lost[addr] {
		r.mu.Unlock()
		return nil, fmt.Errorf("agent %s was lost", addr)
	}
	ls := r.links[c]
	if ls == nil {
		ls = make(map[string]*link)
		r.links[c] = ls
	}
	if l := ls[addr]; l != nil {
		r.mu.Unlock()
		if l.isDead() {
			r.markCut(c, addr)
			return nil, fmt.Errorf("agent %s was lost", addr)
		}
		return l, nil
	}
	r.mu.Unlock()
	ctx, cancel := context.WithTimeout(c.Context(), r.timeout())
	defer cancel()
	nc, err := dialAgent(ctx, addr, r.Token)
	if err != nil {
		r.mu.Lock()
		r.lost[addr] = true
		r.mu.Unlock()
		return nil, err
	}
	l := &link{nc: nc, pending: make(map[uint32]Header), parts: make(map[uint32]*partsWait)}
	r.mu.Lock()
	if r.links[c] == nil { // c closed meanwhile
		r.mu.Unlock()
		nc.Close()
		return nil, ErrPeerClosed
	}
	r.links[c][addr] = l
	r.mu.Unlock()
	go r.readLink(c, addr, l)
	return l, nil
}

// readLink sends up everything the child sends, but the acks of collectives, until the
// connection fails; then it answers what was outstanding on it.
func (r *Router) readLink(c *Conn, addr string, l *link) {
	br := bufio.NewReaderSize(l.nc, 64<<10)
	for {
		b, err := ReadFrame(br)
		if err != nil {
			break
		}
		h, _ := ParseHeader(b)
		l.mu.Lock()
		if h.Type == MsgCollectiveAck || h.Type == MsgGatherStacksAck { // only a Router asks a child for one: it is ours
			w := l.parts[h.SequenceID]
			if !moreFollows(h, b) {
				delete(l.parts, h.SequenceID)
			}
			l.mu.Unlock()
			if w != nil {
				select {
				case w.ch <- b:
				case <-w.quit: // it stopped waiting
				}
			}
			continue
		}
		delete(l.pending, h.SequenceID)
		l.mu.Unlock()
		if c.SendEncoded(b) != nil {
			break
		}
	}
	l.mu.Lock()
	l.dead = true
	pending, parts := l.pending, l.parts
	l.pending, l.parts = nil, nil
	l.mu.Unlock()
	l.nc.Close()
	select {
	case <-c.Context().Done(): // the tool left: the link closed with it
		return
	default:
	}
	r.markCut(c, addr)
	r.notifyLost(c, addr)
	for _, h := range pending {
		c.Send(unreachableReply(h))
	}
	for _, w := range parts {
		close(w.ch)
	}
}

func (l *link) isDead() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.dead
}

// forward writes one request on the link, remembering it until its ack.
func (l *link) forward(h Header, frame []byte) error {
	l.mu.Lock()
	if l.dead {
		l.mu.Unlock()
		return ErrPeerClosed
	}
	l.pending[h.SequenceID] = h
	l.mu.Unlock()
	if err := l.write(frame); err != nil {
		l.mu.Lock()
		delete(l.pending, h.SequenceID) // the caller answers it
		l.mu.Unlock()
		return err
	}
	return nil
}

// write sends one frame, bounded by linkWriteTimeout: a child that stops reading fails its
// link rather than blocking the relay.
func (l *link) write(frame []byte) error {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	l.nc.SetWriteDeadline(time.Now().Add(linkWriteTimeout))
	_, err := l.nc.Write(frame)
	if err != nil {
		l.nc.Close() // its reader then answers what was outstanding on it
	}
	return err
}

// linkWriteTimeout bounds one write to a child, as Server.WriteTimeout bounds the agent's.
const linkWriteTimeout = 30 * time.Second

// dialAgent connects to an agent and authenticates as a tool (the Hello exchange of
// Client.Hello), returning the connection ready for relayed frames.
func dialAgent(ctx context.Context, addr string, token []byte) (net.Conn, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, &OpError{Op: "dial", Object: addr, Err: err}
	}
	if dl, ok := ctx.Deadline(); ok {
		nc.SetDeadline(dl)
	}
	fail := func(err error) (net.Conn, error) {
		nc.Close()
		return nil, &OpError{Op: "hello", Object: addr, Err: err}
	}
	br := bufio.NewReader(nc)
	exchange := func(m *Hello) (*HelloAck, error) {
		m.Service, m.Version, m.SequenceID = ServiceToolctl, ProtocolVersion, 1
		b, err := Encode(m)
		if err != nil {
			return nil, err
		}
		if _, err := nc.Write(b); err != nil {
			return nil, err
		}
		rb, err := ReadFrame(br)
		if err != nil {
			return nil, err
		}
		a, err := DecodeMessage(rb)
		if err != nil {
			return nil, err
		}
		ack, ok := a.(*HelloAck)
		if !ok || ack.ReturnCode != Success {
			return nil, fmt.Errorf("%w: the agent refused the Hello (%v)", ErrAuthentication, a.Hdr().ReturnCode)
		}
		return ack, nil
	}
	if _, err := ProveHello(token, exchange); err != nil {
		return fail(err)
	}
	if br.Buffered() > 0 {
		return fail(errors.New("the agent sent a message before the tool's first request"))
	}
	nc.SetDeadline(time.Time{})
	return nc, nil
}

// GatherStacks asks the agent (through the tree, every agent below it) for the merged
// main-thread stacks of its stopped ranks (extension). Ranks of agents that could not be
// reached are in the tree's Unreachable.
func (c *Client) GatherStacks(ctx context.Context, maxFrames int) (*StackTree, error) {
	if maxFrames < 0 || maxFrames > MaxTracebackFrames {
		return nil, &OpError{Op: "gather stacks", Object: c.remote, Err: fmt.Errorf("%d frames (limit %d)", maxFrames, MaxTracebackFrames)}
	}
	reply, err := c.roundTrip(ctx, &GatherStacks{MaxFrames: uint32(maxFrames)})
	if err != nil {
		return nil, &OpError{Op: "gather stacks", Object: c.remote, Err: err}
	}
	return &reply.(*GatherStacksAck).Tree, nil
}
