package cdti

import "fmt"

// Update command types and their ack types (command type + 1). Valid only inside an Update.
// Type 231 and ack type 232 were never assigned.
const (
	TypeSetGeneralReg            CommandType = 201
	TypeSetGeneralRegAck         CommandType = 202
	TypeSetFloatReg              CommandType = 203
	TypeSetFloatRegAck           CommandType = 204
	TypeSetDebugReg              CommandType = 205
	TypeSetDebugRegAck           CommandType = 206
	TypeSetMemory                CommandType = 207
	TypeSetMemoryAck             CommandType = 208
	TypeHoldThread               CommandType = 209
	TypeHoldThreadAck            CommandType = 210
	TypeReleaseThread            CommandType = 211
	TypeReleaseThreadAck         CommandType = 212
	TypeInstallTrapHandler       CommandType = 213
	TypeInstallTrapHandlerAck    CommandType = 214
	TypeAllocateMemory           CommandType = 215
	TypeAllocateMemoryAck        CommandType = 216
	TypeSendSignal               CommandType = 217
	TypeSendSignalAck            CommandType = 218
	TypeContinueProcess          CommandType = 219 // action
	TypeContinueProcessAck       CommandType = 220
	TypeStepThread               CommandType = 221 // action
	TypeStepThreadAck            CommandType = 222
	TypeSetBreakpoint            CommandType = 223
	TypeSetBreakpointAck         CommandType = 224
	TypeResetBreakpoint          CommandType = 225
	TypeResetBreakpointAck       CommandType = 226
	TypeSetWatchpoint            CommandType = 227
	TypeSetWatchpointAck         CommandType = 228
	TypeResetWatchpoint          CommandType = 229
	TypeResetWatchpointAck       CommandType = 230
	TypeRemoveTrapHandler        CommandType = 233
	TypeRemoveTrapHandlerAck     CommandType = 234
	TypeSetPreferences           CommandType = 235
	TypeSetPreferencesAck        CommandType = 236
	TypeFreeMemory               CommandType = 237
	TypeFreeMemoryAck            CommandType = 238
	TypeSetSpecialReg            CommandType = 239
	TypeSetSpecialRegAck         CommandType = 240
	TypeSetGeneralRegs           CommandType = 241
	TypeSetGeneralRegsAck        CommandType = 242
	TypeSetFloatRegs             CommandType = 243
	TypeSetFloatRegsAck          CommandType = 244
	TypeSetDebugRegs             CommandType = 245
	TypeSetDebugRegsAck          CommandType = 246
	TypeSetSpecialRegs           CommandType = 247
	TypeSetSpecialRegsAck        CommandType = 248
	TypeReleaseControl           CommandType = 249 // action
	TypeReleaseControlAck        CommandType = 250
	TypeSetContinuationSignal    CommandType = 251
	TypeSetContinuationSignalAck CommandType = 252
	TypeSendSignalToProcess      CommandType = 253 // v6
	TypeSendSignalToProcessAck   CommandType = 254
)

const (
	setMemorySize    = 32 // sizeof(SetMemoryCmd); data starts at +28, the descriptor length is 32 + n
	setMemoryAckSize = 24
	watchAckSize     = 40
)

// SetGeneralReg writes one general-purpose register.
type SetGeneralReg struct {
	ThreadID uint32
	Reg      GeneralReg
	Value    uint64
}

func (c *SetGeneralReg) CommandType() CommandType { return TypeSetGeneralReg }
func (c *SetGeneralReg) Thread() uint32           { return c.ThreadID }
func (c *SetGeneralReg) EncodedSize() int         { return 24 }
func (c *SetGeneralReg) AckSize() int             { return 8 }
func (c *SetGeneralReg) Encode(b []byte)          { putRegValue(b, c.ThreadID, int32(c.Reg), c.Value) }

func putRegValue(b []byte, tid uint32, sel int32, v uint64) {
	be.PutUint32(b, tid)
	be.PutUint32(b[8:], uint32(sel))
	be.PutUint64(b[16:], v)
}

func decSetGeneralReg(b []byte) (Command, error) {
	if err := need(TypeSetGeneralReg, b, 24); err != nil {
		return nil, err
	}
	return &SetGeneralReg{ThreadID: be.Uint32(b), Reg: GeneralReg(be.Uint32(b[8:])), Value: be.Uint64(b[16:])}, nil
}

