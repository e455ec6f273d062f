package agent

import (
	"runtime/debug"
	"sync"

	"github.com/hpcdap/hpcdap/cdti"
)

// handler implements the cdti.Server handler interfaces for an Agent. Each request is turned
// into a function run on the goroutine of the process it names (proc.do), which owns that
// process's state; deferred actions (resuming, the next Notify, control notifications) are
// queued to the same goroutine once the framework has written the ack (Conn.AfterReply).
type handler Agent

func (h *handler) agent() *Agent { return (*Agent)(h) }

// toolConn is one CDTI connection as the agent sees it: the tools it attached and the queue of
// notifications for them. Notifications are written by the connection's own goroutine, so
// that a peer that stops reading never blocks a process's goroutine; a peer that lets
// maxQueuedNotifies pile up is disconnected (and so dropped, its tools detached).
type toolConn struct {
	a    *Agent
	c    *cdti.Conn
	mu   sync.Mutex
	q    []*cdti.Notify
	dead bool
	kick chan struct{}
}

const maxQueuedNotifies = 1 << 14

func conn(c *cdti.Conn) *toolConn {
	tc, _ := c.Value().(*toolConn)
	return tc
}

// send queues a notification.
func (tc *toolConn) send(n *cdti.Notify) {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	if tc.dead {
		return
	}
	if len(tc.q) >= maxQueuedNotifies {
		tc.dead = true
		tc.a.logf("agent: connection %d: %d notifications not read: disconnecting", tc.c.ID(), len(tc.q))
		go tc.c.Close()
		return
	}
	tc.q = append(tc.q, n)
	select {
	case tc.kick <- struct{}{}:
	default:
	}
}

func (tc *toolConn) writer() {
	done := tc.c.Context().Done()
	for {
		select {
		case <-tc.kick:
		case <-done:
			return
		}
		for {
			tc.mu.Lock()
			if len(tc.q) == 0 || tc.dead {
				tc.mu.Unlock()
				break
			}
			n := tc.q[0]
			tc.q[0] = nil
			tc.q = tc.q[1:]
			tc.mu.Unlock()
			if err := tc.c.Notify(n); err != nil {
				tc.mu.Lock()
				tc.dead = true
				tc.mu.Unlock()
				tc.c.Close()
				return
			}
		}
	}
}

// Opened starts the connection's notification writer.
func (h *handler) Opened(c *cdti.Conn) {
	tc := &toolConn{a: h.agent(), c: c, kick: make(chan struct{}, 1)}
	c.SetValue(tc)
	go tc.writer()
	h.agent().frontEndOpened()
}

// Closed treats every tool of the connection as detached: it loses control (a process it left
// suspended continues), its breakpoints and watchpoints are removed, its held threads released.
func (h *handler) Closed(c *cdti.Conn, err error) {
	defer h.recoverConn(c, "close")
	a := h.agent()
	tc := conn(c)
	if tc == nil {
		return
	}
	defer a.frontEndClosed() // after the tools are dropped
	tc.mu.Lock()
	tc.dead = true
	tc.q = nil
	tc.mu.Unlock()
	for _, p := range a.allProcs() {
		p.do(func() {
			for i := 0; i < len(p.tools); {
				if t := p.tools[i]; t.tc == tc {
					p.removeTool(t, true)
					continue
				}
				i++
			}
		})
	}
	a.mu.Lock()
	for id, o := range a.tools {
		if o == tc {
			delete(a.tools, id)
		}
	}
	a.mu.Unlock()
}

// recoverConn is the last line of defence on a connection's goroutine: a panic closes that
// connection only.
func (h *handler) recoverConn(c *cdti.Conn, what string) {
	if r := recover(); r != nil {
		h.agent().logf("agent: connection %d: %s: internal error: %v\n%s", c.ID(), what, r, debug.Stack())
		c.Close()
	}
}

// targets returns the processes a ProcessSelect names.
func (a *Agent) targets(rank uint32, sel cdti.ProcessSelect) []*proc {
	if sel == cdti.RanksInNode {
		return a.allProcs()
	}
	if p := a.proc(rank); p != nil {
		return []*proc{p}
	}
	return nil
}

