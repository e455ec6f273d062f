package cdti

// This file holds the acks of the update commands that carry only a threadID (8 bytes).

// SetGeneralRegAck answers SetGeneralReg.
type SetGeneralRegAck struct{ ThreadID uint32 }

func (a *SetGeneralRegAck) CommandType() CommandType { return TypeSetGeneralRegAck }
func (a *SetGeneralRegAck) Thread() uint32           { return a.ThreadID }
func (a *SetGeneralRegAck) EncodedSize() int         { return 8 }
func (a *SetGeneralRegAck) Encode(b []byte)          { be.PutUint32(b, a.ThreadID) }

var decSetGeneralRegAck = threadDecoder(TypeSetGeneralRegAck, func(t uint32) Ack { return &SetGeneralRegAck{t} })

// SetFloatRegAck answers SetFloatReg.
type SetFloatRegAck struct{ ThreadID uint32 }

func (a *SetFloatRegAck) CommandType() CommandType { return TypeSetFloatRegAck }
func (a *SetFloatRegAck) Thread() uint32           { return a.ThreadID }
func (a *SetFloatRegAck) EncodedSize() int         { return 8 }
func (a *SetFloatRegAck) Encode(b []byte)          { be.PutUint32(b, a.ThreadID) }

var decSetFloatRegAck = threadDecoder(TypeSetFloatRegAck, func(t uint32) Ack { return &SetFloatRegAck{t} })

// SetDebugRegAck answers SetDebugReg.
type SetDebugRegAck struct{ ThreadID uint32 }

func (a *SetDebugRegAck) CommandType() CommandType { return TypeSetDebugRegAck }
func (a *SetDebugRegAck) Thread() uint32           { return a.ThreadID }
func (a *SetDebugRegAck) EncodedSize() int         { return 8 }
func (a *SetDebugRegAck) Encode(b []byte)          { be.PutUint32(b, a.ThreadID) }

var decSetDebugRegAck = threadDecoder(TypeSetDebugRegAck, func(t uint32) Ack { return &SetDebugRegAck{t} })

// HoldThreadAck answers HoldThread.
type HoldThreadAck struct{ ThreadID uint32 }

func (a *HoldThreadAck) CommandType() CommandType { return TypeHoldThreadAck }
func (a *HoldThreadAck) Thread() uint32           { return a.ThreadID }
func (a *HoldThreadAck) EncodedSize() int         { return 8 }
func (a *HoldThreadAck) Encode(b []byte)          { be.PutUint32(b, a.ThreadID) }

var decHoldThreadAck = threadDecoder(TypeHoldThreadAck, func(t uint32) Ack { return &HoldThreadAck{t} })

// ReleaseThreadAck answers ReleaseThread.
type ReleaseThreadAck struct{ ThreadID uint32 }

func (a *ReleaseThreadAck) CommandType() CommandType { return TypeReleaseThreadAck }
func (a *ReleaseThreadAck) Thread() uint32           { return a.ThreadID }
func (a *ReleaseThreadAck) EncodedSize() int         { return 8 }
func (a *ReleaseThreadAck) Encode(b []byte)          { be.PutUint32(b, a.ThreadID) }

var decReleaseThreadAck = threadDecoder(TypeReleaseThreadAck, func(t uint32) Ack { return &ReleaseThreadAck{t} })

// InstallTrapHandlerAck answers InstallTrapHandler.
type InstallTrapHandlerAck struct{ ThreadID uint32 }

func (a *InstallTrapHandlerAck) CommandType() CommandType { return TypeInstallTrapHandlerAck }
func (a *InstallTrapHandlerAck) Thread() uint32           { return a.ThreadID }
func (a *InstallTrapHandlerAck) EncodedSize() int         { return 8 }
func (a *InstallTrapHandlerAck) Encode(b []byte)          { be.PutUint32(b, a.ThreadID) }

var decInstallTrapHandlerAck = threadDecoder(TypeInstallTrapHandlerAck, func(t uint32) Ack { return &InstallTrapHandlerAck{t} })

// SendSignalAck answers SendSignal.
type SendSignalAck struct{ ThreadID uint32 }

func (a *SendSignalAck) CommandType() CommandType { return TypeSendSignalAck }
func (a *SendSignalAck) Thread() uint32           { return a.ThreadID }
func (a *SendSignalAck) EncodedSize() int         { return 8 }
func (a *SendSignalAck) Encode(b []byte)          { be.PutUint32(b, a.ThreadID) }

var decSendSignalAck = threadDecoder(TypeSendSignalAck, func(t uint32) Ack { return &SendSignalAck{t} })

// ContinueProcessAck answers ContinueProcess.
type ContinueProcessAck struct{ ThreadID uint32 }

