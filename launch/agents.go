package launch

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
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hpcdap/hpcdap/cdti"
	"github.com/hpcdap/hpcdap/rankset"
)

// AgentEndpoint is one node agent and the ranks it serves.
type AgentEndpoint struct {
	Host  string // the agent's node name
	Addr  string // host:port of its listener (CDTI and management)
	Token string // the session token it requires
	Pid   int    // the agent's process id on its node
	Ranks []int  // ranks served, ascending
	// ToolID and JobID are the CDTI tool and job ids the agent's ranks must be addressed with
	// (a BG/Q CIOS tool's, given by jobctld); 0: the debugger's own.
	ToolID uint32
	JobID  uint64
	// Owned: the agent belongs to the job (it also follows the launcher, HoldByAgent) and ends
	// with it (App.Deregister); a debugger closes its connections instead of shutting it down.
	Owned bool
	// Agent is the agent process when this front end started it as its child (LocalSpawn,
	// LocalAttach), nil otherwise.
	Agent *AgentProcess
	// Output, when not nil, carries the combined stdout and stderr of the ranks the agent
	// spawned (an agent without per-rank output forwarding writes them to its own stderr).
	Output io.Reader
}

// Agents are the node agents of a job: an App's, started in one session, or the local ones
// of LocalSpawn and LocalAttach.
type Agents struct {
	Size      int             // ranks in the job
	Endpoints []AgentEndpoint // in host order of the placement
	Session   *Session
	Daemons   *DaemonSet
	Token     string
}

// Stop ends the agents (they detach from every rank, removing their traps).
func (g *Agents) Stop() {
	if g.Daemons != nil {
		g.Daemons.Stop(10 * time.Second)
	}
}

// registration is the agent.register notification of an agent started with --connect
// (package agent's RegisterParams, read here from the wire). Proof answers this front end's
// challenge: cdti.HelloProof(token, cdti.HelloRoleAgent, front end's nonce, agent's nonce).
type registration struct {
	Proof   []byte `json:"proof"`
	Node    string `json:"node"`
	Address string `json:"address"`
	Pid     int    `json:"pid"`
	Ranks   []struct {
		Rank int `json:"rank"`
		Pid  int `json:"pid"`
	} `json:"ranks"`
	Gone []struct {
		Rank  int    `json:"rank"`
		Pid   int    `json:"pid"`
		Error string `json:"error"`
	} `json:"gone"`
	ToolID uint32 `json:"toolId"`
	JobID  uint64 `json:"jobId"`
}

// maxRegistration bounds a registration message: it lists at most 64 ranks.
const maxRegistration = 64 << 10

// readRPC reads one JSON-RPC 2.0 message with Content-Length framing into msg. Every size is
// bounded: the listener accepts anyone.
func readRPC(r *bufio.Reader, msg any) error {
	length := -1
	for {
		line, err := r.ReadSlice('\n')
		if err != nil {
			return fmt.Errorf("header: %w", err)
		}
		s := strings.TrimRight(string(line), "\r\n")
		if s == "" {
			break
		}
		if v, ok := strings.CutPrefix(strings.ToLower(s), "content-length:"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil || n < 0 || n > maxRegistration {
				return fmt.Errorf("content length %q", strings.TrimSpace(v))
			}
			length = n
		}
	}
	if length < 0 {
		return errors.New("no Content-Length")
	}
	body := make([]byte, length)
	if _, err := io.ReadFull(r, body); err != nil {
		return fmt.Errorf("body: %w", err)
	}
	return json.Unmarshal(body, msg)
}

// rpcCall is the envelope of a JSON-RPC 2.0 call or notification.
type rpcCall struct {
	Version string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id,omitempty"`
	Method  string          `json:"method"`
	Params  json.RawMessage `json:"params"`
}

