package cdti

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Handler interfaces. Server.Handler implements any subset of them; a request type whose
// interface is missing is answered with ErrorAck(UnsupportedType). Handlers never see bytes.
//
// Requests of one connection are handled one at a time, in arrival order, on the connection's
// reading goroutine (as toolctld serializes them); different connections are handled
// concurrently, so a handler shared by connections must lock its own state.
//
// Handlers answer message-level failures through the ack's Header.ReturnCode (and ErrorCode);
// the framework fills the rest of the header from the request. A nil ack is answered with
// RequestFailed.
type (
	// AttachHandler handles Attach.
	AttachHandler interface {
		Attach(c *Conn, m *Attach) *AttachAck
	}
	// DetachHandler handles Detach.
	DetachHandler interface {
		Detach(c *Conn, m *Detach) *DetachAck
	}
	// ControlHandler handles Control.
	ControlHandler interface {
		Control(c *Conn, m *Control) *ControlAck
	}
	// QueryHandler runs the commands of a Query. It returns one Result per command, in order
	// (missing results are answered CmdInval), or a message-level ReturnCode other than Success
	// (then the results are ignored and the ack carries no commands).
	//
	// The framework answers some commands itself, as a CNK does: unknown command types and
	// commands of the other message kind (CmdInval), payloads that do not parse (CmdParmErr),
	// GetMemory over MaxMemorySize (CmdLngthErr), SetMemory over MaxMemorySize (CmdParmErr).
	// Those reach the handler as *RawCommand so that it can treat them as failed commands
	// (CmdPrevCmdFail); whatever it returns for them is ignored.
	//
	// In a Result, a nil Ack with a Code other than CmdAllocErr is sent as the 8-byte
	// ToolCommand ack with the command's threadID; return a *BareAck to send another threadID.
	// Acks that do not fit the 64 KiB ack buffer become CmdAllocErr, as in CNK.
	QueryHandler interface {
		Query(c *Conn, m *Query) ([]Result, ReturnCode)
	}
	// UpdateHandler runs the commands of an Update, like QueryHandler. The framework has already
	// refused Updates with more than one action command (ToolConflictingCmds).
	UpdateHandler interface {
		Update(c *Conn, m *Update) ([]Result, ReturnCode)
	}
	// Checker, when implemented, runs before the framework's own checks of a Query or Update
	// (numCommands > 16, conflicting action commands), so that an agent can apply CNK's order:
	// job id, rank, exiting process, attached tool, and for an Update control authority.
	Checker interface {
		Check(c *Conn, h *Header) ReturnCode
	}
	// MessageHandler handles every other message type (including unknown types, as
	// *RawMessage). A nil reply sends nothing.
	MessageHandler interface {
		HandleMessage(c *Conn, m Message) Message
	}
	// RelayHandler, when implemented, receives every message after the Hello as its raw frame
	// (exactly header.length bytes) instead of the handlers above: an agent on a real BG/Q
	// forwards the frames unaltered to toolctld and writes toolctld's messages back with
	// Conn.SendEncoded. An error closes the connection.
	RelayHandler interface {
		Relay(c *Conn, frame []byte) error
	}
	// OpenHandler is told about each connection once its Hello has been accepted.
	OpenHandler interface {
		Opened(c *Conn)
	}
	// CloseHandler is told when an accepted connection has ended (err is nil after a clean
	// close by the peer, ErrServerClosed when the Server is closing). The agent must then drop the tool: release its control and remove its
	// breakpoints.
	CloseHandler interface {
		Closed(c *Conn, err error)
	}
)

// ErrServerClosed is returned by Serve after Close.
var ErrServerClosed = errors.New("cdti: server closed")

// Server is the agent side of CDTI: it accepts connections, authenticates them with Hello,
// decodes requests for Handler and encodes its answers.
//
// A connection is closed, and only that connection, when a frame is malformed (length outside
// [32, 65536], a known request that does not decode, a command list whose descriptors point
// outside the message or overlap), when a write fails, or when the first message is not a Hello
// with the right token.
type Server struct {
	// Handler implements the handler interfaces above.
	Handler any
	// Token is the session token every connection must prove it holds in its Hellos, by
	// challenge and response (HelloProof; proofs are compared in constant time, and the token
	// itself never travels). An empty token accepts only a tool whose token is empty too.
	Token []byte
	// Node is the node name reported in HelloAck.
	Node string
	// HandshakeTimeout bounds the wait for Hello; 0 means 10 s.
	HandshakeTimeout time.Duration
	// WriteTimeout bounds every write (acks and notifications); 0 means 30 s. A write that
	// times out closes the connection, so a peer that stops reading cannot block the agent.
	WriteTimeout time.Duration
	// ExitDelay bounds how long a Termination report waits for others to share its message
	// (see Exits); 0 means 2 ms.
	ExitDelay time.Duration
	// ErrorLog receives connection errors; nil discards them (CloseHandler still sees them).
	ErrorLog *log.Logger
	// ResumeGrace is how long a connection that names a tool session (a Router's link, see
	// Session) is held after its transport breaks, for an agent above to resume it; 0 means
	// 10 s.
	ResumeGrace time.Duration
	// CNK makes the server answer as a BG/Q Compute Node Kernel: extension commands get
	// CmdInval, extension messages ErrorAck(UnsupportedType), ack payloads come shuffled
	// (see cnk.go). Set it before Serve.
	CNK bool

	mu        sync.Mutex
	listeners map[net.Listener]struct{}
	conns     map[*Conn]struct{}
	sessions  map[[SessionIDSize]byte]*Conn     // connections that name a session, held ones included
	ended     map[[SessionIDSize]byte]time.Time // sessions dropped here, and when
	closed    bool
	wg        sync.WaitGroup
	nextID    atomic.Uint64
}

