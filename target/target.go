// Package target is the seam between the node agent, which gives processes the Blue Gene/Q
// Compute Node Kernel's tool-control semantics, and the mechanisms that actually control them:
// Linux ptrace (package target/ptrace) and the GDB remote serial protocol (package target/rsp).
//
// A back end owns only mechanism: reading and writing memory and registers, resuming, stepping
// and interrupting threads, hardware watchpoints, and reporting what the kernel (or stub) says
// happened. Policy — which signals suspend the whole process, breakpoint tables, stepping over a
// planted trap, notification order, tools and their authority — belongs to the agent.
package target

import (
	"debug/elf"
	"encoding/binary"
	"errors"
)

// Info describes a controlled process.
type Info struct {
	Machine   elf.Machine      // EM_X86_64, EM_PPC64, ...
	ByteOrder binary.ByteOrder // the target's byte order
	PtrSize   int              // bytes in a pointer
	Pid       int              // OS process id (under emulation: the emulator's pid, or 0 if unknown)
	Exe       string           // absolute path of the executable
	PageSize  int              // bytes in a page
	Arch      Arch             // how breakpoints look on this machine
}

// Arch holds the machine facts the agent needs to plant and recognise software breakpoints.
type Arch struct {
	// BreakInstr is the trap instruction the agent writes for a breakpoint when the tool does not
	// name one (x86_64: 0xCC; Power: the CNK's default trap word in target byte order).
	BreakInstr []byte
	// PCAfterBreak is how far past the breakpoint address the program counter stands when a
	// software breakpoint traps (x86_64 int3: 1; Power: 0).
	PCAfterBreak uint64
	// WatchSlots is the number of hardware watchpoints available per thread.
	WatchSlots int
}

// RegSet names an architecture-native register set, exchanged as the bytes the operating system
// uses for it (x86_64: user_regs_struct and user_fpregs_struct; ppc64: pt_regs and the FPR set).
type RegSet int

const (
	RegsGeneral RegSet = iota // general-purpose and special registers
	RegsFloat                 // floating-point and vector registers
)

// WatchKind is the access that triggers a hardware watchpoint.
type WatchKind int

const (
	WatchWrite     WatchKind = 1
	WatchRead      WatchKind = 2 // hardware that cannot watch reads alone reports ErrUnsupported
	WatchReadWrite WatchKind = 3
)

// EventKind classifies a stop or state change reported by a back end.
type EventKind int

const (
	// EventSignal: a thread stopped because a signal is about to be delivered to it. SIGTRAP
	// from a breakpoint, a single step or a watchpoint arrives as EventSignal with Trap set.
	EventSignal EventKind = iota
	// EventStopped: a thread stopped because the agent asked (Interrupt); nothing is pending.
	EventStopped
	// EventNewThread: a thread was created; Tid is the new thread, stopped; Parent made it.
	EventNewThread
	// EventThreadExit: a thread other than the last one exited; it no longer exists.
	EventThreadExit
	// EventExec: the process replaced its image; Tid is the leader, stopped. Software
	// breakpoints are gone with the old image.
	EventExec
	// EventExit: the process is gone; Status is its POSIX wait status.
	EventExit
	// EventFork: a thread of a process whose back end follows forks created a new process
	// (fork, vfork, or clone without CLONE_THREAD). Tid is the parent thread, which carries on
	// as after a clone; Child is the new process's pid. The child is held stopped at its first
	// instruction, traced, until the agent takes it over (with target/ptrace: Tracer.Adopt)
	// or lets it go; a vfork parent stays blocked in the kernel until then.
	EventFork
)

// TrapKind says why a SIGTRAP happened, as far as the mechanism can tell.
type TrapKind int

const (
	TrapNone       TrapKind = iota // not a SIGTRAP, or a SIGTRAP sent by kill/tgkill
	TrapBreakpoint                 // a software breakpoint instruction executed
	TrapStep                       // a single step completed
	TrapWatch                      // a hardware watchpoint fired; Event.Addr is the data address
	TrapOther                      // any other kernel-generated SIGTRAP
)

// Event is one thing that happened to a controlled process.
type Event struct {
	Kind   EventKind
	Tid    int      // the thread concerned
	Parent int      // for EventNewThread: the thread that created it
	Signal int      // for EventSignal: the signal number (Linux numbering of the target)
	Code   int      // for EventSignal: si_code
	Addr   uint64   // for EventSignal: si_addr (faulting or watched data address)
	PC     uint64   // program counter of Tid when it stopped (0 if not read)
	Trap   TrapKind // for SIGTRAP: the cause
	Slot   int      // for TrapWatch: which watchpoint slot fired
	Status int      // for EventExit: POSIX wait status
	Child  int      // for EventFork: the new process's pid
	// Regs holds the thread's general registers at a breakpoint trap (TrapBreakpoint), as
	// Registers would return them then, when the back end read them with the stop (nil
	// otherwise): an agent that decides and passes the hit needs no further read.
	Regs []byte
	// Steps, for the event that ends a StepRange (RangeStepper): its TrapStep, an interrupt's
	// EventStopped, a signal, is how many single steps the range took (0 for a plain Step:
	// one). A caller that goes on with the range after an interrupt takes them off its budget.
	Steps int
}

