package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/hpcdap/hpcdap/agent"
	"github.com/hpcdap/hpcdap/target/ptrace"
)

// runAgent is `hpcdap agent`: the per-node daemon that controls the ranks of one node.
func runAgent(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("agent", stderr)
	listen := fs.String("listen", "", "serve both planes on `ADDR` (host:port; port 0 picks one) and print \"listening on HOST:PORT\"")
	connect := fs.String("connect", "", "register with the front end at `ADDR` (agent.register), listening on an ephemeral port")
	np := fs.Int("np", 1, "spawn mode: number of ranks to start")
	firstRank := fs.Int("first-rank", 0, "spawn mode: rank of the first process")
	jobSize := fs.Int("job-size", 0, "spawn mode: HPCDAP_NP given to the ranks (default first-rank+np)")
	attach := fs.String("attach", "", "attach mode: `RANK=PID,...` pairs, as a launcher's proctable gives them")
	staging := fs.String("staging", "", "the session's staging `DIR`, served by the CDTI file commands")
	jobID := fs.Uint64("job-id", 0, "job id CDTI messages carry")
	output := fs.String("output", "", "spawn mode: append the ranks' stdout and stderr to `FILE` (default: the agent's stderr)")
	capture := fs.Bool("capture-output", false, "spawn mode: give each rank its own stdout and stderr pipes, served by the management call output.subscribe (--output is then unused)")
	logFile := fs.String("log", "", "write diagnostics to `FILE` (default: stderr)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: hpcdap agent (--listen ADDR | --connect ADDR) [flags] (--attach R=PID,... | [--np N] -- PROGRAM ARGS...)")
		fmt.Fprintln(fs.Output(), "\nThe session token is read from HPCDAP_TOKEN.")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	argv := fs.Args()
	switch {
	case *listen == "" && *connect == "":
		fmt.Fprintln(stderr, "hpcdap agent: give --listen or --connect")
		return errUsage
	case *attach != "" && len(argv) > 0:
		fmt.Fprintln(stderr, "hpcdap agent: give either --attach or a program, not both")
		return errUsage
	case *attach == "" && len(argv) == 0:
		fmt.Fprintln(stderr, "hpcdap agent: give a program to spawn (after --) or --attach")
		return errUsage
	}
	token := os.Getenv("HPCDAP_TOKEN")
	if token == "" {
		return errors.New("no session token: set HPCDAP_TOKEN (the token is never taken from the command line)")
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

	tracer, err := ptrace.NewTracer()
	if err != nil {
		return err
	}
	defer tracer.Close()
	a, err := agent.New(agent.Config{Token: token, Backend: tracer, JobID: *jobID, Version: buildVersion(),
		StagingDir: *staging, Logger: logger})
	if err != nil {
		return err
	}
	if pids != nil {
		if err := a.AttachRanks(pids); err != nil {
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
		spec := agent.SpawnSpec{Argv: argv, Stdio: []*os.File{nil, out, out}, FirstRank: *firstRank,
			Count: *np, JobSize: *jobSize, CaptureOutput: *capture}
		if err := a.SpawnRanks(spec); err != nil {
			a.Shutdown(true)
			return err
		}
	}

	addr := *listen
	if addr == "" {
		addr = ":0" // --connect: the front end learns the port from agent.register
	}
	l, err := net.Listen("tcp", addr)
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
			logger.Printf("agent: %v: detaching from every process", s)
			a.Shutdown(false)
		case <-ctx.Done():
		}
	}()
	served := make(chan error, 1)
	go func() { served <- a.Serve(ctx, l) }()
	if *connect != "" {
		go func() {
			if err := a.Register(ctx, *connect, l.Addr()); err != nil {
				logger.Printf("%v", err)
				a.Shutdown(false)
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