// Serve accepts connections on l and serves each on its own goroutine, until l fails or Close
// is called (then it returns ErrServerClosed).
func (s *Server) Serve(l net.Listener) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrServerClosed
	}
	if s.listeners == nil {
		s.listeners = make(map[net.Listener]struct{})
	}
	s.listeners[l] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.listeners, l)
		s.mu.Unlock()
	}()
	var delay time.Duration
	for {
		nc, err := l.Accept()
		if err != nil {
			s.mu.Lock()
			closed := s.closed
			s.mu.Unlock()
			if closed {
				return ErrServerClosed
			}
			var ok bool
			if delay, ok = AcceptRetry(err, delay); ok {
				s.logf("cdti: accept on %v: %v; retrying in %v", l.Addr(), err, delay)
				time.Sleep(delay)
				continue
			}
			return err
		}
		delay = 0
		if !s.track() {
			nc.Close()
			return ErrServerClosed
		}
		go func() {
			defer s.wg.Done()
			s.serveConn(nc)
		}()
	}
}

// AcceptRetry reports whether a server should outlive an Accept error and how long to wait
// before accepting again. Running out of descriptors or buffers (EMFILE, ENFILE, ENOBUFS,
// ENOMEM), a connection aborted before it was accepted (ECONNABORTED) and timeouts pass once
// connections close; the wait doubles from 5 ms up to 1 s while errors repeat (prev is the
// previous wait, 0 after an Accept that succeeded).
func AcceptRetry(err error, prev time.Duration) (time.Duration, bool) {
	var ne net.Error
	temporary := errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) ||
		errors.Is(err, syscall.ENOBUFS) || errors.Is(err, syscall.ENOMEM) ||
		errors.Is(err, syscall.ECONNABORTED) || (errors.As(err, &ne) && ne.Timeout())
	if !temporary {
		return 0, false
	}
	return min(max(2*prev, 5*time.Millisecond), time.Second), true
}

// ServeConn serves one connection and returns when it ends.
func (s *Server) ServeConn(nc net.Conn) {
	if !s.track() {
		nc.Close()
		return
	}
	defer s.wg.Done()
	s.serveConn(nc)
}

// track counts a connection goroutine, unless the server is closed: Close waits for the count
// to drop to zero, so no goroutine may be added once it has started waiting.
func (s *Server) track() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.wg.Add(1)
	return true
}

