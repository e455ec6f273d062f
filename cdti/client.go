package cdti

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// ClientOptions configure a Client.
type ClientOptions struct {
	// ToolID and JobID fill the header of every request that leaves them zero.
	ToolID uint32
	JobID  uint64
	// Version is Header.Version; 0 means ProtocolVersion (6). A tool talking to a BG/Q system
	// that runs another version reads /jobs/<id>/tools/protocol and sets it here.
	Version uint8
	// Token is the session token that Dial sends in Hello.
	Token []byte
	// Serialize keeps at most one request outstanding on the connection: the next request is
	// written only once the previous one has been answered (or the connection has failed).
	// This is the discipline recommended for real toolctld sockets. A request whose context
	// ends while it is outstanding still holds the slot until its answer arrives.
	Serialize bool
	// Timeout bounds every request whose context has no deadline; 0 means no bound.
	Timeout time.Duration
	// NotifyLimit is the number of notifications the Client queues for a receiver that does
	// not keep up; 0 means 65536. Exceeding it fails the connection with ErrNotifyOverflow.
	NotifyLimit int
}

// Client is the tool side of one CDTI connection (to an hpcdap agent or to a toolctld
// socket). It is safe for concurrent use: requests are pipelined and matched to their acks by
// sequence id; unsolicited Notify messages are delivered on Notifications.
//
// ErrorAck policy: the header of an ErrorAck cannot be trusted (toolctld may echo a stale
// buffer), so an ErrorAck is never matched by its sequence id. It fails every request
// outstanding on the connection (with Serialize, exactly the one request in flight) with a
// *ReturnCodeError; acks that arrive later for those requests are discarded. An ErrorAck with
// nothing outstanding (toolctld's "too many connections") is remembered and reported as the
// cause when the connection then fails.
//
// Connection loss fails every outstanding request with the transport error, and every later
// request with the same error.
type Client struct {
	conn   net.Conn
	opts   ClientOptions
	remote string

	sent, received atomic.Uint64 // messages written and read (Messages)

	wmu sync.Mutex // serializes writes
	wdl time.Time  // the write deadline currently set on conn (guarded by wmu)

	mu       sync.Mutex
	seq      uint32
	calls    map[uint32]*call
	err      error // terminal error, set once
	done     chan struct{}
	lastErr  *ReturnCodeError // an ErrorAck that arrived with nothing outstanding
	slot     chan struct{}    // Serialize: a token per outstanding request
	closed   chan struct{}    // Close was called
	closeOne sync.Once

	nmu      sync.Mutex
	ncond    *sync.Cond
	nq       []queued
	nended   bool
	notifyCh chan *Notify
	// lastNotify is the number of the signal notification last delivered per rank (repeated);
	// owned by the reading goroutine.
	lastNotify map[uint32]uint32
}

type call struct {
	want MessageType
	ch   chan callResult // buffered: receives exactly one result
	slot bool            // holds the Serialize slot
	// parts are the messages received so far of an answer split over several (a CollectiveAck
	// or GatherStacksAck with More set).
	parts []Message
}

type callResult struct {
	m   Message
	err error
}

// NewClient starts a Client on an established connection. It sends nothing: call Hello first
// when the peer is an hpcdap agent (Dial does).
func NewClient(conn net.Conn, opts ClientOptions) *Client {
	if opts.Version == 0 {
		opts.Version = ProtocolVersion
	}
	if opts.NotifyLimit <= 0 {
		opts.NotifyLimit = 65536
	}
	c := &Client{
		conn: conn, opts: opts, calls: make(map[uint32]*call), done: make(chan struct{}),
		slot: make(chan struct{}, 1), closed: make(chan struct{}), notifyCh: make(chan *Notify),
	}
	if a := conn.RemoteAddr(); a != nil {
		c.remote = a.String()
	}
	c.ncond = sync.NewCond(&c.nmu)
	go c.readLoop()
	go c.pump()
	return c
}

// Dial connects to an hpcdap agent and authenticates with opts.Token.
func Dial(ctx context.Context, network, address string, opts ClientOptions) (*Client, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, network, address)
	if err != nil {
		return nil, &OpError{Op: "dial", Object: address, Err: err}
	}
	c := NewClient(conn, opts)
	if _, err := c.Hello(ctx, opts.Token); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// Notifications delivers the Notify messages that arrive on the connection, in arrival order.
// Buffering policy: the reader never blocks on this channel. Notifications wait in an
// unbounded-by-count-up-to-NotifyLimit queue until received; reaching the limit fails the
// connection (ErrNotifyOverflow) instead of dropping any. When the connection fails, the
// queued notifications are still delivered, then the channel is closed. Close discards the
// notifications not yet received and closes the channel.
func (c *Client) Notifications() <-chan *Notify { return c.notifyCh }

