package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/hpcdap/hpcdap/agent"
	"github.com/hpcdap/hpcdap/cdti"
	"github.com/hpcdap/hpcdap/target/ptrace"
	"golang.org/x/sys/unix"
)

// runAgent is `hpcdap agent`: the per-node daemon that controls the ranks of one node.
func runAgent(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("agent", stderr)
	listen := fs.String("listen", "", "serve both planes on `ADDR` (host:port; port 0 picks one) and print \"listening on HOST:PORT\"")
	connect := fs.String("connect", "", "register with the front end at `ADDR` (agent.register), listening on an ephemeral port of the address that reaches it")
	np := fs.Int("np", 1, "spawn mode: number of ranks to start")
	firstRank := fs.Int("first-rank", 0, "spawn mode: rank of the first process")
	jobSize := fs.Int("job-size", 0, "spawn mode: HPCDAP_NP given to the ranks (default first-rank+np)")
	attach := fs.String("attach", "", "attach mode: `RANK=PID,...` pairs, as a launcher's proctable gives them")
	perAgent := fs.Int("ranks-per-agent", cdti.MaxRanksPerNode, "attach mode with --connect: serve the --attach list by one agent per `N` ranks, each registering on its own (an agent serves at most 64)")
	staging := fs.String("staging", "", "the session's staging `DIR`, served by the CDTI file commands")
	removeStaging := fs.Bool("remove-staging", false, "remove the --staging directory when the agent ends (its node's daemon made it)")
	jobID := fs.Uint64("job-id", 0, "job id CDTI messages carry")
	output := fs.String("output", "", "spawn mode: append the ranks' stdout and stderr to `FILE` (default: the agent's stderr)")
	capture := fs.Bool("capture-output", false, "spawn mode: give each rank its own stdout and stderr pipes, served by the management call output.subscribe (--output is then unused)")
	logFile := fs.String("log", "", "write diagnostics to `FILE` (default: stderr)")
	backendName := fs.String("backend", "ptrace", "how processes are controlled: `ptrace` (Linux processes of this host) or rsp (Power programs under a GDB remote-protocol stub)")
	emulator := fs.String("emulator", "", "rsp back end: start each rank under this QEMU user-mode emulator (`NAME` qemu-ppc64 or qemu-ppc64le, or a path)")
	sysroot := fs.String("sysroot", "", "rsp back end: the target's `DIR` for dynamic programs (QEMU's -L)")
	interruptSig := fs.String("interrupt-signal", os.Getenv("HPCDAP_AGENT_INTERRUPT_SIGNAL"),
		"rsp back end: the host `SIGNAL` (SIGUSR1, ...) that interrupts a running program under QEMU ≥ 9, which ignores the protocol's interrupt and dies of a signal the program does not handle: the program must handle it (default from HPCDAP_AGENT_INTERRUPT_SIGNAL; without it running ranks cannot be paused there)")
	stubAddr := fs.String("rsp", "", "rsp back end: connect to the stub at `HOST:PORT` that runs the program (gdbserver, qemu -g) instead of starting an emulator")
	launcher := fs.Bool("launcher", false, "spawn mode: the program is a job's launcher (mpirun, srun, mpiexec.hydra): spawned without HPCDAP_RANK and HPCDAP_NP, reported by the management calls ranks and launcher as the launcher")
	killOnExit := fs.Bool("kill-on-exit", false, "kill what the agent spawned, instead of letting it run, when the front end's last connection closes, on SIGTERM/SIGINT/SIGHUP, or when the agent's parent dies")
	endWithFE := fs.Bool("end-with-front-end", false, "end, detaching from every process, when the front end's last connection closes (for an agent that is not the front end's child, such as a launcher's debugger daemon)")
	supervise := fs.Bool("supervise", false, "attach mode: run the agent as a child worker and, if the worker is killed outright (SIGKILL), put back the original instructions of the breakpoints it left planted, so that the processes run on instead of dying of SIGTRAP")
	noTrapConds := fs.Bool("no-trap-conditions", os.Getenv("HPCDAP_AGENT_NO_TRAP_CONDITIONS") != "",
		"answer SetTrapCondition with CmdInval, as a BG/Q CNK does, so that the front end decides every breakpoint hit (default from HPCDAP_AGENT_NO_TRAP_CONDITIONS)")
	tokenFile := fs.String("token-file", "", "read the session token from `FILE` (this user's, mode 0600) instead of HPCDAP_TOKEN: for an agent whose environment its workload manager does not pass on (a BG/Q CIOS tool)")
	cnk := fs.Bool("cnk", os.Getenv("HPCDAP_AGENT_CNK") != "",
		"behave on the wire as a Blue Gene/Q Compute Node Kernel, which speaks CDTI v6 only: answer every extension command (TargetInfo, StopProcess, native register sets, tracebacks, CallFunction, SetTrapCondition) with CmdInval and extension messages (GatherStacks) with ErrorAck(UnsupportedType), and place ack payloads in a shuffled order; the session's Hello is still required; implies --no-trap-conditions (default from HPCDAP_AGENT_CNK)")
	followExec := fs.String("follow-exec", "", "follow the forks of the launcher given after -- and serve as ranks the processes that exec `PROGRAM` (rank from PMI_RANK), each held at its exec (for MPICH hydra)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: hpcdap agent (--listen ADDR | --connect ADDR) [flags] (--attach R=PID,... | [--np N] -- PROGRAM ARGS... | --launcher -- LAUNCHER ARGS... | --follow-exec PROGRAM -- LAUNCHER ARGS...)")
		fmt.Fprintln(fs.Output(), "\nThe session token is read from HPCDAP_TOKEN, else from --token-file.")
		fmt.Fprintln(fs.Output(), "Started by a BG/Q jobctld (BG_JOBID and BG_TOOLID set), the agent is that job's CIOS tool: it relays CDTI to the job's toolctld sockets and takes no program.")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	argv := fs.Args()
	job, err := ciosJob()
	if err != nil {
		fmt.Fprintf(stderr, "hpcdap agent: %v\n", err)
		return errUsage
	}
	if job != nil {
		var given []string
		fs.Visit(func(f *flag.Flag) {
			switch f.Name {
			case "listen", "connect", "log", "token-file":
			default:
				given = append(given, "--"+f.Name)
			}
		})
		if len(argv) > 0 {
			given = append(given, "a program")
		}
		if len(given) > 0 {
			fmt.Fprintf(stderr, "hpcdap agent: a CIOS tool (BG_JOBID %d) relays to its job's ranks and takes only --listen or --connect, --token-file and --log: not %s\n",
				job.ID, strings.Join(given, ", "))
			return errUsage
		}
	}
	switch {
	case *listen == "" && *connect == "":
		fmt.Fprintln(stderr, "hpcdap agent: give --listen or --connect")
		return errUsage
	case *attach != "" && len(argv) > 0:
		fmt.Fprintln(stderr, "hpcdap agent: give either --attach or a program, not both")
		return errUsage
	case job == nil && *attach == "" && len(argv) == 0:
		fmt.Fprintln(stderr, "hpcdap agent: give a program to spawn (after --) or --attach")
		return errUsage
	case *launcher && *followExec != "":
		fmt.Fprintln(stderr, "hpcdap agent: give either --launcher or --follow-exec, not both")
		return errUsage
	case *launcher && *np != 1:
		fmt.Fprintln(stderr, "hpcdap agent: --launcher spawns one process: --np must be 1")
		return errUsage
	case *followExec != "" && (*np != 1 || *firstRank != 0 || *jobSize != 0 || *capture):
		fmt.Fprintln(stderr, "hpcdap agent: --follow-exec takes its ranks from the launcher: --np, --first-rank, --job-size and --capture-output do not apply")
		return errUsage
	case *followExec != "" && *backendName != "ptrace":
		fmt.Fprintln(stderr, "hpcdap agent: --follow-exec needs the ptrace back end")
		return errUsage
	case *supervise && (*attach == "" || *backendName != "ptrace"):
		// Processes the agent spawns die with it (PTRACE_O_EXITKILL): only attached ones
		// outlive it with its traps.
		fmt.Fprintln(stderr, "hpcdap agent: --supervise needs --attach and the ptrace back end")
		return errUsage
	}
	if *removeStaging && *staging != "" {
		// Removed by the supervisor, which outlives a worker killed outright, or by the
		// parent of a node's agents (runAgentGroups), which they share.
		defer os.RemoveAll(*staging)
	}
	if *attach != "" && job == nil {
		pids, err := agent.ParseAttachList(*attach)
		if err != nil {
			fmt.Fprintf(stderr, "hpcdap agent: --attach: %v\n", err)
			return errUsage
		}
		switch {
		case *perAgent < 1 || *perAgent > cdti.MaxRanksPerNode:
			fmt.Fprintf(stderr, "hpcdap agent: --ranks-per-agent %d: want 1 to %d\n", *perAgent, cdti.MaxRanksPerNode)
			return errUsage
		case len(pids) > *perAgent && *connect == "":
			fmt.Fprintf(stderr, "hpcdap agent: --attach lists %d ranks, more than one agent serves (%d): give --connect, so that each agent of a group registers on its own\n", len(pids), *perAgent)
			return errUsage
		case len(pids) > *perAgent:
			return runAgentGroups(args, agentGroups(pids, *perAgent), stdout, stderr)
		}
	}
	if *supervise {
		return superviseAgent(args, stdout, stderr)
	}
	if job != nil {
		token, err := agentToken(*tokenFile)
		if err != nil {
			return err
		}
		return runCIOSAgent(job, token, *listen, *connect, *logFile, stdout, stderr)
	}
	journal, err := workerJournal()
	if err != nil {
		return err
	}
	if *killOnExit {
		// The parent's death comes as SIGTERM, handled below like any SIGTERM.
		ppid := os.Getppid()
		if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(syscall.SIGTERM), 0, 0, 0); err != nil {
			return fmt.Errorf("agent: --kill-on-exit: set the parent-death signal: %w", err)
		}
		if os.Getppid() != ppid {
			return errors.New("agent: --kill-on-exit: the parent has already exited")
		}
	}
	token, err := agentToken(*tokenFile)
	if err != nil {
		return err
	}
	var pids map[uint32]int
	if *attach != "" {
		var err error
		if pids, err = agent.ParseAttachList(*attach); err != nil {
			fmt.Fprintf(stderr, "hpcdap agent: --attach: %v\n", err)
			return errUsage
		}
	}

	logOut := stderr
	if *logFile != "" {
		f, err := os.OpenFile(*logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return err
		}
		defer f.Close()
		logOut = f
	}
	logger := log.New(logOut, "", log.LstdFlags|log.Lmicroseconds)

	var backend agent.Backend
	switch *backendName {
	case "ptrace":
		if *emulator != "" || *stubAddr != "" || *sysroot != "" {
			fmt.Fprintln(stderr, "hpcdap agent: --emulator, --sysroot and --rsp need --backend rsp")
			return errUsage
		}
		tracer, err := ptrace.NewTracer()
		if err != nil {
			return err
		}
		defer tracer.Close()
		backend = tracer
	case "rsp":
		b, err := rspBackend(*emulator, *sysroot, *stubAddr, *attach, *np, *interruptSig, logger)
		if err != nil {
			fmt.Fprintf(stderr, "hpcdap agent: %v\n", err)
			return errUsage
		}
		backend = b
	default:
		fmt.Fprintf(stderr, "hpcdap agent: --backend %q: want ptrace or rsp\n", *backendName)
		return errUsage
	}
	a, err := agent.New(agent.Config{Token: token, Backend: backend, JobID: *jobID, Version: buildVersion(),
		StagingDir: *staging, Logger: logger, KillOnExit: *killOnExit, EndWithFrontEnd: *endWithFE, Journal: journal,
		NoTrapConditions: *noTrapConds, CNK: *cnk})
	if err != nil {
		return err
	}
	if pids != nil {
		attach := a.AttachRanks
		if *connect != "" {
			// Started for a job by its workload manager: a rank that died meanwhile is reported
			// to the front end, not a reason to give up the node's other ranks.
			attach = a.AttachLiveRanks
		}
		if err := attach(pids); err != nil {
			return err
		}
	} else {
		out := os.Stderr
		if *output != "" {
			f, err := os.OpenFile(*output, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
			if err != nil {
				return err
			}
			defer f.Close()
			out = f
		}
		if *followExec != "" {
			spec := agent.FollowSpec{Argv: argv, Program: *followExec, Stdio: []*os.File{nil, out, out}}
			if err := a.FollowExec(spec); err != nil {
				a.Shutdown(true)
				return err
			}
		} else {
			spec := agent.SpawnSpec{Argv: argv, Stdio: []*os.File{nil, out, out}, FirstRank: *firstRank,
				Count: *np, JobSize: *jobSize, CaptureOutput: *capture, Launcher: *launcher}
			if err := a.SpawnRanks(spec); err != nil {
				a.Shutdown(true)
				return err
			}
		}
	}

	return serveAgent(a, *listen, *connect, *killOnExit, logger, stdout)
}

