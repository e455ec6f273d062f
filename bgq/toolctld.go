package bgq

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"

	"github.com/hpcdap/hpcdap/cdti"
)

var be = binary.BigEndian

// controlToolID is the tool id the emulated control system uses on a CNK link for what a real
// control system does through its own job messages (start a held job, learn of an exit). The
// runjob server hands out tool ids from 1 upwards, so it never reaches this one.
const controlToolID = 0xffffffff

// toolctld is the tool-control daemon of one compute node: the listener tools connect to and
// the one link to the node's CNK.
type toolctld struct {
	node  uint32 // compute-node id
	jobID uint64
	ranks []uint32
	path  string // listening socket
	ln    *net.UnixListener
	link  net.Conn
	logf  func(format string, args ...any)
	// trace, when set, receives every frame written to the CNK link (in false) and read from
	// it (in true), in order.
	trace func(in bool, frame []byte)

	lw sync.Mutex // serializes writes to link

	mu     sync.Mutex
	conns  map[*toolConn]bool
	ids    map[uint32]*toolConn // attached tool ids and their connections
	queue  []*request
	busy   *request // the request the CNK is answering
	closed bool
	done   chan struct{}
	wg     sync.WaitGroup
}

// toolConn is one tool's connection to a toolctld.
type toolConn struct {
	c   net.Conn
	wmu sync.Mutex
}

// request is a message waiting for (or being answered by) the CNK.
type request struct {
	from  *toolConn   // nil: the control system's own request
	frame []byte      // sent unaltered
	reply chan []byte // the control system's requests: the answer, or nil if the link failed
}

// send writes one frame to the tool, whole.
func (tc *toolConn) send(b []byte) error {
	tc.wmu.Lock()
	defer tc.wmu.Unlock()
	return cdti.WriteFrame(tc.c, b)
}

// startToolctld listens at path and serves the tools of compute node node over link, an
// authenticated CDTI connection to its CNK.
func startToolctld(path string, node uint32, jobID uint64, ranks []uint32, link net.Conn, trace func(bool, []byte), logf func(string, ...any)) (*toolctld, error) {
	if c, err := net.Dial("unix", path); err == nil {
		// A compute node runs one job at a time: another job under the same root holds it.
		c.Close()
		return nil, fmt.Errorf("toolctld %d: %s is in use by another job under the same root: give this one another --root", node, path)
	}
	os.Remove(path) // left by a job that did not end cleanly
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("toolctld %d: listen %s: %w", node, path, err)
	}
	if err := os.Chmod(path, 0o700); err != nil {
		ln.Close()
		return nil, fmt.Errorf("toolctld %d: chmod %s: %w", node, path, err)
	}
	d := &toolctld{node: node, jobID: jobID, ranks: ranks, path: path, ln: ln, link: link, trace: trace, logf: logf,
		conns: map[*toolConn]bool{}, ids: map[uint32]*toolConn{}, done: make(chan struct{})}
	d.wg.Add(2)
	go d.accept()
	go d.readLink()
	return d, nil
}

// close stops the listener, the tools' connections and the link, and waits for them.
func (d *toolctld) close() {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		d.wg.Wait()
		return
	}
	d.closed = true
	close(d.done)
	for tc := range d.conns {
		tc.c.Close()
	}
	d.mu.Unlock()
	d.ln.Close()
	d.link.Close()
	os.Remove(d.path)
	d.wg.Wait()
}

// accept takes tool connections: up to cdti.MaxActiveTools at a time; a further one gets an
// ErrorAck(ToolMaxAttachedExceeded) of 40 bytes and is closed (§2.9).
func (d *toolctld) accept() {
	defer d.wg.Done()
	for {
		c, err := d.ln.Accept()
		if err != nil {
			return
		}
		tc := &toolConn{c: c}
		d.mu.Lock()
		full := len(d.conns) >= cdti.MaxActiveTools
		if !full && !d.closed {
			d.conns[tc] = true
		}
		closed := d.closed
		d.mu.Unlock()
		if full || closed {
			if full {
				tc.send(errorAck(cdti.Header{}, cdti.ToolMaxAttachedExceeded))
			}
			c.Close()
			continue
		}
		d.wg.Add(1)
		go d.serveTool(tc)
	}
}

// errorAck is a 40-byte ErrorAck with the header of h (zero for none) and return code rc.
func errorAck(h cdti.Header, rc cdti.ReturnCode) []byte {
	b, err := cdti.Encode(&cdti.ErrorAck{Header: h.Reply(rc)})
	if err != nil {
		panic(err) // a fixed-size message always encodes
	}
	return b
}

