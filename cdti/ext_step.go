package cdti

import "fmt"

// Extension command types of the range step (see StepRange).
const (
	TypeStepRange    CommandType = 1209
	TypeStepRangeAck CommandType = 1210
)

// MaxRangeSteps bounds the instructions one StepRange executes (and its MaxSteps).
const MaxRangeSteps = 1 << 12

// StepRange single-steps one suspended thread as StepThread does, and goes on stepping in the
// agent, without a word to the tool, while the thread's pc stays in [Lo, Hi): it stops at an
// instruction outside the range, at a call instruction (so that the tool decides whether to
// step into the call or over it), at a breakpoint a tool planted, after MaxSteps instructions
// (0: MaxRangeSteps), or at any other event (a signal, the thread's or the process's end).
// Completion arrives as for StepThread: a Notify with reason SignalStepComplete and the pc
// where the thread stopped, or the notification of the event that ended the steps. A source
// step over a line of many instructions so costs one exchange instead of one per
// instruction. Action command. A real CNK answers CmdInval: the tool then steps with
// StepThread. A StepRange that does not decode (a range empty or reversed, MaxSteps over
// MaxRangeSteps, a payload too short) is answered CmdParmErr, as every payload that does not
// parse is: the agent knows range steps, and refuses that one.
//
// Encoded: thread id u32 @0, max steps u32 @4, lo u64 @8, hi u64 @16.
type StepRange struct {
	ThreadID uint32
	MaxSteps uint32
	Lo, Hi   uint64
}

func (c *StepRange) CommandType() CommandType { return TypeStepRange }
func (c *StepRange) Thread() uint32           { return c.ThreadID }
func (c *StepRange) EncodedSize() int         { return 24 }
func (c *StepRange) AckSize() int             { return 8 }
func (c *StepRange) Encode(b []byte) {
	be.PutUint32(b, c.ThreadID)
	be.PutUint32(b[4:], c.MaxSteps)
	be.PutUint64(b[8:], c.Lo)
	be.PutUint64(b[16:], c.Hi)
}

func decStepRange(b []byte) (Command, error) {
	if err := need(TypeStepRange, b, 24); err != nil {
		return nil, err
	}
	c := &StepRange{ThreadID: be.Uint32(b), MaxSteps: be.Uint32(b[4:]), Lo: be.Uint64(b[8:]), Hi: be.Uint64(b[16:])}
	if c.Lo > c.Hi {
		return nil, fmt.Errorf("%v: range [%#x, %#x) is reversed", TypeStepRange, c.Lo, c.Hi)
	}
	if c.Lo == c.Hi {
		return nil, fmt.Errorf("%v: range [%#x, %#x) is empty", TypeStepRange, c.Lo, c.Hi)
	}
	if c.MaxSteps > MaxRangeSteps {
		return nil, fmt.Errorf("%v: %d steps (limit %d)", TypeStepRange, c.MaxSteps, MaxRangeSteps)
	}
	return c, nil
}

// StepRangeAck answers StepRange.
type StepRangeAck struct{ ThreadID uint32 }

func (a *StepRangeAck) CommandType() CommandType { return TypeStepRangeAck }
func (a *StepRangeAck) Thread() uint32           { return a.ThreadID }
func (a *StepRangeAck) EncodedSize() int         { return 8 }
func (a *StepRangeAck) Encode(b []byte)          { be.PutUint32(b, a.ThreadID) }

func init() {
	register(TypeStepRange, "StepRange", MsgUpdate, true,
		decStepRange, threadDecoder(TypeStepRangeAck, func(t uint32) Ack { return &StepRangeAck{t} }))
}
