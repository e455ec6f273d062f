package cdti

import (
	"bufio"
	"crypto/rand"
	"fmt"
	"net"
	"slices"
	"time"
)

// Sessions: how a tree of agents survives the loss of an interior agent.
//
// A Router's link to a child relays one tool connection; the Router names it, right after the
// Hello, with a Session message carrying the tool session's id (random, one per tool
// connection at the root, the same on every link below it). A connection so named is held
// when its transport breaks without the Router's farewell (a Session with SessionEnd) and
// without the agent closing it (Conn.Close ends it for good): the
// handler is not told (no CloseHandler call, the context stays live), what the agent sends
// meanwhile is kept if it is a Notify and dropped otherwise, and for ResumeGrace the Server
// waits for an agent above to take the connection over: another authenticated connection
// whose Session names the same id resumes it (its transport replaces the broken one, the
// kept notifications are sent on it, and the tool's attachments, stops and traps stay as they
// were). A connection not resumed in time ends as any other (the tool is dropped, its ranks
// released).

// Session extension message types.
const (
	MsgSession    MessageType = 5106 // extension: names the tool session a link relays
	MsgSessionAck MessageType = 5107 // extension: the agent's answer to Session
)

// SessionIDSize is the size of a session id.
const SessionIDSize = 16

// SessionFlags are the flags of a Session message.
type SessionFlags uint32

const (
	// SessionEnd says that the tool of the session left: the agent drops it now and ends the
	// connection, instead of holding it for a resumption.
	SessionEnd SessionFlags = 1
	// SessionUnheld names the session of a link that comes straight from the tool's own
	// Router (DialTree): the agent names it on its links below, so that they are held and
	// the tool's Router can adopt them, but this connection is not held when its transport
	// breaks (nothing above could resume it): the tool is dropped at once, as when its own
	// connection breaks, and no other connection can resume it.
	SessionUnheld SessionFlags = 2
)

// SessionState is a SessionAck's answer.
type SessionState uint32

const (
	SessionNew     SessionState = 0 // the agent did not hold the session: it starts on this connection
	SessionResumed SessionState = 1 // this connection took over the held connection of the session
	SessionEnded   SessionState = 2 // the agent held the session and dropped it: the agent closes
)

func (s SessionState) String() string {
	return enumName([]string{"new", "resumed", "ended"}, int64(s), "SessionState")
}

// Session (5106) names the tool session a Router's link relays: flags u32 @40, 4 bytes
// padding, the id @48 (16 bytes).
type Session struct {
	Header
	Flags SessionFlags
	ID    [SessionIDSize]byte
}

// SessionAck (5107) answers a Session that is not SessionEnd: state u32 @40, 4 bytes padding.
type SessionAck struct {
	Header
	State SessionState
}

func (m *Session) MessageType() MessageType         { return MsgSession }
func (m *Session) encodedSize(bool) (int, error)    { return 64, nil }
func (m *SessionAck) MessageType() MessageType      { return MsgSessionAck }
func (m *SessionAck) encodedSize(bool) (int, error) { return 48, nil }

func (m *Session) encodeBody(b []byte) {
	be.PutUint32(b[40:], uint32(m.Flags))
	copy(b[48:], m.ID[:])
}

func (m *SessionAck) encodeBody(b []byte) { be.PutUint32(b[40:], uint32(m.State)) }

func decSession(h Header, b []byte) (Message, error) {
	if err := needMsg(h, b, 64); err != nil {
		return nil, err
	}
	m := &Session{Header: h, Flags: SessionFlags(be.Uint32(b[40:]))}
	copy(m.ID[:], b[48:64])
	return m, nil
}

func decSessionAck(h Header, b []byte) (Message, error) {
	if h.ReturnCode != Success && len(b) < 48 {
		return &SessionAck{Header: h}, nil
	}
	if err := needMsg(h, b, 48); err != nil {
		return nil, err
	}
	return &SessionAck{Header: h, State: SessionState(be.Uint32(b[40:]))}, nil
}

// newSessionID returns a random session id.
func newSessionID() [SessionIDSize]byte {
	var id [SessionIDSize]byte
	if _, err := rand.Read(id[:]); err != nil {
		panic("cdti: no randomness for a session id: " + err.Error())
	}
	return id
}

// endedKeep is how many resume graces a Server remembers a session it dropped, answering
// SessionEnded to an agent above that asks for it late; past that it forgets it, and such an
// agent, whose link had been established, takes the SessionNew answer for a drop as well.
const endedKeep = 10

