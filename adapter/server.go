package adapter

import (
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/hpcdap/hpcdap/adapter/dapclient"
	"github.com/hpcdap/hpcdap/cdti"
	"github.com/hpcdap/hpcdap/symbols"
)

// Config configures a Server.
type Config struct {
	// AgentPath is the hpcdap executable started as the local agent ("" means this executable).
	AgentPath string
	// Log receives diagnostics; nil discards them. It must never be the DAP stream.
	Log *log.Logger
	// LogDir is where agent logs go ("" means a fresh temporary directory per session).
	LogDir string
	// AnyUser accepts clients of other users; by default a connection is refused unless its
	// peer runs as the server's own user (hpcdap serves on shared login nodes, and a session
	// runs programs as the server's user).
	AnyUser bool
	// WriteTimeout bounds each write to a client; 0 means 30 s. A client that stops reading
	// for that long loses its session (its job ends as on a disconnect) instead of blocking
	// it for ever. Streams without deadlines (stdio) are not bounded.
	WriteTimeout time.Duration
	// SymbolOptions apply to every binary the server reads.
	SymbolOptions *symbols.Options
	// Symbols, when not nil, is the symbol cache to use, shared with other servers of the
	// process (each distinct binary is then read once for all of them).
	Symbols *symbols.Cache
}

// Server serves DAP sessions: one on stdio (`hpcdap dap`) or any number over TCP (`hpcdap
// serve`), each with its own job. It keeps what sessions share: the symbol cache, so that a
// binary debugged by several sessions (or by the child sessions a client starts with
// startDebugging) is read once.
//
// Goroutines: Serve runs the accept loop; every session runs a reader goroutine (framing and
// decoding, answering malformed input itself) and a dispatcher goroutine that handles requests
// in order. Requests that take long (stepping over a call, parallel stacks of many ranks) do
// not block notifications: each agent connection has its own goroutine delivering
// notifications to the job, which sends events through the session's send lock.
type Server struct {
	cfg  Config
	syms *symbols.Cache

	mu       sync.Mutex
	sessions map[*Conn]bool
	named    map[string]*share // the shared sessions, by name
	nextID   int               // the last Conn id given
	closed   bool
	ln       net.Listener
	wg       sync.WaitGroup
}

// NewServer returns a server with cfg.
func NewServer(cfg Config) *Server {
	if cfg.Log == nil {
		cfg.Log = log.New(io.Discard, "", 0)
	}
	syms := cfg.Symbols
	if syms == nil {
		syms = symbols.NewCache(cfg.SymbolOptions)
	}
	return &Server{cfg: cfg, syms: syms, sessions: map[*Conn]bool{}, named: map[string]*share{}}
}

func (s *Server) symbolCache() *symbols.Cache { return s.syms }

func (s *Server) writeTimeout() time.Duration {
	if s.cfg.WriteTimeout > 0 {
		return s.cfg.WriteTimeout
	}
	return 30 * time.Second
}

func (s *Server) logf(format string, args ...any) { s.cfg.Log.Printf(format, args...) }

// ServeConn runs one session on rwc (stdio, or a connection of this process's user) until it
// ends.
func (s *Server) ServeConn(rwc io.ReadWriteCloser) { s.serveConn(rwc, os.Getuid()) }

// serveConn runs one session on rwc, whose peer runs as uid (-1: not known).
func (s *Server) serveConn(rwc io.ReadWriteCloser, uid int) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		rwc.Close()
		return
	}
	s.nextID++
	sess := newConn(s, rwc, s.nextID, uid)
	s.sessions[sess] = true
	s.mu.Unlock()
	sess.run()
	s.mu.Lock()
	delete(s.sessions, sess)
	s.mu.Unlock()
}

// Serve accepts connections on l until Close, one session per connection.
func (s *Server) Serve(l net.Listener) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return errors.New("adapter: server closed")
	}
	s.ln = l
	s.mu.Unlock()
	var delay time.Duration
	for {
		conn, err := l.Accept()
		if err != nil {
			s.mu.Lock()
			closed := s.closed
			s.mu.Unlock()
			if closed {
				return nil
			}
			var ok bool
			if delay, ok = cdti.AcceptRetry(err, delay); ok {
				s.logf("adapter: accept on %s: %v; retrying in %v", l.Addr(), err, delay)
				time.Sleep(delay)
				continue
			}
			return fmt.Errorf("adapter: accept on %s: %w", l.Addr(), err)
		}
		delay = 0
		uid, err := peerUser(conn)
		if err == nil && uid != os.Getuid() {
			err = fmt.Errorf("connection from uid %d, not %d", uid, os.Getuid())
		}
		if err != nil {
			if !s.cfg.AnyUser {
				s.logf("adapter: refused %s: %v", conn.RemoteAddr(), err)
				conn.Close()
				continue
			}
			if uid < 0 {
				s.logf("adapter: %s: %v: it may not join shared sessions", conn.RemoteAddr(), err)
			}
		}
		s.wg.Go(func() { s.serveConn(conn, uid) })
	}
}

// Close stops accepting, ends every session (their jobs are terminated as a disconnect
// would) and waits for them.
func (s *Server) Close() {
	s.mu.Lock()
	s.closed = true
	ln := s.ln
	var live []*Conn
	for sess := range s.sessions {
		live = append(live, sess)
	}
	s.mu.Unlock()
	if ln != nil {
		ln.Close()
	}
	for _, sess := range live {
		sess.close()
	}
	s.wg.Wait()
}

// Listen opens the listener `hpcdap serve --listen` names: "unix:PATH" is a Unix socket made
// accessible to this user only (mode 0600; the server checks each peer's credentials too),
// anything else a TCP "host:port".
func Listen(addr string) (net.Listener, error) {
	path, ok := strings.CutPrefix(addr, "unix:")
	if !ok {
		return net.Listen("tcp", addr)
	}
	if path == "" {
		return nil, errors.New("adapter: listen on unix: no socket path")
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("adapter: listen on %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		return nil, fmt.Errorf("adapter: listen on %s: %w", path, err)
	}
	return l, nil
}

// Dial connects to a server listening on addr as Listen names it ("unix:PATH" or TCP
// "host:port").
func Dial(addr string) (net.Conn, error) {
	if path, ok := strings.CutPrefix(addr, "unix:"); ok {
		return net.Dial("unix", path)
	}
	return net.Dial("tcp", addr)
}

// ListSessions asks the server listening on addr for the shared sessions this process's user
// may join (`hpcdap serve --list`): a DAP client like any other, authenticated as any other
// (the server checks its peer's user), it sends initialize and hpcdap/sessions, then
// disconnects.
func ListSessions(addr string) ([]SessionInfo, error) {
	conn, err := Dial(addr)
	if err != nil {
		return nil, fmt.Errorf("list sessions: %w", err)
	}
	defer conn.Close()
	c := dapclient.New(conn, conn)
	if err := c.Call("initialize", map[string]any{"adapterID": "hpcdap", "clientID": "hpcdap-serve-list"}, nil); err != nil {
		return nil, fmt.Errorf("list sessions of %s: %w (is it an hpcdap server, and does it accept this user?)", addr, err)
	}
	var body SessionsBody
	if err := c.Call("hpcdap/sessions", nil, &body); err != nil {
		return nil, fmt.Errorf("list sessions of %s: %w", addr, err)
	}
	c.Request("disconnect", map[string]any{})
	return body.Sessions, nil
}
