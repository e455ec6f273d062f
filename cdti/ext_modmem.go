package cdti

import "fmt"

// Extension command types of a read relative to a module (see GetModuleMemory).
const (
	TypeGetModuleMemory    CommandType = 1111
	TypeGetModuleMemoryAck CommandType = 1112
)

// MaxModuleNameSize bounds GetModuleMemory's module name.
const MaxModuleNameSize = 4096

// getModuleMemorySize: thread id u32 @0, length u32 @4 (at most MaxMemorySize), offset u64
// @8, spec access u32 @16, name length u16 @20 (at most MaxModuleNameSize), pad, name @24.
const getModuleMemorySize = 24

// GetModuleMemory reads Length bytes (at most MaxMemorySize; larger reads are split, see
// SplitGetModuleMemory) at Offset from the load bias of Module, a module the agent finds in
// the process's link map by name ("" the executable), as GetMemory reads at that address: a
// range the tool knows relative to a module (a library's data, or the thread stacks the
// kernel maps at a fixed distance from the libraries) is read with one command list from
// every rank of a Collective, whatever address-space randomisation made of each rank's
// layout. The ack says the address read. A module not in the link map fails the command
// with CmdParmErr, as unreadable memory does.
type GetModuleMemory struct {
	ThreadID   uint32
	Module     string
	Offset     uint64
	Length     uint32
	SpecAccess SpecAccess
}

func (c *GetModuleMemory) CommandType() CommandType { return TypeGetModuleMemory }
func (c *GetModuleMemory) Thread() uint32           { return c.ThreadID }
func (c *GetModuleMemory) EncodedSize() int         { return getModuleMemorySize + len(c.Module) }
func (c *GetModuleMemory) AckSize() int             { return getMemoryAckSize + int(c.Length) }

func (c *GetModuleMemory) Encode(b []byte) {
	be.PutUint32(b, c.ThreadID)
	be.PutUint32(b[4:], c.Length)
	be.PutUint64(b[8:], c.Offset)
	be.PutUint32(b[16:], uint32(c.SpecAccess))
	be.PutUint16(b[20:], uint16(len(c.Module)))
	copy(b[getModuleMemorySize:], c.Module)
}

func (c *GetModuleMemory) validate() error {
	switch {
	case c.Length > MaxMemorySize:
		return fmt.Errorf("%w: %v of %d bytes (limit %d; split it)", ErrMemoryTooLarge, TypeGetModuleMemory, c.Length, MaxMemorySize)
	case len(c.Module) > MaxModuleNameSize:
		return fmt.Errorf("%v: a module name of %d bytes, at most %d", TypeGetModuleMemory, len(c.Module), MaxModuleNameSize)
	}
	return nil
}

func decGetModuleMemory(b []byte) (Command, error) {
	if err := need(TypeGetModuleMemory, b, getModuleMemorySize); err != nil {
		return nil, err
	}
	n := int(be.Uint16(b[20:]))
	if n > MaxModuleNameSize {
		return nil, fmt.Errorf("%v: a module name of %d bytes, at most %d", TypeGetModuleMemory, n, MaxModuleNameSize)
	}
	if err := need(TypeGetModuleMemory, b, getModuleMemorySize+n); err != nil {
		return nil, err
	}
	return &GetModuleMemory{ThreadID: be.Uint32(b), Length: be.Uint32(b[4:]), Offset: be.Uint64(b[8:]),
		SpecAccess: SpecAccess(be.Uint32(b[16:])), Module: string(b[getModuleMemorySize : getModuleMemorySize+n])}, nil
}

// GetModuleMemoryAck answers GetModuleMemory, laid out as GetMemoryAck: the address read
// (the module's bias plus the offset), the length, and the data at +20; unlike GetMemoryAck's,
// its payload must hold the whole descriptor (24 + the length).
type GetModuleMemoryAck struct {
	ThreadID uint32
	Addr     uint64
	Length   uint32 // number of data bytes (equal to len(Data) in a successful ack)
	Data     []byte
}

func (a *GetModuleMemoryAck) CommandType() CommandType { return TypeGetModuleMemoryAck }
func (a *GetModuleMemoryAck) Thread() uint32           { return a.ThreadID }
func (a *GetModuleMemoryAck) EncodedSize() int         { return getMemoryAckSize + len(a.Data) }
func (a *GetModuleMemoryAck) Encode(b []byte) {
	(&GetMemoryAck{ThreadID: a.ThreadID, Addr: a.Addr, Length: a.Length, Data: a.Data}).Encode(b)
}

func decGetModuleMemoryAck(b []byte) (Ack, error) {
	if err := need(TypeGetModuleMemoryAck, b, getMemoryAckSize); err != nil {
		return nil, err
	}
	n := be.Uint32(b[16:])
	if uint64(n) > uint64(len(b)-getMemoryAckSize) {
		return nil, fmt.Errorf("%v: length %d but payload holds %d data bytes", TypeGetModuleMemoryAck, n, len(b)-getMemoryAckSize)
	}
	return &GetModuleMemoryAck{ThreadID: be.Uint32(b), Addr: be.Uint64(b[8:]), Length: n, Data: b[20 : 20+n]}, nil
}

// SplitGetModuleMemory returns the GetModuleMemory commands that read length bytes at offset
// from module's bias, each of at most MaxMemorySize bytes, in address order.
func SplitGetModuleMemory(tid uint32, module string, offset uint64, length int, spec SpecAccess) []Command {
	return splitMemory(length, func(off, n int) Command {
		return &GetModuleMemory{ThreadID: tid, Module: module, Offset: offset + uint64(off), Length: uint32(n), SpecAccess: spec}
	})
}

func init() {
	register(TypeGetModuleMemory, "GetModuleMemory", MsgQuery, true, decGetModuleMemory, decGetModuleMemoryAck)
}
