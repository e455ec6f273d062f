package cdti

import (
	"errors"
	"fmt"
)

// Message is one CDTI message. Every message type is a struct in this package that embeds
// Header; *RawMessage carries types this package does not know.
type Message interface {
	// Hdr returns the message's header (promoted from the embedded Header).
	Hdr() *Header
	// MessageType is the type Encode writes to the header, whatever Header.Type holds.
	MessageType() MessageType
	// encodedSize returns the message's length, or an error if the message cannot be encoded.
	encodedSize(strict bool) (int, error)
	// encodeBody writes everything after the 40-byte ToolMessage into b, which is zeroed and
	// encodedSize bytes long.
	encodeBody(b []byte)
}

// ErrMalformed is wrapped by every error about bytes that do not form a valid message.
var ErrMalformed = errors.New("malformed message")

func malformed(t MessageType, format string, args ...any) error {
	return fmt.Errorf("cdti: %w: %v: %s", ErrMalformed, t, fmt.Sprintf(format, args...))
}

// Encode returns the wire bytes of m. The header is written from m's Header, except Type
// (m's own type) and Length (the encoded length). Query and Update messages must obey the
// builder's rules (see Builder); use EncodeLax to send messages that break them on purpose.
func Encode(m Message) ([]byte, error) { return encode(m, true) }

// EncodeLax is Encode without the Builder's rules for Query and Update (kinds, action
// commands, predicted ack size). It still refuses more than 16 commands and more than 65536
// bytes. It exists to test servers against requests that a real tool might send.
func EncodeLax(m Message) ([]byte, error) { return encode(m, false) }

func encode(m Message, strict bool) ([]byte, error) {
	n, err := m.encodedSize(strict)
	if err != nil {
		return nil, err
	}
	if n > MaxFrameSize {
		return nil, fmt.Errorf("cdti: encode %v: %d bytes exceeds %d", m.MessageType(), n, MaxFrameSize)
	}
	b := make([]byte, n)
	m.Hdr().put(b, m.MessageType(), n)
	m.encodeBody(b)
	return b, nil
}

// DecodeMessage decodes one whole message (exactly header.length bytes, as ReadFrame returns
// it). Unknown message types come back as *RawMessage. The result may share memory with b.
// It never panics; every malformed input gives an error that wraps ErrMalformed.
func DecodeMessage(b []byte) (Message, error) {
	h, err := ParseHeader(b)
	if err != nil {
		return nil, fmt.Errorf("cdti: %w: %v", ErrMalformed, err)
	}
	if int64(h.Length) != int64(len(b)) {
		return nil, malformed(h.Type, "header length %d but %d bytes", h.Length, len(b))
	}
	if len(b) < ToolMessageSize {
		return nil, malformed(h.Type, "%d bytes, shorter than a ToolMessage (%d)", len(b), ToolMessageSize)
	}
	dec := messageDecoders[h.Type]
	if dec == nil {
		return &RawMessage{Header: h, Body: b[ToolMessageSize:]}, nil
	}
	return dec(h, b)
}

var messageDecoders map[MessageType]func(Header, []byte) (Message, error)

func init() {
	messageDecoders = map[MessageType]func(Header, []byte) (Message, error){
		MsgErrorAck:        func(h Header, b []byte) (Message, error) { return &ErrorAck{h}, nil },
		MsgSetupJobAck:     func(h Header, b []byte) (Message, error) { return &SetupJobAck{h}, nil },
		MsgNotifyAck:       func(h Header, b []byte) (Message, error) { return &NotifyAck{h}, nil },
		MsgAttach:          decAttach,
		MsgAttachAck:       decRankList,
		MsgDetach:          decDetach,
		MsgDetachAck:       decRankList,
		MsgControl:         decControl,
		MsgControlAck:      decControlAck,
		MsgNotify:          decNotify,
		MsgSetupJob:        decSetupJob,
		MsgQuery:           decRequest,
		MsgUpdate:          decRequest,
		MsgQueryAck:        decReply,
		MsgUpdateAck:       decReply,
		MsgHello:           decHello,
		MsgGatherStacks:    decGatherStacks,
		MsgGatherStacksAck: decGatherStacksAck,
		MsgHelloAck:        decHelloAck,
		MsgCollective:      decCollective,
		MsgCollectiveAck:   decCollectiveAck,
		MsgSession:         decSession,
		MsgSessionAck:      decSessionAck,
		MsgExits:           decExits,
	}
}

