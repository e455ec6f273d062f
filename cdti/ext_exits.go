package cdti

import (
	"fmt"
	"net"
	"slices"
	"time"
)

// Exits (extension message 5108) reports the end of several ranks' processes in one message,
// reduced: groups of ranks of one job that ended with one same wait status for one tool, as
// strided ranges. It stands for the Termination Notifies of those ranks, which CNK sends one
// a rank. Several groups may share a job, tool and status.
//
// A Conn whose peer said ExtensionVersion 3 or later in its Hello coalesces the Termination
// Notifies it is given (Notify, or SendEncoded for a relayed one) and the Exits relayed to it
// into one Exits: the first report waits at most Server.ExitDelay (2 ms) for others, and any
// other message written on the connection, or its Close, sends what waits first, so that no
// report is ever sent after a message that followed it. A tree of agents thus reduces a job's end on the way
// up: 1,024 ranks that end with status 0 reach the tool as a few messages of a few ranges
// each. The Client turns an Exits back into the Termination Notifies it stands for (version 0,
// the Exits' sequence id), in rank order within each group, so that its receivers see no
// difference; it queues an Exits as one notification, whatever its number of ranks. A peer of
// an older version, and any tool of an agent that answers as a CNK, is sent one Notify a rank,
// as before.
type Exits struct {
	Header
	Groups []ExitGroup
}

// ExitGroup is the ranks of one job that ended with one same wait status, for one tool.
type ExitGroup struct {
	JobID  uint64
	ToolID uint32
	Status ExitStatus
	Ranks  RankRanges
}

// MsgExits is the extension message type of Exits. A tool never answers it.
const MsgExits MessageType = 5108

// exitsVersion is the first ExtensionVersion whose peers accept Exits.
const exitsVersion = 3

// exitDelay is Server.ExitDelay's default.
const exitDelay = 2 * time.Millisecond

func (s *Server) exitDelay() time.Duration {
	if s.ExitDelay > 0 {
		return s.ExitDelay
	}
	return exitDelay
}

// Layout: group count u32 @40, 4 bytes padding; the groups from @48, each job id u64, tool id
// u32, wait status u32, range count u32, 4 bytes padding, and its ranges (lo, hi, stride u32
// each) padded to 8.
const (
	exitsBaseSize = 48
	exitGroupSize = 24
)

func (m *Exits) MessageType() MessageType { return MsgExits }

func (m *Exits) encodedSize(bool) (int, error) {
	if len(m.Groups) == 0 {
		return 0, fmt.Errorf("cdti: encode Exits: no group")
	}
	n := exitsBaseSize
	for _, g := range m.Groups {
		if len(g.Ranks) == 0 {
			return 0, fmt.Errorf("cdti: encode Exits: a group of no rank")
		}
		n += exitGroupSize + round8(rangeBytes*len(g.Ranks))
	}
	return n, nil
}

func (m *Exits) encodeBody(b []byte) {
	be.PutUint32(b[40:], uint32(len(m.Groups)))
	at := exitsBaseSize
	for _, g := range m.Groups {
		be.PutUint64(b[at:], g.JobID)
		be.PutUint32(b[at+8:], g.ToolID)
		be.PutUint32(b[at+12:], uint32(g.Status))
		be.PutUint32(b[at+16:], uint32(len(g.Ranks)))
		at = putRangesAt(b, at+exitGroupSize, g.Ranks)
	}
}

