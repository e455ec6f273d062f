package main

import (
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"syscall"
	"text/tabwriter"

	"github.com/hpcdap/hpcdap/adapter"
	"github.com/hpcdap/hpcdap/symbols"
)

// stdio joins the process's standard input and output into one DAP stream.
type stdio struct {
	in  *os.File
	out *os.File
}

func (s stdio) Read(p []byte) (int, error)  { return s.in.Read(p) }
func (s stdio) Write(p []byte) (int, error) { return s.out.Write(p) }
func (s stdio) Close() error                { return s.in.Close() }

// openLog returns the diagnostics logger: a file when asked, otherwise stderr (never stdout,
// which carries DAP in `hpcdap dap`).
func openLog(path string, stderr io.Writer) (*log.Logger, func(), error) {
	if path == "" {
		return log.New(stderr, "hpcdap: ", log.LstdFlags|log.Lmicroseconds), func() {}, nil
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, nil, err
	}
	return log.New(f, "", log.LstdFlags|log.Lmicroseconds), func() { f.Close() }, nil
}

// runDAP is `hpcdap dap`: one DAP session on stdin/stdout.
func runDAP(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("dap", stderr)
	logPath := fs.String("log", "", "write diagnostics to `FILE` (default: none; errors reach the client as output events)")
	agent := fs.String("agent", "", "the hpcdap `EXECUTABLE` started as the local agent (default: this one)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: hpcdap dap [flags]")
		fmt.Fprintln(fs.Output(), "\nServes one Debug Adapter Protocol session on standard input and output.")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		fmt.Fprintf(stderr, "hpcdap dap: unexpected argument %q\n", fs.Arg(0))
		return errUsage
	}
	logger, closeLog, err := openLog(*logPath, io.Discard)
	if err != nil {
		return err
	}
	defer closeLog()
	out, ok := stdout.(*os.File)
	if !ok {
		return fmt.Errorf("standard output is not a file")
	}
	srv := adapter.NewServer(adapter.Config{AgentPath: *agent, Log: logger, SymbolOptions: symbolOptions()})
	srv.ServeConn(stdio{in: os.Stdin, out: out})
	return nil
}

// runServe is `hpcdap serve`: DAP over TCP or a Unix socket, one session per connection.
func runServe(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("serve", stderr)
	listen := fs.String("listen", "127.0.0.1:4711", "accept DAP clients on `ADDR`: host:port (port 0 picks one), or unix:PATH for a Unix socket only this user may open")
	logPath := fs.String("log", "", "write diagnostics to `FILE` (default: stderr)")
	agent := fs.String("agent", "", "the hpcdap `EXECUTABLE` started as the local agent (default: this one)")
	anyUser := fs.Bool("any-user", false, "accept connections from other users' processes, which then run programs as this user (refused by default)")
	list := fs.Bool("list", false, "list the shared sessions of the server listening on --listen that this user may join, and exit")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: hpcdap serve [--listen ADDR] [flags]")
		fmt.Fprintln(fs.Output(), "       hpcdap serve --list [--listen ADDR]")
		fmt.Fprintln(fs.Output(), "\nServes Debug Adapter Protocol sessions over TCP or a Unix socket, each connection its own session;")
		fmt.Fprintln(fs.Output(), "a connection from a process of another user is refused unless --any-user is given;")
		fmt.Fprintln(fs.Output(), "prints \"listening on HOST:PORT\" once ready.")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		fmt.Fprintf(stderr, "hpcdap serve: unexpected argument %q\n", fs.Arg(0))
		return errUsage
	}
	if *list {
		return listSessions(*listen, stdout)
	}
	logger, closeLog, err := openLog(*logPath, stderr)
	if err != nil {
		return err
	}
	defer closeLog()
	l, err := adapter.Listen(*listen)
	if err != nil {
		return err
	}
	if *anyUser {
		fmt.Fprintf(stderr, "hpcdap serve: WARNING: --any-user: every user who can reach %s can run programs and read memory as uid %d\n",
			l.Addr(), os.Getuid())
	}
	fmt.Fprintf(stdout, "listening on %s\n", l.Addr())
	if f, ok := stdout.(*os.File); ok {
		f.Sync()
	}
	srv := adapter.NewServer(adapter.Config{AgentPath: *agent, Log: logger, AnyUser: *anyUser,
		SymbolOptions: symbolOptions()})
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	go func() {
		<-sigs
		srv.Close()
	}()
	return srv.Serve(l)
}

// listSessions prints the shared sessions of the server on addr, one a line under a header.
func listSessions(addr string, stdout io.Writer) error {
	sessions, err := adapter.ListSessions(addr)
	if err != nil {
		return err
	}
	if len(sessions) == 0 {
		fmt.Fprintf(stdout, "no shared sessions on %s\n", addr)
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tKIND\tRANKS\tCLIENTS\tSINCE\tPROGRAM")
	for _, s := range sessions {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\n", s.Name, s.Kind, s.Ranks, s.Clients, s.Since, s.Program)
	}
	return tw.Flush()
}

// symbolOptions puts the symbol index cache where the user's environment says
// (HPCDAP_SYMBOL_CACHE, XDG_CACHE_HOME, the home directory), or turns it off.
func symbolOptions() *symbols.Options {
	return &symbols.Options{IndexCacheDir: symbols.DefaultIndexCacheDir()}
}