func (a *ContinueProcessAck) CommandType() CommandType { return TypeContinueProcessAck }
func (a *ContinueProcessAck) Thread() uint32           { return a.ThreadID }
func (a *ContinueProcessAck) EncodedSize() int         { return 8 }
func (a *ContinueProcessAck) Encode(b []byte)          { be.PutUint32(b, a.ThreadID) }

var decContinueProcessAck = threadDecoder(TypeContinueProcessAck, func(t uint32) Ack { return &ContinueProcessAck{t} })

// StepThreadAck answers StepThread.
type StepThreadAck struct{ ThreadID uint32 }

func (a *StepThreadAck) CommandType() CommandType { return TypeStepThreadAck }
func (a *StepThreadAck) Thread() uint32           { return a.ThreadID }
func (a *StepThreadAck) EncodedSize() int         { return 8 }
func (a *StepThreadAck) Encode(b []byte)          { be.PutUint32(b, a.ThreadID) }

var decStepThreadAck = threadDecoder(TypeStepThreadAck, func(t uint32) Ack { return &StepThreadAck{t} })

// SetBreakpointAck answers SetBreakpoint.
type SetBreakpointAck struct{ ThreadID uint32 }

func (a *SetBreakpointAck) CommandType() CommandType { return TypeSetBreakpointAck }
func (a *SetBreakpointAck) Thread() uint32           { return a.ThreadID }
func (a *SetBreakpointAck) EncodedSize() int         { return 8 }
func (a *SetBreakpointAck) Encode(b []byte)          { be.PutUint32(b, a.ThreadID) }

var decSetBreakpointAck = threadDecoder(TypeSetBreakpointAck, func(t uint32) Ack { return &SetBreakpointAck{t} })

// ResetBreakpointAck answers ResetBreakpoint.
type ResetBreakpointAck struct{ ThreadID uint32 }

func (a *ResetBreakpointAck) CommandType() CommandType { return TypeResetBreakpointAck }
func (a *ResetBreakpointAck) Thread() uint32           { return a.ThreadID }
func (a *ResetBreakpointAck) EncodedSize() int         { return 8 }
func (a *ResetBreakpointAck) Encode(b []byte)          { be.PutUint32(b, a.ThreadID) }

var decResetBreakpointAck = threadDecoder(TypeResetBreakpointAck, func(t uint32) Ack { return &ResetBreakpointAck{t} })

// RemoveTrapHandlerAck answers RemoveTrapHandler.
type RemoveTrapHandlerAck struct{ ThreadID uint32 }

func (a *RemoveTrapHandlerAck) CommandType() CommandType { return TypeRemoveTrapHandlerAck }
func (a *RemoveTrapHandlerAck) Thread() uint32           { return a.ThreadID }
func (a *RemoveTrapHandlerAck) EncodedSize() int         { return 8 }
func (a *RemoveTrapHandlerAck) Encode(b []byte)          { be.PutUint32(b, a.ThreadID) }

var decRemoveTrapHandlerAck = threadDecoder(TypeRemoveTrapHandlerAck, func(t uint32) Ack { return &RemoveTrapHandlerAck{t} })

// SetPreferencesAck answers SetPreferences.
type SetPreferencesAck struct{ ThreadID uint32 }

func (a *SetPreferencesAck) CommandType() CommandType { return TypeSetPreferencesAck }
func (a *SetPreferencesAck) Thread() uint32           { return a.ThreadID }
func (a *SetPreferencesAck) EncodedSize() int         { return 8 }
func (a *SetPreferencesAck) Encode(b []byte)          { be.PutUint32(b, a.ThreadID) }

var decSetPreferencesAck = threadDecoder(TypeSetPreferencesAck, func(t uint32) Ack { return &SetPreferencesAck{t} })

// FreeMemoryAck answers FreeMemory.
type FreeMemoryAck struct{ ThreadID uint32 }

func (a *FreeMemoryAck) CommandType() CommandType { return TypeFreeMemoryAck }
func (a *FreeMemoryAck) Thread() uint32           { return a.ThreadID }
func (a *FreeMemoryAck) EncodedSize() int         { return 8 }
func (a *FreeMemoryAck) Encode(b []byte)          { be.PutUint32(b, a.ThreadID) }

var decFreeMemoryAck = threadDecoder(TypeFreeMemoryAck, func(t uint32) Ack { return &FreeMemoryAck{t} })

// SetSpecialRegAck answers SetSpecialReg.
type SetSpecialRegAck struct{ ThreadID uint32 }

func (a *SetSpecialRegAck) CommandType() CommandType { return TypeSetSpecialRegAck }
func (a *SetSpecialRegAck) Thread() uint32           { return a.ThreadID }
func (a *SetSpecialRegAck) EncodedSize() int         { return 8 }
func (a *SetSpecialRegAck) Encode(b []byte)          { be.PutUint32(b, a.ThreadID) }

