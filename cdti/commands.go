package cdti

import (
	"errors"
	"fmt"
	"strconv"
)

// CommandType is CommandDescriptor.type: a command type in a request, command type + 1 in an ack.
type CommandType uint16

// String returns the IBM name of a command or ack type ("GetMemory", "GetMemoryAck").
func (t CommandType) String() string {
	if s := commandSpecs[t]; s != nil {
		return s.name
	}
	if s := commandSpecs[t-1]; s != nil && t%2 == 0 {
		return s.name + "Ack"
	}
	return "CommandType(" + strconv.Itoa(int(t)) + ")"
}

// Known reports whether t is a command type this package can encode and decode.
func (t CommandType) Known() bool { return commandSpecs[t] != nil }

// IsAck reports whether t is an ack type (an even number following a known command type).
func (t CommandType) IsAck() bool { return t%2 == 0 && commandSpecs[t-1] != nil }

// Ack returns the ack type of command type t (t + 1).
func (t CommandType) Ack() CommandType { return t + 1 }

// Kind returns the message a command type belongs in: MsgQuery, MsgUpdate, or 0 if unknown.
func (t CommandType) Kind() MessageType {
	if s := commandSpecs[t]; s != nil {
		return s.kind
	}
	return 0
}

// IsAction reports whether t is one of the action commands (ContinueProcess, StepThread,
// ReleaseControl, and the extension StepRange), of which an Update may carry only one.
func (t CommandType) IsAction() bool {
	return t == TypeContinueProcess || t == TypeStepThread || t == TypeReleaseControl || t == TypeStepRange
}

// IsExtension reports whether t is one of this package's extension commands, which a real BG/Q
// CNK answers with CmdInval.
func (t CommandType) IsExtension() bool {
	s := commandSpecs[t]
	return s != nil && s.ext
}

// Command is one command of a Query or Update: a payload that a CommandDescriptor points at.
// Every command type of protocol v6 and of the extensions is a struct in this package that
// implements Command; *RawCommand carries the others.
type Command interface {
	// CommandType is the descriptor type.
	CommandType() CommandType
	// Thread is the threadID field (0: the default thread).
	Thread() uint32
	// EncodedSize is the payload length written to the descriptor.
	EncodedSize() int
	// AckSize is the descriptor length of the ack a successful command produces: the size the
	// requester reserves (before rounding to 8) when it checks a message's predicted ack.
	AckSize() int
	// Encode writes the payload into b[:EncodedSize()]. b must be zeroed: padding is not written.
	Encode(b []byte)
}

// Ack is the payload of one command's answer in a QueryAck or UpdateAck.
type Ack interface {
	// CommandType is the descriptor type: the command type + 1.
	CommandType() CommandType
	// Thread is the threadID the command actually used (CNK replaces 0 by the default thread).
	Thread() uint32
	// EncodedSize is the payload length written to the descriptor.
	EncodedSize() int
	// Encode writes the payload into b[:EncodedSize()]. b must be zeroed.
	Encode(b []byte)
}

// validator is implemented by commands whose fields have limits that the encoded form cannot
// express (pathname lengths, MaxMemorySize, ...). Builders refuse commands that fail it.
type validator interface {
	validate() error
}

// Validate checks a command's fields against the protocol's limits, as Builder.Add does.
func Validate(c Command) error {
	if c == nil {
		return errors.New("cdti: nil command")
	}
	if v, ok := c.(validator); ok {
		return v.validate()
	}
	return nil
}

// Result is one command's outcome in a QueryAck or UpdateAck, in request order.
type Result struct {
	// Type is the descriptor type (command type + 1). Encoders fill it from the Ack when zero.
	Type CommandType
	// Code is the command's return code.
	Code CmdReturnCode
	// Ack is the decoded payload. It is nil when the descriptor has no payload (CmdAllocErr).
	// When Code is not CmdSuccess and the payload does not decode as the full ack (CNK sends
	// an 8-byte ToolCommand), it is a *BareAck.
	Ack Ack
}

// Err returns nil for CmdSuccess, else the CmdReturnCode as an error.
func (r Result) Err() error {
	if r.Code == CmdSuccess {
		return nil
	}
	return r.Code
}

// Sentinel errors carried by RawCommand.Err.
var (
	// ErrUnknownCommand: the command type is not one this package knows; a CNK answers CmdInval.
	ErrUnknownCommand = errors.New("unknown command type")
	// ErrWrongMessage: a query command in an Update or an update command in a Query; a CNK
	// answers CmdInval.
	ErrWrongMessage = errors.New("command not valid in this message type")
)

