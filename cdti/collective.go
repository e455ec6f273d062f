package cdti

import (
	"context"
	"fmt"
	"slices"
	"sort"
)

// Collective (extension message 5104) applies one Query or Update command list to every rank
// of a set, through a tree of agents in one message: each agent applies it to its own ranks of
// the set with its ordinary handler (as if the tool had sent the Query or Update for each
// rank: control authority and CNK semantics hold rank by rank) and forwards it, the set cut to
// their subtrees, to the children whose subtrees hold ranks of it. The answers come back
// reduced (CollectiveAck): ranks whose acks are identical form one group.
type Collective struct {
	Header
	Flags    CollectiveFlags
	Ranks    RankRanges
	Kind     MessageType // MsgQuery or MsgUpdate
	Commands []Command
}

// CollectiveFlags modify a Collective.
type CollectiveFlags uint32

// CollectiveQuietStop asks that the stop a StopProcess of the list makes be reported in the
// collective's answer instead of by a Notify: an agent waits (within the collective's time)
// until the process is stopped and answers StopProcessAck.Reported, the stop then being the
// tool's notification in flight (SIGSTOP, SignalInterrupt, on the process's default thread)
// that was never sent. A stop that does not complete in time is notified as usual when it
// does (Stopping without Reported). A plain StopProcess of the tool on a process stopped
// quietly sends that Notify after all (the tool that lost the collective's answer recovers
// the stop that way).
const CollectiveQuietStop CollectiveFlags = 1

// collectiveFlagsKnown are the flags this package defines; others are malformed.
const collectiveFlagsKnown = CollectiveQuietStop

// CollectiveAck (5105) answers a Collective, reduced: Groups, one per distinct answer, and the
// ranks whose agent could not be reached. An answer too large for one message is sent as
// several CollectiveAcks of the same sequence id, every one but the last with More set; the
// Client puts them together.
type CollectiveAck struct {
	Header
	More        bool
	Kind        MessageType // the groups' replies: MsgQueryAck or MsgUpdateAck (0: MsgQueryAck)
	Unreachable RankRanges
	Groups      []AckGroup
}

// AckGroup is the ranks that gave one same answer to a Collective: the QueryAck or UpdateAck
// of a rank with its message-level ReturnCode and ErrorCode (ErrorCode: an errno, or
// ErrorCodeTimedOut for the ranks of an agent that did not answer in time) and its Results
// (none when the code is not Success). The thread id of a command ack is compared, and
// carried, as 0 where the command named thread 0 (the process's default thread, which differs
// from rank to rank): it is no outcome.
type AckGroup struct {
	Ranks     RankRanges
	Code      ReturnCode
	ErrorCode uint32
	Results   []Result
}

// ErrorCodeTimedOut (ETIMEDOUT) is the ErrorCode of a CollectiveAck group of ranks whose agent
// did not answer a collective in time; their agent is still linked.
const ErrorCodeTimedOut = 110

// Extension message types of the collective.
const (
	MsgCollective    MessageType = 5104
	MsgCollectiveAck MessageType = 5105
)

// MaxCollectiveRanks bounds the ranks of a Collective's set (and of a CollectiveAck's), so
// that an agent never lists more.
const MaxCollectiveRanks = 1 << 22

// Sizes of the collective's layout.
const (
	collectiveBase      = 56 // the ToolMessage, then flags, range count, request length, pad
	collectiveGroupBase = 8  // a group's range count and reply length
	// maxCollectiveReply bounds the predicted ack of a Collective's command list, so that one
	// group (a reply and a range) always fits in one CollectiveAck.
	maxCollectiveReply = MaxFrameSize - collectiveBase - collectiveGroupBase - 2*rangeBytes
)

func (m *Collective) MessageType() MessageType    { return MsgCollective }
func (m *CollectiveAck) MessageType() MessageType { return MsgCollectiveAck }

