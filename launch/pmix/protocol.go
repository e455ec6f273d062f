// Package pmix drives a parallel job through the PMIx tool interface, the standard that replaced
// MPIR in Open MPI 5 / PRRTE and PMIx-enabled resource managers.
//
// libpmix allows one tool per process and can crash its process when it meets the wrong server,
// so the front end never loads it: it starts one tool process per job ("hpcdap pmix-tool", which
// calls ServeTool) and talks to it through the client in this package (StartTool, Tool). Requests
// are JSON lines on the tool's standard input; events are JSON lines on its file descriptor 3;
// the launcher's and the ranks' output goes to the tool's standard output and error, each line
// labelled by the launcher.
package pmix

import "errors"

// ErrNotBuilt is what a PMIx launch gets from a binary built without libpmix (Built false).
var ErrNotBuilt = errors.New("this hpcdap was built without PMIx (build with libpmix: make build)")

// Request operations.
const (
	OpLaunch  = "launch"  // start a launcher and hold its job at the requested point
	OpAttach  = "attach"  // connect to a running launcher by pid
	OpRelease = "release" // let a held job run
	OpKill    = "kill"    // signal every rank of the job
	OpDetach  = "detach"  // leave the job running, finalise and exit
	// OpDaemons has the launcher start Program (with ProgramArgs, Env, Dir) as the job's
	// debugger daemons, one on each node of the job (PMIX_DEBUGGER_DAEMONS); a launcher
	// that does not offer them is an error saying so.
	OpDaemons = "daemons"
)

// Hold points a launch can request.
const (
	HoldExec = "exec" // PMIX_DEBUG_STOP_ON_EXEC: each rank stopped before its first instruction
	HoldInit = "init" // PMIX_DEBUG_STOP_IN_INIT: each rank waits inside PMIx_Init
	HoldNone = "none" // reported in Ready when nothing holds the ranks
)

// Event kinds.
const (
	EvLauncher = "launcher" // the launcher process started (LauncherPid, Nspace: its nspace)
	EvReady    = "ready"    // the job is held (or running, Hold "none") and its proc table read
	EvReleased = "released" // reply to OpRelease
	EvKilled   = "killed"   // reply to OpKill
	EvDetached = "detached" // reply to OpDetach, written just before the tool exits
	EvEnd      = "end"      // the application job ended; Status is its exit status
	EvLost     = "lost"     // the connection to the launcher was lost
	EvError    = "error"    // a request failed; Error says which call and what PMIx said
	EvDaemons  = "daemons"  // reply to OpDaemons: the daemons' job (Nspace) was spawned
	// EvDaemonsEnd: the daemons' job ended (Nspace, Status), or the tool can no longer tell.
	EvDaemonsEnd = "daemonsEnd"
)

// Request is one line on the tool's standard input.
type Request struct {
	Op          string   `json:"op"`
	Seq         uint64   `json:"seq,omitempty"`         // the request's number, echoed in its reply
	Launcher    string   `json:"launcher,omitempty"`    // absolute path of mpirun, prterun, prun...
	Args        []string `json:"args,omitempty"`        // launcher arguments before the program
	Program     string   `json:"program,omitempty"`     // the application
	ProgramArgs []string `json:"programArgs,omitempty"` // its arguments
	Env         []string `json:"env,omitempty"`         // the launcher's whole environment; empty: the tool's
	Dir         string   `json:"dir,omitempty"`         // the launcher's working directory; empty: the tool's
	Hold        string   `json:"hold,omitempty"`        // HoldExec, HoldInit or "" (no hold)
	Pid         int      `json:"pid,omitempty"`         // attach: the launcher's pid
	Nspace      string   `json:"nspace,omitempty"`      // attach: the job; "": the launcher's one application job
	Signal      int      `json:"signal,omitempty"`      // kill: the signal number
}

// Event is one line on the tool's file descriptor 3.
type Event struct {
	Ev          string `json:"ev"`
	Seq         uint64 `json:"seq,omitempty"` // in a reply: its request's Seq; 0 in other events
	LauncherPid int    `json:"launcherPid,omitempty"`
	Nspace      string `json:"nspace,omitempty"`
	Hold        string `json:"hold,omitempty"`
	Procs       []Proc `json:"procs,omitempty"`
	Status      int    `json:"status"`
	Error       string `json:"error,omitempty"`
	Version     string `json:"version,omitempty"` // the PMIx library version of the tool
	// Gone, in the error of a launch whose job ended before it was ready, names the ranks whose
	// end ended it; Ended says that the launcher reported the job's end, with Status. In an
	// end event, Gone is the rank the launcher named as the cause of the job's end (none when
	// it named none), and Message the launcher's own words on that end.
	Gone    []Proc `json:"gone,omitempty"`
	Ended   bool   `json:"ended,omitempty"`
	Message string `json:"message,omitempty"`
}

// Proc is one rank of the job as the launcher's proc table gives it.
type Proc struct {
	Rank       int    `json:"rank"`
	Host       string `json:"host"`
	Pid        int    `json:"pid"`
	Executable string `json:"executable"` // absolute: from the table, or /proc/PID/exe on the tool's host
	state      int    // the launcher's state of the process (pmix_proc_state_t), in the tool
}

// JobEndedError is the error of a launch whose job ended before it was ready: Gone are the
// ranks whose end ended it (by rank, with host and pid where the proc table gave them), as
// the launcher named them or as the tool saw them end. Ended says that the launcher reported
// the job's end, with Status.
type JobEndedError struct {
	Msg    string
	Gone   []Proc
	Ended  bool
	Status int
}

func (e *JobEndedError) Error() string { return e.Msg }

// Ready describes a job the tool holds (or, for Hold "none", watches).
type Ready struct {
	LauncherPid int    // the launcher's pid
	Nspace      string // the application's nspace
	Hold        string // HoldExec, HoldInit or HoldNone
	Procs       []Proc // by rank
	Version     string // the tool's PMIx library version
}
