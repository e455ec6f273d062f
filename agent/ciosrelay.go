package agent

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"github.com/hpcdap/hpcdap/cdti"
	"github.com/hpcdap/hpcdap/ppc64"
)

// ciosRelay is the CDTI handler of an agent that is a CIOS tool (a cdti.RelayHandler, its
// Router's local handler): each message from the front end for a rank of its own goes
// unaltered to the toolctld of its rank's compute node, over one socket per compute node and
// front-end connection, and every message toolctld sends back
// (acks, Notify) goes up unaltered. Every connection speaks with the one tool id jobctld gave
// the agent, which toolctld lets one socket attach at a time: a second front-end connection
// attaching while the first is attached is refused (ToolIdConflict), as on BG/Q. toolctld takes only Attach, Detach, Query, Update and Control: the
// relay answers anything else as toolctld would, ErrorAck(UnsupportedType), without a
// round trip.
//
// Because toolctld does not tell the CNK that a tool's socket closed (cdti-v6.md §9.6), the
// relay keeps what it needs to give the ranks back itself when the front end goes without
// doing so (its connection drops, the agent is told to end): which ranks the tool attached
// and controls on each node, and the traps it planted with the instruction under each, read
// from the process just before the SetBreakpoint goes down (a CNK's ResetBreakpoint carries
// the original instruction). Giving back removes those traps, releases control (which
// continues a process stopped for a notification) and detaches the node's ranks.
type ciosRelay struct {
	job     *CIOSJob
	logf    func(string, ...any)
	timeout time.Duration // bounds each of the relay's own requests
	// opened and closed count the front end's connections for the agent's lifeline: a
	// front end that speaks CDTI alone is connected as much as one that also manages.
	opened, closed func()

	mu    sync.Mutex
	links map[*cdti.Conn]map[uint32]*ciosLink // per front-end connection, by compute node
}

// ciosOwnSeq marks the sequence ids of the relay's own requests (reads of the instructions
// under traps, the give-back): the front end's cdti.Client counts up from 1.
const ciosOwnSeq = 0x80000000

// trapKey names a planted trap.
type trapKey struct {
	rank uint32
	addr uint64
}

// ciosLink is one front-end connection's socket to one compute node's toolctld.
type ciosLink struct {
	node uint32
	nc   net.Conn
	up   *cdti.Conn
	wmu  sync.Mutex

	mu       sync.Mutex
	sent     map[uint32]cdti.Message      // forwarded requests by sequence id, decoded
	own      map[uint32]chan cdti.Message // the relay's own requests awaiting their ack
	seq      uint32
	attached map[uint32]bool
	control  map[uint32]bool
	traps    map[trapKey]uint32 // → the original instruction
	origs    map[trapKey]uint32 // read before a SetBreakpoint whose ack has not come
	dead     bool
	refused  cdti.ReturnCode // the return code of an ErrorAck toolctld sent (Success: none)
	done     chan struct{}   // closed when the reader ends
}

func newCIOSRelay(job *CIOSJob, logf func(string, ...any), opened, closed func()) *ciosRelay {
	return &ciosRelay{job: job, logf: logf, timeout: 10 * time.Second, links: map[*cdti.Conn]map[uint32]*ciosLink{},
		opened: opened, closed: closed}
}

// Opened counts a front-end connection (cdti.OpenHandler).
func (r *ciosRelay) Opened(*cdti.Conn) { r.opened() }