// request is the Query or Update the collective carries, with a zero header.
func (m *Collective) request(h Header) Message {
	if m.Kind == MsgUpdate {
		return &Update{Header: h, Commands: m.Commands}
	}
	return &Query{Header: h, Commands: m.Commands}
}

func (m *Collective) encodedSize(strict bool) (int, error) {
	if m.Kind != MsgQuery && m.Kind != MsgUpdate {
		return 0, fmt.Errorf("cdti: encode %v: kind %v, want Query or Update", MsgCollective, m.Kind)
	}
	if m.Flags&^collectiveFlagsKnown != 0 {
		return 0, fmt.Errorf("cdti: encode %v: unknown flags %#x", MsgCollective, uint32(m.Flags))
	}
	n, err := m.request(Header{}).encodedSize(strict)
	if err != nil {
		return 0, err
	}
	if m.Ranks.Count() > MaxCollectiveRanks {
		return 0, fmt.Errorf("cdti: encode %v: %d ranks (limit %d)", MsgCollective, m.Ranks.Count(), MaxCollectiveRanks)
	}
	if strict {
		ack := CommandMessageSize
		for _, c := range m.Commands {
			ack = round8(ack) + c.AckSize()
		}
		if ack > maxCollectiveReply {
			return 0, fmt.Errorf("cdti: encode %v: an ack of %d bytes (limit %d)", MsgCollective, ack, maxCollectiveReply)
		}
	}
	return collectiveBase + round8(rangeBytes*len(m.Ranks)) + n, nil
}

func (m *Collective) encodeBody(b []byte) {
	be.PutUint32(b[40:], uint32(m.Flags))
	be.PutUint32(b[44:], uint32(len(m.Ranks)))
	at := putRangesAt(b, collectiveBase, m.Ranks)
	req := m.request(Header{})
	n, _ := req.encodedSize(false)
	be.PutUint32(b[48:], uint32(n))
	hd := req.Hdr()
	hd.put(b[at:], req.MessageType(), n)
	req.encodeBody(b[at : at+n])
}

// putRangesAt writes rs at b[at:] and returns the offset after them, padded to 8.
func putRangesAt(b []byte, at int, rs RankRanges) int {
	for _, r := range rs {
		be.PutUint32(b[at:], r.Lo)
		be.PutUint32(b[at+4:], r.Hi)
		be.PutUint32(b[at+8:], r.Stride)
		at += rangeBytes
	}
	return round8(at)
}

// readRanges decodes n strided ranges at b[*at:] (sorted, spans disjoint), advancing *at past
// them and their padding.
func readRanges(t MessageType, b []byte, at *int, n uint32) (RankRanges, error) {
	if uint64(n)*rangeBytes > uint64(len(b)-*at) {
		return nil, malformed(t, "%d rank ranges at %d in a %d-byte message", n, *at, len(b))
	}
	if n == 0 {
		return nil, nil
	}
	out := make(RankRanges, n)
	for i := range out {
		p := b[*at:]
		r := RankRange{be.Uint32(p), be.Uint32(p[4:]), be.Uint32(p[8:])}
		if r.Lo > r.Hi || r.Stride == 0 || (r.Hi-r.Lo)%r.Stride != 0 || (r.Lo == r.Hi && r.Stride != 1) {
			return nil, malformed(t, "a malformed rank range at %d", *at)
		}
		if i > 0 && out[i-1].Hi >= r.Lo {
			return nil, malformed(t, "unsorted rank ranges at %d", *at)
		}
		out[i] = r
		*at += rangeBytes
	}
	if round8(*at) > len(b) {
		return nil, malformed(t, "rank ranges without their padding")
	}
	*at = round8(*at)
	return out, nil
}

