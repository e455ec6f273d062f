package agent

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"time"
)

// cdtiFirstByte is the first byte of every CDTI message: the ToolctlService id in the header's
// service field. Anything else on a fresh connection is the JSON-RPC management plane.
const cdtiFirstByte = 0x05

// helloTimeout bounds how long a new connection may take to say which plane it speaks and to
// authenticate; an idle or slow peer cannot hold a connection slot open.
const helloTimeout = 10 * time.Second

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
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return fmt.Errorf("agent: accept on %s: %w", l.Addr(), err)
		}
		go a.ServeConn(ctx, conn)
	}
}

// ServeConn serves one connection, accepted or dialled, choosing the plane by its first byte.
func (a *Agent) ServeConn(ctx context.Context, conn net.Conn) {
	defer conn.Close()
	conn.SetReadDeadline(time.Now().Add(helloTimeout))
	br := bufio.NewReader(conn)
	first, err := br.Peek(1)
	if err != nil {
		a.logf("agent: connection from %s: %v", conn.RemoteAddr(), err)
		return
	}
	conn.SetReadDeadline(time.Time{})
	pc := &peekedConn{Conn: conn, r: br}
	if first[0] == cdtiFirstByte {
		a.serveCDTI(ctx, pc)
		return
	}
	a.serveManagement(ctx, pc)
}

// peekedConn is a connection whose first bytes were read into a buffer to choose the plane.
type peekedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *peekedConn) Read(p []byte) (int, error) { return c.r.Read(p) }
