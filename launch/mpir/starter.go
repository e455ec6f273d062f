package mpir

import (
	"context"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/hpcdap/hpcdap/cdti"
	"github.com/hpcdap/hpcdap/procimage"
)

// Conn is the part of a CDTI client (*cdti.Client) that drives the launcher's agent.
type Conn interface {
	Attach(ctx context.Context, rank uint32, sel cdti.ProcessSelect, tag cdti.Tag, priority uint8) (*cdti.AttachAck, error)
	Detach(ctx context.Context, rank uint32, sel cdti.ProcessSelect) (*cdti.DetachAck, error)
	Control(ctx context.Context, rank uint32, req cdti.Control) (*cdti.ControlAck, error)
	Query(ctx context.Context, rank uint32, cmds ...cdti.Command) ([]cdti.Result, error)
	Update(ctx context.Context, rank uint32, cmds ...cdti.Command) ([]cdti.Result, error)
	ReadMemory(ctx context.Context, rank, tid uint32, addr uint64, n int, spec cdti.SpecAccess) ([]byte, error)
	WriteMemory(ctx context.Context, rank, tid uint32, addr uint64, data []byte, spec cdti.SpecAccess,
		shared cdti.SharedMemoryAccess) error
	TargetInfo(ctx context.Context, rank uint32) (*cdti.GetTargetInfoAck, error)
	Notifications() <-chan *cdti.Notify
}

var _ Conn = (*cdti.Client)(nil)

// Options configure a Starter.
type Options struct {
	Rank     uint32 // the launcher's rank on its agent (0 for an agent that serves only the launcher)
	Priority uint8  // CDTI attach priority (0: 90)
	Tag      string // CDTI tool tag (default "mpir")
	// Exe is the launcher's executable path when the agent cannot tell (GetTargetInfo is an
	// extension a real BG/Q lacks).
	Exe string
	// Daemons, when set, has the launcher co-spawn the tool's daemons: at launch, or on
	// attach for a launcher that polls MPIR_being_debugged (BG/Q's runjob).
	Daemons *ToolDaemons
	// HoldThread: once the table is read, WaitSpawned holds only the launcher's thread that
	// stopped in MPIR_Breakpoint and lets its other threads run until Release. Open MPI 4's
	// mpirun serves its ranks' start-up (PMIx) from other threads, and sends the ranks the
	// debugger release only after MPIR_Breakpoint returns: so its ranks go through MPI_Init
	// while the tool works, and wait for that release at its end.
	HoldThread bool
}

// ErrLauncherExited means the launcher ended before the table could be read.
var ErrLauncherExited = errors.New("launcher exited")

// ErrAborting means the launcher reported MPIR_DEBUG_ABORTING.
var ErrAborting = errors.New("launcher is aborting the job")

// Starter is the MPIR starter process (the launcher) driven through its agent. It is not safe for
// concurrent use: one goroutine drives it (it alone reads the connection's notifications).
type Starter struct {
	c       Conn
	rank    uint32
	order   binary.ByteOrder
	ptrSize int // bytes in a launcher pointer (set by take: 8 unless the agent says 4)
	machine elf.Machine
	exe     string
	syms    *Symbols
	mem     Memory

	bpSet   bool   // the breakpoint on MPIR_Breakpoint is planted
	bpOrig  uint32 // the instruction it replaced (ResetBreakpoint needs it)
	stopped bool   // the launcher is stopped at a notification this Starter holds
	hold    bool   // Options.HoldThread
	heldTid uint32 // the thread held in MPIR_Breakpoint while the others run (0: none)
	exited  *cdti.ExitStatus
	// Timings of the phases, for reports and benchmarks.
	Timings map[string]time.Duration
}

// cdtiMemory reads the launcher's memory through its agent.
type cdtiMemory struct {
	c    Conn
	rank uint32
}

func (m cdtiMemory) ReadMemory(ctx context.Context, addr uint64, n int) ([]byte, error) {
	return m.c.ReadMemory(ctx, m.rank, 0, addr, n, cdti.SpecAccessUseThreadState)
}

// Symbols returns the resolved MPIR symbols.
func (s *Starter) Symbols() *Symbols { return s.syms }

// Memory returns a reader of the launcher's memory.
func (s *Starter) Memory() Memory { return s.mem }

