package cdti

import "math/rand/v2"

// A Server with CNK set answers as a Blue Gene/Q Compute Node Kernel behind toolctld does: it
// knows protocol v6 and nothing else. Every extension command of a Query or Update is answered
// CmdInval (and counts as a failed command for CmdPrevCmdFail), every message type that is not
// v6's (GatherStacks) gets ErrorAck(UnsupportedType), as toolctld and the CNK answer an
// unsupported type, and the payloads of a QueryAck or UpdateAck are placed in a shuffled order:
// the CNK hands out ack space to its hardware threads in whatever order they run (cdti-v6.md
// §8.6), so a client must find every payload through its descriptor. The Hello handshake is
// still required: it belongs to the transport (the agent's TCP port), not to the CNK.

// isV6 reports whether t is a message type of protocol v6 (ErrorAck … ControlAck).
func (t MessageType) isV6() bool { return t >= MsgErrorAck && t <= MsgControlAck }

// cnkUnsupported reports whether a CNK server refuses a message of type t outright.
func (s *Server) cnkUnsupported(t MessageType) bool { return s.CNK && !t.isV6() }

// ShuffleAckPayloads returns the encoded QueryAck or UpdateAck frame with its payloads moved
// into the order perm gives (perm[k] is the descriptor whose payload comes k-th), each still at
// a multiple of 8, and the descriptors' offsets and the header's length updated; a nil perm
// picks a random order. Any other frame, a perm of the wrong length, or a result longer than
// SmallMessageRegionSize, comes back unchanged.
func ShuffleAckPayloads(frame []byte, perm []int) []byte {
	h, err := ParseHeader(frame)
	if err != nil || (h.Type != MsgQueryAck && h.Type != MsgUpdateAck) || h.ReturnCode != Success ||
		len(frame) < CommandMessageSize {
		return frame
	}
	n := int(be.Uint16(frame[40:]))
	if n > MaxCommands {
		return frame
	}
	var with []int // descriptors that carry a payload
	for i := range n {
		d := frame[44+DescriptorSize*i:]
		if be.Uint32(d[8:]) > 0 {
			with = append(with, i)
		}
	}
	if perm == nil {
		perm = make([]int, 0, len(with))
		for _, k := range rand.Perm(len(with)) {
			perm = append(perm, with[k])
		}
	}
	if len(perm) != len(with) {
		return frame
	}
	out := make([]byte, CommandMessageSize, len(frame)+8*len(with))
	copy(out, frame[:CommandMessageSize])
	for _, i := range perm {
		if i < 0 || i >= n {
			return frame
		}
		d := out[44+DescriptorSize*i:]
		off, length := be.Uint32(d[4:]), be.Uint32(d[8:])
		if length == 0 || uint64(off)+uint64(length) > uint64(len(frame)) {
			return frame
		}
		at := round8(len(out))
		out = append(out, make([]byte, at-len(out))...)
		out = append(out, frame[off:off+length]...)
		be.PutUint32(d[4:], uint32(at))
	}
	if len(out) > SmallMessageRegionSize {
		return frame
	}
	be.PutUint32(out[20:], uint32(len(out)))
	return out
}
