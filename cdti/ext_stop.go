package cdti

import "fmt"

// Extension command types of the process stop (see StopProcess).
const (
	TypeStopProcess    CommandType = 1205
	TypeStopProcessAck CommandType = 1206
)

// SignalInterrupt is the extension reason of the Notify that answers StopProcess: the signal
// is SIGSTOP, but no SIGSTOP was sent, and none waits in the target to be taken later. BG/Q
// never assigned the value, so a tool that only knows BG/Q's reasons sees an unknown one.
const SignalInterrupt NotifySignalReason = 100

// StopProcess asks the agent to stop every thread of a running process for the tool holding
// control, without a signal: nothing is queued in the target that could stop it again later,
// which a SIGSTOP sent to a process that stops for another reason first would be.
//
// StopProcessAck.Stopping says what follows. True: every thread is being stopped and one
// Notify(SIGSTOP, SignalInterrupt) comes once all are (after the ack). False: the process is
// already suspended for the tool, or a notification to it is in flight or queued; that
// notification is the stop and no other comes. With nothing queued, a tool step under way is
// cancelled (its thread stops where it is; no StepComplete follows). A real CNK answers
// CmdInval, and so does an agent whose back end cannot interrupt a running thread: the tool
// then sends a signal instead.
//
// Encoded: thread id u32 @0, flags u32 @4 (StopFlags).
type StopProcess struct {
	ThreadID uint32
	Flags    StopFlags
}

// StopFlags are the flags of a StopProcess.
type StopFlags uint32

// StopResendOnly stops nothing: the agent sends again the notification it sent the tool and
// has not had answered, if there is one, with its number (Header.SequenceID), and answers
// Stopping false. A tool asks it of the ranks it takes for running once a tree of agents has
// healed: a notification on its way through the lost agent is gone, and its rank would stay
// suspended unseen. A Client drops a repeat of the notification it delivered last for the
// rank, so asking is harmless where nothing was lost.
const StopResendOnly StopFlags = 1

func (c *StopProcess) CommandType() CommandType { return TypeStopProcess }
func (c *StopProcess) Thread() uint32           { return c.ThreadID }
func (c *StopProcess) EncodedSize() int         { return 8 }
func (c *StopProcess) AckSize() int             { return stopProcessAckSize }
func (c *StopProcess) Encode(b []byte) {
	be.PutUint32(b, c.ThreadID)
	be.PutUint32(b[4:], uint32(c.Flags))
}

func decStopProcess(b []byte) (Command, error) {
	if err := need(TypeStopProcess, b, 8); err != nil {
		return nil, err
	}
	f := StopFlags(be.Uint32(b[4:]))
	if f&^StopResendOnly != 0 {
		return nil, fmt.Errorf("%v: unknown flags %#x", TypeStopProcess, uint32(f))
	}
	return &StopProcess{ThreadID: be.Uint32(b), Flags: f}, nil
}

// stopProcessAckSize: thread id uint32 @0, stopping uint32 @8 (0, 1, or 2: reported).
const stopProcessAckSize = 16

// StopProcessAck answers StopProcess.
type StopProcessAck struct {
	ThreadID uint32
	Stopping bool // a Notify(SIGSTOP, SignalInterrupt) follows, unless Reported
	// Reported (only in a Collective with CollectiveQuietStop, and with Stopping): the process
	// is stopped and this ack is its stop; no Notify follows (see CollectiveQuietStop).
	Reported bool
}

func (a *StopProcessAck) CommandType() CommandType { return TypeStopProcessAck }
func (a *StopProcessAck) Thread() uint32           { return a.ThreadID }
func (a *StopProcessAck) EncodedSize() int         { return stopProcessAckSize }
func (a *StopProcessAck) Encode(b []byte) {
	be.PutUint32(b, a.ThreadID)
	switch {
	case a.Reported:
		be.PutUint32(b[8:], 2)
	case a.Stopping:
		be.PutUint32(b[8:], 1)
	}
}

func decStopProcessAck(b []byte) (Ack, error) {
	if err := need(TypeStopProcessAck, b, stopProcessAckSize); err != nil {
		return nil, err
	}
	v := be.Uint32(b[8:])
	if v > 2 {
		return nil, fmt.Errorf("%v: stopping is %d, want 0, 1 or 2", TypeStopProcessAck, v)
	}
	return &StopProcessAck{ThreadID: be.Uint32(b), Stopping: v >= 1, Reported: v == 2}, nil
}

func init() {
	register(TypeStopProcess, "StopProcess", MsgUpdate, true,
		decStopProcess, decStopProcessAck)
}