// SetFloatReg writes one QPX floating-point register.
type SetFloatReg struct {
	ThreadID uint32
	Reg      FloatReg
	Value    QPX
}

func (c *SetFloatReg) CommandType() CommandType { return TypeSetFloatReg }
func (c *SetFloatReg) Thread() uint32           { return c.ThreadID }
func (c *SetFloatReg) EncodedSize() int         { return 48 }
func (c *SetFloatReg) AckSize() int             { return 8 }
func (c *SetFloatReg) Encode(b []byte) {
	be.PutUint32(b, c.ThreadID)
	be.PutUint32(b[8:], uint32(c.Reg))
	c.Value.put(b[16:])
}

func decSetFloatReg(b []byte) (Command, error) {
	if err := need(TypeSetFloatReg, b, 48); err != nil {
		return nil, err
	}
	c := &SetFloatReg{ThreadID: be.Uint32(b), Reg: FloatReg(be.Uint32(b[8:]))}
	c.Value.get(b[16:])
	return c, nil
}

// SetDebugReg writes one debug register.
type SetDebugReg struct {
	ThreadID uint32
	Reg      DebugReg
	Value    uint64
}

func (c *SetDebugReg) CommandType() CommandType { return TypeSetDebugReg }
func (c *SetDebugReg) Thread() uint32           { return c.ThreadID }
func (c *SetDebugReg) EncodedSize() int         { return 24 }
func (c *SetDebugReg) AckSize() int             { return 8 }
func (c *SetDebugReg) Encode(b []byte)          { putRegValue(b, c.ThreadID, int32(c.Reg), c.Value) }

func decSetDebugReg(b []byte) (Command, error) {
	if err := need(TypeSetDebugReg, b, 24); err != nil {
		return nil, err
	}
	return &SetDebugReg{ThreadID: be.Uint32(b), Reg: DebugReg(be.Uint32(b[8:])), Value: be.Uint64(b[16:])}, nil
}

// SetMemory writes Data (at most MaxMemorySize bytes) at Addr. The length field is len(Data);
// the data starts at +28 and the descriptor length is 32 + len(Data), as Dyninst and gdbtool
// send it. Larger writes must be split: see SplitSetMemory and Client.WriteMemory.
type SetMemory struct {
	ThreadID     uint32
	Addr         uint64
	SpecAccess   SpecAccess
	SharedMemory SharedMemoryAccess
	Data         []byte
}

func (c *SetMemory) CommandType() CommandType { return TypeSetMemory }
func (c *SetMemory) Thread() uint32           { return c.ThreadID }
func (c *SetMemory) EncodedSize() int         { return setMemorySize + len(c.Data) }
func (c *SetMemory) AckSize() int             { return setMemoryAckSize }
func (c *SetMemory) Encode(b []byte) {
	be.PutUint32(b, c.ThreadID)
	be.PutUint64(b[8:], c.Addr)
	be.PutUint32(b[16:], uint32(len(c.Data)))
	be.PutUint32(b[20:], uint32(c.SpecAccess))
	be.PutUint32(b[24:], uint32(c.SharedMemory))
	copy(b[28:], c.Data)
}

func (c *SetMemory) validate() error {
	if len(c.Data) > MaxMemorySize {
		return fmt.Errorf("%w: SetMemory of %d bytes (limit %d; split it)", ErrMemoryTooLarge, len(c.Data), MaxMemorySize)
	}
	return nil
}

func decSetMemory(b []byte) (Command, error) {
	if err := need(TypeSetMemory, b, 28); err != nil {
		return nil, err
	}
	n := be.Uint32(b[16:])
	if uint64(n) > uint64(len(b)-28) {
		return nil, fmt.Errorf("%v: length %d but payload holds %d data bytes", TypeSetMemory, n, len(b)-28)
	}
	return &SetMemory{ThreadID: be.Uint32(b), Addr: be.Uint64(b[8:]), SpecAccess: SpecAccess(be.Uint32(b[20:])),
		SharedMemory: SharedMemoryAccess(be.Uint32(b[24:])), Data: b[28 : 28+n]}, nil
}

// SetMemoryAck answers SetMemory.
type SetMemoryAck struct {
	ThreadID uint32
	Addr     uint64
	Length   uint32
}

func (a *SetMemoryAck) CommandType() CommandType { return TypeSetMemoryAck }
func (a *SetMemoryAck) Thread() uint32           { return a.ThreadID }
func (a *SetMemoryAck) EncodedSize() int         { return setMemoryAckSize }
func (a *SetMemoryAck) Encode(b []byte) {
	be.PutUint32(b, a.ThreadID)
	be.PutUint64(b[8:], a.Addr)
	be.PutUint32(b[16:], a.Length)
}

