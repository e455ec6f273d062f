package adapter

import (
	"encoding/json"

	"github.com/google/go-dap"
)

// Error ids of error responses (DAP ErrorMessage.id), stable for clients and tests.
const (
	errMalformed        = 1000 // the message could not be decoded
	errUnsupported      = 1001 // unknown or unsupported request
	errNotInitialized   = 1002 // request before initialize
	errBadArguments     = 1003 // arguments decoded but invalid
	errNoJob            = 1004 // request needs a launched or attached job
	errFailedToLaunch   = 3000
	errFailedToAttach   = 3001
	errNotYetSupported  = 3002 // a documented option whose back end does not exist yet
	errRunning          = 4000 // the thread's rank is running
	errStale            = 4001 // a frame id or variables reference of a stop that is over
	errBreakpoints      = 2002
	errStackTrace       = 2004
	errScopes           = 2005
	errVariables        = 2006
	errSetVariable      = 2007
	errEvaluate         = 2009
	errDisassemble      = 2013
	errReadMemory       = 2016
	errWriteMemory      = 2017
	errRunControl       = 2020
	errExceptionInfo    = 2021
	errSource           = 2022
	errCustom           = 2030
	errInternal         = 8888
	errTooLarge         = 1005
	errDuplicateRequest = 1006
	errCancelled        = 1007 // ended by a cancel request
)

// Capabilities extends go-dap's with the DAP fields newer than its schema (1.59).
type Capabilities struct {
	dap.Capabilities
	BreakpointModes             []BreakpointMode `json:"breakpointModes,omitempty"`
	SupportsDataBreakpointBytes bool             `json:"supportsDataBreakpointBytes,omitempty"`
	SupportsANSIStyling         bool             `json:"supportsANSIStyling,omitempty"`
}

// BreakpointMode is DAP 1.65's breakpoint mode.
type BreakpointMode struct {
	Mode        string   `json:"mode"`
	Label       string   `json:"label"`
	Description string   `json:"description,omitempty"`
	AppliesTo   []string `json:"appliesTo"`
}

// InitializeResponse carries the extended capabilities.
type InitializeResponse struct {
	dap.Response
	Body Capabilities `json:"body"`
}

// CapabilitiesEvent announces extended capabilities later in a session.
type CapabilitiesEvent struct {
	dap.Event
	Body struct {
		Capabilities Capabilities `json:"capabilities"`
	} `json:"body"`
}

// Breakpoint extends go-dap's with DAP 1.64's reason ("pending", "failed").
type Breakpoint struct {
	dap.Breakpoint
	Reason string `json:"reason,omitempty"`
}

// BreakpointsBody is the body of the responses to the set-breakpoints requests.
type BreakpointsBody struct {
	Breakpoints []Breakpoint `json:"breakpoints"`
}

// SetBreakpointsResponse is go-dap's with extended breakpoints.
type SetBreakpointsResponse struct {
	dap.Response
	Body BreakpointsBody `json:"body"`
}

// SetFunctionBreakpointsResponse is go-dap's with extended breakpoints.
type SetFunctionBreakpointsResponse struct {
	dap.Response
	Body BreakpointsBody `json:"body"`
}

// SetInstructionBreakpointsResponse is go-dap's with extended breakpoints.
type SetInstructionBreakpointsResponse struct {
	dap.Response
	Body BreakpointsBody `json:"body"`
}

// SetDataBreakpointsResponse is go-dap's with extended breakpoints.
type SetDataBreakpointsResponse struct {
	dap.Response
	Body BreakpointsBody `json:"body"`
}

// BreakpointEvent reports a breakpoint whose state changed.
type BreakpointEvent struct {
	dap.Event
	Body struct {
		Reason     string     `json:"reason"`
		Breakpoint Breakpoint `json:"breakpoint"`
	} `json:"body"`
}