// HandleMessage answers the messages no other handler takes. A NotifyAck, toolctld's answer to
// a Notify when the agent is a compute node's kernel behind an I/O node (package bgq), is
// taken without an answer, as the CNK takes it; anything else is ErrorAck(UnsupportedType).
func (h *handler) HandleMessage(c *cdti.Conn, m cdti.Message) cdti.Message {
	if _, ok := m.(*cdti.NotifyAck); ok {
		return nil
	}
	return &cdti.ErrorAck{Header: m.Hdr().Reply(cdti.UnsupportedType)}
}

// Attach attaches a tool to one rank or every rank of the node, all or none.
func (h *handler) Attach(c *cdti.Conn, m *cdti.Attach) (ack *cdti.AttachAck) {
	ack = &cdti.AttachAck{}
	defer h.recoverConn(c, "attach")
	a, tc := h.agent(), conn(c)
	if m.JobID != a.jobID {
		ack.ReturnCode = cdti.JobIdError
		return ack
	}
	a.mu.Lock()
	owner := a.tools[m.ToolID]
	a.mu.Unlock()
	if owner != nil && owner != tc {
		ack.ReturnCode = cdti.ToolIdConflict
		return ack
	}
	var ps []*proc
	for _, p := range a.targets(m.Rank, m.Select) {
		var rc cdti.ReturnCode
		if err := p.do(func() { rc = p.validateAttach(m.ToolID, m.Priority) }); err != nil {
			rc = cdti.ToolRankNotFound
		}
		if rc == cdti.ToolRankNotFound && m.Select == cdti.RanksInNode {
			continue // an exited rank of the node
		}
		if rc != cdti.Success {
			ack.ReturnCode = rc
			return ack
		}
		ps = append(ps, p)
	}
	if len(ps) == 0 {
		ack.ReturnCode = cdti.ToolRankNotFound
		return ack
	}
	// Tracing a process waits for each of its threads to stop: do the processes in parallel.
	type result struct {
		rc    cdti.ReturnCode
		errno uint32
	}
	res := make([]result, len(ps))
	var wg sync.WaitGroup
	for i, p := range ps {
		wg.Go(func() {
			if err := p.do(func() { res[i].rc, res[i].errno = p.addTool(tc, m.ToolID, m.Tag, m.Priority) }); err != nil {
				res[i].rc = cdti.ToolRankNotFound
			}
		})
	}
	wg.Wait()
	for i, r := range res {
		if r.rc == cdti.Success {
			continue
		}
		for j, q := range ps {
			if res[j].rc == cdti.Success {
				q.do(func() {
					if t := q.findTool(m.ToolID, tc); t != nil {
						q.removeTool(t, false)
					}
				})
			}
		}
		ack.ReturnCode, ack.ErrorCode = res[i].rc, res[i].errno
		return ack
	}
	for _, p := range ps {
		ack.Ranks = append(ack.Ranks, p.rank)
	}
	a.mu.Lock()
	a.tools[m.ToolID] = tc
	a.mu.Unlock()
	return ack
}

// Detach detaches a tool from one rank or from every rank of the node. A tool that holds
// control of a running process must release it first.
func (h *handler) Detach(c *cdti.Conn, m *cdti.Detach) (ack *cdti.DetachAck) {
	ack = &cdti.DetachAck{}
	defer h.recoverConn(c, "detach")
	a, tc := h.agent(), conn(c)
	if m.JobID != a.jobID {
		ack.ReturnCode = cdti.JobIdError
		return ack
	}
	ps := a.targets(m.Rank, m.Select)
	for _, p := range ps {
		holds := false
		p.do(func() {
			t := p.findTool(m.ToolID, tc)
			holds = t != nil && p.holder == t && !p.exited
		})
		if holds {
			ack.ReturnCode = cdti.ToolControlReleaseRequired
			return ack
		}
	}
	// Each process on its own goroutine: a detach waits for the process to stop, and a
	// node's processes stop at once rather than one after the other.
	detached := make([]bool, len(ps))
	var wg sync.WaitGroup
	for i, p := range ps {
		wg.Go(func() { p.do(func() { _, detached[i] = p.detachTool(tc, m.ToolID) }) })
	}
	wg.Wait()
	for i, p := range ps {
		if detached[i] {
			ack.Ranks = append(ack.Ranks, p.rank)
		}
	}
	// The tool id is free again once it is attached nowhere.
	still := false
	for _, p := range a.allProcs() {
		p.do(func() { still = still || p.findTool(m.ToolID, tc) != nil })
	}
	if !still {
		a.mu.Lock()
		if a.tools[m.ToolID] == tc {
			delete(a.tools, m.ToolID)
		}
		a.mu.Unlock()
	}
	return ack
}