// bareAck is toolctld's own answer of type t to request h, with return code rc and length n
// and a zeroed body: what toolctld sends for a tool id it does not know (§9.1, §9.7).
func bareAck(h cdti.Header, t cdti.MessageType, rc cdti.ReturnCode, n int) []byte {
	if n < cdti.ToolMessageSize {
		n = cdti.ToolMessageSize
	}
	b := make([]byte, n)
	b[0], b[1] = byte(cdti.ServiceToolctl), cdti.ProtocolVersion
	be.PutUint16(b[2:], uint16(t))
	be.PutUint32(b[4:], h.Rank)
	be.PutUint32(b[8:], h.SequenceID)
	be.PutUint32(b[12:], uint32(rc))
	be.PutUint32(b[20:], uint32(n))
	be.PutUint64(b[24:], h.JobID)
	be.PutUint32(b[32:], h.ToolID)
	return b
}

// attachAckSize is the size of an AttachAck (cdti-v6.md §5.3).
const attachAckSize = 304

// serveTool reads one tool's messages until its socket closes.
func (d *toolctld) serveTool(tc *toolConn) {
	defer d.wg.Done()
	defer d.dropTool(tc)
	for {
		b, err := cdti.ReadFrame(tc.c)
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				d.logf("toolctld %d: read tool: %v", d.node, err)
			}
			return
		}
		h, _ := cdti.ParseHeader(b)
		if len(b) < cdti.ToolMessageSize {
			tc.send(errorAck(h, cdti.UnsupportedType))
			continue
		}
		switch h.Type {
		case cdti.MsgAttach:
			if h.Service != cdti.ServiceToolctl {
				tc.send(errorAck(h, cdti.WrongService))
				continue
			}
			if h.Version != cdti.ProtocolVersion {
				d.logf("toolctld %d: tool %d attaches with protocol version %d, not %d", d.node, h.ToolID, h.Version, cdti.ProtocolVersion)
			}
			if h.ToolID == controlToolID {
				tc.send(bareAck(h, cdti.MsgAttachAck, cdti.ToolIdConflict, attachAckSize))
				continue // the control system's own id is never a tool's
			}
			d.mu.Lock()
			owner, taken := d.ids[h.ToolID]
			if !taken {
				d.ids[h.ToolID] = tc // recorded before the CNK answers (§9.1)
			}
			d.mu.Unlock()
			if taken && owner != tc {
				tc.send(bareAck(h, cdti.MsgAttachAck, cdti.ToolIdConflict, attachAckSize))
				continue
			}
		case cdti.MsgDetach, cdti.MsgQuery, cdti.MsgUpdate, cdti.MsgControl:
			d.mu.Lock()
			owner := d.ids[h.ToolID]
			d.mu.Unlock()
			if owner != tc {
				tc.send(bareAck(h, h.Type+1, cdti.ToolIdError, len(b)))
				continue
			}
		default:
			tc.send(errorAck(h, cdti.UnsupportedType))
			continue
		}
		d.enqueue(&request{from: tc, frame: b})
	}
}

// enqueue queues a request and sends it if the CNK is idle.
func (d *toolctld) enqueue(r *request) {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		if r.reply != nil {
			close(r.reply)
		}
		return
	}
	d.queue = append(d.queue, r)
	d.mu.Unlock()
	d.next()
}

// next sends the first queued request when none is outstanding.
func (d *toolctld) next() {
	d.mu.Lock()
	if d.busy != nil || len(d.queue) == 0 || d.closed {
		d.mu.Unlock()
		return
	}
	r := d.queue[0]
	d.queue = d.queue[1:]
	d.busy = r
	d.mu.Unlock()
	if err := d.writeLink(r.frame); err != nil {
		d.logf("toolctld %d: write to the CNK: %v", d.node, err)
		d.link.Close() // readLink fails what waits
	}
}

// writeLink writes one frame to the CNK.
func (d *toolctld) writeLink(b []byte) error {
	d.lw.Lock()
	defer d.lw.Unlock()
	if d.trace != nil {
		d.trace(false, append([]byte(nil), b...))
	}
	return cdti.WriteFrame(d.link, b)
}

