package cdti

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Route is one agent below a Router in the tree overlay: its address, the ranks it serves
// itself, and the agents below it.
type Route struct {
	Addr     string   `json:"addr"`
	Ranks    []uint32 `json:"ranks,omitempty"`
	Children []Route  `json:"children,omitempty"`
}

// ErrorCodeUnreachable is the errorCode (EHOSTUNREACH) of the ack a Router sends for a
// request whose rank's agent cannot be reached; the returnCode is RequestFailed.
const ErrorCodeUnreachable = 113

// Router is a Server handler for an agent of the tree overlay. A message addressed (by its
// header's rank) to a rank this agent serves goes to Local, as if Local were the Server's
// handler (a Local that is a RelayHandler, such as a BG/Q I/O node's agent, gets the frame,
// and answers GatherStacks and Collective for its whole subtree, as its far end does); a
// message to a rank served below goes, unaltered, to the child on the way to it, over a
// connection of its own per upstream connection (so that a child sees each tool as the agent
// at the root sees it, and a tool that leaves releases its ranks everywhere), and every
// message that child sends back (acks and Notify) goes up unaltered, but for the exit reports
// its connection up coalesces (Exits).
//
// Sessions. Each link names, right after its Hello, the tool session it relays (Session: one
// random id per tool connection at the root, the same on every link below), and when the
// tool leaves, the Router says farewell on each link (SessionEnd) before closing it, so that
// the agents below drop the tool at once. An agent whose upstream link breaks without that
// farewell holds the tool's connection, its attachments, stops and traps as they are, for
// an agent above to resume it (see session.go).
//
// Faults. When a child's link breaks (the child was killed, say), the Router heals the tree
// for that upstream connection: it dials the child again with the session, and, if the child
// is gone, adopts its children (dials them and resumes the session they hold), and so on
// down past any other lost agent. Only the ranks of the agents it could not reach are lost
// (those of an agent that dropped the session: its whole subtree): the tool hears of them at
// once, by a Notify of kind NotifyTypeUnreachable for each (Lost: their number), sent before
// the answers to what was outstanding, and later requests for them are answered with their
// ack type, RequestFailed and ErrorCodeUnreachable; GatherStacks names them in Unreachable.
// Requests for the adopted ranks reach them from then on, through this Router. A request that
// was on its way through the broken link when it broke is answered for the adopted ranks with
// RequestFailed and ErrorCodeTimedOut: its answer was lost, and the request may or may not
// have been applied. A child that cannot be dialed at all (lost before, e.g. for a tool that
// attaches afterwards) is bypassed the same way: its children are reached from their nearest
// live ancestor, and only the lost agent's own ranks are unreachable.
//
// Collective (see route_coll.go) goes down the same way, its rank set cut to each child's
// subtree, and comes back reduced into groups of identical answers.
//
// GatherStacks is a collective too: Router sends it once to each child, asks Local (a
// StackGatherer) for its own ranks, and answers one merged tree, naming the ranks of agents it
// could not reach in Unreachable. A child that does not answer in time (SubtreeWait, which
// shrinks on the way down so that each agent answers before its parent stops waiting) has its
// subtree's ranks named in Unreachable for that gather only: its link is kept, so a slow agent
// cuts nothing off.
type Router struct {
	Local   any
	Token   []byte                           // the session token, proved to each child as a tool proves it
	Timeout time.Duration                    // bounds a dial (a re-dial while healing: 3 s at most) and a collective's wait; 0 means 30 s
	Logf    func(format string, args ...any) // if not nil, logs each heal of the tree

	top    bool        // the tool's own Router (DialTree): its first links are not held
	opened chan *Conn  // DialTree's: receives the tool's connection once it is opened
	ending atomic.Bool // the tool closed its Client (DialTree's), or the agent is ending (StopHealing): a link that breaks is not healed

	mu       sync.Mutex
	children []Route             // the agents directly below
	path     map[uint32][]*Route // rank → agents from the child down to the rank's agent
	links    map[*Conn]map[string]*link
	sessions map[*Conn][SessionIDSize]byte // the session ids of upstream connections that name none
	cut      map[*Conn]map[string]bool     // per upstream connection: agents whose ranks it lost
	lost     map[string]bool               // agents that could not be reached
	notifyMu sync.Mutex                    // keeps one loss's notifications together
	waiting  map[*Conn]map[uint32][]held   // per upstream connection and rank: requests waiting for a heal, in order
}

// StackGatherer is implemented by a Router's Local handler to take part in GatherStacks.
type StackGatherer interface {
	GatherStacks(c *Conn, m *GatherStacks) *StackTree
}