func decSetMemoryAck(b []byte) (Ack, error) {
	if err := need(TypeSetMemoryAck, b, setMemoryAckSize); err != nil {
		return nil, err
	}
	return &SetMemoryAck{ThreadID: be.Uint32(b), Addr: be.Uint64(b[8:]), Length: be.Uint32(b[16:])}, nil
}

// HoldThread suspends one thread until ReleaseThread.
type HoldThread struct{ ThreadID uint32 }

func (c *HoldThread) CommandType() CommandType { return TypeHoldThread }
func (c *HoldThread) Thread() uint32           { return c.ThreadID }
func (c *HoldThread) EncodedSize() int         { return 8 }
func (c *HoldThread) AckSize() int             { return 8 }
func (c *HoldThread) Encode(b []byte)          { be.PutUint32(b, c.ThreadID) }

// ReleaseThread resumes a thread suspended by HoldThread.
type ReleaseThread struct{ ThreadID uint32 }

func (c *ReleaseThread) CommandType() CommandType { return TypeReleaseThread }
func (c *ReleaseThread) Thread() uint32           { return c.ThreadID }
func (c *ReleaseThread) EncodedSize() int         { return 8 }
func (c *ReleaseThread) AckSize() int             { return 8 }
func (c *ReleaseThread) Encode(b []byte)          { be.PutUint32(b, c.ThreadID) }

// InstallTrapHandler installs an in-process SIGTRAP handler for fast breakpoints. On BG/Q's
// ELFv1 ABI, Handler is a function-descriptor address.
type InstallTrapHandler struct {
	ThreadID uint32
	Handler  uint64
}

func (c *InstallTrapHandler) CommandType() CommandType { return TypeInstallTrapHandler }
func (c *InstallTrapHandler) Thread() uint32           { return c.ThreadID }
func (c *InstallTrapHandler) EncodedSize() int         { return 16 }
func (c *InstallTrapHandler) AckSize() int             { return 8 }
func (c *InstallTrapHandler) Encode(b []byte) {
	be.PutUint32(b, c.ThreadID)
	be.PutUint64(b[8:], c.Handler)
}

// AllocateMemory allocates Size bytes in the process.
type AllocateMemory struct {
	ThreadID uint32
	Size     uint64
}

func (c *AllocateMemory) CommandType() CommandType { return TypeAllocateMemory }
func (c *AllocateMemory) Thread() uint32           { return c.ThreadID }
func (c *AllocateMemory) EncodedSize() int         { return 16 }
func (c *AllocateMemory) AckSize() int             { return 16 }
func (c *AllocateMemory) Encode(b []byte)          { be.PutUint32(b, c.ThreadID); be.PutUint64(b[8:], c.Size) }

// AllocateMemoryAck answers AllocateMemory with the address of the allocation.
type AllocateMemoryAck struct {
	ThreadID uint32
	Addr     uint64
}

func (a *AllocateMemoryAck) CommandType() CommandType { return TypeAllocateMemoryAck }
func (a *AllocateMemoryAck) Thread() uint32           { return a.ThreadID }
func (a *AllocateMemoryAck) EncodedSize() int         { return 16 }
func (a *AllocateMemoryAck) Encode(b []byte) {
	be.PutUint32(b, a.ThreadID)
	be.PutUint64(b[8:], a.Addr)
}

// SendSignal sends a signal to one thread.
type SendSignal struct {
	ThreadID uint32
	Signal   uint32
}

func (c *SendSignal) CommandType() CommandType { return TypeSendSignal }
func (c *SendSignal) Thread() uint32           { return c.ThreadID }
func (c *SendSignal) EncodedSize() int         { return 16 }
func (c *SendSignal) AckSize() int             { return 8 }
func (c *SendSignal) Encode(b []byte)          { be.PutUint32(b, c.ThreadID); be.PutUint32(b[8:], c.Signal) }

// ContinueProcess resumes the process. It must name the notified thread (0 does). Action command.
type ContinueProcess struct{ ThreadID uint32 }

func (c *ContinueProcess) CommandType() CommandType { return TypeContinueProcess }
func (c *ContinueProcess) Thread() uint32           { return c.ThreadID }
func (c *ContinueProcess) EncodedSize() int         { return 8 }
func (c *ContinueProcess) AckSize() int             { return 8 }
func (c *ContinueProcess) Encode(b []byte)          { be.PutUint32(b, c.ThreadID) }

