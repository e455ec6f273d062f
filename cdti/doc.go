// Package cdti speaks the Blue Gene/Q CDTI tool-control protocol, version 6, byte for byte as
// IBM's toolctld and compute-node kernel (CNK) do, plus a few extensions for targets that are not
// BG/Q. It holds the wire layer of hpcdap: the codec, a tool-side Client and an agent-side Server
// framework. It uses only the standard library and knows nothing of Linux or ptrace.
//
// # Messages
//
// Every message is a struct that embeds Header (the 32-byte MessageHeader plus the toolId that
// starts every tool message): ErrorAck, Attach, AttachAck, Detach, DetachAck, Query, QueryAck,
// Update, UpdateAck, SetupJob, SetupJobAck, Notify, NotifyAck, Control, ControlAck, and the
// extension messages Hello and HelloAck (and those of the tree: GatherStacks, Collective,
// Session and their acks, and Exits). Encode turns one into bytes; DecodeMessage turns bytes
// back (types it does not know come back as *RawMessage). All integers are big-endian at the
// offsets of IBM's header; padding is zero. ReadFrame and WriteFrame move whole messages over a
// byte stream, reading exactly header.length bytes and refusing lengths outside [32, 65536].
//
// # Commands
//
// A Query or Update carries up to 16 commands; each command type (GetMemory, SetBreakpoint, ...)
// is a struct implementing Command, and each ack type (GetMemoryAck, ...) a struct implementing
// Ack. A command knows its type, its encoded size and the size of the ack it will produce, so
// that requests can be sized before they are sent. DecodeCommand and DecodeAck find the decoder
// of a type number in the registry; CommandTypes lists the registered types. Unknown command
// types decode as *RawCommand, unknown ack types as *RawAck, and the 8-byte ack CNK sends for a
// failed command as *BareAck.
//
// Ack payloads are located through their descriptors, never by position (CNK hands out ack
// space in whatever order its hardware threads run). The header's return code is read first: a
// failed Query or Update has no commands. Descriptors that point outside the message, overlap, or
// claim less than the command's fixed ack are errors (wrapping ErrMalformed); decoders never
// panic.
//
// # Building requests
//
// Builder accumulates the commands of one message and refuses what would make it wrong: a 17th
// command, a command of the other message kind, anything after an action command
// (ContinueProcess, StepThread, ReleaseControl: at most one per Update, and last), a memory
// transfer over MaxMemorySize, or a message whose request or predicted ack exceeds
// MaxRequestSize. Encode applies the same rules to Query and Update; EncodeLax skips them, to
// test agents with requests a careless tool might send. Batch splits any list of commands into
// as many valid messages as needed, in order; SplitGetMemory and SplitSetMemory cut memory
// transfers into MaxMemorySize pieces.
//
// Size policy. Payloads start at offset 304, each at a multiple of 8; a descriptor's length is
// the command's own. Requests and their predicted acks (304 + Σ ROUND8(ack sizes)) are kept at or
// below SmallMessageDataSize (65472), the bound Dyninst asserts, rather than the 65536 of the raw
// buffers; a single GetMemory or SetMemory of 65024 bytes still fits. The Server answers within
// CNK's own 65536-byte ack buffer: an ack that does not fit gets CmdAllocErr without payload, as
// in CNK.
//
// # Client
//
// A Client is the tool side of one connection: Dial (TCP to an hpcdap agent, then Hello) or
// NewClient (any net.Conn, e.g. a toolctld Unix socket). Requests are pipelined and matched to
// acks by sequence id; ClientOptions.Serialize keeps one request outstanding instead, as toolctld
// serializes anyway. Every call takes a context; ClientOptions.Timeout bounds calls whose context
// has none. Convenience calls: Attach, Detach, Control, Query, Update, QueryBatch, UpdateBatch,
// ReadMemory and WriteMemory (any size), ThreadList, and the extension calls TargetInfo,
// RegisterSet, SetRegisterSet, Traceback, CallFunction, GatherStacks and Collective. RoundTrip
// sends any request message.
//
// Notifications. Notify messages arrive unsolicited among the acks and are delivered, in order,
// on Client.Notifications. The reading goroutine never blocks on that channel: notifications wait
// in a queue of up to ClientOptions.NotifyLimit entries, and a receiver that lets the queue
// overflow gets the connection failed with ErrNotifyOverflow rather than a silent loss. When the
// connection fails, queued notifications are still delivered before the channel closes; Close
// discards them.
//
// ErrorAck. toolctld may echo a stale header in an ErrorAck, so its sequence id is not trusted:
// an ErrorAck fails every request outstanding on the connection (with Serialize, exactly the one
// in flight), and acks that arrive afterwards for those requests are discarded. An ErrorAck with
// nothing outstanding (toolctld's "too many connections") is reported as the cause when the
// connection then fails.
//
// Errors name the operation and the object: "cdti: query rank 3: read: connection reset by
// peer". They are *OpError values wrapping the cause: a transport error (a lost connection fails
// every waiter), a *ReturnCodeError for a message-level failure (errors.Is(err,
// cdti.ToolControlConflict) works, since ReturnCode is an error value), a *CommandError for a
// failed command (errors.Is(err, cdti.CmdAddrErr)), or ErrNotSupported.
//
// # Server
//
// Server is the agent side: it accepts connections, requires each to prove the session token
// by challenge and response before anything else (two Hellos, see Hello and HelloProof: each
// side proves it holds the token with an HMAC over the other's nonce, the agent first, and the
// token never travels), and hands decoded requests to a Handler that
// implements some of AttachHandler, DetachHandler, ControlHandler, QueryHandler, UpdateHandler,
// Checker, MessageHandler, OpenHandler and CloseHandler (or RelayHandler, which receives the raw
// frames so that an agent on a real BG/Q can forward them unaltered to toolctld and send the
// answers back with Conn.SendEncoded). Handlers receive command structs and
// return ack structs; the framework encodes the acks in descriptor order with 8-aligned payloads,
// answers unsupported message types with ErrorAck(UnsupportedType), unknown or misplaced commands
// with an 8-byte CmdInval ack, more than 16 commands with ToolNumberOfCmdsExceeded and two action
// commands with ToolConflictingCmds. Conn.Notify sends notifications from any goroutine;
// Conn.AfterReply defers work until the current ack is written (CNK resumes the process after its
// UpdateAck). CloseHandler learns when a connection ends: the agent must then drop that tool. A
// malformed frame closes only its own connection.
//
// # Routing through a tree of agents
//
// Router is the handler of an agent of the tree overlay. A CDTI message already names its
// destination: the header's rank, which lives on exactly one node. So no extension is needed to
// route: an interior agent knows the ranks of every agent below it (Route), answers the
// messages for its own ranks with its local handler (Conn.HandleWith, exactly as a Server
// would), and forwards the others unaltered, byte for byte, to the child on the way, over one
// authenticated connection per upstream connection (a child thus sees one tool per tool, and a
// tool that leaves releases its ranks everywhere); whatever the child sends back, acks and
// Notify, goes up unaltered. Sequence ids are the tool's own, unique on its connection, so acks
// need no rewriting. A message for a rank no agent below serves goes to the local handler,
// which refuses it as a CNK would (ToolRankNotFound); a Router without one (the tool's own,
// DialTree's) refuses it so itself.
//
// Sessions. Each link names, right after its Hello, the tool session it relays (Session: a
// random id per tool connection at the root, the same on every link below it). When the tool
// leaves, each Router says farewell on its links (Session with SessionEnd) before closing
// them, so the agents below drop the tool at once (its ranks are released, nothing stays
// stopped or trapped). A link that breaks without that farewell (the agent above was killed)
// is held by the agent below, with the tool's attachments, stops and traps as they are and
// the Notify messages it sends meanwhile kept, for Server.ResumeGrace (10 s): an agent above
// that names the same session on a new authenticated connection resumes it (SessionAck
// resumed; the kept notifications come first), and only a link not resumed in time drops
// the tool as after its exit. A connection the agent itself closes (Conn.Close) is not held.
//
// Exits. A job's end is reduced on the way up too: a Conn whose tool said extension version 3
// coalesces the Termination Notifies given to it (its own agent's, and those its Router
// relays) and the Exits relayed to it into one Exits, ranks grouped by wait status as strided
// ranges. The first report waits at most Server.ExitDelay (2 ms) for others; any other message
// written on the connection, and its Close, send what waits first, so that a report is never
// overtaken. The Client hands each rank's Termination Notify to its receiver as before.
//
// Faults. When the link to a child breaks, the Router heals the tree for the tool connection
// it served: it dials the child again with the session (within 3 s, well inside the grace
// the child's children hold the session for), and, if the child is gone, adopts
// the child's children (dials them and resumes the session they hold), and so on down past
// any other lost agent. Only the ranks of the agents it could not reach are lost (and the
// whole subtree of an agent that answers that it dropped the session, SessionAck ended). The
// Router tells the tool at once: one Notify of kind NotifyTypeUnreachable (extension) per lost
// rank, each carrying in Lost the number of ranks of that loss, sent together before the
// answers to what was outstanding. Requests for lost ranks are answered with their own ack
// type, ReturnCode RequestFailed and errorCode ErrorCodeUnreachable (113, EHOSTUNREACH), so
// the Client reports "cdti: query rank 2: RequestFailed ..." for exactly those ranks;
// GatherStacks names them in Unreachable. Requests that were on their way through the broken
// link are answered, for the ranks the healed tree still reaches, with RequestFailed and
// ErrorCodeTimedOut (110): their answers were lost, the request perhaps applied; later
// requests reach those ranks through the adopting agent. A request that meets a link being
// healed (or dialed) waits for it without holding up the connection's other requests, then
// goes its way in the healed tree; the requests of one rank that wait so, and those for that
// rank that come while they wait, keep their order (but for one that meets another broken
// link once healed; collectives are not queued with them). Once a held connection is
// resumed, what is still read on its old transport (a farewell of the lost agent above, say)
// is dropped. A child that cannot be dialed at all
// (for a tool that connects afterwards) is bypassed the same way: its children are dialed
// directly by the nearest live ancestor, and only its own ranks are unreachable. An agent
// whose own upstream connection broke does not heal below it: the agents above adopt its
// children. The tool reaches the root through a Router of its own (DialTree), in its own
// process over an in-memory pipe, which heals the tree when the root is lost as any Router
// does: the root's ranks alone are lost. Its link to the root names the session with
// SessionUnheld: the root names it below but does not hold its own connection, so that a tool
// that dies without a farewell is dropped at once everywhere, as if connected directly.
//
// # Extensions
//
// Targets that are not BG/Q need facts the Power-specific commands cannot carry. The extensions
// use type numbers BG/Q never assigned, so a real CNK answers the commands with CmdInval and
// toolctld answers the messages with ErrorAck(UnsupportedType); the Client reports a CmdInval
// answer to an extension command as ErrNotSupported, which tells a tool that it faces BG/Q.
// ExtensionVersion (2) is exchanged in Hello and HelloAck.
//
//	type  name               in      layout after the 40-byte ToolMessage or the 8-byte ToolCommand
//	5100  Hello              message extVersion u32 @40, nonce length u16 @44, proof length u16 @46,
//	                                 nonce @48 (≤ 32), proof after it (≤ 64), padded to 8; the first Hello
//	                                 carries the tool's nonce, the second its proof
//	5101  HelloAck           message extVersion u32 @40, node length u16 @44, nonce length u8 @46,
//	                                 proof length u8 @47, node name @48 (≤ 1024), nonce, proof, padded to 8;
//	                                 to the first Hello: the agent's nonce and proof; to the second: the
//	                                 node name, or ReturnCode ToolAuthorityError = wrong proof (the agent
//	                                 then closes)
//	5102  GatherStacks       message max frames u32 @40 (0: 400), 4 bytes padding: the merged main-thread
//	                                 stacks of every stopped rank served by the agent and every agent below
//	5103  GatherStacksAck    message counts u32 @40 (contributing rank ranges), @44 (unreachable rank ranges),
//	                                 @48 (root nodes), flags u32 @52 (1 more parts follow); from @56 the rank sets as strided ranges
//	                                 {lo u32, hi u32, stride u32} (lo, lo+stride, …, hi; sorted, spans
//	                                 disjoint; each list padded to 8), contributing then unreachable; then
//	                                 the nodes in preorder, each {pc u64, child count u32, range count u32,
//	                                 ranges}; a tree over 64 KiB is sent as several, each the tree of the
//	                                 ranks of an interval, all but the last flagged "more" (the Client
//	                                 merges them); only a single rank's tree over 64 KiB is answered
//	                                 RequestFailed with its size as errorCode
//	5104  Collective         message flags u32 @40 (1 quiet stop), rank range count u32 @44, request length u32 @48,
//	                                 pad; from @56 the rank set as strided ranges (as in 5103), padded to 8; then
//	                                 a whole Query or Update message (its header zero but type and length): the
//	                                 commands to apply to every rank of the set; a set of at most 4,194,304 ranks
//	5105  CollectiveAck      message flags u32 @40 (1 more parts follow, 2 the replies are UpdateAcks), unreachable
//	                                 range count u32 @44, group count u32 @48, pad; from @56 the unreachable ranks'
//	                                 ranges, padded to 8; then the groups, each {range count u32, reply length u32,
//	                                 ranges padded to 8, the reply: a whole QueryAck or UpdateAck whose header holds
//	                                 only type, return code, error code and length, padded to 8}; a failed answer
//	                                 is the ToolMessage alone
//	5106  Session            message flags u32 @40 (1 end: the tool left), pad, session id @48 (16 bytes);
//	                                 sent by a Router right after the Hello of a link (flags 0), and
//	                                 before it closes the link when the tool leaves (flags 1, no answer)
//	5107  SessionAck         message state u32 @40 (0 new: the session starts here, 1 resumed: this
//	                                 connection took over the held one, 2 ended: the agent dropped the
//	                                 session and closes), pad
//	5108  Exits              message group count u32 @40, pad; from @48 the groups, each {job id u64, tool id u32,
//	                                 wait status u32, range count u32, pad, the ranks as strided ranges (as in
//	                                 5103) padded to 8}: the Termination Notifies of those ranks, sent to a tool of
//	                                 extension version 3 or later (never answered)
//	1101  GetTargetInfo      Query   (threadID only)
//	1102  GetTargetInfoAck           ELF e_machine u16 @8, byte order u8 @10 (1 LSB, 2 MSB), pointer size u8 @11,
//	                                 page size u32 @12, pid u32 @16, path length u32 @20, executable path @24
//	1103  GetRegisterSet     Query   set u32 @8 (1 general, 2 float), max length u32 @12 (0: 4096)
//	1104  GetRegisterSetAck          set u32 @8, length u32 @12, native register-set bytes @16
//	1105  GetTraceback       Query   max frames u32 @8 (0: 400, at most 4000)
//	1106  GetTracebackAck            frame count u32 @8, frames @16: {pc u64, cfa u64}, innermost first
//	1107  GetLinkMap         Query   dynamic section address u64 @8 (0: the agent finds it), its size u32 @16,
//	                                 max length u32 @20 (0: 16 KiB, at most 56 KiB), r_debug address u64 @24 (0: unknown)
//	1108  GetLinkMapAck              r_debug u64 @8, r_brk u64 @16, r_state u32 @24, entry count u32 @28 (at most 4096),
//	                                 entries @32: {l_addr u64, node u64, name length u32 @16 (at most 4096), name @24,
//	                                 padded to 8}, in link-map order
//	1109  EvaluateValue      Query   format u8 @4 (a bpcode.Format), module count u16 @6 (≤ 256), program length
//	                                 u32 @8 (1 to 4096), names length u32 @12 (≤ 16384), program @16, then the
//	                                 module names (u16 length, bytes; "" the executable): thread 0 is the
//	                                 process's leader; the value printed, or CmdParmErr where the program
//	                                 fails (stopped elsewhere than its place checks say, unreadable memory,
//	                                 a module not in the link map)
//	1110  EvaluateValueAck           text length u32 @8 (at most 256), text @16
//	1111  GetModuleMemory    Query   length u32 @4 (at most 65024), offset u64 @8, spec access u32 @16, name length
//	                                 u16 @20 (at most 4096), module name @24 ("" the executable): reads at the
//	                                 module's load bias (from the link map) plus the offset; CmdParmErr for a
//	                                 module not in the link map or unreadable memory, CmdLngthErr for a
//	                                 length over the limit
//	1112  GetModuleMemoryAck         address read u64 @8, length u32 @16, data @20 (as GetMemoryAck; 24 + length bytes)
//	1113  ListThreads        Query   (threadID only): GetThreadList's list in an ack of its own length
//	1114  ListThreadsAck             entry count u32 @8 (at most 1024), entries @16: {tid u32, info u32}, as
//	                                 GetThreadListAck's
//	1201  SetRegisterSet     Update  set u32 @8, length u32 @12, native register-set bytes @16
//	1202  SetRegisterSetAck          (threadID only)
//	1203  CallFunction       Update  entry u64 @8, toc u64 @16, timeout ms u32 @24 (0: 10 s, ≤ 3,600,000), return kind u8 @28,
//	                                 argument count u8 @29 (≤ 32), data length u16 @30 (≤ 4096),
//	                                 arguments @32 (16 bytes each: kind u8, 7 bytes padding, value u64), data after them
//	1204  CallFunctionAck            outcome u32 @8 (1 returned, 2 signaled, 3 timed out, 4 thread exited),
//	                                 signal u32 @12, value u64 @16, pc u64 @24
//	1205  StopProcess        Update  (threadID only): stop every thread without a signal
//	1206  StopProcessAck             stopping u32 @8: 1 = a Notify(SIGSTOP, reason 100 Interrupt) follows,
//	                                 0 = the process is already suspended or a notification is on its way
//	                                 2 = stopped and reported by this ack (a quiet collective stop): no Notify
//	1207  SetTrapCondition   Update  address u64 @8, load bias u64 @16, hits so far u64 @24, site length u32 @32
//	                                 (≤ 16384, 0: remove), site @40: what the agent decides at the trap
//	                                 (package bpcode's encoding)
//	1208  SetTrapConditionAck        hits u64 @8: the count of the condition replaced or removed
//	1209  StepRange          Update  max steps u32 @4 (0: 4096, at most 4096), lo u64 @8, hi u64 @16 (lo < hi):
//	                                 StepThread, then steps on while lo ≤ pc < hi, not at a call or a
//	                                 tool's breakpoint; malformed: CmdParmErr (unknown: CmdInval)
//	1210  StepRangeAck               (threadID only)
//
// GatherStacks is the collective of parallel stacks: it goes down the tree once and comes back
// reduced. Each agent unwinds the main thread of each of its stopped ranks (as GetTraceback),
// merges the stacks into a prefix tree from the outermost pc with a rank set at every node
// (StackTree), merges its children's trees into it, and answers one tree: its
// size follows the distinct stacks, not the ranks. The ranks of agents that could not be
// reached are named in Unreachable.
//
// Collective is the collective of run control and breakpoints: one Query or Update command
// list (a StopProcess, a ContinueProcess, SetBreakpoint or ResetBreakpoint with the reading
// of the originals, GetThreadList, GetMemory, ...) applied to every rank of a set, through the
// whole tree in one message. Each agent hands its own ranks of the set to its ordinary handler,
// rank by rank, exactly as it would answer the Query or Update of that rank (control authority,
// CNK semantics, errors and all; what the handler defers until after its ack runs after the
// collective's answer is sent), and forwards the message once to each child whose subtree
// holds ranks of the set, the set cut to that subtree. On the way up the answers are reduced:
// ranks whose replies are identical form one group (the reply once, the ranks as strided
// ranges), the thread id of a command that named thread 0 being compared and carried as 0;
// failed ranks group by their error (a rank no agent serves: ToolRankNotFound, from the agent
// where its way ends); the ranks of a child that did not answer in time form a group of
// RequestFailed with ErrorCodeTimedOut (110), and those of a lost agent are named in
// Unreachable. So the tool receives O(distinct outcomes), not O(ranks). An answer over 64 KiB
// (distinct thread lists of many ranks, say) is sent as several CollectiveAcks of the same
// sequence id, every one but the last flagged "more", and the Client puts them together: a
// collective never fails for its size. With the flag quiet stop, a StopProcess's stop is
// reported in the answer (StopProcessAck stopping 2: the process is stopped, the tool's
// notification of it in flight but never sent) instead of by one Notify per rank; a stop that
// does not complete within the collective's wait is notified as usual, and a plain StopProcess
// of a process stopped quietly sends its Notify after all (a tool that lost the answer gets
// its stop). A BG/Q toolctld or CNK answers the message with ErrorAck(UnsupportedType): the
// tool then sends the commands rank by rank.
//
// A Hello proof is HelloProof(token, role, the peer's nonce, one's own nonce): HMAC-SHA256 keyed
// by the session token over the role ("hpcdap agent" or "hpcdap tool"), a zero byte and both
// nonces. The tool checks the agent's proof before it sends its own.
//
// Register sets are the operating system's own layouts in the target's byte order: for
// RegSetGeneral, x86_64 user_regs_struct or ppc64 pt_regs; for RegSetFloat, x86_64
// user_fpregs_struct or the ppc64 floating-point registers and FPSCR. A set larger than the
// request's bound is answered with CmdLngthErr (Client.RegisterSet then asks again with
// MaxRegisterSetSize). In a traceback, frame 0's pc is the thread's program counter and every
// outer pc is a return address; cfa is the frame's canonical frame address (or its frame address
// where the agent walks a back chain).
//
// GetLinkMap has the agent walk the dynamic linker's link map next to the process (r_debug,
// found through DT_DEBUG in the executable's dynamic section, then every link_map entry and its
// name), so that a tool learns a process's shared objects with one command instead of a memory
// read per entry and name: one Query of GetAuxVectors (the executable's load bias) and
// GetLinkMap. A map being changed shows in r_state; a map the agent cannot read, or whose
// answer would be over the request's bound, is answered with an error code, never cut short
// (see GetLinkMap).
//
// CallFunction runs a function of the program in one stopped thread, for a debugger's
// expressions (print f(2)): the agent saves the thread's registers, places the arguments as
// the machine's calling convention wants them (kinds: 1 an integer-class word, 2 a float's
// bits, 3 a double's bits, 4 the address at which the agent copied the data onto the
// thread's stack plus the value as an offset), makes the program's entry point the return
// address with a trap planted there, runs that thread alone until the trap, and restores every
// register. A signal in the function, or the timeout (the thread is then interrupted), ends the
// call the same way, restored; the ack's outcome says which, with the signal and the pc. The
// value is the integer return register, or the bits of the float or double return value, as
// the return kind (0 none, 1 integer, 2 float, 3 double) asks. The process stays suspended as
// the tool left it and no Notify is sent for the call. On Power, entry is the code address
// (ELFv2: the global entry point, also put in r12) and toc, when not 0, the ELFv1 TOC pointer
// for r2. A BG/Q CNK answers CmdInval: a tool then cannot call functions.
//
// SetTrapCondition moves a breakpoint's decision next to the process: the agent evaluates the
// site's condition (a bpcode program over the trapped thread's registers and the process's
// memory) at every hit of the tool's trap at the address, counts the hits where it holds
// against the hit condition, formats a log point's message and sends it as the process's
// output, and reports a Notify only for a hit that stops. A condition the agent cannot
// evaluate (a bad pointer) stops with the extension reason SignalConditionError (101). A real
// CNK answers CmdInval: the tool then decides every hit itself.
//
// EvaluateValue is a value compared across ranks: the tool compiles an expression for one
// frame of one rank's stack into a bpcode program that recovers that frame's registers from
// the thread's (the call frame information of every frame below it, compiled in) and checks
// every frame's pc on the way, its addresses relative to the load biases of the modules it
// names (which the agent reads from the process's link map, so that ranks whose modules are
// loaded at different addresses share it), and sends the same program to many ranks in one
// Collective; the ranks stopped at that place answer with their value, grouped by value on the
// way up, and the others fail the check. A real CNK answers CmdInval: the tool then reads each
// rank itself.
//
// ListThreads and GetModuleMemory serve the thread lists of a stop, read for every rank of a
// connection with one Collective: ListThreads answers GetThreadList's list in an ack as long
// as the list (GetThreadListAck is always 8 KiB, which a Collective would carry for every
// rank), and GetModuleMemory reads at an offset from a module's load bias, which the agent
// finds in the process's link map by name, so that the same command list reads the same data
// in ranks whose layouts address-space randomisation made different (the tool replays there
// the reads one rank made to name its threads). Its ack says the address read, which the tool
// checks against its own view of the rank's modules. A real CNK answers CmdInval to both.
//
// Breakpoint instructions on targets that are not Power. SetBreakpoint.Instruction and
// ResetBreakpoint.Instruction are 32-bit fields sized for Power's fixed-width instructions. On
// other targets they carry the trap (SetBreakpoint) or the original instruction bytes
// (ResetBreakpoint) in their low-order bytes, as an integer in the target's byte order; the number
// of bytes is implied by the target's architecture (GetTargetInfoAck.Machine): on x86_64 one byte,
// the trap being 0xCC and the original the one byte it replaced. InstructionSize,
// InstructionBytes and InstructionValue convert between the field and the bytes in memory.
package cdti
