package agent

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/hpcdap/hpcdap/target"
	"github.com/hpcdap/hpcdap/target/rsp"
)

// RSPBackend is a Backend for Power programs under a GDB remote-protocol stub: each rank is
// started under a QEMU user-mode emulator with its stub on a private Unix socket (Emulator,
// see rsp.Launch), or is the program a stub already runs (Addr: gdbserver, `qemu-ppc64 -g
// PORT`). Either way the program is stopped at its first instruction, as a spawned rank is.
// The stub's limits show through (ppc64.md §4): no watchpoints, and under QEMU user mode the
// other threads keep running while one is stopped.
type RSPBackend struct {
	// Emulator is the path of qemu-ppc64 or qemu-ppc64le (see FindEmulator). EmulatorArgs are
	// its options, placed before the program (for example -L SYSROOT).
	Emulator     string
	EmulatorArgs []string
	// Addr is host:port of a stub that already runs the program; Spawn then connects to it,
	// and its argv only names the executable (for symbols and the byte order).
	Addr string
	// Timeout bounds each request's wait for the stub's reply (0: the client's default).
	Timeout time.Duration
	// InterruptSignal, if not nil, is the host signal sent to QEMU ≥ 9 to interrupt a running
	// program (which must handle it: those versions die of a signal the program ignores).
	InterruptSignal os.Signal
	// Logf receives the back end's notes (how it works around its stub); nil discards them.
	Logf func(format string, args ...any)
	// Trace, if not nil, receives every packet exchanged with the stubs.
	Trace io.Writer
}

// Spawn starts argv under the emulator, or connects to the stub at Addr, held at the first
// instruction. stdio[1] and stdio[2] become the emulator's standard output and error (nil:
// /dev/null); the emulator's standard input is /dev/null.
func (b *RSPBackend) Spawn(argv, env []string, dir string, stdio []*os.File) (target.Process, error) {
	if len(argv) == 0 {
		return nil, errors.New("rsp back end: spawn: no program")
	}
	o := rsp.Options{Dir: dir, Timeout: b.Timeout, InterruptSignal: b.InterruptSignal, Trace: b.Trace}
	var p *rsp.Process
	var err error
	if b.Addr != "" {
		o.Exe = argv[0]
		if !filepath.IsAbs(o.Exe) && dir != "" {
			o.Exe = filepath.Join(dir, o.Exe)
		}
		p, err = rsp.DialWith(b.Addr, o)
		if err != nil {
			return nil, fmt.Errorf("rsp back end: connect to stub %s: %w", b.Addr, err)
		}
	} else {
		if b.Emulator == "" {
			return nil, errors.New("rsp back end: spawn: no emulator and no stub address")
		}
		null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
		if err != nil {
			return nil, err
		}
		defer null.Close()
		o.Stdin, o.Stdout, o.Stderr = null, null, null
		if len(stdio) > 1 && stdio[1] != nil {
			o.Stdout = stdio[1]
		}
		if len(stdio) > 2 && stdio[2] != nil {
			o.Stderr = stdio[2]
		}
		args := append(append([]string(nil), b.EmulatorArgs...), argv...)
		p, err = rsp.LaunchWith(b.Emulator, args, env, o)
		if err != nil {
			return nil, fmt.Errorf("rsp back end: spawn %s under %s: %w", argv[0], b.Emulator, err)
		}
	}
	if b.Logf != nil {
		caps := p.Capabilities()
		b.Logf("agent: rsp back end: %s (emulator %q, text writes %v, stub breakpoints %v, interrupt: %v)",
			argv[0], caps.EmulatorVersion, caps.TextWrites, caps.StubBreakpoints, caps.Interrupt)
		for _, n := range p.Notes() {
			b.Logf("agent: rsp back end: note: %s", n)
		}
	}
	return newStubProcess(p)
}

// Attach is not possible over the remote protocol: a stub serves the program it runs.
func (b *RSPBackend) Attach(pid int) (target.Process, error) {
	return nil, fmt.Errorf("rsp back end: attach pid %d: %w (connect to the program's stub instead)", pid, target.ErrUnsupported)
}

// stubProcess is an rsp.Process whose Info names a process id the agent can use as the
// leader's thread id. QEMU 7.2 sends a fake pid; a stub reached over the network has no host
// pid at all. The leader is then the first thread the stub lists.
type stubProcess struct {
	*rsp.Process
	info target.Info
}

func newStubProcess(p *rsp.Process) (target.Process, error) {
	info := p.Info()
	tids, err := p.Threads()
	if err != nil {
		p.Close()
		return nil, fmt.Errorf("rsp back end: list threads: %w", err)
	}
	if len(tids) == 0 {
		p.Close()
		return nil, errors.New("rsp back end: the stub lists no thread")
	}
	if info.Pid != tids[0] {
		info.Pid = tids[0]
	}
	return &stubProcess{Process: p, info: info}, nil
}

// Info describes the process, with the leader's thread id as Pid.
func (s *stubProcess) Info() target.Info { return s.info }

// FindEmulator returns the path of a QEMU user-mode emulator named name ("qemu-ppc64",
// "qemu-ppc64le") or given as a path: $HPCDAP_QEMU_DIR first, then the cache that
// scripts/qemu-user.sh fills ($XDG_CACHE_HOME/hpcdap/qemu/bin, ~/.cache/hpcdap/qemu/bin),
// then $PATH. The first two hold QEMU ≥ 9, whose stub writes trap words into text; the
// Debian 12 package on $PATH (QEMU 7.2) cannot, and breakpoints there become stub
// breakpoints.
func FindEmulator(name string) (string, error) {
	if strings.Contains(name, "/") {
		if _, err := os.Stat(name); err != nil {
			return "", fmt.Errorf("emulator %s: %w", name, err)
		}
		return name, nil
	}
	if name != "qemu-ppc64" && name != "qemu-ppc64le" {
		return "", fmt.Errorf("emulator %q: want qemu-ppc64 or qemu-ppc64le (or a path)", name)
	}
	for _, dir := range EmulatorDirs() {
		p := filepath.Join(dir, name)
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p, nil
		}
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("emulator %s: not in %s nor on PATH (scripts/qemu-user.sh fetches QEMU ≥ 9; Debian's qemu-user has 7.2)",
			name, strings.Join(EmulatorDirs(), ", "))
	}
	return p, nil
}

// EmulatorDirs lists the directories FindEmulator searches before $PATH.
func EmulatorDirs() []string {
	var dirs []string
	if d := os.Getenv("HPCDAP_QEMU_DIR"); d != "" {
		dirs = append(dirs, d)
	}
	cache := os.Getenv("HPCDAP_QEMU_CACHE")
	if cache == "" {
		base := os.Getenv("XDG_CACHE_HOME")
		if base == "" {
			home, _ := os.UserHomeDir()
			base = filepath.Join(home, ".cache")
		}
		cache = filepath.Join(base, "hpcdap", "qemu")
	}
	return append(dirs, filepath.Join(cache, "bin"))
}