// serveAgent serves a's two planes on a listener (on listen, or toward the front end at
// connect, with which it then registers) until it ends or a signal ends it.
func serveAgent(a *agent.Agent, listen, connect string, killOnExit bool, logger *log.Logger, stdout io.Writer) error {
	var l net.Listener
	var err error
	if listen != "" {
		l, err = net.Listen("tcp", listen)
	} else {
		l, err = agent.ListenToward(connect) // the front end learns the port from agent.register
	}
	if err != nil {
		a.Shutdown(true)
		return err
	}
	fmt.Fprintf(stdout, "listening on %s\n", l.Addr())
	if f, ok := stdout.(*os.File); ok {
		f.Sync()
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	go func() {
		select {
		case s := <-sigs:
			if killOnExit {
				logger.Printf("agent: %v: killing what the agent spawned (--kill-on-exit)", s)
			} else {
				logger.Printf("agent: %v: detaching from every process", s)
			}
			a.Shutdown(killOnExit)
		case <-ctx.Done():
		}
	}()
	served := make(chan error, 1)
	go func() { served <- a.Serve(ctx, l) }()
	if connect != "" {
		go func() {
			if err := a.Register(ctx, connect, l.Addr()); err != nil {
				logger.Printf("%v", err)
				a.Shutdown(killOnExit)
			}
		}()
	}
	select {
	case <-a.Done():
		<-served
		return nil
	case err := <-served:
		a.Shutdown(false)
		return err
	}
}

// rspBackend checks the rsp back end's flags and builds it.
func rspBackend(emulator, sysroot, stubAddr, attach string, np int, interrupt string, logger *log.Logger) (*agent.RSPBackend, error) {
	switch {
	case attach != "":
		return nil, errors.New("--backend rsp cannot --attach: give the program (under --emulator) or its stub (--rsp)")
	case (emulator == "") == (stubAddr == ""):
		return nil, errors.New("--backend rsp needs one of --emulator and --rsp")
	case stubAddr != "" && np != 1:
		return nil, errors.New("--rsp serves one rank: --np must be 1")
	case stubAddr != "" && sysroot != "":
		return nil, errors.New("--sysroot is an emulator option: it has no meaning with --rsp")
	}
	b := &agent.RSPBackend{Addr: stubAddr, Logf: logger.Printf}
	if interrupt != "" {
		name := strings.ToUpper(interrupt)
		if !strings.HasPrefix(name, "SIG") {
			name = "SIG" + name
		}
		sig := unix.SignalNum(name)
		if sig == 0 || sig == unix.SIGKILL || sig == unix.SIGSTOP {
			return nil, fmt.Errorf("--interrupt-signal %q: not a signal a program can handle", interrupt)
		}
		b.InterruptSignal = sig
	}
	if emulator != "" {
		path, err := agent.FindEmulator(emulator)
		if err != nil {
			return nil, err
		}
		b.Emulator = path
		if sysroot != "" {
			b.EmulatorArgs = []string{"-L", sysroot}
		}
	}
	return b, nil
}
