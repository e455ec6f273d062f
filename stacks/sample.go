package stacks

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"syscall"
	"time"

	"github.com/hpcdap/hpcdap/adapter"
	"github.com/hpcdap/hpcdap/debugger"
	"github.com/hpcdap/hpcdap/launch"
	"github.com/hpcdap/hpcdap/rankset"
	"github.com/hpcdap/hpcdap/symbols"
	"github.com/hpcdap/hpcdap/topology"
)

// Options are one sampling run.
type Options struct {
	Target   Target
	Samples  int           // how many all-stops (at least 1)
	Interval time.Duration // running time between two samples
	After    time.Duration // a launched job runs this long before the first sample
	Timeout  time.Duration // bound of each phase: bring-up, every stop, every read of the stacks
	Keep     bool          // leave a launched job running after the samples
	// Fanout is the fan-out of the agents' tree (0: the default, 32; at least 2): a job of
	// more agents than that is reached through a tree of them, its stacks merged on the way.
	Fanout int
	// AgentPath is the hpcdap binary the agents run ("": this executable).
	AgentPath string
	// Diag receives the launched job's output and the engine's notices (nil: discarded).
	Diag io.Writer
}

// Check reports options that cannot run.
func (o *Options) Check() error {
	if err := o.Target.Check(); err != nil {
		return err
	}
	switch {
	case o.Samples < 1:
		return fmt.Errorf("--samples %d: take at least one sample", o.Samples)
	case o.Interval < 0:
		return fmt.Errorf("--interval %v: must not be negative", o.Interval)
	case o.After < 0:
		return fmt.Errorf("--after %v: must not be negative", o.After)
	case o.Timeout <= 0:
		return fmt.Errorf("--timeout %v: must be positive", o.Timeout)
	case o.Fanout != 0 && o.Fanout < topology.MinFanout:
		return fmt.Errorf("--fanout %d: must be at least %d (a tree, not a chain)", o.Fanout, topology.MinFanout)
	}
	return nil
}

// Failure is a rank that was not sampled every time, and why.
type Failure struct {
	Rank   int
	Reason string
}

// Result is the merged tree of a run and the ranks it could not sample.
type Result struct {
	Tree    adapter.ParallelStacksBody
	Ranks   rankset.Set // the job's ranks
	Samples int
	Failed  []Failure // by rank
}

// Run samples the job o names and merges its stacks. The job is left as it was found: an
// attached job runs on untouched, a launched one is ended unless o.Keep.
func Run(ctx context.Context, o Options) (*Result, error) {
	if err := o.Check(); err != nil {
		return nil, err
	}
	diag := o.Diag
	if diag == nil {
		diag = io.Discard
	}
	agent := o.AgentPath
	if agent == "" {
		var err error
		if agent, err = launch.AgentExecutable(); err != nil {
			return nil, err
		}
	}
	logDir, err := os.MkdirTemp("", "hpcdap-stacks-*")
	if err != nil {
		return nil, fmt.Errorf("log directory: %w", err)
	}
	defer os.RemoveAll(logDir)

	t := o.Target
	if len(t.Command) > 0 {
		cmd, err := startCommand(ctx, t.Command, o.After, diag)
		if err != nil {
			return nil, err
		}
		if !o.Keep {
			defer endCommand(cmd, o.Timeout)
		}
		if launch.IsLauncher(t.Command[0]) {
			t = Target{LauncherPid: cmd.Process.Pid}
		} else {
			t = Target{Pids: map[int]int{0: cmd.Process.Pid}}
		}
	}
	ev := events{diag: diag, ended: make(chan struct{})}
	j, err := open(ctx, t, agent, logDir, o.Timeout, o.Fanout, ev)
	if err != nil {
		return nil, err
	}
	defer j.End(false) // detach: the ranks run on as if never debugged

	res := &Result{Samples: o.Samples}
	for _, r := range j.Ranks() {
		res.Ranks = res.Ranks.Add(r.Num)
	}
	failed := map[int]string{}
	var all []*debugger.RankStack
	for s := range o.Samples {
		if s > 0 {
			if err := j.ContinueAll(); err != nil {
				return nil, fmt.Errorf("resume the ranks after sample %d: %w", s, err)
			}
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-ev.ended: // every rank has ended: the next sample says so at once
			case <-time.After(o.Interval):
			}
		}
		sctx, cancel := context.WithTimeout(ctx, o.Timeout)
		running := j.StopAll(sctx)
		stacks := j.CollectThreadStacks(sctx, res.Ranks)
		cancel()
		for _, r := range running {
			fail(failed, r.Num, fmt.Sprintf("sample %d: not stopped within %v", s+1, o.Timeout))
		}
		seen := map[int]bool{}
		for _, st := range stacks {
			seen[st.Rank.Num] = true
			if st.Err != nil {
				fail(failed, st.Rank.Num, fmt.Sprintf("sample %d: thread %d: %v", s+1, st.Thread.LWP, st.Err))
			}
		}
		for _, r := range j.Ranks() {
			if !seen[r.Num] {
				if _, ok := failed[r.Num]; !ok {
					fail(failed, r.Num, fmt.Sprintf("sample %d: %s", s+1, j.StateOf(r)))
				}
			}
		}
		all = append(all, stacks...)
	}
	res.Tree = adapter.MergeStacks(all, adapter.MergeOptions{ByFunction: true, Source: localSource})
	for r, why := range failed {
		res.Failed = append(res.Failed, Failure{Rank: r, Reason: why})
	}
	sort.Slice(res.Failed, func(a, b int) bool { return res.Failed[a].Rank < res.Failed[b].Rank })
	return res, nil
}

