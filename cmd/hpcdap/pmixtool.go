package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/hpcdap/hpcdap/launch"
	"github.com/hpcdap/hpcdap/launch/pmix"
	"golang.org/x/sys/unix"
)

// runPMIxTool serves one job's PMIx tool for the front end (hidden: the front end starts it):
// requests on standard input, events on file descriptor 3.
func runPMIxTool(args []string, stdout, stderr io.Writer) error {
	if len(args) != 0 {
		return errUsage
	}
	return pmix.ServeTool(os.Stdin, os.NewFile(3, "events"))
}

// runPMIxDaemon is `hpcdap pmix-daemon [--log FILE] -- AGENT ARGV...` (hidden: a PMIx launcher
// starts it as a debugger daemon on each node of a job, at the front end's request). It reads
// the job's ranks on this node from the launcher's PMIx server and becomes the node's agent:
// it execs AGENT ARGV with `--attach RANK=PID,...` added, so that the launcher's daemon is the
// agent itself. With --log its standard output and error, and so the agent's, go to FILE.
func runPMIxDaemon(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("pmix-daemon", stderr)
	logFile := fs.String("log", "", "append this daemon's and its agent's output to `FILE`")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	argv := fs.Args()
	if len(argv) == 0 || !strings.HasPrefix(argv[0], "/") {
		fmt.Fprintln(stderr, "hpcdap pmix-daemon: give the agent's command line, its program an absolute path, after --")
		return errUsage
	}
	if *logFile != "" {
		// The file is the front end's, on its host: a daemon on another node, where it does
		// not exist, keeps the standard error the launcher forwards instead of failing.
		if f, err := os.OpenFile(*logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600); err != nil {
			fmt.Fprintf(stderr, "pmix-daemon: log %s: %v (output stays on the launcher's)\n", *logFile, err)
		} else {
			for _, fd := range []int{1, 2} {
				if err := unix.Dup2(int(f.Fd()), fd); err != nil {
					return fmt.Errorf("pmix-daemon: log %s: %w", *logFile, err)
				}
			}
			f.Close()
		}
	}
	host, _ := os.Hostname()
	target, procs, err := pmix.DaemonProcs()
	if err != nil {
		return fmt.Errorf("pmix-daemon on %s: %w", host, err)
	}
	if len(procs) == 0 {
		return fmt.Errorf("pmix-daemon on %s: job %s has no process on this node", host, target)
	}
	pairs := make([]string, len(procs))
	for i, p := range procs {
		pairs[i] = strconv.Itoa(p.Rank) + "=" + strconv.Itoa(p.Pid)
	}
	env := os.Environ()
	if dir := os.Getenv("HPCDAP_SESSION_DIR"); strings.HasPrefix(dir, "/") {
		if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
			// The front end reaches this node only through the launcher and made nothing
			// here: this node's agent gets a directory of its own (nodes may share /tmp),
			// in the temporary directory of the launcher's daemon on this node where there is
			// one, which that daemon removes when it ends even if the agent is killed.
			own := dir + "-" + host
			if tmp := os.Getenv("PMIX_SERVER_TMPDIR"); strings.HasPrefix(tmp, "/") {
				if st, err := os.Stat(tmp); err == nil && st.IsDir() {
					own = filepath.Join(tmp, filepath.Base(dir)+"-"+host)
				}
			}
			if err := launch.MakeSessionDir(own); err != nil {
				return fmt.Errorf("pmix-daemon on %s: %w", host, err)
			}
			argv = replaceFlag(argv, "--staging", own)
			argv = append(argv, "--remove-staging")
			env = append(withoutVar(withoutVar(env, "HPCDAP_SESSION_DIR"), "TMPDIR"), "HPCDAP_SESSION_DIR="+own, "TMPDIR="+own+"/tmp")
		}
	}
	argv = append(argv, "--attach", strings.Join(pairs, ","))
	fmt.Fprintf(os.Stderr, "pmix-daemon on %s: job %s: ranks %s\n", host, target, strings.Join(pairs, ","))
	err = syscall.Exec(argv[0], argv, env)
	return errors.Join(fmt.Errorf("pmix-daemon: exec %s", argv[0]), err)
}

// replaceFlag sets the value of flag (given as "--flag VALUE" or "--flag=VALUE") in argv, or
// appends it.
func replaceFlag(argv []string, flag, value string) []string {
	out := append([]string(nil), argv...)
	for i, a := range out {
		switch {
		case a == flag && i+1 < len(out):
			out[i+1] = value
			return out
		case strings.HasPrefix(a, flag+"="):
			out[i] = flag + "=" + value
			return out
		}
	}
	return append(out, flag, value)
}