// MemoryAsProcess is implemented by back ends that can also access a process's memory with
// the process's own rights: a page it may not read or write fails as the access would fault in
// the process (where ReadMemory and WriteMemory, a debugger's accesses, reach read-only and
// unreadable pages too). An agent emulating one of the process's instructions uses it.
type MemoryAsProcess interface {
	ReadMemoryAsProcess(addr uint64, b []byte) (int, error)
	WriteMemoryAsProcess(addr uint64, b []byte) (int, error)
}

// RegsResumer is implemented by back ends that can replace a stopped thread's general
// registers and let it run in one operation, as SetRegisters(tid, RegsGeneral, regs) followed
// by Resume(tid, sig) would: a breakpoint hit passed without a report costs one request.
type RegsResumer interface {
	ResumeWithRegisters(tid int, regs []byte, sig int) error
}

// TrapHook decides a breakpoint hit on the back end's own thread, where the stop was reaped,
// before any event is queued for it: ev is the EventSignal (Trap TrapBreakpoint, Regs set)
// that would otherwise be delivered, and seq the number of events the process has delivered
// on Events before it, so that a hook can tell whether its consumer has seen them all. To
// let the thread run on without a report, the hook calls resume with the general registers
// to run from (as ResumeWithRegisters(ev.Tid, regs, 0) would) and returns true; returning
// false delivers ev as usual. A hook runs on the back end's thread and holds up every other
// stop while it runs: it must not wait for anything (the back end's own methods called from
// within it run in place).
type TrapHook func(ev *Event, seq uint64, resume func(regs []byte) error) bool

// StepRange is what RangeStepper.StepRange steps through: the thread steps on while its pc
// stays in [Lo, Hi), is not one of Stops (the traps planted in the range, whose original
// instruction the caller handles) and not at a call instruction, for at most Max steps. A step
// is an instruction executed, except that a back end that single-steps a repeated string
// instruction (x86 rep movs, rep stos, ...) may count each of its iterations as one: Max bounds
// the walk, it does not say where an instruction stream ends.
type StepRange struct {
	Lo, Hi uint64
	Stops  []uint64
	Max    int
}

// RangeStepper is implemented by back ends that single-step a thread through a range of
// instructions where they reap its stops: the steps cost no hand-off between threads, and one
// event ends them: the TrapStep at the first pc the range does not go on from, or whatever
// else stopped the thread (a signal, an interrupt, its end); Event.Steps says how many steps
// were taken.
type RangeStepper interface {
	// StepRange single-steps the stopped thread tid, delivering sig, as Step does, and goes
	// on stepping as r says.
	StepRange(tid int, sig int, r StepRange) error
}

// TrapHooker is implemented by back ends that let an agent decide breakpoint hits where they
// are reaped (TrapHook): a hit passed there costs no hand-off between threads.
type TrapHooker interface {
	// SetTrapHook installs h for the process's breakpoint traps (nil removes it).
	SetTrapHook(h TrapHook)
}

// Process is one controlled process. Every method that names a thread requires that thread to
// be stopped unless its documentation says otherwise. Implementations are safe for use by
// several goroutines.
type Process interface {
	Info() Info
	// Threads lists the live thread ids (LWPs), leader first.
	Threads() ([]int, error)
	// ReadMemory reads len(b) bytes at addr. It returns the bytes read before any error.
	ReadMemory(addr uint64, b []byte) (int, error)
	// WriteMemory writes b at addr, including read-only program text.
	WriteMemory(addr uint64, b []byte) (int, error)
	// Registers returns a register set of a thread in its native layout.
	Registers(tid int, set RegSet) ([]byte, error)
	// SetRegisters replaces a register set of a thread.
	SetRegisters(tid int, set RegSet, regs []byte) error
	// PC and SetPC read and write a thread's program counter.
	PC(tid int) (uint64, error)
	SetPC(tid int, pc uint64) error
	// Resume lets a stopped thread run, delivering sig (0 for none).
	Resume(tid int, sig int) error
	// Step executes one instruction of a stopped thread, delivering sig first (0 for none);
	// an EventSignal with Trap == TrapStep follows (or another event if something intervenes).
	Step(tid int, sig int) error
	// Interrupt stops a running thread; an EventStopped follows, or another stop event of that
	// thread if one arrives first (any stop satisfies the interrupt). Interrupting a stopped
	// thread is a no-op.
	Interrupt(tid int) error
	// Kill sends a signal to one thread (tgkill) or, with tid 0, to the process (kill).
	Kill(tid int, sig int) error
	// SetWatchpoint programs hardware watchpoint slot (0 ≤ slot < Arch.WatchSlots) of a thread.
	SetWatchpoint(tid, slot int, addr uint64, size int, kind WatchKind) error
	// ClearWatchpoint disarms a slot.
	ClearWatchpoint(tid, slot int) error
	// Auxv returns the process's auxiliary vector in target byte order.
	Auxv() ([]byte, error)
	// Events delivers stops and state changes in the order they happened. It is closed after
	// EventExit or Detach. Events are queued without bound rather than dropped, so the consumer
	// must read until the channel closes.
	Events() <-chan Event
	// Detach lets the process go, running, with every thread resumed.
	Detach() error
}

// Errors a back end reports in a form the agent can map to CDTI return codes.
var (
	ErrNoThread    = errors.New("target: no such thread")
	ErrRunning     = errors.New("target: thread is running")
	ErrExited      = errors.New("target: process has exited")
	ErrAddress     = errors.New("target: bad address")
	ErrUnsupported = errors.New("target: not supported by this target")
	ErrBusy        = errors.New("target: hardware resource in use")
)
