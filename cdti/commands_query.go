package cdti

import "fmt"

// Query command types and their ack types (command type + 1). Valid only inside a Query.
const (
	TypeGetSpecialRegs     CommandType = 101
	TypeGetSpecialRegsAck  CommandType = 102
	TypeGetGeneralRegs     CommandType = 103
	TypeGetGeneralRegsAck  CommandType = 104
	TypeGetFloatRegs       CommandType = 105
	TypeGetFloatRegsAck    CommandType = 106
	TypeGetDebugRegs       CommandType = 107
	TypeGetDebugRegsAck    CommandType = 108
	TypeGetMemory          CommandType = 109
	TypeGetMemoryAck       CommandType = 110
	TypeGetThreadList      CommandType = 111
	TypeGetThreadListAck   CommandType = 112
	TypeGetAuxVectors      CommandType = 113
	TypeGetAuxVectorsAck   CommandType = 114
	TypeGetProcessData     CommandType = 115
	TypeGetProcessDataAck  CommandType = 116
	TypeGetThreadData      CommandType = 117
	TypeGetThreadDataAck   CommandType = 118
	TypeGetPreferences     CommandType = 119
	TypeGetPreferencesAck  CommandType = 120
	TypeGetFilenames       CommandType = 121
	TypeGetFilenamesAck    CommandType = 122
	TypeGetFileStatData    CommandType = 123
	TypeGetFileStatDataAck CommandType = 124
	TypeGetFileContents    CommandType = 125
	TypeGetFileContentsAck CommandType = 126
)

// Fixed payload sizes of the query acks (sizeof the IBM structs).
const (
	getSpecialRegsAckSize  = 80
	getGeneralRegsAckSize  = 264
	getFloatRegsAckSize    = 1032
	getDebugRegsAckSize    = 112
	getMemoryAckSize       = 24 // + n data bytes, which start at +20
	getThreadListAckSize   = 8208
	getAuxVectorsAckSize   = 272
	getProcessDataAckSize  = 128
	getThreadDataAckSize   = 6472
	getPreferencesAckSize  = 24
	getFilenamesAckSize    = 32784
	getFileStatDataSize    = 136
	getFileStatDataAckSize = 152
	getFileContentsSize    = 152
	getFileContentsAckSize = 16 // + numbytes
)

// threadDecoder builds the decoder of a command or ack that is only a threadID.
func threadDecoder[T any](t CommandType, mk func(tid uint32) T) func([]byte) (T, error) {
	return func(b []byte) (T, error) {
		if err := need(t, b, 8); err != nil {
			var zero T
			return zero, err
		}
		return mk(be.Uint32(b)), nil
	}
}

// GetSpecialRegs reads a thread's special registers.
type GetSpecialRegs struct{ ThreadID uint32 }

func (c *GetSpecialRegs) CommandType() CommandType { return TypeGetSpecialRegs }
func (c *GetSpecialRegs) Thread() uint32           { return c.ThreadID }
func (c *GetSpecialRegs) EncodedSize() int         { return 8 }
func (c *GetSpecialRegs) AckSize() int             { return getSpecialRegsAckSize }
func (c *GetSpecialRegs) Encode(b []byte)          { be.PutUint32(b, c.ThreadID) }

// GetSpecialRegsAck answers GetSpecialRegs.
type GetSpecialRegsAck struct {
	ThreadID uint32
	Regs     SpecialRegs
}

func (a *GetSpecialRegsAck) CommandType() CommandType { return TypeGetSpecialRegsAck }
func (a *GetSpecialRegsAck) Thread() uint32           { return a.ThreadID }
func (a *GetSpecialRegsAck) EncodedSize() int         { return getSpecialRegsAckSize }
func (a *GetSpecialRegsAck) Encode(b []byte)          { be.PutUint32(b, a.ThreadID); a.Regs.put(b[8:]) }

func decGetSpecialRegsAck(b []byte) (Ack, error) {
	if err := need(TypeGetSpecialRegsAck, b, getSpecialRegsAckSize); err != nil {
		return nil, err
	}
	a := &GetSpecialRegsAck{ThreadID: be.Uint32(b)}
	a.Regs.get(b[8:])
	return a, nil
}

// GetGeneralRegs reads a thread's 32 general-purpose registers.
type GetGeneralRegs struct{ ThreadID uint32 }

