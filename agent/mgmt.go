package agent

import (
	"bufio"
	"context"
	"crypto/hmac"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hpcdap/hpcdap/cdti"
	"github.com/hpcdap/hpcdap/mgmt"
	"github.com/sourcegraph/jsonrpc2"
)

// The management plane is JSON-RPC 2.0 with Content-Length framing. Its first calls must be
// "hello.challenge" and "hello", which prove the session token by challenge and response as
// CDTI's Hello does (cdti.HelloProof; the token never travels); every other call before that
// fails and closes the connection. Process control never travels here: it is CDTI only
// (DESIGN decision 6).

// ChallengeParams opens the authentication of a management connection ("hello.challenge").
type ChallengeParams struct {
	Nonce []byte `json:"nonce"` // cdti.NonceSize random bytes of the caller's
}

// ChallengeResult answers "hello.challenge": the agent's nonce, and its proof that it holds the
// session token, cdti.HelloProof(token, cdti.HelloRoleAgent, caller's nonce, agent's nonce),
// which the caller checks before it proves anything.
type ChallengeResult struct {
	Nonce []byte `json:"nonce"`
	Proof []byte `json:"proof"`
}

// HelloParams completes the authentication ("hello"): the caller's proof,
// cdti.HelloProof(token, cdti.HelloRoleTool, agent's nonce, caller's nonce).
type HelloParams struct {
	Proof  []byte `json:"proof"`
	Client string `json:"client,omitempty"` // free-form name of the caller, for logs
}

// HelloResult identifies the agent.
type HelloResult struct {
	Node    string `json:"node"`    // host name of the node
	Pid     int    `json:"pid"`     // the agent's own process id
	Version string `json:"version"` // agent build version
	Ranks   int    `json:"ranks"`   // how many ranks the agent serves
	// Capabilities lists optional calls the agent serves: "output" (output.subscribe) when
	// the ranks' output is captured, "launcher" (launcher) when the agent has a launcher.
	Capabilities []string `json:"capabilities,omitempty"`
}

// RankInfo describes one rank the agent serves.
type RankInfo struct {
	Rank       int    `json:"rank"`
	Pid        int    `json:"pid"`
	Executable string `json:"executable"`
	State      string `json:"state"`                // "loaded" (held before its first instruction), "running", "stopped", "exited"
	ExitStatus *int   `json:"exitStatus,omitempty"` // POSIX wait status once exited
	Threads    int    `json:"threads"`
	// Launcher is set for a launcher spawned with SpawnSpec.Launcher: the process is served on
	// CDTI under this rank number but is not a rank of the job.
	Launcher bool `json:"launcher,omitempty"`
	// JobSize is the job's number of ranks as a rank caught by FollowExec was told it
	// (PMI_SIZE); 0 when unknown.
	JobSize int `json:"jobSize,omitempty"`
}

// HealthResult reports the agent's condition.
type HealthResult struct {
	UptimeSeconds float64 `json:"uptimeSeconds"`
	Ranks         int     `json:"ranks"`
	Alive         int     `json:"alive"`
	Tools         int     `json:"tools"` // attached CDTI tools over all processes
}

// ShutdownParams asks the agent to end: every tool is detached (its traps removed) and the
// processes are killed (Kill) or left running untouched.
type ShutdownParams struct {
	Kill bool `json:"kill"`
}

// maxMgmtMessage bounds one management message of an authenticated peer. The largest is the
// "tree" call to the root of a large job, which carries the address of every agent below it
// (about 40 bytes each), and an output.subscribe after a loss, with one number per rank.
const maxMgmtMessage = 32 << 20