// needMsg checks that a message holds at least n bytes.
func needMsg(h Header, b []byte, n int) error {
	if len(b) < n {
		return malformed(h.Type, "%d bytes, need %d", len(b), n)
	}
	return nil
}

// fixed is the encodedSize of a message with no variable part.
func fixed(n int) (int, error) { return n, nil }

// RawMessage is a message of a type this package does not decode.
type RawMessage struct {
	Header
	Body []byte // the bytes after the 40-byte ToolMessage
}

func (m *RawMessage) MessageType() MessageType      { return m.Type }
func (m *RawMessage) encodedSize(bool) (int, error) { return ToolMessageSize + len(m.Body), nil }
func (m *RawMessage) encodeBody(b []byte)           { copy(b[ToolMessageSize:], m.Body) }

// ErrorAck reports that a message could not be handled: a wrong service, an unsupported type,
// or too many connections. Its echoed header cannot be trusted when toolctld sends it.
type ErrorAck struct{ Header }

func (m *ErrorAck) MessageType() MessageType      { return MsgErrorAck }
func (m *ErrorAck) encodedSize(bool) (int, error) { return fixed(ToolMessageSize) }
func (m *ErrorAck) encodeBody([]byte)             {}

// SetupJobAck is toolctld's answer to SetupJob (toolctld ↔ CNK only).
type SetupJobAck struct{ Header }

func (m *SetupJobAck) MessageType() MessageType      { return MsgSetupJobAck }
func (m *SetupJobAck) encodedSize(bool) (int, error) { return fixed(ToolMessageSize) }
func (m *SetupJobAck) encodeBody([]byte)             {}

// NotifyAck is toolctld's answer to a Notify (toolctld → CNK only; a tool never sends it).
type NotifyAck struct{ Header }

func (m *NotifyAck) MessageType() MessageType      { return MsgNotifyAck }
func (m *NotifyAck) encodedSize(bool) (int, error) { return fixed(ToolMessageSize) }
func (m *NotifyAck) encodeBody([]byte)             {}

// Attach attaches the tool (Header.ToolID) to one rank or to every rank of the node.
type Attach struct {
	Header
	Tag      Tag           // @40
	Priority uint8         // @48: 0 query-only, 1…99 may take control; unique per process
	Select   ProcessSelect // @52
}

const attachSize = 56

func (m *Attach) MessageType() MessageType      { return MsgAttach }
func (m *Attach) encodedSize(bool) (int, error) { return fixed(attachSize) }
func (m *Attach) encodeBody(b []byte) {
	copy(b[40:48], m.Tag[:])
	b[48] = m.Priority
	be.PutUint32(b[52:], uint32(m.Select))
}

func decAttach(h Header, b []byte) (Message, error) {
	if err := needMsg(h, b, attachSize); err != nil {
		return nil, err
	}
	m := &Attach{Header: h, Priority: b[48], Select: ProcessSelect(be.Uint32(b[52:]))}
	copy(m.Tag[:], b[40:48])
	return m, nil
}

const rankListSize = 304

// AttachAck answers Attach with the ranks now attached.
type AttachAck struct {
	Header
	Ranks []uint32 // at most MaxRanksPerNode
}