func (c *GetGeneralRegs) CommandType() CommandType { return TypeGetGeneralRegs }
func (c *GetGeneralRegs) Thread() uint32           { return c.ThreadID }
func (c *GetGeneralRegs) EncodedSize() int         { return 8 }
func (c *GetGeneralRegs) AckSize() int             { return getGeneralRegsAckSize }
func (c *GetGeneralRegs) Encode(b []byte)          { be.PutUint32(b, c.ThreadID) }

// GetGeneralRegsAck answers GetGeneralRegs.
type GetGeneralRegsAck struct {
	ThreadID uint32
	GPR      [NumGPRegs]uint64
}

func (a *GetGeneralRegsAck) CommandType() CommandType { return TypeGetGeneralRegsAck }
func (a *GetGeneralRegsAck) Thread() uint32           { return a.ThreadID }
func (a *GetGeneralRegsAck) EncodedSize() int         { return getGeneralRegsAckSize }
func (a *GetGeneralRegsAck) Encode(b []byte) {
	be.PutUint32(b, a.ThreadID)
	for i, v := range a.GPR {
		be.PutUint64(b[8+8*i:], v)
	}
}

func decGetGeneralRegsAck(b []byte) (Ack, error) {
	if err := need(TypeGetGeneralRegsAck, b, getGeneralRegsAckSize); err != nil {
		return nil, err
	}
	a := &GetGeneralRegsAck{ThreadID: be.Uint32(b)}
	for i := range a.GPR {
		a.GPR[i] = be.Uint64(b[8+8*i:])
	}
	return a, nil
}

// GetFloatRegs reads a thread's 32 QPX floating-point registers.
type GetFloatRegs struct{ ThreadID uint32 }

func (c *GetFloatRegs) CommandType() CommandType { return TypeGetFloatRegs }
func (c *GetFloatRegs) Thread() uint32           { return c.ThreadID }
func (c *GetFloatRegs) EncodedSize() int         { return 8 }
func (c *GetFloatRegs) AckSize() int             { return getFloatRegsAckSize }
func (c *GetFloatRegs) Encode(b []byte)          { be.PutUint32(b, c.ThreadID) }

// GetFloatRegsAck answers GetFloatRegs.
type GetFloatRegsAck struct {
	ThreadID uint32
	FPR      [NumFPRegs]QPX
}

func (a *GetFloatRegsAck) CommandType() CommandType { return TypeGetFloatRegsAck }
func (a *GetFloatRegsAck) Thread() uint32           { return a.ThreadID }
func (a *GetFloatRegsAck) EncodedSize() int         { return getFloatRegsAckSize }
func (a *GetFloatRegsAck) Encode(b []byte) {
	be.PutUint32(b, a.ThreadID)
	for i := range a.FPR {
		a.FPR[i].put(b[8+qpxSize*i:])
	}
}

func decGetFloatRegsAck(b []byte) (Ack, error) {
	if err := need(TypeGetFloatRegsAck, b, getFloatRegsAckSize); err != nil {
		return nil, err
	}
	a := &GetFloatRegsAck{ThreadID: be.Uint32(b)}
	for i := range a.FPR {
		a.FPR[i].get(b[8+qpxSize*i:])
	}
	return a, nil
}

// GetDebugRegs reads a thread's debug registers.
type GetDebugRegs struct{ ThreadID uint32 }

func (c *GetDebugRegs) CommandType() CommandType { return TypeGetDebugRegs }
func (c *GetDebugRegs) Thread() uint32           { return c.ThreadID }
func (c *GetDebugRegs) EncodedSize() int         { return 8 }
func (c *GetDebugRegs) AckSize() int             { return getDebugRegsAckSize }
func (c *GetDebugRegs) Encode(b []byte)          { be.PutUint32(b, c.ThreadID) }

// GetDebugRegsAck answers GetDebugRegs.
type GetDebugRegsAck struct {
	ThreadID uint32
	Regs     DebugRegs
}

func (a *GetDebugRegsAck) CommandType() CommandType { return TypeGetDebugRegsAck }
func (a *GetDebugRegsAck) Thread() uint32           { return a.ThreadID }
func (a *GetDebugRegsAck) EncodedSize() int         { return getDebugRegsAckSize }
func (a *GetDebugRegsAck) Encode(b []byte)          { be.PutUint32(b, a.ThreadID); a.Regs.put(b[8:]) }