// Done is closed when the connection has failed or the Client has been closed.
func (c *Client) Done() <-chan struct{} { return c.done }

// Messages returns the number of messages the Client has written (requests) and read (acks
// and notifications, each part of a split answer counted) on its connection.
func (c *Client) Messages() (sent, received uint64) { return c.sent.Load(), c.received.Load() }

// Err returns why the connection ended, or nil while it is alive.
func (c *Client) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// RemoteAddr is the peer's address.
func (c *Client) RemoteAddr() net.Addr { return c.conn.RemoteAddr() }

// Close closes the connection. Outstanding requests fail with ErrClosed.
func (c *Client) Close() error {
	c.closeOne.Do(func() { close(c.closed) })
	c.fail(ErrClosed)
	return nil
}

// opName is the operation name used in errors for a request type.
func opName(t MessageType) string {
	switch t {
	case MsgAttach:
		return "attach"
	case MsgDetach:
		return "detach"
	case MsgControl:
		return "control"
	case MsgQuery:
		return "query"
	case MsgUpdate:
		return "update"
	case MsgHello:
		return "hello"
	}
	return t.String()
}

func rankObject(rank uint32) string { return "rank " + strconv.FormatUint(uint64(rank), 10) }

// RoundTrip sends request m and waits for its answer. The header's Service, Version, JobID and
// ToolID are filled from the options where m leaves them zero, and the sequence id is assigned
// by the Client (m itself is not modified). If the answer carries a failing ReturnCode, the
// answer is returned together with an error wrapping *ReturnCodeError.
func (c *Client) RoundTrip(ctx context.Context, m Message) (Message, error) {
	reply, err := c.roundTrip(ctx, m)
	if err != nil {
		err = &OpError{Op: opName(m.MessageType()), Object: rankObject(m.Hdr().Rank), Err: err}
	}
	return reply, err
}

// RoundTripEncoded is RoundTrip for a request already encoded (by EncodeLax, for instance, to
// test an agent with a request that breaks the Builder's rules). The header is completed in b
// as RoundTrip does.
func (c *Client) RoundTripEncoded(ctx context.Context, b []byte) (Message, error) {
	h, err := ParseHeader(b)
	if err == nil {
		var reply Message
		if reply, err = c.send(ctx, b); err == nil {
			return reply, nil
		} else if reply != nil {
			return reply, &OpError{Op: opName(h.Type), Object: rankObject(h.Rank), Err: err}
		}
	}
	return nil, &OpError{Op: opName(h.Type), Object: rankObject(h.Rank), Err: err}
}

// roundTrip is RoundTrip with unwrapped errors.
func (c *Client) roundTrip(ctx context.Context, m Message) (Message, error) {
	b, err := Encode(m)
	if err != nil {
		return nil, err
	}
	return c.send(ctx, b)
}

// send completes the header of the encoded request b, writes it and waits for its answer.
func (c *Client) send(ctx context.Context, b []byte) (Message, error) {
	if len(b) < ToolMessageSize || int(be.Uint32(b[20:])) != len(b) {
		return nil, fmt.Errorf("%w: request of %d bytes", ErrMalformed, len(b))
	}
	t := MessageType(be.Uint16(b[2:]))
	want := ackFor(t)
	if want == 0 {
		return nil, fmt.Errorf("%v is not a request", t)
	}
	if _, ok := ctx.Deadline(); !ok && c.opts.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.opts.Timeout)
		defer cancel()
	}
	cl := &call{want: want, ch: make(chan callResult, 1), slot: c.opts.Serialize}
	if cl.slot {
		select {
		case c.slot <- struct{}{}:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-c.done:
			return nil, c.Err()
		}
	}
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		c.release(cl)
		return nil, err
	}
	seq := c.nextSeq()
	c.calls[seq] = cl
	c.mu.Unlock()

	if b[0] == 0 {
		b[0] = byte(ServiceToolctl)
	}
	if b[1] == 0 {
		b[1] = c.opts.Version
	}
	be.PutUint32(b[8:], seq)
	if be.Uint64(b[24:]) == 0 {
		be.PutUint64(b[24:], c.opts.JobID)
	}
	if be.Uint32(b[32:]) == 0 {
		be.PutUint32(b[32:], c.opts.ToolID)
	}
	if err := c.write(ctx, b); err != nil {
		c.forget(seq, cl)
		return nil, err
	}
	select {
	case r := <-cl.ch:
		return r.m, r.err
	case <-ctx.Done():
		if !cl.slot {
			c.forget(seq, cl)
		}
		return nil, ctx.Err()
	}
}