// Control asks for control authority over one rank.
func (h *handler) Control(c *cdti.Conn, m *cdti.Control) (ack *cdti.ControlAck) {
	ack = &cdti.ControlAck{}
	defer h.recoverConn(c, "control")
	a, tc := h.agent(), conn(c)
	if m.JobID != a.jobID {
		ack.ReturnCode = cdti.JobIdError
		return ack
	}
	p := a.proc(m.Rank)
	if p == nil {
		ack.ReturnCode = cdti.ProcessIdError
		return ack
	}
	var after func()
	err := p.do(func() {
		p.acks++
		ack, after = p.control(tc, m)
	})
	if err != nil {
		return &cdti.ControlAck{Header: cdti.Header{ReturnCode: cdti.ToolProcessExiting}}
	}
	c.AfterReply(func() {
		p.enqueue(func() {
			p.acks--
			if after != nil {
				after()
			}
			p.advance()
		})
	})
	return ack
}

// Check applies the CNK's message-level checks of a Query or Update before the framework's
// own: job, rank, exiting process, attached tool and, for an Update, control authority.
func (h *handler) Check(c *cdti.Conn, hd *cdti.Header) (rc cdti.ReturnCode) {
	defer h.recoverConn(c, "check")
	a, tc := h.agent(), conn(c)
	if hd.JobID != a.jobID {
		return cdti.JobIdError
	}
	p := a.proc(hd.Rank)
	if p == nil {
		return cdti.ToolRankNotFound
	}
	return p.checkPublished(tc, hd.ToolID, hd.Type == cdti.MsgUpdate)
}

// check is the per-process part of Check.
func (p *proc) check(tc *toolConn, id uint32, update bool) cdti.ReturnCode {
	if p.exited {
		return cdti.ToolProcessExiting
	}
	t := p.findTool(id, tc)
	if t == nil {
		return cdti.ToolIdError
	}
	if update && p.holder != t {
		return cdti.ToolControlRequired
	}
	return cdti.Success
}

// Query runs a Query's commands on the process's goroutine.
func (h *handler) Query(c *cdti.Conn, m *cdti.Query) (rs []cdti.Result, rc cdti.ReturnCode) {
	defer h.recoverConn(c, "query")
	a, tc := h.agent(), conn(c)
	p := a.proc(m.Rank)
	if p == nil {
		return nil, cdti.ToolRankNotFound
	}
	if err := p.do(func() {
		if rc = p.check(tc, m.ToolID, false); rc == cdti.Success {
			rs = p.query(p.findTool(m.ToolID, tc), m.Commands)
		}
	}); err != nil {
		return nil, cdti.ToolProcessExiting
	}
	return rs, rc
}

// Update runs an Update's commands; what they set in motion happens after the ack is written.
func (h *handler) Update(c *cdti.Conn, m *cdti.Update) (rs []cdti.Result, rc cdti.ReturnCode) {
	defer h.recoverConn(c, "update")
	a, tc := h.agent(), conn(c)
	p := a.proc(m.Rank)
	if p == nil {
		return nil, cdti.ToolRankNotFound
	}
	var after func()
	if err := p.do(func() {
		if rc = p.check(tc, m.ToolID, true); rc == cdti.Success {
			p.acks++
			rs, after = p.update(p.findTool(m.ToolID, tc), m.Commands)
		}
	}); err != nil {
		return nil, cdti.ToolProcessExiting
	}
	if rc == cdti.Success {
		c.AfterReply(func() {
			p.enqueue(func() {
				p.acks--
				if after != nil {
					after()
				}
				p.advance()
			})
		})
	}
	return rs, rc
}