// maxHeldNotifies bounds the notifications a held connection keeps; past it the session
// cannot be resumed faithfully and ends.
const maxHeldNotifies = 4096

// DefaultResumeGrace is Server.ResumeGrace when it is not set.
const DefaultResumeGrace = 10 * time.Second

func (s *Server) resumeGrace() time.Duration {
	if s.ResumeGrace > 0 {
		return s.ResumeGrace
	}
	return DefaultResumeGrace
}

// Session returns the id of the tool session the connection relays, and whether it names one.
func (c *Conn) Session() ([SessionIDSize]byte, bool) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.session, c.hasSession
}

// onSession answers a Session message on c: it names c's session, resumes a held connection
// of that session with c's transport (absorbed then reports true: c's goroutine must end
// without closing the transport), or, with SessionEnd, ends c for good.
func (c *Conn) onSession(m *Session, r *bufio.Reader) (absorbed bool, err error) {
	s := c.srv
	if m.Flags&SessionEnd != 0 {
		c.wmu.Lock()
		c.ending = true
		c.wmu.Unlock()
		return false, errSessionEnd
	}
	reply := func(st SessionState) error {
		return c.Send(&SessionAck{Header: m.Reply(Success), State: st})
	}
	if m.Flags&SessionUnheld != 0 {
		c.wmu.Lock()
		c.session, c.hasSession, c.unheld = m.ID, true, true
		c.wmu.Unlock()
		return false, reply(SessionNew)
	}
	s.mu.Lock()
	held := s.sessions[m.ID]
	_, ended := s.ended[m.ID]
	if held == nil && !ended {
		if s.sessions == nil {
			s.sessions = make(map[[SessionIDSize]byte]*Conn)
		}
		s.sessions[m.ID] = c
		c.wmu.Lock()
		c.session, c.hasSession = m.ID, true
		c.wmu.Unlock()
	}
	s.mu.Unlock()
	switch {
	case held == c:
		return false, reply(SessionNew)
	case held == nil && ended:
		reply(SessionEnded)
		return false, fmt.Errorf("session: %w", errSessionEnded)
	case held == nil:
		return false, reply(SessionNew)
	}
	// Take over held: answer on this transport, then make it held's (c keeps none).
	c.wmu.Lock()
	nc := c.nc
	c.nc = closedConn{nc}
	c.wmu.Unlock()
	done := make(chan struct{})
	ok, err := held.resume(nc, r, done, func() error {
		return writeFrameTo(nc, &SessionAck{Header: m.Reply(Success), State: SessionResumed}, s.writeTimeout())
	})
	if !ok {
		c.wmu.Lock()
		c.nc = nc
		c.wmu.Unlock()
		if err == nil {
			reply(SessionEnded)
			err = fmt.Errorf("session: %w", errSessionEnded)
		}
		return false, err
	}
	c.handedOver = done
	return true, nil
}

// unwritten is what is left of the frames held once n of their bytes were written: the
// frames not written whole (a frame written in part is sent again whole). A write can report
// every byte written together with an error: nothing is left then.
func unwritten(held [][]byte, n int64) [][]byte {
	for len(held) > 0 && n >= int64(len(held[0])) {
		n -= int64(len(held[0]))
		held = held[1:]
	}
	return held
}

// errSessionEnd ends a connection whose Router said farewell; errSessionEnded one that asked
// for a session this agent dropped.
var (
	errAbsorbed     = fmt.Errorf("the connection resumed a held one")
	errSessionEnd   = fmt.Errorf("the tool session ended")
	errSessionEnded = fmt.Errorf("the tool session was dropped here")
)

// writeFrameTo encodes m and writes it to nc within timeout.
func writeFrameTo(nc net.Conn, m Message, timeout time.Duration) error {
	b, err := Encode(m)
	if err != nil {
		return err
	}
	nc.SetWriteDeadline(time.Now().Add(timeout))
	_, err = nc.Write(b)
	return err
}