func decGetDebugRegsAck(b []byte) (Ack, error) {
	if err := need(TypeGetDebugRegsAck, b, getDebugRegsAckSize); err != nil {
		return nil, err
	}
	a := &GetDebugRegsAck{ThreadID: be.Uint32(b)}
	a.Regs.get(b[8:])
	return a, nil
}

// GetMemory reads Length bytes (at most MaxMemorySize) at Addr. Larger reads must be split:
// see SplitGetMemory and Client.ReadMemory.
type GetMemory struct {
	ThreadID   uint32
	Addr       uint64
	Length     uint32
	SpecAccess SpecAccess
}

func (c *GetMemory) CommandType() CommandType { return TypeGetMemory }
func (c *GetMemory) Thread() uint32           { return c.ThreadID }
func (c *GetMemory) EncodedSize() int         { return 24 }
func (c *GetMemory) AckSize() int             { return getMemoryAckSize + int(c.Length) }
func (c *GetMemory) Encode(b []byte) {
	be.PutUint32(b, c.ThreadID)
	be.PutUint64(b[8:], c.Addr)
	be.PutUint32(b[16:], c.Length)
	be.PutUint32(b[20:], uint32(c.SpecAccess))
}

func (c *GetMemory) validate() error {
	if c.Length > MaxMemorySize {
		return fmt.Errorf("%w: GetMemory of %d bytes (limit %d; split it)", ErrMemoryTooLarge, c.Length, MaxMemorySize)
	}
	return nil
}

func decGetMemory(b []byte) (Command, error) {
	if err := need(TypeGetMemory, b, 24); err != nil {
		return nil, err
	}
	return &GetMemory{ThreadID: be.Uint32(b), Addr: be.Uint64(b[8:]), Length: be.Uint32(b[16:]),
		SpecAccess: SpecAccess(be.Uint32(b[20:]))}, nil
}

// GetMemoryAck answers GetMemory. Its data starts at +20 and its descriptor length is 24 + n.
type GetMemoryAck struct {
	ThreadID uint32
	Addr     uint64
	Length   uint32 // number of data bytes (equal to len(Data) in a successful ack)
	Data     []byte
}

func (a *GetMemoryAck) CommandType() CommandType { return TypeGetMemoryAck }
func (a *GetMemoryAck) Thread() uint32           { return a.ThreadID }
func (a *GetMemoryAck) EncodedSize() int         { return getMemoryAckSize + len(a.Data) }
func (a *GetMemoryAck) Encode(b []byte) {
	be.PutUint32(b, a.ThreadID)
	be.PutUint64(b[8:], a.Addr)
	be.PutUint32(b[16:], a.Length)
	copy(b[20:], a.Data)
}

func decGetMemoryAck(b []byte) (Ack, error) {
	if err := need(TypeGetMemoryAck, b, getMemoryAckSize); err != nil {
		return nil, err
	}
	n := be.Uint32(b[16:])
	if uint64(n) > uint64(len(b)-20) {
		return nil, fmt.Errorf("%v: length %d but payload holds %d data bytes", TypeGetMemoryAck, n, len(b)-20)
	}
	return &GetMemoryAck{ThreadID: be.Uint32(b), Addr: be.Uint64(b[8:]), Length: n, Data: b[20 : 20+n]}, nil
}

// GetThreadList lists the process's threads.
type GetThreadList struct{ ThreadID uint32 }

func (c *GetThreadList) CommandType() CommandType { return TypeGetThreadList }
func (c *GetThreadList) Thread() uint32           { return c.ThreadID }
func (c *GetThreadList) EncodedSize() int         { return 8 }
func (c *GetThreadList) AckSize() int             { return getThreadListAckSize }
func (c *GetThreadList) Encode(b []byte)          { be.PutUint32(b, c.ThreadID) }

// GetThreadListAck answers GetThreadList. Entries start at +12; at most MaxThreadIDs are sent.
type GetThreadListAck struct {
	ThreadID uint32
	Threads  []ThreadEntry
}

func (a *GetThreadListAck) CommandType() CommandType { return TypeGetThreadListAck }
func (a *GetThreadListAck) Thread() uint32           { return a.ThreadID }
func (a *GetThreadListAck) EncodedSize() int         { return getThreadListAckSize }
func (a *GetThreadListAck) Encode(b []byte) {
	be.PutUint32(b, a.ThreadID)
	ts := a.Threads[:min(len(a.Threads), MaxThreadIDs)]
	be.PutUint32(b[8:], uint32(len(ts)))
	putThreadEntries(b[12:], ts)
}

