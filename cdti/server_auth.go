package cdti

import (
	"bufio"
	"crypto/hmac"
	"fmt"
	"time"
)

// maxHelloSize bounds a frame read before authentication: a Hello needs far less.
const maxHelloSize = 4096

// handshake authenticates the peer by challenge and response (see Hello): the first message
// must be a Hello with the tool's nonce, answered with the agent's nonce and proof, and the
// second a Hello with the tool's proof of the token.
func (c *Conn) handshake(r *bufio.Reader) error {
	to := c.srv.HandshakeTimeout
	if to <= 0 {
		to = 10 * time.Second
	}
	c.nc.SetReadDeadline(time.Now().Add(to))
	h, first, err := c.readHello(r, "first")
	if err != nil {
		return err
	}
	if len(first.Nonce) != NonceSize || len(first.Proof) != 0 {
		c.Send(&HelloAck{Header: h.Reply(ToolAuthorityError), ExtVersion: ExtensionVersion})
		return fmt.Errorf("handshake: %w: first Hello without a %d-byte nonce (extension version %d, this agent's %d)",
			ErrAuthentication, NonceSize, first.ExtVersion, ExtensionVersion)
	}
	mine := NewNonce()
	if err := c.Send(&HelloAck{Header: h.Reply(Success), ExtVersion: ExtensionVersion, Nonce: mine,
		Proof: HelloProof(c.srv.Token, HelloRoleAgent, first.Nonce, mine)}); err != nil {
		return fmt.Errorf("handshake: %w", err)
	}
	h, second, err := c.readHello(r, "second")
	if err != nil {
		return err
	}
	if !hmac.Equal(second.Proof, HelloProof(c.srv.Token, HelloRoleTool, mine, first.Nonce)) {
		c.Send(&HelloAck{Header: h.Reply(ToolAuthorityError), ExtVersion: ExtensionVersion})
		return fmt.Errorf("handshake: %w: wrong token", ErrAuthentication)
	}
	c.nc.SetReadDeadline(time.Time{})
	c.hello = second
	node := c.srv.Node[:min(len(c.srv.Node), MaxNodeNameSize)]
	return c.Send(&HelloAck{Header: h.Reply(Success), ExtVersion: ExtensionVersion, Node: node})
}

// readHello reads one handshake message, which must be a Hello of at most maxHelloSize bytes.
func (c *Conn) readHello(r *bufio.Reader, which string) (Header, *Hello, error) {
	hb, err := r.Peek(HeaderSize)
	if err != nil {
		return Header{}, nil, fmt.Errorf("handshake: %w", err)
	}
	h, _ := ParseHeader(hb)
	if h.Type != MsgHello {
		c.Send(&ErrorAck{h.Reply(ToolAuthorityError)})
		return h, nil, fmt.Errorf("handshake: %s message is %v, not Hello", which, h.Type)
	}
	if h.Length > maxHelloSize {
		return h, nil, fmt.Errorf("handshake: Hello of %d bytes (limit %d)", h.Length, maxHelloSize)
	}
	b, err := ReadFrame(r)
	if err != nil {
		return h, nil, fmt.Errorf("handshake: %w", err)
	}
	m, err := DecodeMessage(b)
	if err != nil {
		return h, nil, fmt.Errorf("handshake: %w", err)
	}
	return h, m.(*Hello), nil
}