type link struct {
	ready   chan struct{} // closed once dialed (nc and br set) or failed (err set)
	err     error
	nc      net.Conn
	br      *bufio.Reader
	healed  chan struct{} // closed when the reader has ended and the tree is healed
	wmu     sync.Mutex
	mu      sync.Mutex
	pending map[uint32]Header     // forwarded requests awaiting their ack
	parts   map[uint32]*partsWait // collectives awaiting their (perhaps split) ack
	dead    bool
	upLost  bool // c's own transport was lost when the link broke: the agent above answered
}

// errLinkBroke is the error of a request whose link broke before its answer came.
var errLinkBroke = errors.New("the link broke")

// errDropped is the error of a link to an agent that dropped the session: the tool's
// attachments in its subtree are gone.
type errDropped struct{ addr string }

func (e errDropped) Error() string { return fmt.Sprintf("agent %s dropped the tool session", e.addr) }

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

// logf logs through Logf, if set.
func (r *Router) logf(format string, args ...any) {
	if r.Logf != nil {
		r.Logf(format, args...)
	}
}

// StopHealing tells the Router that its agent is ending: from now on a link that breaks is
// not healed, for any tool. An agent calls it as soon as it is told to end, before its
// children are (the front end ends a tree's agents parents first): the children's end that
// follows is then no loss, and the agents below them, ending too, are not adopted.
func (r *Router) StopHealing() { r.ending.Store(true) }

// Children returns the agents below this one, as SetChildren set them.
func (r *Router) Children() []Route {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.children
}

// Opened passes the event on to Local.
func (r *Router) Opened(c *Conn) {
	if r.opened != nil {
		select {
		case r.opened <- c:
		default:
		}
	}
	if x, ok := r.Local.(OpenHandler); ok {
		x.Opened(c)
	}
}

// Closed says farewell on the connections to the children made for c and closes them (the
// agents below drop the tool at once), then tells Local. When c ends because this agent's
// Server is closing, not because the tool left, the connections are closed without farewell:
// the agents below hold the tool's session for an agent above to adopt them.
func (r *Router) Closed(c *Conn, err error) {
	r.mu.Lock()
	ls := r.links[c]
	delete(r.links, c)
	delete(r.waiting, c)
	delete(r.cut, c)
	delete(r.sessions, c)
	var ncs []*link
	for _, l := range ls {
		if l.nc != nil { // set under r.mu; one still dialing closes itself
			ncs = append(ncs, l)
		}
	}
	r.mu.Unlock()
	for _, l := range ncs {
		if errors.Is(err, ErrServerClosed) {
			l.nc.Close()
		} else {
			l.end()
		}
	}
	if x, ok := r.Local.(CloseHandler); ok {
		x.Closed(c, err)
	}
}

// end says farewell on the link (SessionEnd) and closes it.
func (l *link) end() {
	if b, err := Encode(&Session{Header: Header{Service: ServiceToolctl, Version: ProtocolVersion}, Flags: SessionEnd}); err == nil {
		l.write(b)
	}
	l.nc.Close()
}

