package cdti

import "strconv"

// Protocol limits and constants of CDTI version 6 (bgcios::toolctl and MessageHeader.h).
const (
	ProtocolVersion        = 6     // value of Header.Version sent by every v6 tool
	BaseRdmaPort           = 7614  // RDMA port base of the I/O-node services
	MaxQueryCommands       = 16    // commands in one Query
	MaxUpdateCommands      = 16    // commands in one Update
	MaxCommands            = 16    // descriptor slots in a Query, Update or their acks
	MaxMemorySize          = 65024 // bytes in one GetMemory or SetMemory command
	MaxThreadIDs           = 1024  // entries in GetThreadListAck
	MaxAuxVecDWords        = 32    // uint64 words in GetAuxVectorsAck
	MaxStackFrames         = 400   // entries in GetThreadDataAck.stackInfo
	NumGPRegs              = 32    // general-purpose registers
	NumFPRegs              = 32    // floating-point (QPX) registers
	QueryPriorityLevel     = 0     // Attach priority of a query-only tool
	MinUpdatePriorityLevel = 1     // lowest Attach priority of a tool that may take control
	MaxUpdatePriorityLevel = 99    // highest Attach priority
	MaxActiveTools         = 4     // tools per process and connections per toolctld
	MaxRanksPerNode        = 64    // ranks listed in Attach/Detach acks
	MaxPersistPathnameSize = 128   // bytes of one pathname in the persistent-memory commands
	MaxPersistPathnames    = 256   // pathnames in GetFilenamesAck
	ToolTagSize            = 8     // bytes of a tool tag

	SmallMessageRegionSize = 65536 // RDMA region, CNK's ack buffer, toolctld's receive buffer
	SmallMessageDataSize   = 65472 // the bound Dyninst asserts on every message
	ImmediateMessageSize   = 512   // RDMA immediate message size
)

// Sizes of the fixed wire structures.
const (
	HeaderSize         = 32    // MessageHeader
	ToolMessageSize    = 40    // MessageHeader + toolId + pad: the start of every tool message
	DescriptorSize     = 16    // CommandDescriptor
	CommandMessageSize = 304   // fixed part of Query, Update and their acks; payloads start here
	MinFrameSize       = 32    // smallest header.length a stream reader accepts
	MaxFrameSize       = 65536 // largest header.length on the wire (toolctld's buffer)

	// MaxRequestSize bounds header.length of every request this package builds, and the
	// predicted length of its ack (304 + Σ ROUND8(ack sizes)). It is SmallMessageDataSize, the
	// bound that Dyninst asserts, so that a request and its ack fit wherever a real BG/Q tool
	// stack would carry them.
	MaxRequestSize = SmallMessageDataSize
)

// Service is a bgcios service id (MessageHeader.service).
type Service uint8

// Service ids. Only ServiceToolctl is used by tools.
const (
	ServiceIosctl          Service = 1
	ServiceJobctl          Service = 2
	ServiceStdio           Service = 3
	ServiceSysio           Service = 4
	ServiceToolctl         Service = 5
	ServiceSysioUser       Service = 16
	ServiceSysioUserFdRDMA Service = 17
)

func (s Service) String() string {
	switch s {
	case ServiceIosctl:
		return "IosctlService"
	case ServiceJobctl:
		return "JobctlService"
	case ServiceStdio:
		return "StdioService"
	case ServiceSysio:
		return "SysioService"
	case ServiceToolctl:
		return "ToolctlService"
	case ServiceSysioUser:
		return "SysioUserService"
	case ServiceSysioUserFdRDMA:
		return "SysioUserServiceFdRDMA"
	}
	return "Service(" + strconv.Itoa(int(s)) + ")"
}

// MessageType is MessageHeader.type.
type MessageType uint16

// Message types of protocol v6, and the extension types (see the package documentation).
const (
	MsgErrorAck    MessageType = 5000
	MsgAttach      MessageType = 5001
	MsgAttachAck   MessageType = 5002
	MsgDetach      MessageType = 5003
	MsgDetachAck   MessageType = 5004
	MsgQuery       MessageType = 5005
	MsgQueryAck    MessageType = 5006
	MsgUpdate      MessageType = 5007
	MsgUpdateAck   MessageType = 5008
	MsgSetupJob    MessageType = 5009 // CNK → toolctld only
	MsgSetupJobAck MessageType = 5010 // toolctld → CNK only
	MsgNotify      MessageType = 5011
	MsgNotifyAck   MessageType = 5012 // toolctld → CNK only; a tool never sends it
	MsgControl     MessageType = 5013
	MsgControlAck  MessageType = 5014

	MsgHello    MessageType = 5100 // extension: first message on an agent connection
	MsgHelloAck MessageType = 5101 // extension: the agent's answer to Hello

	MsgGatherStacks    MessageType = 5102 // extension: merged stacks of a subtree of agents
	MsgGatherStacksAck MessageType = 5103 // extension: the merged stack tree
)