// resume makes nc (read through r) the transport of c, a held connection, after ack has been
// written on it, and sends the notifications kept meanwhile; c closes done when it stops
// using nc. It reports false if c ended or cannot be resumed.
func (c *Conn) resume(nc net.Conn, r *bufio.Reader, done chan struct{}, ack func() error) (bool, error) {
	c.wmu.Lock()
	if c.done || c.ending || c.overflow {
		c.wmu.Unlock()
		return false, nil
	}
	if err := ack(); err != nil {
		c.wmu.Unlock()
		return false, fmt.Errorf("session: resume: %w", err)
	}
	old := c.nc
	c.nc = nc
	c.gen++
	c.suspended, c.closing = false, false
	// The kept notifications go in one write; those not written whole stay kept for the
	// next resumption if this transport fails too.
	bufs := net.Buffers(slices.Clone(c.held))
	nc.SetWriteDeadline(time.Now().Add(c.srv.writeTimeout()))
	if n, err := bufs.WriteTo(nc); err != nil {
		c.held = unwritten(c.held, n)
		c.suspended = true
		nc.Close()
	} else {
		c.held = nil
		if c.back != nil {
			close(c.back)
			c.back = nil
		}
	}
	select {
	case t := <-c.resumed: // an earlier resumption not taken up yet: this one replaces it
		close(t.done)
	default:
	}
	c.resumed <- transport{r, c.gen, done}
	c.wmu.Unlock()
	old.Close()
	return true, nil
}

// transport is the reader of a transport that resumed a held connection, its generation,
// and the channel to close when the connection stops using it (the connection that brought
// it waits for that before it returns, and its caller closes it).
type transport struct {
	r    *bufio.Reader
	gen  uint64
	done chan struct{}
}

// superseded reports whether another transport resumed c after the one of generation gen.
func (c *Conn) superseded(gen uint64) bool {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.gen != gen
}

// hold is called when reading c's transport failed (gen is the generation of the transport
// that failed). It returns the transport that took over, or ok false if c ends: it names no
// session, said farewell, or was not resumed within the grace.
func (c *Conn) hold(gen uint64) (t transport, ok bool) {
	s := c.srv
	c.wmu.Lock()
	if !c.hasSession || c.unheld || c.ending || c.overflow || c.done {
		c.done = true
		c.wmu.Unlock()
		return t, false
	}
	if c.gen != gen { // already resumed
		c.wmu.Unlock()
		return <-c.resumed, true
	}
	c.suspended = true
	c.nc.Close()
	c.wmu.Unlock()
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if !closed {
		timer := time.NewTimer(s.resumeGrace())
		defer timer.Stop()
		select {
		case t := <-c.resumed:
			return t, true
		case <-timer.C:
		case <-c.halt:
		}
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	select {
	case t := <-c.resumed: // resumed at the last moment
		return t, true
	default:
	}
	c.done = true
	return t, false
}

// transportLost reports whether c has no working transport now: it broke or was closed (and
// c is held, or ending).
func (c *Conn) transportLost() bool {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.suspended || c.closing || c.done
}

// awaitTransport waits until c, held, has a working transport again, and reports false if
// c ends (or is ending) instead.
func (c *Conn) awaitTransport() bool {
	for {
		c.wmu.Lock()
		if c.done || c.ending {
			c.wmu.Unlock()
			return false
		}
		if !c.suspended && !c.closing {
			c.wmu.Unlock()
			return true
		}
		if c.back == nil {
			c.back = make(chan struct{})
		}
		back := c.back
		c.wmu.Unlock()
		select {
		case <-back:
		case <-c.ctx.Done():
			return false
		}
	}
}

// forget removes c's session from the server when c ends, remembering that it ended here, and
// lets go a transport that resumed c too late to be read.
func (s *Server) forget(c *Conn) {
	c.wmu.Lock()
	c.done = true
	id, ok := c.session, c.hasSession
	select {
	case t := <-c.resumed:
		t.r = nil
		c.nc.Close() // the transport it brought, which replaced the one closed
		close(t.done)
	default:
	}
	c.wmu.Unlock()
	if !ok {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sessions[id] == c {
		delete(s.sessions, id)
		now := time.Now()
		if s.ended == nil {
			s.ended = make(map[[SessionIDSize]byte]time.Time)
		}
		for e, at := range s.ended {
			if now.Sub(at) > endedKeep*s.resumeGrace() {
				delete(s.ended, e)
			}
		}
		s.ended[id] = now
	}
}

// closedConn stands for the transport of a connection that gave it to the held connection it
// resumed: writing fails and closing does nothing.
type closedConn struct{ net.Conn }

func (closedConn) Write([]byte) (int, error) { return 0, net.ErrClosed }
func (closedConn) Close() error              { return nil }

// keep keeps a frame written while the connection is held, if it is a Notify or an Exits
// (acks of requests are dropped: the Router above answered them when its link broke).
func (c *Conn) keep(b []byte) {
	if h, _ := ParseHeader(b); h.Type != MsgNotify && h.Type != MsgExits {
		return
	}
	if len(c.held) >= maxHeldNotifies {
		c.overflow = true
		return
	}
	c.held = append(c.held, b)
}
