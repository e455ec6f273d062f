package bgq

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Runjob is the emulated runjob: it loads a job, serves its tools through MPIR as BG/Q's
// runjob does (launchers.md §3.4), starts the job and waits for its end.
type Runjob struct {
	Config Config
	// MPIR drives the helper that holds runjob's MPIR symbols.
	MPIR *MPIR
	// Poll is how often MPIR_being_debugged is read for an attach (BG/Q: 1 s, the default).
	Poll time.Duration
	// Control, when set, receives the loaded job, for start_tool and end_tool.
	Control func(*Job)
}

// Run runs the job to its end. Bad tool arrays are refused before anything starts, with
// MPIR_DEBUG_ABORTING for the tool; a tool that cannot start aborts the same way.
func (rj *Runjob) Run(ctx context.Context) error {
	if rj.Poll <= 0 {
		rj.Poll = time.Second
	}
	debugged, err := rj.MPIR.BeingDebugged()
	if err != nil {
		return fmt.Errorf("bgq: runjob: %w", err)
	}
	if err := rj.Config.check(); err != nil {
		if debugged {
			return rj.abort(err)
		}
		return fmt.Errorf("bgq: runjob: %w", err)
	}
	var req ToolRequest
	if debugged {
		// Launch under a tool: its request is checked before the job is loaded.
		if req, err = rj.readTool(); err != nil {
			return rj.abort(err)
		}
	}
	job, err := Load(ctx, rj.Config)
	if err != nil {
		if debugged {
			return rj.abort(err)
		}
		return err
	}
	defer job.Close()
	if rj.Control != nil {
		rj.Control(job)
	}
	if debugged {
		if err := rj.spawned(job, req); err != nil {
			return err
		}
	}
	if err := job.Start(); err != nil {
		return err
	}
	return rj.wait(ctx, job, debugged)
}

// readTool reads and checks the tool arrays.
func (rj *Runjob) readTool() (ToolRequest, error) {
	path, args, subset, err := rj.MPIR.ReadTool()
	if err != nil {
		return ToolRequest{}, err
	}
	return ParseToolRequest(path, args, subset, rj.Config.NP)
}

// abort reports err to the tool (MPIR_DEBUG_ABORTING and MPIR_Breakpoint) and returns it.
func (rj *Runjob) abort(err error) error {
	err = fmt.Errorf("bgq: runjob: %w", err)
	if berr := rj.MPIR.Breakpoint(DebugAborting, err.Error()); berr != nil {
		return errors.Join(err, berr)
	}
	return err
}

// spawned starts the tool on the I/O nodes of its subset, fills the proc table and stops at
// MPIR_Breakpoint with MPIR_DEBUG_SPAWNED until the tool lets runjob go on.
func (rj *Runjob) spawned(job *Job, req ToolRequest) error {
	set, _ := ParseSubset(req.Subset, rj.Config.NP) // checked by ParseToolRequest
	if _, err := job.StartToolOn(req.Path, req.Args, set.Contains); err != nil {
		return rj.abort(err)
	}
	if err := rj.MPIR.SetProctable(job.Proctable()); err != nil {
		return err
	}
	return rj.MPIR.Breakpoint(DebugSpawned, "")
}

// wait polls MPIR_being_debugged until the job's ranks have ended: a 0→1 change starts the
// tool (attach), a 1→0 change is a tool that has detached.
func (rj *Runjob) wait(ctx context.Context, job *Job, debugged bool) error {
	end := make(chan error, 1)
	go func() { end <- job.Wait(ctx, rj.Poll/4) }()
	t := time.NewTicker(rj.Poll)
	defer t.Stop()
	for {
		select {
		case err := <-end:
			if err != nil && ctx.Err() != nil {
				return fmt.Errorf("bgq: runjob: job %d ended before its ranks: %w", job.ID(), context.Cause(ctx))
			}
			return err
		case <-t.C:
		}
		now, err := rj.MPIR.BeingDebugged()
		if err != nil {
			return fmt.Errorf("bgq: runjob: %w", err)
		}
		switch {
		case now && !debugged:
			req, err := rj.readTool()
			if err != nil {
				rj.abort(err) // the tool is told; the job runs on without it
				break
			}
			if err := rj.spawned(job, req); err != nil {
				rj.Config.Logf("%v", err)
			}
		case !now && debugged:
			rj.Config.Logf("bgq: runjob: job %d: the debugger has detached", job.ID())
		}
		debugged = now
	}
}
