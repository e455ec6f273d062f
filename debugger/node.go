package debugger

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hpcdap/hpcdap/cdti"
	"github.com/hpcdap/hpcdap/launch"
	"github.com/hpcdap/hpcdap/mgmt"
	"github.com/sourcegraph/jsonrpc2"
	"golang.org/x/sys/unix"
)

// toolID and toolTag are how the adapter attaches to processes (its priority is the job's:
// DefaultToolPriority unless the session names one).
const (
	toolID  = 1
	toolTag = "hpcdap"
)

// node is one agent connection: the CDTI data plane and the JSON-RPC management plane.
type node struct {
	ep     *launch.AgentEndpoint
	host   string
	client *cdti.Client
	mgmt   *jsonrpc2.Conn
	ranks  []*Rank
	output bool // the agent forwards each rank's output on the management plane
	// noTrapConds: the agent answered SetTrapCondition with CmdInval (a BG/Q CNK): the
	// front end decides every breakpoint hit of its ranks.
	noTrapConds atomic.Bool
	// cnk: the agent answered GetTargetInfo with CmdInval: it is a BG/Q CNK, which speaks
	// CDTI v6 only (see bgq.go).
	cnk atomic.Bool
	// kernelSize counts the ranks of each compute node behind a CIOS agent (by its id, the
	// ranks' Pid), those the session does not hold too (subset).
	kernelSize map[int]int
	// ext: a rank of the node answered GetTargetInfo, so its agent has the extensions and
	// run control may go to it as Collectives (never sent before, so that a BG/Q toolctld's
	// ErrorAck, which fails every request outstanding on its connection, cannot meet one).
	ext atomic.Bool
}

// kernels groups the node's ranks by the kernel that runs them, each attached with one
// message (kernelSelect: RanksInNode, or the one rank of a compute node a rank subset holds)
// and detached with one RanksInNode: all of them, but for a BG/Q CIOS agent (its endpoint
// names the tool id jobctld gave it), whose ranks are on several compute nodes, each behind a
// toolctld that takes one Attach per tool (cdti-v6.md §9.1): there a rank's pid is its
// compute node's id, as runjob's proc table has it.
func (n *node) kernels() [][]*Rank {
	if n.ep == nil || n.ep.ToolID == 0 {
		return [][]*Rank{n.ranks}
	}
	var out [][]*Rank
	at := map[int]int{}
	for _, r := range n.ranks {
		i, ok := at[r.Pid]
		if !ok {
			i = len(out)
			at[r.Pid] = i
			out = append(out, nil)
		}
		out[i] = append(out[i], r)
	}
	return out
}

// subset keeps, of the ranks a BG/Q CIOS agent serves (every rank of its I/O node's compute
// nodes), those of its endpoint, the session's (a rank subset's: launch), and counts each
// compute node's ranks, so that a node whose ranks the session holds only one of is attached
// by that rank alone (kernelSelect).
func (n *node) subset(infos []agentRankInfo) []agentRankInfo {
	n.kernelSize = map[int]int{}
	keep := map[int]bool{}
	for _, r := range n.ep.Ranks {
		keep[r] = true
	}
	var out []agentRankInfo
	for _, ri := range infos {
		n.kernelSize[ri.Pid]++
		if len(n.ep.Ranks) == 0 || keep[ri.Rank] {
			out = append(out, ri)
		}
	}
	return out
}

// kernelSelect is how a kernel group of the node's ranks is attached: every rank of the
// compute node (RanksInNode), or behind a CIOS agent the one rank of it the session holds
// (RankInHeader).
func (n *node) kernelSelect(kernel []*Rank) cdti.ProcessSelect {
	if size, ok := n.kernelSize[kernel[0].Pid]; ok && len(kernel) < size {
		return cdti.RankInHeader
	}
	return cdti.RanksInNode
}

// agentRankInfo is the management plane's description of one rank (agent.RankInfo).
type agentRankInfo struct {
	Rank       int    `json:"rank"`
	Pid        int    `json:"pid"`
	Executable string `json:"executable"`
	State      string `json:"state"`
	ExitStatus *int   `json:"exitStatus,omitempty"`
	Threads    int    `json:"threads"`
}

// agentHello is the management plane's hello result.
type agentHello struct {
	Node         string   `json:"node"`
	Pid          int      `json:"pid"`
	Version      string   `json:"version"`
	Ranks        int      `json:"ranks"`
	Capabilities []string `json:"capabilities,omitempty"`
}

// outputParams is one chunk of a rank's output (requests-adapter.md, item 1).
type outputParams struct {
	Rank   int    `json:"rank"`
	Stream string `json:"stream"`
	Text   string `json:"text"`
	EOF    bool   `json:"eof"`
}

// mgmtHandler receives the agent's notifications on the management plane.
type mgmtHandler struct {
	onOutput func(outputParams)
}

func (h *mgmtHandler) Handle(ctx context.Context, c *jsonrpc2.Conn, req *jsonrpc2.Request) {
	if req.Method == "output" && req.Params != nil && h.onOutput != nil {
		var p outputParams
		if json.Unmarshal(*req.Params, &p) == nil {
			h.onOutput(p)
		}
	}
	if !req.Notif {
		c.ReplyWithError(ctx, req.ID, &jsonrpc2.Error{Code: jsonrpc2.CodeMethodNotFound, Message: "front end serves no calls"})
	}
}

