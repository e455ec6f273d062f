// Package ptrace controls Linux processes with ptrace(2) for the node agent: it implements
// target.Process for processes it spawns (held before their first instruction) or attaches to.
//
// One Tracer owns one locked OS thread through which every ptrace request goes, and reaps wait
// statuses for all of its processes (see Tracer). Tracees are attached with PTRACE_SEIZE and
// options PTRACE_O_TRACECLONE and PTRACE_O_TRACEEXEC; new threads are traced from their first
// instruction and reported stopped. Stops are told apart as the kernel reports them:
// signal-delivery stops become EventSignal (with the SIGTRAP cause from si_code and the debug
// status register); PTRACE_EVENT_STOP is an interrupt (EventStopped when the agent asked for
// it), a new thread's first stop, or a group stop, which the tracer keeps with PTRACE_LISTEN so
// that a job-control stop (SIGSTOP, SIGTSTP...) holds under the debugger as it would without
// it; PTRACE_EVENT_CLONE and PTRACE_EVENT_EXEC become EventNewThread and EventExec. A thread
// in PTRACE_LISTEN does not wake for a new signal, so Kill wakes one to dequeue and report the
// signal it sends; a stop signal reported that way and resumed without a signal is delivered
// after all, which keeps the process in its job-control stop.
//
// Detach of a thread that was single-stepping: the kernel may report the detach's interrupt
// before it dequeues the step's SIGTRAP, which would then kill the untraced process. Detach
// therefore continues such a thread (its SIGTRAP pending per /proc/TID/status) until it stops
// for the trap, and drops it.
//
// If the agent dies. PTRACE_O_EXITKILL is not used, so when the tracer's thread ends for any
// reason, including SIGKILL of the agent, the kernel detaches every tracee and the processes
// go on. What the agent had done stays done (observed on Linux 6.18, see death_test.go):
//   - software breakpoints (int3 bytes) remain in the text and kill the process with SIGTRAP
//     when executed, because nobody catches the trap;
//   - an armed hardware watchpoint stays in the thread's debug registers, with the same
//     effect when it fires;
//   - a thread stopped at a signal-delivery stop resumes without that signal: the signal is
//     lost, and a thread stopped at a breakpoint continues after the int3 byte, inside the
//     instruction it replaced, with unpredictable results;
//   - threads in an interrupt or event stop simply resume; a process in a job-control stop
//     stays stopped until SIGCONT (the kernel puts a detached thread back into the group stop).
//
// The agent removes its breakpoints and lets threads past them before detaching to avoid all
// of this; Detach itself clears the watchpoints.
//
// Architectures. Register layouts, the program counter, breakpoint facts, debug registers and
// the SIGTRAP classification live in per-architecture files (regs_GOARCH.go, watch_GOARCH.go,
// trap_GOARCH.go); amd64 is implemented. To add one, write those files and add GOARCH to the
// build constraints of the others (and exclude it in unsupported.go).
package ptrace