// StepThread single-steps one suspended thread; completion arrives as a Notify with reason
// SignalStepComplete. Action command.
type StepThread struct{ ThreadID uint32 }

func (c *StepThread) CommandType() CommandType { return TypeStepThread }
func (c *StepThread) Thread() uint32           { return c.ThreadID }
func (c *StepThread) EncodedSize() int         { return 8 }
func (c *StepThread) AckSize() int             { return 8 }
func (c *StepThread) Encode(b []byte)          { be.PutUint32(b, c.ThreadID) }

// SetBreakpoint plants a trap at Addr. On Power, Instruction is the trap word (CNK's default is
// 0x7d821008); other targets use the convention of the package documentation.
type SetBreakpoint struct {
	ThreadID    uint32
	Addr        uint64
	Instruction uint32
}

func (c *SetBreakpoint) CommandType() CommandType { return TypeSetBreakpoint }
func (c *SetBreakpoint) Thread() uint32           { return c.ThreadID }
func (c *SetBreakpoint) EncodedSize() int         { return 24 }
func (c *SetBreakpoint) AckSize() int             { return 8 }
func (c *SetBreakpoint) Encode(b []byte)          { putBreak(b, c.ThreadID, c.Addr, c.Instruction) }

func putBreak(b []byte, tid uint32, addr uint64, insn uint32) {
	be.PutUint32(b, tid)
	be.PutUint64(b[8:], addr)
	be.PutUint32(b[16:], insn)
}

func decSetBreakpoint(b []byte) (Command, error) {
	if err := need(TypeSetBreakpoint, b, 24); err != nil {
		return nil, err
	}
	return &SetBreakpoint{ThreadID: be.Uint32(b), Addr: be.Uint64(b[8:]), Instruction: be.Uint32(b[16:])}, nil
}

// ResetBreakpoint removes a trap at Addr, restoring Instruction, the original instruction
// (which the tool supplies: CNK keeps no copy).
type ResetBreakpoint struct {
	ThreadID    uint32
	Addr        uint64
	Instruction uint32
}

func (c *ResetBreakpoint) CommandType() CommandType { return TypeResetBreakpoint }
func (c *ResetBreakpoint) Thread() uint32           { return c.ThreadID }
func (c *ResetBreakpoint) EncodedSize() int         { return 24 }
func (c *ResetBreakpoint) AckSize() int             { return 8 }
func (c *ResetBreakpoint) Encode(b []byte)          { putBreak(b, c.ThreadID, c.Addr, c.Instruction) }

func decResetBreakpoint(b []byte) (Command, error) {
	if err := need(TypeResetBreakpoint, b, 24); err != nil {
		return nil, err
	}
	return &ResetBreakpoint{ThreadID: be.Uint32(b), Addr: be.Uint64(b[8:]), Instruction: be.Uint32(b[16:])}, nil
}

// SetWatchpoint arms a hardware watchpoint. Length must be a nonzero power of two and Addr
// aligned to it.
type SetWatchpoint struct {
	ThreadID uint32
	Addr     uint64
	Length   uint32
	Type     WatchType
}

func (c *SetWatchpoint) CommandType() CommandType { return TypeSetWatchpoint }
func (c *SetWatchpoint) Thread() uint32           { return c.ThreadID }
func (c *SetWatchpoint) EncodedSize() int         { return 24 }
func (c *SetWatchpoint) AckSize() int             { return watchAckSize }
func (c *SetWatchpoint) Encode(b []byte) {
	be.PutUint32(b, c.ThreadID)
	be.PutUint64(b[8:], c.Addr)
	be.PutUint32(b[16:], c.Length)
	be.PutUint32(b[20:], uint32(c.Type))
}

func decSetWatchpoint(b []byte) (Command, error) {
	if err := need(TypeSetWatchpoint, b, 24); err != nil {
		return nil, err
	}
	return &SetWatchpoint{ThreadID: be.Uint32(b), Addr: be.Uint64(b[8:]), Length: be.Uint32(b[16:]),
		Type: WatchType(be.Uint32(b[20:]))}, nil
}

// SetWatchpointAck answers SetWatchpoint with the thread's two DAC pairs after the command.
type SetWatchpointAck struct {
	ThreadID uint32
	Watch    [2]WatchEntry
}

