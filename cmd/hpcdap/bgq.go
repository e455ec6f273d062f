package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hpcdap/hpcdap/bgq"
)

// runBGQ is `hpcdap bgq`: the emulated Blue Gene/Q system's commands.
func runBGQ(args []string, stdout, stderr io.Writer) error {
	usage := func() {
		fmt.Fprintln(stderr, "usage: hpcdap bgq (runjob | start_tool | end_tool) [flags]")
		fmt.Fprintln(stderr, "\n  runjob      run a job on an emulated Blue Gene/Q, with runjob's MPIR interface")
		fmt.Fprintln(stderr, "  start_tool  start a tool on the I/O nodes of a running job")
		fmt.Fprintln(stderr, "  end_tool    end a tool of a running job (SIGTERM)")
	}
	if len(args) == 0 {
		usage()
		return errUsage
	}
	switch args[0] {
	case "runjob":
		return runBGQRunjob(args[1:], stdout, stderr)
	case "start_tool":
		return runBGQStartTool(args[1:], stdout, stderr)
	case "end_tool":
		return runBGQEndTool(args[1:], stdout, stderr)
	case "-h", "-help", "--help", "help":
		usage()
		return nil
	}
	fmt.Fprintf(stderr, "hpcdap bgq: unknown command %q\n", args[0])
	usage()
	return errUsage
}

// listFlag is a flag that may be given more than once, each value split at white space, as
// runjob's --args and --envs.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, " ") }
func (l *listFlag) Set(s string) error {
	*l = append(*l, strings.Fields(s)...)
	return nil
}

// runBGQRunjob is `hpcdap bgq runjob`. Started by a user or a tool, it execs the MPIR helper
// beside the binary (hpcdap-runjob), which holds the MPIR symbols and starts this command
// again as its child, driven over pipes.
func runBGQRunjob(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("bgq runjob", stderr)
	np := fs.Int("np", 1, "number of ranks")
	rpn := fs.Int("ranks-per-node", 1, "ranks per compute node (1 to 64)")
	exe := fs.String("exe", "", "the program of every rank (a static big-endian Power executable)")
	var progArgs, envs listFlag
	fs.Var(&progArgs, "args", "the program's arguments (white-space separated; may be repeated)")
	fs.Var(&envs, "envs", "NAME=VALUE environment of the ranks (white-space separated; may be repeated)")
	cwd := fs.String("cwd", "", "the ranks' working directory (default: the current one)")
	cpi := fs.Int("cn-per-ion", 2, "emulator: compute nodes per I/O node")
	root := fs.String("root", bgq.DefaultRoot(), "emulator: the private `DIR` holding the I/O nodes (<DIR>/ion<k>/jobs, var/cios)")
	emulator := fs.String("emulator", "qemu-ppc64", "emulator: the QEMU user-mode emulator of the compute nodes (`NAME` or path)")
	jobID := fs.Uint64("job-id", 0, "emulator: the job id (default: runjob's process id)")
	poll := fs.Duration("poll", time.Second, "emulator: how often MPIR_being_debugged is read for an attach")
	toolTimeout := fs.Duration("tool-timeout", bgq.DefaultToolTimeout, "emulator: how long a tool's status file may go untouched before the tool is treated as gone")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: hpcdap bgq runjob --np N --ranks-per-node R --exe PROGRAM [--args ARGS] [--envs NAME=VALUE] [--cwd DIR] [emulator flags]")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "hpcdap bgq runjob: unexpected arguments %q (give the program's with --args)\n", fs.Args())
		return errUsage
	}
	for _, e := range envs {
		if k, _, ok := strings.Cut(e, "="); !ok || k == "" {
			fmt.Fprintf(stderr, "hpcdap bgq runjob: --envs %q: want NAME=VALUE\n", e)
			return errUsage
		}
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find the hpcdap binary: %w", err)
	}
	mpir, driven, err := bgq.MPIRFromEnv()
	if err != nil {
		return err
	}
	if !driven {
		helper := filepath.Join(filepath.Dir(self), bgq.HelperName)
		if _, err := os.Stat(helper); err != nil {
			return fmt.Errorf("runjob's MPIR helper %s is missing (make build puts it beside hpcdap): %w", helper, err)
		}
		env := append(os.Environ(), "HPCDAP_BGQ_HPCDAP="+self)
		return syscall.Exec(helper, append([]string{helper}, args...), env)
	}
	if *jobID == 0 {
		*jobID = uint64(os.Getpid())
	}
	out, _ := stdout.(*os.File)
	rj := &bgq.Runjob{MPIR: mpir, Poll: *poll, Config: bgq.Config{Hpcdap: self, Emulator: *emulator, Root: *root,
		NP: *np, RanksPerNode: *rpn, CNPerION: *cpi, Exe: *exe, Args: progArgs, Envs: envs, Cwd: *cwd,
		JobID: *jobID, Output: out, ToolTimeout: *toolTimeout,
		Logf: func(format string, a ...any) { fmt.Fprintf(stderr, format+"\n", a...) }}}
	rj.Control = func(j *bgq.Job) {
		if err := bgq.ServeControl(j, os.Getppid()); err != nil {
			fmt.Fprintf(stderr, "hpcdap bgq runjob: %v (start_tool and end_tool cannot reach this job)\n", err)
		}
		fmt.Fprintf(stderr, "hpcdap bgq runjob: job %d: %d ranks, I/O nodes under %s\n", j.ID(), *np, *root)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	return rj.Run(ctx)
}

// runBGQStartTool is `hpcdap bgq start_tool`.
func runBGQStartTool(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("bgq start_tool", stderr)
	id := fs.Uint64("id", 0, "the job's id")
	pid := fs.Int("pid", 0, "the `PID` of the job's runjob on this host (instead of --id)")
	tool := fs.String("tool", "", "the tool's executable")
	var toolArgs listFlag
	fs.Var(&toolArgs, "args", "the tool's arguments (white-space separated; may be repeated)")
	root := fs.String("root", bgq.DefaultRoot(), "emulator: the job's root `DIR` (runjob's --root)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if (*id == 0) == (*pid == 0) || *pid < 0 || *tool == "" || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "usage: hpcdap bgq start_tool (--id JOB | --pid RUNJOBPID) --tool PATH [--args \"ARGS\"] [--root DIR]")
		return errUsage
	}
	toolID, job, err := bgq.StartToolOf(bgq.JobRef{Root: *root, ID: *id, Pid: *pid}, *tool, toolArgs)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "tool %d started for job %d\n", toolID, job)
	return nil
}

// runBGQEndTool is `hpcdap bgq end_tool`.
func runBGQEndTool(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("bgq end_tool", stderr)
	id := fs.Uint64("id", 0, "the job's id")
	pid := fs.Int("pid", 0, "the `PID` of the job's runjob on this host (instead of --id)")
	tool := fs.String("tool", "", "the tool's `ID` (as start_tool printed it)")
	root := fs.String("root", bgq.DefaultRoot(), "emulator: the job's root `DIR` (runjob's --root)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	toolID, err := strconv.ParseUint(*tool, 10, 32)
	if (*id == 0) == (*pid == 0) || *pid < 0 || err != nil || toolID == 0 || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "usage: hpcdap bgq end_tool (--id JOB | --pid RUNJOBPID) --tool TOOLID [--root DIR]")
		return errUsage
	}
	ref := bgq.JobRef{Root: *root, ID: *id, Pid: *pid}
	if err := bgq.EndToolOf(ref, uint32(toolID)); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "tool %d of %s ended\n", toolID, ref)
	return nil
}