// putThreadEntries writes thread list entries at b: the thread id, then the info word with the
// commthread bit.
func putThreadEntries(b []byte, ts []ThreadEntry) {
	for i, t := range ts {
		e := b[8*i:]
		be.PutUint32(e, t.TID)
		if t.CommThread {
			be.PutUint32(e[4:], 1<<31)
		}
	}
}

// threadEntries reads n thread list entries at b (which holds them).
func threadEntries(b []byte, n int) []ThreadEntry {
	ts := list[ThreadEntry](n)
	for i := range ts {
		e := b[8*i:]
		ts[i] = ThreadEntry{TID: be.Uint32(e), CommThread: be.Uint32(e[4:])&(1<<31) != 0}
	}
	return ts
}

func decGetThreadListAck(b []byte) (Ack, error) {
	if err := need(TypeGetThreadListAck, b, getThreadListAckSize); err != nil {
		return nil, err
	}
	n := be.Uint32(b[8:])
	if n > MaxThreadIDs {
		return nil, fmt.Errorf("%v: %d threads (limit %d)", TypeGetThreadListAck, n, MaxThreadIDs)
	}
	return &GetThreadListAck{ThreadID: be.Uint32(b), Threads: threadEntries(b[12:], int(n))}, nil
}

// GetAuxVectors reads the process's auxiliary vector.
type GetAuxVectors struct{ ThreadID uint32 }

func (c *GetAuxVectors) CommandType() CommandType { return TypeGetAuxVectors }
func (c *GetAuxVectors) Thread() uint32           { return c.ThreadID }
func (c *GetAuxVectors) EncodedSize() int         { return 8 }
func (c *GetAuxVectors) AckSize() int             { return getAuxVectorsAckSize }
func (c *GetAuxVectors) Encode(b []byte)          { be.PutUint32(b, c.ThreadID) }

// GetAuxVectorsAck answers GetAuxVectors. Words holds the auxv as uint64 words (type, value
// pairs, ending with the AT_NULL pair); at most MaxAuxVecDWords are sent.
type GetAuxVectorsAck struct {
	ThreadID uint32
	Words    []uint64
}

func (a *GetAuxVectorsAck) CommandType() CommandType { return TypeGetAuxVectorsAck }
func (a *GetAuxVectorsAck) Thread() uint32           { return a.ThreadID }
func (a *GetAuxVectorsAck) EncodedSize() int         { return getAuxVectorsAckSize }
func (a *GetAuxVectorsAck) Encode(b []byte) {
	be.PutUint32(b, a.ThreadID)
	w := a.Words[:min(len(a.Words), MaxAuxVecDWords)]
	be.PutUint32(b[8:], uint32(len(w)))
	for i, v := range w {
		be.PutUint64(b[16+8*i:], v)
	}
}

func decGetAuxVectorsAck(b []byte) (Ack, error) {
	if err := need(TypeGetAuxVectorsAck, b, getAuxVectorsAckSize); err != nil {
		return nil, err
	}
	n := be.Uint32(b[8:])
	if n > MaxAuxVecDWords {
		return nil, fmt.Errorf("%v: %d words (limit %d)", TypeGetAuxVectorsAck, n, MaxAuxVecDWords)
	}
	a := &GetAuxVectorsAck{ThreadID: be.Uint32(b), Words: list[uint64](int(n))}
	for i := range a.Words {
		a.Words[i] = be.Uint64(b[16+8*i:])
	}
	return a, nil
}

// GetProcessData reads the process's identity, coordinates and memory layout.
type GetProcessData struct{ ThreadID uint32 }

func (c *GetProcessData) CommandType() CommandType { return TypeGetProcessData }
func (c *GetProcessData) Thread() uint32           { return c.ThreadID }
func (c *GetProcessData) EncodedSize() int         { return 8 }
func (c *GetProcessData) AckSize() int             { return getProcessDataAckSize }
func (c *GetProcessData) Encode(b []byte)          { be.PutUint32(b, c.ThreadID) }

// GetProcessDataAck answers GetProcessData. TGID is the process id libthread_db must use.
type GetProcessDataAck struct {
	ThreadID                                       uint32
	Rank, TGID                                     uint32
	ACoord, BCoord, CCoord, DCoord, ECoord, TCoord uint32
	SharedMemoryStart, SharedMemoryEnd             uint64
	PersistMemoryStart, PersistMemoryEnd           uint64
	HeapStart, HeapEnd, HeapBreak                  uint64
	MmapStart, MmapEnd                             uint64
	JobTime                                        Timeval
}

