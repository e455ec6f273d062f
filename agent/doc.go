// Package agent is hpcdap's node daemon: it controls the ranks of one node and serves them to
// tools over the Blue Gene/Q CDTI protocol v6 with the Compute Node Kernel's semantics
// (shared/spec/cdti-v6.md §8–9), through a target.Process back end (target/ptrace on Linux).
//
// # Planes and authentication
//
// One TCP listener serves both planes (Serve): a connection whose first byte is 0x05 (the
// ToolctlService id that starts every CDTI header) speaks CDTI, any other the JSON-RPC 2.0
// management plane (hello, ranks, health, launcher, ranks.subscribe, output.subscribe,
// shutdown; see "Management calls" below and mgmt.go). Both are authenticated by the
// session token, which the agent takes from its environment (HPCDAP_TOKEN), never from its
// command line. Both planes prove the token by challenge and response, never sending it, and
// the agent proves it first: a CDTI connection opens with two Hellos (see the cdti package),
// a management connection with the calls "hello.challenge" and "hello"; anything else is
// answered with a refusal and the connection is closed.
// Spawned ranks do not inherit the token. Until it has authenticated, a connection must finish
// within 10 s of its accept, may send one message of at most 4 KiB, and is one of at most 64
// such connections (more are closed at once). Running out of descriptors while accepting
// (EMFILE, ENFILE) or a connection aborted before its accept only delays the next accept.
//
// # Rendezvous (--connect)
//
// An agent started by a workload manager does not know where its front end listens until told:
// `hpcdap agent --connect HOST:PORT` listens on an ephemeral port of the one local address its
// route to HOST uses (loopback for a front end on the same host, never every interface), then
// dials HOST:PORT. It calls agent.challenge with its nonce, and goes on only if the front end
// answers with its own nonce and a proof of the session token (cdti.HelloProof); it then sends
// one JSON-RPC notification, agent.register, with RegisterParams: its proof of the token (so
// that the front end can tell its agents from strays; the token itself never travels), the
// node name, the address it listens on, its pid and its ranks. It then hangs up; the front end
// connects to the announced address for both planes, authenticating as usual. Registration is
// retried with backoff for up to Config.RegisterTimeout (2 min), so that agents may start
// before the front end, and then fails with an error naming the front end.
//
// # Modes
//
// Spawn mode (SpawnRanks): each rank is started held before its first instruction, at the
// entry point of ld.so: loaded but not started, as the CNK's ProcessState_Active. A rank starts
// when a tool is granted control of it: the Control message's sndSignal is delivered at the
// first ld.so instruction (DynamicNotifyDLoader, where it already stands) or at the program's
// entry point AT_ENTRY (DynamicNotifyStart, reached through an internal breakpoint that is
// removed when hit); with sndSignal 0 the rank simply starts. A rank whose last tool leaves
// before it was started starts then, so that no job stays held. The agent is the ranks' parent
// and keeps tracing them (at no cost while no signal arrives) to report their exit status.
//
// Attach mode (AttachRanks, from a launcher's rank↔pid table): a process is traced only while
// at least one tool is attached to it: the first Attach traces every thread (each is stopped
// and let run again), the last Detach lets the process go untraced, as if never touched.
//
// Launcher spawn mode (SpawnSpec.Launcher, `hpcdap agent --launcher -- mpirun ...`): the one
// process spawned is a job's launcher (mpirun, srun, mpiexec.hydra) driven over CDTI for MPIR.
// It is spawned and served exactly as a spawned rank (rank --first-rank, 0 by default), but
// without HPCDAP_RANK and HPCDAP_NP in its environment, which every MPI rank would inherit
// and read as its own; the management call ranks marks it "launcher": true, and the call
// launcher describes it.
//
// Fork/exec following (FollowExec, `hpcdap agent --follow-exec PROGRAM -- mpiexec.hydra -n 4
// PROGRAM`): for a launcher without usable MPIR symbols (Debian's MPICH hydra). The launcher
// is spawned with its forks followed; processes that exec PROGRAM become ranks, held right
// after that exec (like spawned ranks: loaded, started by a tool's Control), numbered by
// PMI_RANK; everything else is let go once PMI_SIZE ranks are caught, but the launcher,
// which stays traced to report its exit. Ranks appear over time: ranks lists those caught so
// far, and ranks.subscribe announces each one (see follow.go and launcher.go).
//
// # Kill on exit (--kill-on-exit)
//
// By default an agent that ends lets every process go, running and without traps. With
// Config.KillOnExit (`hpcdap agent --kill-on-exit`) what it spawned (ranks, a launcher, a
// followed launcher and its proxies) is killed instead when its front end is gone: when the
// last authenticated front-end connection (CDTI or management) closes, on SIGTERM, SIGINT or
// SIGHUP, and when the agent's parent dies (PR_SET_PDEATHSIG; the signal comes when the
// parent thread that started the agent ends). A launcher is sent SIGTERM first so that it
// ends its job, then SIGKILL after 5 s. If the agent is killed outright, processes spawned
// through target/ptrace carry PTRACE_O_EXITKILL and the kernel kills them. An explicit
// management shutdown keeps its own kill setting; attached processes are never killed.
//
// # Management calls
//
//	hello.challenge  {nonce}                   → {nonce, proof}: the agent's nonce and proof of the token
//	                                             (first call; cdti.HelloProof, role "hpcdap agent")
//	hello            {proof, client}           → HelloResult (second call: the caller's proof, role
//	                                             "hpcdap tool", authenticates; the token never travels)
//	ranks            {}                        → [RankInfo] (the ranks served, by rank)
//	health           {}                        → HealthResult
//	launcher         {}                        → LauncherInfo, or an error when the agent has no launcher
//	ranks.subscribe  {}                        → {}, then notifications "rank" (RankInfo): every
//	                                             current rank, then each new one once
//	output.subscribe {after}                   → {}, then notifications "output" (below)
//	shutdown         {kill}                    → {}, then the agent ends, and tells the agents below
//	                                             it to end the same way
//	tree             {children: [cdti.Route]}  → {}: the agents below this one in the tree overlay,
//	                                             each {addr, ranks, children}; CDTI for their ranks is
//	                                             then relayed to them (cdti.Router, see tree.go), and
//	                                             the answer comes once the agent holds a management
//	                                             connection to each (mgmt.Subtree): their output comes
//	                                             to this agent's subscribers, and they end with it
//
// An agent counts the management connection of the agent above it (hello client
// mgmt.ClientAgent) as its front end's; when one breaks without a shutdown (that agent lost)
// it still counts for cdti.DefaultResumeGrace, in which the nearest live ancestor connects
// in its place.
//
// A job-control stop (how slurmstepd holds a task at its exec) is kept under the agent: a
// Control sndSignal or SendSignal to a process in one is reported at once (the back end
// wakes a thread to take it) and one Notify follows; continuing a SIGSTOP notification puts
// the process back into its job-control stop, from which SIGCONT (SendSignalToProcess)
// releases it.
//
// # Output capture (--capture-output)
//
// By default every spawned rank shares the files SpawnSpec.Stdio names (the command's stderr
// or --output FILE). With SpawnSpec.CaptureOutput (`hpcdap agent --capture-output`) each rank
// gets pipes of its own as fd 1 and fd 2 (stdin stays /dev/null), which the agent drains
// continuously, so a rank never blocks on its output whoever reads it. The management call
// output.subscribe (params {}, result {}; hello then lists "output" in capabilities, and
// without capture the call fails) makes a connection a subscriber: after the result it gets
// JSON-RPC notifications "output" (OutputParams) on that connection:
//
//	{"rank":3,"stream":"stdout","text":"rank 3 of 4\n","seq":1}
//	{"rank":3,"stream":"stdout","eof":true,"seq":2}
//
// seq numbers a rank's chunks from 1 (both streams together); an agent above relays the
// chunks of the ranks below it with their numbers (and keeps 64 KiB of history per such
// rank). A subscriber that connects again, or to another agent after a loss in the tree,
// passes output.subscribe {"after": {"3": 17}}: the history it gets starts after chunk 17 of
// rank 3, and the drop notice comes only if chunks it lacks were dropped, numbered as the
// last of them.
// text is what one read of the pipe returned (at most 64 KiB) as valid UTF-8: each invalid
// byte becomes U+FFFD, and an incomplete multi-byte sequence at the end of a read is held back
// and completed by the next read, so a character split across writes arrives whole. eof comes
// once per stream when the pipe closes, after all of that stream's text, so that a front end
// can print everything before it reports the rank's exit (which reaches it on CDTI). The
// agent keeps the last 1 MiB of every rank's output; each new subscriber first gets that
// history (rank by rank, in order, the eof markers included), preceded by one
// "[hpcdap: N bytes of output dropped]\n" chunk for a rank whose older output was discarded,
// and then every later chunk. Each subscriber has its own queue; one whose queue holds more
// than 8 MiB beyond its replay (it stopped reading) is disconnected and logged, never
// slowing the ranks or the other subscribers.
//
// # Concurrency
//
// Each process has one goroutine (proc.loop) that owns all of its CNK state: tools, control,
// threads, notifications, breakpoints, watchpoints. It handles the back end's events and runs
// the requests of the CDTI connections, which reach it as functions (proc.do) from the
// connections' goroutines; the CDTI framework (package cdti) reads and answers each
// connection's requests in order on that connection's goroutine. What the CNK does after an
// ack (resume the process, send the next Notify, tell a tool that control is available) is
// queued to the process's goroutine once the framework has written the ack, and nothing moves
// before that. Notifications are queued per connection and written by a goroutine of their
// own, so a tool that stops reading never blocks a process (past 16384 queued notifications it
// is disconnected, which drops its tools). A command that needs a running thread stopped
// (registers, watchpoints, an injected call) interrupts it and handles the process's events
// until it stops, within Config.WaitTimeout (CmdTimeout after). Every goroutine that runs agent
// code recovers from a panic: a process goroutine logs it and serves on, a connection
// goroutine closes that connection only. The test suite runs under the race detector.
//
// # Signals, notifications and continuation
//
// A signal in the notify set of the tool holding control stops every thread of the process:
// running threads are interrupted and, once all are stopped, one Notify(Signal) is sent.
// Further stops (other threads hitting breakpoints meanwhile) queue and are sent one at a time:
// ContinueProcess on the notified thread sends the next queued Notify and resumes nothing;
// the process runs again when none is left. threadID 0 names the thread last notified to the
// tool (else the leader); ContinueProcess and SetContinuationSignal must name the notified
// thread (CmdTIDinval otherwise). StepThread satisfies the notification and steps one
// suspended thread while the others stay stopped; its completion is Notify(SIGTRAP,
// StepComplete). StepRange (an hpcdap extension) steps as StepThread does and goes on stepping
// in the agent, without a word to the tool, while the pc stays in its range, is not at a call
// instruction (decoded from the original bytes under any trap) and not at a tool's breakpoint,
// and its budget of steps lasts; one StepComplete ends it, or whatever else stopped the thread.
// StopProcess, a release or a detach ends it as it ends a step. ReleaseControl continues the
// notified thread first, and answers CmdPendingNotify (keeping control) while other
// notifications are queued.
//
// StopProcess (an hpcdap extension) stops a running process for the tool holding control
// without a signal: every thread is interrupted and one Notify(SIGSTOP, Interrupt) follows,
// or, when a notification is already queued or in flight, the ack says so and nothing more is
// sent. Nothing is left in the kernel that could stop the process again later, as a SIGSTOP
// sent to a process that stopped for another reason first would be. With nothing queued, a
// tool step under way is cancelled. A back end that cannot interrupt (QEMU's stub from version
// 9) answers CmdInval, as a CNK would, and the tool signals the process instead. When
// ResetBreakpoint removes a trap's last owner, the queued notifications of
// hits of that trap are dropped: each such thread stands on the address, where the original
// instruction is again, and executes it when the process runs.
//
// Signal reasons: a hit of a planted breakpoint is Breakpoint (instAddress = the breakpoint,
// where the thread's PC is put back), a watchpoint WatchpointRead or WatchpointWrite (with the
// data address), a tool's step StepComplete, anything else Generic (instAddress = the PC).
// Exec is reported as SIGTRAP Generic at the new image's first instruction (when SIGTRAP is in
// the notify set); breakpoints and watchpoints do not survive it. New threads are traced from
// their first instruction, stopped with the process when it is suspended, and given the
// propagated watchpoints.
//
// The continuation signal, delivered to the notified thread when it runs again, defaults to:
// none for traps the tools caused (breakpoints, watchpoints, steps, and exec); none for
// SIGSTOP, which tools send to stop a process (delivering it would put the process in a
// job-control stop); the signal itself for every other signal, so that continuing delivers
// what the program was sent. SetContinuationSignal replaces it (0 suppresses). Note: the CNK
// itself defaults to 0 for every signal (ToolControl.cc: notify() sets continuationSignal = 0);
// a tool written for BG/Q that continues a SIGSEGV without SetContinuationSignal therefore sees
// the program receive it here.
//
// Signals not in the notify set, and all signals while no tool holds control, reach the
// program as if it were not traced. Traps the tools caused that nobody can be told about (a
// breakpoint hit while the controlling tool does not watch SIGTRAP, or while no tool holds
// control) are invisible: the thread executes the original instruction and goes on.
//
// # Tools and control
//
// Attach admits up to four tools per process, with distinct nonzero priorities and a nonzero
// tool id unique on the agent (RanksInNode attaches every rank or none). Control is granted if
// no other tool holds it; otherwise ToolControlConflict describes the holder, the holder gets
// Notify(Control, Conflict) describing the requester, and the requester is remembered as
// conflicting: when the holder releases, the highest-priority conflicting tool gets
// Notify(Control, Available) and must send Control again (ReleaseControl with notify Active
// asks for the same when the next holder releases). An Update needs control
// (ToolControlRequired); message-level checks follow the CNK's order (job id, rank, exiting
// process, attached tool, control, number of commands, conflicting actions); after a failed
// command, a later action command answers CmdPrevCmdFail.
//
// Nothing is lost. Detach removes the tool's breakpoints and watchpoints and releases the
// threads it held (a tool in control must release it first: ToolControlReleaseRequired). A
// tool whose connection drops is detached the same way, and more: it loses control, what it
// left suspended runs on, and its queued notifications are dropped (the threads keep their
// continuation signals). A connection relayed by the agent above (it names a tool session,
// see cdti's Session) that breaks without that agent's farewell is not dropped at once: it is
// held as it is for an agent further up to resume, and dropped only if none does within 10 s.
// When the last tool leaves an attached process, it is let go untraced.
// Shutdown (management "shutdown", or SIGTERM/SIGINT/SIGHUP to the command) does all of this
// for every tool and process. If the agent is killed outright, the kernel lets every thread go
// (the back end seizes without PTRACE_O_EXITKILL): no process is left stopped, but what the
// agent had done stays: int3 bytes remain in the text and kill the process with SIGTRAP when
// executed, a thread that was stopped on a breakpoint receives that SIGTRAP at once, and armed
// debug registers stay armed. With Config.Journal the agent records every trap before it plants
// it and after it removes it (journal.go), and a supervisor (`hpcdap agent --supervise`) puts
// the original bytes of the traps still planted back when the agent has died.
//
// # Commands on x86_64
//
// Memory: GetMemory reads the program's view (planted traps read as the original bytes);
// SetMemory writes read-only text too, and bytes that fall on a planted trap become its
// original instruction while the trap stays; a write into a MAP_SHARED mapping needs
// SharedMemoryAccess_Allow. Over MaxMemorySize: CmdLngthErr (GetMemory), CmdParmErr
// (SetMemory); an address outside the process: CmdParmErr.
//
// Breakpoints: SetBreakpoint plants int3; its Instruction carries the trap in its low byte
// (0xCC, the convention of cdti.InstructionBytes); ResetBreakpoint must present the original
// byte (else CmdParmErr) and removes only the requesting tool's trap. The agent keeps a
// per-process table (several tools may share an address). Continuing or stepping from a
// planted address executes the original instruction transparently, the trap staying in place
// and the other threads running on: a function's first instructions (push of a register,
// mov %rsp,%rbp, endbr64, nop) and moves between a register and a frame slot (mov to or from
// disp(%rbp)) are emulated in the registers and memory; relative jumps, conditional jumps and
// calls are carried out on the registers; any other instruction runs out of line, copied
// (its RIP-relative operand adjusted) into the thread's own slot of a scratch page the agent
// maps in the process near the code, followed by a jump back (outofline.go). What cannot run
// elsewhere (syscall, loop, traps), a thread with a signal to deliver or a watchpoint armed,
// and a tool's StepThread are single-stepped with the trap lifted and every other thread
// stopped, then the trap is put back. A thread stopped while in its slot is put back on the
// breakpoint (or after the instruction), so nobody sees a scratch address. The page stays
// mapped after a detach; an exec drops it. A hit whose breakpoint was removed while the
// thread was on its way is undone (the thread re-executes the restored instruction).
//
// Trap conditions (SetTrapCondition): at a hit of a tool's trap that carries one, the agent
// evaluates the bpcode condition in the trapped thread (its registers by DWARF number, the
// process's memory with traps shadowed), counts the hits where it holds against the hit
// condition, sends a log point's message with the rank's output (stream "log"), and reports a
// Notify only for a hit that stops; a condition it cannot evaluate stops with the reason
// SignalConditionError. A hit that does not stop goes on like a hit of an internal trap: no
// other thread is stopped unless its instruction must be single-stepped, and the thread is
// passed over the breakpoint with its resumption, in one request to the back end, from the
// registers the back end read with the stop. Config.NoTrapConditions
// answers CmdInval instead, as a CNK does.
//
// Values (EvaluateValue): the agent runs the tool's bpcode program in the process's leader
// thread (or the thread named), stopping it for the time if it runs, over the thread's
// registers and the process's memory with traps shadowed, and prints the word it leaves as
// the command's format says. The program carries its own place checks and unwinding (package
// symbols, CompileValueInStack): the agent reads no debugging information, only the link map
// for the load biases of the modules the command names, at the first the program asks for.
//
// Module-relative reads (GetModuleMemory): the agent reads at the named module's load bias
// plus the offset, as GetMemory does (traps shadowed). The biases come from one walk of the
// link map a stop while every thread is stopped, and r_debug's address, once the dynamic
// linker has set it, from the first walk of a program image (an exec forgets it); every
// entry's name is read again at every walk (a library loaded where a closed one was can
// reuse its entry and differ in its name alone).
//
// Limits: a step over a planted system call instruction that blocks keeps the other threads
// stopped until it returns; a signal to deliver to a thread on a breakpoint is delivered by
// that step (the handler runs first, returns to the breakpoint and hits it again), so a
// process whose signals come faster than such steps (a timer of 100 µs) hardly advances.
//
// CNK mode (Config.CNK, `hpcdap agent --cnk`): the agent answers as a Blue Gene/Q CNK, which
// knows CDTI v6 only: every extension command CmdInval, GatherStacks ErrorAck(UnsupportedType),
// ack payloads in a shuffled order, memory reads that show the process's own traps (a CNK keeps
// no copy of what a trap replaced: the tool brings it to ResetBreakpoint); the Hello handshake
// of the agent's transport stays. A front
// end meets there exactly what a real BG/Q gives it.
//
// Watchpoints: two pairs per thread as on the CNK (watch[0], watch[1] of the acks), each
// watching a naturally aligned power-of-two range of up to 16 bytes (two x86 debug registers);
// the CNK's checks in its order: length (CmdLngthErr), address zero, misaligned or outside the
// process (CmdAddrErr), overlap with the thread's other pair (CmdWatchConflict), no free pair
// or range too long for the hardware (CmdHwdUnavail); ResetWatchpoint of an unknown address:
// CmdAddrErr. With watchpoint policy Propagate (the default, and forced for tools older than
// protocol version 5), a watchpoint is set on every thread and on each new one. x86 cannot
// watch reads alone: a read watchpoint watches reads and writes and the agent tells them apart
// by the watched value (a write that changes it is not reported; a read, or a write of the
// same value, is). x86 traps after the access: with DAC trap mode TrapAfterDAC (Control or
// SetPreferences) instAddress is the PC after the accessing instruction; otherwise the agent
// finds that instruction by decoding backward and checking each candidate's memory operand
// against the watched range, falling back to the PC when none matches (push, string moves,
// loads that overwrite their own address register).
//
// Stacks: GetThreadData reports the core (/proc), the scheduler state (Run; Sleep or FutexWait
// for a thread blocked in a system call), the tool state (Active, Hold, Suspend, HoldSuspend),
// the stack (stackStartAddr: the high end of the mapping holding the stack pointer;
// stackCurrentAddr: the stack pointer; guard: the PROT_NONE mapping right below, if any) and
// stackInfo from a frame-pointer walk: frameAddr is where a frame's saved rbp and return
// address are (its CFA−16), savedLR the return address into its caller. GetTraceback returns
// the same walk as (PC, CFA) pairs. The agent reads no DWARF: the walk is exact for code with
// frame pointers and at a function's first instructions; a function without frame pointers
// (libc's, -O2 code) hides its caller, and the walk stops at the first implausible frame
// pointer. The front end unwinds with CFI when it needs exact frames.
//
// Others: GetThreadList (and ListThreads, sized to its list) lists every LWP, leader first;
// GetAuxVectors gives the auxiliary vector as uint64 words, its first 15 pairs and AT_NULL
// when longer than the ack holds;
// GetProcessData gives the rank, the pid as tgid, the [heap] mapping (end and break) and the
// span of the other mappings as the mmap range (end addresses inclusive, as the CNK's), and the
// time since the process started as jobTime; GetTargetInfo, GetRegisterSet and SetRegisterSet
// (user_regs_struct, user_fpregs_struct), GetTraceback and GetLinkMap (the dynamic linker's
// link map walked here, reading only) are the extensions of DESIGN decision 2; AllocateMemory and FreeMemory inject mmap (private, anonymous, read-write-execute) and
// munmap into a stopped thread, restoring its registers and code; SetPreferences is stored
// for GetPreferences (its DAC mode is used as above). The file commands serve the session's
// staging directory (Config.StagingDir) and nothing outside it. The Power register commands
// (Get/Set{General,Special,Float,Debug}Reg(s)) and the trap-handler commands answer CmdInval
// on x86_64.
//
// # Function calls (CallFunction)
//
// CallFunction (x86_64 and Power) runs a function in one stopped thread for a tool's
// expression, inside the Update, on the process's goroutine: the thread's general and
// floating-point sets are saved; the arguments go where the calling convention puts them
// (callabi.go: System V AMD64 below the 128-byte red zone with the stack 16-byte aligned at the
// call; Power ELFv1/ELFv2 below the 288-byte protected zone, with a back chain, a parameter save
// area, r2 from the descriptor on ELFv1 and r12 = the global entry on ELFv2); the return
// address is the program's entry point (AT_ENTRY, through the descriptor on ELFv1), where an
// internal trap is planted for the call (code, not the stack: stacks are not executable). Only
// that thread runs (its events are captured, as for an injected system call; other threads
// that were running keep running and their notifications queue). Breakpoints met inside the
// function are stepped over. The thread is restored (registers, continuation signal,
// breakpoint state) when the trap is reached, when a signal stops it inside the function (the
// signal is discarded and reported in the ack), and when the timeout passes (the thread is
// interrupted first); the process stays suspended and no Notify is sent. Limits: the AVX upper
// halves and Power's vector registers are not saved; a breakpoint stepped over inside a call
// is lifted for one step while threads that were running go on. The call is refused
// (CmdParmErr) before the program's entry point is reached or while the thread runs.
//
// # Power programs over the GDB remote protocol (RSPBackend)
//
// `hpcdap agent --backend rsp --emulator qemu-ppc64|qemu-ppc64le -- PROGRAM` starts each rank
// under QEMU user mode with its GDB stub (target/rsp), held at the first instruction like a
// spawned rank; `--rsp HOST:PORT` serves the one program a running stub holds (gdbserver,
// qemu -g). The same CNK semantics apply, with Power's commands (power.go): SetBreakpoint
// takes any trap word (TOOL_ISTRAP) at a 4-byte-aligned address and writes that word, and the
// SIGTRAP at it is reported as Breakpoint; ResetBreakpoint must present a non-trap word;
// GetGeneralRegs, GetSpecialRegs and GetFloatRegs (each FPR in element 0 of its QPX
// register) and their Set commands convert from and to pt_regs and the FPR set in the target's
// byte order; GetRegisterSet/SetRegisterSet exchange pt_regs and the FPR set; GetDebugRegs
// answers zeros and SetDebugReg(s) CmdHwdUnavail (no debug facility, no watchpoints: QEMU has
// none); GetTraceback walks the back chain (exact past a function's prologue and at its entry;
// a leaf's return address is taken from the link register); GetTargetInfo names EM_PPC64 and
// the byte order; DynamicNotifyStart dereferences the ELFv1 entry descriptor.
// InstallTrapHandler checks the 16 bytes at its address (an ELFv1 function descriptor) and
// injects rt_sigaction(SIGTRAP, SA_SIGINFO) into the stopped thread (`sc` and a trap written at
// its PC, the struct below the protected zone; both restored), RemoveTrapHandler puts SIG_DFL
// back; with fast breakpoints enabled (SetPreferences), a SIGTRAP at a fast-trap word
// (`twi 14,r31,0x8000|n`) is delivered to the program and no tool hears of it (ppc64.md §2.4:
// fasttrap.go), while disabled the same word is an ordinary breakpoint. Where the stub
// cannot write text (QEMU 7.2), trap words become stub breakpoints (Z0) and the log says so.
// Limits of QEMU user mode: the other threads run while one is stopped, and QEMU ≥ 9 cannot
// interrupt a running program that does not handle the interrupt signal (RSPBackend's
// InterruptSignal), so commands that must stop a running thread answer CmdTimeout there. A
// SIGSTOP for the program (SendSignal, SendSignalToProcess) interrupts it with that signal and
// is notified as SIGSTOP: sent to QEMU itself it would stop the emulator, not the program.
package agent
