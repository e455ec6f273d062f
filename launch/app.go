package launch

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"sort"
	"sync"
	"syscall"
	"time"

	"github.com/hpcdap/hpcdap/cdti"
)

var lookPath = exec.LookPath

// App is one job known to the front end: launched by it or registered (attached). Its methods
// are safe for concurrent use.
type App struct {
	fe       *Frontend
	job      Job
	launched bool
	output   string

	mu           sync.Mutex
	sessions     []*Session
	released     bool
	keep         bool
	deregistered bool
}

// ErrDeregistered is returned by the methods of an App after Deregister.
var ErrDeregistered = errors.New("launch: app deregistered")

// ID names the job.
func (a *App) ID() string { return a.job.ID() }

// Job is the workload manager's job.
func (a *App) Job() Job { return a.job }

// Valid reports whether the App can still be used.
func (a *App) Valid() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return !a.deregistered
}

func (a *App) check() error {
	if !a.Valid() {
		return ErrDeregistered
	}
	return nil
}

// LauncherPid is the pid of the job's launcher on this host (0 for a Slurm step registered by
// its id).
func (a *App) LauncherPid() int {
	if l, ok := a.job.(interface{ LauncherPid() int }); ok {
		return l.LauncherPid()
	}
	return 0
}

// OutputPath is the file that receives the launcher's output ("" for attached jobs).
func (a *App) OutputPath() string { return a.output }

// Hold says how the ranks wait until Release (HoldNone once released).
func (a *App) Hold() Hold {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.released {
		return HoldNone
	}
	return a.job.Hold()
}

// RanksGone says which of the job's ranks have ended before the debugger took them, nil when
// none has or the job cannot tell (only a PMIx job can): the launcher reports a job ready
// before its ranks reached their hold, and a rank that dies after that report ends the job
// under the debugger's attach, which then fails for that.
func (a *App) RanksGone() error {
	if gj, ok := a.job.(interface{ goneError(when string) error }); ok {
		return gj.goneError(atDebugger)
	}
	return nil
}

// Procs is the rank table.
func (a *App) Procs() []Proc { return a.job.Procs() }

// HostPlacement is one node of a job and the ranks (PEs) on it.
type HostPlacement struct {
	Host  string
	Ranks []int // ascending
	Pids  []int // Pids[i] is the pid of Ranks[i]
}

// PEs is the number of ranks on the host.
func (h HostPlacement) PEs() int { return len(h.Ranks) }

// Placement is where a job's ranks are: hosts in order of their first rank, and per host the
// ranks with their pids.
type Placement struct {
	Hosts []HostPlacement
	Size  int // number of ranks
}

// Placement groups the rank table by host.
func (a *App) Placement() Placement { return placementOf(a.job.Procs()) }

func placementOf(procs []Proc) Placement {
	sorted := append([]Proc(nil), procs...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Rank < sorted[j].Rank })
	p := Placement{Size: len(sorted)}
	index := map[string]int{}
	for _, pr := range sorted {
		i, ok := index[pr.Host]
		if !ok {
			i = len(p.Hosts)
			index[pr.Host] = i
			p.Hosts = append(p.Hosts, HostPlacement{Host: pr.Host})
		}
		p.Hosts[i].Ranks = append(p.Hosts[i].Ranks, pr.Rank)
		p.Hosts[i].Pids = append(p.Hosts[i].Pids, pr.Pid)
	}
	return p
}

// HostOf returns the host and pid of a rank.
func (p Placement) HostOf(rank int) (host string, pid int, ok bool) {
	for _, h := range p.Hosts {
		for i, r := range h.Ranks {
			if r == rank {
				return h.Host, h.Pids[i], true
			}
		}
	}
	return "", 0, false
}

// HostNames lists the hosts.
func (p Placement) HostNames() []string {
	out := make([]string, len(p.Hosts))
	for i, h := range p.Hosts {
		out[i] = h.Host
	}
	return out
}

// Release lets held ranks go (the launcher continues from MPIR_Breakpoint). Attach every rank
// first: for HoldAtExec ranks, a tool that traces a rank must send it SIGCONT itself.
func (a *App) Release(ctx context.Context) error {
	if err := a.check(); err != nil {
		return err
	}
	if err := a.job.Release(ctx); err != nil {
		return err
	}
	a.mu.Lock()
	a.released = true
	a.mu.Unlock()
	return nil
}

// Kill sends sig to every rank and ends the launcher.
func (a *App) Kill(ctx context.Context, sig syscall.Signal) error {
	if err := a.check(); err != nil {
		return err
	}
	return a.job.Kill(ctx, sig)
}

// Wait waits for the launcher to end and returns its wait status.
func (a *App) Wait(ctx context.Context) (cdti.ExitStatus, error) {
	if err := a.check(); err != nil {
		return 0, err
	}
	return a.job.Wait(ctx)
}

// LetGo makes the job outlive the front end: Deregister (and Frontend.Close) will then release
// it and leave it running instead of ending it (CTI's releaseApp).
func (a *App) LetGo() {
	a.mu.Lock()
	a.keep = true
	a.mu.Unlock()
}

// NewSession makes a staging directory (bin/, lib/, tmp/) with a unique name on every host of
// the job.
func (a *App) NewSession(ctx context.Context) (*Session, error) {
	if err := a.check(); err != nil {
		return nil, err
	}
	s, err := newSession(ctx, a)
	if err != nil {
		return nil, err
	}
	a.mu.Lock()
	a.sessions = append(a.sessions, s)
	a.mu.Unlock()
	return s, nil
}

// Deregister ends the App: every session is finalised (its daemons stopped, its directories
// removed), then a job this front end launched is ended unless LetGo was called, in which
// case it is released and left running. An attached job is left running.
func (a *App) Deregister() error {
	a.mu.Lock()
	if a.deregistered {
		a.mu.Unlock()
		return nil
	}
	a.deregistered = true
	sessions := a.sessions
	a.sessions = nil
	keep, launched, released := a.keep, a.launched, a.released
	a.mu.Unlock()
	defer a.fe.remove(a)

	ctx, cancel := context.WithTimeout(context.Background(), a.fe.opts.Timeout)
	defer cancel()
	var errs []error
	for _, s := range sessions {
		if err := s.finalize(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	switch {
	case launched && !keep:
		if err := a.job.Kill(ctx, syscall.SIGTERM); err != nil {
			errs = append(errs, err)
		}
		wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
		if _, err := a.job.Wait(wctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
			a.fe.logf("launch: %s: wait after kill: %v", a.ID(), err)
		}
		wcancel()
	case !released:
		if err := a.job.Release(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if err := a.job.Close(); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("launch: deregister %s: %w", a.ID(), err)
	}
	return nil
}