// Relay forwards one frame of the front end's (cdti.RelayHandler).
func (r *ciosRelay) Relay(c *cdti.Conn, frame []byte) error {
	h, err := cdti.ParseHeader(frame)
	if err != nil {
		return err
	}
	switch h.Type {
	case cdti.MsgAttach, cdti.MsgDetach, cdti.MsgQuery, cdti.MsgUpdate, cdti.MsgControl:
	default:
		return c.Send(&cdti.ErrorAck{Header: h.Reply(cdti.UnsupportedType)})
	}
	node, ok := r.job.Ranks[h.Rank]
	if !ok {
		return c.Send(cdti.ReplyTo(h, cdti.ToolRankNotFound, 0))
	}
	l, err := r.link(c, node)
	if err != nil {
		r.logf("agent: job %d: rank %d: %v", r.job.ID, h.Rank, err)
		return c.Send(cdti.ReplyTo(h, cdti.RequestFailed, cdti.ErrorCodeUnreachable))
	}
	m, _ := cdti.DecodeMessage(frame) // for the give-back; what does not decode goes down all the same
	switch m := m.(type) {
	case *cdti.Update:
		l.readOriginals(h, m, r.timeout)
	case *cdti.Detach:
		// toolctld forgets the tool at any DetachAck (§9.6): traps the tool left are taken
		// out first, while it still can.
		l.removeTraps(r.job, r.timeout, r.logf)
	}
	if err := l.forward(h, m, frame); err != nil {
		if rc := l.refusal(r.timeout); rc != cdti.Success {
			// toolctld refused the socket (a fifth tool): its ErrorAck, passed up first,
			// has failed the request already; this answer says the same if it has not.
			return c.Send(cdti.ReplyTo(h, rc, 0))
		}
		return c.Send(cdti.ReplyTo(h, cdti.RequestFailed, cdti.ErrorCodeUnreachable))
	}
	return nil
}

// refusal waits (up to limit) for the reader of a link whose socket broke to pass up what
// toolctld sent before it closed the socket, and returns the return code of toolctld's
// ErrorAck among it (Success if none): a toolctld that has its four tools answers a fifth
// connection with ErrorAck(ToolMaxAttachedExceeded) and closes it (cdti-v6.md §2.9).
func (l *ciosLink) refusal(limit time.Duration) cdti.ReturnCode {
	select {
	case <-l.done:
	case <-time.After(limit):
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.refused
}

// Closed gives back, on every compute node, what the front end's connection c left attached,
// controlled or trapped, then closes its sockets (cdti.CloseHandler).
func (r *ciosRelay) Closed(c *cdti.Conn, _ error) {
	r.mu.Lock()
	ls := r.links[c]
	delete(r.links, c)
	r.mu.Unlock()
	var wg sync.WaitGroup
	for _, l := range ls {
		wg.Go(func() {
			l.giveBack(r.job, r.timeout, r.logf)
			l.nc.Close()
			<-l.done
		})
	}
	wg.Wait()
	r.closed()
}

// link returns c's socket to node's toolctld, connecting on first use.
func (r *ciosRelay) link(c *cdti.Conn, node uint32) (*ciosLink, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if l := r.links[c][node]; l != nil {
		return l, nil
	}
	path := r.job.Nodes[node]
	nc, err := net.DialTimeout("unix", path, r.timeout)
	if err != nil {
		return nil, fmt.Errorf("connect to the toolctld of compute node %d (%s): %w", node, path, err)
	}
	l := &ciosLink{node: node, nc: nc, up: c, sent: map[uint32]cdti.Message{}, own: map[uint32]chan cdti.Message{},
		attached: map[uint32]bool{}, control: map[uint32]bool{}, traps: map[trapKey]uint32{},
		origs: map[trapKey]uint32{}, done: make(chan struct{})}
	if r.links[c] == nil {
		r.links[c] = map[uint32]*ciosLink{}
	}
	r.links[c][node] = l
	go l.read(r)
	return l, nil
}

// forward sends one of the front end's frames down, remembering the request for its ack.
func (l *ciosLink) forward(h cdti.Header, m cdti.Message, frame []byte) error {
	l.mu.Lock()
	if l.dead {
		l.mu.Unlock()
		return errors.New("toolctld link lost")
	}
	if m != nil {
		l.sent[h.SequenceID] = m
	}
	l.mu.Unlock()
	return l.write(frame)
}

// ciosWriteTimeout bounds one write to a toolctld: one that stops reading loses its link (its
// node's ranks are unreachable) rather than block the front end's connection, and with it
// every agent below this one in the tree.
const ciosWriteTimeout = 10 * time.Second

// write sends one frame down within ciosWriteTimeout. A write that timed out closes the
// socket, whose reader then tells the front end; one that failed because toolctld closed it
// leaves the socket to its reader, which first passes up what toolctld sent before (the
// ErrorAck of a refusal, see refusal).
func (l *ciosLink) write(frame []byte) error {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	l.nc.SetWriteDeadline(time.Now().Add(ciosWriteTimeout))
	_, err := l.nc.Write(frame)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		l.nc.Close()
	}
	return err
}