func decExits(h Header, b []byte) (Message, error) {
	if err := needMsg(h, b, exitsBaseSize); err != nil {
		return nil, err
	}
	n := be.Uint32(b[40:])
	if n == 0 {
		return nil, malformed(h.Type, "no group")
	}
	if uint64(n)*(exitGroupSize+rangeBytes) > uint64(len(b)-exitsBaseSize) {
		return nil, malformed(h.Type, "%d groups in a %d-byte message", n, len(b))
	}
	m := &Exits{Header: h, Groups: make([]ExitGroup, n)}
	at := exitsBaseSize
	for i := range m.Groups {
		if at+exitGroupSize > len(b) {
			return nil, malformed(h.Type, "group %d at %d in a %d-byte message", i, at, len(b))
		}
		g := ExitGroup{JobID: be.Uint64(b[at:]), ToolID: be.Uint32(b[at+8:]), Status: ExitStatus(be.Uint32(b[at+12:]))}
		count := be.Uint32(b[at+16:])
		if count == 0 {
			return nil, malformed(h.Type, "group %d of no rank", i)
		}
		at += exitGroupSize
		var err error
		if g.Ranks, err = readRanges(h.Type, b, &at, count); err != nil {
			return nil, err
		}
		m.Groups[i] = g
	}
	if at != len(b) {
		return nil, malformed(h.Type, "%d bytes after the groups", len(b)-at)
	}
	return m, nil
}

// exitsCursor hands out the Termination Notifies an Exits stands for one at a time, in its
// groups' order and each group's in rank order, without listing its ranks (a set of a few
// bytes may hold millions).
type exitsCursor struct {
	m    *Exits
	g, r int    // the group and range of the next rank
	next uint64 // the next rank, within range r
}

func newExitsCursor(m *Exits) *exitsCursor {
	return &exitsCursor{m: m, next: uint64(m.Groups[0].Ranks[0].Lo)}
}

// pop returns the next rank's Termination Notify, and whether more follow.
func (x *exitsCursor) pop() (*Notify, bool) {
	g := x.m.Groups[x.g]
	rg := g.Ranks[x.r]
	n := &Notify{
		Header: Header{Service: x.m.Service, Type: MsgNotify, Rank: uint32(x.next), SequenceID: x.m.SequenceID,
			Length: notifySize, JobID: g.JobID, ToolID: g.ToolID},
		Kind: NotifyTypeTermination, Exit: g.Status,
	}
	x.next += uint64(rg.Stride)
	if x.next > uint64(rg.Hi) {
		x.r++
		if x.r == len(g.Ranks) {
			x.g, x.r = x.g+1, 0
			if x.g == len(x.m.Groups) {
				return n, false
			}
		}
		x.next = uint64(x.m.Groups[x.g].Ranks[x.r].Lo)
	}
	return n, true
}

// exitKey is what the ranks of one ExitGroup share.
type exitKey struct {
	job    uint64
	tool   uint32
	status ExitStatus
}

// exitBatch is the reports a Conn holds for its next Exits (guarded by Conn.wmu): groups in
// the order they came, a key's ranks that come after its last group's extending that group
// (an agent's processes reported in rank order, the next agent's after them), others making
// a group of their own, so that adding a report never lists a set's ranks.
type exitBatch struct {
	groups []ExitGroup
	last   map[exitKey]int // each key's last group
	size   int             // the encoded size of an Exits of groups
	timer  *time.Timer     // sends them when it fires
}

// acceptsExits reports whether the peer accepts Exits (see Exits): a tool of extension
// version 3 or later, and never behind a CNK (a real one sends one Notify a rank).
func (c *Conn) acceptsExits() bool {
	return !c.srv.CNK && c.hello != nil && c.hello.ExtVersion >= exitsVersion
}

