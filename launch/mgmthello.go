package launch

import (
	"context"
	"crypto/hmac"
	"errors"
	"fmt"
	"net"

	"github.com/hpcdap/hpcdap/cdti"
	"github.com/sourcegraph/jsonrpc2"
)

// ErrAgentUnproven is the error of a management hello whose agent did not prove the session
// token: it may be anyone listening at the address, and was told nothing.
var ErrAgentUnproven = errors.New("the agent did not prove the session token")

// Hello authenticates a management connection to an agent by challenge and response
// ("hello.challenge", then "hello"; see the agent package): the agent proves it holds token
// first, then this side does, and the token itself never travels. client names the caller in
// the agent's log; result receives the agent's hello answer (nil discards it).
func Hello(ctx context.Context, c *jsonrpc2.Conn, token, client string, result any) error {
	mine := cdti.NewNonce()
	var ch struct {
		Nonce []byte `json:"nonce"`
		Proof []byte `json:"proof"`
	}
	if err := c.Call(ctx, "hello.challenge", map[string]any{"nonce": mine}, &ch); err != nil {
		return fmt.Errorf("hello.challenge: %w", err)
	}
	if len(ch.Nonce) != cdti.NonceSize || !hmac.Equal(ch.Proof, cdti.HelloProof([]byte(token), cdti.HelloRoleAgent, mine, ch.Nonce)) {
		return fmt.Errorf("hello: %w", ErrAgentUnproven)
	}
	proof := cdti.HelloProof([]byte(token), cdti.HelloRoleTool, ch.Nonce, mine)
	if err := c.Call(ctx, "hello", map[string]any{"proof": proof, "client": client}, result); err != nil {
		return fmt.Errorf("hello: %w", err)
	}
	return nil
}

// DialManagement connects to the management plane of the agent at addr, with h receiving its
// notifications, and authenticates (Hello) as client; result receives the agent's hello
// answer (nil discards it).
func DialManagement(ctx context.Context, addr, token, client string, h jsonrpc2.Handler, result any) (*jsonrpc2.Conn, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	c := jsonrpc2.NewConn(context.Background(), jsonrpc2.NewBufferedStream(nc, jsonrpc2.VSCodeObjectCodec{}), h)
	if err := Hello(ctx, c, token, client, result); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}
