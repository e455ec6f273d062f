package cdti

import (
	"errors"
	"fmt"
)

// Errors of the request builder. Builder.Add wraps them with the command's position and type.
var (
	// ErrTooManyCommands: a message holds at most 16 commands.
	ErrTooManyCommands = errors.New("too many commands")
	// ErrActionNotLast: an action command (ContinueProcess, StepThread, ReleaseControl) must be
	// the last command of its Update, so nothing may follow it (not even a second action).
	ErrActionNotLast = errors.New("command after an action command")
	// ErrTooLarge: the request, or the ack it predicts, would exceed MaxRequestSize.
	ErrTooLarge = errors.New("message too large")
	// ErrMemoryTooLarge: a GetMemory or SetMemory of more than MaxMemorySize bytes; split it.
	ErrMemoryTooLarge = errors.New("memory transfer too large")
)

// Builder accumulates the commands of one Query or Update and refuses every command that would
// make the message invalid:
//
//   - at most 16 commands;
//   - query commands only in a Query, update commands only in an Update (a *RawCommand, for
//     types this package does not know, is accepted in both);
//   - at most one action command per Update, and only as the last command;
//   - every command within its own limits (GetMemory and SetMemory at most MaxMemorySize
//     bytes, pathnames at most 127 bytes, ...);
//   - the request (payloads from offset 304, each at a multiple of 8) and its predicted ack
//     (304 + Σ ROUND8(ack sizes)) each at most MaxRequestSize (65472) bytes.
//
// The zero Builder is not usable; call NewBuilder.
type Builder struct {
	kind   MessageType
	cmds   []Command
	end    int // request length so far
	ack    int // predicted ack length so far
	action bool
}

// NewBuilder returns an empty builder for kind, which must be MsgQuery or MsgUpdate.
func NewBuilder(kind MessageType) *Builder {
	b := &Builder{kind: kind}
	b.Reset()
	return b
}

// Reset empties the builder.
func (b *Builder) Reset() {
	b.cmds = nil
	b.end = CommandMessageSize
	b.ack = CommandMessageSize
	b.action = false
}

// Kind is MsgQuery or MsgUpdate.
func (b *Builder) Kind() MessageType { return b.kind }

// Len is the number of commands added.
func (b *Builder) Len() int { return len(b.cmds) }

// Size is the length of the request built so far.
func (b *Builder) Size() int { return b.end }

// AckSize is the predicted length of its ack.
func (b *Builder) AckSize() int { return b.ack }

// Commands returns the commands added, in order.
func (b *Builder) Commands() []Command { return append([]Command(nil), b.cmds...) }

// Closed reports whether the builder ends with an action command, after which nothing can be
// added.
func (b *Builder) Closed() bool { return b.action }

// Check reports whether Add(c) would succeed, without adding c. Errors wrap one of
// ErrTooManyCommands, ErrActionNotLast, ErrTooLarge (the message is full: start another),
// ErrWrongMessage or ErrMemoryTooLarge or a validation error (c itself is invalid).
func (b *Builder) Check(c Command) error {
	if err := b.checkCommand(c); err != nil {
		return err
	}
	return b.checkRoom(c)
}

// checkCommand checks what does not depend on the commands already present.
func (b *Builder) checkCommand(c Command) error {
	if b.kind != MsgQuery && b.kind != MsgUpdate {
		return fmt.Errorf("cdti: builder for %v: only Query and Update carry commands", b.kind)
	}
	if c == nil {
		return fmt.Errorf("cdti: %v command %d: nil", b.kind, len(b.cmds))
	}
	t := c.CommandType()
	if _, raw := c.(*RawCommand); !raw && t.Kind() != b.kind {
		return fmt.Errorf("cdti: %v command %d (%v): %w", b.kind, len(b.cmds), t, ErrWrongMessage)
	}
	if err := Validate(c); err != nil {
		return fmt.Errorf("cdti: %v command %d (%v): %w", b.kind, len(b.cmds), t, err)
	}
	if one := CommandMessageSize + c.EncodedSize(); one > MaxRequestSize {
		return fmt.Errorf("cdti: %v command %d (%v): %w: request of %d bytes alone", b.kind, len(b.cmds), t, ErrTooLarge, one)
	}
	if one := CommandMessageSize + round8(c.AckSize()); one > MaxRequestSize {
		return fmt.Errorf("cdti: %v command %d (%v): %w: ack of %d bytes alone", b.kind, len(b.cmds), t, ErrTooLarge, one)
	}
	return nil
}

