package cdti

import (
	"context"
	"fmt"
	"strconv"
)

// Extension command types of the function-call extension.
const (
	TypeCallFunction    CommandType = 1203
	TypeCallFunctionAck CommandType = 1204
)

// Limits of CallFunction.
const (
	MaxCallArgs         = 32   // arguments of one call
	MaxCallData         = 4096 // bytes CallFunction copies onto the thread's stack
	MaxCallTimeoutMS    = 3600 * 1000
	callFunctionSize    = 32 // + 16 per argument + the data
	callFunctionAckSize = 32
)

// CallKind classifies a value that a called function takes or returns, as the calling
// conventions do: integer-class values travel in general registers, floating-point ones in
// floating-point or vector registers.
type CallKind uint8

const (
	CallVoid    CallKind = 0 // no value (a return kind only)
	CallInt     CallKind = 1 // integers, pointers, enums, bool, char: a 64-bit word, already extended
	CallFloat32 CallKind = 2 // a float: its IEEE single bits in the word's low 32 bits
	CallFloat64 CallKind = 3 // a double: its IEEE double bits
	// CallData (an argument kind only): the address at which the agent placed
	// CallFunction.Data on the thread's stack, plus the argument's value as an offset.
	CallData CallKind = 4
)

func (k CallKind) String() string {
	switch k {
	case CallVoid:
		return "void"
	case CallInt:
		return "int"
	case CallFloat32:
		return "float32"
	case CallFloat64:
		return "float64"
	case CallData:
		return "data"
	}
	return "CallKind(" + strconv.Itoa(int(k)) + ")"
}

// CallArg is one argument of CallFunction.
type CallArg struct {
	Kind  CallKind
	Value uint64
}

// CallFunction calls a function in a stopped thread of the process and waits for it to return
// (extension, in an Update): the agent saves the thread's registers, places the arguments as
// the machine's calling convention wants them with a return address at which a trap is
// planted (the program's entry point), runs that thread alone, and restores every register
// when the function returns, when a signal arrives in it, or when Timeout passes (the thread
// is then interrupted). The other threads stay as they were. Breakpoints met on the way are
// stepped over. Layout: entry u64 @8 (the function's code address; Power ELFv2: its global
// entry point), toc u64 @16 (Power ELFv1: r2 from the function's descriptor, 0 to keep r2),
// timeout in milliseconds u32 @24 (0: 10 s; at most MaxCallTimeoutMS), return kind u8 @28, argument count u8 @29, data
// length u16 @30, arguments @32 (16 bytes each: kind u8, 7 bytes of padding, value u64), data
// after them.
type CallFunction struct {
	ThreadID  uint32
	Entry     uint64
	TOC       uint64
	TimeoutMS uint32
	Return    CallKind
	Args      []CallArg
	Data      []byte
}

func (c *CallFunction) CommandType() CommandType { return TypeCallFunction }
func (c *CallFunction) Thread() uint32           { return c.ThreadID }
func (c *CallFunction) EncodedSize() int         { return callFunctionSize + 16*len(c.Args) + len(c.Data) }
func (c *CallFunction) AckSize() int             { return callFunctionAckSize }
func (c *CallFunction) Encode(b []byte) {
	be.PutUint32(b, c.ThreadID)
	be.PutUint64(b[8:], c.Entry)
	be.PutUint64(b[16:], c.TOC)
	be.PutUint32(b[24:], c.TimeoutMS)
	b[28] = byte(c.Return)
	b[29] = byte(len(c.Args))
	be.PutUint16(b[30:], uint16(len(c.Data)))
	for i, a := range c.Args {
		o := callFunctionSize + 16*i
		b[o] = byte(a.Kind)
		be.PutUint64(b[o+8:], a.Value)
	}
	copy(b[callFunctionSize+16*len(c.Args):], c.Data)
}

func (c *CallFunction) validate() error {
	if len(c.Args) > MaxCallArgs {
		return fmt.Errorf("cdti: CallFunction with %d arguments (limit %d)", len(c.Args), MaxCallArgs)
	}
	if len(c.Data) > MaxCallData {
		return fmt.Errorf("cdti: CallFunction with %d bytes of data (limit %d)", len(c.Data), MaxCallData)
	}
	return nil
}