// embedded checks the header of a Query, Update or ack carried inside a collective message:
// only its type, length and (for an ack) return and error codes may be set.
func embedded(t MessageType, b []byte, kinds ...MessageType) (Header, error) {
	h, err := ParseHeader(b)
	if err != nil || len(b) < ToolMessageSize {
		return h, malformed(t, "a carried message of %d bytes", len(b))
	}
	if !slices.Contains(kinds, h.Type) || int(h.Length) != len(b) {
		return h, malformed(t, "a carried %v of length %d in %d bytes", h.Type, h.Length, len(b))
	}
	z := slices.Clone(b[:ToolMessageSize])
	for _, r := range [][2]int{{2, 4}, {12, 24}} {
		clear(z[r[0]:r[1]])
	}
	if h.Type == MsgQuery || h.Type == MsgUpdate {
		clear(z[12:20]) // checked below: a request has no codes
		if h.ReturnCode != 0 || h.ErrorCode != 0 {
			return h, malformed(t, "a carried %v with a return code", h.Type)
		}
	}
	for _, x := range z {
		if x != 0 {
			return h, malformed(t, "a carried %v with header fields set", h.Type)
		}
	}
	return h, nil
}

func decCollective(h Header, b []byte) (Message, error) {
	if err := needMsg(h, b, collectiveBase); err != nil {
		return nil, err
	}
	m := &Collective{Header: h, Flags: CollectiveFlags(be.Uint32(b[40:]))}
	if m.Flags&^collectiveFlagsKnown != 0 {
		return nil, malformed(h.Type, "unknown flags %#x", uint32(m.Flags))
	}
	at := collectiveBase
	var err error
	if m.Ranks, err = readRanges(h.Type, b, &at, be.Uint32(b[44:])); err != nil {
		return nil, err
	}
	if m.Ranks.Count() > MaxCollectiveRanks {
		return nil, malformed(h.Type, "%d ranks (limit %d)", m.Ranks.Count(), MaxCollectiveRanks)
	}
	n := be.Uint32(b[48:])
	if be.Uint32(b[52:]) != 0 {
		return nil, malformed(h.Type, "padding set")
	}
	if uint64(n) != uint64(len(b)-at) {
		return nil, malformed(h.Type, "a carried request of %d bytes at %d in a %d-byte message", n, at, len(b))
	}
	rb := b[at:]
	rh, err := embedded(h.Type, rb, MsgQuery, MsgUpdate)
	if err != nil {
		return nil, err
	}
	req, err := decRequest(rh, rb)
	if err != nil {
		return nil, err
	}
	m.Kind = rh.Type
	switch r := req.(type) {
	case *Query:
		m.Commands = r.Commands
	case *Update:
		m.Commands = r.Commands
	}
	return m, nil
}

// groupReply is the QueryAck or UpdateAck a group carries, with a header of its codes only.
func groupReply(kind MessageType, g *AckGroup) Message {
	h := Header{ReturnCode: g.Code, ErrorCode: g.ErrorCode}
	if kind == MsgUpdateAck {
		return &UpdateAck{Header: h, Results: g.Results}
	}
	return &QueryAck{Header: h, Results: g.Results}
}

// encodeGroupReply encodes g's reply as carried in a CollectiveAck.
func encodeGroupReply(kind MessageType, g *AckGroup) []byte {
	r := groupReply(kind, g)
	n, _ := r.encodedSize(false)
	b := make([]byte, n)
	r.Hdr().put(b, r.MessageType(), n)
	r.encodeBody(b)
	return b
}

// replyKind is the ack type of a collective's groups: the type its request's kind answers with.
func (m *CollectiveAck) replyKind() MessageType {
	if m.Kind == MsgUpdateAck {
		return m.Kind
	}
	return MsgQueryAck
}

func (m *CollectiveAck) encodedSize(bool) (int, error) {
	if m.ReturnCode != Success {
		return ToolMessageSize, nil
	}
	n := collectiveBase + round8(rangeBytes*len(m.Unreachable))
	for i := range m.Groups {
		g := &m.Groups[i]
		r, err := groupReply(m.replyKind(), g).encodedSize(false)
		if err != nil {
			return 0, err
		}
		n += collectiveGroupBase + round8(rangeBytes*len(g.Ranks)) + round8(r)
	}
	return n, nil
}