// readRegistration runs the front end's side of an agent's registration: the agent's
// "agent.challenge" call, answered with this front end's nonce and its proof of token (role
// cdti.HelloRoleTool), then the agent.register notification, whose proof must answer that
// nonce. The token never travels; an agent checks the front end's proof before it says more.
func readRegistration(rw io.Writer, r *bufio.Reader, token string) (*registration, error) {
	var ch rpcCall
	if err := readRPC(r, &ch); err != nil {
		return nil, err
	}
	var cp struct {
		Nonce []byte `json:"nonce"`
	}
	if ch.Version != "2.0" || ch.Method != "agent.challenge" || len(ch.ID) == 0 || json.Unmarshal(ch.Params, &cp) != nil ||
		len(cp.Nonce) != cdti.NonceSize {
		return nil, fmt.Errorf("unexpected first call %q (jsonrpc %q)", ch.Method, ch.Version)
	}
	mine := cdti.NewNonce()
	answer, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": ch.ID,
		"result": map[string]any{"nonce": mine, "proof": cdti.HelloProof([]byte(token), cdti.HelloRoleTool, cp.Nonce, mine)}})
	if _, err := fmt.Fprintf(rw, "Content-Length: %d\r\n\r\n%s", len(answer), answer); err != nil {
		return nil, fmt.Errorf("answer the challenge: %w", err)
	}
	var msg rpcCall
	if err := readRPC(r, &msg); err != nil {
		return nil, err
	}
	if msg.Version != "2.0" || msg.Method != "agent.register" {
		return nil, fmt.Errorf("unexpected call %q (jsonrpc %q)", msg.Method, msg.Version)
	}
	var reg registration
	if err := json.Unmarshal(msg.Params, &reg); err != nil {
		return nil, fmt.Errorf("agent.register params: %w", err)
	}
	if !hmac.Equal(reg.Proof, cdti.HelloProof([]byte(token), cdti.HelloRoleAgent, mine, cp.Nonce)) {
		return nil, errors.New("agent.register: wrong proof of the session token")
	}
	return &reg, nil
}

// rendezvous collects agent registrations carrying the right token. A registration waits
// for the front end to take it (or for close): however many agents register at once, none
// is dropped.
type rendezvous struct {
	l      net.Listener
	token  string
	regs   chan *registration
	closed chan struct{}
	wg     sync.WaitGroup
}

func listenRendezvous(token string) (*rendezvous, error) {
	l, err := net.Listen("tcp", ":0")
	if err != nil {
		return nil, fmt.Errorf("launch: rendezvous listener: %w", err)
	}
	rv := &rendezvous{l: l, token: token, regs: make(chan *registration, 64), closed: make(chan struct{})}
	rv.wg.Go(rv.accept)
	return rv, nil
}

func (rv *rendezvous) accept() {
	for {
		nc, err := rv.l.Accept()
		if err != nil {
			return
		}
		rv.wg.Go(func() {
			defer nc.Close()
			nc.SetReadDeadline(time.Now().Add(10 * time.Second))
			reg, err := readRegistration(nc, bufio.NewReaderSize(io.LimitReader(nc, 2*maxRegistration+4096), 4096), rv.token)
			if err != nil {
				return
			}
			select {
			case rv.regs <- reg:
			case <-rv.closed:
			}
		})
	}
}

func (rv *rendezvous) port() int { return rv.l.Addr().(*net.TCPAddr).Port }

func (rv *rendezvous) close() {
	close(rv.closed)
	rv.l.Close()
	rv.wg.Wait()
}