// read passes what toolctld sends up, keeping the books on the way, and delivers the acks of
// the relay's own requests to them. When the socket breaks, the front end hears that the
// node's ranks are unreachable.
func (l *ciosLink) read(r *ciosRelay) {
	defer close(l.done)
	br := bufio.NewReader(l.nc)
	for {
		frame, err := cdti.ReadFrame(br)
		if err != nil {
			l.mu.Lock()
			l.dead = true
			for seq, ch := range l.own {
				close(ch)
				delete(l.own, seq)
			}
			gave := len(l.attached) == 0
			l.mu.Unlock()
			if !gave && !errors.Is(err, net.ErrClosed) {
				r.lost(l)
			}
			return
		}
		h, err := cdti.ParseHeader(frame)
		if err != nil {
			continue
		}
		if h.Type != cdti.MsgNotify {
			l.mu.Lock()
			if h.Type == cdti.MsgErrorAck {
				l.refused = h.ReturnCode
			}
			ch := l.own[h.SequenceID]
			delete(l.own, h.SequenceID)
			req := l.sent[h.SequenceID]
			if ch == nil {
				delete(l.sent, h.SequenceID)
			}
			l.mu.Unlock()
			if ch != nil {
				m, _ := cdti.DecodeMessage(frame)
				ch <- m
				continue
			}
			if h.SequenceID&ciosOwnSeq != 0 && req == nil {
				continue // the late answer to one of the relay's own requests
			}
			if req != nil {
				l.book(req, frame)
			}
		} else if n, err := cdti.DecodeMessage(frame); err == nil {
			if n, ok := n.(*cdti.Notify); ok && n.Kind == cdti.NotifyTypeTermination {
				l.forget(n.Rank) // its process is gone, with what the tool had of it
			}
		}
		l.up.SendEncoded(frame) // a front end that is gone is given back by Closed
	}
}

// lost tells the front end that the ranks of l's node cannot be reached any more.
func (r *ciosRelay) lost(l *ciosLink) {
	var ranks []uint32
	for _, rank := range r.job.SortedRanks() {
		if r.job.Ranks[rank] == l.node {
			ranks = append(ranks, rank)
		}
	}
	r.logf("agent: job %d: the toolctld of compute node %d is gone: ranks %v unreachable", r.job.ID, l.node, ranks)
	for _, rank := range ranks {
		n := &cdti.Notify{Header: r.job.header(rank),
			Kind: cdti.NotifyTypeUnreachable, Lost: uint32(len(ranks))}
		if l.up.Notify(n) != nil {
			return
		}
	}
}

