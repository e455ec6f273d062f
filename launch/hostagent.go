package launch

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// newToken returns a random session token.
func newToken() string {
	var b [24]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return hex.EncodeToString(b[:])
}

// AgentExecutable is the hpcdap binary that serves as the agent by default: this very
// executable, its symbolic links resolved.
func AgentExecutable() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("launch: find the hpcdap executable for the agent: %w", err)
	}
	return filepath.EvalSymlinks(exe)
}

// AgentProcess is an hpcdap agent this front end started as its child, listening on this
// host's loopback interface.
type AgentProcess struct {
	Cmd     *exec.Cmd
	LogPath string
	Addr    string // host:port it listens on (CDTI and management)
	Token   string // the session token it requires

	output *os.File // its stderr, when it carries the output of the ranks it spawned
	done   chan struct{}
}

// Wait waits up to d for the agent to exit; it reports whether it did.
func (a *AgentProcess) Wait(d time.Duration) bool {
	select {
	case <-a.done:
		return true
	case <-time.After(d):
		return false
	}
}

// Kill ends the agent process (SIGKILL) and waits for it.
func (a *AgentProcess) Kill() {
	if a.Cmd.Process != nil {
		a.Cmd.Process.Kill()
	}
	<-a.done
}

// logTail returns the last n lines of the agent's log after a heading, for error messages,
// or "" when the log is empty.
func (a *AgentProcess) logTail(n int) string {
	b, err := os.ReadFile(a.LogPath)
	if err != nil || len(b) == 0 {
		return ""
	}
	return "\nagent log:\n" + tail(string(b), n)
}

// agentStart describes an agent child to start.
type agentStart struct {
	name   string   // what the agent is, for errors ("agent", "launcher agent")
	exe    string   // the hpcdap binary
	mode   []string // its arguments after the listener's and the log's
	env    []string // its environment, without HPCDAP_TOKEN
	dir    string   // working directory ("" for this process's)
	noASLR bool     // no address-space randomisation for the agent and its descendants
	// token is the session token the agent requires ("": a new one). The agents of one job
	// share one, so that an agent of the tree overlay proves it to its children as the front
	// end does.
	token   string
	logPath string
	// output: the agent's stderr is a pipe (AgentProcess.output) that also carries the output
	// of the ranks it spawns; otherwise what it says there is appended to its log.
	output bool
	// logLines is how much of the log an error quotes.
	logLines int
	// limit bounds the wait for the listening line besides ctx (0: ctx alone).
	limit time.Duration
}

// startAgent starts `hpcdap agent --listen 127.0.0.1:0 --log ...` with a new token and waits
// until it says where it listens. The agent ends with this process: it then detaches from
// every process, removing its traps (DESIGN decision 3), so that nothing is left stopped.
func startAgent(ctx context.Context, s agentStart) (*AgentProcess, error) {
	token := s.token
	if token == "" {
		token = newToken()
	}
	args := append([]string{"agent", "--listen", "127.0.0.1:0", "--log", s.logPath}, s.mode...)
	cmd := exec.Command(s.exe, args...)
	cmd.Env = append(withoutVars(s.env, "HPCDAP_TOKEN"), "HPCDAP_TOKEN="+token)
	cmd.Dir = s.dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM, Setpgid: true}
	a := &AgentProcess{Cmd: cmd, LogPath: s.logPath, Token: token, done: make(chan struct{})}
	var stdout io.ReadCloser
	if s.output {
		// Plain pipes rather than exec's: Wait must not close the read ends while the ranks'
		// output (which the ranks write there too) is still being forwarded.
		r, w, err := os.Pipe()
		if err != nil {
			return nil, fmt.Errorf("launch: start the %s: %w", s.name, err)
		}
		er, ew, err := os.Pipe()
		if err != nil {
			r.Close()
			w.Close()
			return nil, fmt.Errorf("launch: start the %s: %w", s.name, err)
		}
		cmd.Stdout, cmd.Stderr = w, ew
		stdout, a.output = r, er
	} else {
		// What the agent says on stderr before its log is open (a bad argument, a program it
		// cannot run) goes to the same file, which the errors quote.
		errLog, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return nil, fmt.Errorf("launch: %s log: %w", s.name, err)
		}
		defer errLog.Close()
		cmd.Stderr = errLog
		if stdout, err = cmd.StdoutPipe(); err != nil {
			return nil, fmt.Errorf("launch: start the %s: %w", s.name, err)
		}
	}
	start := cmd.Start
	if s.noASLR {
		start = func() error { return StartNoASLR(cmd) }
	}
	err := start()
	if s.output {
		// The agent has its own copies of the write ends: its end (and its ranks') is EOF.
		cmd.Stdout.(*os.File).Close()
		cmd.Stderr.(*os.File).Close()
	}
	if err != nil {
		if s.output {
			stdout.Close()
			a.output.Close()
		}
		return nil, fmt.Errorf("launch: start the %s %s: %w", s.name, s.exe, err)
	}
	go func() { cmd.Wait(); close(a.done) }()
	addrCh := make(chan string, 1)
	go func() {
		if s.output {
			defer stdout.Close()
		}
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if addr, ok := strings.CutPrefix(sc.Text(), "listening on "); ok {
				select {
				case addrCh <- strings.TrimSpace(addr):
				default:
				}
			}
		}
		close(addrCh)
	}()
	fail := func(err error) (*AgentProcess, error) {
		cmd.Process.Kill()
		<-a.done
		if a.output != nil {
			// What the agent said before its log was open (a bad argument, a program or a
			// process it cannot have) is in the pipe.
			if said := pipeTail(a.output, s.logLines); said != "" {
				err = fmt.Errorf("%w: %s", err, said)
			}
			a.output.Close()
		}
		return nil, fmt.Errorf("launch: %s: %w%s", s.name, err, a.logTail(s.logLines))
	}
	var limit <-chan time.Time
	if s.limit > 0 {
		t := time.NewTimer(s.limit)
		defer t.Stop()
		limit = t.C
	}
	select {
	case addr, ok := <-addrCh:
		if !ok {
			<-a.done
			return fail(fmt.Errorf("exited before listening (%v)", cmd.ProcessState))
		}
		a.Addr = addr
		return a, nil
	case <-a.done:
		// Processes it started may hold its stdout open: its end is enough.
		return fail(fmt.Errorf("exited before listening (%v)", cmd.ProcessState))
	case <-ctx.Done():
		return fail(fmt.Errorf("did not start listening: %w", ctx.Err()))
	case <-limit:
		return fail(fmt.Errorf("did not report its address within %v", s.limit))
	}
}

// pipeTail returns the last n lines of what a pipe holds now, waiting for it no more than a
// moment (processes still holding its write end may never close it).
func pipeTail(f *os.File, n int) string {
	if f.SetReadDeadline(time.Now().Add(200*time.Millisecond)) != nil {
		return ""
	}
	b, _ := io.ReadAll(io.LimitReader(f, 64<<10))
	return strings.ReplaceAll(tail(string(b), n), "\n", "; ")
}