var messageTypeNames = map[MessageType]string{
	MsgErrorAck: "ErrorAck", MsgAttach: "Attach", MsgAttachAck: "AttachAck",
	MsgDetach: "Detach", MsgDetachAck: "DetachAck", MsgQuery: "Query", MsgQueryAck: "QueryAck",
	MsgUpdate: "Update", MsgUpdateAck: "UpdateAck", MsgSetupJob: "SetupJob",
	MsgSetupJobAck: "SetupJobAck", MsgNotify: "Notify", MsgNotifyAck: "NotifyAck",
	MsgControl: "Control", MsgControlAck: "ControlAck", MsgHello: "Hello", MsgHelloAck: "HelloAck",
	MsgGatherStacks: "GatherStacks", MsgGatherStacksAck: "GatherStacksAck",
	MsgCollective: "Collective", MsgCollectiveAck: "CollectiveAck",
	MsgSession: "Session", MsgSessionAck: "SessionAck", MsgExits: "Exits",
}

func (t MessageType) String() string {
	if s, ok := messageTypeNames[t]; ok {
		return s
	}
	return "MessageType(" + strconv.Itoa(int(t)) + ")"
}

// IsAck reports whether messages of type t answer a request (the types a tool waits for).
func (t MessageType) IsAck() bool {
	switch t {
	case MsgErrorAck, MsgAttachAck, MsgDetachAck, MsgQueryAck, MsgUpdateAck, MsgControlAck, MsgHelloAck, MsgGatherStacksAck, MsgCollectiveAck, MsgSessionAck:
		return true
	}
	return false
}

// ackFor is the reply type of a request type (0 if t is not a request).
func ackFor(t MessageType) MessageType {
	switch t {
	case MsgAttach, MsgDetach, MsgQuery, MsgUpdate, MsgControl, MsgHello, MsgGatherStacks, MsgCollective:
		return t + 1
	}
	return 0
}

// enumName returns names[v] or "Type(v)" for a value outside the table.
func enumName(names []string, v int64, typ string) string {
	if v >= 0 && v < int64(len(names)) && names[v] != "" {
		return names[v]
	}
	return typ + "(" + strconv.FormatInt(v, 10) + ")"
}

// ProcessSelect chooses the processes an Attach or Detach applies to.
type ProcessSelect int32

// ProcessSelect values.
const (
	RankInHeader ProcessSelect = 0 // only header.rank
	RanksInNode  ProcessSelect = 1 // every rank on the compute node
)

func (v ProcessSelect) String() string {
	return enumName([]string{"RankInHeader", "RanksInNode"}, int64(v), "ProcessSelect")
}

// DynamicNotifyMode says where a saved Control signal is delivered to a process not yet started.
type DynamicNotifyMode int32

// DynamicNotifyMode values.
const (
	DynamicNotifyDLoader DynamicNotifyMode = 0 // the first ld.so instruction
	DynamicNotifyStart   DynamicNotifyMode = 1 // the application's first text instruction
)

func (v DynamicNotifyMode) String() string {
	return enumName([]string{"DynamicNotifyDLoader", "DynamicNotifyStart"}, int64(v), "DynamicNotifyMode")
}

// DACTrapMode selects whether data-address-compare traps fire before or after the access.
type DACTrapMode int32

// DACTrapMode values.
const (
	DACTrapNoChange DACTrapMode = 0
	TrapOnDAC       DACTrapMode = 1
	TrapAfterDAC    DACTrapMode = 2
)

func (v DACTrapMode) String() string {
	return enumName([]string{"DACTrap_NoChange", "TrapOnDAC", "TrapAfterDAC"}, int64(v), "DACTrapMode")
}

// WatchPolicy says whether watchpoints propagate to new threads (v6).
type WatchPolicy int32

// WatchPolicy values.
const (
	WatchPropagate   WatchPolicy = 0 // IBM's header spells it Watch_Propogate
	WatchNoPropagate WatchPolicy = 1
)

func (v WatchPolicy) String() string {
	return enumName([]string{"Watch_Propogate", "Watch_NoPropagate"}, int64(v), "WatchPolicy")
}

// NotifyKind is NotifyMessage.notifyMessageType: which union variant a Notify carries.
type NotifyKind int32

