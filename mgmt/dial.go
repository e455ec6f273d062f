// Package mgmt is the client side of the agents' management plane (JSON-RPC 2.0, served by
// package agent): Dial and Hello connect and authenticate to one agent, and a Subtree holds the
// connections of one point of the tree overlay to the agents below it, relaying their output,
// ending them, and connecting past a lost one.
package mgmt

import (
	"context"
	"crypto/hmac"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"time"

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

// Dial connects to the management plane of the agent at addr, with h receiving its
// notifications, and authenticates (Hello) as client; result receives the agent's hello
// answer (nil discards it).
func Dial(ctx context.Context, addr, token, client string, h jsonrpc2.Handler, result any) (*jsonrpc2.Conn, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	// A connection's end is told by DisconnectNotify and the calls' errors, not logged.
	c := jsonrpc2.NewConn(context.Background(), jsonrpc2.NewBufferedStream(nc, jsonrpc2.VSCodeObjectCodec{}), h,
		jsonrpc2.SetLogger(log.New(io.Discard, "", 0)))
	if err := Hello(ctx, c, token, client, result); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// ClientAgent is the client name an agent gives in its hello to the agents below it in the
// tree overlay (Subtree). An agent counts such a connection as its front end's, and holds it
// for cdti.DefaultResumeGrace when it breaks, as it holds a tool session: the nearest live
// ancestor of a lost agent connects in its place within that time.
const ClientAgent = "hpcdap-agent"

// TreeTimeout is the time of the management call "tree" through a tree of agents of any
// height: one waits cdti.SubtreeWait(TreeTimeout, height) for a subtree of that height.
const TreeTimeout = 60 * time.Second
