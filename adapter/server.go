package adapter

import (
	"bufio"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

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
	// AnyUser accepts TCP clients of other users; by default a connection is refused unless
	// its socket belongs to the server's own user (hpcdap serves on shared login nodes).
	AnyUser bool
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
	sessions map[*Session]bool
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
	return &Server{cfg: cfg, syms: syms, sessions: map[*Session]bool{}}
}

func (s *Server) symbolCache() *symbols.Cache { return s.syms }

func (s *Server) logf(format string, args ...any) { s.cfg.Log.Printf(format, args...) }

// ServeConn runs one session on rwc (stdio, or an accepted connection) until it ends.
func (s *Server) ServeConn(rwc io.ReadWriteCloser) {
	sess := newSession(s, rwc)
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
	for {
		conn, err := l.Accept()
		if err != nil {
			s.mu.Lock()
			closed := s.closed
			s.mu.Unlock()
			if closed {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			return fmt.Errorf("adapter: accept on %s: %w", l.Addr(), err)
		}
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
	var live []*Session
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

// sameUser checks that a TCP peer on this host runs as this process's user, reading the
// socket table of /proc/net/tcp{,6}: the connecting socket is the one whose local address is
// the peer's address.
func sameUser(conn net.Conn) error {
	ra, ok := conn.RemoteAddr().(*net.TCPAddr)
	if !ok {
		return nil // Unix sockets are protected by file permissions
	}
	la, _ := conn.LocalAddr().(*net.TCPAddr)
	uid, err := socketUID(ra, la)
	if err != nil {
		return err
	}
	if uid != os.Getuid() {
		return fmt.Errorf("connection from uid %d, not %d", uid, os.Getuid())
	}
	return nil
}

// socketUID finds the owner of the local socket bound to local and connected to remote.
func socketUID(local, remote *net.TCPAddr) (int, error) {
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		fh, err := os.Open(f)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) < 8 || fields[0] == "sl" {
				continue
			}
			if sockAddrMatches(fields[1], local) && (remote == nil || sockAddrMatches(fields[2], remote)) {
				uid, err := strconv.Atoi(fields[7])
				fh.Close()
				return uid, err
			}
		}
		fh.Close()
	}
	return 0, errors.New("peer socket not found in /proc/net/tcp: cannot tell its user")
}

// sockAddrMatches compares a /proc/net/tcp address ("0100007F:1F90", little-endian words) with
// a TCP address.
func sockAddrMatches(field string, a *net.TCPAddr) bool {
	host, port, ok := strings.Cut(field, ":")
	if !ok {
		return false
	}
	p, err := strconv.ParseUint(port, 16, 16)
	if err != nil || int(p) != a.Port {
		return false
	}
	raw, err := hex.DecodeString(host)
	if err != nil {
		return false
	}
	// The kernel prints each 32-bit word in host (little-endian) order.
	ip := make(net.IP, len(raw))
	for i := 0; i+4 <= len(raw); i += 4 {
		ip[i], ip[i+1], ip[i+2], ip[i+3] = raw[i+3], raw[i+2], raw[i+1], raw[i]
	}
	return ip.Equal(a.IP) || (len(ip) == 16 && a.IP.To4() != nil && ip.Equal(a.IP.To16()))
}