// ByteOrder is the launcher's byte order.
func (s *Starter) ByteOrder() binary.ByteOrder { return s.order }

// Exited returns the launcher's wait status once its termination has been seen.
func (s *Starter) Exited() (cdti.ExitStatus, bool) {
	if s.exited == nil {
		return 0, false
	}
	return *s.exited, true
}

func (s *Starter) mark(phase string, since time.Time) {
	if s.Timings == nil {
		s.Timings = map[string]time.Duration{}
	}
	s.Timings[phase] = time.Since(since)
}

// take attaches, takes control with SIGSTOP and waits for the stop.
func take(ctx context.Context, c Conn, opts Options, mode cdti.DynamicNotifyMode) (*Starter, error) {
	s := &Starter{c: c, rank: opts.Rank, exe: opts.Exe, mem: cdtiMemory{c, opts.Rank}, hold: opts.HoldThread}
	prio, tag := opts.Priority, opts.Tag
	if prio == 0 {
		prio = 90
	}
	if tag == "" {
		tag = "mpir"
	}
	if _, err := c.Attach(ctx, s.rank, cdti.RankInHeader, cdti.NewTag(tag), prio); err != nil {
		return nil, fmt.Errorf("mpir: attach to the launcher: %w", err)
	}
	set := cdti.Signals(int(syscall.SIGTRAP), int(syscall.SIGSTOP))
	if _, err := c.Control(ctx, s.rank, cdti.Control{NotifySet: set, SendSignal: uint32(syscall.SIGSTOP),
		DynamicNotify: mode, WatchPolicy: cdti.WatchNoPropagate}); err != nil {
		return nil, fmt.Errorf("mpir: take control of the launcher: %w", err)
	}
	if _, err := s.waitSignal(ctx, func(n *cdti.NotifySignal) bool { return n.Signal == uint32(syscall.SIGSTOP) }); err != nil {
		return nil, fmt.Errorf("mpir: wait for the launcher to stop: %w", err)
	}
	s.order, s.machine, s.ptrSize = binary.ByteOrder(binary.LittleEndian), elf.EM_X86_64, 8
	if info, err := c.TargetInfo(ctx, s.rank); err == nil {
		s.machine = info.Machine
		if info.PtrSize == 4 {
			s.ptrSize = 4
		}
		if info.ByteOrder == elf.ELFDATA2MSB {
			s.order = binary.BigEndian
		}
		if s.exe == "" {
			s.exe = info.Exe
		}
	} else if !errors.Is(err, cdti.ErrNotSupported) {
		return s, fmt.Errorf("mpir: launcher target info: %w", err)
	}
	return s, nil
}

// resolve finds the MPIR symbols among the launcher's loaded objects.
func (s *Starter) resolve(ctx context.Context) error {
	rs, err := s.c.Query(ctx, s.rank, &cdti.GetAuxVectors{})
	if err != nil {
		return fmt.Errorf("mpir: launcher auxv: %w", err)
	}
	if rs[0].Code != cdti.CmdSuccess {
		return fmt.Errorf("mpir: launcher auxv: %w", rs[0].Code)
	}
	a, ok := rs[0].Ack.(*cdti.GetAuxVectorsAck)
	if !ok {
		return fmt.Errorf("mpir: launcher auxv: answered with %T", rs[0].Ack)
	}
	objs, err := Objects(ctx, s.mem, s.layout(), procimage.AuxvFromWords(a.Words), s.exe)
	if err != nil {
		return err
	}
	syms, err := Resolve(objs)
	if err != nil {
		return err
	}
	s.syms = syms
	return nil
}

// Launch runs launch mode on a launcher that its agent holds before its first instruction
// (spawn mode): it takes control at the program's entry point, where every DT_NEEDED
// library is mapped, resolves the MPIR symbols, sets MPIR_being_debugged (srun reads it while
// parsing its options, mpirun before spawning) and plants the breakpoint on MPIR_Breakpoint.
// The launcher is left stopped at its entry point: call WaitSpawned.
func Launch(ctx context.Context, c Conn, opts Options) (*Starter, error) {
	t0 := time.Now()
	s, err := take(ctx, c, opts, cdti.DynamicNotifyStart)
	if err != nil {
		return s, err
	}
	s.stopped = true
	s.mark("entry", t0)
	if err := s.resolve(ctx); err != nil {
		return s, err
	}
	if opts.Daemons != nil {
		if err := s.writeDaemons(ctx, opts.Daemons); err != nil {
			return s, err
		}
	}
	if s.syms.BeingDebugged != 0 && s.syms.File.Source != SourceKnownBuild {
		if err := s.writeInt(ctx, s.syms.BeingDebugged, 1); err != nil {
			return s, fmt.Errorf("mpir: set MPIR_being_debugged: %w", err)
		}
	}
	if err := s.plant(ctx); err != nil {
		return s, err
	}
	return s, nil
}