func (m *AttachAck) MessageType() MessageType      { return MsgAttachAck }
func (m *AttachAck) encodedSize(bool) (int, error) { return rankListEncodedSize(MsgAttachAck, m.Ranks) }
func (m *AttachAck) encodeBody(b []byte)           { putRankList(b, m.Ranks) }
func rankListEncodedSize(t MessageType, r []uint32) (int, error) {
	if len(r) > MaxRanksPerNode {
		return 0, fmt.Errorf("cdti: encode %v: %d ranks (limit %d)", t, len(r), MaxRanksPerNode)
	}
	return rankListSize, nil
}

func putRankList(b []byte, ranks []uint32) {
	be.PutUint16(b[40:], uint16(len(ranks)))
	for i, r := range ranks {
		be.PutUint32(b[44+4*i:], r)
	}
}

// decRankList decodes AttachAck and DetachAck. A failed ack may come with an uninitialized
// or short body (toolctld's ToolIdConflict), so its rank list is read only on success.
func decRankList(h Header, b []byte) (Message, error) {
	var ranks []uint32
	if h.ReturnCode == Success {
		if err := needMsg(h, b, rankListSize); err != nil {
			return nil, err
		}
		n := int(be.Uint16(b[40:]))
		if n > MaxRanksPerNode {
			return nil, malformed(h.Type, "numProcess %d (limit %d)", n, MaxRanksPerNode)
		}
		ranks = list[uint32](n)
		for i := range ranks {
			ranks[i] = be.Uint32(b[44+4*i:])
		}
	}
	if h.Type == MsgDetachAck {
		return &DetachAck{Header: h, Ranks: ranks}, nil
	}
	return &AttachAck{Header: h, Ranks: ranks}, nil
}

// Detach detaches the tool from one rank or from every rank of the node. Release control first.
type Detach struct {
	Header
	Select ProcessSelect // @40
}

const detachSize = 48

func (m *Detach) MessageType() MessageType      { return MsgDetach }
func (m *Detach) encodedSize(bool) (int, error) { return fixed(detachSize) }
func (m *Detach) encodeBody(b []byte)           { be.PutUint32(b[40:], uint32(m.Select)) }

func decDetach(h Header, b []byte) (Message, error) {
	if err := needMsg(h, b, detachSize); err != nil {
		return nil, err
	}
	return &Detach{Header: h, Select: ProcessSelect(be.Uint32(b[40:]))}, nil
}

// DetachAck answers Detach with the ranks detached.
type DetachAck struct {
	Header
	Ranks []uint32
}

func (m *DetachAck) MessageType() MessageType      { return MsgDetachAck }
func (m *DetachAck) encodedSize(bool) (int, error) { return rankListEncodedSize(MsgDetachAck, m.Ranks) }
func (m *DetachAck) encodeBody(b []byte)           { putRankList(b, m.Ranks) }

// Control asks for control authority over header.rank's process.
type Control struct {
	Header
	NotifySet     SignalSet         // @40: signals that stop the process and send a Notify
	SendSignal    uint32            // @48: delivered when control is granted (0: none)
	DynamicNotify DynamicNotifyMode // @52
	DACTrap       DACTrapMode       // @56
	WatchPolicy   WatchPolicy       // @60 (v6)
}

const controlSize = 64

func (m *Control) MessageType() MessageType      { return MsgControl }
func (m *Control) encodedSize(bool) (int, error) { return fixed(controlSize) }
func (m *Control) encodeBody(b []byte) {
	be.PutUint64(b[40:], uint64(m.NotifySet))
	be.PutUint32(b[48:], m.SendSignal)
	be.PutUint32(b[52:], uint32(m.DynamicNotify))
	be.PutUint32(b[56:], uint32(m.DACTrap))
	be.PutUint32(b[60:], uint32(m.WatchPolicy))
}

func decControl(h Header, b []byte) (Message, error) {
	if err := needMsg(h, b, controlSize); err != nil {
		return nil, err
	}
	return &Control{Header: h, NotifySet: SignalSet(be.Uint64(b[40:])), SendSignal: be.Uint32(b[48:]),
		DynamicNotify: DynamicNotifyMode(be.Uint32(b[52:])), DACTrap: DACTrapMode(be.Uint32(b[56:])),
		WatchPolicy: WatchPolicy(be.Uint32(b[60:]))}, nil
}

