package cdti

import "fmt"

// Extension command types of evaluation in a frame (see EvaluateValue).
const (
	TypeEvaluateValue    CommandType = 1109
	TypeEvaluateValueAck CommandType = 1110
)

// Limits of EvaluateValue.
const (
	MaxEvaluateProgram = 4096  // bytes of an EvaluateValue's program
	MaxEvaluateModules = 16384 // bytes of an EvaluateValue's module names, their lengths included
	MaxValueText       = 256   // bytes of an EvaluateValueAck's text
	// MaxEvaluateModuleCount bounds an EvaluateValue's modules (bpcode.OpModBias's operand
	// is one byte).
	MaxEvaluateModuleCount = 256
)

// evaluateValueSize: thread id uint32 @0, format u8 @4, pad, module count u16 @6 (at most
// MaxEvaluateModuleCount), program length u32 @8, names length u32 @12, program @16, then the
// module names, each a u16 length and its bytes.
const evaluateValueSize = 16

// evaluateValueAckSize: thread id uint32 @0, pad, length u32 @8, pad, text @16 (longer than a
// bare 8-byte ack, which a failed command answers with).
const evaluateValueAckSize = 16

// EvaluateValue asks the agent for one value of a stopped process, as a tool compares a
// variable across ranks: Program (a bpcode program the tool compiled for one place of the
// program: frame 0's registers unwound to the frame of the value, each frame's pc checked) is
// evaluated in the thread, and its word printed as Format (a bpcode.Format) says. The
// program's addresses are relative to the load biases of Modules (bpcode.OpModBias i reads
// Modules[i]'s), which the agent finds in the process's link map by name ("" the executable),
// so that one program serves processes whose modules are loaded at different addresses. A
// program that fails (a process stopped elsewhere than its place checks say, unreadable
// memory, a module not loaded) fails the command with CmdParmErr: the tool evaluates that
// rank itself.
//
// ThreadID 0 names the process's leader (main) thread, whichever thread stopped last. In a
// Collective the same command goes to every rank of a set, and the answers come back grouped
// by value.
type EvaluateValue struct {
	ThreadID uint32
	Format   uint8
	Program  []byte
	Modules  []string
}

func (c *EvaluateValue) CommandType() CommandType { return TypeEvaluateValue }
func (c *EvaluateValue) Thread() uint32           { return c.ThreadID }
func (c *EvaluateValue) EncodedSize() int         { return evaluateValueSize + len(c.Program) + c.namesSize() }
func (c *EvaluateValue) AckSize() int             { return evaluateValueAckSize + MaxValueText }

func (c *EvaluateValue) namesSize() int {
	n := 0
	for _, m := range c.Modules {
		n += 2 + len(m)
	}
	return n
}

func (c *EvaluateValue) Encode(b []byte) {
	be.PutUint32(b, c.ThreadID)
	b[4] = c.Format
	be.PutUint16(b[6:], uint16(len(c.Modules)))
	be.PutUint32(b[8:], uint32(len(c.Program)))
	be.PutUint32(b[12:], uint32(c.namesSize()))
	at := evaluateValueSize + copy(b[evaluateValueSize:], c.Program)
	for _, m := range c.Modules {
		be.PutUint16(b[at:], uint16(len(m)))
		at += 2 + copy(b[at+2:], m)
	}
}

func (c *EvaluateValue) validate() error {
	switch {
	case len(c.Program) == 0 || len(c.Program) > MaxEvaluateProgram:
		return fmt.Errorf("%v: %d bytes of program, 1 to %d", TypeEvaluateValue, len(c.Program), MaxEvaluateProgram)
	case len(c.Modules) > MaxEvaluateModuleCount:
		return fmt.Errorf("%v: %d modules, at most %d", TypeEvaluateValue, len(c.Modules), MaxEvaluateModuleCount)
	case c.namesSize() > MaxEvaluateModules:
		return fmt.Errorf("%v: %d bytes of module names, at most %d", TypeEvaluateValue, c.namesSize(), MaxEvaluateModules)
	}
	return nil // (so no name is longer than its u16 length can say)
}

func decEvaluateValue(b []byte) (Command, error) {
	if err := need(TypeEvaluateValue, b, evaluateValueSize); err != nil {
		return nil, err
	}
	np, nn := be.Uint32(b[8:]), be.Uint32(b[12:])
	if np == 0 || np > MaxEvaluateProgram {
		return nil, fmt.Errorf("%v: %d bytes of program, 1 to %d", TypeEvaluateValue, np, MaxEvaluateProgram)
	}
	if nn > MaxEvaluateModules {
		return nil, fmt.Errorf("%v: %d bytes of module names, at most %d", TypeEvaluateValue, nn, MaxEvaluateModules)
	}
	if err := need(TypeEvaluateValue, b, evaluateValueSize+int(np)+int(nn)); err != nil {
		return nil, err
	}
	count := int(be.Uint16(b[6:]))
	if count > MaxEvaluateModuleCount {
		return nil, fmt.Errorf("%v: %d modules, at most %d", TypeEvaluateValue, count, MaxEvaluateModuleCount)
	}
	c := &EvaluateValue{ThreadID: be.Uint32(b), Format: b[4],
		Program: append([]byte(nil), b[evaluateValueSize:evaluateValueSize+int(np)]...)}
	names := b[evaluateValueSize+int(np) : evaluateValueSize+int(np)+int(nn)]
	for range count {
		if len(names) < 2 || len(names) < 2+int(be.Uint16(names)) {
			return nil, fmt.Errorf("%v: %d module names in %d bytes", TypeEvaluateValue, count, nn)
		}
		n := int(be.Uint16(names))
		c.Modules = append(c.Modules, string(names[2:2+n]))
		names = names[2+n:]
	}
	if len(names) != 0 {
		return nil, fmt.Errorf("%v: %d bytes after the module names", TypeEvaluateValue, len(names))
	}
	return c, nil
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
	be.PutUint32(b[8:], uint32(len(a.Text)))
	copy(b[evaluateValueAckSize:], a.Text)
}

func decEvaluateValueAck(b []byte) (Ack, error) {
	if err := need(TypeEvaluateValueAck, b, evaluateValueAckSize); err != nil {
		return nil, err
	}
	n := be.Uint32(b[8:])
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