// DataBreakpointInfoArguments adds DAP 1.66's bytes/asAddress and 1.65's mode.
type DataBreakpointInfoArguments struct {
	VariablesReference int    `json:"variablesReference,omitempty"`
	Name               string `json:"name"`
	FrameId            int    `json:"frameId,omitempty"`
	Bytes              int    `json:"bytes,omitempty"`
	AsAddress          bool   `json:"asAddress,omitempty"`
	Mode               string `json:"mode,omitempty"`
}

// DataBreakpointInfoRequest is dataBreakpointInfo with the newer arguments.
type DataBreakpointInfoRequest struct {
	dap.Request
	Arguments DataBreakpointInfoArguments `json:"arguments"`
}

// DataBreakpoint adds DAP 1.65's mode.
type DataBreakpoint struct {
	DataId       string `json:"dataId"`
	AccessType   string `json:"accessType,omitempty"`
	Condition    string `json:"condition,omitempty"`
	HitCondition string `json:"hitCondition,omitempty"`
	Mode         string `json:"mode,omitempty"`
}

// SetDataBreakpointsRequest is setDataBreakpoints with extended data breakpoints.
type SetDataBreakpointsRequest struct {
	dap.Request
	Arguments struct {
		Breakpoints []DataBreakpoint `json:"breakpoints"`
	} `json:"arguments"`
}

// DisassembledInstruction adds DAP 1.64's presentationHint.
type DisassembledInstruction struct {
	dap.DisassembledInstruction
	PresentationHint string `json:"presentationHint,omitempty"`
}

// DisassembleResponse carries extended instructions.
type DisassembleResponse struct {
	dap.Response
	Body struct {
		Instructions []DisassembledInstruction `json:"instructions"`
	} `json:"body"`
}

// SetVariableResponseBody adds DAP 1.65's memoryReference of the new value.
type SetVariableResponseBody struct {
	dap.SetVariableResponseBody
	MemoryReference string `json:"memoryReference,omitempty"`
}

// SetVariableResponse carries SetVariableResponseBody.
type SetVariableResponse struct {
	dap.Response
	Body SetVariableResponseBody `json:"body"`
}

// DisconnectArguments tell terminateDebuggee false from absent (go-dap's cannot).
type DisconnectArguments struct {
	Restart           bool  `json:"restart,omitempty"`
	TerminateDebuggee *bool `json:"terminateDebuggee,omitempty"`
	SuspendDebuggee   bool  `json:"suspendDebuggee,omitempty"`
}

// DisconnectRequest is disconnect with DisconnectArguments.
type DisconnectRequest struct {
	dap.Request
	Arguments *DisconnectArguments `json:"arguments,omitempty"`
}

// Response is a response with any body (custom requests).
type Response struct {
	dap.Response
	Body any `json:"body,omitempty"`
}

// Event is an event with any body (custom events, progress events).
type Event struct {
	dap.Event
	Body any `json:"body,omitempty"`
}

// The custom requests of the README's "DAP interface".

// RanksRequest is hpcdap/ranks.
type RanksRequest struct {
	dap.Request
	Arguments json.RawMessage `json:"arguments,omitempty"`
}

// FocusArguments are hpcdap/focus's.
type FocusArguments struct {
	Ranks string `json:"ranks"`
}

// FocusRequest is hpcdap/focus.
type FocusRequest struct {
	dap.Request
	Arguments FocusArguments `json:"arguments"`
}

// ParallelStacksArguments are hpcdap/parallelStacks's.
type ParallelStacksArguments struct {
	Ranks     string `json:"ranks,omitempty"`
	MaxFrames int    `json:"maxFrames,omitempty"`
	// ByFunction merges frames of one function whatever line the ranks are at (each node then
	// shows the line of its lowest rank), as DDT's and STAT's function-level views do.
	ByFunction bool `json:"byFunction,omitempty"`
}

