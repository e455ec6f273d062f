package agent

import (
	"context"
	"crypto/hmac"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/hpcdap/hpcdap/cdti"
	"github.com/sourcegraph/jsonrpc2"
)

// RegisterParams is the agent.register notification an agent started with --connect sends to
// the front end (see the package documentation for the rendezvous).
type RegisterParams struct {
	// Proof answers the front end's challenge: cdti.HelloProof(token, cdti.HelloRoleAgent, the
	// front end's nonce, the agent's), so that the front end can tell its agents from strays
	// while the token never travels.
	Proof   []byte     `json:"proof"`
	Node    string     `json:"node"`           // the node name
	Address string     `json:"address"`        // host:port of the agent's listener, both planes
	Pid     int        `json:"pid"`            // the agent's process id
	Ranks   []RankInfo `json:"ranks"`          // the ranks it serves
	Gone    []GoneRank `json:"gone,omitempty"` // ranks it was given whose process was gone
	// ToolID is the CDTI tool id requests through this agent must carry (a CIOS tool's
	// BG_TOOLID, which toolctld knows it by); 0: any.
	ToolID uint32 `json:"toolId,omitempty"`
	// JobID is the job id requests through this agent must carry (a CIOS tool's BG_JOBID);
	// 0: the agent takes any.
	JobID uint64 `json:"jobId,omitempty"`
}

// ListenToward opens the listener of an agent started with --connect: an ephemeral TCP port
// on the local address this host reaches frontEnd from (the route's source address), not on
// every interface. A front end on this host thus gets an agent listening on loopback only, and
// a remote one never hears of a loopback address.
func ListenToward(frontEnd string) (net.Listener, error) {
	probe, err := net.Dial("udp", frontEnd) // sends nothing: it only picks the route
	if err != nil {
		return nil, fmt.Errorf("agent: route to the front end %s: %w", frontEnd, err)
	}
	ip := probe.LocalAddr().(*net.UDPAddr).IP
	probe.Close()
	l, err := net.Listen("tcp", net.JoinHostPort(ip.String(), "0"))
	if err != nil {
		return nil, fmt.Errorf("agent: listen toward the front end %s: %w", frontEnd, err)
	}
	return l, nil
}

// ChallengeMethod is the JSON-RPC call that opens a registration: params {nonce}, the agent's
// nonce; result {nonce, proof}, the front end's nonce and its proof of the session token,
// cdti.HelloProof(token, cdti.HelloRoleTool, agent's nonce, front end's nonce).
const ChallengeMethod = "agent.challenge"

// RegisterMethod is the JSON-RPC method of the registration notification.
const RegisterMethod = "agent.register"

// Register tells the front end listening at frontEnd where this agent listens: it dials
// frontEnd, checks the front end's proof of the session token (agent.challenge), sends one
// agent.register notification with its own proof and hangs up. listen is the agent's own
// listener address; when its host is unspecified (0.0.0.0 or ::), the address is taken from
// the local side of the connection to the front end, the interface the front end can reach.
// Connection failures are retried for up to Config.RegisterTimeout (or until ctx ends), so that
// agents may start before the front end listens; then Register gives up with an error naming
// the front end, the attempts and the last failure.
func (a *Agent) Register(ctx context.Context, frontEnd string, listen net.Addr) error {
	tcp, ok := listen.(*net.TCPAddr)
	if !ok {
		return fmt.Errorf("agent: register with %s: listener %v is not TCP", frontEnd, listen)
	}
	limit := a.registerLimit
	if limit <= 0 {
		limit = 2 * time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	delay := 50 * time.Millisecond
	for attempt := 1; ; attempt++ {
		err := a.registerOnce(ctx, frontEnd, tcp)
		if err == nil {
			if a.endWithFE {
				a.expectFrontEnd(limit)
			}
			return nil
		}
		a.logf("agent: register with %s: %v", frontEnd, err)
		select {
		case <-ctx.Done():
			return fmt.Errorf("agent: register with %s: gave up after %d attempts: %w (last error: %v)", frontEnd, attempt, ctx.Err(), err)
		case <-time.After(delay):
		}
		delay = min(2*delay, 2*time.Second)
	}
}

func (a *Agent) registerOnce(ctx context.Context, frontEnd string, listen *net.TCPAddr) error {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", frontEnd)
	if err != nil {
		return err
	}
	defer nc.Close()
	host := listen.IP
	if host == nil || host.IsUnspecified() {
		if la, ok := nc.LocalAddr().(*net.TCPAddr); ok {
			host = la.IP
		}
	}
	params := RegisterParams{
		Node:    a.node,
		Address: net.JoinHostPort(host.String(), strconv.Itoa(listen.Port)),
		Pid:     os.Getpid(),
		Ranks:   a.RankInfos(),
		Gone:    a.Gone(),
	}
	if a.cios != nil {
		params.ToolID, params.JobID = a.cios.job.ToolID, a.cios.job.ID
	}
	// The agent dialled the front end: its messages are not a stranger's.
	rpc := jsonrpc2.NewConn(ctx, jsonrpc2.NewBufferedStream(nc, newBoundedCodec(true)), jsonrpc2.HandlerWithError(
		func(context.Context, *jsonrpc2.Conn, *jsonrpc2.Request) (any, error) { return nil, nil }))
	defer rpc.Close()
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	// The front end proves the token first: a listener without it learns nothing.
	mine := cdti.NewNonce()
	var ch struct {
		Nonce []byte `json:"nonce"`
		Proof []byte `json:"proof"`
	}
	if err := rpc.Call(ctx, ChallengeMethod, map[string]any{"nonce": mine}, &ch); err != nil {
		return fmt.Errorf("%s: %w", ChallengeMethod, err)
	}
	if len(ch.Nonce) != cdti.NonceSize || !hmac.Equal(ch.Proof, cdti.HelloProof([]byte(a.token), cdti.HelloRoleTool, mine, ch.Nonce)) {
		return errors.New("the front end did not prove the session token")
	}
	params.Proof = cdti.HelloProof([]byte(a.token), cdti.HelloRoleAgent, ch.Nonce, mine)
	return rpc.Notify(ctx, RegisterMethod, params)
}
