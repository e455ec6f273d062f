package mpir

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/hpcdap/hpcdap/cdti"
)

// latePoll is how long an attach waits for MPIR_Breakpoint before it looks at the table itself
// (a variable for the tests).
var latePoll = time.Second

// waitSpawnedLate is WaitSpawned for a launcher found before it marked its table filled. A
// launcher that checked MPIR_being_debugged before the tool set it never calls
// MPIR_Breakpoint (srun calls it only when a debugger is announced), yet fills its table and
// sets MPIR_debug_state all the same: so every latePoll without a hit the launcher is stopped
// (stopLate) and the table read. The launcher is left stopped.
func (s *Starter) waitSpawnedLate(ctx context.Context) ([]Proc, error) {
	for {
		wctx, cancel := context.WithTimeout(ctx, latePoll)
		procs, err := s.WaitSpawned(wctx)
		cancel()
		if err == nil || !errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
			return procs, err
		}
		if !s.stopped {
			if err := s.stopLate(ctx); err != nil {
				return nil, err
			}
		}
		if procs, ok, err := s.filledTable(ctx); ok || err != nil {
			return procs, err
		}
	}
}

// stopLate stops the running launcher for waitSpawnedLate. The launcher may reach
// MPIR_Breakpoint at the same moment (a runjob that polls MPIR_being_debugged calls it once
// per poll): its hit, already on its way as a notification, is then the stop, and the state
// tells whether the table is filled. A SIGSTOP would not do: sent to a launcher stopped at
// the hit, or about to be, it stays queued in the launcher while the hit is continued past,
// and its stop may never be told (an attach to runjob waited for it until its time ran out,
// runjob held in MPIR_Breakpoint). StopProcess leaves nothing queued: the agent answers that
// the notification on its way is the stop, or stops the launcher and says so once. An agent
// without the extension (a CNK) is sent SIGSTOP, and a hit that comes first is continued.
func (s *Starter) stopLate(ctx context.Context) error {
	rs, err := s.c.Update(ctx, s.rank, &cdti.StopProcess{})
	if err != nil {
		return fmt.Errorf("mpir: stop the launcher: %w", err)
	}
	want := func(*cdti.NotifySignal) bool { return true }
	switch rs[0].Code {
	case cdti.CmdSuccess:
	case cdti.CmdInval:
		if err := s.update(ctx, &cdti.SendSignalToProcess{Signal: uint32(syscall.SIGSTOP)}); err != nil {
			return fmt.Errorf("mpir: stop the launcher: %w", err)
		}
		want = func(n *cdti.NotifySignal) bool { return n.Signal == uint32(syscall.SIGSTOP) }
	default:
		return fmt.Errorf("mpir: stop the launcher: %v: %w", cdti.TypeStopProcess, rs[0].Code)
	}
	if _, err := s.waitSignal(ctx, want); err != nil {
		return fmt.Errorf("mpir: wait for the launcher to stop: %w", err)
	}
	return nil
}

// filledTable reads the table of a stopped launcher if MPIR_debug_state says it is filled
// (MPIR_DEBUG_SPAWNED and a non-empty MPIR_proctable_size); ok is false if it is not yet.
func (s *Starter) filledTable(ctx context.Context) (procs []Proc, ok bool, err error) {
	state, err := s.readInt(ctx, s.syms.DebugState)
	if err != nil {
		return nil, false, fmt.Errorf("mpir: read MPIR_debug_state: %w", err)
	}
	size, err := s.readInt(ctx, s.syms.ProctableSize)
	if err != nil {
		return nil, false, fmt.Errorf("mpir: read MPIR_proctable_size: %w", err)
	}
	if state != DebugSpawned || size <= 0 {
		return nil, false, nil
	}
	procs, err = ReadTable(ctx, s.mem, s.layout(), s.syms.Proctable, s.syms.ProctableSize)
	return procs, true, err
}