// ParallelStacksRequest is hpcdap/parallelStacks.
type ParallelStacksRequest struct {
	dap.Request
	Arguments ParallelStacksArguments `json:"arguments"`
}

// CompareExpressionArguments are hpcdap/compareExpression's.
type CompareExpressionArguments struct {
	Expression string `json:"expression"`
	FrameLevel *int   `json:"frameLevel,omitempty"`
	Ranks      string `json:"ranks,omitempty"`
}

// CompareExpressionRequest is hpcdap/compareExpression.
type CompareExpressionRequest struct {
	dap.Request
	Arguments CompareExpressionArguments `json:"arguments"`
}

var customRequests = map[string]func() dap.Message{
	"hpcdap/ranks":             func() dap.Message { return &RanksRequest{} },
	"hpcdap/focus":             func() dap.Message { return &FocusRequest{} },
	"hpcdap/parallelStacks":    func() dap.Message { return &ParallelStacksRequest{} },
	"hpcdap/compareExpression": func() dap.Message { return &CompareExpressionRequest{} },
	"hpcdap/sessions":          func() dap.Message { return &SessionsRequest{} },
}

// SessionsRequest is hpcdap/sessions: the shared sessions of the server that this client's
// user may join.
type SessionsRequest struct {
	dap.Request
}

// RankState is one rank as hpcdap/ranks and hpcdap/ranksChanged report it.
type RankState struct {
	Rank       int    `json:"rank"`
	State      string `json:"state"` // "starting", "running", "stopped", "exited"
	Pid        int    `json:"pid"`
	Host       string `json:"host"`
	ThreadID   int    `json:"threadId"`
	ExitCode   *int   `json:"exitCode,omitempty"`
	Signal     string `json:"signal,omitempty"`
	StopReason string `json:"stopReason,omitempty"`
}

// RanksBody is hpcdap/ranks's response body.
type RanksBody struct {
	Ranks    []RankState    `json:"ranks"`
	Focus    string         `json:"focus"`
	Messages *MessageCounts `json:"messages,omitempty"`
}

// MessageCounts are the CDTI messages the front end has exchanged with the job's agents.
type MessageCounts struct {
	Sent     uint64 `json:"sent"`
	Received uint64 `json:"received"`
}

// FocusBody is hpcdap/focus's response body.
type FocusBody struct {
	Focus string `json:"focus"`
	Count int    `json:"count"`
}

// StackSource is the source of a StackNode.
type StackSource struct {
	Name string `json:"name,omitempty"`
	Path string `json:"path,omitempty"` // absent when the file is not on the front end's machine
}

// StackNode is one node of the merged prefix tree of all ranks' stacks.
type StackNode struct {
	ID         int          `json:"id"`
	Name       string       `json:"name"`
	Source     *StackSource `json:"source,omitempty"`
	Line       int          `json:"line,omitempty"`
	Ranks      string       `json:"ranks"`
	Count      int          `json:"count"`
	ThreadID   int          `json:"threadId"`
	FrameLevel int          `json:"frameLevel"`
	Children   []*StackNode `json:"children"`
}

// ParallelStacksBody is hpcdap/parallelStacks's response body.
type ParallelStacksBody struct {
	Total int          `json:"total"`
	Roots []*StackNode `json:"roots"`
}

// CompareGroup is one value of an expression and the ranks that have it.
type CompareGroup struct {
	Value string `json:"value"`
	Ranks string `json:"ranks"`
	Count int    `json:"count"`
}

// CompareError is a reason an expression could not be evaluated on some ranks.
type CompareError struct {
	Message string `json:"message"`
	Ranks   string `json:"ranks"`
}

// CompareBody is hpcdap/compareExpression's response body.
type CompareBody struct {
	Groups []CompareGroup `json:"groups"`
	Errors []CompareError `json:"errors"`
}

// RanksChangedBody is the body of the hpcdap/ranksChanged event.
type RanksChangedBody struct {
	Ranks []RankState `json:"ranks"`
}
