package cdti

import (
	"context"
	"net"
)

// The tool's own Router. A tool that reaches a tree of agents through its root alone would
// lose every rank with the root: the root's children hold the session when their link up
// breaks, but only an agent above them could adopt them, and the root has none. DialTree
// puts a Router of the tool's own, in the tool's process, above the root: the tool's Client
// talks to it over an in-memory pipe (nothing listens), and it relays everything to the root
// as the root relays to its children. When the root is lost, this Router heals the tree as
// any Router does: it adopts the root's children (and on down past other lost agents), tells
// the tool which ranks it lost, and answers what was outstanding.
//
// Its link to the root names the session with SessionUnheld: the root names it on its own
// links, so that its children hold it, but does not hold its own connection, so that when the
// tool's process ends without a farewell (a crash), the root drops the tool at once and
// lets its ranks go everywhere, as it would if the tool had connected to it directly. The
// agents this Router adopts hold the session as links below the root do.

// DialTree connects a tool to the tree overlay of agents whose root is root (its address,
// ranks and the agents below it, as SetChildren takes them), through a Router of the tool's
// own (see above), and authenticates with opts.Token. The Client's errors name the root's
// address. Closing the Client ends the session: the tool's Router says farewell down the tree
// and ends, and from the moment Close is called it heals nothing, so that the agents' end
// that follows the session's (the root closing its link) is not taken for a loss.
func DialTree(ctx context.Context, root Route, opts ClientOptions) (*Client, error) {
	c, _, err := dialToolRouter(ctx, root, opts)
	return c, err
}

// dialToolRouter is DialTree, which also returns the tool's Router.
func dialToolRouter(ctx context.Context, root Route, opts ClientOptions) (*Client, *Router, error) {
	router := &Router{Token: opts.Token, top: true, opened: make(chan *Conn, 1)}
	router.SetChildren([]Route{root})
	srv := &Server{Handler: router, Token: opts.Token, Node: "tool"}
	tool, mine := net.Pipe()
	go func() {
		srv.ServeConn(mine) // returns once the Router has said farewell on its links
		srv.Close()
	}()
	// The session ends when the tool closes its end, at once for the Router, whose own end
	// of the pipe may be read only later (its reader busy with a request meanwhile).
	end := func() { router.ending.Store(true) }
	c := NewClient(namedConn{Conn: tool, remote: treeAddr(root.Addr), closing: end}, opts)
	if _, err := c.Hello(ctx, opts.Token); err != nil {
		c.Close()
		return nil, nil, err
	}
	// The root is dialed now, so that a root out of reach fails the dial, not the first
	// request. ctx's end ends the dial (closing the tool's connection ends the Router's
	// dials for it).
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	var err error
	select {
	case sc := <-router.opened:
		_, err = router.linkTo(sc, root.Addr, false, true)
	case <-ctx.Done():
	}
	if ctx.Err() != nil {
		err = &OpError{Op: "dial", Object: root.Addr, Err: ctx.Err()}
	}
	if err != nil {
		c.Close()
		return nil, nil, err
	}
	return c, router, nil
}

// isChild reports whether the agent at addr is one of the agents directly below this one, as
// SetChildren set them (not one adopted since).
func (r *Router) isChild(addr string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rt := range r.children {
		if rt.Addr == addr {
			return true
		}
	}
	return false
}

// namedConn is a connection whose peer is named by remote; closing, if not nil, is called
// before it closes.
type namedConn struct {
	net.Conn
	remote  net.Addr
	closing func()
}

func (c namedConn) RemoteAddr() net.Addr { return c.remote }

// Close calls closing, then closes the connection.
func (c namedConn) Close() error {
	if c.closing != nil {
		c.closing()
	}
	return c.Conn.Close()
}

// treeAddr is the address of a tree's root, as a Client's errors name it.
type treeAddr string

func (a treeAddr) Network() string { return "tcp" }
func (a treeAddr) String() string  { return string(a) }