// book records what an ack of the tool's request did: ranks attached, detached, controlled
// or released, traps planted and removed.
func (l *ciosLink) book(req cdti.Message, frame []byte) {
	ack, err := cdti.DecodeMessage(frame)
	if err != nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	rank := req.Hdr().Rank
	switch a := ack.(type) {
	case *cdti.AttachAck:
		if a.ReturnCode == cdti.Success {
			for _, rk := range a.Ranks {
				l.attached[rk] = true
			}
		}
	case *cdti.DetachAck:
		// toolctld forgets the tool at any DetachAck (§9.6).
		clear(l.attached)
		clear(l.control)
	case *cdti.ControlAck:
		if a.ReturnCode == cdti.Success {
			l.control[rank] = true
		}
	case *cdti.UpdateAck:
		u, ok := req.(*cdti.Update)
		if !ok || a.ReturnCode != cdti.Success {
			return
		}
		for i, res := range a.Results {
			if i >= len(u.Commands) || res.Code != cdti.CmdSuccess {
				continue
			}
			switch c := u.Commands[i].(type) {
			case *cdti.SetBreakpoint:
				k := trapKey{rank, c.Addr}
				if o, ok := l.origs[k]; ok {
					l.traps[k] = o
					delete(l.origs, k)
				}
			case *cdti.ResetBreakpoint:
				delete(l.traps, trapKey{rank, c.Addr})
			case *cdti.ReleaseControl:
				delete(l.control, rank)
			}
		}
	}
}

// readOriginals reads, as the tool, the instruction under each trap u plants where none of
// the tool's is planted yet, for the give-back to restore. A read that fails leaves that trap
// to the front end.
func (l *ciosLink) readOriginals(h cdti.Header, u *cdti.Update, timeout time.Duration) {
	var cmds []cdti.Command
	var keys []trapKey
	l.mu.Lock()
	for _, c := range u.Commands {
		if sb, ok := c.(*cdti.SetBreakpoint); ok {
			k := trapKey{h.Rank, sb.Addr}
			_, planted := l.traps[k]
			if _, read := l.origs[k]; !planted && !read {
				keys = append(keys, k)
				cmds = append(cmds, &cdti.GetMemory{ThreadID: sb.ThreadID, Addr: sb.Addr, Length: 4})
			}
		}
	}
	l.mu.Unlock()
	if len(cmds) == 0 {
		return
	}
	ack, err := l.call(&cdti.Query{Header: cdti.Header{Rank: h.Rank, JobID: h.JobID, ToolID: h.ToolID}, Commands: cmds}, timeout)
	qa, ok := ack.(*cdti.QueryAck)
	if err != nil || !ok || qa.ReturnCode != cdti.Success {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, res := range qa.Results {
		if g, ok := res.Ack.(*cdti.GetMemoryAck); ok && i < len(keys) && res.Code == cdti.CmdSuccess && len(g.Data) == 4 {
			// BG/Q is big-endian. A trap read there is a plant of the tool's that overtook
			// this read, not the original: the CNK refuses it in ResetBreakpoint (§8.8).
			if w := binary.BigEndian.Uint32(g.Data); !ppc64.IsTrap(w) {
				l.origs[keys[i]] = w
			}
		}
	}
}

// call sends one request of the relay's own and waits for its ack.
func (l *ciosLink) call(m cdti.Message, timeout time.Duration) (cdti.Message, error) {
	l.mu.Lock()
	if l.dead {
		l.mu.Unlock()
		return nil, errors.New("toolctld link lost")
	}
	l.seq++
	seq := ciosOwnSeq | l.seq
	ch := make(chan cdti.Message, 1)
	l.own[seq] = ch
	l.mu.Unlock()
	h := m.Hdr()
	h.Service, h.Version, h.SequenceID = cdti.ServiceToolctl, cdti.ProtocolVersion, seq
	b, err := cdti.Encode(m)
	if err == nil {
		err = l.write(b)
	}
	if err != nil {
		l.mu.Lock()
		delete(l.own, seq)
		l.mu.Unlock()
		return nil, err
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case a, ok := <-ch:
		if !ok {
			return nil, errors.New("toolctld link lost")
		}
		return a, nil
	case <-t.C:
		l.mu.Lock()
		delete(l.own, seq)
		l.mu.Unlock()
		return nil, fmt.Errorf("no answer in %v", timeout)
	}
}

// forget drops what the tool had of rank, whose process has ended.
func (l *ciosLink) forget(rank uint32) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.attached, rank)
	delete(l.control, rank)
	for k := range l.traps {
		if k.rank == rank {
			delete(l.traps, k)
		}
	}
	for k := range l.origs {
		if k.rank == rank {
			delete(l.origs, k)
		}
	}
}

