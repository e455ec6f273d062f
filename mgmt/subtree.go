package mgmt

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/hpcdap/hpcdap/cdti"
	"github.com/sourcegraph/jsonrpc2"
)

// A Subtree holds the management connections of one point of the tree overlay to the agents
// directly below it: an interior agent's to its children, the front end's to the root. It is
// how the management plane goes through the tree, so that the front end holds the root's
// connection alone, as it does on the data plane:
//
//   - output: each agent that forwards its ranks' output is subscribed to, and every chunk
//     reaches Output once (an agent above relays it to its own subscribers);
//   - shutdown: Shutdown asks each agent to end, and each asks the agents below it in turn
//     (an agent's Shutdown does), parents first;
//   - faults: an agent whose connection breaks before Shutdown or Close is lost, and the
//     agents below it are connected in its place, down past other lost ones, as the data
//     plane's cdti.Router adopts them. Their history of output is replayed on the new
//     subscription, and what was delivered already is dropped by its sequence number.
type Subtree struct {
	Token  string // the session token the agents require
	Client string // names the caller in the agents' logs
	// Output, when set, receives each output notification ("output") of every agent below,
	// once, in order for each rank.
	Output func(params json.RawMessage)
	Logf   func(format string, args ...any)

	mu     sync.Mutex
	links  map[string]*link // by the agent's address
	ending bool             // Shutdown or Close was called: a broken link is no loss
	// asked is the Shutdown under way, which an agent connected from then on (an adoption
	// that was under way) is asked for too; nil after Close.
	asked *shutdownCall

	omu  sync.Mutex     // orders the delivery of output
	seen map[int]uint64 // by rank, the sequence number of the last chunk delivered
}

// link is the management connection to one agent below.
type link struct {
	conn   *jsonrpc2.Conn
	route  cdti.Route
	hello  json.RawMessage // the agent's hello answer
	output bool            // subscribed to its output
}

// shutdownCall is the shutdown Shutdown asks for.
type shutdownCall struct {
	limit time.Duration
	kill  bool
}

// healDialTimeout bounds the connection of one agent while healing: well below the grace
// (cdti.DefaultResumeGrace) in which the agents below a lost one wait for it, so that those
// below another lost one are still reached in time.
const healDialTimeout = 3 * time.Second

// Connect connects to the agents of routes (each with the agents below it, for healing), and
// subscribes to their output when Output is set and the agent forwards it. An agent it cannot
// reach is an error that names it.
func (s *Subtree) Connect(ctx context.Context, routes []cdti.Route) error {
	errs := make([]error, len(routes))
	var wg sync.WaitGroup
	for i, rt := range routes {
		wg.Go(func() { errs[i] = s.connect(ctx, rt) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// connect connects to the agent of rt, which is known to no link yet.
func (s *Subtree) connect(ctx context.Context, rt cdti.Route) error {
	var raw json.RawMessage
	c, err := Dial(ctx, rt.Addr, s.Token, s.Client, jsonrpc2.HandlerWithError(s.handle), &raw)
	if err != nil {
		return fmt.Errorf("management: connect to agent %s: %w", rt.Addr, err)
	}
	var hello struct {
		Capabilities []string `json:"capabilities"`
	}
	json.Unmarshal(raw, &hello)
	l := &link{conn: c, route: rt, hello: raw}
	if slices.Contains(hello.Capabilities, "output") {
		if err := s.subscribe(ctx, l); err != nil {
			c.Close()
			return err
		}
	}
	s.mu.Lock()
	if s.links == nil {
		s.links = make(map[string]*link)
	}
	if known := s.links[rt.Addr] != nil; s.ending || known {
		asked := s.asked
		s.mu.Unlock()
		if asked != nil && !known {
			// Adopted while the subtree ends: it ends too, as it would have been asked.
			if err := s.askShutdown(c, asked.limit, asked.kill); err != nil {
				s.logf("management: agent %s: shutdown: %v", rt.Addr, err)
			}
		}
		c.Close()
		return nil
	}
	s.links[rt.Addr] = l
	s.mu.Unlock()
	go s.watch(l)
	return nil
}

// subscribe subscribes to the output of l's agent, if Output is set. The history starts after
// what was delivered: after a loss, or a reconnection, the agent replays only what did not
// come.
func (s *Subtree) subscribe(ctx context.Context, l *link) error {
	if s.Output == nil {
		return nil
	}
	s.omu.Lock()
	after := maps.Clone(s.seen)
	s.omu.Unlock()
	if err := l.conn.Call(ctx, "output.subscribe", map[string]any{"after": after}, nil); err != nil {
		return fmt.Errorf("management: agent %s: output.subscribe: %w", l.route.Addr, err)
	}
	s.mu.Lock()
	l.output = true
	s.mu.Unlock()
	return nil
}

// Subscribe subscribes to the output of the agent at addr, connected to by Connect, unless
// done already: for an agent whose hello did not offer output, but whose agents below do.
func (s *Subtree) Subscribe(ctx context.Context, addr string) error {
	s.mu.Lock()
	l := s.links[addr]
	done := l != nil && l.output
	s.mu.Unlock()
	if l == nil {
		return fmt.Errorf("management: agent %s: output.subscribe: not connected", addr)
	}
	if done {
		return nil
	}
	return s.subscribe(ctx, l)
}

// watch waits for l's connection to end; one that breaks while the subtree is in use is an
// agent lost, and the agents below it are connected in its place.
func (s *Subtree) watch(l *link) {
	<-l.conn.DisconnectNotify()
	s.mu.Lock()
	if s.links[l.route.Addr] == l {
		delete(s.links, l.route.Addr)
	}
	ending := s.ending
	s.mu.Unlock()
	if ending {
		return
	}
	// An agent that is still there (it dropped a subscriber that fell behind, say) is
	// connected again; one that is not is lost.
	ctx, cancel := context.WithTimeout(context.Background(), healDialTimeout)
	err := s.connect(ctx, l.route)
	cancel()
	if err == nil {
		s.logf("management: agent %s: connection broke: connected again", l.route.Addr)
		return
	}
	s.logf("management: lost agent %s (%v): connecting the %d agent(s) below it", l.route.Addr, err, len(l.route.Children))
	s.adopt(l.route.Children)
}

// adopt connects the agents of routes in place of a lost one, and those below any it cannot
// reach in its place.
func (s *Subtree) adopt(routes []cdti.Route) {
	var wg sync.WaitGroup
	for _, rt := range routes {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), healDialTimeout)
			err := s.connect(ctx, rt)
			cancel()
			if err != nil {
				s.logf("%v: connecting the %d agent(s) below it", err, len(rt.Children))
				s.adopt(rt.Children)
			}
		})
	}
	wg.Wait()
}