func (a *GetProcessDataAck) CommandType() CommandType { return TypeGetProcessDataAck }
func (a *GetProcessDataAck) Thread() uint32           { return a.ThreadID }
func (a *GetProcessDataAck) EncodedSize() int         { return getProcessDataAckSize }

func (a *GetProcessDataAck) u32s() [8]*uint32 {
	return [...]*uint32{&a.Rank, &a.TGID, &a.ACoord, &a.BCoord, &a.CCoord, &a.DCoord, &a.ECoord, &a.TCoord}
}

func (a *GetProcessDataAck) u64s() [9]*uint64 {
	return [...]*uint64{&a.SharedMemoryStart, &a.SharedMemoryEnd, &a.PersistMemoryStart,
		&a.PersistMemoryEnd, &a.HeapStart, &a.HeapEnd, &a.HeapBreak, &a.MmapStart, &a.MmapEnd}
}

func (a *GetProcessDataAck) Encode(b []byte) {
	be.PutUint32(b, a.ThreadID)
	for i, p := range a.u32s() {
		be.PutUint32(b[8+4*i:], *p)
	}
	for i, p := range a.u64s() {
		be.PutUint64(b[40+8*i:], *p)
	}
	be.PutUint64(b[112:], uint64(a.JobTime.Sec))
	be.PutUint64(b[120:], uint64(a.JobTime.Usec))
}

func decGetProcessDataAck(b []byte) (Ack, error) {
	if err := need(TypeGetProcessDataAck, b, getProcessDataAckSize); err != nil {
		return nil, err
	}
	a := &GetProcessDataAck{ThreadID: be.Uint32(b)}
	for i, p := range a.u32s() {
		*p = be.Uint32(b[8+4*i:])
	}
	for i, p := range a.u64s() {
		*p = be.Uint64(b[40+8*i:])
	}
	a.JobTime = Timeval{Sec: int64(be.Uint64(b[112:])), Usec: int64(be.Uint64(b[120:]))}
	return a, nil
}

// GetThreadData reads a thread's state and CNK's walk of its stack.
type GetThreadData struct{ ThreadID uint32 }

func (c *GetThreadData) CommandType() CommandType { return TypeGetThreadData }
func (c *GetThreadData) Thread() uint32           { return c.ThreadID }
func (c *GetThreadData) EncodedSize() int         { return 8 }
func (c *GetThreadData) AckSize() int             { return getThreadDataAckSize }
func (c *GetThreadData) Encode(b []byte)          { be.PutUint32(b, c.ThreadID) }

// GetThreadDataAck answers GetThreadData. At most MaxStackFrames frames are sent.
type GetThreadDataAck struct {
	ThreadID                 uint32
	Core, HWThread           int32 // the core and hardware thread running the thread
	State                    ThreadState
	ToolState                ToolState
	SpecState                SpecState
	GuardStart, GuardEnd     uint64
	StackStart, StackCurrent uint64
	Frames                   []StackFrame
}

func (a *GetThreadDataAck) CommandType() CommandType { return TypeGetThreadDataAck }
func (a *GetThreadDataAck) Thread() uint32           { return a.ThreadID }
func (a *GetThreadDataAck) EncodedSize() int         { return getThreadDataAckSize }
func (a *GetThreadDataAck) Encode(b []byte) {
	be.PutUint32(b, a.ThreadID)
	be.PutUint32(b[8:], uint32(a.Core))
	be.PutUint32(b[12:], uint32(a.HWThread))
	be.PutUint32(b[16:], uint32(a.State))
	be.PutUint32(b[20:], uint32(a.ToolState))
	be.PutUint32(b[24:], uint32(a.SpecState))
	be.PutUint64(b[32:], a.GuardStart)
	be.PutUint64(b[40:], a.GuardEnd)
	be.PutUint64(b[48:], a.StackStart)
	be.PutUint64(b[56:], a.StackCurrent)
	fs := a.Frames[:min(len(a.Frames), MaxStackFrames)]
	be.PutUint32(b[64:], uint32(len(fs)))
	for i, f := range fs {
		be.PutUint64(b[72+16*i:], f.FrameAddr)
		be.PutUint64(b[80+16*i:], f.SavedLR)
	}
}

