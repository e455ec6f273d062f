package cdti

import (
	"fmt"
	"sort"
	"time"
)

// Exits (extension message 5108) reports the end of several ranks' processes in one message,
// reduced: one group per (job, tool, wait status), with the ranks that ended so as strided
// ranges. It stands for the Termination Notifies of those ranks, which CNK sends one a rank.
//
// A Conn whose peer said ExtensionVersion 3 or later in its Hello coalesces the Termination
// Notifies it is given (Notify, or SendEncoded for a relayed one) and the Exits relayed to it
// into one Exits: the first report waits at most Server.ExitDelay (2 ms) for others, and any other message
// written on the connection, or its Close, sends what waits first, so that no report is ever
// sent after a message that followed it. A tree of agents thus reduces a job's end on the way
// up: 1,024 ranks that end with status 0 reach the tool as a few messages of a few ranges
// each. The Client turns an Exits back into the Termination Notifies it stands for (version 0,
// the Exits' sequence id), in rank order within each group, so that its receivers see no
// difference. A peer of an older version is sent one Notify a rank, as before.
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
	exitsBaseSize  = 48
	exitGroupSize  = 24
	maxExitsGroups = (MaxFrameSize - exitsBaseSize) / (exitGroupSize + rangeBytes)
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

// Notifies returns the Termination Notifies m stands for, in its groups' order and each
// group's in rank order.
func (m *Exits) Notifies() []*Notify {
	var out []*Notify
	for _, g := range m.Groups {
		for _, r := range g.Ranks.Ranks() {
			out = append(out, &Notify{
				Header: Header{Service: m.Service, Type: MsgNotify, Rank: r, SequenceID: m.SequenceID,
					Length: notifySize, JobID: g.JobID, ToolID: g.ToolID},
				Kind: NotifyTypeTermination, Exit: g.Status,
			})
		}
	}
	return out
}

// exitKey is what the ranks of one ExitGroup share.
type exitKey struct {
	job    uint64
	tool   uint32
	status ExitStatus
}

// exitBatch is the reports a Conn holds for its next Exits (guarded by Conn.wmu).
type exitBatch struct {
	groups map[exitKey]RankRanges
	size   int         // the encoded size of an Exits of them, bounded above
	timer  *time.Timer // sends them when it fires
}

// acceptsExits reports whether the peer accepts Exits (see Exits).
func (c *Conn) acceptsExits() bool { return c.hello != nil && c.hello.ExtVersion >= exitsVersion }

// reportExits adds the ended ranks of groups to the reports waiting on c, sends them when
// they would no longer fit one message, and otherwise has them sent within ExitDelay. A peer
// that does not accept Exits is sent one Termination Notify a rank at once.
func (c *Conn) reportExits(groups []ExitGroup) error {
	if !c.acceptsExits() {
		for _, g := range groups {
			for _, r := range g.Ranks.Ranks() {
				err := c.Notify(&Notify{Header: Header{Rank: r, JobID: g.JobID, ToolID: g.ToolID},
					Kind: NotifyTypeTermination, Exit: g.Status})
				if err != nil {
					return err
				}
			}
		}
		return nil
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	for _, g := range groups {
		k := exitKey{g.JobID, g.ToolID, g.Status}
		if c.exits.size+exitGroupSize+round8(rangeBytes*len(g.Ranks)) > MaxFrameSize || len(c.exits.groups) >= maxExitsGroups {
			if err := c.flushExitsLocked(c.srv.writeTimeout()); err != nil {
				return err
			}
		}
		if c.exits.groups == nil {
			c.exits.groups = make(map[exitKey]RankRanges)
			c.exits.size = exitsBaseSize
		}
		old, had := c.exits.groups[k]
		was := len(old)
		merged := addRanks(old, g.Ranks)
		c.exits.size += round8(rangeBytes*len(merged)) - round8(rangeBytes*was)
		if !had {
			c.exits.size += exitGroupSize
		}
		c.exits.groups[k] = merged
	}
	if c.exits.timer == nil && len(c.exits.groups) > 0 {
		c.exits.timer = time.AfterFunc(c.srv.exitDelay(), c.flushExits)
	}
	return nil
}

// addRanks returns the union of set, which it may modify, and more. Ranks that come after
// the set's (those of an agent's processes reported in rank order, or of the next agent) are
// appended in constant time each.
func addRanks(set, more RankRanges) RankRanges {
	if len(set) == 0 || more[0].Lo <= set[len(set)-1].Hi {
		return set.Union(more)
	}
	for _, r := range more {
		set = appendRange(set, r)
	}
	return set
}

// flushExits sends the reports waiting on c.
func (c *Conn) flushExits() {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.flushExitsLocked(c.srv.writeTimeout())
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
	m := &Exits{Header: Header{Service: ServiceToolctl, Version: ProtocolVersion, SequenceID: c.notifySeq.Add(1)}}
	for k, rs := range c.exits.groups {
		m.Groups = append(m.Groups, ExitGroup{JobID: k.job, ToolID: k.tool, Status: k.status, Ranks: rs})
	}
	sort.Slice(m.Groups, func(i, j int) bool { return m.Groups[i].Ranks[0].Lo < m.Groups[j].Ranks[0].Lo })
	c.exits.groups, c.exits.size = nil, 0
	b, err := Encode(m)
	if err != nil {
		return err
	}
	return c.writeLocked(b, timeout)
}

// exitsOf returns the exit reports an encoded message carries: a Termination Notify's or an
// Exits' (ok false for any other message, or one that does not decode).
func exitsOf(frame []byte) (groups []ExitGroup, ok bool) {
	h, err := ParseHeader(frame)
	if err != nil || (h.Type != MsgNotify && h.Type != MsgExits) {
		return nil, false
	}
	m, err := DecodeMessage(frame)
	if err != nil {
		return nil, false
	}
	switch m := m.(type) {
	case *Notify:
		if m.Kind != NotifyTypeTermination {
			return nil, false
		}
		return []ExitGroup{{JobID: m.JobID, ToolID: m.ToolID, Status: m.Exit, Ranks: RanksOf(m.Rank)}}, true
	case *Exits:
		return m.Groups, true
	}
	return nil, false
}