// serveManagement runs the JSON-RPC plane on conn until it closes. authenticated is called once
// the hello is accepted (it gives back the connection's pre-authentication slot).
func (a *Agent) serveManagement(ctx context.Context, conn net.Conn, authenticated func()) {
	codec := newBoundedCodec(false)
	m := &mgmtConn{agent: a, name: conn.RemoteAddr().String(), onAuth: func() {
		codec.authed.Store(true)
		conn.SetReadDeadline(time.Time{})
		authenticated()
	}}
	if pc, ok := conn.(*peekedConn); ok {
		if tc, ok := pc.Conn.(*net.TCPConn); ok && a.output.sendBufferSize() > 0 {
			tc.SetWriteBuffer(a.output.sendBufferSize())
		}
	}
	stream := jsonrpc2.NewBufferedStream(conn, codec)
	rpc := jsonrpc2.NewConn(ctx, stream, m, jsonrpc2.SetLogger(a.logger))
	select {
	case <-rpc.DisconnectNotify():
	case <-ctx.Done():
		rpc.Close()
	}
	m.mu.Lock()
	sub, authed, client := m.sub, m.authed, m.client
	m.mu.Unlock()
	if sub != nil {
		a.output.unsubscribe(sub)
	}
	a.rankSubs.remove(rpc)
	switch {
	case authed && client == mgmt.ClientAgent:
		// The agent above: a link that broke is held for the grace in which the nearest
		// live ancestor connects in its place, as the data plane's session is.
		time.AfterFunc(a.parentGrace, a.frontEndClosed)
	case authed:
		a.frontEndClosed()
	}
}

type mgmtConn struct {
	agent  *Agent
	name   string // the peer's address, for logs
	onAuth func() // called once when the hello is accepted
	// The nonces of this connection's hello.challenge (nil before it).
	peerNonce, ownNonce []byte
	mu                  sync.Mutex
	authed              bool
	client              string     // the name the peer gave in its hello
	sub                 *outputSub // set by output.subscribe
}

// Handle answers one call. The answer is written before the connection is closed, so that a
// refused peer learns why.
func (m *mgmtConn) Handle(ctx context.Context, conn *jsonrpc2.Conn, req *jsonrpc2.Request) {
	defer func() {
		if r := recover(); r != nil {
			m.agent.logf("agent: management %s: internal error: %v\n%s", req.Method, r, debug.Stack())
			conn.Close()
		}
	}()
	result, hangUp, err := m.handle(req)
	var then func()
	switch acc := result.(type) {
	case shutdownAccepted:
		result, then = struct{}{}, acc.run
	case subscribeAccepted:
		// Subscribe after the answer is written: the notifications follow the result.
		result, then = struct{}{}, func() { m.subscribe(conn, acc.after) }
	case ranksSubscribeAccepted:
		result, then = struct{}{}, func() { m.agent.rankSubs.add(m.agent, conn) }
	}
	if !req.Notif {
		if err != nil {
			e, ok := err.(*jsonrpc2.Error)
			if !ok {
				e = &jsonrpc2.Error{Code: jsonrpc2.CodeInternalError, Message: err.Error()}
			}
			conn.ReplyWithError(ctx, req.ID, e)
		} else {
			conn.Reply(ctx, req.ID, result)
		}
	}
	if hangUp {
		conn.Close()
	}
	if then != nil {
		then()
	}
}

// shutdownAccepted is handle's answer to "shutdown": Handle replies first, then starts the
// shutdown, so that the caller learns the request was accepted before the agent goes away.
type shutdownAccepted struct{ run func() }