// NotifyKind values.
const (
	NotifyTypeSignal      NotifyKind = 0
	NotifyTypeTermination NotifyKind = 1
	NotifyTypeControl     NotifyKind = 2
	// NotifyTypeUnreachable (extension) tells a tool that a Router lost its way to the
	// header's rank: the link to an agent on the way broke, the tool's attachments below it
	// were dropped, and the rank is unreachable for the tool's connection from then on.
	NotifyTypeUnreachable NotifyKind = 100
)

func (v NotifyKind) String() string {
	if v == NotifyTypeUnreachable {
		return "NotifyMessageType_Unreachable"
	}
	return enumName([]string{"NotifyMessageType_Signal", "NotifyMessageType_Termination",
		"NotifyMessageType_Control"}, int64(v), "NotifyMessageType")
}

// NotifySignalReason says why a signal Notify was sent.
type NotifySignalReason int32

// NotifySignalReason values.
const (
	SignalGeneric         NotifySignalReason = 0
	SignalBreakpoint      NotifySignalReason = 1
	SignalWatchpointRead  NotifySignalReason = 2
	SignalWatchpointWrite NotifySignalReason = 3
	SignalStepComplete    NotifySignalReason = 4
)

func (v NotifySignalReason) String() string {
	if v == SignalInterrupt {
		return "NotifySignal_Interrupt"
	}
	return enumName([]string{"NotifySignal_Generic", "NotifySignal_Breakpoint",
		"NotifySignal_WatchpointRead", "NotifySignal_WatchpointWrite", "NotifySignal_StepComplete"},
		int64(v), "NotifySignalReason")
}

// ExecuteMode says whether the notified thread ran speculatively (v6).
type ExecuteMode int32

// ExecuteMode values.
const (
	ExecuteNonSpeculative ExecuteMode = 0
	ExecuteSpeculative    ExecuteMode = 1
)

func (v ExecuteMode) String() string {
	return enumName([]string{"NotifySignal_NonSpeculative", "NotifySignal_Speculative"}, int64(v),
		"NotifySignalExecuteMode")
}

// NotifyControlReason says what a control Notify reports.
type NotifyControlReason int32

// NotifyControlReason values.
const (
	ControlConflict  NotifyControlReason = 0 // another tool asked for control that this tool holds
	ControlAvailable NotifyControlReason = 1 // the holder released control; send Control again
)

func (v NotifyControlReason) String() string {
	return enumName([]string{"NotifyControl_Conflict", "NotifyControl_Available"}, int64(v),
		"NotifyControlReason")
}

// ReleaseNotify is ReleaseControl's notify field.
type ReleaseNotify int32

// ReleaseNotify values.
const (
	ReleaseInactive ReleaseNotify = 0
	ReleaseActive   ReleaseNotify = 1 // ask for Notify(Control, Available) when the next holder releases
)

func (v ReleaseNotify) String() string {
	return enumName([]string{"ReleaseControlNotify_Inactive", "ReleaseControlNotify_Active"}, int64(v),
		"ReleaseControlNotify")
}

// SpecAccess selects the speculation context of a memory access.
type SpecAccess int32

// SpecAccess values.
const (
	SpecAccessUseThreadState      SpecAccess = 0
	SpecAccessForceNonSpeculative SpecAccess = 1
)

func (v SpecAccess) String() string {
	return enumName([]string{"SpecAccess_UseThreadState", "SpecAccess_ForceNonSpeculative"}, int64(v),
		"SpecAccess")
}

// SharedMemoryAccess allows or forbids a SetMemory into memory shared between processes.
type SharedMemoryAccess int32

// SharedMemoryAccess values.
const (
	SharedMemoryNotAllow SharedMemoryAccess = 0
	SharedMemoryAllow    SharedMemoryAccess = 1
)

func (v SharedMemoryAccess) String() string {
	return enumName([]string{"SharedMemoryAccess_NotAllow", "SharedMemoryAccess_Allow"}, int64(v),
		"SharedMemoryAccess")
}

// FastBreakMode enables or disables fast (in-process) breakpoints.
type FastBreakMode int32

// FastBreakMode values.
const (
	FastBreakNoChange FastBreakMode = 0
	FastBreakDisable  FastBreakMode = 1
	FastBreakEnable   FastBreakMode = 2
)

func (v FastBreakMode) String() string {
	return enumName([]string{"FastBreak_NoChange", "FastBreak_Disable", "FastBreak_Enable"}, int64(v),
		"FastBreakMode")
}

// FastWatchMode enables or disables fast (in-process) watchpoints.
type FastWatchMode int32

// FastWatchMode values.
const (
	FastWatchNoChange FastWatchMode = 0
	FastWatchDisable  FastWatchMode = 1
	FastWatchEnable   FastWatchMode = 2
)

func (v FastWatchMode) String() string {
	return enumName([]string{"FastWatch_NoChange", "FastWatch_Disable", "FastWatch_Enable"}, int64(v),
		"FastWatchMode")
}

