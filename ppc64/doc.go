// Package ppc64 holds the Power ISA and 64-bit PowerPC ABI facts the debugger needs, as code:
//
//   - trap instructions (tw, twi, td, tdi): encoding, decoding, the trap condition, and the Blue
//     Gene/Q Compute Node Kernel's classification of trap words into normal and fast breakpoints;
//   - register sets: the Linux pt_regs and FPR layouts, the BG/Q general, special, debug and QPX
//     register sets, and the conversions between them;
//   - the two 64-bit ELF ABIs: ELFv1 function descriptors in .opd, and ELFv2 global and local
//     entry points;
//   - disassembly in GNU syntax for both byte orders, and the branch facts a debugger needs to
//     step over calls.
//
// The package knows nothing of transports: it works on words, bytes and ELF files.
package ppc64