// readLink reads the CNK's messages: a Notify goes to its tool and is answered here; anything
// else answers the outstanding request.
func (d *toolctld) readLink() {
	defer d.wg.Done()
	defer d.failAll()
	for {
		b, err := cdti.ReadFrame(d.link)
		if err != nil {
			select {
			case <-d.done:
			default:
				d.logf("toolctld %d: read the CNK: %v", d.node, err)
			}
			return
		}
		if d.trace != nil {
			d.trace(true, b)
		}
		h, _ := cdti.ParseHeader(b)
		if h.Type == cdti.MsgNotify {
			d.mu.Lock()
			tc := d.ids[h.ToolID]
			d.mu.Unlock()
			if tc != nil {
				tc.send(b)
			}
			ack := bareAck(h, cdti.MsgNotifyAck, cdti.Success, cdti.ToolMessageSize)
			if err := d.writeLink(ack); err != nil {
				d.logf("toolctld %d: notify ack: %v", d.node, err)
				return
			}
			continue
		}
		d.mu.Lock()
		r := d.busy
		d.busy = nil
		if r != nil && h.Type == cdti.MsgDetachAck && r.from != nil && d.ids[h.ToolID] == r.from {
			delete(d.ids, h.ToolID) // whatever the return code (§9.6)
		}
		live := r != nil && r.from != nil && d.conns[r.from]
		d.mu.Unlock()
		switch {
		case r == nil:
			d.logf("toolctld %d: %v from the CNK with no request outstanding", d.node, h.Type)
		case r.reply != nil:
			r.reply <- b
		case live:
			r.from.send(b)
		}
		d.next()
	}
}

// failAll ends the control system's requests when the link is gone.
func (d *toolctld) failAll() {
	d.mu.Lock()
	rs := append(d.queue, d.busy)
	d.queue, d.busy = nil, nil
	d.mu.Unlock()
	for _, r := range rs {
		if r != nil && r.reply != nil {
			close(r.reply)
		}
	}
}

// dropTool forgets a tool whose socket closed: its queued requests, its tool ids. Like a real
// toolctld (cdti-v6.md §9.6) it does not tell the CNK, which goes on believing the tool
// attached and in control: a tool must give its ranks back before it goes, as hpcdap's agent
// does when it runs as a CIOS tool.
func (d *toolctld) dropTool(tc *toolConn) {
	tc.c.Close()
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.conns, tc)
	for id, o := range d.ids {
		if o == tc {
			delete(d.ids, id)
		}
	}
	q := d.queue[:0]
	for _, r := range d.queue {
		if r.from != tc {
			q = append(q, r)
		}
	}
	d.queue = q
}

// header is the header of a control-system request about rank for tool id.
func (d *toolctld) header(rank, id uint32) cdti.Header {
	return cdti.Header{Service: cdti.ServiceToolctl, Version: cdti.ProtocolVersion, Rank: rank, JobID: d.jobID, ToolID: id}
}

// call sends a request of the control system through the FIFO and waits for its answer.
func (d *toolctld) call(m cdti.Message) (cdti.Message, error) {
	b, err := cdti.Encode(m)
	if err != nil {
		return nil, fmt.Errorf("encode %v: %w", m.MessageType(), err)
	}
	r := &request{frame: b, reply: make(chan []byte, 1)}
	d.enqueue(r)
	reply, ok := <-r.reply
	if !ok {
		return nil, fmt.Errorf("%v rank %d: the CNK link is closed", m.MessageType(), m.Hdr().Rank)
	}
	return cdti.DecodeMessage(reply)
}

// startRanks starts the node's ranks that no tool holds: the control system's StartJob.
// Attaching and detaching controlToolID starts a loaded rank that has no other tool.
func (d *toolctld) startRanks() error {
	if len(d.ranks) == 0 {
		return nil
	}
	at := &cdti.Attach{Header: d.header(d.ranks[0], controlToolID), Tag: cdti.NewTag("runjob"), Select: cdti.RanksInNode}
	reply, err := d.call(at)
	if err != nil {
		return fmt.Errorf("start job on node %d: %w", d.node, err)
	}
	switch rc := reply.Hdr().ReturnCode; rc {
	case cdti.Success:
	case cdti.ToolMaxAttachedExceeded, cdti.ToolRankNotFound, cdti.ToolProcessExiting:
		return nil // tools hold the ranks, or they have run and ended
	default:
		return fmt.Errorf("start job on node %d: attach: %v", d.node, rc)
	}
	if _, err := d.call(&cdti.Detach{Header: d.header(d.ranks[0], controlToolID), Select: cdti.RanksInNode}); err != nil {
		return fmt.Errorf("start job on node %d: %w", d.node, err)
	}
	return nil
}

// running reports the node's ranks that have not exited, asking the CNK with a Query of
// controlToolID: an exited rank's answer is ToolProcessExiting (or ToolRankNotFound).
func (d *toolctld) running() ([]uint32, error) {
	var live []uint32
	for _, rank := range d.ranks {
		reply, err := d.call(&cdti.Query{Header: d.header(rank, controlToolID),
			Commands: []cdti.Command{&cdti.GetProcessData{}}})
		if err != nil {
			return nil, fmt.Errorf("node %d: rank %d: %w", d.node, rank, err)
		}
		switch reply.Hdr().ReturnCode {
		case cdti.ToolProcessExiting, cdti.ToolRankNotFound:
		default:
			live = append(live, rank)
		}
	}
	return live, nil
}
