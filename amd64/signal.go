package amd64

// Signal frames. The kernel enters a signal handler with struct rt_sigframe on the stack: the
// restorer's address (the handler's return address, popped by the time the restorer runs),
// then a struct ucontext whose uc_mcontext begins with the interrupted thread's registers.
const (
	// UcontextGregs is the offset of uc_mcontext.gregs in the ucontext.
	UcontextGregs = 40
	// SysRtSigreturn is the system call the restorer makes.
	SysRtSigreturn = 15
)

// GregsDWARF lists the DWARF numbers of the first 17 words of uc_mcontext.gregs, in order
// (REG_R8 … REG_R15, REG_RDI, REG_RSI, REG_RBP, REG_RBX, REG_RDX, REG_RAX, REG_RCX, REG_RSP,
// REG_RIP).
var GregsDWARF = [17]int{DwarfR8, DwarfR8 + 1, DwarfR8 + 2, DwarfR8 + 3, DwarfR8 + 4, DwarfR8 + 5,
	DwarfR8 + 6, DwarfR8 + 7, DwarfRDI, DwarfRSI, DwarfRBP, DwarfRBX, DwarfRDX, DwarfRAX, DwarfRCX,
	DwarfRSP, DwarfRIP}

// RestoreRT is the code of the C library's signal restorer, __restore_rt: mov $15,%rax;
// syscall. A frame whose pc points at it, and that no CFI describes, is a signal frame.
var RestoreRT = []byte{0x48, 0xc7, 0xc0, SysRtSigreturn, 0x00, 0x00, 0x00, 0x0f, 0x05}
