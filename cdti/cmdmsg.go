package cdti

import "fmt"

// Query carries up to 16 query commands; it needs an Attach but no control authority.
type Query struct {
	Header
	Commands []Command
}

// Update carries up to 16 update commands, at most one of them an action command, last; it
// needs control authority.
type Update struct {
	Header
	Commands []Command
}

// QueryAck answers a Query: one Result per command, in request order. On a message-level
// failure (Header.ReturnCode) Results is empty.
type QueryAck struct {
	Header
	Results []Result
}

// UpdateAck answers an Update, like QueryAck.
type UpdateAck struct {
	Header
	Results []Result
}

func (m *Query) MessageType() MessageType  { return MsgQuery }
func (m *Update) MessageType() MessageType { return MsgUpdate }
func (m *Query) encodedSize(strict bool) (int, error) {
	return commandsSize(MsgQuery, m.Commands, strict)
}
func (m *Update) encodedSize(strict bool) (int, error) {
	return commandsSize(MsgUpdate, m.Commands, strict)
}
func (m *Query) encodeBody(b []byte)  { putCommands(b, m.Commands) }
func (m *Update) encodeBody(b []byte) { putCommands(b, m.Commands) }

func (m *QueryAck) MessageType() MessageType       { return MsgQueryAck }
func (m *UpdateAck) MessageType() MessageType      { return MsgUpdateAck }
func (m *QueryAck) encodedSize(bool) (int, error)  { return resultsSize(MsgQueryAck, m.Results) }
func (m *UpdateAck) encodedSize(bool) (int, error) { return resultsSize(MsgUpdateAck, m.Results) }
func (m *QueryAck) encodeBody(b []byte)            { putResults(b, m.Results) }
func (m *UpdateAck) encodeBody(b []byte)           { putResults(b, m.Results) }

// commandsSize is the length of a request carrying cmds: payloads from 304, each at a
// multiple of 8.
func commandsSize(kind MessageType, cmds []Command, strict bool) (int, error) {
	if strict {
		if err := CheckCommands(kind, cmds); err != nil {
			return 0, err
		}
	}
	if len(cmds) > MaxCommands {
		return 0, fmt.Errorf("cdti: encode %v: %w: %d commands", kind, ErrTooManyCommands, len(cmds))
	}
	n := CommandMessageSize
	for i, c := range cmds {
		if c == nil {
			return 0, fmt.Errorf("cdti: encode %v: command %d is nil", kind, i)
		}
		n = round8(n) + c.EncodedSize()
	}
	return n, nil
}

func putDescriptor(b []byte, i int, t CommandType, off, length int, rc CmdReturnCode) {
	d := b[44+DescriptorSize*i:]
	be.PutUint16(d, uint16(t))
	be.PutUint32(d[4:], uint32(off))
	be.PutUint32(d[8:], uint32(length))
	be.PutUint32(d[12:], uint32(rc))
}

func putCommands(b []byte, cmds []Command) {
	be.PutUint16(b[40:], uint16(len(cmds)))
	off := CommandMessageSize
	for i, c := range cmds {
		off = round8(off)
		n := c.EncodedSize()
		putDescriptor(b, i, c.CommandType(), off, n, 0)
		c.Encode(b[off : off+n])
		off += n
	}
}

func resultsSize(t MessageType, rs []Result) (int, error) {
	if len(rs) > MaxCommands {
		return 0, fmt.Errorf("cdti: encode %v: %w: %d results", t, ErrTooManyCommands, len(rs))
	}
	n := CommandMessageSize
	for _, r := range rs {
		if r.Ack != nil {
			n = round8(n) + r.Ack.EncodedSize()
		}
	}
	return n, nil
}

// putResults places the ack payloads in descriptor order, each at a multiple of 8. A Result
// without an Ack gets offset and length 0 (CNK's CmdAllocErr form).
func putResults(b []byte, rs []Result) {
	be.PutUint16(b[40:], uint16(len(rs)))
	off := CommandMessageSize
	for i, r := range rs {
		t := r.Type
		if r.Ack == nil {
			putDescriptor(b, i, t, 0, 0, r.Code)
			continue
		}
		if t == 0 {
			t = r.Ack.CommandType()
		}
		off = round8(off)
		n := r.Ack.EncodedSize()
		putDescriptor(b, i, t, off, n, r.Code)
		r.Ack.Encode(b[off : off+n])
		off += n
	}
}

// descriptor is one decoded CommandDescriptor.
type descriptor struct {
	typ    CommandType
	off    uint32
	length uint32
	rc     CmdReturnCode
}