func (a *SetWatchpointAck) CommandType() CommandType { return TypeSetWatchpointAck }
func (a *SetWatchpointAck) Thread() uint32           { return a.ThreadID }
func (a *SetWatchpointAck) EncodedSize() int         { return watchAckSize }
func (a *SetWatchpointAck) Encode(b []byte)          { putWatch(b, a.ThreadID, &a.Watch) }

func putWatch(b []byte, tid uint32, w *[2]WatchEntry) {
	be.PutUint32(b, tid)
	w[0].put(b[8:])
	w[1].put(b[24:])
}

func decWatchAck(t CommandType, b []byte) (uint32, [2]WatchEntry, error) {
	var w [2]WatchEntry
	if err := need(t, b, watchAckSize); err != nil {
		return 0, w, err
	}
	w[0].get(b[8:])
	w[1].get(b[24:])
	return be.Uint32(b), w, nil
}

func decSetWatchpointAck(b []byte) (Ack, error) {
	tid, w, err := decWatchAck(TypeSetWatchpointAck, b)
	if err != nil {
		return nil, err
	}
	return &SetWatchpointAck{ThreadID: tid, Watch: w}, nil
}

// ResetWatchpoint disarms the watchpoint at Addr.
type ResetWatchpoint struct {
	ThreadID uint32
	Addr     uint64
}

func (c *ResetWatchpoint) CommandType() CommandType { return TypeResetWatchpoint }
func (c *ResetWatchpoint) Thread() uint32           { return c.ThreadID }
func (c *ResetWatchpoint) EncodedSize() int         { return 16 }
func (c *ResetWatchpoint) AckSize() int             { return watchAckSize }
func (c *ResetWatchpoint) Encode(b []byte)          { be.PutUint32(b, c.ThreadID); be.PutUint64(b[8:], c.Addr) }

// ResetWatchpointAck answers ResetWatchpoint with the thread's two DAC pairs after the command.
type ResetWatchpointAck struct {
	ThreadID uint32
	Watch    [2]WatchEntry
}

func (a *ResetWatchpointAck) CommandType() CommandType { return TypeResetWatchpointAck }
func (a *ResetWatchpointAck) Thread() uint32           { return a.ThreadID }
func (a *ResetWatchpointAck) EncodedSize() int         { return watchAckSize }
func (a *ResetWatchpointAck) Encode(b []byte)          { putWatch(b, a.ThreadID, &a.Watch) }

func decResetWatchpointAck(b []byte) (Ack, error) {
	tid, w, err := decWatchAck(TypeResetWatchpointAck, b)
	if err != nil {
		return nil, err
	}
	return &ResetWatchpointAck{ThreadID: tid, Watch: w}, nil
}

// RemoveTrapHandler removes the handler installed by InstallTrapHandler.
type RemoveTrapHandler struct{ ThreadID uint32 }

func (c *RemoveTrapHandler) CommandType() CommandType { return TypeRemoveTrapHandler }
func (c *RemoveTrapHandler) Thread() uint32           { return c.ThreadID }
func (c *RemoveTrapHandler) EncodedSize() int         { return 8 }
func (c *RemoveTrapHandler) AckSize() int             { return 8 }
func (c *RemoveTrapHandler) Encode(b []byte)          { be.PutUint32(b, c.ThreadID) }

// SetPreferences sets the fast-breakpoint, fast-watchpoint and DAC trap modes.
type SetPreferences struct {
	ThreadID       uint32
	BreakpointMode FastBreakMode
	WatchpointMode FastWatchMode
	DACMode        DACTrapMode
}

func (c *SetPreferences) CommandType() CommandType { return TypeSetPreferences }
func (c *SetPreferences) Thread() uint32           { return c.ThreadID }
func (c *SetPreferences) EncodedSize() int         { return 24 }
func (c *SetPreferences) AckSize() int             { return 8 }
func (c *SetPreferences) Encode(b []byte) {
	be.PutUint32(b, c.ThreadID)
	putPrefs(b, c.BreakpointMode, c.WatchpointMode, c.DACMode)
}

func decSetPreferences(b []byte) (Command, error) {
	if err := need(TypeSetPreferences, b, 24); err != nil {
		return nil, err
	}
	return &SetPreferences{ThreadID: be.Uint32(b), BreakpointMode: FastBreakMode(be.Uint32(b[8:])),
		WatchpointMode: FastWatchMode(be.Uint32(b[12:])), DACMode: DACTrapMode(be.Uint32(b[16:]))}, nil
}