// advertiseHost is the address agents on nodes use to reach this front end: the source
// address of this host's route to a node of the job, a non-loopback one if any node is
// elsewhere (a host name that resolves to loopback, as Debian's 127.0.1.1 does, must not send
// remote agents to their own loopback, where anyone may listen and would receive the token).
func (fe *Frontend) advertiseHost(nodes []string) (string, error) {
	if fe.opts.AdvertiseHost != "" {
		return fe.opts.AdvertiseHost, nil
	}
	if fe.wlm.Name() == "local" && onlyThisHost(nodes) {
		return "127.0.0.1", nil
	}
	if na, ok := fe.wlm.(interface{ nodeAddrs([]string) []string }); ok {
		nodes = na.nodeAddrs(nodes) // where the workload manager reaches them
	}
	var loopback string
	for _, n := range nodes {
		ip := routeSource(n)
		switch {
		case ip == nil:
		case !ip.IsLoopback():
			return ip.String(), nil
		default:
			loopback = ip.String() // this node is this host
		}
	}
	if loopback != "" {
		return loopback, nil
	}
	if h, err := os.Hostname(); err == nil {
		if addrs, err := net.LookupHost(h); err == nil {
			for _, a := range addrs {
				if ip := net.ParseIP(a); ip != nil && !ip.IsLoopback() {
					return a, nil
				}
			}
		}
	}
	return "", fmt.Errorf("launch: no address of this host reaches the nodes %s (their names resolve to none, and this host's name only to loopback): set HPCDAP_FRONTEND_HOST",
		strings.Join(nodes, ","))
}

// onlyThisHost reports whether every one of nodes is this host (by name).
func onlyThisHost(nodes []string) bool {
	here, _ := os.Hostname()
	for _, n := range nodes {
		if n != here && n != "localhost" {
			return false
		}
	}
	return true
}

// routeSource returns the local address this host's route to host uses, or nil when host does
// not resolve. Nothing is sent.
func routeSource(host string) net.IP {
	c, err := net.Dial("udp", net.JoinHostPort(host, "9"))
	if err != nil {
		return nil
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).IP
}

