package cdti

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strconv"
)

var be = binary.BigEndian

// round8 rounds n up to a multiple of 8 (CNK's ROUND_UP_8).
func round8(n int) int { return (n + 7) &^ 7 }

// Header is the ToolMessage prefix of every message: the 32-byte bgcios MessageHeader followed
// by the toolId (offset 32) and 4 bytes of padding. Every message struct embeds it.
type Header struct {
	Service    Service     // @0  ServiceToolctl
	Version    uint8       // @1  ProtocolVersion (a Termination Notify carries 0)
	Type       MessageType // @2  set by Encode from the message struct
	Rank       uint32      // @4  the MPI rank the message is about; acks echo it
	SequenceID uint32      // @8  chosen by the tool, echoed in the ack; numbers an agent's signal Notify (StopResendOnly)
	ReturnCode ReturnCode  // @12 message-level result in acks
	ErrorCode  uint32      // @16 detail, usually an errno
	Length     uint32      // @20 whole message, header included; set by Encode
	JobID      uint64      // @24
	ToolID     uint32      // @32
}

// Hdr returns the header itself; it is promoted to every message and satisfies Message.
func (h *Header) Hdr() *Header { return h }

// Reply returns a header for the answer to a request with header h: the same service, rank,
// sequence id, job and tool, protocol version 6, and return code rc.
func (h *Header) Reply(rc ReturnCode) Header {
	return Header{Service: ServiceToolctl, Version: ProtocolVersion, Rank: h.Rank,
		SequenceID: h.SequenceID, ReturnCode: rc, JobID: h.JobID, ToolID: h.ToolID}
}

// put writes the header into b[0:40]; Type and Length come from the caller.
func (h *Header) put(b []byte, t MessageType, length int) {
	b[0] = byte(h.Service)
	b[1] = h.Version
	be.PutUint16(b[2:], uint16(t))
	be.PutUint32(b[4:], h.Rank)
	be.PutUint32(b[8:], h.SequenceID)
	be.PutUint32(b[12:], uint32(h.ReturnCode))
	be.PutUint32(b[16:], h.ErrorCode)
	be.PutUint32(b[20:], uint32(length))
	be.PutUint64(b[24:], h.JobID)
	be.PutUint32(b[32:], h.ToolID)
}

// ParseHeader decodes the 32-byte MessageHeader at the start of b, and the toolId when b holds
// at least 40 bytes. It checks only that b is long enough.
func ParseHeader(b []byte) (Header, error) {
	if len(b) < HeaderSize {
		return Header{}, fmt.Errorf("cdti: message header: %d bytes, need %d", len(b), HeaderSize)
	}
	h := Header{
		Service:    Service(b[0]),
		Version:    b[1],
		Type:       MessageType(be.Uint16(b[2:])),
		Rank:       be.Uint32(b[4:]),
		SequenceID: be.Uint32(b[8:]),
		ReturnCode: ReturnCode(be.Uint32(b[12:])),
		ErrorCode:  be.Uint32(b[16:]),
		Length:     be.Uint32(b[20:]),
		JobID:      be.Uint64(b[24:]),
	}
	if len(b) >= ToolMessageSize {
		h.ToolID = be.Uint32(b[32:])
	}
	return h, nil
}

func (h Header) String() string {
	return fmt.Sprintf("%v rank %d seq %d rc %v len %d job %#x tool %d", h.Type, h.Rank, h.SequenceID,
		h.ReturnCode, h.Length, h.JobID, h.ToolID)
}

// Tag is a tool tag: 8 bytes, NUL-padded, not necessarily NUL-terminated (IBM copies it with
// strncpy).
type Tag [ToolTagSize]byte

// NewTag makes a Tag from s, truncated to 8 bytes.
func NewTag(s string) Tag {
	var t Tag
	copy(t[:], s)
	return t
}

// String returns the tag up to its first NUL.
func (t Tag) String() string {
	if i := bytes.IndexByte(t[:], 0); i >= 0 {
		return string(t[:i])
	}
	return string(t[:])
}

// SignalSet is a CDTI signal set (ControlMessage.notifySet): bit 1<<(signo-1) for each signal,
// the first word of a Linux sigset_t.
type SignalSet uint64

// Signals returns the set holding the given signal numbers (1…64).
func Signals(sigs ...int) SignalSet {
	var s SignalSet
	for _, sig := range sigs {
		s = s.Add(sig)
	}
	return s
}

// Add returns s with signal sig added; numbers outside 1…64 are ignored.
func (s SignalSet) Add(sig int) SignalSet {
	if sig < 1 || sig > 64 {
		return s
	}
	return s | 1<<(sig-1)
}

// Has reports whether sig is in s.
func (s SignalSet) Has(sig int) bool {
	return sig >= 1 && sig <= 64 && s&(1<<(sig-1)) != 0
}

// ExitStatus is a Termination Notify's exitStatus: a POSIX wait status.
type ExitStatus int32

// Exited reports a normal exit.
func (s ExitStatus) Exited() bool { return s&0x7f == 0 }

// ExitCode is the exit code of a normal exit.
func (s ExitStatus) ExitCode() int { return int(s>>8) & 0xff }

// Signaled reports termination by a signal.
func (s ExitStatus) Signaled() bool { return s&0x7f != 0 && s&0x7f != 0x7f }

// Signal is the terminating signal.
func (s ExitStatus) Signal() int { return int(s & 0x7f) }

func (s ExitStatus) String() string {
	switch {
	case s.Exited():
		return "exit status " + strconv.Itoa(s.ExitCode())
	case s.Signaled():
		return "killed by signal " + strconv.Itoa(s.Signal())
	}
	return "wait status " + strconv.FormatInt(int64(s), 16)
}

// cstring returns b up to its first NUL.
func cstring(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		return string(b[:i])
	}
	return string(b)
}

// list makes a slice of n elements for a decoder; nil when n is 0, so that a decoded empty list
// equals the nil list it was encoded from.
func list[T any](n int) []T {
	if n == 0 {
		return nil
	}
	return make([]T, n)
}
