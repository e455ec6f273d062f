// Package symbols reads ELF and DWARF debugging information for programs written in C, C++
// and Fortran and answers the questions a source-level debugger asks: which source line a
// program counter belongs to and where a breakpoint for a line or function goes, how to unwind
// the call stack, which variables are in scope in a frame and what their values are, and how to
// evaluate (and assign through) an expression typed by the user.
//
// The package never talks to a process directly. A stopped process or a core file is described
// by a [Process]: its memory (a [Memory], read like an io.ReaderAt), the [Module]s mapped into
// it (each a [Binary] at a load bias), and per-thread registers indexed by DWARF register
// number ([Regs]). The adapter implements memory over the CDTI transport; [OpenCore] implements
// it over an ELF core file, so a crashed rank can be examined post-mortem with the same code.
//
// A [Binary] is independent of where it is loaded and is shared: a [Cache] indexes each
// distinct build-id once, so a job whose ranks all run one executable reads its DWARF once.
// Binary and Cache are safe for concurrent use. A Process, with the Frames and Values made
// from it, describes one stopped state and is used by one goroutine at a time (frames fill
// in what they compute lazily); processes sharing binaries may be examined in parallel.
//
// Link-time and run-time addresses: methods of Binary take and return link-time addresses (as
// in the file); methods of Module, Process and Frame take and return run-time addresses (link
// time plus the module's load bias).
package symbols