// FreeMemory frees an allocation made by AllocateMemory.
type FreeMemory struct {
	ThreadID uint32
	Addr     uint64
	Size     uint64
}

func (c *FreeMemory) CommandType() CommandType { return TypeFreeMemory }
func (c *FreeMemory) Thread() uint32           { return c.ThreadID }
func (c *FreeMemory) EncodedSize() int         { return 24 }
func (c *FreeMemory) AckSize() int             { return 8 }
func (c *FreeMemory) Encode(b []byte) {
	be.PutUint32(b, c.ThreadID)
	be.PutUint64(b[8:], c.Addr)
	be.PutUint64(b[16:], c.Size)
}

func decFreeMemory(b []byte) (Command, error) {
	if err := need(TypeFreeMemory, b, 24); err != nil {
		return nil, err
	}
	return &FreeMemory{ThreadID: be.Uint32(b), Addr: be.Uint64(b[8:]), Size: be.Uint64(b[16:])}, nil
}

// SetSpecialReg writes one special register.
type SetSpecialReg struct {
	ThreadID uint32
	Reg      SpecialReg
	Value    uint64
}

func (c *SetSpecialReg) CommandType() CommandType { return TypeSetSpecialReg }
func (c *SetSpecialReg) Thread() uint32           { return c.ThreadID }
func (c *SetSpecialReg) EncodedSize() int         { return 24 }
func (c *SetSpecialReg) AckSize() int             { return 8 }
func (c *SetSpecialReg) Encode(b []byte)          { putRegValue(b, c.ThreadID, int32(c.Reg), c.Value) }

func decSetSpecialReg(b []byte) (Command, error) {
	if err := need(TypeSetSpecialReg, b, 24); err != nil {
		return nil, err
	}
	return &SetSpecialReg{ThreadID: be.Uint32(b), Reg: SpecialReg(be.Uint32(b[8:])), Value: be.Uint64(b[16:])}, nil
}

// SetGeneralRegs writes all 32 general-purpose registers.
type SetGeneralRegs struct {
	ThreadID uint32
	GPR      [NumGPRegs]uint64
}

func (c *SetGeneralRegs) CommandType() CommandType { return TypeSetGeneralRegs }
func (c *SetGeneralRegs) Thread() uint32           { return c.ThreadID }
func (c *SetGeneralRegs) EncodedSize() int         { return 264 }
func (c *SetGeneralRegs) AckSize() int             { return 8 }
func (c *SetGeneralRegs) Encode(b []byte) {
	be.PutUint32(b, c.ThreadID)
	for i, v := range c.GPR {
		be.PutUint64(b[8+8*i:], v)
	}
}

func decSetGeneralRegs(b []byte) (Command, error) {
	if err := need(TypeSetGeneralRegs, b, 264); err != nil {
		return nil, err
	}
	c := &SetGeneralRegs{ThreadID: be.Uint32(b)}
	for i := range c.GPR {
		c.GPR[i] = be.Uint64(b[8+8*i:])
	}
	return c, nil
}

// SetFloatRegs writes all 32 QPX floating-point registers.
type SetFloatRegs struct {
	ThreadID uint32
	FPR      [NumFPRegs]QPX
}

func (c *SetFloatRegs) CommandType() CommandType { return TypeSetFloatRegs }
func (c *SetFloatRegs) Thread() uint32           { return c.ThreadID }
func (c *SetFloatRegs) EncodedSize() int         { return 1032 }
func (c *SetFloatRegs) AckSize() int             { return 8 }
func (c *SetFloatRegs) Encode(b []byte) {
	be.PutUint32(b, c.ThreadID)
	for i := range c.FPR {
		c.FPR[i].put(b[8+qpxSize*i:])
	}
}

func decSetFloatRegs(b []byte) (Command, error) {
	if err := need(TypeSetFloatRegs, b, 1032); err != nil {
		return nil, err
	}
	c := &SetFloatRegs{ThreadID: be.Uint32(b)}
	for i := range c.FPR {
		c.FPR[i].get(b[8+qpxSize*i:])
	}
	return c, nil
}

// SetDebugRegs writes all debug registers.
type SetDebugRegs struct {
	ThreadID uint32
	Regs     DebugRegs
}

