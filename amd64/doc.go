// Package amd64 holds the x86-64 facts the debugger needs, as code:
//
//   - register sets: the Linux user_regs_struct and user_fpregs_struct (FXSAVE) layouts that
//     ptrace and core files use, and the System V psABI's DWARF register numbers;
//   - the breakpoint instruction (int3) and what the processor does when it executes one;
//   - instruction decoding for stepping (call recognition, lengths), disassembly in GNU
//     syntax, and the effective address of a memory operand;
//   - the Linux system-call facts the agent injects and reads: numbers, the syscall
//     instruction, and the return values of an interrupted call.
//
// The package knows nothing of transports: it works on bytes and register sets.
package amd64