func (m *mgmtConn) handle(req *jsonrpc2.Request) (result any, hangUp bool, err error) {
	m.mu.Lock()
	authed := m.authed
	m.mu.Unlock()
	if !authed {
		// Refuse and hang up: an unauthenticated peer gets nothing more.
		return m.authenticate(req)
	}
	switch req.Method {
	case "hello":
		return m.agent.hello(), false, nil
	case "ranks":
		return m.agent.RankInfos(), false, nil
	case "health":
		return m.agent.Health(), false, nil
	case "output.subscribe":
		if !m.agent.forwardsOutput() {
			return nil, false, &jsonrpc2.Error{Code: jsonrpc2.CodeMethodNotFound,
				Message: "agent: output.subscribe: the ranks' output is not captured (spawn with --capture-output)"}
		}
		var p OutputSubscribeParams
		if err := decodeParams(req, &p); err != nil {
			return nil, false, err
		}
		return subscribeAccepted{after: p.After}, false, nil
	case "shutdown":
		var p ShutdownParams
		if err := decodeParams(req, &p); err != nil {
			return nil, false, err
		}
		m.agent.explicitShutdown()
		return shutdownAccepted{run: func() { go m.agent.Shutdown(p.Kill) }}, false, nil
	case "launcher":
		info, ok := m.agent.LauncherInfo()
		if !ok {
			return nil, false, &jsonrpc2.Error{Code: jsonrpc2.CodeMethodNotFound,
				Message: "agent: launcher: this agent serves no launcher (spawn with --launcher or --follow-exec)"}
		}
		return info, false, nil
	case "ranks.subscribe":
		return ranksSubscribeAccepted{}, false, nil
	case "tree":
		var p TreeParams
		if err := decodeParams(req, &p); err != nil {
			return nil, false, err
		}
		res, err := m.agent.setChildren(p.Children)
		if err != nil {
			return nil, false, err
		}
		return res, false, nil
	}
	return nil, false, &jsonrpc2.Error{Code: jsonrpc2.CodeMethodNotFound, Message: fmt.Sprintf("agent: unknown method %q", req.Method)}
}

// authenticate answers the calls of a connection that has not proved the token yet:
// "hello.challenge", then "hello". Anything else, or a failed proof, hangs up.
func (m *mgmtConn) authenticate(req *jsonrpc2.Request) (result any, hangUp bool, err error) {
	refuse := func(msg string) (any, bool, error) {
		return nil, true, &jsonrpc2.Error{Code: codeUnauthorized, Message: "agent: " + msg}
	}
	if req.Notif || m.agent.token == "" {
		return refuse("first calls must be hello.challenge and hello")
	}
	token := []byte(m.agent.token)
	switch {
	case req.Method == "hello.challenge" && m.ownNonce == nil:
		var p ChallengeParams
		if err := decodeParams(req, &p); err != nil {
			return nil, true, err
		}
		if len(p.Nonce) != cdti.NonceSize {
			return refuse(fmt.Sprintf("hello.challenge: nonce of %d bytes, want %d", len(p.Nonce), cdti.NonceSize))
		}
		m.peerNonce, m.ownNonce = p.Nonce, cdti.NewNonce()
		return ChallengeResult{Nonce: m.ownNonce, Proof: cdti.HelloProof(token, cdti.HelloRoleAgent, m.peerNonce, m.ownNonce)}, false, nil
	case req.Method == "hello" && m.ownNonce != nil:
		var p HelloParams
		if err := decodeParams(req, &p); err != nil {
			return nil, true, err
		}
		if !hmac.Equal(p.Proof, cdti.HelloProof(token, cdti.HelloRoleTool, m.ownNonce, m.peerNonce)) {
			return refuse("hello: bad token")
		}
		m.mu.Lock()
		m.authed, m.client = true, p.Client
		m.mu.Unlock()
		m.agent.logf("agent: management connection from %s (%q)", m.name, p.Client)
		m.onAuth()
		m.agent.frontEndOpened()
		return m.agent.hello(), false, nil
	}
	return refuse("first calls must be hello.challenge and hello")
}

// subscribeAccepted is handle's answer to "output.subscribe": Handle replies, then subscribes.
type subscribeAccepted struct{ after map[int]uint64 }

// subscribe makes conn an output subscriber, once.
func (m *mgmtConn) subscribe(conn *jsonrpc2.Conn, after map[int]uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.sub == nil {
		m.sub = m.agent.output.subscribe(conn, m.name, after)
	}
}

// codeUnauthorized is the JSON-RPC error code for a missing or wrong session token.
const codeUnauthorized = -32001

func decodeParams(req *jsonrpc2.Request, v any) error {
	if req.Params == nil {
		return nil
	}
	if err := json.Unmarshal(*req.Params, v); err != nil {
		return &jsonrpc2.Error{Code: jsonrpc2.CodeInvalidParams, Message: fmt.Sprintf("agent: %s: bad params: %v", req.Method, err)}
	}
	return nil
}