// Close stops every listener and closes every connection, then waits until all connections
// have been torn down (their CloseHandler calls included).
func (s *Server) Close() error {
	s.mu.Lock()
	s.closed = true
	for l := range s.listeners {
		l.Close()
	}
	conns := make([]*Conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	// Each sends the exit reports it holds first (Conn.Close): all at once, so that peers
	// that stopped reading cost the bound of one such write (after any write in progress),
	// not one each.
	var closing sync.WaitGroup
	for _, c := range conns {
		closing.Go(func() {
			c.Close()
			c.haltOnce.Do(func() { close(c.halt) })
		})
	}
	closing.Wait()
	s.wg.Wait()
	return nil
}

func (s *Server) logf(format string, args ...any) {
	if s.ErrorLog != nil {
		s.ErrorLog.Printf(format, args...)
	}
}

func (s *Server) writeTimeout() time.Duration {
	if s.WriteTimeout > 0 {
		return s.WriteTimeout
	}
	return 30 * time.Second
}

// Conn is one accepted connection, as handlers see it.
type Conn struct {
	srv    *Server
	nc     net.Conn // the transport: replaced when a held connection is resumed
	remote net.Addr // the first transport's peer
	id     uint64
	ctx    context.Context
	cancel context.CancelFunc
	hello  *Hello

	wmu       sync.Mutex // serializes writes; guards nc's replacement, exits and the session state below
	notifySeq atomic.Uint32
	exits     exitBatch // Termination reports waiting to be sent as one Exits (ext_exits.go)

	// The tool session the connection relays (session.go), and its state when held.
	session    [SessionIDSize]byte
	hasSession bool
	unheld     bool          // named with SessionUnheld: never held, never resumed
	ending     bool          // the Router said farewell, or the agent closed it: do not hold
	suspended  bool          // the transport broke: writes are kept (Notify) or dropped
	closing    bool          // Close was called on the transport
	done       bool          // ended for good: no resumption
	overflow   bool          // more notifications than maxHeldNotifies came while held
	held       [][]byte      // the notifications kept while suspended
	back       chan struct{} // closed when a resumption gives a held connection a working transport
	gen        uint64        // counts the transports that took the connection over
	resumed    chan transport
	handedOver chan struct{} // this connection's transport now serves a held one: closed when it no longer does
	halt       chan struct{} // closed by Server.Close
	haltOnce   sync.Once

	amu       sync.Mutex
	inRequest bool
	after     []func()

	vmu   sync.Mutex
	value any
}

// ID is a number unique to this connection within its Server.
func (c *Conn) ID() uint64 { return c.id }

// RemoteAddr is the peer's address.
func (c *Conn) RemoteAddr() net.Addr { return c.remote }

// Context is cancelled when the connection ends.
func (c *Conn) Context() context.Context { return c.ctx }

// Hello is the Hello the peer authenticated with.
func (c *Conn) Hello() *Hello { return c.hello }

// Value and SetValue hold one value of the handler's choosing (per-connection tool state).
func (c *Conn) Value() any {
	c.vmu.Lock()
	defer c.vmu.Unlock()
	return c.value
}

// SetValue sets the value returned by Value.
func (c *Conn) SetValue(v any) {
	c.vmu.Lock()
	c.value = v
	c.vmu.Unlock()
}

// Close closes the connection for good: the agent's own Close ends it even if it names a
// tool session (only a break of its transport holds it for a resumption).
func (c *Conn) Close() error {
	c.wmu.Lock()
	c.flushExitsLocked(closeFlushTimeout) // what waits is sent: nothing is lost to the close
	nc := c.nc
	c.closing, c.ending = true, true
	c.wmu.Unlock()
	return nc.Close()
}

// closeFlushTimeout bounds the write of the exit reports Close sends before it closes.
const closeFlushTimeout = 5 * time.Second

// Notify sends an unsolicited Notify. It may be called from any goroutine at any time, also
// concurrently with the acks the framework writes. Header fields left zero are filled: Service
// (ServiceToolctl), SequenceID (a per-connection counter), and Version (ProtocolVersion) except
// for a Termination notify, which CNK sends with version 0. To a peer that accepts Exits, a
// Termination notify is sent within an Exits, perhaps with others (see Exits).
func (c *Conn) Notify(n *Notify) error {
	if n.Kind == NotifyTypeTermination && c.acceptsExits() {
		return c.reportExits([]ExitGroup{{JobID: n.JobID, ToolID: n.ToolID, Status: n.Exit, Ranks: RanksOf(n.Rank)}})
	}
	m := *n
	if m.Service == 0 {
		m.Service = ServiceToolctl
	}
	if m.SequenceID == 0 {
		m.SequenceID = c.notifySeq.Add(1)
	}
	if m.Version == 0 && m.Kind != NotifyTypeTermination {
		m.Version = ProtocolVersion
	}
	return c.Send(&m)
}

// Send writes any message as it is encoded. Like Notify it is safe for concurrent use.
func (c *Conn) Send(m Message) error {
	b, err := Encode(m)
	if err != nil {
		return err
	}
	return c.write(b)
}

// SendEncoded writes one encoded message as it is (a frame relayed from toolctld, for
// instance), after checking its length field. Like Notify it is safe for concurrent use. The
// exit reports of a Termination Notify or an Exits are sent as Notify sends them: within an
// Exits to a peer that accepts it, and as Termination Notifies to one that does not; a
// malformed Exits is an error, and nothing is sent.
func (c *Conn) SendEncoded(frame []byte) error {
	if err := WriteFrame(io.Discard, frame); err != nil {
		return err
	}
	groups, ok, err := exitsOf(frame)
	if err != nil {
		return err
	}
	if ok {
		if h, _ := ParseHeader(frame); c.acceptsExits() || h.Type == MsgExits {
			return c.reportExits(groups)
		}
	}
	return c.write(frame)
}

// AfterReply, called by a handler, runs f once the answer to the current request has been
// written: CNK performs deferred actions (resuming the process, the next Notify) after its
// UpdateAck. Called outside a handler, it runs f at once.
func (c *Conn) AfterReply(f func()) {
	c.amu.Lock()
	if c.inRequest {
		c.after = append(c.after, f)
		c.amu.Unlock()
		return
	}
	c.amu.Unlock()
	f()
}

// write sends one encoded message after the exit reports waiting (see Exits).
func (c *Conn) write(b []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := c.flushExitsLocked(c.srv.writeTimeout()); err != nil {
		return err
	}
	return c.writeLocked(b, c.srv.writeTimeout())
}

// writeLocked sends one encoded message, c.wmu held, within timeout.
func (c *Conn) writeLocked(b []byte, timeout time.Duration) error {
	if c.suspended {
		c.keep(b)
		return nil
	}
	c.nc.SetWriteDeadline(time.Now().Add(timeout))
	if _, err := c.nc.Write(b); err != nil {
		// A partial write leaves the stream unusable. A connection that names a session is
		// held until resumed: the frame is kept or dropped.
		c.nc.Close()
		if c.hasSession && !c.ending && !c.done {
			c.suspended = true
			c.keep(b)
			return nil
		}
		return fmt.Errorf("write: %w", err)
	}
	return nil
}

func (s *Server) serveConn(nc net.Conn) {
	ctx, cancel := context.WithCancel(context.Background())
	c := &Conn{srv: s, nc: nc, remote: nc.RemoteAddr(), id: s.nextID.Add(1), ctx: ctx, cancel: cancel,
		resumed: make(chan transport, 1), halt: make(chan struct{})}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		nc.Close()
		cancel()
		return
	}
	if s.conns == nil {
		s.conns = make(map[*Conn]struct{})
	}
	s.conns[c] = struct{}{}
	s.mu.Unlock()

	opened, err := c.run()
	absorbed := errors.Is(err, errAbsorbed)
	if absorbed {
		err = nil
	} else {
		c.wmu.Lock()
		c.done = true // no resumption takes c over from here on: its transport would leak
		c.wmu.Unlock()
		c.Close()
	}
	cancel()
	s.forget(c)
	if err != nil {
		s.logf("cdti: connection %d from %v: %v", c.id, c.remote, err)
	}
	s.mu.Lock()
	delete(s.conns, c)
	if s.closed && err == nil {
		err = ErrServerClosed
	}
	s.mu.Unlock()
	if h, ok := s.Handler.(CloseHandler); ok && opened {
		h.Closed(c, err)
	}
	if absorbed {
		<-c.handedOver // the transport serves the held connection it resumed until then
	}
}