// nextSeq returns an unused nonzero sequence id; c.mu is held.
func (c *Client) nextSeq() uint32 {
	for {
		c.seq++
		if _, busy := c.calls[c.seq]; c.seq != 0 && !busy {
			return c.seq
		}
	}
}

// forget removes a call that will not be answered (or whose answer nobody waits for).
func (c *Client) forget(seq uint32, cl *call) {
	c.mu.Lock()
	if c.calls[seq] == cl {
		delete(c.calls, seq)
		c.mu.Unlock()
		c.release(cl)
		return
	}
	c.mu.Unlock()
}

func (c *Client) release(cl *call) {
	if cl.slot {
		<-c.slot
	}
}

// write sends one message. The context's deadline and cancellation abort the write; a write
// cut off after its first byte leaves the stream unusable, so it fails the connection.
func (c *Client) write(ctx context.Context, b []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := ctx.Err(); err != nil {
		return err
	}
	dl, _ := ctx.Deadline()
	if !dl.Equal(c.wdl) {
		c.conn.SetWriteDeadline(dl)
		c.wdl = dl
	}
	var n int
	var err error
	if ctx.Done() == nil { // cannot be cancelled: no need to watch it
		n, err = c.conn.Write(b)
	} else {
		aborted := make(chan struct{})
		stop := context.AfterFunc(ctx, func() {
			c.conn.SetWriteDeadline(time.Unix(1, 0))
			close(aborted)
		})
		n, err = c.conn.Write(b)
		if !stop() {
			<-aborted // the deadline change must land before the next writer sets its own
			c.wdl = time.Unix(1, 0)
		}
	}
	if err != nil {
		ctxErr := ctx.Err()
		if ctxErr == nil && !dl.IsZero() && errors.Is(err, os.ErrDeadlineExceeded) {
			ctxErr = context.DeadlineExceeded // the socket deadline fired before the context's timer
		}
		if n > 0 || ctxErr == nil {
			c.fail(fmt.Errorf("write: %w", err))
		}
		if ctxErr != nil {
			return ctxErr
		}
		return err
	}
	c.sent.Add(1)
	return nil
}

// fail ends the connection with err (the first error wins) and fails every outstanding call.
func (c *Client) fail(err error) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	if c.lastErr != nil && !errors.Is(err, ErrClosed) {
		err = fmt.Errorf("%w, after %v", err, c.lastErr)
	}
	c.err = err
	calls := c.calls
	c.calls = nil
	close(c.done)
	c.mu.Unlock()
	c.conn.Close()
	for _, cl := range calls {
		cl.ch <- callResult{err: err}
	}
	c.nmu.Lock()
	c.nended = true
	c.ncond.Broadcast()
	c.nmu.Unlock()
}

// readLoop reads every message, delivering acks to their callers and notifications to the
// queue, until the connection fails.
func (c *Client) readLoop() {
	defer func() {
		// A message that breaks the decoder fails this connection, not the process.
		if p := recover(); p != nil {
			c.fail(fmt.Errorf("read: %w: %v\n%s", ErrInternal, p, debug.Stack()))
		}
	}()
	// A burst of acks and notifications (a node's ranks answering at once) is read in one
	// system call; a frame larger than the buffer is read past it.
	r := bufio.NewReaderSize(c.conn, 16<<10)
	for {
		b, err := ReadFrame(r)
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = ErrPeerClosed
			} else {
				err = fmt.Errorf("read: %w", err)
			}
			c.fail(err)
			return
		}
		c.received.Add(1)
		h, _ := ParseHeader(b) // ReadFrame guarantees 32 bytes
		switch {
		case h.Type == MsgNotify:
			m, err := DecodeMessage(b)
			if err != nil {
				c.fail(err)
				return
			}
			n := m.(*Notify)
			if c.repeated(n) {
				continue
			}
			if !c.pushNotify(n) {
				return
			}
		case h.Type == MsgExits:
			m, err := DecodeMessage(b)
			if err != nil {
				c.fail(err)
				return
			}
			if !c.pushQueued(queued{x: newExitsCursor(m.(*Exits))}) {
				return
			}
		case h.Type == MsgErrorAck:
			c.errorAck(h)
		case h.Type.IsAck():
			c.deliver(h, b)
		default:
			c.fail(fmt.Errorf("unexpected %v message from the peer", h.Type))
			return
		}
	}
}