func decCallFunction(b []byte) (Command, error) {
	if err := need(TypeCallFunction, b, callFunctionSize); err != nil {
		return nil, err
	}
	n, dn := int(b[29]), int(be.Uint16(b[30:]))
	if n > MaxCallArgs || dn > MaxCallData {
		return nil, fmt.Errorf("%v: %d arguments and %d bytes of data (limits %d, %d)", TypeCallFunction, n, dn,
			MaxCallArgs, MaxCallData)
	}
	if err := need(TypeCallFunction, b, callFunctionSize+16*n+dn); err != nil {
		return nil, err
	}
	c := &CallFunction{ThreadID: be.Uint32(b), Entry: be.Uint64(b[8:]), TOC: be.Uint64(b[16:]),
		TimeoutMS: be.Uint32(b[24:]), Return: CallKind(b[28]), Args: list[CallArg](n)}
	for i := range c.Args {
		o := callFunctionSize + 16*i
		c.Args[i] = CallArg{Kind: CallKind(b[o]), Value: be.Uint64(b[o+8:])}
	}
	if dn > 0 {
		off := callFunctionSize + 16*n
		c.Data = append([]byte(nil), b[off:off+dn]...)
	}
	return c, nil
}

// CallOutcome says how a CallFunction ended.
type CallOutcome uint32

const (
	// CallReturned: the function returned; CallFunctionAck.Value holds its value.
	CallReturned CallOutcome = 1
	// CallSignaled: a signal stopped the thread inside the function (Signal, at PC); the
	// signal was discarded and the thread's state restored.
	CallSignaled CallOutcome = 2
	// CallTimedOut: the function ran longer than the timeout; the thread was interrupted at PC
	// and its state restored.
	CallTimedOut CallOutcome = 3
	// CallThreadExited: the thread ended inside the function (pthread_exit, say).
	CallThreadExited CallOutcome = 4
)

func (o CallOutcome) String() string {
	switch o {
	case CallReturned:
		return "returned"
	case CallSignaled:
		return "signaled"
	case CallTimedOut:
		return "timed out"
	case CallThreadExited:
		return "thread exited"
	}
	return "CallOutcome(" + strconv.Itoa(int(o)) + ")"
}

// CallFunctionAck answers CallFunction: outcome u32 @8, signal u32 @12, value u64 @16 (the
// return value as CallFunction.Return asked: an integer register, or float bits), pc u64 @24
// (where a signal or the timeout stopped the thread).
type CallFunctionAck struct {
	ThreadID uint32
	Outcome  CallOutcome
	Signal   uint32
	Value    uint64
	PC       uint64
}

func (a *CallFunctionAck) CommandType() CommandType { return TypeCallFunctionAck }
func (a *CallFunctionAck) Thread() uint32           { return a.ThreadID }
func (a *CallFunctionAck) EncodedSize() int         { return callFunctionAckSize }
func (a *CallFunctionAck) Encode(b []byte) {
	be.PutUint32(b, a.ThreadID)
	be.PutUint32(b[8:], uint32(a.Outcome))
	be.PutUint32(b[12:], a.Signal)
	be.PutUint64(b[16:], a.Value)
	be.PutUint64(b[24:], a.PC)
}

func decCallFunctionAck(b []byte) (Ack, error) {
	if err := need(TypeCallFunctionAck, b, callFunctionAckSize); err != nil {
		return nil, err
	}
	return &CallFunctionAck{ThreadID: be.Uint32(b), Outcome: CallOutcome(be.Uint32(b[8:])),
		Signal: be.Uint32(b[12:]), Value: be.Uint64(b[16:]), PC: be.Uint64(b[24:])}, nil
}

// CallFunction runs c (extension; needs control authority) and returns its ack, whatever the
// outcome. A real BG/Q answers ErrNotSupported.
func (c *Client) CallFunction(ctx context.Context, rank uint32, call *CallFunction) (*CallFunctionAck, error) {
	return oneAck[*CallFunctionAck](ctx, c, "call function", rank, call)
}

func init() {
	register(TypeCallFunction, "CallFunction", MsgUpdate, true, decCallFunction, decCallFunctionAck)
}
