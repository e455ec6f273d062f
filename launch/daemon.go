package launch

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// DaemonSet is a set of tool daemons, one per host, started by a workload manager: local
// children or the tasks of one srun step. Their standard output and error go to a log file.
type DaemonSet struct {
	Hosts   []string
	LogPath string

	cmds []*exec.Cmd
	// terminate, when set, asks the daemons themselves to end (for a Slurm step: scancel
	// --signal=TERM, since srun itself ends a step with SIGKILL).
	terminate func() error
	// signal, when set, signals the daemons (those a launcher started as debugger daemons,
	// which are not this process's children).
	signal func(syscall.Signal)
	// targetEnded, when set, is closed once the job that debugger daemons debug has ended
	// (or can no longer be told of): no job is then spared by waiting for them to end by
	// themselves, which daemons that never met a front end may not do for a long time.
	targetEnded <-chan struct{}
	// endedFrom, when set, reads from the log which hosts' daemons have ended (the tasks of
	// one srun step); otherwise each command is one host's daemon.
	endedFrom func(log string) map[string]string
	done      chan struct{}
	mu        sync.Mutex
	errs      []error
	ended     map[string]string // host → how its command ended
}

// startDaemonCmds starts the commands (each with its output in logPath) and watches them.
func startDaemonCmds(hosts []string, cmds []*exec.Cmd, logPath string) (*DaemonSet, error) {
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("launch: daemon log: %w", err)
	}
	defer log.Close()
	d := &DaemonSet{Hosts: hosts, LogPath: logPath, cmds: cmds, done: make(chan struct{}), ended: map[string]string{}}
	var wg sync.WaitGroup
	for i, c := range cmds {
		c.Stdout, c.Stderr = log, log
		if c.SysProcAttr == nil {
			// The daemons end with the front end.
			c.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM, Setpgid: true}
		}
		if err := c.Start(); err != nil {
			for _, started := range cmds[:i] {
				started.Process.Kill()
			}
			wg.Wait()
			return nil, fmt.Errorf("launch: start daemon %s: %w", c.Path, err)
		}
		wg.Go(func() {
			err := c.Wait()
			d.mu.Lock()
			defer d.mu.Unlock()
			if err != nil {
				d.errs = append(d.errs, fmt.Errorf("%s: %w", strings.Join(c.Args, " "), err))
			}
			if len(cmds) == len(hosts) {
				d.ended[hosts[i]] = c.ProcessState.String()
			}
		})
	}
	go func() { wg.Wait(); close(d.done) }()
	return d, nil
}

// Done is closed when every daemon (or the step that runs them) has ended.
func (d *DaemonSet) Done() <-chan struct{} { return d.done }

// Ended lists the hosts whose daemon has ended so far, each with how it ended (its exit
// status, and for a Slurm step the task's last lines of output).
func (d *DaemonSet) Ended() map[string]string {
	if d.endedFrom != nil {
		return d.endedFrom(d.Log())
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make(map[string]string, len(d.ended))
	for h, why := range d.ended {
		out[h] = why
	}
	return out
}

// settle waits until the daemons' output has not grown for quiet, or at most max.
func (d *DaemonSet) settle(quiet, max time.Duration) {
	deadline := time.Now().Add(max)
	last, since := len(d.Log()), time.Now()
	for time.Now().Before(deadline) && time.Since(since) < quiet {
		time.Sleep(50 * time.Millisecond)
		if n := len(d.Log()); n != last {
			last, since = n, time.Now()
		}
	}
}

// Wait waits for the daemons to end and returns their failures.
func (d *DaemonSet) Wait(ctx context.Context) error {
	select {
	case <-d.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return errors.Join(d.errs...)
}

// Signal sends sig to the daemon processes (for srun: to srun, which forwards most signals to
// its tasks).
func (d *DaemonSet) Signal(sig syscall.Signal) {
	if d.signal != nil {
		d.signal(sig)
	}
	for _, c := range d.cmds {
		if c.Process != nil {
			c.Process.Signal(sig)
		}
	}
}

// Stop asks the daemons to end (SIGTERM), then kills what is left after grace.
func (d *DaemonSet) Stop(grace time.Duration) {
	select {
	case <-d.done:
		return
	default:
	}
	if d.signal != nil {
		// A launcher's debugger daemons (agents told to end over the management plane) are
		// left to end by themselves first: PRRTE ends the job they debug with them when they
		// are signalled.
		select {
		case <-d.done:
			return
		case <-d.targetEnded:
			// The job ended: daemons told to end over the management plane end within
			// moments (the launcher, busy ending the job, may not answer a signal request
			// meanwhile); only those that never met a front end wait longer.
			select {
			case <-d.done:
				return
			case <-time.After(min(grace, targetEndedWait)):
			}
		case <-time.After(grace):
		}
	}
	if d.terminate != nil {
		// Signalling srun itself while its job ends can kill it before slurmstepd has
		// reported the tasks' exit, which then holds the job for a minute: if terminate
		// fails (the job is gone), srun is left to end on its own within grace.
		d.terminate()
	} else {
		d.Signal(syscall.SIGTERM)
	}
	select {
	case <-d.done:
		return
	case <-time.After(grace):
	}
	d.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
		return
	case <-time.After(grace):
	}
	for _, c := range d.cmds {
		if c.Process != nil {
			c.Process.Kill()
		}
	}
	if d.signal != nil {
		// Not children: their end is learnt from whoever started them, which may not say.
		d.signal(syscall.SIGKILL)
		select {
		case <-d.done:
		case <-time.After(grace):
		}
		return
	}
	<-d.done
}

// targetEndedWait is how long Stop waits for a launcher's debugger daemons to end by
// themselves once their job has ended, before it signals them.
const targetEndedWait = 2 * time.Second

// Log returns the daemons' combined output so far.
func (d *DaemonSet) Log() string {
	b, _ := os.ReadFile(d.LogPath)
	return string(b)
}