// header is the header of one of the relay's own requests about rank: the ids jobctld gave
// the tool, which toolctld and the CNK know it by.
func (j *CIOSJob) header(rank uint32) cdti.Header {
	return cdti.Header{Rank: rank, JobID: j.ID, ToolID: j.ToolID}
}

// removeTraps takes out the traps the tool left on l's node, their original instructions
// restored. A removal that fails is logged and the trap forgotten: nothing else could take it
// out once the tool has gone.
func (l *ciosLink) removeTraps(job *CIOSJob, timeout time.Duration, logf func(string, ...any)) {
	l.mu.Lock()
	traps := map[uint32][]cdti.Command{}
	for k, orig := range l.traps {
		traps[k.rank] = append(traps[k.rank], &cdti.ResetBreakpoint{Addr: k.addr, Instruction: orig})
	}
	clear(l.traps)
	l.mu.Unlock()
	for rank, cmds := range traps {
		for len(cmds) > 0 {
			n := min(len(cmds), cdti.MaxCommands)
			ack, err := l.call(&cdti.Update{Header: job.header(rank), Commands: cmds[:n]}, timeout)
			logGiveBack(logf, l.node, "remove traps", rank, ack, err)
			cmds = cmds[n:]
		}
	}
}

// logGiveBack logs a step of a give-back that failed.
func logGiveBack(logf func(string, ...any), node uint32, what string, rank uint32, ack cdti.Message, err error) {
	if err == nil && ack != nil && ack.Hdr().ReturnCode != cdti.Success {
		err = fmt.Errorf("%v", ack.Hdr().ReturnCode)
	}
	if err != nil {
		logf("agent: compute node %d: give back rank %d: %s: %v", node, rank, what, err)
	}
}

// giveBack undoes what the tool left on l's node: its traps removed (original instructions
// restored), control released (a process stopped for a notification continues), the node's
// ranks detached. Each step that fails is logged and the next tried.
func (l *ciosLink) giveBack(job *CIOSJob, timeout time.Duration, logf func(string, ...any)) {
	l.mu.Lock()
	var control, attached []uint32
	for rk := range l.control {
		control = append(control, rk)
	}
	for rk := range l.attached {
		attached = append(attached, rk)
	}
	l.mu.Unlock()
	if len(attached) == 0 {
		return
	}
	l.removeTraps(job, timeout, logf)
	for _, rank := range control {
		// With notifications pending, the CNK continues the notified thread and keeps control
		// (CmdPendingNotify): the next one is then released in turn.
		for range 64 {
			ack, err := l.call(&cdti.Update{Header: job.header(rank), Commands: []cdti.Command{&cdti.ReleaseControl{Notify: cdti.ReleaseInactive}}}, timeout)
			if ua, ok := ack.(*cdti.UpdateAck); ok && err == nil && ua.ReturnCode == cdti.Success &&
				len(ua.Results) > 0 && ua.Results[0].Code == cdti.CmdPendingNotify {
				continue
			}
			logGiveBack(logf, l.node, "release control", rank, ack, err)
			break
		}
	}
	ack, err := l.call(&cdti.Detach{Header: job.header(attached[0]), Select: cdti.RanksInNode}, timeout)
	logGiveBack(logf, l.node, "detach", attached[0], ack, err)
	l.mu.Lock()
	clear(l.attached)
	clear(l.control)
	l.mu.Unlock()
}

// rankInfos describes the job's ranks as the management call ranks reports them: on BG/Q a
// rank's "pid" is its compute node's id, as runjob's proc table has it.
func (r *ciosRelay) rankInfos() []RankInfo {
	var out []RankInfo
	for _, rank := range r.job.SortedRanks() {
		out = append(out, RankInfo{Rank: int(rank), Pid: int(r.job.Ranks[rank]), Executable: r.job.Exe, State: "running"})
	}
	return out
}