// handle receives the notifications of the agents below: their ranks' output, each chunk
// delivered once (a chunk of a sequence number delivered already is a replay's repeat).
func (s *Subtree) handle(_ context.Context, _ *jsonrpc2.Conn, req *jsonrpc2.Request) (any, error) {
	if req.Method == "output" && req.Notif && req.Params != nil && s.Output != nil {
		var head struct {
			Rank int    `json:"rank"`
			Seq  uint64 `json:"seq"`
		}
		if json.Unmarshal(*req.Params, &head) != nil {
			return nil, nil
		}
		s.omu.Lock()
		defer s.omu.Unlock()
		if head.Seq != 0 {
			if head.Seq <= s.seen[head.Rank] {
				return nil, nil
			}
			if s.seen == nil {
				s.seen = make(map[int]uint64)
			}
			s.seen[head.Rank] = head.Seq
		}
		s.Output(*req.Params)
		return nil, nil
	}
	if req.Notif {
		return nil, nil
	}
	return nil, &jsonrpc2.Error{Code: jsonrpc2.CodeMethodNotFound, Message: "management: " + s.Client + " serves no calls"}
}

// Call calls method on the agent at addr, connected to by Connect.
func (s *Subtree) Call(ctx context.Context, addr, method string, params, result any) error {
	s.mu.Lock()
	l := s.links[addr]
	s.mu.Unlock()
	if l == nil {
		return fmt.Errorf("management: agent %s: %s: not connected", addr, method)
	}
	if err := l.conn.Call(ctx, method, params, result); err != nil {
		return fmt.Errorf("management: agent %s: %s: %w", addr, method, err)
	}
	return nil
}

// Hello returns the hello answer of the agent at addr, connected to by Connect (nil if it
// is not).
func (s *Subtree) Hello(addr string) json.RawMessage {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l := s.links[addr]; l != nil {
		return l.hello
	}
	return nil
}

// Forwards reports whether an agent below forwards its ranks' output.
func (s *Subtree) Forwards() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range s.links {
		if l.output {
			return true
		}
	}
	return false
}

// ShutdownWait bounds the wait for an agent's answer to a shutdown.
const ShutdownWait = 5 * time.Second

// Shutdown asks every agent below to end, killing its processes or leaving them running
// (each asks the agents below it in turn), and closes the connections once each has
// answered. An agent that does not answer within ShutdownWait (frozen, or lost) cannot ask
// its own: they are asked in its place, down past others that do not answer. Nothing is
// healed from its start.
func (s *Subtree) Shutdown(kill bool) {
	limit := ShutdownWait
	links := s.end(&shutdownCall{limit: limit, kill: kill})
	var wg sync.WaitGroup
	for _, l := range links {
		wg.Go(func() {
			err := s.askShutdown(l.conn, limit, kill)
			l.conn.Close()
			if err != nil {
				s.logf("management: agent %s: shutdown: %v: asking the %d agent(s) below it", l.route.Addr, err, len(l.route.Children))
				s.shutdownBelow(l.route.Children, limit, kill)
			}
		})
	}
	wg.Wait()
}

// shutdownBelow asks the agents of routes to end, in place of an agent above them that did
// not answer, and those below any of them that does not answer in its place.
func (s *Subtree) shutdownBelow(routes []cdti.Route, limit time.Duration, kill bool) {
	var wg sync.WaitGroup
	for _, rt := range routes {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), limit)
			c, err := Dial(ctx, rt.Addr, s.Token, s.Client, jsonrpc2.HandlerWithError(s.handle), nil)
			cancel()
			if err == nil {
				err = s.askShutdown(c, limit, kill)
				c.Close()
			}
			if err != nil {
				s.logf("management: agent %s: shutdown: %v: asking the %d agent(s) below it", rt.Addr, err, len(rt.Children))
				s.shutdownBelow(rt.Children, limit, kill)
			}
		})
	}
	wg.Wait()
}

// askShutdown calls shutdown on c and waits at most limit for the answer.
func (s *Subtree) askShutdown(c *jsonrpc2.Conn, limit time.Duration, kill bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	return c.Call(ctx, "shutdown", map[string]bool{"kill": kill}, nil)
}

// Close drops every connection without asking anything; nothing is healed from its start.
func (s *Subtree) Close() {
	for _, l := range s.end(nil) {
		l.conn.Close()
	}
}

// end marks the subtree ending, with the shutdown asked (nil for none), and returns its
// links.
func (s *Subtree) end(asked *shutdownCall) []*link {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.ending {
		s.asked = asked
	}
	s.ending = true
	var out []*link
	for _, l := range s.links {
		out = append(out, l)
	}
	return out
}

func (s *Subtree) logf(format string, args ...any) {
	if s.Logf != nil {
		s.Logf(format, args...)
	}
}