// StartAgents starts one hpcdap agent per node of the job, each serving its node's ranks in
// attach mode (the agents trace a rank only once a tool attaches to it). The hpcdap binary is
// shipped into a new session, the agents go through the workload manager, and each registers
// with a rendezvous listener of this front end. StartAgents returns when every node's agent
// has registered; otherwise it returns the agents that did and an error naming the nodes
// that did not within the time limit. A job whose ranks were caught by a following agent
// (HoldByAgent) has its node agent already: StartAgents returns it, Owned, and starts none.
func (a *App) StartAgents(ctx context.Context) (*Agents, error) {
	if err := a.check(); err != nil {
		return nil, err
	}
	place := a.Placement()
	if place.Size == 0 {
		return nil, errors.New("launch: start agents: the job has no ranks")
	}
	if sj, ok := a.job.(interface{ nodeAgents() []AgentEndpoint }); ok {
		// The agent that caught the ranks serves them already.
		return &Agents{Size: place.Size, Endpoints: sj.nodeAgents()}, nil
	}
	s, err := a.NewSession(ctx)
	if err != nil {
		return nil, err
	}
	token := newToken()
	rv, err := listenRendezvous(token)
	if err != nil {
		return nil, err
	}
	defer rv.close()
	m := s.NewManifest()
	if err := m.AddBinary(a.fe.opts.AgentPath); err != nil {
		return nil, err
	}
	byHost := map[string]HostPlacement{}
	for _, h := range place.Hosts {
		byHost[h.Host] = h
	}
	advertise, err := a.fe.advertiseHost(place.HostNames())
	if err != nil {
		return nil, err
	}
	front := net.JoinHostPort(advertise, strconv.Itoa(rv.port()))
	// --supervise: an agent killed outright leaves no trap in the ranks it attached to.
	argv := []string{a.fe.opts.AgentPath, "agent", "--connect", front, "--staging", s.Dir, "--supervise"}
	if per := a.fe.opts.RanksPerAgent; per > 0 {
		argv = append(argv, "--ranks-per-agent", strconv.Itoa(per))
	}
	perHost := func(host string) []string {
		var pairs []string
		h := byHost[host]
		for i, r := range h.Ranks {
			pairs = append(pairs, strconv.Itoa(r)+"="+strconv.Itoa(h.Pids[i]))
		}
		return []string{"--attach", strings.Join(pairs, ",")}
	}
	t0 := time.Now()
	a.fe.progressf("launch: %s: starting agents on %d node(s)", a.ID(), len(place.Hosts))
	d, err := a.startAgentDaemons(ctx, s, m, argv, []string{"HPCDAP_TOKEN=" + token}, perHost, place.HostNames())
	if err != nil {
		return nil, err
	}
	g := &Agents{Size: place.Size, Session: s, Daemons: d, Token: token}
	// A node with more ranks than one agent serves has an agent per group of them, each
	// registering on its own: a node is in when its agents serve all its ranks.
	got := map[string][]AgentEndpoint{}
	served := map[string]int{}
	nodesIn := 0
	deadline := time.NewTimer(a.fe.opts.Timeout)
	defer deadline.Stop()
	var why string
	var gone []string  // ranks whose process an agent found gone
	var ended []string // nodes whose agent ended before it registered, and how
	// A node whose agent has ended will not register: that ends the wait at once.
	watch := time.NewTicker(100 * time.Millisecond)
	defer watch.Stop()
wait:
	for nodesIn < len(place.Hosts) {
		select {
		case reg := <-rv.regs:
			h, ok := byHost[reg.Node]
			if !ok {
				a.fe.logf("launch: %s: agent registered from unexpected node %q", a.ID(), reg.Node)
				continue
			}
			ep := AgentEndpoint{Host: reg.Node, Addr: reg.Address, Token: token, Pid: reg.Pid}
			for _, r := range reg.Ranks {
				ep.Ranks = append(ep.Ranks, r.Rank)
			}
			sort.Ints(ep.Ranks)
			for _, g := range reg.Gone {
				gone = append(gone, fmt.Sprintf("rank %d on %s (pid %d): %s", g.Rank, reg.Node, g.Pid, g.Error))
			}
			if served[reg.Node] >= len(h.Ranks) {
				a.fe.logf("launch: %s: one more agent registered from %s, whose ranks are served: ignored", a.ID(), reg.Node)
				continue
			}
			got[reg.Node] = append(got[reg.Node], ep)
			served[reg.Node] += len(reg.Ranks) + len(reg.Gone)
			if served[reg.Node] < len(h.Ranks) {
				continue
			}
			nodesIn++
			var ranks []int
			for _, e := range got[reg.Node] {
				ranks = append(ranks, e.Ranks...)
			}
			sort.Ints(ranks)
			if fmt.Sprint(ranks) != fmt.Sprint(h.Ranks) {
				a.fe.logf("launch: %s: the agents on %s serve ranks %s, expected %s", a.ID(), reg.Node, rankset.Of(ranks...), rankset.Of(h.Ranks...))
			}
			if k := len(got[reg.Node]); k == 1 {
				a.fe.progressf("launch: %s: agent on %s registered (%d of %d)", a.ID(), reg.Node, nodesIn, len(place.Hosts))
			} else {
				a.fe.progressf("launch: %s: %d agents on %s registered (%d of %d nodes)", a.ID(), k, reg.Node, nodesIn, len(place.Hosts))
			}
		case <-watch.C:
			ended = endedAgents(d, served, byHost)
			if len(ended) > 0 {
				// srun reports a task's end before it has forwarded all the task wrote: let
				// the output come in, so that the error can quote the agent's own words.
				d.settle(300*time.Millisecond, 3*time.Second)
				ended = endedAgents(d, served, byHost)
				why = "agents ended before registering: " + strings.Join(ended, "; ")
				break wait
			}
		case <-d.Done():
			// Every daemon ended: nobody else will register.
			why = "the daemons ended"
			if ended = endedAgents(d, served, byHost); len(ended) > 0 {
				why += ": " + strings.Join(ended, "; ")
			}
			break wait
		case <-deadline.C:
			why = fmt.Sprintf("time limit %v", a.fe.opts.Timeout)
			break wait
		case <-ctx.Done():
			why = ctx.Err().Error()
			break wait
		}
	}
	for _, h := range place.Hosts {
		eps := got[h.Host]
		sort.Slice(eps, func(i, j int) bool {
			return len(eps[j].Ranks) == 0 || len(eps[i].Ranks) > 0 && eps[i].Ranks[0] < eps[j].Ranks[0]
		})
		g.Endpoints = append(g.Endpoints, eps...)
	}
	a.fe.logf("launch: %s: the agents of %d of %d nodes registered (%d agents) in %v", a.ID(), nodesIn, len(place.Hosts), len(g.Endpoints), time.Since(t0))
	if nodesIn < len(place.Hosts) || len(gone) > 0 {
		// Agents that fail on a job whose ranks have ended since its table was read (its
		// launcher ends the daemons with the job) failed for that: it is the error.
		if gj, ok := a.job.(interface{ goneError(when string) error }); ok {
			if err := gj.goneError(atAgents); err != nil {
				return g, err
			}
		}
	}
	if nodesIn < len(place.Hosts) {
		var missing []string
		for _, h := range place.Hosts {
			if served[h.Host] < len(h.Ranks) {
				missing = append(missing, fmt.Sprintf("%s (ranks %s)", h.Host, rankset.Of(unserved(h.Ranks, got[h.Host])...)))
			}
		}
		return g, fmt.Errorf("launch: %s: %d of %d nodes' agents registered (%s); missing: %s%s\ndaemon output:\n%s",
			a.ID(), nodesIn, len(place.Hosts), why, strings.Join(missing, ", "), goneText(gone), tail(d.Log(), 20))
	}
	if len(gone) > 0 {
		return g, fmt.Errorf("launch: %s: every node agent registered, but%s", a.ID(), goneText(gone))
	}
	return g, nil
}