// run authenticates the connection and serves it. A panic outside a request (in the
// handshake, in an Opened handler) ends this connection only, as ErrInternal.
func (c *Conn) run() (opened bool, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: %v\n%s", ErrInternal, p, debug.Stack())
		}
	}()
	r := bufio.NewReaderSize(c.nc, 64<<10)
	if err := c.handshake(r); err != nil {
		return false, err
	}
	opened = true // from here on the CloseHandler must run, even if Opened panics
	if h, ok := c.srv.Handler.(OpenHandler); ok {
		h.Opened(c)
	}
	return true, c.serve(r)
}

func (c *Conn) serve(r *bufio.Reader) error {
	var cur transport // the transport read: the first one (no done), or one that resumed c
	defer func() {
		if cur.done != nil {
			close(cur.done)
		}
	}()
	for {
		b, err := ReadFrame(r)
		if err == nil && c.superseded(cur.gen) {
			// Another transport resumed c: what is still read on this one (a farewell of
			// the agent above that was lost, say) is not acted on.
			err = net.ErrClosed
		}
		if err != nil {
			t, ok := c.hold(cur.gen)
			if cur.done != nil {
				close(cur.done) // c no longer reads it, nor writes to it
			}
			cur = transport{}
			if ok { // resumed by another transport
				cur, r = t, t.r
				continue
			}
			if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		if h, _ := ParseHeader(b); h.Type == MsgSession && !c.srv.CNK {
			m, err := DecodeMessage(b)
			if err != nil {
				return err
			}
			absorbed, err := c.onSession(m.(*Session), r)
			if errors.Is(err, errSessionEnd) {
				return nil
			}
			if absorbed {
				return errAbsorbed
			}
			if err != nil {
				return err
			}
			continue
		}
		if h, _ := ParseHeader(b); c.srv.cnkUnsupported(h.Type) {
			if err := c.Send(&ErrorAck{h.Reply(UnsupportedType)}); err != nil {
				return err
			}
			continue
		}
		if x, ok := c.srv.Handler.(RelayHandler); ok {
			err = x.Relay(c, b)
		} else {
			err = c.handle(c.srv.Handler, b)
		}
		if err != nil {
			return err
		}
	}
}