// ControlAck answers Control. On success the controlling tool is the requester; with
// ToolControlConflict it describes the tool that holds control.
type ControlAck struct {
	Header
	ControllingToolID uint16 // @40: only 16 bits on the wire
	Tag               Tag    // @42 (unaligned)
	Priority          uint8  // @50
}

const controlAckSize = 56

func (m *ControlAck) MessageType() MessageType      { return MsgControlAck }
func (m *ControlAck) encodedSize(bool) (int, error) { return fixed(controlAckSize) }
func (m *ControlAck) encodeBody(b []byte) {
	be.PutUint16(b[40:], m.ControllingToolID)
	copy(b[42:50], m.Tag[:])
	b[50] = m.Priority
}

// decControlAck tolerates a short body on failure: toolctld's own "not attached" ControlAck
// reuses the request's length.
func decControlAck(h Header, b []byte) (Message, error) {
	m := &ControlAck{Header: h}
	if len(b) < controlAckSize {
		if h.ReturnCode == Success {
			return nil, needMsg(h, b, controlAckSize)
		}
		return m, nil
	}
	m.ControllingToolID = be.Uint16(b[40:])
	copy(m.Tag[:], b[42:50])
	m.Priority = b[50]
	return m, nil
}

// SetupJob announces a job to toolctld (CNK → toolctld only).
type SetupJob struct {
	Header
	Ranks   []uint32 // at most MaxRanksPerNode
	UserID  uint32   // @300
	GroupID uint32   // @304
	NodeID  uint32   // @308
}

const setupJobSize = 312

func (m *SetupJob) MessageType() MessageType { return MsgSetupJob }
func (m *SetupJob) encodedSize(bool) (int, error) {
	if _, err := rankListEncodedSize(MsgSetupJob, m.Ranks); err != nil {
		return 0, err
	}
	return setupJobSize, nil
}
func (m *SetupJob) encodeBody(b []byte) {
	putRankList(b, m.Ranks)
	be.PutUint32(b[300:], m.UserID)
	be.PutUint32(b[304:], m.GroupID)
	be.PutUint32(b[308:], m.NodeID)
}

func decSetupJob(h Header, b []byte) (Message, error) {
	if err := needMsg(h, b, setupJobSize); err != nil {
		return nil, err
	}
	n := int(be.Uint16(b[40:]))
	if n > MaxRanksPerNode {
		return nil, malformed(h.Type, "numRanks %d (limit %d)", n, MaxRanksPerNode)
	}
	m := &SetupJob{Header: h, Ranks: list[uint32](n), UserID: be.Uint32(b[300:]),
		GroupID: be.Uint32(b[304:]), NodeID: be.Uint32(b[308:])}
	for i := range m.Ranks {
		m.Ranks[i] = be.Uint32(b[44+4*i:])
	}
	return m, nil
}

// Notify is an unsolicited event: a signal stopped the process, the process ended, control
// authority changed, or (extension, from a Router) the rank became unreachable. Kind selects
// which of Signal, Exit, Control or Lost is meaningful. Header.ToolID
// is the recipient.
type Notify struct {
	Header
	Kind    NotifyKind    // @40
	Repeat  bool          // @44 (BG/Q's padding; extension): a signal notification sent again (StopResendOnly)
	Signal  NotifySignal  // Kind == NotifyTypeSignal
	Exit    ExitStatus    // Kind == NotifyTypeTermination: a POSIX wait status (@48)
	Control NotifyControl // Kind == NotifyTypeControl
	Lost    uint32        // Kind == NotifyTypeUnreachable: how many ranks the loss cut off (@48)
	Raw     [64]byte      // the union bytes, for a Kind this package does not know
}