// descriptors reads and checks the command list of a Query, Update or ack in b: at most 16
// entries, each payload inside the message after the fixed part, at least 8 bytes long (a
// threadID), and no two payloads overlapping. Entries with offset and length 0 are allowed only
// when allowEmpty reports true for them.
func descriptors(h Header, b []byte, allowEmpty func(descriptor) bool) ([]descriptor, error) {
	if err := needMsg(h, b, CommandMessageSize); err != nil {
		return nil, err
	}
	n := int(be.Uint16(b[40:]))
	if n > MaxCommands {
		return nil, fmt.Errorf("cdti: %w: %v: %w: numCommands %d", ErrMalformed, h.Type, ErrTooManyCommands, n)
	}
	ds := make([]descriptor, n)
	for i := range ds {
		d := b[44+DescriptorSize*i:]
		ds[i] = descriptor{typ: CommandType(be.Uint16(d)), off: be.Uint32(d[4:]), length: be.Uint32(d[8:]),
			rc: CmdReturnCode(be.Uint32(d[12:]))}
		di := ds[i]
		switch {
		case di.off == 0 && di.length == 0:
			if !allowEmpty(di) {
				return nil, malformed(h.Type, "descriptor %d (%v, %v) has no payload", i, di.typ, di.rc)
			}
			continue
		case di.off < CommandMessageSize:
			return nil, malformed(h.Type, "descriptor %d (%v): offset %d inside the fixed part", i, di.typ, di.off)
		case uint64(di.off)+uint64(di.length) > uint64(len(b)):
			return nil, malformed(h.Type, "descriptor %d (%v): payload %d+%d beyond message end %d",
				i, di.typ, di.off, di.length, len(b))
		case di.length < 8:
			return nil, malformed(h.Type, "descriptor %d (%v): payload of %d bytes, shorter than a threadID",
				i, di.typ, di.length)
		}
		for j := range i {
			dj := ds[j]
			if dj.length != 0 && di.off < dj.off+dj.length && dj.off < di.off+di.length {
				return nil, malformed(h.Type, "descriptor %d (%v) overlaps descriptor %d (%v)", i, di.typ, j, dj.typ)
			}
		}
	}
	return ds, nil
}

// decRequest decodes a Query or an Update. Commands of unknown types, of the other message
// kind, or whose payload does not parse, come back as *RawCommand (Err says why), so that a
// server can answer each as CNK does; only a broken command list makes the message malformed.
func decRequest(h Header, b []byte) (Message, error) {
	ds, err := descriptors(h, b, func(descriptor) bool { return false })
	if err != nil {
		return nil, err
	}
	cmds := list[Command](len(ds))
	for i, d := range ds {
		p := b[d.off : d.off+d.length]
		s := commandSpecs[d.typ]
		switch {
		case s == nil:
			cmds[i] = &RawCommand{Type: d.typ, ThreadID: be.Uint32(p), Data: p, Err: ErrUnknownCommand}
		case s.kind != h.Type:
			cmds[i] = &RawCommand{Type: d.typ, ThreadID: be.Uint32(p), Data: p, Err: ErrWrongMessage}
		default:
			c, err := s.decode(p)
			if err != nil {
				c = &RawCommand{Type: d.typ, ThreadID: be.Uint32(p), Data: p, Err: err}
			}
			cmds[i] = c
		}
	}
	if h.Type == MsgUpdate {
		return &Update{Header: h, Commands: cmds}, nil
	}
	return &Query{Header: h, Commands: cmds}, nil
}

// decReply decodes a QueryAck or UpdateAck. The message-level return code is checked first:
// on failure CNK sends numCommands 0 and toolctld may send an uninitialized body, so no
// descriptor is read. Payloads are located through their descriptors, whatever their order.
func decReply(h Header, b []byte) (Message, error) {
	var rs []Result
	if h.ReturnCode == Success {
		ds, err := descriptors(h, b, func(d descriptor) bool { return d.rc != CmdSuccess })
		if err != nil {
			return nil, err
		}
		rs = list[Result](len(ds))
		for i, d := range ds {
			rs[i] = Result{Type: d.typ, Code: d.rc}
			if d.length == 0 {
				continue
			}
			p := b[d.off : d.off+d.length]
			a, err := DecodeAck(d.typ, p)
			if d.rc != CmdSuccess {
				// A failed command's ack is usually CNK's bare 8-byte ToolCommand.
				if _, raw := a.(*RawAck); raw || err != nil {
					a, err = &BareAck{Type: d.typ, ThreadID: be.Uint32(p)}, nil
				}
			}
			if err != nil {
				return nil, malformed(h.Type, "descriptor %d: %v", i, err)
			}
			rs[i].Ack = a
		}
	}
	if h.Type == MsgUpdateAck {
		return &UpdateAck{Header: h, Results: rs}, nil
	}
	return &QueryAck{Header: h, Results: rs}, nil
}