// fail records a rank's first failure.
func fail(failed map[int]string, rank int, why string) {
	if _, ok := failed[rank]; !ok {
		failed[rank] = why
	}
}

// localSource names a frame's file when it is on this machine.
func localSource(file string) *adapter.StackSource {
	if _, err := os.Stat(file); err != nil {
		return nil
	}
	return &adapter.StackSource{Name: filepath.Base(file), Path: file}
}

// open attaches to the job of t and holds every rank, through the engine as a DAP attach
// does (debugger.WLMJob for a launcher or a Slurm step, launch.LocalAttach for pids).
func open(ctx context.Context, t Target, agent, logDir string, timeout time.Duration, fanout int, ev events) (*debugger.Job, error) {
	diag := ev.diag
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	logger := log.New(io.Discard, "", 0)
	start := (&launch.LocalAttach{AgentPath: agent, LogDir: logDir, Pids: t.Pids}).Start
	var wl *debugger.WLMJob
	what := fmt.Sprintf("attach to pids %v", t.Pids)
	if t.LauncherPid != 0 || t.SlurmJob != "" {
		wl = &debugger.WLMJob{Req: launch.Request{LauncherPid: t.LauncherPid, SlurmJob: t.SlurmJob},
			AgentExe: agent, LogDir: logDir, Logger: logger, Timeout: timeout}
		start = wl.Start
		if what = fmt.Sprintf("attach to the job of launcher pid %d", t.LauncherPid); t.SlurmJob != "" {
			what = "attach to Slurm job step " + t.SlurmJob
		}
	}
	g, err := start(ctx, nil)
	if err != nil {
		if wl != nil {
			wl.End(false)
		}
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	cfg := debugger.Config{Ctx: context.Background(), Events: ev,
		Syms:        symbols.NewCache(&symbols.Options{IndexCacheDir: symbols.DefaultIndexCacheDir()}),
		CallTimeout: debugger.CallTimeout, Fanout: fanout}
	j, err := debugger.NewJob(ctx, cfg, g, debugger.StopAll, "")
	if err != nil {
		g.Kill()
		if wl != nil {
			wl.End(false)
		}
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	err = j.Start(ctx, nil)
	if err == nil {
		if serr := j.LoadSymbols(ctx); serr != nil {
			fmt.Fprintf(diag, "hpcdap stacks: symbols: %v\n", serr)
		}
		if wl != nil {
			err = j.ReleaseLauncher(ctx, wl)
		}
	}
	if err != nil {
		j.Detach()
		j.CloseNodes(false)
		if wl != nil {
			wl.End(false)
		}
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return j, nil
}

// startCommand runs a job's command line, its output to diag, in a process group of its own,
// and lets it run for after. A job that ends meanwhile is an error: there is nothing to sample.
func startCommand(ctx context.Context, argv []string, after time.Duration, diag io.Writer) (*exec.Cmd, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = diag, diag
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", argv[0], err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		if err == nil {
			err = errors.New("exit status 0")
		}
		return nil, fmt.Errorf("%s ended before the first sample (%v): nothing to sample", argv[0], err)
	case <-ctx.Done():
		endCommand(cmd, time.Second)
		return nil, ctx.Err()
	case <-time.After(after):
	}
	// cmd.Wait runs in the goroutine: endCommand waits for the process group instead.
	return cmd, nil
}

// endCommand ends a launched job: SIGTERM to its process group, SIGKILL after grace.
func endCommand(cmd *exec.Cmd, grace time.Duration) {
	pgid := cmd.Process.Pid
	syscall.Kill(-pgid, syscall.SIGTERM)
	deadline := time.Now().Add(grace)
	for time.Now().Before(deadline) {
		if syscall.Kill(-pgid, 0) != nil {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	syscall.Kill(-pgid, syscall.SIGKILL)
}

// events receives the engine's reports: the notices go to diag, the run-control events are
// the sampler's own doing, and the end of the job (every rank ended) closes ended, so that
// the wait between two samples ends with it.
type events struct {
	diag  io.Writer
	ended chan struct{}
}

func (e events) Output(category, text string, rank int) {
	if category == "important" || category == "stdout" || category == "stderr" {
		fmt.Fprint(e.diag, text)
	}
}
func (events) Stopped(debugger.StopEvent) {}
func (events) Continued(int)              {}
func (events) Exited(int)                 {}
func (e events) Terminated() {
	select {
	case <-e.ended:
	default:
		close(e.ended)
	}
}
func (events) BreakpointChanged(*debugger.Breakpoint) {}
func (events) RanksChanged([]debugger.RankStatus)     {}
func (events) StopOver(int)                           {}
func (events) ModuleLoaded(*symbols.Module)           {}
func (events) Logf(string, ...any)                    {}
