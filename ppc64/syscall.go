package ppc64

// System calls on 64-bit PowerPC Linux (and the CNK, which follows its ABI): the number goes in
// r0, the arguments in r3–r8, `sc` traps to the kernel, and the result comes back in r3 with
// CR0's summary-overflow bit set when r3 holds a positive errno instead.
const (
	// SyscallWord is `sc`.
	SyscallWord uint32 = 0x44000002
	// CR0SO is CR0's summary-overflow bit in the 32-bit condition register: a failed call.
	CR0SO uint64 = 0x10000000

	// SysRtSigaction is rt_sigaction's number.
	SysRtSigaction = 173
	// SigactionSize is the size of the kernel's struct sigaction: handler, flags, restorer
	// and a 64-bit signal mask, eight bytes each.
	SigactionSize = 32
	// SASiginfo is SA_SIGINFO: the handler is called as handler(int, siginfo_t *, void *).
	SASiginfo = 4
	// SigDfl is SIG_DFL, the default action.
	SigDfl = 0

	// ProtectedZone is how many bytes below the stack pointer a function may use without
	// moving it (both ELF ABIs): what a debugger that borrows the stack must leave alone.
	ProtectedZone = 288
)

// SyscallResult is the value of a system call from r3 and CR after `sc`: negative (-errno) when
// the call failed.
func SyscallResult(r3, ccr uint64) int64 {
	if ccr&CR0SO != 0 {
		return -int64(r3)
	}
	return int64(r3)
}