// Attach runs attach mode on a launcher already running (its agent in attach mode): it stops
// the launcher, reads the table if MPIR_debug_state says it is filled, and otherwise plants
// the breakpoint and continues it until the table is filled (WaitSpawned). The launcher is left
// stopped; call Release (or Detach) when the ranks are under control.
func Attach(ctx context.Context, c Conn, opts Options) (*Starter, []Proc, error) {
	s, err := take(ctx, c, opts, cdti.DynamicNotifyDLoader)
	if err != nil {
		return s, nil, err
	}
	s.stopped = true
	if err := s.resolve(ctx); err != nil {
		return s, nil, err
	}
	if opts.Daemons != nil {
		// A starter that polls MPIR_being_debugged (BG/Q's runjob) starts the daemons once it
		// runs again and sees it set.
		if err := s.writeDaemons(ctx, opts.Daemons); err != nil {
			return s, nil, err
		}
		if err := s.writeInt(ctx, s.syms.BeingDebugged, 1); err != nil {
			return s, nil, fmt.Errorf("mpir: set MPIR_being_debugged: %w", err)
		}
	}
	if procs, ok, err := s.filledTable(ctx); ok || err != nil {
		return s, procs, err
	}
	if s.syms.BeingDebugged != 0 && s.syms.File.Source != SourceKnownBuild {
		if err := s.writeInt(ctx, s.syms.BeingDebugged, 1); err != nil {
			return s, nil, fmt.Errorf("mpir: set MPIR_being_debugged: %w", err)
		}
	}
	if err := s.plant(ctx); err != nil {
		return s, nil, err
	}
	procs, err := s.waitSpawnedLate(ctx)
	return s, procs, err
}

// trapInstruction is the breakpoint instruction the agent expects for a machine.
func trapInstruction(m elf.Machine) uint32 {
	switch m {
	case elf.EM_X86_64, elf.EM_386:
		return 0xCC
	}
	return 0x7FE00008 // Power: tw 31,0,0
}

// plant sets the breakpoint on MPIR_Breakpoint, remembering the original instruction.
func (s *Starter) plant(ctx context.Context) error {
	n := cdti.InstructionSize(s.machine)
	orig, err := s.mem.ReadMemory(ctx, s.syms.Breakpoint, n)
	if err != nil {
		return fmt.Errorf("mpir: read MPIR_Breakpoint at %#x: %w", s.syms.Breakpoint, err)
	}
	if err := s.update(ctx, &cdti.SetBreakpoint{Addr: s.syms.Breakpoint, Instruction: trapInstruction(s.machine)}); err != nil {
		return fmt.Errorf("mpir: breakpoint on MPIR_Breakpoint at %#x: %w", s.syms.Breakpoint, err)
	}
	s.bpSet, s.bpOrig = true, cdti.InstructionValue(s.order, orig)
	return nil
}