func (c *SetDebugRegs) CommandType() CommandType { return TypeSetDebugRegs }
func (c *SetDebugRegs) Thread() uint32           { return c.ThreadID }
func (c *SetDebugRegs) EncodedSize() int         { return 8 + debugRegsSize }
func (c *SetDebugRegs) AckSize() int             { return 8 }
func (c *SetDebugRegs) Encode(b []byte)          { be.PutUint32(b, c.ThreadID); c.Regs.put(b[8:]) }

func decSetDebugRegs(b []byte) (Command, error) {
	if err := need(TypeSetDebugRegs, b, 8+debugRegsSize); err != nil {
		return nil, err
	}
	c := &SetDebugRegs{ThreadID: be.Uint32(b)}
	c.Regs.get(b[8:])
	return c, nil
}

// SetSpecialRegs writes all special registers.
type SetSpecialRegs struct {
	ThreadID uint32
	Regs     SpecialRegs
}

func (c *SetSpecialRegs) CommandType() CommandType { return TypeSetSpecialRegs }
func (c *SetSpecialRegs) Thread() uint32           { return c.ThreadID }
func (c *SetSpecialRegs) EncodedSize() int         { return 8 + specialRegsSize }
func (c *SetSpecialRegs) AckSize() int             { return 8 }
func (c *SetSpecialRegs) Encode(b []byte)          { be.PutUint32(b, c.ThreadID); c.Regs.put(b[8:]) }

func decSetSpecialRegs(b []byte) (Command, error) {
	if err := need(TypeSetSpecialRegs, b, 8+specialRegsSize); err != nil {
		return nil, err
	}
	c := &SetSpecialRegs{ThreadID: be.Uint32(b)}
	c.Regs.get(b[8:])
	return c, nil
}

// ReleaseControl gives up control authority. Action command.
type ReleaseControl struct {
	ThreadID uint32
	Notify   ReleaseNotify
}

func (c *ReleaseControl) CommandType() CommandType { return TypeReleaseControl }
func (c *ReleaseControl) Thread() uint32           { return c.ThreadID }
func (c *ReleaseControl) EncodedSize() int         { return 16 }
func (c *ReleaseControl) AckSize() int             { return 8 }
func (c *ReleaseControl) Encode(b []byte) {
	be.PutUint32(b, c.ThreadID)
	be.PutUint32(b[8:], uint32(c.Notify))
}

// SetContinuationSignal replaces the signal delivered when the notified thread resumes (0: none).
type SetContinuationSignal struct {
	ThreadID uint32
	Signal   uint32
}

func (c *SetContinuationSignal) CommandType() CommandType { return TypeSetContinuationSignal }
func (c *SetContinuationSignal) Thread() uint32           { return c.ThreadID }
func (c *SetContinuationSignal) EncodedSize() int         { return 16 }
func (c *SetContinuationSignal) AckSize() int             { return 8 }
func (c *SetContinuationSignal) Encode(b []byte) {
	be.PutUint32(b, c.ThreadID)
	be.PutUint32(b[8:], c.Signal)
}

// SendSignalToProcess sends a signal to the process (v6).
type SendSignalToProcess struct {
	ThreadID uint32
	Signal   uint32
}

func (c *SendSignalToProcess) CommandType() CommandType { return TypeSendSignalToProcess }
func (c *SendSignalToProcess) Thread() uint32           { return c.ThreadID }
func (c *SendSignalToProcess) EncodedSize() int         { return 16 }
func (c *SendSignalToProcess) AckSize() int             { return 8 }
func (c *SendSignalToProcess) Encode(b []byte) {
	be.PutUint32(b, c.ThreadID)
	be.PutUint32(b[8:], c.Signal)
}

// decTidU32 and decTidU64 build decoders of 16-byte commands: threadID and one field at +8.
func decTidU32(t CommandType, mk func(tid, v uint32) Command) func([]byte) (Command, error) {
	return func(b []byte) (Command, error) {
		if err := need(t, b, 16); err != nil {
			return nil, err
		}
		return mk(be.Uint32(b), be.Uint32(b[8:])), nil
	}
}

func decTidU64[T any](t CommandType, mk func(tid uint32, v uint64) T) func([]byte) (T, error) {
	return func(b []byte) (T, error) {
		if err := need(t, b, 16); err != nil {
			var zero T
			return zero, err
		}
		return mk(be.Uint32(b), be.Uint64(b[8:])), nil
	}
}

