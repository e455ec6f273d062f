// Command hpcdap is the hpcdap debug adapter for parallel jobs. One binary holds the DAP
// server, the per-node agent and the batch tools; the first argument names the subcommand.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"sort"
	"strings"
)

// version is set at link time (-ldflags "-X main.version=...") for releases; otherwise the
// module's build information supplies it.
var version = ""

// command is one hpcdap subcommand.
type command struct {
	name    string
	summary string
	run     func(args []string, stdout, stderr io.Writer) error
}

// errUsage marks a command-line mistake: the caller prints usage and exits with status 2.
var errUsage = errors.New("usage")

func commands() []command {
	return []command{
		{"agent", "serve the ranks of one node over CDTI (the node daemon)", runAgent},
		{"bgq", "an emulated Blue Gene/Q: runjob, start_tool, end_tool", runBGQ},
		{"dap", "serve one Debug Adapter Protocol session on stdin/stdout", runDAP},
		{"demo", "build a bundled 4-rank program and run a scripted debug session of it", runDemo},
		{"serve", "serve Debug Adapter Protocol sessions over TCP", runServe},
		{"stacks", "print the merged stacks of every rank of a running or launched job", runStacks},
		{"help", "show this help, or the help of a subcommand", runHelp},
		{"version", "print the hpcdap version", runVersion},
	}
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run executes one command line and returns the process exit status.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	name := args[0]
	cs := commands()
	// Hidden: started by the front end, not by users.
	cs = append(cs, command{"pmix-tool", "", runPMIxTool}, command{"pmix-daemon", "", runPMIxDaemon})
	for _, c := range cs {
		if c.name != name {
			continue
		}
		err := c.run(args[1:], stdout, stderr)
		switch {
		case err == nil:
			return 0
		case errors.Is(err, flag.ErrHelp):
			return 0
		case errors.Is(err, errUsage):
			return 2
		default:
			fmt.Fprintf(stderr, "hpcdap %s: %v\n", name, err)
			return 1
		}
	}
	fmt.Fprintf(stderr, "hpcdap: unknown command %q\n\n", name)
	usage(stderr)
	return 2
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: hpcdap <command> [arguments]")
	fmt.Fprintln(w, "\ncommands:")
	cs := commands()
	sort.Slice(cs, func(i, j int) bool { return cs[i].name < cs[j].name })
	for _, c := range cs {
		fmt.Fprintf(w, "  %-10s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nRun 'hpcdap help <command>' for a command's flags.")
}

// newFlagSet returns a flag set whose errors are reported as errUsage after the set's usage.
func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("hpcdap "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

// parseFlags parses args with fs, mapping failures to errUsage (help requests pass through).
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage
	}
	return nil
}

func runHelp(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		usage(stdout)
		return nil
	}
	if len(args) > 1 {
		fmt.Fprintln(stderr, "usage: hpcdap help [command]")
		return errUsage
	}
	for _, c := range commands() {
		if c.name == args[0] && c.name != "help" {
			return c.run([]string{"-h"}, stdout, stdout)
		}
	}
	fmt.Fprintf(stderr, "hpcdap help: unknown command %q\n", args[0])
	return errUsage
}

func runVersion(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("version", stderr)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		fmt.Fprintf(stderr, "hpcdap version: unexpected argument %q\n", fs.Arg(0))
		return errUsage
	}
	fmt.Fprintf(stdout, "hpcdap %s\n", buildVersion())
	return nil
}

// buildVersion reports the release version, or the module version and VCS revision.
func buildVersion() string {
	if version != "" {
		return version
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "(unknown)"
	}
	v := info.Main.Version
	var rev, dirty string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "+dirty"
			}
		}
	}
	if rev != "" {
		if len(rev) > 12 {
			rev = rev[:12]
		}
		v = strings.TrimSpace(v + " " + rev + dirty)
	}
	return v + " " + info.GoVersion
}
