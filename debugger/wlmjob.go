package debugger

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/hpcdap/hpcdap/cdti"
	"github.com/hpcdap/hpcdap/launch"
	"github.com/hpcdap/hpcdap/symbols"
)

// Jobs through a workload manager's launcher (package launch): mpirun, mpiexec.hydra and srun
// are driven under MPIR by an agent attached to the launcher, a running job is found through
// its launcher's proctable or its Slurm step, and launch starts one agent per node in attach
// mode. The adapter then takes control of every rank through those agents (Job.start),
// lets the launcher go (release) and ends what it started as terminateDebuggee says (end).

// WLMJob is a job through a workload manager's launcher (package launch). After the job's
// ranks are under the adapter's control, release lets the launcher go; end finishes with the
// job.
type WLMJob struct {
	Req      launch.Request
	AgentExe string
	LogDir   string
	Logger   *log.Logger
	Timeout  time.Duration // per phase
	// Phase, when set, receives a line as each phase of the launch begins or ends.
	Phase func(msg string)
	// Syms, when set, is the symbol cache of the job to come: a launch reads the program and
	// its libraries into it while the launcher starts (readAhead).
	Syms *symbols.Cache
	// RanksPerAgent is how many ranks each agent of a node serves (0: the most, 64).
	RanksPerAgent int

	fe     *launch.Frontend
	app    *launch.App
	agents *launch.Agents

	cancel  context.CancelFunc // stops the output and launcher watchers
	watched sync.WaitGroup
	endOnce sync.Once
}

// Start launches or finds the job and starts its node agents.
func (l *WLMJob) Start(ctx context.Context, progress func(done, total int)) (*launch.Agents, error) {
	work, err := os.MkdirTemp(l.LogDir, "launch-*")
	if err != nil {
		return nil, fmt.Errorf("launch: working directory: %w", err)
	}
	if l.Syms != nil && l.Req.Program != "" {
		go readAhead(l.Syms, l.Req, l.Logger)
	}
	fe, app, g, err := launch.Open(ctx, launch.Options{AgentPath: l.AgentExe, WorkDir: work, Timeout: l.Timeout,
		Logger: l.Logger, Progress: l.Phase, RanksPerAgent: l.RanksPerAgent}, l.Req)
	if err != nil {
		return nil, err
	}
	l.fe, l.app, l.agents = fe, app, g
	if progress != nil {
		progress(1, 1)
	}
	return g, nil
}

// Hold says how the ranks wait for release.
func (l *WLMJob) Hold() launch.Hold { return l.app.Hold() }

// RanksGone says which ranks of the launched job have ended before the debugger took them
// (launch.App.RanksGone), nil when none has or before the launch has a job.
func (l *WLMJob) RanksGone() error {
	if l.app == nil {
		return nil
	}
	return l.app.RanksGone()
}

// release lets the launcher go once every rank is under the adapter's control (stopped by
// Job.start), so that the launcher never stays stopped while ranks run: Open MPI's ranks
// leave MPI_Init when continued, srun's (held at exec in a job-control stop) also need a
// SIGCONT from their tracer. It then forwards the launcher's output and reports its end.
func (l *WLMJob) release(ctx context.Context, j *Job) error {
	hold := l.app.Hold()
	if err := l.app.Release(ctx); err != nil {
		return err
	}
	if hold == launch.HoldAtExec {
		var errs []error
		for _, r := range j.ranks {
			if _, err := r.node.client.Update(ctx, uint32(r.Num), &cdti.SendSignalToProcess{Signal: uint32(syscall.SIGCONT)}); err != nil {
				errs = append(errs, fmt.Errorf("rank %d on %s: SIGCONT: %w", r.Num, r.node.host, err))
			}
		}
		if err := errors.Join(errs...); err != nil {
			return err
		}
	}
	wctx, cancel := context.WithCancel(context.Background())
	l.cancel = cancel
	stop := make(chan struct{})
	followed := make(chan struct{}) // closed when the launcher's output has been sent
	if path := l.app.OutputPath(); path != "" {
		l.watched.Go(func() {
			defer close(followed)
			launch.FollowOutput(wctx, path, stop, j.output)
		})
	} else {
		close(followed)
	}
	name := filepath.Base(l.Req.Launcher)
	if name == "." {
		name = "the launcher"
	}
	l.watched.Go(func() {
		st, err := l.app.Wait(wctx)
		// Whatever the launcher wrote before it ended goes out before its end is reported.
		close(stop)
		if err != nil {
			return
		}
		select {
		case <-followed:
		case <-wctx.Done():
			return
		}
		switch {
		case st.Signaled():
			j.output("console", fmt.Sprintf("%s (pid %d) was killed by %s\n", name, l.app.LauncherPid(), SignalName(st.Signal())))
		default:
			j.output("console", fmt.Sprintf("%s (pid %d) exited with code %d\n", name, l.app.LauncherPid(), st.ExitCode()))
		}
	})
	return nil
}

// End finishes with the job: with kill, the ranks (already killed through the agents) and the
// launcher are ended; without, a launched job is left running (LetGo) and an attached one
// untouched. The launch front end is closed either way.
func (l *WLMJob) End(kill bool) {
	l.endOnce.Do(func() {
		if l.app == nil {
			return
		}
		if kill {
			ctx, cancel := context.WithTimeout(context.Background(), l.Timeout)
			if err := l.app.Kill(ctx, syscall.SIGKILL); err != nil {
				l.Logger.Printf("adapter: end the job %s: %v", l.app.ID(), err)
			}
			cancel()
			// Give the launcher a moment to see its ranks gone, so that its last words and
			// its exit status reach the client.
			done := make(chan struct{})
			go func() { l.watched.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
			}
		} else {
			l.app.LetGo()
		}
		if l.cancel != nil {
			l.cancel()
		}
		l.watched.Wait()
		if err := l.app.Deregister(); err != nil {
			l.Logger.Printf("adapter: %v", err)
		}
		if err := l.fe.Close(); err != nil {
			l.Logger.Printf("adapter: %v", err)
		}
	})
}

// ReleaseLauncher lets the launcher of wl go (release) and makes it the job's, to end with it.
func (j *Job) ReleaseLauncher(ctx context.Context, wl *WLMJob) error {
	if err := wl.release(ctx, j); err != nil {
		return err
	}
	j.wlm = wl
	return nil
}