func init() {
	u := func(t CommandType, name string, dec func([]byte) (Command, error), decAck func([]byte) (Ack, error)) {
		register(t, name, MsgUpdate, false, dec, decAck)
	}
	tid := func(t CommandType, mk func(uint32) Command) func([]byte) (Command, error) {
		return threadDecoder(t, mk)
	}
	u(TypeSetGeneralReg, "SetGeneralReg", decSetGeneralReg, decSetGeneralRegAck)
	u(TypeSetFloatReg, "SetFloatReg", decSetFloatReg, decSetFloatRegAck)
	u(TypeSetDebugReg, "SetDebugReg", decSetDebugReg, decSetDebugRegAck)
	u(TypeSetMemory, "SetMemory", decSetMemory, decSetMemoryAck)
	u(TypeHoldThread, "HoldThread", tid(TypeHoldThread, func(t uint32) Command { return &HoldThread{t} }), decHoldThreadAck)
	u(TypeReleaseThread, "ReleaseThread",
		tid(TypeReleaseThread, func(t uint32) Command { return &ReleaseThread{t} }), decReleaseThreadAck)
	u(TypeInstallTrapHandler, "InstallTrapHandler", decTidU64(TypeInstallTrapHandler,
		func(t uint32, v uint64) Command { return &InstallTrapHandler{t, v} }), decInstallTrapHandlerAck)
	u(TypeAllocateMemory, "AllocateMemory", decTidU64(TypeAllocateMemory,
		func(t uint32, v uint64) Command { return &AllocateMemory{t, v} }),
		decTidU64(TypeAllocateMemoryAck, func(t uint32, v uint64) Ack { return &AllocateMemoryAck{t, v} }))
	u(TypeSendSignal, "SendSignal", decTidU32(TypeSendSignal,
		func(t, v uint32) Command { return &SendSignal{t, v} }), decSendSignalAck)
	u(TypeContinueProcess, "ContinueProcess",
		tid(TypeContinueProcess, func(t uint32) Command { return &ContinueProcess{t} }), decContinueProcessAck)
	u(TypeStepThread, "StepThread", tid(TypeStepThread, func(t uint32) Command { return &StepThread{t} }), decStepThreadAck)
	u(TypeSetBreakpoint, "SetBreakpoint", decSetBreakpoint, decSetBreakpointAck)
	u(TypeResetBreakpoint, "ResetBreakpoint", decResetBreakpoint, decResetBreakpointAck)
	u(TypeSetWatchpoint, "SetWatchpoint", decSetWatchpoint, decSetWatchpointAck)
	u(TypeResetWatchpoint, "ResetWatchpoint", decTidU64(TypeResetWatchpoint,
		func(t uint32, v uint64) Command { return &ResetWatchpoint{t, v} }), decResetWatchpointAck)
	u(TypeRemoveTrapHandler, "RemoveTrapHandler",
		tid(TypeRemoveTrapHandler, func(t uint32) Command { return &RemoveTrapHandler{t} }), decRemoveTrapHandlerAck)
	u(TypeSetPreferences, "SetPreferences", decSetPreferences, decSetPreferencesAck)
	u(TypeFreeMemory, "FreeMemory", decFreeMemory, decFreeMemoryAck)
	u(TypeSetSpecialReg, "SetSpecialReg", decSetSpecialReg, decSetSpecialRegAck)
	u(TypeSetGeneralRegs, "SetGeneralRegs", decSetGeneralRegs, decSetGeneralRegsAck)
	u(TypeSetFloatRegs, "SetFloatRegs", decSetFloatRegs, decSetFloatRegsAck)
	u(TypeSetDebugRegs, "SetDebugRegs", decSetDebugRegs, decSetDebugRegsAck)
	u(TypeSetSpecialRegs, "SetSpecialRegs", decSetSpecialRegs, decSetSpecialRegsAck)
	u(TypeReleaseControl, "ReleaseControl", decTidU32(TypeReleaseControl,
		func(t, v uint32) Command { return &ReleaseControl{t, ReleaseNotify(v)} }), decReleaseControlAck)
	u(TypeSetContinuationSignal, "SetContinuationSignal", decTidU32(TypeSetContinuationSignal,
		func(t, v uint32) Command { return &SetContinuationSignal{t, v} }), decSetContinuationSignalAck)
	u(TypeSendSignalToProcess, "SendSignalToProcess", decTidU32(TypeSendSignalToProcess,
		func(t, v uint32) Command { return &SendSignalToProcess{t, v} }), decSendSignalToProcessAck)
}
