package cdti

import "fmt"

// Extension command types of trap conditions (see SetTrapCondition).
const (
	TypeSetTrapCondition    CommandType = 1207
	TypeSetTrapConditionAck CommandType = 1208
)

// MaxTrapConditionSize bounds the site description of a SetTrapCondition.
const MaxTrapConditionSize = 16384

// setTrapConditionSize: thread id uint32 @0, address u64 @8, bias u64 @16, hits u64 @24,
// length u32 @32, site description @40.
const setTrapConditionSize = 40

// setTrapConditionAckSize: thread id uint32 @0, hits u64 @8.
const setTrapConditionAckSize = 16

// SetTrapCondition gives the agent what to decide itself at a breakpoint the tool planted:
// Site is an opaque site description (package bpcode: a condition, a hit condition, a log
// message), Bias the load bias of the binary it was compiled for. At a hit of the trap at
// Address the agent evaluates the condition in the trapped thread and counts the hit; a hit
// that does not stop (a false condition, a hit condition not met, a log point, whose message
// the agent sends as the process's output, stream "log" of the management plane's output
// notifications; refused with CmdParmErr where the agent does not capture the output) is
// stepped over without a Notify. An empty Site
// removes the condition: every hit is reported again. The condition goes when the trap does.
// Hits is where the count of hits whose condition held starts (the tool's count so far), or
// TrapHitsCarryOn to go on from the count of the condition this one replaces; the ack's Hits is
// the count of the condition this one replaced or removed, so that the tool can count on where
// the agent left off. A real CNK answers CmdInval: the tool decides every hit
// itself.
//
// A condition that cannot be evaluated at a hit (a pointer into unmapped memory) stops: the
// Notify of that hit carries the reason SignalConditionError instead of SignalBreakpoint.
type SetTrapCondition struct {
	ThreadID uint32
	Address  uint64
	Bias     uint64
	Hits     uint64
	Site     []byte
}

func (c *SetTrapCondition) CommandType() CommandType { return TypeSetTrapCondition }
func (c *SetTrapCondition) Thread() uint32           { return c.ThreadID }
func (c *SetTrapCondition) EncodedSize() int         { return setTrapConditionSize + len(c.Site) }
func (c *SetTrapCondition) AckSize() int             { return setTrapConditionAckSize }
func (c *SetTrapCondition) Encode(b []byte) {
	be.PutUint32(b, c.ThreadID)
	be.PutUint64(b[8:], c.Address)
	be.PutUint64(b[16:], c.Bias)
	be.PutUint64(b[24:], c.Hits)
	be.PutUint32(b[32:], uint32(len(c.Site)))
	copy(b[setTrapConditionSize:], c.Site)
}

func decSetTrapCondition(b []byte) (Command, error) {
	if err := need(TypeSetTrapCondition, b, setTrapConditionSize); err != nil {
		return nil, err
	}
	n := be.Uint32(b[32:])
	if n > MaxTrapConditionSize {
		return nil, fmt.Errorf("%v: %d bytes of site, at most %d", TypeSetTrapCondition, n, MaxTrapConditionSize)
	}
	if err := need(TypeSetTrapCondition, b, setTrapConditionSize+int(n)); err != nil {
		return nil, err
	}
	c := &SetTrapCondition{ThreadID: be.Uint32(b), Address: be.Uint64(b[8:]), Bias: be.Uint64(b[16:]),
		Hits: be.Uint64(b[24:])}
	if n > 0 {
		c.Site = append([]byte(nil), b[setTrapConditionSize:setTrapConditionSize+int(n)]...)
	}
	return c, nil
}

// TrapHitsCarryOn as SetTrapCondition.Hits starts the count where the replaced condition's
// count stands.
const TrapHitsCarryOn = ^uint64(0)

// SignalConditionError is the extension reason of a breakpoint Notify whose trap condition
// could not be evaluated by the agent: the tool evaluates it itself to say why, and stops.
const SignalConditionError NotifySignalReason = 101

// SetTrapConditionAck answers SetTrapCondition: Hits is the count of the condition replaced
// or removed (0 when there was none).
type SetTrapConditionAck struct {
	ThreadID uint32
	Hits     uint64
}

func (a *SetTrapConditionAck) CommandType() CommandType { return TypeSetTrapConditionAck }
func (a *SetTrapConditionAck) Thread() uint32           { return a.ThreadID }
func (a *SetTrapConditionAck) EncodedSize() int         { return setTrapConditionAckSize }
func (a *SetTrapConditionAck) Encode(b []byte) {
	be.PutUint32(b, a.ThreadID)
	be.PutUint64(b[8:], a.Hits)
}

func decSetTrapConditionAck(b []byte) (Ack, error) {
	if err := need(TypeSetTrapConditionAck, b, setTrapConditionAckSize); err != nil {
		return nil, err
	}
	return &SetTrapConditionAck{ThreadID: be.Uint32(b), Hits: be.Uint64(b[8:])}, nil
}

func init() {
	register(TypeSetTrapCondition, "SetTrapCondition", MsgUpdate, true, decSetTrapCondition, decSetTrapConditionAck)
}