// deliver hands an ack to the call waiting for its sequence id. Acks nobody waits for (their
// caller gave up, or an ErrorAck already failed them) are discarded.
func (c *Client) deliver(h Header, b []byte) {
	var part Message
	if moreFollows(h, b) {
		if m, err := DecodeMessage(b); err == nil {
			part = m
		}
	}
	c.mu.Lock()
	cl := c.calls[h.SequenceID]
	if cl != nil && part != nil && cl.want == h.Type && len(cl.parts) < maxCollectiveParts {
		cl.parts = append(cl.parts, part) // more of it follows
		c.mu.Unlock()
		return
	}
	if cl != nil {
		delete(c.calls, h.SequenceID)
	}
	c.mu.Unlock()
	if cl == nil {
		return
	}
	m, err := DecodeMessage(b)
	if err == nil && len(cl.parts) > 0 {
		if part != nil {
			m, err = nil, fmt.Errorf("%w: an answer in more than %d parts", ErrMalformed, maxCollectiveParts)
		} else {
			m = joinParts(append(cl.parts, m))
		}
	}
	switch {
	case err != nil:
	case h.Type != cl.want:
		m, err = nil, fmt.Errorf("%w: %v answered with %v", ErrMalformed, cl.want-1, h.Type)
	case h.ReturnCode != Success:
		err = &ReturnCodeError{Reply: h.Type, Code: h.ReturnCode, ErrorCode: h.ErrorCode}
	}
	cl.ch <- callResult{m: m, err: err}
	c.release(cl)
}

// errorAck applies the ErrorAck policy described on Client.
func (c *Client) errorAck(h Header) {
	c.mu.Lock()
	calls := c.calls
	c.calls = make(map[uint32]*call)
	if len(calls) == 0 {
		c.lastErr = &ReturnCodeError{Reply: MsgErrorAck, Code: h.ReturnCode, ErrorCode: h.ErrorCode,
			Note: "unsolicited"}
	}
	c.mu.Unlock()
	note := ""
	if len(calls) > 1 {
		note = fmt.Sprintf("not attributable: failed all %d outstanding requests", len(calls))
	}
	for _, cl := range calls {
		cl.ch <- callResult{err: &ReturnCodeError{Reply: MsgErrorAck, Code: h.ReturnCode, ErrorCode: h.ErrorCode,
			Note: note}}
		c.release(cl)
	}
}

// repeated reports whether n repeats the signal notification of its rank the Client delivered
// last: an agent numbers its signal notifications per rank (Header.SequenceID, 0 for none) and
// sends one again, marked Repeat and with its number, when the tool may have lost it
// (StopResendOnly). Only a marked notification is ever dropped: a CNK's counter says nothing
// of repeats. Runs on the reading goroutine only.
func (c *Client) repeated(n *Notify) bool {
	if n.Kind != NotifyTypeSignal || n.SequenceID == 0 {
		return false
	}
	if c.lastNotify == nil {
		c.lastNotify = make(map[uint32]uint32)
	}
	if n.Repeat && c.lastNotify[n.Rank] == n.SequenceID {
		return true
	}
	c.lastNotify[n.Rank] = n.SequenceID
	return false
}

// queued is a notification waiting for its receiver: a Notify, or the rest of an Exits.
type queued struct {
	n *Notify
	x *exitsCursor
}

// pushNotify queues a notification; it fails the connection when the queue is full.
func (c *Client) pushNotify(n *Notify) bool { return c.pushQueued(queued{n: n}) }

// pushQueued queues a notification, an Exits counting as one (it holds at most a message's
// bytes); it fails the connection when the queue is full.
func (c *Client) pushQueued(q queued) bool {
	c.nmu.Lock()
	if len(c.nq) >= c.opts.NotifyLimit {
		c.nmu.Unlock()
		c.fail(fmt.Errorf("%w: %d notifications not received", ErrNotifyOverflow, c.opts.NotifyLimit))
		return false
	}
	c.nq = append(c.nq, q)
	c.ncond.Signal()
	c.nmu.Unlock()
	return true
}

// pump moves queued notifications to the channel.
func (c *Client) pump() {
	defer close(c.notifyCh)
	for {
		c.nmu.Lock()
		for len(c.nq) == 0 && !c.nended {
			c.ncond.Wait()
		}
		if len(c.nq) == 0 {
			c.nmu.Unlock()
			return
		}
		n, more := c.nq[0].n, false
		if x := c.nq[0].x; x != nil {
			n, more = x.pop()
		}
		if !more {
			c.nq[0] = queued{}
			c.nq = c.nq[1:]
		}
		c.nmu.Unlock()
		select {
		case c.notifyCh <- n:
		case <-c.closed:
			return
		}
	}
}