// clientOptions are the options of the CDTI connection to the agent ep (or to the tree whose
// root it is).
func clientOptions(ep *launch.AgentEndpoint) cdti.ClientOptions {
	id := uint32(toolID)
	if ep.ToolID != 0 {
		id = ep.ToolID // a BG/Q CIOS tool's, which toolctld knows it by
	}
	return cdti.ClientOptions{ToolID: id, JobID: ep.JobID, Token: []byte(ep.Token), Timeout: 60 * time.Second}
}

// dialNode connects both planes of one agent and lists its ranks.
// Without withCDTI only the management plane is connected, and its output is not subscribed
// to: an agent of the tree overlay, reached through it on both planes once the tree is
// configured (configureTree).
func dialNode(ctx context.Context, ep *launch.AgentEndpoint, onOutput func(outputParams), withCDTI bool) (*node, []agentRankInfo, error) {
	var cl *cdti.Client
	if withCDTI {
		var err error
		cl, err = cdti.Dial(ctx, "tcp", ep.Addr, clientOptions(ep))
		if err != nil {
			return nil, nil, fmt.Errorf("connect to agent %s: %w", ep.Addr, err)
		}
	}
	var hello agentHello
	rpc, err := mgmt.Dial(ctx, ep.Addr, ep.Token, "hpcdap-adapter", &mgmtHandler{onOutput: onOutput}, &hello)
	if err != nil {
		if cl != nil {
			cl.Close()
		}
		return nil, nil, fmt.Errorf("connect to agent %s (management): %w", ep.Addr, err)
	}
	n := newNode(ep, hello)
	n.client, n.mgmt = cl, rpc
	var infos []agentRankInfo
	if err := rpc.Call(ctx, "ranks", nil, &infos); err != nil {
		n.close()
		return nil, nil, fmt.Errorf("agent %s: ranks: %w", ep.Addr, err)
	}
	// Per-rank output forwarding, where the agent offers it.
	if n.output && withCDTI {
		if err := rpc.Call(ctx, "output.subscribe", struct{}{}, nil); err != nil {
			n.close()
			return nil, nil, fmt.Errorf("agent %s: output.subscribe: %w", ep.Addr, err)
		}
	}
	return n, infos, nil
}

// newNode returns the node of the agent of ep, which said hello; it is not connected.
func newNode(ep *launch.AgentEndpoint, hello agentHello) *node {
	n := &node{ep: ep, host: ep.Host, output: slices.Contains(hello.Capabilities, "output")}
	if hello.Node != "" && ep.ToolID == 0 {
		// (A BG/Q CIOS agent does not know its I/O node's name in runjob's table.)
		n.host = hello.Node
	}
	return n
}

// close drops both connections.
func (n *node) close() {
	if n.client != nil {
		n.client.Close()
	}
	if n.mgmt != nil {
		n.mgmt.Close()
	}
}

// shutdown asks the agent to end, killing its processes or leaving them running, calls asked
// once the agent has answered (or could not be asked), and waits for an agent the front end
// started.
func (n *node) shutdown(kill bool, asked func()) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if n.mgmt != nil && !n.ep.Owned {
		n.mgmt.Call(ctx, "shutdown", map[string]bool{"kill": kill}, nil)
	}
	asked()
	n.close()
	if a := n.ep.Agent; a != nil {
		if !a.Wait(10 * time.Second) {
			a.Kill()
		}
	}
	if c, ok := n.ep.Output.(io.Closer); ok && kill {
		// Launched ranks are gone with the agent: nothing more will be written. (Detached
		// ranks still hold the pipe; the forwarder keeps it until they close it.)
		c.Close()
	}
}

// outputStream copies an agent's stderr (the ranks' combined output when the agent cannot
// forward it per rank) to output events, line by line, until EOF.
type outputStream struct {
	r    io.Reader
	busy atomic.Bool // a chunk has been read and not yet emitted
	br   *bufio.Reader
}

func (o *outputStream) forward(emit func(text string)) {
	// ReadString gathers a line longer than the buffer: a small one serves (an agent's
	// stderr is quiet, and there is one per agent).
	o.br = bufio.NewReader(o.r)
	for {
		o.busy.Store(false)
		line, err := o.br.ReadString('\n')
		o.busy.Store(true)
		if line != "" {
			emit(line)
		}
		if err != nil {
			o.busy.Store(false)
			return
		}
	}
}

// drained reports whether everything written to the stream so far has been emitted: the
// pipe holds no unread bytes and the forwarder is waiting for more.
func (o *outputStream) drained() bool {
	f, ok := o.r.(*os.File)
	if !ok || o.busy.Load() {
		return !ok
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return true // closed: nothing more will come
	}
	n := 0
	var ierr error
	if err := rc.Control(func(fd uintptr) { n, ierr = unix.IoctlGetInt(int(fd), unix.TIOCINQ) }); err != nil {
		return true
	}
	return ierr == nil && n == 0 && !o.busy.Load()
}

// lineBuffer assembles a rank's output chunks into whole lines, so that a prefixed line is
// never split between two output events.
type lineBuffer struct {
	mu   sync.Mutex
	part map[string]string // by "rank/stream"
}

func (b *lineBuffer) add(key, text string, eof bool) (lines string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.part == nil {
		b.part = map[string]string{}
	}
	s := b.part[key] + text
	i := lastNewline(s)
	if eof {
		delete(b.part, key)
		if s != "" && s[len(s)-1] != '\n' {
			s += "\n"
		}
		return s
	}
	b.part[key] = s[i+1:]
	if len(b.part[key]) > 64<<10 { // a very long line without newline: flush it
		b.part[key] = ""
		return s
	}
	return s[:i+1]
}

func lastNewline(s string) int {
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == '\n' {
			return i
		}
	}
	return -1
}
