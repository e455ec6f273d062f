// Package adapter is hpcdap's Debug Adapter Protocol server: it turns DAP requests into
// calls on a parallel job — one process or thousands of MPI ranks — of package debugger, and
// what the job reports into DAP events. `hpcdap dap` serves one session on stdio, `hpcdap
// serve` many sessions over TCP; both are a Server.
//
// # Sessions and jobs
//
// A Server owns what sessions share (the symbol cache: each distinct binary's DWARF is read
// once) and hands every connection to a Conn (server.go, session.go, transport.go,
// peercred.go). A Conn reads and decodes DAP messages on one goroutine — framing is
// bounded (MaxMessageSize), and malformed input of any kind is answered with an error
// response while the session goes on — and handles requests in order on another (the
// onXxxRequest methods). Each session debugs one debugger.Job, which knows nothing of DAP: it
// reports output, stops, continues, its end, changed breakpoints and ranks, the end of a
// rank's stop and new modules through the debugger.Events interface, which the session turns
// into DAP events (jobevents.go).
//
// # Handlers
//
// A handler parses its request, calls the job and formats the answer into DAP types; it takes
// none of the job's locks and reads none of its state but what the job's methods return.
// Launch and attach arguments become a plan (args.go, power.go, wlmlaunch.go) that
// lifecycle.go starts a job with; run control is runhandlers.go, breakpoints bphandlers.go,
// ranks, focus, parallel stacks and compare rankhandlers.go, memory and disassembly
// memhandlers.go, threads, stacks and scopes frames.go, variables, registers and expressions
// vars.go, exception info, modules and loaded sources info.go, source text sources.go.
// Mapping source paths between the editor and the debug information (substitutePath) is the
// session's, at the boundary (paths.go): the job sees only the debug information's paths.
//
// Frame ids and variables references are the session's handles (handles.go): each belongs to
// one rank's stop and dies when the job reports that stop over (Events.StopOver).
package adapter
