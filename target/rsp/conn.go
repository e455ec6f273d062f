package rsp

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// conn is one connection to a stub: it frames and acknowledges packets. A reader goroutine
// acknowledges every good packet (unless no-ack mode is on) and hands it to route, in order;
// a nak makes it send the last packet again. Senders do not wait for the stub's ack: the
// reply (or, after a resumption, the stop reply) is what they wait for.
type conn struct {
	nc    net.Conn
	wmu   sync.Mutex // serialises writes: packets, acks and the interrupt byte
	noAck atomic.Bool
	route func([]byte) // called by the reader for each packet; must not block
	trace io.Writer

	last []byte // the last frame sent, for retransmission (guarded by wmu)
	naks int    // retransmissions of last

	done    chan struct{} // closed when the reader stops
	errOnce sync.Once
	err     error // why the reader stopped; read after done is closed
}

// retransmissions is how often a packet is resent after a nak before giving up.
const retransmissions = 3

func newConn(nc net.Conn, trace io.Writer) *conn {
	return &conn{nc: nc, trace: trace, done: make(chan struct{})}
}

// start begins reading; route receives every packet.
func (c *conn) start(route func([]byte)) {
	c.route = route
	go c.readLoop()
}

func (c *conn) readLoop() {
	r := bufio.NewReaderSize(c.nc, 64<<10)
	for {
		kind, data, err := readFrame(r)
		if err != nil {
			c.fail(err)
			return
		}
		switch kind {
		case frameAck:
			c.wmu.Lock()
			c.naks = 0
			c.wmu.Unlock()
		case frameNak:
			if err := c.resend(); err != nil {
				c.fail(err)
				return
			}
		case frameBadSum:
			c.logf("<- bad checksum: %q", data)
			if !c.noAck.Load() {
				c.write([]byte{'-'})
			}
		case frameNotify:
			// Asynchronous notifications belong to non-stop mode, which is never enabled.
			c.logf("<- %%%s (ignored)", data)
		case framePacket:
			c.logf("<- %s", data)
			if !c.noAck.Load() {
				if err := c.write([]byte{'+'}); err != nil {
					c.fail(err)
					return
				}
			}
			c.route(data)
		}
	}
}

// resend sends the last packet again after a nak.
func (c *conn) resend() error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.last == nil {
		return nil
	}
	if c.naks++; c.naks > retransmissions {
		return fmt.Errorf("stub refused a packet %d times", c.naks)
	}
	c.logf("-> (again) %s", c.last)
	_, err := c.nc.Write(c.last)
	return err
}

// fail records why the connection ended and closes it.
func (c *conn) fail(err error) {
	c.errOnce.Do(func() {
		if errors.Is(err, net.ErrClosed) {
			err = io.EOF
		}
		c.err = err
		c.nc.Close()
		close(c.done)
	})
}

// closed returns the error that ended the connection, or nil while it is open.
func (c *conn) closed() error {
	select {
	case <-c.done:
		return c.err
	default:
		return nil
	}
}

func (c *conn) write(b []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := c.nc.SetWriteDeadline(time.Now().Add(10 * time.Second)); err != nil {
		return err
	}
	_, err := c.nc.Write(b)
	return err
}

func (c *conn) logf(format string, args ...any) {
	if c.trace != nil {
		fmt.Fprintf(c.trace, time.Now().Format("05.000000")+" "+format+"\n", args...)
	}
}

// send writes the packet data. In ack mode it is sent again if the stub naks it.
func (c *conn) send(data []byte) error {
	frame := appendFrame(nil, data)
	c.logf("-> %s", data)
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.last, c.naks = frame, 0
	if err := c.nc.SetWriteDeadline(time.Now().Add(10 * time.Second)); err != nil {
		return err
	}
	_, err := c.nc.Write(frame)
	return err
}

// interrupt sends the interrupt byte 0x03, outside any packet.
func (c *conn) interrupt() error {
	c.logf("-> ^C")
	return c.write([]byte{0x03})
}

func (c *conn) close() {
	c.fail(io.EOF)
}