// ThreadState is BG_Thread_State: what the kernel thread is doing.
type ThreadState int32

// ThreadState values.
const (
	ThreadRun       ThreadState = 1
	ThreadSleep     ThreadState = 2
	ThreadFutexWait ThreadState = 3
	ThreadIdle      ThreadState = 4
	ThreadFLock     ThreadState = 5 // v6
)

func (v ThreadState) String() string {
	return enumName([]string{"", "Run", "Sleep", "FutexWait", "Idle", "FLock"}, int64(v), "BG_Thread_State")
}

// ToolState is BG_Thread_ToolState: whether tools hold or suspend the thread.
type ToolState int32

// ToolState values.
const (
	ToolActive      ToolState = 1
	ToolHold        ToolState = 2
	ToolSuspend     ToolState = 3
	ToolHoldSuspend ToolState = 4
)

func (v ToolState) String() string {
	return enumName([]string{"", "Active", "Hold", "Suspend", "HoldSuspend"}, int64(v), "BG_Thread_ToolState")
}

// SpecState is BG_Thread_SpecState: the thread's speculation state.
type SpecState int32

// SpecState values.
const (
	SpecNonSpeculative              SpecState = 0
	SpecTransactionalMemory         SpecState = 1
	SpecTransactionalMemoryInvalid  SpecState = 2
	SpecSpeculativeExecution        SpecState = 3
	SpecSpeculativeExecutionInvalid SpecState = 4
)

func (v SpecState) String() string {
	return enumName([]string{"NonSpeculative", "TransactionalMemory", "TransactionalMemory_Invalid",
		"SpeculativeExecution", "SpeculativeExecution_Invalid"}, int64(v), "BG_Thread_SpecState")
}

// WatchType is the access a watchpoint traps on.
type WatchType int32

// WatchType values.
const (
	WatchNone      WatchType = 0 // v6: an empty slot in SetWatchpointAck/ResetWatchpointAck
	WatchRead      WatchType = 1
	WatchWrite     WatchType = 2
	WatchReadWrite WatchType = 3
)

func (v WatchType) String() string {
	return enumName([]string{"WatchNone", "WatchRead", "WatchWrite", "WatchReadWrite"}, int64(v), "WatchType")
}

// SpecialReg selects a special-purpose register in SetSpecialReg.
type SpecialReg int32

// SpecialReg values.
const (
	RegIAR   SpecialReg = 1
	RegLR    SpecialReg = 2
	RegMSR   SpecialReg = 3
	RegCR    SpecialReg = 4
	RegCTR   SpecialReg = 5
	RegXER   SpecialReg = 6
	RegFPSCR SpecialReg = 7
	RegDEAR  SpecialReg = 8
	RegESR   SpecialReg = 9
)

func (v SpecialReg) String() string {
	return enumName([]string{"", "iar", "lr", "msr", "cr", "ctr", "xer", "fpscr", "dear", "esr"}, int64(v),
		"SpecialRegSelect")
}

// DebugReg selects a debug register in SetDebugReg.
type DebugReg int32

// DebugReg values.
const (
	RegDBCR0 DebugReg = 1
	RegDBCR1 DebugReg = 2
	RegDBCR2 DebugReg = 3
	RegDBCR3 DebugReg = 4
	RegDAC1  DebugReg = 5
	RegDAC2  DebugReg = 6
	RegDAC3  DebugReg = 7
	RegDAC4  DebugReg = 8
	RegIAC1  DebugReg = 9
	RegIAC2  DebugReg = 10
	RegIAC3  DebugReg = 11
	RegIAC4  DebugReg = 12
	RegDBSR  DebugReg = 13
)

func (v DebugReg) String() string {
	return enumName([]string{"", "dbcr0", "dbcr1", "dbcr2", "dbcr3", "dac1", "dac2", "dac3", "dac4",
		"iac1", "iac2", "iac3", "iac4", "dbsr"}, int64(v), "DebugRegSelect")
}

// GeneralReg selects gpr0…gpr31 in SetGeneralReg.
type GeneralReg int32

func (v GeneralReg) String() string {
	if v >= 0 && v < NumGPRegs {
		return "gpr" + strconv.Itoa(int(v))
	}
	return "GeneralRegSelect(" + strconv.Itoa(int(v)) + ")"
}

// FloatReg selects fpr0…fpr31 in SetFloatReg.
type FloatReg int32

func (v FloatReg) String() string {
	if v >= 0 && v < NumFPRegs {
		return "fpr" + strconv.Itoa(int(v))
	}
	return "FloatRegSelect(" + strconv.Itoa(int(v)) + ")"
}