// WaitSpawned continues the launcher until it stops in MPIR_Breakpoint with MPIR_debug_state
// MPIR_DEBUG_SPAWNED and a non-empty table, and returns the table. The launcher is left
// stopped there (with Options.HoldThread, only the thread that called MPIR_Breakpoint).
// MPIR_NULL hits are continued; MPIR_DEBUG_ABORTING gives ErrAborting with the launcher's
// reason; the launcher's exit gives ErrLauncherExited.
func (s *Starter) WaitSpawned(ctx context.Context) ([]Proc, error) {
	t0 := time.Now()
	for {
		if err := s.cont(ctx); err != nil {
			return nil, err
		}
		n, err := s.waitSignal(ctx, func(*cdti.NotifySignal) bool { return true })
		if err != nil {
			return nil, fmt.Errorf("mpir: wait for MPIR_Breakpoint: %w", err)
		}
		if n.Signal != uint32(syscall.SIGTRAP) || n.InstAddress != s.syms.Breakpoint {
			continue // a SIGSTOP from elsewhere: the continue delivers it as CNK does
		}
		state, err := s.readInt(ctx, s.syms.DebugState)
		if err != nil {
			return nil, fmt.Errorf("mpir: read MPIR_debug_state: %w", err)
		}
		switch state {
		case DebugAborting:
			reason := ""
			if s.syms.DebugAbortString != 0 {
				reason, _ = s.readStringPtr(ctx, s.syms.DebugAbortString)
			}
			return nil, fmt.Errorf("mpir: %w: %q", ErrAborting, reason)
		case DebugSpawned:
			size, err := s.readInt(ctx, s.syms.ProctableSize)
			if err != nil {
				return nil, fmt.Errorf("mpir: read MPIR_proctable_size: %w", err)
			}
			if size <= 0 {
				continue
			}
			procs, err := ReadTable(ctx, s.mem, s.layout(), s.syms.Proctable, s.syms.ProctableSize)
			if err != nil {
				return nil, err
			}
			s.mark("spawned", t0)
			if s.hold {
				if err := s.holdThread(ctx, n.ThreadID); err != nil {
					return nil, err
				}
			}
			return procs, nil
		}
	}
}

// holdThread holds tid, stopped in MPIR_Breakpoint, and lets the launcher's other threads run.
func (s *Starter) holdThread(ctx context.Context, tid uint32) error {
	if err := s.update(ctx, &cdti.HoldThread{ThreadID: tid}); err != nil {
		return fmt.Errorf("mpir: hold the launcher's thread %d in MPIR_Breakpoint: %w", tid, err)
	}
	s.heldTid = tid
	if err := s.cont(ctx); err != nil {
		return fmt.Errorf("mpir: run the launcher's other threads: %w", err)
	}
	return nil
}

// releaseThread lets the thread held in MPIR_Breakpoint run again, if one is.
func (s *Starter) releaseThread(ctx context.Context) error {
	if s.heldTid == 0 {
		return nil
	}
	if err := s.update(ctx, &cdti.ReleaseThread{ThreadID: s.heldTid}); err != nil {
		return fmt.Errorf("mpir: release the launcher's thread %d: %w", s.heldTid, err)
	}
	s.heldTid = 0
	return nil
}

// JobID returns totalview_jobid and totalview_stepid ("" when the launcher has none: srun has).
func (s *Starter) JobID(ctx context.Context) (job, step string, err error) {
	if s.syms.TotalviewJobID != 0 {
		if job, err = s.readStringPtr(ctx, s.syms.TotalviewJobID); err != nil {
			return "", "", fmt.Errorf("mpir: read totalview_jobid: %w", err)
		}
	}
	if s.syms.TotalviewStepID != 0 {
		if step, err = s.readStringPtr(ctx, s.syms.TotalviewStepID); err != nil {
			return "", "", fmt.Errorf("mpir: read totalview_stepid: %w", err)
		}
	}
	return job, step, nil
}

// Release removes the breakpoint and lets the launcher run on (for Open MPI and srun this
// releases the ranks). The tool stays attached, so that Wait sees the launcher end.
func (s *Starter) Release(ctx context.Context) error {
	if s.exited != nil {
		return nil
	}
	if err := s.removeBreakpoint(ctx); err != nil {
		return err
	}
	held := s.heldTid != 0
	if err := s.releaseThread(ctx); err != nil {
		return err
	}
	if held && !s.stopped {
		return nil // the other threads run already: the released one goes with them
	}
	return s.cont(ctx)
}

// removeBreakpoint takes the breakpoint off MPIR_Breakpoint, if it is planted.
func (s *Starter) removeBreakpoint(ctx context.Context) error {
	if !s.bpSet {
		return nil
	}
	if err := s.update(ctx, &cdti.ResetBreakpoint{Addr: s.syms.Breakpoint, Instruction: s.bpOrig}); err != nil {
		return fmt.Errorf("mpir: remove the breakpoint on MPIR_Breakpoint: %w", err)
	}
	s.bpSet = false
	return nil
}

// Abandon makes sure the launcher is not left stopped after a failure: it removes the
// breakpoint and continues the launcher, within its own few seconds. Errors are returned
// for the report; the caller has a failure to report already.
func (s *Starter) Abandon() error {
	if s == nil || s.exited != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return s.Release(ctx)
}

