package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/hpcdap/hpcdap/agent"
)

// journalFDVar names, in a supervised agent worker's environment, the descriptor of its trap
// journal (the write end of the supervisor's pipe).
const journalFDVar = "HPCDAP_AGENT_JOURNAL_FD"

// superviseAgent is `hpcdap agent --supervise`: it runs the agent as a worker child (the same
// arguments without --supervise) with its standard streams, forwards SIGTERM, SIGINT and
// SIGHUP to it, and reads the trap journal it writes to a pipe. When the worker has ended,
// traps the journal still lists (the worker was killed outright and could not remove them)
// get their original bytes back through /proc/PID/mem, so that the processes it served run
// on instead of dying of SIGTRAP; stderr says which.
func superviseAgent(args []string, stdout, stderr io.Writer) error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("agent: --supervise: find this executable: %w", err)
	}
	jr, jw, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("agent: --supervise: journal pipe: %w", err)
	}
	defer jr.Close()
	worker := exec.Command(exe, append([]string{"agent"}, withoutBool(args, "supervise")...)...)
	worker.Stdin, worker.Stdout, worker.Stderr = os.Stdin, stdout, stderr
	worker.ExtraFiles = []*os.File{jw} // descriptor 3
	worker.Env = append(withoutVar(os.Environ(), journalFDVar), journalFDVar+"=3")
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	if err := worker.Start(); err != nil {
		jw.Close()
		return fmt.Errorf("agent: --supervise: start the worker: %w", err)
	}
	jw.Close() // the worker holds the only write end: its death ends the journal
	go func() {
		for s := range sigs {
			worker.Process.Signal(s)
		}
	}()
	traps := agent.NewTrapJournal()
	read := make(chan error, 1)
	go func() { read <- traps.Read(jr) }()
	werr := worker.Wait()
	jerr := <-read
	restored, rerr := traps.Restore()
	for _, s := range restored {
		fmt.Fprintf(stderr, "hpcdap agent: the worker (pid %d) ended (%v) leaving a trap at %#x in pid %d: original bytes restored\n",
			worker.Process.Pid, worker.ProcessState, s.Addr, s.Pid)
	}
	if err := errors.Join(jerr, rerr); err != nil {
		return err
	}
	var ee *exec.ExitError
	if errors.As(werr, &ee) {
		if st, ok := ee.Sys().(syscall.WaitStatus); ok && st.Signaled() {
			return fmt.Errorf("agent: the worker (pid %d) was killed (%v); %d trap(s) restored", worker.Process.Pid, st.Signal(), len(restored))
		}
		return fmt.Errorf("agent: the worker (pid %d) ended: %w", worker.Process.Pid, werr)
	}
	return werr
}

// withoutBool drops the boolean flag name (in any of its spellings) from the agent's arguments
// before the program or "--".
func withoutBool(args []string, name string) []string {
	var out []string
	for i, a := range args {
		if a == "--" {
			return append(out, args[i:]...)
		}
		n, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if strings.HasPrefix(a, "-") && n == name {
			continue
		}
		out = append(out, a)
	}
	return out
}

// withoutVar drops the variable name from env.
func withoutVar(env []string, name string) []string {
	var out []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, name+"=") {
			out = append(out, kv)
		}
	}
	return out
}

// workerJournal returns the trap journal a supervisor gave this agent worker, or nil.
func workerJournal() (io.Writer, error) {
	v := os.Getenv(journalFDVar)
	if v == "" {
		return nil, nil
	}
	fd, err := strconv.Atoi(v)
	if err != nil || fd < 3 {
		return nil, fmt.Errorf("agent: %s=%q: not a descriptor", journalFDVar, v)
	}
	os.Unsetenv(journalFDVar)
	syscall.CloseOnExec(fd) // the processes the agent starts do not write it
	return os.NewFile(uintptr(fd), "trap journal"), nil
}