// NotifySignal is the Signal variant of Notify (union at 48).
type NotifySignal struct {
	Signal      uint32             // @48
	ThreadID    uint32             // @52
	InstAddress uint64             // @56: the instruction address
	DataAddress uint64             // @64: the data address of a watchpoint hit
	Reason      NotifySignalReason // @72
	ExecuteMode ExecuteMode        // @76 (v6)
	Spec        SpecContext        // @80 (v6)
}

// SpecContext is the speculation context of a signal Notify (v6).
type SpecContext struct {
	InstAddress, GPR1, GPR2, GPR3 uint64
}

// NotifyControl is the Control variant of Notify: the other tool involved.
type NotifyControl struct {
	ToolID   uint32              // @48: the requester (Conflict) or the releaser (Available)
	Tag      Tag                 // @52
	Priority uint8               // @60
	Reason   NotifyControlReason // @64
}

const notifySize = 112

func (m *Notify) MessageType() MessageType      { return MsgNotify }
func (m *Notify) encodedSize(bool) (int, error) { return fixed(notifySize) }
func (m *Notify) encodeBody(b []byte) {
	be.PutUint32(b[40:], uint32(m.Kind))
	if m.Repeat {
		be.PutUint32(b[44:], 1)
	}
	u := b[48:]
	switch m.Kind {
	case NotifyTypeSignal:
		s := &m.Signal
		be.PutUint32(u[0:], s.Signal)
		be.PutUint32(u[4:], s.ThreadID)
		be.PutUint64(u[8:], s.InstAddress)
		be.PutUint64(u[16:], s.DataAddress)
		be.PutUint32(u[24:], uint32(s.Reason))
		be.PutUint32(u[28:], uint32(s.ExecuteMode))
		be.PutUint64(u[32:], s.Spec.InstAddress)
		be.PutUint64(u[40:], s.Spec.GPR1)
		be.PutUint64(u[48:], s.Spec.GPR2)
		be.PutUint64(u[56:], s.Spec.GPR3)
	case NotifyTypeTermination:
		be.PutUint32(u, uint32(m.Exit))
	case NotifyTypeUnreachable:
		be.PutUint32(u, m.Lost)
	case NotifyTypeControl:
		c := &m.Control
		be.PutUint32(u, c.ToolID)
		copy(u[4:12], c.Tag[:])
		u[12] = c.Priority
		be.PutUint32(u[16:], uint32(c.Reason))
	default:
		copy(u, m.Raw[:])
	}
}

func decNotify(h Header, b []byte) (Message, error) {
	if err := needMsg(h, b, notifySize); err != nil {
		return nil, err
	}
	m := &Notify{Header: h, Kind: NotifyKind(be.Uint32(b[40:])), Repeat: be.Uint32(b[44:]) != 0}
	u := b[48:notifySize]
	switch m.Kind {
	case NotifyTypeSignal:
		m.Signal = NotifySignal{Signal: be.Uint32(u), ThreadID: be.Uint32(u[4:]), InstAddress: be.Uint64(u[8:]),
			DataAddress: be.Uint64(u[16:]), Reason: NotifySignalReason(be.Uint32(u[24:])),
			ExecuteMode: ExecuteMode(be.Uint32(u[28:])),
			Spec: SpecContext{InstAddress: be.Uint64(u[32:]), GPR1: be.Uint64(u[40:]), GPR2: be.Uint64(u[48:]),
				GPR3: be.Uint64(u[56:])}}
	case NotifyTypeTermination:
		m.Exit = ExitStatus(be.Uint32(u))
	case NotifyTypeUnreachable:
		m.Lost = be.Uint32(u)
	case NotifyTypeControl:
		m.Control = NotifyControl{ToolID: be.Uint32(u), Priority: u[12], Reason: NotifyControlReason(be.Uint32(u[16:]))}
		copy(m.Control.Tag[:], u[4:12])
	default:
		copy(m.Raw[:], u)
	}
	return m, nil
}