// Wait waits for the launcher to end and returns its wait status. Signal notifications that
// arrive meanwhile (a SIGSTOP sent to it) are continued.
func (s *Starter) Wait(ctx context.Context) (cdti.ExitStatus, error) {
	for s.exited == nil {
		if s.stopped {
			if err := s.cont(ctx); err != nil {
				return 0, err
			}
		}
		if _, err := s.waitSignal(ctx, func(*cdti.NotifySignal) bool { return true }); err != nil &&
			!errors.Is(err, ErrLauncherExited) {
			return 0, err
		}
	}
	return *s.exited, nil
}

// Detach gives up control and detaches; a stopped launcher runs on.
func (s *Starter) Detach(ctx context.Context) error {
	if s.exited != nil {
		return nil
	}
	if err := s.removeBreakpoint(ctx); err != nil {
		return err
	}
	if err := s.releaseThread(ctx); err != nil {
		return err
	}
	if err := s.update(ctx, &cdti.ReleaseControl{}); err != nil {
		return fmt.Errorf("mpir: release control of the launcher: %w", err)
	}
	s.stopped = false
	if _, err := s.c.Detach(ctx, s.rank, cdti.RankInHeader); err != nil {
		return fmt.Errorf("mpir: detach from the launcher: %w", err)
	}
	return nil
}

// cont continues the launcher.
func (s *Starter) cont(ctx context.Context) error {
	if s.exited != nil {
		return fmt.Errorf("mpir: continue the launcher: %w (status %v)", ErrLauncherExited, *s.exited)
	}
	if err := s.update(ctx, &cdti.ContinueProcess{}); err != nil {
		return fmt.Errorf("mpir: continue the launcher: %w", err)
	}
	s.stopped = false
	return nil
}

// update sends one Update command and checks its result.
func (s *Starter) update(ctx context.Context, cmd cdti.Command) error {
	rs, err := s.c.Update(ctx, s.rank, cmd)
	if err != nil {
		return err
	}
	if rs[0].Code != cdti.CmdSuccess {
		return fmt.Errorf("%v: %w", cmd.CommandType(), rs[0].Code)
	}
	return nil
}

// waitSignal waits for a signal notification of the launcher that want accepts. A termination
// notification ends the wait with ErrLauncherExited.
func (s *Starter) waitSignal(ctx context.Context, want func(*cdti.NotifySignal) bool) (*cdti.NotifySignal, error) {
	for {
		select {
		case n, ok := <-s.c.Notifications():
			if !ok {
				return nil, errors.New("connection to the launcher's agent closed")
			}
			if n.Rank != s.rank {
				continue
			}
			switch n.Kind {
			case cdti.NotifyTypeTermination:
				st := n.Exit
				s.exited = &st
				s.stopped = false
				return nil, fmt.Errorf("%w (%v)", ErrLauncherExited, st)
			case cdti.NotifyTypeSignal:
				s.stopped = true
				if want(&n.Signal) {
					return &n.Signal, nil
				}
				if err := s.cont(ctx); err != nil {
					return nil, err
				}
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func (s *Starter) readInt(ctx context.Context, addr uint64) (int, error) {
	b, err := s.mem.ReadMemory(ctx, addr, 4)
	if err != nil {
		return 0, err
	}
	return int(int32(s.order.Uint32(b))), nil
}

func (s *Starter) writeInt(ctx context.Context, addr uint64, v int32) error {
	b := make([]byte, 4)
	s.order.PutUint32(b, uint32(v))
	return s.c.WriteMemory(ctx, s.rank, 0, addr, b, cdti.SpecAccessUseThreadState, cdti.SharedMemoryNotAllow)
}

// layout is how the launcher stores words.
func (s *Starter) layout() procimage.Layout {
	return procimage.Layout{Order: s.order, PtrSize: s.ptrSize}
}

// readStringPtr reads the string a char* variable points to ("" for a null pointer).
func (s *Starter) readStringPtr(ctx context.Context, addr uint64) (string, error) {
	im := image(ctx, s.mem, s.layout())
	p, err := im.Word(addr)
	if err != nil {
		return "", err
	}
	return im.CString(p, maxPath)
}
