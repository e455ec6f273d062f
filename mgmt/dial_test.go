package mgmt

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/sourcegraph/jsonrpc2"
)

// TestHelloToImpostor: a listener that does not hold the session token answers the challenge
// with a made-up proof; Hello gives up with ErrAgentUnproven and sends it nothing more (no
// proof, no token).
func TestHelloToImpostor(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var mu sync.Mutex
	var calls []string
	go func() {
		nc, err := l.Accept()
		if err != nil {
			return
		}
		h := jsonrpc2.HandlerWithError(func(_ context.Context, _ *jsonrpc2.Conn, req *jsonrpc2.Request) (any, error) {
			mu.Lock()
			calls = append(calls, req.Method)
			mu.Unlock()
			return map[string]any{"nonce": make([]byte, 32), "proof": []byte("trust me")}, nil
		})
		<-jsonrpc2.NewConn(context.Background(), jsonrpc2.NewBufferedStream(nc, jsonrpc2.VSCodeObjectCodec{}), h).DisconnectNotify()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	nc, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c := jsonrpc2.NewConn(ctx, jsonrpc2.NewBufferedStream(nc, jsonrpc2.VSCodeObjectCodec{}), jsonrpc2.HandlerWithError(
		func(context.Context, *jsonrpc2.Conn, *jsonrpc2.Request) (any, error) { return nil, nil }))
	err = Hello(ctx, c, "the-session-token", "test", nil)
	c.Close()
	if !errors.Is(err, ErrAgentUnproven) {
		t.Fatalf("hello to an impostor: %v, want ErrAgentUnproven", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(calls) != 1 || calls[0] != "hello.challenge" {
		t.Errorf("the impostor received %q, want only hello.challenge", calls)
	}
}
