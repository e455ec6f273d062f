package agent

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/hpcdap/hpcdap/cdti"
)

// cdtiFirstByte is the first byte of every CDTI message: the ToolctlService id in the header's
// service field. Anything else on a fresh connection is the JSON-RPC management plane.
const cdtiFirstByte = 0x05

// helloTimeout bounds how long a new connection may take to say which plane it speaks and to
// authenticate; an idle or slow peer cannot hold a connection slot open. The deadline runs
// from the accept until the hello is accepted, not only until the first byte.
const helloTimeout = 10 * time.Second

// maxPreAuthConns bounds the connections that have not authenticated yet; more are closed at
// once, so that peers without the token cannot use up the agent's memory or descriptors.
const maxPreAuthConns = 64

// maxPreAuthMessage bounds a message read before authentication (a hello, of either plane).
const maxPreAuthMessage = 4 << 10

// Serve accepts connections on l until ctx ends or Shutdown is called, serving both planes.
func (a *Agent) Serve(ctx context.Context, l net.Listener) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-ctx.Done():
		case <-a.done:
		}
		cancel() // ends the connections served from here
		l.Close()
	}()
	var delay time.Duration
	for {
		conn, err := l.Accept()
		if err != nil {
			select {
			case <-a.done:
				return nil
			default:
			}
			if ctx.Err() != nil {
				return nil
			}
			// Out of descriptors, say: the ranks stay served, new connections wait until
			// some close.
			if d, ok := cdti.AcceptRetry(err, delay); ok {
				if delay == 0 {
					a.logf("agent: accept on %s: %v; retrying until it passes", l.Addr(), err)
				}
				delay = d
				select {
				case <-time.After(delay):
				case <-ctx.Done():
				case <-a.done:
				}
				continue
			}
			return fmt.Errorf("agent: accept on %s: %w", l.Addr(), err)
		}
		if delay != 0 {
			a.logf("agent: accept on %s: accepting again", l.Addr())
			delay = 0
		}
		go a.ServeConn(ctx, conn)
	}
}

// ServeConn serves one connection, accepted or dialled, choosing the plane by its first byte.
// Until the peer has authenticated, the connection holds one of maxPreAuthConns slots, must
// finish within helloTimeout, and may send one message of at most maxPreAuthMessage bytes.
func (a *Agent) ServeConn(ctx context.Context, conn net.Conn) {
	defer conn.Close()
	if n := a.preAuth.Add(1); n > maxPreAuthConns {
		a.preAuth.Add(-1)
		a.logf("agent: connection from %s refused: %d connections already waiting to authenticate", conn.RemoteAddr(), n-1)
		return
	}
	release := sync.OnceFunc(func() { a.preAuth.Add(-1) })
	defer release()
	conn.SetReadDeadline(time.Now().Add(helloTimeout))
	br := bufio.NewReaderSize(conn, maxPreAuthMessage)
	first, err := br.Peek(1)
	if err != nil {
		a.logf("agent: connection from %s: %v", conn.RemoteAddr(), err)
		return
	}
	pc := &peekedConn{Conn: conn, r: br}
	if first[0] == cdtiFirstByte {
		// The whole Hello is read here, within the deadline and the size bound; the CDTI
		// server then checks it without waiting on the peer.
		if err := peekCDTIHello(br); err != nil {
			a.logf("agent: connection from %s: %v", conn.RemoteAddr(), err)
			return
		}
		release()
		a.serveCDTI(ctx, pc)
		return
	}
	a.serveManagement(ctx, pc, release)
}

// peekCDTIHello buffers a connection's first CDTI message, which must be a Hello of at most
// maxPreAuthMessage bytes.
func peekCDTIHello(br *bufio.Reader) error {
	hb, err := br.Peek(cdti.HeaderSize)
	if err != nil {
		return fmt.Errorf("cdti handshake: %w", err)
	}
	h, err := cdti.ParseHeader(hb)
	if err != nil {
		return fmt.Errorf("cdti handshake: %w", err)
	}
	if h.Type != cdti.MsgHello {
		return fmt.Errorf("cdti handshake: first message is %v, not Hello", h.Type)
	}
	if h.Length < cdti.HeaderSize || h.Length > maxPreAuthMessage {
		return fmt.Errorf("cdti handshake: Hello of %d bytes (limit %d)", h.Length, maxPreAuthMessage)
	}
	if _, err := br.Peek(int(h.Length)); err != nil {
		return fmt.Errorf("cdti handshake: %w", err)
	}
	return nil
}

// peekedConn is a connection whose first bytes were read into a buffer to choose the plane.
type peekedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *peekedConn) Read(p []byte) (int, error) { return c.r.Read(p) }