// reportExits adds the ended ranks of groups to the reports waiting on c, sends them when
// they would no longer fit one message, and otherwise has them sent within ExitDelay. A peer
// that does not accept Exits is sent one Termination Notify a rank at once.
func (c *Conn) reportExits(groups []ExitGroup) error {
	if !c.acceptsExits() {
		for _, g := range groups {
			for _, rg := range g.Ranks {
				for r := uint64(rg.Lo); r <= uint64(rg.Hi); r += uint64(rg.Stride) {
					err := c.Notify(&Notify{Header: Header{Rank: uint32(r), JobID: g.JobID, ToolID: g.ToolID},
						Kind: NotifyTypeTermination, Exit: g.Status})
					if err != nil {
						return err
					}
				}
			}
		}
		return nil
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.done || (c.closing && !c.suspended) {
		return fmt.Errorf("write: %w", net.ErrClosed)
	}
	for _, g := range groups {
		if err := c.addExitsLocked(exitKey{g.JobID, g.ToolID, g.Status}, g.Ranks); err != nil {
			return err
		}
	}
	if c.exits.timer == nil && len(c.exits.groups) > 0 {
		c.exits.timer = time.AfterFunc(c.srv.exitDelay(), c.flushExits)
	}
	return nil
}

// addExitsLocked adds the ranks rs of key k to the batch, c.wmu held, sending the batch first
// whenever they would not fit in its message.
func (c *Conn) addExitsLocked(k exitKey, rs RankRanges) error {
	for len(rs) > 0 {
		if c.exits.groups == nil {
			c.exits.last = make(map[exitKey]int)
			c.exits.size = exitsBaseSize
		}
		// After the key's last group: extend it. appendRange changes only the last range
		// of what it extends, so the extension is tried on a copy of that range alone.
		if i, ok := c.exits.last[k]; ok {
			cur := c.exits.groups[i].Ranks
			if rs[0].Lo > cur[len(cur)-1].Hi {
				tail := RankRanges{cur[len(cur)-1]}
				for _, r := range rs {
					tail = appendRange(tail, r)
				}
				merged := len(cur) - 1 + len(tail)
				if grow := round8(rangeBytes*merged) - round8(rangeBytes*len(cur)); c.exits.size+grow <= MaxFrameSize {
					c.exits.groups[i].Ranks = append(cur[:len(cur)-1], tail...)
					c.exits.size += grow
					return nil
				}
			}
		}
		// A group of its own, of as many ranges as fit.
		room := (MaxFrameSize - c.exits.size - exitGroupSize) / rangeBytes
		if room < 1 {
			if err := c.flushExitsLocked(c.srv.writeTimeout()); err != nil {
				return err
			}
			continue
		}
		part := rs[:min(room, len(rs))]
		rs = rs[len(part):]
		c.exits.last[k] = len(c.exits.groups)
		c.exits.groups = append(c.exits.groups, ExitGroup{JobID: k.job, ToolID: k.tool, Status: k.status, Ranks: slices.Clone(part)})
		c.exits.size += exitGroupSize + round8(rangeBytes*len(part))
	}
	return nil
}

// flushExits sends the reports waiting on c (ExitDelay's timer).
func (c *Conn) flushExits() {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := c.flushExitsLocked(c.srv.writeTimeout()); err != nil {
		c.srv.logf("cdti: connection %d: exit reports: %v", c.id, err)
	}
}

// flushExitsLocked sends the reports waiting on c as one Exits within timeout, c.wmu held.
func (c *Conn) flushExitsLocked(timeout time.Duration) error {
	if c.exits.timer != nil {
		c.exits.timer.Stop()
		c.exits.timer = nil
	}
	if len(c.exits.groups) == 0 {
		return nil
	}
	m := &Exits{Header: Header{Service: ServiceToolctl, Version: ProtocolVersion, SequenceID: c.notifySeq.Add(1)}, Groups: c.exits.groups}
	c.exits = exitBatch{}
	b, err := Encode(m) // within MaxFrameSize: addExitsLocked counted every byte
	if err != nil {
		return err
	}
	return c.writeLocked(b, timeout)
}

// exitsOf returns the exit reports an encoded message carries: a Termination Notify's or an
// Exits' (ok false for any other message). A malformed Exits is an error.
func exitsOf(frame []byte) (groups []ExitGroup, ok bool, err error) {
	h, _ := ParseHeader(frame)
	switch {
	case h.Type == MsgNotify && len(frame) >= notifySize && NotifyKind(be.Uint32(frame[40:])) == NotifyTypeTermination:
		return []ExitGroup{{JobID: h.JobID, ToolID: h.ToolID, Status: ExitStatus(be.Uint32(frame[48:])), Ranks: RanksOf(h.Rank)}}, true, nil
	case h.Type == MsgExits:
		m, err := DecodeMessage(frame)
		if err != nil {
			return nil, false, err
		}
		return m.(*Exits).Groups, true, nil
	}
	return nil, false, nil
}