// startAgentDaemons starts the agents: as debugger daemons of a launcher that can start them
// on the job's nodes itself (they read their node's ranks from it), else through the workload
// manager with each host's ranks in perHost. Which way is said in a progress line.
func (a *App) startAgentDaemons(ctx context.Context, s *Session, m *Manifest, argv, env []string,
	perHost func(string) []string, hosts []string) (*DaemonSet, error) {
	if ds, ok := a.job.(daemonSpawner); ok {
		d, err := s.cospawnAgents(ctx, m, argv, env, ds)
		if err == nil {
			a.fe.progressf("launch: %s: agents started by the launcher as PMIx debugger daemons, one per node", a.ID())
			return d, nil
		}
		var gone *jobGoneError
		if errors.As(err, &gone) {
			return nil, err
		}
		a.fe.progressf("launch: %s: agents started by this front end instead: %v", a.ID(), err)
	}
	return s.ExecToolDaemon(ctx, m, argv, DaemonOptions{Env: env, Args: perHost, Hosts: hosts})
}

// endedAgents names the nodes whose agent ended without registering, with their ranks and
// how the agent ended, in host order.
func endedAgents(d *DaemonSet, served map[string]int, byHost map[string]HostPlacement) []string {
	var out []string
	ended := d.Ended()
	for _, h := range d.Hosts {
		why, ok := ended[h]
		if !ok || served[h] >= len(byHost[h].Ranks) {
			continue
		}
		out = append(out, fmt.Sprintf("%s (ranks %s): %s", h, rankset.Of(byHost[h].Ranks...), why))
	}
	return out
}

// unserved lists the ranks of a node that none of its registered agents serves.
func unserved(ranks []int, eps []AgentEndpoint) []int {
	in := map[int]bool{}
	for _, e := range eps {
		for _, r := range e.Ranks {
			in[r] = true
		}
	}
	var out []int
	for _, r := range ranks {
		if !in[r] {
			out = append(out, r)
		}
	}
	return out
}

// goneText lists the ranks agents found gone, for an error message.
func goneText(gone []string) string {
	if len(gone) == 0 {
		return ""
	}
	sort.Strings(gone)
	return fmt.Sprintf(" %d rank(s) had ended before their agent started: %s", len(gone), strings.Join(gone, "; "))
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
