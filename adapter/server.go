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
	return &Server{cfg: cfg, syms: syms, sessions: map[*Conn]bool{}}
}

func (s *Server) symbolCache() *symbols.Cache { return s.syms }

func (s *Server) writeTimeout() time.Duration {
	if s.cfg.WriteTimeout > 0 {
		return s.cfg.WriteTimeout
	}
	return 30 * time.Second
}

func (s *Server) logf(format string, args ...any) { s.cfg.Log.Printf(format, args...) }

// ServeConn runs one session on rwc (stdio, or an accepted connection) until it ends.
func (s *Server) ServeConn(rwc io.ReadWriteCloser) {
	sess := newConn(s, rwc)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		rwc.Close()
		return
	}
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
		if !s.cfg.AnyUser {
			if err := sameUser(conn); err != nil {
				s.logf("adapter: refused %s: %v", conn.RemoteAddr(), err)
				conn.Close()
				continue
			}
		}
		s.wg.Go(func() { s.ServeConn(conn) })
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