func (m *CollectiveAck) encodeBody(b []byte) {
	if m.ReturnCode != Success {
		return
	}
	var flags uint32
	if m.More {
		flags |= 1
	}
	if m.replyKind() == MsgUpdateAck {
		flags |= 2
	}
	be.PutUint32(b[40:], flags)
	be.PutUint32(b[44:], uint32(len(m.Unreachable)))
	be.PutUint32(b[48:], uint32(len(m.Groups)))
	at := putRangesAt(b, collectiveBase, m.Unreachable)
	for i := range m.Groups {
		g := &m.Groups[i]
		r := encodeGroupReply(m.replyKind(), g)
		be.PutUint32(b[at:], uint32(len(g.Ranks)))
		be.PutUint32(b[at+4:], uint32(len(r)))
		at = putRangesAt(b, at+collectiveGroupBase, g.Ranks)
		copy(b[at:], r)
		at += round8(len(r))
	}
}

func decCollectiveAck(h Header, b []byte) (Message, error) {
	if h.ReturnCode != Success {
		return &CollectiveAck{Header: h}, nil // a failed answer carries nothing
	}
	if err := needMsg(h, b, collectiveBase); err != nil {
		return nil, err
	}
	flags := be.Uint32(b[40:])
	if flags&^3 != 0 {
		return nil, malformed(h.Type, "unknown flags %#x", flags)
	}
	if be.Uint32(b[52:]) != 0 {
		return nil, malformed(h.Type, "padding set")
	}
	m := &CollectiveAck{Header: h, More: flags&1 != 0, Kind: MsgQueryAck}
	if flags&2 != 0 {
		m.Kind = MsgUpdateAck
	}
	at := collectiveBase
	var err error
	if m.Unreachable, err = readRanges(h.Type, b, &at, be.Uint32(b[44:])); err != nil {
		return nil, err
	}
	groups := be.Uint32(b[48:])
	if uint64(groups)*collectiveGroupBase > uint64(len(b)-at) {
		return nil, malformed(h.Type, "%d groups in a %d-byte message", groups, len(b))
	}
	if groups > 0 {
		m.Groups = make([]AckGroup, groups)
	}
	for i := range m.Groups {
		if len(b)-at < collectiveGroupBase {
			return nil, malformed(h.Type, "a truncated group at %d", at)
		}
		nr, rl := be.Uint32(b[at:]), be.Uint32(b[at+4:])
		at += collectiveGroupBase
		g := &m.Groups[i]
		if g.Ranks, err = readRanges(h.Type, b, &at, nr); err != nil {
			return nil, err
		}
		if nr == 0 {
			return nil, malformed(h.Type, "a group without ranks")
		}
		if uint64(round8(int(min(rl, MaxFrameSize)))) > uint64(len(b)-at) || rl > MaxFrameSize {
			return nil, malformed(h.Type, "a group's reply of %d bytes at %d in a %d-byte message", rl, at, len(b))
		}
		rb := b[at : at+int(rl)]
		rh, err := embedded(h.Type, rb, m.Kind)
		if err != nil {
			return nil, err
		}
		r, err := decReply(rh, rb)
		if err != nil {
			return nil, err
		}
		g.Code, g.ErrorCode = rh.ReturnCode, rh.ErrorCode
		switch r := r.(type) {
		case *QueryAck:
			g.Results = r.Results
		case *UpdateAck:
			g.Results = r.Results
		}
		at += round8(int(rl))
	}
	if at != len(b) {
		return nil, malformed(h.Type, "trailing bytes at %d of %d", at, len(b))
	}
	total := m.Unreachable.Count()
	for _, g := range m.Groups {
		total += g.Ranks.Count()
	}
	if total > MaxCollectiveRanks {
		return nil, malformed(h.Type, "%d ranks (limit %d)", total, MaxCollectiveRanks)
	}
	return m, nil
}

