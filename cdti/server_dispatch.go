package cdti

import (
	"fmt"
	"runtime/debug"
)

// HandleWith answers one request frame (exactly header.length bytes) with handler, which
// implements the handler interfaces as Server.Handler does, exactly as the Server answers it
// when no RelayHandler is set: a relay serves the ranks of its own node this way. An error
// means the connection must be closed.
func (c *Conn) HandleWith(handler any, frame []byte) error { return c.handle(handler, frame) }

// handle answers one request with handler hd. An error closes the connection.
func (c *Conn) handle(hd any, b []byte) error {
	h, _ := ParseHeader(b)
	if len(b) < ToolMessageSize {
		return malformed(h.Type, "%d bytes, shorter than a ToolMessage", len(b))
	}
	c.amu.Lock()
	c.inRequest = true
	c.amu.Unlock()
	reply, err := c.dispatchRecovered(hd, h, b)
	c.amu.Lock()
	c.inRequest = false
	after := c.after
	c.after = nil
	c.amu.Unlock()
	if err == nil && reply != nil {
		var out []byte
		if out, err = Encode(reply); err == nil {
			if c.srv.CNK {
				out = ShuffleAckPayloads(out, nil)
			}
			err = c.write(out)
		} else {
			err = fmt.Errorf("encode %v: %w", reply.MessageType(), err)
		}
	}
	for _, f := range after {
		f()
	}
	return err
}

// answer gives a handler's ack the request's header, keeping its return and error codes.
func answer(h Header, ack Message) Message {
	hd := ack.Hdr()
	rc, ec := hd.ReturnCode, hd.ErrorCode
	*hd = h.Reply(rc)
	hd.ErrorCode = ec
	return ack
}

var failedAck = Header{ReturnCode: RequestFailed}

// dispatchRecovered is dispatch, turning a panic into ErrInternal and an ErrorAck.
func (c *Conn) dispatchRecovered(hd any, h Header, b []byte) (reply Message, err error) {
	defer func() {
		if p := recover(); p != nil {
			c.srv.logf("cdti: connection %d from %v: %v request: panic: %v\n%s", c.id, c.nc.RemoteAddr(), h.Type, p, debug.Stack())
			c.Send(&ErrorAck{h.Reply(RequestFailed)})
			reply, err = nil, fmt.Errorf("%v request: %w: %v", h.Type, ErrInternal, p)
		}
	}()
	return c.dispatch(hd, h, b)
}

func (c *Conn) dispatch(hd any, h Header, b []byte) (Message, error) {
	if h.Service != ServiceToolctl {
		return &ErrorAck{h.Reply(WrongService)}, nil
	}
	switch h.Type {
	case MsgAttach:
		if x, ok := hd.(AttachHandler); ok {
			m, err := DecodeMessage(b)
			if err != nil {
				return nil, err
			}
			a := x.Attach(c, m.(*Attach))
			if a == nil {
				a = &AttachAck{Header: failedAck}
			}
			return answer(h, a), nil
		}
	case MsgDetach:
		if x, ok := hd.(DetachHandler); ok {
			m, err := DecodeMessage(b)
			if err != nil {
				return nil, err
			}
			a := x.Detach(c, m.(*Detach))
			if a == nil {
				a = &DetachAck{Header: failedAck}
			}
			return answer(h, a), nil
		}
	case MsgControl:
		if x, ok := hd.(ControlHandler); ok {
			m, err := DecodeMessage(b)
			if err != nil {
				return nil, err
			}
			a := x.Control(c, m.(*Control))
			if a == nil {
				a = &ControlAck{Header: failedAck}
			}
			return answer(h, a), nil
		}
	case MsgQuery, MsgUpdate:
		_, q := hd.(QueryHandler)
		_, u := hd.(UpdateHandler)
		if (h.Type == MsgQuery && q) || (h.Type == MsgUpdate && u) {
			return c.commands(hd, h, b)
		}
	default:
		if x, ok := hd.(MessageHandler); ok {
			m, err := DecodeMessage(b)
			if err != nil {
				return nil, err
			}
			return x.HandleMessage(c, m), nil
		}
	}
	return &ErrorAck{h.Reply(UnsupportedType)}, nil
}