// RawCommand is a command payload that was not decoded into its struct: an unknown type, a
// command in the wrong message kind, or a payload that does not parse (Err says which). It can
// also be encoded as is, to send command types this package does not know.
type RawCommand struct {
	Type     CommandType
	ThreadID uint32
	Data     []byte // the whole payload, threadID included; Encode writes ThreadID over its first 4 bytes
	Err      error  // why it was not decoded (nil for a RawCommand built to be sent)
}

func (c *RawCommand) CommandType() CommandType { return c.Type }
func (c *RawCommand) Thread() uint32           { return c.ThreadID }
func (c *RawCommand) EncodedSize() int         { return max(len(c.Data), 8) }

// AckSize is 8: a CNK answers an unknown command with a bare ToolCommand.
func (c *RawCommand) AckSize() int { return 8 }
func (c *RawCommand) Encode(b []byte) {
	copy(b, c.Data)
	be.PutUint32(b, c.ThreadID)
}

// BareAck is the 8-byte ToolCommand ack that CNK sends for a failed command (CmdTIDinval,
// CmdInval, CmdPrevCmdFail, CmdProcessExiting, ...): only the thread id.
type BareAck struct {
	Type     CommandType // the ack type
	ThreadID uint32
}

func (a *BareAck) CommandType() CommandType { return a.Type }
func (a *BareAck) Thread() uint32           { return a.ThreadID }
func (a *BareAck) EncodedSize() int         { return 8 }
func (a *BareAck) Encode(b []byte)          { be.PutUint32(b, a.ThreadID) }

// RawAck is an ack payload of a type this package does not know.
type RawAck struct {
	Type     CommandType
	ThreadID uint32
	Data     []byte // the whole payload, threadID included
}

func (a *RawAck) CommandType() CommandType { return a.Type }
func (a *RawAck) Thread() uint32           { return a.ThreadID }
func (a *RawAck) EncodedSize() int         { return max(len(a.Data), 8) }
func (a *RawAck) Encode(b []byte) {
	copy(b, a.Data)
	be.PutUint32(b, a.ThreadID)
}

// commandSpec describes one command type for the registry.
type commandSpec struct {
	name      string
	kind      MessageType // MsgQuery or MsgUpdate
	ext       bool
	decode    func(b []byte) (Command, error)
	decodeAck func(b []byte) (Ack, error)
}

var commandSpecs = map[CommandType]*commandSpec{}

func register(t CommandType, name string, kind MessageType, ext bool,
	dec func([]byte) (Command, error), decAck func([]byte) (Ack, error)) {
	commandSpecs[t] = &commandSpec{name: name, kind: kind, ext: ext, decode: dec, decodeAck: decAck}
}

// CommandTypes lists every command type (not ack type) the registry knows, in ascending order.
func CommandTypes() []CommandType {
	var ts []CommandType
	for t := range commandSpecs {
		ts = append(ts, t)
	}
	for i := 1; i < len(ts); i++ { // insertion sort: the set is small and this avoids an import
		for j := i; j > 0 && ts[j] < ts[j-1]; j-- {
			ts[j], ts[j-1] = ts[j-1], ts[j]
		}
	}
	return ts
}

// DecodeCommand decodes the payload b of a command of type t. Unknown types come back as a
// *RawCommand with Err ErrUnknownCommand; malformed payloads give an error.
func DecodeCommand(t CommandType, b []byte) (Command, error) {
	s := commandSpecs[t]
	if s == nil {
		if len(b) < 8 {
			return nil, fmt.Errorf("%v: payload %d bytes, need 8", t, len(b))
		}
		return &RawCommand{Type: t, ThreadID: be.Uint32(b), Data: b, Err: ErrUnknownCommand}, nil
	}
	return s.decode(b)
}

// DecodeAck decodes the ack payload b of ack type t (command type + 1). Unknown types come back
// as a *RawAck; payloads shorter than the ack's fixed size, or whose counts do not fit, give an
// error.
func DecodeAck(t CommandType, b []byte) (Ack, error) {
	var s *commandSpec
	if t%2 == 0 {
		s = commandSpecs[t-1]
	}
	if s == nil {
		if len(b) < 8 {
			return nil, fmt.Errorf("%v: payload %d bytes, need 8", t, len(b))
		}
		return &RawAck{Type: t, ThreadID: be.Uint32(b), Data: b}, nil
	}
	return s.decodeAck(b)
}

// need reports an error when payload b of type t is shorter than n bytes.
func need(t CommandType, b []byte, n int) error {
	if len(b) < n {
		return fmt.Errorf("%v: payload %d bytes, need %d", t, len(b), n)
	}
	return nil
}

// putString writes s into the fixed field b, which must keep a terminating NUL.
func putString(b []byte, s string) { copy(b[:len(b)-1], s) }