// sessionOf returns the id of the tool session c relays: the one its own Session named, or,
// for a tool's own connection, one made for it.
func (r *Router) sessionOf(c *Conn) [SessionIDSize]byte {
	if id, ok := c.Session(); ok {
		return id
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	id, ok := r.sessions[c]
	if !ok {
		id = newSessionID()
		if r.sessions == nil {
			r.sessions = make(map[*Conn][SessionIDSize]byte)
		}
		r.sessions[c] = id
	}
	return id
}

// Relay routes one frame (RelayHandler).
func (r *Router) Relay(c *Conn, frame []byte) error {
	h, _ := ParseHeader(frame)
	if x, ok := r.Local.(RelayHandler); ok && (h.Type == MsgGatherStacks || h.Type == MsgCollective) {
		return x.Relay(c, frame) // refused as a CNK's toolctld refuses them, not half answered
	}
	switch h.Type {
	case MsgGatherStacks:
		return r.gather(c, h, frame)
	case MsgCollective:
		return r.collective(c, h, frame)
	}
	r.mu.Lock()
	p, below := r.path[h.Rank]
	queued := below && ackFor(h.Type) != 0 && r.queueBehind(c, h, frame, p)
	r.mu.Unlock()
	if queued {
		return nil
	}
	if !below && !localServes(r.Local, h.Type) {
		return c.Send(ReplyTo(h, ToolRankNotFound, 0))
	}
	if !below || ackFor(h.Type) == 0 {
		if x, ok := r.Local.(RelayHandler); ok { // a relay of its own (a BG/Q I/O node's agent)
			return x.Relay(c, frame)
		}
		return c.HandleWith(r.Local, frame)
	}
	return r.relayAlong(c, h, frame, p, false)
}

// localServes reports whether local (a Router's Local handler) answers requests of type t for
// a rank. A request for a rank no agent below serves goes to Local, which refuses it as a CNK
// would (ToolRankNotFound); a Router without such a handler (the tool's own, DialTree's, has
// no Local at all) refuses it the same way itself, rather than as a type it does not know.
func localServes(local any, t MessageType) bool {
	if _, ok := local.(RelayHandler); ok {
		return true // it answers every frame, as toolctld would
	}
	var ok bool
	switch t {
	case MsgAttach:
		_, ok = local.(AttachHandler)
	case MsgDetach:
		_, ok = local.(DetachHandler)
	case MsgControl:
		_, ok = local.(ControlHandler)
	case MsgQuery:
		_, ok = local.(QueryHandler)
	case MsgUpdate:
		_, ok = local.(UpdateHandler)
	default:
		return true // not a request for a rank
	}
	return ok
}

// relayAlong forwards request h (encoded as frame) to the first agent of path p that c
// still reaches. A link that broke, whose tree is being healed, is waited for off c's only
// reader, which serves other requests meanwhile: the request then goes its way in the
// healed tree (healed true: it waits for no heal again).
func (r *Router) relayAlong(c *Conn, h Header, frame []byte, p []*Route, healed bool) error {
	own := p[len(p)-1].Addr
	for _, hop := range p {
		if r.isCut(c, own) {
			break
		}
		var l *link
		var err error
		if healed {
			l, err = r.linkHealed(c, hop.Addr, false)
		} else {
			l, err = r.linkTo(c, hop.Addr, false, false)
		}
		if l != nil && (errors.Is(err, errLinkBroke) || err == errLinkDialing) {
			r.wait(c, h, frame, p, healed)
			return nil
		}
		if err != nil {
			continue // bypass a lost agent: its children are reached directly
		}
		switch err := l.forward(h, frame); {
		case err == nil, errors.Is(err, errReaderOwns):
			// Sent, or the link's reader answers it (or the agent above did).
		case errors.Is(err, errLinkBroke):
			// It was not sent: it goes its way in the healed tree.
			r.wait(c, h, frame, p, healed)
		default:
			// The link broke while it was sent: it is answered once the tree is healed
			// without the link.
			go func() {
				<-l.healed
				l.mu.Lock()
				upLost := l.upLost
				l.mu.Unlock()
				switch {
				case upLost: // the agent above answered it
				case r.isCut(c, own):
					c.Send(unreachableReply(h))
				default:
					c.Send(ReplyTo(h, RequestFailed, ErrorCodeTimedOut))
				}
			}()
		}
		return nil
	}
	return c.Send(unreachableReply(h))
}

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

// errLinkDialing is linkTo's error, when it may not wait, for a link another caller is
// dialing.
var errLinkDialing = errors.New("the link is being dialed")

// linkHealed is linkTo for a caller that may wait for the heal of a broken link: once the
// tree is healed it returns the link the heal made to the same agent, or else errLinkBroke
// (the caller then sees what was cut).
func (r *Router) linkHealed(c *Conn, addr string, renew bool) (*link, error) {
	for {
		l, err := r.linkTo(c, addr, renew, true)
		if l == nil || !errors.Is(err, errLinkBroke) {
			return l, err
		}
		<-l.healed
		r.mu.Lock()
		again := r.links[c][addr]
		r.mu.Unlock()
		if again == nil || again == l { // the heal did not dial the agent again
			return nil, err
		}
		renew = false
	}
}

// linkTo returns c's link to the agent at addr, dialing it (with c's session: the agent
// resumes it if it holds it) if there is none or, with renew, if the one there broke. One
// dial at a time per link: others wait for it, or, unless wait, get it with errLinkDialing.
// A link whose connection broke is returned with errLinkBroke, without waiting for its heal
// (see linkHealed).
func (r *Router) linkTo(c *Conn, addr string, renew, wait bool) (*link, error) {
	r.mu.Lock()
	if c.Context().Err() != nil { // c ended: Closed drops its links, none is made after
		r.mu.Unlock()
		return nil, ErrPeerClosed
	}
	if r.lost == nil {
		r.lost = make(map[string]bool)
	}
	if r.links == nil {
		r.links = make(map[*Conn]map[string]*link)
	}
	ls := r.links[c]
	if ls == nil {
		ls = make(map[string]*link)
		r.links[c] = ls
	}
	l := ls[addr]
	if l != nil && !(renew && l.broken()) {
		r.mu.Unlock()
		if !wait {
			select {
			case <-l.ready:
			default:
				return l, errLinkDialing
			}
		}
		<-l.ready
		if l.err != nil {
			return nil, l.err
		}
		if l.isDead() {
			return l, fmt.Errorf("agent %s: %w", addr, errLinkBroke)
		}
		return l, nil
	}
	if l == nil && r.lost[addr] && !renew {
		r.mu.Unlock()
		return nil, fmt.Errorf("agent %s was lost", addr)
	}
	linked := l != nil && l.nc != nil // the agent had the session on a link before
	l = &link{ready: make(chan struct{}), healed: make(chan struct{}),
		pending: make(map[uint32]Header), parts: make(map[uint32]*partsWait)}
	ls[addr] = l
	r.mu.Unlock()
	defer close(l.ready)
	timeout := r.timeout()
	if renew {
		// Healing: the lost agent's children hold the session only for their grace, and
		// are adopted only once this dial has failed.
		timeout = min(timeout, healDialTimeout)
	}
	ctx, cancel := context.WithTimeout(c.Context(), timeout)
	defer cancel()
	var flags SessionFlags
	if r.top && !linked && r.isChild(addr) {
		flags = SessionUnheld // the tool's own link to the root (see DialTree)
	}
	nc, br, st, err := dialAgent(ctx, addr, r.Token, r.sessionOf(c), flags)
	switch {
	case err == nil && st == SessionEnded:
		nc.Close()
		err = errDropped{addr}
	case err == nil && st == SessionNew && linked:
		// The agent no longer knows the session it had (it forgot it, or was started
		// again): the tool's state there is gone. Farewell on what it started.
		(&link{nc: nc}).end()
		err = errDropped{addr}
	}
	r.mu.Lock()
	if err != nil {
		// An agent is lost for every tool if it could not be reached, not if the dial
		// stopped because c's tool left.
		if _, dropped := err.(errDropped); !dropped && c.Context().Err() == nil {
			r.lost[addr] = true
		}
		l.err, l.dead = err, true
		close(l.healed)
		r.mu.Unlock()
		return nil, err
	}
	if r.links[c] == nil { // c closed meanwhile
		r.mu.Unlock()
		l.nc = nc
		l.end()
		l.err, l.dead = ErrPeerClosed, true
		close(l.healed)
		return nil, ErrPeerClosed
	}
	l.nc, l.br = nc, br
	delete(r.lost, addr) // reached again (a resumed link)
	r.mu.Unlock()
	go r.readLink(c, addr, l)
	return l, nil
}

// healDialTimeout bounds the dial of an agent whose link broke, well below the default
// Server.ResumeGrace for which its children hold the session.
const healDialTimeout = 3 * time.Second

// broken reports whether the link failed (its dial or its connection).
func (l *link) broken() bool {
	select {
	case <-l.ready:
		return l.err != nil || l.isDead()
	default:
		return false // still dialing
	}
}

// readLink sends up everything the child sends, but the acks of collectives, until the
// connection fails; then it heals the tree for c and answers what was outstanding on it
// (linkBroke).
func (r *Router) readLink(c *Conn, addr string, l *link) {
	defer close(l.healed)
	for {
		b, err := ReadFrame(l.br)
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
		if h.Type.IsAck() { // a notification's sequence id is the agent's, not a request's
			delete(l.pending, h.SequenceID)
		}
		l.mu.Unlock()
		if c.SendEncoded(b) != nil {
			break
		}
	}
	r.linkBroke(c, addr, l)
}

func (l *link) isDead() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.dead
}

// errReaderOwns is forward's error for a request whose write failed after the link's reader
// took it among those outstanding: the reader answers it, not the caller.
var errReaderOwns = errors.New("the link's reader answers the request")

// forward writes one request on the link, remembering it until its ack. It fails with
// errLinkBroke if the link had already broken (nothing was sent), with errReaderOwns if the
// write failed and the link's reader answers the request, and with the write's error if the
// write failed and the caller answers it.
func (l *link) forward(h Header, frame []byte) error {
	l.mu.Lock()
	if l.dead {
		l.mu.Unlock()
		return errLinkBroke
	}
	l.pending[h.SequenceID] = h
	l.mu.Unlock()
	if err := l.write(frame); err != nil {
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.pending == nil {
			return errReaderOwns
		}
		delete(l.pending, h.SequenceID) // the caller answers it
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