func decGetThreadDataAck(b []byte) (Ack, error) {
	if err := need(TypeGetThreadDataAck, b, getThreadDataAckSize); err != nil {
		return nil, err
	}
	n := be.Uint32(b[64:])
	if n > MaxStackFrames {
		return nil, fmt.Errorf("%v: %d stack frames (limit %d)", TypeGetThreadDataAck, n, MaxStackFrames)
	}
	a := &GetThreadDataAck{
		ThreadID: be.Uint32(b), Core: int32(be.Uint32(b[8:])), HWThread: int32(be.Uint32(b[12:])),
		State: ThreadState(be.Uint32(b[16:])), ToolState: ToolState(be.Uint32(b[20:])),
		SpecState: SpecState(be.Uint32(b[24:])), GuardStart: be.Uint64(b[32:]), GuardEnd: be.Uint64(b[40:]),
		StackStart: be.Uint64(b[48:]), StackCurrent: be.Uint64(b[56:]), Frames: list[StackFrame](int(n)),
	}
	for i := range a.Frames {
		a.Frames[i] = StackFrame{FrameAddr: be.Uint64(b[72+16*i:]), SavedLR: be.Uint64(b[80+16*i:])}
	}
	return a, nil
}

// GetPreferences reads the fast-breakpoint, fast-watchpoint and DAC trap modes.
type GetPreferences struct{ ThreadID uint32 }

func (c *GetPreferences) CommandType() CommandType { return TypeGetPreferences }
func (c *GetPreferences) Thread() uint32           { return c.ThreadID }
func (c *GetPreferences) EncodedSize() int         { return 8 }
func (c *GetPreferences) AckSize() int             { return getPreferencesAckSize }
func (c *GetPreferences) Encode(b []byte)          { be.PutUint32(b, c.ThreadID) }

// GetPreferencesAck answers GetPreferences.
type GetPreferencesAck struct {
	ThreadID       uint32
	BreakpointMode FastBreakMode
	WatchpointMode FastWatchMode
	DACMode        DACTrapMode
}

func (a *GetPreferencesAck) CommandType() CommandType { return TypeGetPreferencesAck }
func (a *GetPreferencesAck) Thread() uint32           { return a.ThreadID }
func (a *GetPreferencesAck) EncodedSize() int         { return getPreferencesAckSize }
func (a *GetPreferencesAck) Encode(b []byte) {
	be.PutUint32(b, a.ThreadID)
	putPrefs(b, a.BreakpointMode, a.WatchpointMode, a.DACMode)
}

func putPrefs(b []byte, bm FastBreakMode, wm FastWatchMode, dm DACTrapMode) {
	be.PutUint32(b[8:], uint32(bm))
	be.PutUint32(b[12:], uint32(wm))
	be.PutUint32(b[16:], uint32(dm))
}

func decGetPreferencesAck(b []byte) (Ack, error) {
	if err := need(TypeGetPreferencesAck, b, getPreferencesAckSize); err != nil {
		return nil, err
	}
	return &GetPreferencesAck{ThreadID: be.Uint32(b), BreakpointMode: FastBreakMode(be.Uint32(b[8:])),
		WatchpointMode: FastWatchMode(be.Uint32(b[12:])), DACMode: DACTrapMode(be.Uint32(b[16:]))}, nil
}

// GetFilenames lists the files of the persistent-memory ramdisk.
type GetFilenames struct{ ThreadID uint32 }

func (c *GetFilenames) CommandType() CommandType { return TypeGetFilenames }
func (c *GetFilenames) Thread() uint32           { return c.ThreadID }
func (c *GetFilenames) EncodedSize() int         { return 8 }
func (c *GetFilenames) AckSize() int             { return getFilenamesAckSize }
func (c *GetFilenames) Encode(b []byte)          { be.PutUint32(b, c.ThreadID) }

// GetFilenamesAck answers GetFilenames. At most MaxPersistPathnames names of at most 127 bytes
// are sent.
type GetFilenamesAck struct {
	ThreadID uint32
	Names    []string
}

