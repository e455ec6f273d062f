package cdti

import "fmt"

// Extension command types of evaluation in a frame (see EvaluateValue).
const (
	TypeEvaluateValue    CommandType = 1109
	TypeEvaluateValueAck CommandType = 1110
)

// Limits of EvaluateValue.
const (
	MaxEvaluateProgram = 4096 // bytes of an EvaluateValue's program
	MaxValueText       = 256  // bytes of an EvaluateValueAck's text
)

// evaluateValueSize: thread id uint32 @0, format u8 @4, 3 bytes pad, bias u64 @8, length u32
// @16, 4 bytes pad, program @24.
const evaluateValueSize = 24

// evaluateValueAckSize: thread id uint32 @0, length u32 @4, text @8.
const evaluateValueAckSize = 8

// EvaluateValue asks the agent for one value of a stopped process, as a tool compares a
// variable across ranks: Program (a bpcode program the tool compiled for one place of the
// program: frame 0's registers unwound to the frame of the value, each frame's pc checked) is
// evaluated in the thread, and its word printed as Format (a bpcode.Format) says. Bias is the
// load bias of the binary the value's frame is in. A program that fails (a process stopped
// elsewhere, unreadable memory) fails the command with CmdParmErr: the tool evaluates that
// rank itself.
//
// ThreadID 0 names the process's leader (main) thread, whichever thread stopped last. In a
// Collective the same command goes to every rank of a set, and the answers come back grouped
// by value.
type EvaluateValue struct {
	ThreadID uint32
	Format   uint8
	Bias     uint64
	Program  []byte
}

func (c *EvaluateValue) CommandType() CommandType { return TypeEvaluateValue }
func (c *EvaluateValue) Thread() uint32           { return c.ThreadID }
func (c *EvaluateValue) EncodedSize() int         { return evaluateValueSize + len(c.Program) }
func (c *EvaluateValue) AckSize() int             { return evaluateValueAckSize + MaxValueText }
func (c *EvaluateValue) Encode(b []byte) {
	be.PutUint32(b, c.ThreadID)
	b[4] = c.Format
	be.PutUint64(b[8:], c.Bias)
	be.PutUint32(b[16:], uint32(len(c.Program)))
	copy(b[evaluateValueSize:], c.Program)
}

func decEvaluateValue(b []byte) (Command, error) {
	if err := need(TypeEvaluateValue, b, evaluateValueSize); err != nil {
		return nil, err
	}
	n := be.Uint32(b[16:])
	if n == 0 || n > MaxEvaluateProgram {
		return nil, fmt.Errorf("%v: %d bytes of program, 1 to %d", TypeEvaluateValue, n, MaxEvaluateProgram)
	}
	if err := need(TypeEvaluateValue, b, evaluateValueSize+int(n)); err != nil {
		return nil, err
	}
	return &EvaluateValue{ThreadID: be.Uint32(b), Format: b[4], Bias: be.Uint64(b[8:]),
		Program: append([]byte(nil), b[evaluateValueSize:evaluateValueSize+int(n)]...)}, nil
}

// EvaluateValueAck answers EvaluateValue: the value as text.
type EvaluateValueAck struct {
	ThreadID uint32
	Text     string
}

func (a *EvaluateValueAck) CommandType() CommandType { return TypeEvaluateValueAck }
func (a *EvaluateValueAck) Thread() uint32           { return a.ThreadID }
func (a *EvaluateValueAck) EncodedSize() int         { return evaluateValueAckSize + len(a.Text) }
func (a *EvaluateValueAck) Encode(b []byte) {
	be.PutUint32(b, a.ThreadID)
	be.PutUint32(b[4:], uint32(len(a.Text)))
	copy(b[evaluateValueAckSize:], a.Text)
}

func decEvaluateValueAck(b []byte) (Ack, error) {
	if err := need(TypeEvaluateValueAck, b, evaluateValueAckSize); err != nil {
		return nil, err
	}
	n := be.Uint32(b[4:])
	if n > MaxValueText {
		return nil, fmt.Errorf("%v: %d bytes of text, at most %d", TypeEvaluateValueAck, n, MaxValueText)
	}
	if err := need(TypeEvaluateValueAck, b, evaluateValueAckSize+int(n)); err != nil {
		return nil, err
	}
	return &EvaluateValueAck{ThreadID: be.Uint32(b), Text: string(b[evaluateValueAckSize : evaluateValueAckSize+int(n)])}, nil
}

func init() {
	register(TypeEvaluateValue, "EvaluateValue", MsgQuery, true, decEvaluateValue, decEvaluateValueAck)
}
