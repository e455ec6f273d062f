package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/hpcdap/hpcdap/rankset"
	"github.com/hpcdap/hpcdap/stacks"
	"github.com/hpcdap/hpcdap/topology"
)

// runStacks is `hpcdap stacks`: the merged stacks of a job, sampled from the command line.
func runStacks(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("stacks", stderr)
	pid := fs.Int("pid", 0, "attach to the job of the launcher (mpirun, mpiexec.hydra, srun) with process id `PID`")
	slurm := fs.String("slurm", "", "attach to the Slurm job step `J.S`")
	pids := fs.String("pids", "", "attach to the processes `RANK=PID,...` (or PID,PID,...: ranks 0, 1, ... in order)")
	samples := fs.Int("samples", 1, "take `N` samples, merged into one tree")
	interval := fs.Duration("interval", time.Second, "let the job run `D` between two samples")
	after := fs.Duration("after", 2*time.Second, "let a launched job run `D` before the first sample")
	timeout := fs.Duration("timeout", time.Minute, "bound each phase (attach, every stop, every read of the stacks) to `D`")
	format := fs.String("format", "text", "output `FORMAT`: text, dot (Graphviz) or json (the hpcdap/parallelStacks body)")
	keep := fs.Bool("keep", false, "leave a launched job running after the samples")
	fanout := fs.Int("fanout", topology.DefaultFanout, "reach a job of more than `K` agents (nodes) through a K-ary tree of them (at least 2)")
	agent := fs.String("agent", "", "the hpcdap `EXECUTABLE` the agents run (default: this one)")
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintln(w, "usage: hpcdap stacks [flags] (--pid PID | --slurm J.S | --pids LIST | -- LAUNCHER ARGS...)")
		fmt.Fprintln(w, "\nStops every rank of a job, reads the stack of each of its threads, lets the ranks go and")
		fmt.Fprintln(w, "prints the call paths merged into one tree with the ranks at each function. An attached")
		fmt.Fprintln(w, "job runs on untouched afterwards; a launched one is ended (unless --keep). A node's count")
		fmt.Fprintln(w, "is the number of (rank, thread, sample) observations through it. The exit status is 1")
		fmt.Fprintln(w, "when some rank could not be sampled (they are named on standard error).")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	o := stacks.Options{Target: stacks.Target{LauncherPid: *pid, SlurmJob: *slurm, Command: fs.Args()},
		Samples: *samples, Interval: *interval, After: *after, Timeout: *timeout, Keep: *keep, Fanout: *fanout, AgentPath: *agent, Diag: stderr}
	usageErr := func(err error) error {
		fmt.Fprintf(stderr, "hpcdap stacks: %v\n", err)
		return errUsage
	}
	if *pids != "" {
		m, err := stacks.ParsePids(*pids)
		if err != nil {
			return usageErr(err)
		}
		o.Target.Pids = m
	}
	if *fanout < topology.MinFanout { // 0 too: Options would read it as the default
		return usageErr(fmt.Errorf("--fanout %d: must be at least %d (a tree, not a chain)", *fanout, topology.MinFanout))
	}
	if !slices.Contains(stacks.Formats, *format) {
		return usageErr(fmt.Errorf("--format %q: want one of %s", *format, strings.Join(stacks.Formats, ", ")))
	}
	if err := o.Check(); err != nil {
		return usageErr(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := stacks.Run(ctx, o)
	if err != nil {
		return err
	}
	if err := stacks.WriteTree(stdout, res, *format); err != nil {
		return err
	}
	if len(res.Failed) == 0 {
		return nil
	}
	var failed rankset.Set
	for _, f := range res.Failed {
		failed = failed.Add(f.Rank)
		fmt.Fprintf(stderr, "hpcdap stacks: rank %d not sampled: %s\n", f.Rank, f.Reason)
	}
	return fmt.Errorf("%d of %d rank(s) not sampled: ranks %s", failed.Len(), res.Ranks.Len(), failed)
}