func (a *GetFilenamesAck) CommandType() CommandType { return TypeGetFilenamesAck }
func (a *GetFilenamesAck) Thread() uint32           { return a.ThreadID }
func (a *GetFilenamesAck) EncodedSize() int         { return getFilenamesAckSize }
func (a *GetFilenamesAck) Encode(b []byte) {
	be.PutUint32(b, a.ThreadID)
	ns := a.Names[:min(len(a.Names), MaxPersistPathnames)]
	be.PutUint32(b[8:], uint32(len(ns)))
	for i, n := range ns {
		o := 12 + MaxPersistPathnameSize*i
		putString(b[o:o+MaxPersistPathnameSize], n)
	}
}

func decGetFilenamesAck(b []byte) (Ack, error) {
	if err := need(TypeGetFilenamesAck, b, getFilenamesAckSize); err != nil {
		return nil, err
	}
	n := be.Uint32(b[8:])
	if n > MaxPersistPathnames {
		return nil, fmt.Errorf("%v: %d names (limit %d)", TypeGetFilenamesAck, n, MaxPersistPathnames)
	}
	a := &GetFilenamesAck{ThreadID: be.Uint32(b), Names: list[string](int(n))}
	for i := range a.Names {
		o := 12 + MaxPersistPathnameSize*i
		a.Names[i] = pathString(b[o : o+MaxPersistPathnameSize])
	}
	return a, nil
}

// GetFileStatData stats a file of the persistent-memory ramdisk.
type GetFileStatData struct {
	ThreadID uint32
	Pathname string // at most 127 bytes
}

func (c *GetFileStatData) CommandType() CommandType { return TypeGetFileStatData }
func (c *GetFileStatData) Thread() uint32           { return c.ThreadID }
func (c *GetFileStatData) EncodedSize() int         { return getFileStatDataSize }
func (c *GetFileStatData) AckSize() int             { return getFileStatDataAckSize }
func (c *GetFileStatData) Encode(b []byte) {
	be.PutUint32(b, c.ThreadID)
	putString(b[8:8+MaxPersistPathnameSize], c.Pathname)
}
func (c *GetFileStatData) validate() error { return checkPath(c.Pathname) }

func checkPath(p string) error {
	if len(p) >= MaxPersistPathnameSize {
		return fmt.Errorf("cdti: pathname of %d bytes (limit %d)", len(p), MaxPersistPathnameSize-1)
	}
	return nil
}

func decGetFileStatData(b []byte) (Command, error) {
	if err := need(TypeGetFileStatData, b, getFileStatDataSize); err != nil {
		return nil, err
	}
	return &GetFileStatData{ThreadID: be.Uint32(b), Pathname: pathString(b[8 : 8+MaxPersistPathnameSize])}, nil
}

// GetFileStatDataAck answers GetFileStatData.
type GetFileStatDataAck struct {
	ThreadID uint32
	Stat     Stat64
}

func (a *GetFileStatDataAck) CommandType() CommandType { return TypeGetFileStatDataAck }
func (a *GetFileStatDataAck) Thread() uint32           { return a.ThreadID }
func (a *GetFileStatDataAck) EncodedSize() int         { return getFileStatDataAckSize }
func (a *GetFileStatDataAck) Encode(b []byte)          { be.PutUint32(b, a.ThreadID); a.Stat.put(b[8:]) }

func decGetFileStatDataAck(b []byte) (Ack, error) {
	if err := need(TypeGetFileStatDataAck, b, getFileStatDataAckSize); err != nil {
		return nil, err
	}
	a := &GetFileStatDataAck{ThreadID: be.Uint32(b)}
	a.Stat.get(b[8:])
	return a, nil
}

// GetFileContents reads NumBytes bytes at Offset of a file of the persistent-memory ramdisk.
type GetFileContents struct {
	ThreadID uint32
	Pathname string // at most 127 bytes
	Offset   uint64
	NumBytes uint64
}

func (c *GetFileContents) CommandType() CommandType { return TypeGetFileContents }
func (c *GetFileContents) Thread() uint32           { return c.ThreadID }
func (c *GetFileContents) EncodedSize() int         { return getFileContentsSize }
func (c *GetFileContents) AckSize() int {
	return getFileContentsAckSize + int(min(c.NumBytes, MaxFrameSize))
}
func (c *GetFileContents) Encode(b []byte) {
	be.PutUint32(b, c.ThreadID)
	putString(b[8:8+MaxPersistPathnameSize], c.Pathname)
	be.PutUint64(b[136:], c.Offset)
	be.PutUint64(b[144:], c.NumBytes)
}
func (c *GetFileContents) validate() error { return checkPath(c.Pathname) }