func (a *Agent) hello() HelloResult {
	h := HelloResult{Node: a.node, Pid: os.Getpid(), Version: a.version, Ranks: len(a.RankInfos())}
	if a.forwardsOutput() {
		h.Capabilities = []string{CapabilityOutput}
	}
	if _, ok := a.LauncherInfo(); ok {
		h.Capabilities = append(h.Capabilities, CapabilityLauncher)
	}
	return h
}

// forwardsOutput reports whether the agent serves output.subscribe: its ranks' output is
// captured, or an agent below forwards its own.
func (a *Agent) forwardsOutput() bool { return a.capturingOutput() || a.below.Forwards() }

// capturingOutput reports whether ranks were spawned with their output captured.
func (a *Agent) capturingOutput() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.capturing
}

// boundedCodec is Content-Length framing (as the Language Server Protocol uses) that refuses
// header lines and bodies beyond fixed bounds, so an unauthenticated peer cannot make the agent
// buffer without limit: until the connection has authenticated, a message may be at most
// maxPreAuthMessage bytes and must be a call (answered, if it is not a hello, with an error
// before the hang-up); anything else ends the connection.
type boundedCodec struct {
	authed atomic.Bool
}

// newBoundedCodec returns a codec; authed lifts the pre-authentication bounds (for a stream
// whose peer is known, such as the front end the agent dialled).
func newBoundedCodec(authed bool) *boundedCodec {
	c := &boundedCodec{}
	c.authed.Store(authed)
	return c
}

func (*boundedCodec) WriteObject(w io.Writer, obj any) error {
	data, err := json.Marshal(obj)
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintf(w, "Content-Length: %d\r\n\r\n", len(data)); err != nil {
		return err
	}
	_, err = w.Write(data)
	return err
}

func (c *boundedCodec) ReadObject(r *bufio.Reader, v any) error {
	limit := maxMgmtMessage
	authed := c.authed.Load()
	if !authed {
		limit = maxPreAuthMessage
	}
	length := -1
	for {
		line, err := readHeaderLine(r)
		if err != nil {
			return err
		}
		if line == "" {
			break
		}
		name, value, ok := strings.Cut(line, ":")
		if !ok {
			return fmt.Errorf("agent: management header %q: missing colon", line)
		}
		if strings.EqualFold(strings.TrimSpace(name), "Content-Length") {
			n, err := strconv.Atoi(strings.TrimSpace(value))
			if err != nil || n <= 0 || n > limit {
				return fmt.Errorf("agent: management message: bad Content-Length %q (limit %d)", strings.TrimSpace(value), limit)
			}
			length = n
		}
	}
	if length < 0 {
		return errors.New("agent: management message: no Content-Length header")
	}
	body := make([]byte, length)
	if _, err := io.ReadFull(r, body); err != nil {
		return err
	}
	if !authed {
		var call struct {
			ID     *json.RawMessage `json:"id"`
			Method string           `json:"method"`
		}
		if err := json.Unmarshal(body, &call); err != nil || call.ID == nil || call.Method == "" {
			return errors.New("agent: management message before hello: not a call")
		}
	}
	return json.Unmarshal(body, v)
}

// readHeaderLine reads one CRLF-terminated header line of at most 256 bytes.
func readHeaderLine(r *bufio.Reader) (string, error) {
	var b []byte
	for len(b) <= 256 {
		c, err := r.ReadByte()
		if err != nil {
			return "", err
		}
		if c == '\n' {
			if len(b) == 0 || b[len(b)-1] != '\r' {
				return "", errors.New(`agent: management header: line endings must be \r\n`)
			}
			return string(b[:len(b)-1]), nil
		}
		b = append(b, c)
	}
	return "", errors.New("agent: management header: line too long")
}

// uptime is how long the agent has been serving.
func (a *Agent) uptime() time.Duration { return time.Since(a.started) }
