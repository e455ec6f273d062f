package cdti

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"time"
)

// dialAgent connects to an agent, authenticates as a tool (the Hello exchange of
// Client.Hello) and names the tool session id (Session), returning the connection ready for
// relayed frames, its reader, and what the agent made of the session.
func dialAgent(ctx context.Context, addr string, token []byte, id [SessionIDSize]byte, flags SessionFlags) (net.Conn, *bufio.Reader, SessionState, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, nil, 0, &OpError{Op: "dial", Object: addr, Err: err}
	}
	return helloAgent(ctx, nc, addr, token, id, flags)
}

// helloAgent is dialAgent on a connection made: it closes nc if the exchange fails.
func helloAgent(ctx context.Context, nc net.Conn, addr string, token []byte, id [SessionIDSize]byte, flags SessionFlags) (net.Conn, *bufio.Reader, SessionState, error) {
	if dl, ok := ctx.Deadline(); ok {
		nc.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { nc.SetDeadline(time.Now()) }) // cancelled: stop now
	defer stop()
	fail := func(op string, err error) (net.Conn, *bufio.Reader, SessionState, error) {
		nc.Close()
		return nil, nil, 0, &OpError{Op: op, Object: addr, Err: err}
	}
	br := bufio.NewReaderSize(nc, 64<<10)
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
		return fail("hello", err)
	}
	if br.Buffered() > 0 {
		return fail("hello", errors.New("the agent sent a message before the tool's first request"))
	}
	b, err := Encode(&Session{Header: Header{Service: ServiceToolctl, Version: ProtocolVersion, SequenceID: 2}, Flags: flags, ID: id})
	if err != nil {
		return fail("session", err)
	}
	if _, err := nc.Write(b); err != nil {
		return fail("session", err)
	}
	rb, err := ReadFrame(br)
	if err != nil {
		return fail("session", err)
	}
	a, err := DecodeMessage(rb)
	if err != nil {
		return fail("session", err)
	}
	ack, ok := a.(*SessionAck)
	if !ok || ack.ReturnCode != Success {
		return fail("session", fmt.Errorf("the agent answered %v (%v)", a.MessageType(), a.Hdr().ReturnCode))
	}
	if !stop() {
		return fail("session", ctx.Err())
	}
	nc.SetDeadline(time.Time{})
	return nc, br, ack.State, nil
}