func decGetFileContents(b []byte) (Command, error) {
	if err := need(TypeGetFileContents, b, getFileContentsSize); err != nil {
		return nil, err
	}
	return &GetFileContents{ThreadID: be.Uint32(b), Pathname: pathString(b[8 : 8+MaxPersistPathnameSize]),
		Offset: be.Uint64(b[136:]), NumBytes: be.Uint64(b[144:])}, nil
}

// GetFileContentsAck answers GetFileContents: numbytes at +8, data at +16.
type GetFileContentsAck struct {
	ThreadID uint32
	Data     []byte
}

func (a *GetFileContentsAck) CommandType() CommandType { return TypeGetFileContentsAck }
func (a *GetFileContentsAck) Thread() uint32           { return a.ThreadID }
func (a *GetFileContentsAck) EncodedSize() int         { return getFileContentsAckSize + len(a.Data) }
func (a *GetFileContentsAck) Encode(b []byte) {
	be.PutUint32(b, a.ThreadID)
	be.PutUint64(b[8:], uint64(len(a.Data)))
	copy(b[16:], a.Data)
}

func decGetFileContentsAck(b []byte) (Ack, error) {
	if err := need(TypeGetFileContentsAck, b, getFileContentsAckSize); err != nil {
		return nil, err
	}
	n := be.Uint64(b[8:])
	if n > uint64(len(b)-16) {
		return nil, fmt.Errorf("%v: numbytes %d but payload holds %d", TypeGetFileContentsAck, n, len(b)-16)
	}
	return &GetFileContentsAck{ThreadID: be.Uint32(b), Data: b[16 : 16+n]}, nil
}

func init() {
	q := func(t CommandType, name string, dec func([]byte) (Command, error), decAck func([]byte) (Ack, error)) {
		register(t, name, MsgQuery, false, dec, decAck)
	}
	q(TypeGetSpecialRegs, "GetSpecialRegs",
		threadDecoder(TypeGetSpecialRegs, func(t uint32) Command { return &GetSpecialRegs{t} }), decGetSpecialRegsAck)
	q(TypeGetGeneralRegs, "GetGeneralRegs",
		threadDecoder(TypeGetGeneralRegs, func(t uint32) Command { return &GetGeneralRegs{t} }), decGetGeneralRegsAck)
	q(TypeGetFloatRegs, "GetFloatRegs",
		threadDecoder(TypeGetFloatRegs, func(t uint32) Command { return &GetFloatRegs{t} }), decGetFloatRegsAck)
	q(TypeGetDebugRegs, "GetDebugRegs",
		threadDecoder(TypeGetDebugRegs, func(t uint32) Command { return &GetDebugRegs{t} }), decGetDebugRegsAck)
	q(TypeGetMemory, "GetMemory", decGetMemory, decGetMemoryAck)
	q(TypeGetThreadList, "GetThreadList",
		threadDecoder(TypeGetThreadList, func(t uint32) Command { return &GetThreadList{t} }), decGetThreadListAck)
	q(TypeGetAuxVectors, "GetAuxVectors",
		threadDecoder(TypeGetAuxVectors, func(t uint32) Command { return &GetAuxVectors{t} }), decGetAuxVectorsAck)
	q(TypeGetProcessData, "GetProcessData",
		threadDecoder(TypeGetProcessData, func(t uint32) Command { return &GetProcessData{t} }), decGetProcessDataAck)
	q(TypeGetThreadData, "GetThreadData",
		threadDecoder(TypeGetThreadData, func(t uint32) Command { return &GetThreadData{t} }), decGetThreadDataAck)
	q(TypeGetPreferences, "GetPreferences",
		threadDecoder(TypeGetPreferences, func(t uint32) Command { return &GetPreferences{t} }), decGetPreferencesAck)
	q(TypeGetFilenames, "GetFilenames",
		threadDecoder(TypeGetFilenames, func(t uint32) Command { return &GetFilenames{t} }), decGetFilenamesAck)
	q(TypeGetFileStatData, "GetFileStatData", decGetFileStatData, decGetFileStatDataAck)
	q(TypeGetFileContents, "GetFileContents", decGetFileContents, decGetFileContentsAck)
}

// pathString reads a char[MaxPersistPathnameSize] pathname. Its last byte is always taken as the
// terminator, as a bounded C copy would, so a field without a NUL yields at most 127 bytes and
// decodes to what the encoder writes back.
func pathString(b []byte) string { return cstring(b[:len(b)-1]) }