// Reduction accumulates the answers of a collective: each rank's reply, or another agent's
// reduced answer, merged into groups of identical replies.
type Reduction struct {
	kind        MessageType // MsgQueryAck or MsgUpdateAck
	groups      map[string]*AckGroup
	order       []string
	unreachable RankRanges
}

// NewReduction returns an empty Reduction of a collective whose request kind is kind (MsgQuery
// or MsgUpdate).
func NewReduction(kind MessageType) *Reduction {
	return &Reduction{kind: ackFor(kind), groups: make(map[string]*AckGroup)}
}

// Add merges one group (one rank's reply, or a group another agent reduced).
func (r *Reduction) Add(g AckGroup) {
	if g.Code != Success {
		g.Results = nil
	}
	key := string(encodeGroupReply(r.kind, &g))
	if x := r.groups[key]; x != nil {
		x.Ranks = x.Ranks.Union(g.Ranks)
		return
	}
	g.Ranks = slices.Clone(g.Ranks)
	r.groups[key] = &g
	r.order = append(r.order, key)
}

// Unreachable adds ranks whose agent could not be reached.
func (r *Reduction) Unreachable(rs RankRanges) { r.unreachable = r.unreachable.Union(rs) }

// Merge adds another agent's reduced answer.
func (r *Reduction) Merge(a *CollectiveAck) {
	r.Unreachable(a.Unreachable)
	for _, g := range a.Groups {
		r.Add(g)
	}
}

// Ack returns the reduced answer as one CollectiveAck, groups in the order they first came.
func (r *Reduction) Ack(h Header) *CollectiveAck {
	a := &CollectiveAck{Header: h, Unreachable: r.unreachable, Kind: r.kind}
	keys := slices.Clone(r.order)
	sort.SliceStable(keys, func(i, j int) bool {
		return r.groups[keys[i]].Ranks[0].Lo < r.groups[keys[j]].Ranks[0].Lo
	})
	for _, k := range keys {
		a.Groups = append(a.Groups, *r.groups[k])
	}
	return a
}

// Split cuts a CollectiveAck into messages of at most MaxFrameSize bytes, every one but the
// last with More set: groups are packed in order, a group whose ranks do not fit is cut
// (its reply repeated with the rest of its ranks), and so are the unreachable ranks.
func (m *CollectiveAck) Split() []*CollectiveAck {
	if n, err := m.encodedSize(false); err == nil && n <= MaxFrameSize {
		return []*CollectiveAck{m}
	}
	var out []*CollectiveAck
	cur := &CollectiveAck{Header: m.Header, Kind: m.Kind}
	size := collectiveBase
	flush := func() {
		out = append(out, cur)
		cur = &CollectiveAck{Header: m.Header, Kind: m.Kind}
		size = collectiveBase
	}
	// room is how many ranges fit beside a fixed cost, at least 1 in an empty message.
	room := func(fixed int) int { return (MaxFrameSize - size - fixed - 8) / rangeBytes }
	for rest := m.Unreachable; len(rest) > 0; {
		k := min(len(rest), room(0))
		if k <= 0 {
			flush()
			continue
		}
		cur.Unreachable = rest[:k:k]
		size += round8(rangeBytes * k)
		rest = rest[k:]
		if len(rest) > 0 {
			flush()
		}
	}
	for _, g := range m.Groups {
		reply := round8(len(encodeGroupReply(m.replyKind(), &g)))
		for rest := g.Ranks; len(rest) > 0; {
			k := min(len(rest), room(collectiveGroupBase+reply))
			if k <= 0 && len(cur.Groups) == 0 && len(cur.Unreachable) == 0 {
				k = 1 // cannot happen with a reply within maxCollectiveReply
			}
			if k <= 0 {
				flush()
				continue
			}
			part := g
			part.Ranks = rest[:k:k]
			cur.Groups = append(cur.Groups, part)
			size += collectiveGroupBase + round8(rangeBytes*k) + reply
			rest = rest[k:]
		}
	}
	out = append(out, cur)
	for _, a := range out[:len(out)-1] {
		a.More = true
	}
	return out
}