// checkRoom checks whether c fits after the commands already present.
func (b *Builder) checkRoom(c Command) error {
	t := c.CommandType()
	switch {
	case len(b.cmds) >= MaxCommands:
		return fmt.Errorf("cdti: %v command %d (%v): %w (limit %d)", b.kind, len(b.cmds), t, ErrTooManyCommands, MaxCommands)
	case b.action:
		return fmt.Errorf("cdti: %v command %d (%v): %w (%v)", b.kind, len(b.cmds), t, ErrActionNotLast,
			b.cmds[len(b.cmds)-1].CommandType())
	}
	if end := round8(b.end) + c.EncodedSize(); end > MaxRequestSize {
		return fmt.Errorf("cdti: %v command %d (%v): %w: request would be %d bytes (limit %d)",
			b.kind, len(b.cmds), t, ErrTooLarge, end, MaxRequestSize)
	}
	if ack := b.ack + round8(c.AckSize()); ack > MaxRequestSize {
		return fmt.Errorf("cdti: %v command %d (%v): %w: ack would be %d bytes (limit %d)",
			b.kind, len(b.cmds), t, ErrTooLarge, ack, MaxRequestSize)
	}
	return nil
}

// Add appends c, or returns the reason it cannot be added (see Check) and leaves the builder
// unchanged.
func (b *Builder) Add(c Command) error {
	if err := b.Check(c); err != nil {
		return err
	}
	b.cmds = append(b.cmds, c)
	b.end = round8(b.end) + c.EncodedSize()
	b.ack += round8(c.AckSize())
	b.action = c.CommandType().IsAction()
	return nil
}

// Message returns the Query or Update holding the commands, with header h.
func (b *Builder) Message(h Header) Message {
	if b.kind == MsgUpdate {
		return &Update{Header: h, Commands: b.Commands()}
	}
	return &Query{Header: h, Commands: b.Commands()}
}

// CheckCommands reports whether cmds form one valid message of kind (MsgQuery or MsgUpdate)
// under the Builder's rules.
func CheckCommands(kind MessageType, cmds []Command) error {
	b := NewBuilder(kind)
	for _, c := range cmds {
		if err := b.Add(c); err != nil {
			return err
		}
	}
	return nil
}

// Batch splits a list of commands into as few consecutive valid messages of kind as the
// greedy rule gives, preserving order: a message is closed when the next command does not fit
// (16 commands, size or predicted ack size) and right after an action command, so that action
// commands only ever come last. It fails if a command is invalid on its own (wrong kind,
// over its limits: split memory transfers first with SplitGetMemory/SplitSetMemory).
func Batch(kind MessageType, cmds []Command) ([][]Command, error) {
	var out [][]Command
	b := NewBuilder(kind)
	for i, c := range cmds {
		if err := b.checkCommand(c); err != nil {
			return nil, fmt.Errorf("%w (command %d of the batch)", err, i)
		}
		if b.checkRoom(c) != nil {
			out = append(out, b.cmds)
			b.Reset()
		}
		if err := b.Add(c); err != nil { // cannot fail: checkCommand passed on an empty builder
			return nil, err
		}
	}
	if len(b.cmds) > 0 {
		out = append(out, b.cmds)
	}
	return out, nil
}

// SplitGetMemory returns the GetMemory commands that read length bytes at addr, each of at most
// MaxMemorySize bytes, in address order.
func SplitGetMemory(tid uint32, addr uint64, length int, spec SpecAccess) []Command {
	return splitMemory(length, func(off, n int) Command {
		return &GetMemory{ThreadID: tid, Addr: addr + uint64(off), Length: uint32(n), SpecAccess: spec}
	})
}

// SplitSetMemory returns the SetMemory commands that write data at addr, each of at most
// MaxMemorySize bytes, in address order. The commands share data's memory.
func SplitSetMemory(tid uint32, addr uint64, data []byte, spec SpecAccess, shared SharedMemoryAccess) []Command {
	return splitMemory(len(data), func(off, n int) Command {
		return &SetMemory{ThreadID: tid, Addr: addr + uint64(off), SpecAccess: spec,
			SharedMemory: shared, Data: data[off : off+n : off+n]}
	})
}

// splitMemory returns the commands piece makes for each piece of length bytes of memory, at
// most MaxMemorySize bytes each, in order: off is a piece's offset, n its length.
func splitMemory(length int, piece func(off, n int) Command) []Command {
	var cmds []Command
	for off := 0; off < length; off += MaxMemorySize {
		cmds = append(cmds, piece(off, min(length-off, MaxMemorySize)))
	}
	return cmds
}
