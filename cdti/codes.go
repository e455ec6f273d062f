package cdti

import "strconv"

// ReturnCode is bgcios::ReturnCode, the message-level result in Header.ReturnCode.
//
// A ReturnCode is also an error value, so that errors returned by the Client can be tested
// with errors.Is(err, cdti.ToolControlConflict).
type ReturnCode uint32

// Message-level return codes.
const (
	Success                    ReturnCode = 0
	WrongService               ReturnCode = 1
	UnsupportedType            ReturnCode = 2
	JobIdError                 ReturnCode = 3
	ProcessIdError             ReturnCode = 4
	RequestFailed              ReturnCode = 5
	SubBlockJobError           ReturnCode = 6
	SendError                  ReturnCode = 7
	RecvError                  ReturnCode = 8
	VersionMismatch            ReturnCode = 9
	NodeNotReady               ReturnCode = 10
	SecondaryGroupIdError      ReturnCode = 11
	PrimaryGroupIdError        ReturnCode = 12
	UserIdError                ReturnCode = 13
	WorkingDirError            ReturnCode = 14
	AppOpenError               ReturnCode = 15
	AppAuthorityError          ReturnCode = 16
	AppReadError               ReturnCode = 17
	AppElfHeaderSize           ReturnCode = 18
	AppElfHeaderError          ReturnCode = 19
	AppNoCodeSection           ReturnCode = 20
	AppCodeSectionSize         ReturnCode = 21
	AppSegmentAlignment        ReturnCode = 22
	AppTooManySegments         ReturnCode = 23
	AppStaticTLBError          ReturnCode = 24
	AppMemoryError             ReturnCode = 25
	ArgumentListSize           ReturnCode = 26
	ToolStartError             ReturnCode = 27
	ToolAuthorityError         ReturnCode = 28
	ToolIdError                ReturnCode = 29
	ToolTimeoutExpired         ReturnCode = 30
	ToolPriorityConflict       ReturnCode = 31
	ToolMaxAttachedExceeded    ReturnCode = 32
	ToolIdConflict             ReturnCode = 33
	JobsDirError               ReturnCode = 34
	JobsObjectError            ReturnCode = 35
	ToolPriorityError          ReturnCode = 36
	ToolRankNotFound           ReturnCode = 37
	CornerCoreError            ReturnCode = 38
	NumCoresInProcessError     ReturnCode = 39
	ProcessActive              ReturnCode = 40
	NumProcessesError          ReturnCode = 41
	RanksInJobError            ReturnCode = 42
	ClassRouteDataError        ReturnCode = 43
	ToolNumberOfCmdsExceeded   ReturnCode = 44
	RequestIncomplete          ReturnCode = 45
	PrologPgmStartError        ReturnCode = 46
	PrologPgmError             ReturnCode = 47
	EpilogPgmStartError        ReturnCode = 48
	EpilogPgmError             ReturnCode = 49
	ReturnCodeReserved1        ReturnCode = 50 // RequestInProgress in protocol v4
	ToolControlConflict        ReturnCode = 51
	NodesInJobError            ReturnCode = 52
	ToolConflictingCmds        ReturnCode = 53
	ToolControlRequired        ReturnCode = 54
	ToolControlReleaseRequired ReturnCode = 55
	AppInvalidorMissingMapfile ReturnCode = 56
	ToolProcessExiting         ReturnCode = 57
	ReturnCodeListEnd          ReturnCode = 58
)

var returnCodeNames = []string{
	"Success", "WrongService", "UnsupportedType", "JobIdError", "ProcessIdError", "RequestFailed",
	"SubBlockJobError", "SendError", "RecvError", "VersionMismatch", "NodeNotReady",
	"SecondaryGroupIdError", "PrimaryGroupIdError", "UserIdError", "WorkingDirError", "AppOpenError",
	"AppAuthorityError", "AppReadError", "AppElfHeaderSize", "AppElfHeaderError", "AppNoCodeSection",
	"AppCodeSectionSize", "AppSegmentAlignment", "AppTooManySegments", "AppStaticTLBError",
	"AppMemoryError", "ArgumentListSize", "ToolStartError", "ToolAuthorityError", "ToolIdError",
	"ToolTimeoutExpired", "ToolPriorityConflict", "ToolMaxAttachedExceeded", "ToolIdConflict",
	"JobsDirError", "JobsObjectError", "ToolPriorityError", "ToolRankNotFound", "CornerCoreError",
	"NumCoresInProcessError", "ProcessActive", "NumProcessesError", "RanksInJobError",
	"ClassRouteDataError", "ToolNumberOfCmdsExceeded", "RequestIncomplete", "PrologPgmStartError",
	"PrologPgmError", "EpilogPgmStartError", "EpilogPgmError", "ReturnCodeReserved1",
	"ToolControlConflict", "NodesInJobError", "ToolConflictingCmds", "ToolControlRequired",
	"ToolControlReleaseRequired", "AppInvalidorMissingMapfile", "ToolProcessExiting",
	"ReturnCodeListEnd",
}

func (c ReturnCode) String() string {
	return enumName(returnCodeNames, int64(c), "ReturnCode")
}

// Error makes a ReturnCode usable as an error value: "ToolControlConflict (51)".
func (c ReturnCode) Error() string {
	return c.String() + " (" + strconv.FormatUint(uint64(c), 10) + ")"
}

// CmdReturnCode is the per-command result in an ack's CommandDescriptor.returnCode.
//
// A CmdReturnCode is also an error value (errors.Is(err, cdti.CmdAddrErr)).
type CmdReturnCode uint32

// Command return codes.
const (
	CmdSuccess        CmdReturnCode = 0
	CmdTIDinval       CmdReturnCode = 1 // the thread does not belong to the process
	CmdInval          CmdReturnCode = 2 // unknown command, or a command in the wrong message kind
	CmdTimeout        CmdReturnCode = 3
	CmdAllocErr       CmdReturnCode = 4 // no room left in the ack (offset and length are 0)
	CmdParmErr        CmdReturnCode = 5
	CmdBrkptFail      CmdReturnCode = 6
	CmdAddrErr        CmdReturnCode = 7
	CmdLngthErr       CmdReturnCode = 8
	CmdHwdUnavail     CmdReturnCode = 9
	CmdMemUnavail     CmdReturnCode = 10
	CmdFileNotFound   CmdReturnCode = 11
	CmdConflict       CmdReturnCode = 12
	CmdPendingNotify  CmdReturnCode = 13 // ReleaseControl while more notifications are pending
	CmdPrevCmdFail    CmdReturnCode = 14 // v6: an action after a failed command on the same hardware thread
	CmdProcessExiting CmdReturnCode = 15 // v6
	CmdWatchConflict  CmdReturnCode = 16 // v6
)

var cmdReturnCodeNames = []string{
	"CmdSuccess", "CmdTIDinval", "CmdInval", "CmdTimeout", "CmdAllocErr", "CmdParmErr", "CmdBrkptFail",
	"CmdAddrErr", "CmdLngthErr", "CmdHwdUnavail", "CmdMemUnavail", "CmdFileNotFound", "CmdConflict",
	"CmdPendingNotify", "CmdPrevCmdFail", "CmdProcessExiting", "CmdWatchConflict",
}

func (c CmdReturnCode) String() string {
	return enumName(cmdReturnCodeNames, int64(c), "CmdReturnCode")
}

// Error makes a CmdReturnCode usable as an error value: "CmdAddrErr (7)".
func (c CmdReturnCode) Error() string {
	return c.String() + " (" + strconv.FormatUint(uint64(c), 10) + ")"
}