// maxCollectiveParts bounds the messages of one split answer a Client or a Router puts
// together (4096 × 64 KiB: 256 MiB).
const maxCollectiveParts = 4096

// joinParts puts the parts of a split answer together: the last part's header, and the
// CollectiveAcks' groups or the GatherStacksAcks' trees merged.
func joinParts(parts []Message) Message {
	switch last := parts[len(parts)-1].(type) {
	case *CollectiveAck:
		var cs []*CollectiveAck
		for _, p := range parts {
			if a, ok := p.(*CollectiveAck); ok {
				cs = append(cs, a)
			}
		}
		return joinCollective(cs)
	case *GatherStacksAck:
		out := &GatherStacksAck{Header: last.Header}
		for _, p := range parts {
			if a, ok := p.(*GatherStacksAck); ok {
				out.Tree.Merge(&a.Tree)
			}
		}
		return out
	}
	return parts[len(parts)-1]
}

// join puts the parts of a split CollectiveAck together.
func joinCollective(parts []*CollectiveAck) *CollectiveAck {
	if len(parts) == 1 {
		return parts[0]
	}
	r := &Reduction{kind: parts[0].replyKind(), groups: make(map[string]*AckGroup)}
	for _, p := range parts {
		r.Merge(p)
	}
	a := r.Ack(parts[len(parts)-1].Header)
	return a
}

// BatchCollective cuts cmds, in order, into the command lists of as few Collectives of kind
// (MsgQuery or MsgUpdate) as carry them: at most MaxCommands each, a request that fits a
// Query or Update, and an ack that fits one group of a CollectiveAck (a little less than a
// QueryAck: see Batch, which cuts for those). An action command ends its list. A command too
// large for any list is an error naming it.
func BatchCollective(kind MessageType, cmds []Command) ([][]Command, error) {
	var out [][]Command
	b := NewBuilder(kind)
	ack := CommandMessageSize
	for i, c := range cmds {
		if err := b.checkCommand(c); err != nil {
			return nil, fmt.Errorf("%w (command %d of the batch)", err, i)
		}
		next := round8(ack) + c.AckSize()
		if len(b.cmds) > 0 && (b.checkRoom(c) != nil || next > maxCollectiveReply) {
			out = append(out, b.cmds)
			b.Reset()
			next = round8(CommandMessageSize) + c.AckSize()
		}
		if next > maxCollectiveReply {
			return nil, fmt.Errorf("cdti: %v command %d of the batch (%v): %w: a collective's ack of %d bytes alone (limit %d)",
				kind, i, c.CommandType(), ErrTooLarge, next, maxCollectiveReply)
		}
		if err := b.Add(c); err != nil { // cannot fail: checkCommand passed, and the room was made
			return nil, err
		}
		ack = next
	}
	if len(b.cmds) > 0 {
		out = append(out, b.cmds)
	}
	return out, nil
}

// Collective applies the commands (all of kind MsgQuery or all MsgUpdate, as in one Query or
// Update) to every rank of ranks through the agent and those below it, in one request, and
// returns the reduced answer. flags may ask for CollectiveQuietStop. Against an agent
// without the extension (a BG/Q toolctld or CNK) the error wraps a *ReturnCodeError of
// UnsupportedType: the tool then sends the commands rank by rank.
func (c *Client) Collective(ctx context.Context, flags CollectiveFlags, ranks RankRanges, cmds ...Command) (*CollectiveAck, error) {
	kind := MsgQuery
	if len(cmds) > 0 {
		kind = cmds[0].CommandType().Kind()
	}
	m := &Collective{Flags: flags, Ranks: ranks, Kind: kind, Commands: cmds}
	reply, err := c.roundTrip(ctx, m)
	if err != nil {
		return nil, &OpError{Op: "collective", Object: fmt.Sprintf("%d ranks", ranks.Count()), Err: err}
	}
	return reply.(*CollectiveAck), nil
}