var decSetSpecialRegAck = threadDecoder(TypeSetSpecialRegAck, func(t uint32) Ack { return &SetSpecialRegAck{t} })

// SetGeneralRegsAck answers SetGeneralRegs.
type SetGeneralRegsAck struct{ ThreadID uint32 }

func (a *SetGeneralRegsAck) CommandType() CommandType { return TypeSetGeneralRegsAck }
func (a *SetGeneralRegsAck) Thread() uint32           { return a.ThreadID }
func (a *SetGeneralRegsAck) EncodedSize() int         { return 8 }
func (a *SetGeneralRegsAck) Encode(b []byte)          { be.PutUint32(b, a.ThreadID) }

var decSetGeneralRegsAck = threadDecoder(TypeSetGeneralRegsAck, func(t uint32) Ack { return &SetGeneralRegsAck{t} })

// SetFloatRegsAck answers SetFloatRegs.
type SetFloatRegsAck struct{ ThreadID uint32 }

func (a *SetFloatRegsAck) CommandType() CommandType { return TypeSetFloatRegsAck }
func (a *SetFloatRegsAck) Thread() uint32           { return a.ThreadID }
func (a *SetFloatRegsAck) EncodedSize() int         { return 8 }
func (a *SetFloatRegsAck) Encode(b []byte)          { be.PutUint32(b, a.ThreadID) }

var decSetFloatRegsAck = threadDecoder(TypeSetFloatRegsAck, func(t uint32) Ack { return &SetFloatRegsAck{t} })

// SetDebugRegsAck answers SetDebugRegs.
type SetDebugRegsAck struct{ ThreadID uint32 }

func (a *SetDebugRegsAck) CommandType() CommandType { return TypeSetDebugRegsAck }
func (a *SetDebugRegsAck) Thread() uint32           { return a.ThreadID }
func (a *SetDebugRegsAck) EncodedSize() int         { return 8 }
func (a *SetDebugRegsAck) Encode(b []byte)          { be.PutUint32(b, a.ThreadID) }

var decSetDebugRegsAck = threadDecoder(TypeSetDebugRegsAck, func(t uint32) Ack { return &SetDebugRegsAck{t} })

// SetSpecialRegsAck answers SetSpecialRegs.
type SetSpecialRegsAck struct{ ThreadID uint32 }

func (a *SetSpecialRegsAck) CommandType() CommandType { return TypeSetSpecialRegsAck }
func (a *SetSpecialRegsAck) Thread() uint32           { return a.ThreadID }
func (a *SetSpecialRegsAck) EncodedSize() int         { return 8 }
func (a *SetSpecialRegsAck) Encode(b []byte)          { be.PutUint32(b, a.ThreadID) }

var decSetSpecialRegsAck = threadDecoder(TypeSetSpecialRegsAck, func(t uint32) Ack { return &SetSpecialRegsAck{t} })

// ReleaseControlAck answers ReleaseControl.
type ReleaseControlAck struct{ ThreadID uint32 }

func (a *ReleaseControlAck) CommandType() CommandType { return TypeReleaseControlAck }
func (a *ReleaseControlAck) Thread() uint32           { return a.ThreadID }
func (a *ReleaseControlAck) EncodedSize() int         { return 8 }
func (a *ReleaseControlAck) Encode(b []byte)          { be.PutUint32(b, a.ThreadID) }

var decReleaseControlAck = threadDecoder(TypeReleaseControlAck, func(t uint32) Ack { return &ReleaseControlAck{t} })

// SetContinuationSignalAck answers SetContinuationSignal.
type SetContinuationSignalAck struct{ ThreadID uint32 }

func (a *SetContinuationSignalAck) CommandType() CommandType { return TypeSetContinuationSignalAck }
func (a *SetContinuationSignalAck) Thread() uint32           { return a.ThreadID }
func (a *SetContinuationSignalAck) EncodedSize() int         { return 8 }
func (a *SetContinuationSignalAck) Encode(b []byte)          { be.PutUint32(b, a.ThreadID) }

var decSetContinuationSignalAck = threadDecoder(TypeSetContinuationSignalAck, func(t uint32) Ack { return &SetContinuationSignalAck{t} })

// SendSignalToProcessAck answers SendSignalToProcess.
type SendSignalToProcessAck struct{ ThreadID uint32 }

func (a *SendSignalToProcessAck) CommandType() CommandType { return TypeSendSignalToProcessAck }
func (a *SendSignalToProcessAck) Thread() uint32           { return a.ThreadID }
func (a *SendSignalToProcessAck) EncodedSize() int         { return 8 }
func (a *SendSignalToProcessAck) Encode(b []byte)          { be.PutUint32(b, a.ThreadID) }

var decSendSignalToProcessAck = threadDecoder(TypeSendSignalToProcessAck, func(t uint32) Ack { return &SendSignalToProcessAck{t} })
