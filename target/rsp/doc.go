// Package rsp is a GDB remote serial protocol client that implements target.Process for Power
// (ppc64, ppc64le) programs under a stub: QEMU user mode (`qemu-ppc64 -g PATH`,
// `qemu-ppc64le -g PATH`: Launch puts the stub on a Unix socket in a private directory, never
// on TCP) or a stub already listening (gdbserver, `qemu-ppc64 -g PORT`: Dial).
//
// The client frames packets with checksums, acknowledges them (and turns acknowledgements off
// when the stub offers QStartNoAckMode), reads the target description (target.xml and its
// includes) before any register access and takes register numbers from it, reads and writes
// memory in requests that fit the stub's PacketSize, resumes with vCont, and decodes stop
// replies (T, S, W, X, with thread ids and the swbreak, hwbreak and watch reasons).
//
// QEMU user mode, which the tests run Power code under, shapes several choices (see
// ppc64.md §4):
//   - QEMU 7.2 cannot write program text; QEMU ≥ 9 can. Whether writes to text work is
//     found out at run time, and where they do not, trap words written to text are carried
//     out as stub breakpoints (Z0) (Capabilities, Notes).
//   - There is no real all-stop mode: while one thread is stopped in the stub the others run,
//     and several threads can report stops for one resume. Extra stop replies are queued and
//     reported one per resume.
//   - Stop replies carry no reason and no registers: the pc is read after every stop, and a
//     SIGTRAP is a breakpoint when a trap word (or stub breakpoint) is at the pc, a step when
//     the thread was being stepped.
//   - The interrupt byte is ignored. Interrupt sends SIGINT to a launched QEMU 7.2; QEMU ≥ 9
//     dies of signals the program does not handle, so there it needs Options.InterruptSignal.
//   - No watchpoints (Z2–Z4 are unsupported), no binary writes (X), no no-ack mode, and m
//     reads at most 0x800 bytes (PacketSize 0x1000).
//   - The stub accepts a single connection; after it closes, the program runs on alone.
package rsp
