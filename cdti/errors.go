package cdti

import (
	"errors"
	"fmt"
)

// Errors reported by the Client and the Server.
var (
	// ErrNotSupported: the agent answered an extension command with CmdInval, as a real BG/Q
	// CNK does; the feature is missing, nothing failed.
	ErrNotSupported = errors.New("not supported by the agent")
	// ErrClosed: the Client was closed by its owner.
	ErrClosed = errors.New("client closed")
	// ErrPeerClosed: the peer closed the connection.
	ErrPeerClosed = errors.New("connection closed by peer")
	// ErrNotifyOverflow: the owner did not receive notifications and the queue reached
	// ClientOptions.NotifyLimit; the connection was failed rather than drop any.
	ErrNotifyOverflow = errors.New("notification queue overflow")
	// ErrAuthentication: the agent refused the Hello token.
	ErrAuthentication = errors.New("authentication failed")
	// ErrInternal: decoding or handling a message panicked. The Server answers the request
	// with an ErrorAck(RequestFailed) and closes that connection alone (its CloseHandler runs,
	// so the tool is dropped as after any failure); the Client fails that connection alone.
	// The server and its other connections go on.
	ErrInternal = errors.New("internal error")
)

// OpError is the error of a Client operation. It names the operation and the object
// ("cdti: query rank 3: read tcp ...: connection reset by peer").
type OpError struct {
	Op     string // "attach", "query", "read memory", ...
	Object string // "rank 3", or the connection's remote address
	Err    error
}

func (e *OpError) Error() string {
	s := "cdti: " + e.Op
	if e.Object != "" {
		s += " " + e.Object
	}
	return s + ": " + e.Err.Error()
}

func (e *OpError) Unwrap() error { return e.Err }

// ReturnCodeError is a message-level failure: the reply's Header.ReturnCode, or an ErrorAck.
// It unwraps to the ReturnCode, so errors.Is(err, cdti.ToolControlConflict) works.
type ReturnCodeError struct {
	Reply     MessageType // the reply that carried the code
	Code      ReturnCode
	ErrorCode uint32 // Header.ErrorCode: detail, usually an errno
	Note      string // context added by the Client (e.g. how an ErrorAck was attributed)
}

func (e *ReturnCodeError) Error() string {
	s := e.Reply.String() + " " + e.Code.Error()
	if e.ErrorCode != 0 {
		s += fmt.Sprintf(", error code %d", e.ErrorCode)
	}
	if e.Note != "" {
		s += " (" + e.Note + ")"
	}
	return s
}

func (e *ReturnCodeError) Unwrap() error { return e.Code }

// CommandError is the failure of one command in a Query or Update. It unwraps to the
// CmdReturnCode, so errors.Is(err, cdti.CmdAddrErr) works.
type CommandError struct {
	Index int         // position in the caller's command list
	Type  CommandType // the command type
	Code  CmdReturnCode
}

func (e *CommandError) Error() string {
	return fmt.Sprintf("command %d (%v): %v", e.Index, e.Type, e.Code.Error())
}

func (e *CommandError) Unwrap() error { return e.Code }
