package pmix

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Tool is the front end's handle on one tool process ("hpcdap pmix-tool") and the job it drives.
// Its methods may be called from several goroutines; requests are sent one at a time.
type Tool struct {
	cmd    *exec.Cmd
	reqs   *os.File // the write end of the tool's standard input
	stderr *tailWriter

	call    sync.Mutex // one request in flight
	seq     uint64     // the last request's sequence number; guarded by call
	exited  chan struct{}
	waitErr error // how the tool process ended; set before exited closes

	mu          sync.Mutex
	pending     uint64     // the sequence number of the request in flight, 0 when none
	reply       chan Event // its reply (capacity 1), nil when none
	launcherPid int
	launched    bool // the tool started the launcher (its child): the job lives as long as the tool
	held        bool // a launch or attach reported a hold that no release ended
	ended       chan struct{}
	endOnce     sync.Once
	status      int
	statusErr   error
	endCause    []Proc // the rank the launcher named as the cause of the job's end
	endMessage  string // the launcher's words on the job's end
	closed      bool
	daemonsEnd  chan struct{} // closed when the daemons' job ends, or the tool exits
	daemonsOnce sync.Once
}

// StartTool runs "exe pmix-tool" with env (nil: this process's environment), the tool's standard
// output and error going to stdout and stderr.
func StartTool(ctx context.Context, exe string, env []string, stdout, stderr *os.File) (*Tool, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("pmix: start tool %s: %w", exe, err)
	}
	reqR, reqW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("pmix: start tool %s: %w", exe, err)
	}
	evR, evW, err := os.Pipe()
	if err != nil {
		reqR.Close()
		reqW.Close()
		return nil, fmt.Errorf("pmix: start tool %s: %w", exe, err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		reqR.Close()
		reqW.Close()
		evR.Close()
		evW.Close()
		return nil, fmt.Errorf("pmix: start tool %s: %w", exe, err)
	}
	t := &Tool{
		reqs:       reqW,
		stderr:     &tailWriter{},
		exited:     make(chan struct{}),
		ended:      make(chan struct{}),
		daemonsEnd: make(chan struct{}),
	}
	cmd := exec.Command(exe, "pmix-tool")
	cmd.Env = env
	cmd.Stdin = reqR
	if stdout != nil {
		cmd.Stdout = stdout
	}
	if stderr != nil {
		t.stderr.w = stderr
	}
	cmd.Stderr = errW
	cmd.ExtraFiles = []*os.File{evW}
	// Not in a process group of its own: with one, PRRTE's stop on exec lets some ranks of a
	// prterun job run before the job is reported held.
	err = cmd.Start()
	reqR.Close()
	evW.Close()
	errW.Close()
	if err != nil {
		reqW.Close()
		evR.Close()
		errR.Close()
		return nil, fmt.Errorf("pmix: start tool %s: %w", exe, err)
	}
	t.cmd = cmd
	// The tool's standard error is copied on by its own goroutine rather than by exec: the
	// launcher the tool starts inherits it and may outlive the tool (detach).
	c := &stderrCopier{r: errR, w: t.stderr, drain: make(chan struct{}), drained: make(chan struct{})}
	go c.run()
	go t.readEvents(evR, c)
	return t, nil
}

// stderrCopier passes the tool's standard error on. The launcher shares the pipe and may
// outlive the tool, so its end does not wait for end of file: once the tool has exited, what
// the tool wrote is in the pipe, and drain takes exactly that.
type stderrCopier struct {
	r       *os.File
	w       io.Writer
	drain   chan struct{} // closed (after a read deadline in the past) to ask for a drain
	drained chan struct{} // closed when the pipe was drained, or the copier ended
}

func (c *stderrCopier) run() {
	defer c.r.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := c.r.Read(buf)
		c.w.Write(buf[:n])
		if errors.Is(err, os.ErrDeadlineExceeded) {
			<-c.drain
			c.r.SetReadDeadline(time.Time{})
			c.readBuffered(buf)
			close(c.drained)
			// Go on passing on what the launcher writes.
			continue
		}
		if err != nil {
			select {
			case <-c.drained:
			default:
				close(c.drained)
			}
			return
		}
	}
}

// readBuffered copies what the pipe holds now, without waiting for more.
func (c *stderrCopier) readBuffered(buf []byte) {
	rc, err := c.r.SyscallConn()
	if err != nil {
		return
	}
	rc.Read(func(fd uintptr) bool {
		for {
			n, err := syscall.Read(int(fd), buf)
			if n <= 0 || err != nil {
				return true
			}
			c.w.Write(buf[:n])
		}
	})
}

// finish returns once everything the exited tool wrote has been passed on.
func (c *stderrCopier) finish() {
	c.r.SetReadDeadline(time.Unix(1, 0))
	close(c.drain)
	<-c.drained
}

// Pid returns the tool process's pid.
func (t *Tool) Pid() int { return t.cmd.Process.Pid }

// LauncherPid returns the pid of the launcher, once the tool has reported it (0 before).
func (t *Tool) LauncherPid() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.launcherPid
}

// readEvents decodes the tool's events until its descriptor 3 closes, then reaps the tool.
// It never waits for a caller: a reply nobody waits for any more is dropped.
func (t *Tool) readEvents(r *os.File, errs *stderrCopier) {
	defer r.Close()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	for sc.Scan() {
		var ev Event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.stderr.Write([]byte(fmt.Sprintf("pmix: tool event %q: %v\n", sc.Text(), err)))
			continue
		}
		switch ev.Ev {
		case EvLauncher:
			t.mu.Lock()
			t.launcherPid = ev.LauncherPid
			t.mu.Unlock()
		case EvEnd:
			t.mu.Lock()
			t.endCause, t.endMessage = ev.Gone, ev.Message
			t.mu.Unlock()
			t.finish(ev.Status, nil)
		case EvDaemonsEnd:
			t.daemonsOnce.Do(func() { close(t.daemonsEnd) })
		case EvLost:
			// After the job's end this changes nothing; before it, the end will not be seen.
			t.finish(0, errors.New("pmix: the connection to the launcher was lost before the job ended"))
		default:
			t.mu.Lock()
			if t.reply != nil && ev.Seq == t.pending {
				select {
				case t.reply <- ev:
				default:
				}
			}
			t.mu.Unlock()
		}
	}
	err := t.cmd.Wait()
	// The tool's last words are in the error message.
	errs.finish()
	t.waitErr = fmt.Errorf("pmix: tool process %d %s%s", t.cmd.Process.Pid, exitText(err), t.stderr.tailText())
	close(t.exited)
	t.finish(0, t.waitErr)
	t.daemonsOnce.Do(func() { close(t.daemonsEnd) })
}

// exitText says how a process ended.
func exitText(err error) string {
	var ee *exec.ExitError
	switch {
	case err == nil:
		return "exited with status 0"
	case errors.As(err, &ee):
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return "killed by signal " + ws.Signal().String()
		}
		return fmt.Sprintf("exited with status %d", ee.ExitCode())
	default:
		return err.Error()
	}
}

// finish records the job's end once.
func (t *Tool) finish(status int, err error) {
	t.endOnce.Do(func() {
		t.mu.Lock()
		t.status, t.statusErr = status, err
		t.held = false
		t.mu.Unlock()
		close(t.ended)
	})
}

// Ended is closed when the job has ended, or when the tool can no longer tell (it exited or
// lost the launcher); Status then says which.
func (t *Tool) Ended() <-chan struct{} { return t.ended }

// Status returns the job's exit status after Ended is closed, or why it is unknown.
func (t *Tool) Status() (int, error) {
	select {
	case <-t.ended:
	default:
		return 0, errors.New("pmix: the job has not ended")
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.status, t.statusErr
}

// EndCause returns, once Ended is closed, the rank the launcher named as the cause of the
// job's end (by rank, with its host and pid where the proc table gave them; none when it named
// none) and the launcher's own words on that end ("" when it gave none).
func (t *Tool) EndCause() (gone []Proc, message string) {
	select {
	case <-t.ended:
	default:
		return nil, ""
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]Proc(nil), t.endCause...), t.endMessage
}

// request sends req and waits for its reply of kind want, its error event, the tool's exit or
// ctx. Replies carry the request's sequence number: a late one to a request whose caller gave
// up is dropped.
func (t *Tool) request(ctx context.Context, req Request, want string) (Event, error) {
	t.call.Lock()
	defer t.call.Unlock()
	what := "pmix: " + req.Op
	select {
	case <-t.exited:
		return Event{}, fmt.Errorf("%s: %w", what, t.waitErr)
	default:
	}
	t.seq++
	req.Seq = t.seq
	reply := make(chan Event, 1)
	t.mu.Lock()
	t.pending, t.reply = req.Seq, reply
	t.mu.Unlock()
	defer func() {
		t.mu.Lock()
		t.pending, t.reply = 0, nil
		t.mu.Unlock()
	}()
	line, err := json.Marshal(req)
	if err != nil {
		return Event{}, fmt.Errorf("%s: %w", what, err)
	}
	// A write to a dead tool fails with EPIPE at once; a live one reads its input promptly.
	if _, err := t.reqs.Write(append(line, '\n')); err != nil {
		select {
		case <-t.exited:
			return Event{}, fmt.Errorf("%s: %w", what, t.waitErr)
		case <-time.After(time.Second):
			return Event{}, fmt.Errorf("%s: write request: %w", what, err)
		}
	}
	select {
	case ev := <-reply:
		return replyResult(ev, what, want)
	case <-t.exited:
		// A reply written just before the exit is in the channel.
		select {
		case ev := <-reply:
			return replyResult(ev, what, want)
		default:
		}
		return Event{}, fmt.Errorf("%s: %w", what, t.waitErr)
	case <-ctx.Done():
		return Event{}, fmt.Errorf("%s: %w", what, ctx.Err())
	}
}

// replyResult turns the reply ev to a request into its result.
func replyResult(ev Event, what, want string) (Event, error) {
	switch ev.Ev {
	case want:
		return ev, nil
	case EvError:
		if len(ev.Gone) > 0 {
			return ev, &JobEndedError{Msg: ev.Error, Gone: ev.Gone, Ended: ev.Ended, Status: ev.Status}
		}
		return ev, errors.New(ev.Error)
	}
	return ev, fmt.Errorf("%s: the tool replied %q, want %q", what, ev.Ev, want)
}

// Launch starts req's launcher (req.Op is set to OpLaunch) and waits until its job is held at
// req.Hold with the proc table read (or, without a hold, launched).
func (t *Tool) Launch(ctx context.Context, req Request) (Ready, error) {
	req.Op = OpLaunch
	return t.ready(ctx, req)
}

// Attach connects to the running launcher pid and reads the proc table of its job nspace
// ("": the launcher's one application job).
func (t *Tool) Attach(ctx context.Context, pid int, nspace string) (Ready, error) {
	return t.ready(ctx, Request{Op: OpAttach, Pid: pid, Nspace: nspace})
}

func (t *Tool) ready(ctx context.Context, req Request) (Ready, error) {
	ev, err := t.request(ctx, req, EvReady)
	if err != nil {
		return Ready{}, err
	}
	t.mu.Lock()
	t.held = ev.Hold == HoldExec || ev.Hold == HoldInit
	t.launcherPid = ev.LauncherPid
	t.launched = req.Op == OpLaunch
	t.mu.Unlock()
	return Ready{LauncherPid: ev.LauncherPid, Nspace: ev.Nspace, Hold: ev.Hold, Procs: ev.Procs, Version: ev.Version}, nil
}

// SpawnDaemons has the launcher start argv (its first word an absolute path) with env as the
// job's debugger daemons, one on each node of the job, and returns their job's nspace.
func (t *Tool) SpawnDaemons(ctx context.Context, argv, env []string) (string, error) {
	if len(argv) == 0 {
		return "", errors.New("pmix: daemons: empty argv")
	}
	ev, err := t.request(ctx, Request{Op: OpDaemons, Program: argv[0], ProgramArgs: argv[1:], Env: env}, EvDaemons)
	if err != nil {
		return "", err
	}
	return ev.Nspace, nil
}

// SignalDaemons sends sig to every debugger daemon of the job (nspace, from SpawnDaemons).
func (t *Tool) SignalDaemons(ctx context.Context, nspace string, sig syscall.Signal) error {
	_, err := t.request(ctx, Request{Op: OpKill, Nspace: nspace, Signal: int(sig)}, EvKilled)
	return err
}

// DaemonsEnded is closed when the job of the debugger daemons has ended, or when the tool can
// no longer tell (it exited).
func (t *Tool) DaemonsEnded() <-chan struct{} { return t.daemonsEnd }

// Release lets the held job run.
func (t *Tool) Release(ctx context.Context) error {
	if _, err := t.request(ctx, Request{Op: OpRelease}, EvReleased); err != nil {
		return err
	}
	t.mu.Lock()
	t.held = false
	t.mu.Unlock()
	return nil
}

// Kill sends sig to every rank of the job.
func (t *Tool) Kill(ctx context.Context, sig syscall.Signal) error {
	_, err := t.request(ctx, Request{Op: OpKill, Signal: int(sig)}, EvKilled)
	return err
}

// Detach leaves the job running (released first if it is held); the tool finalises and exits.
func (t *Tool) Detach(ctx context.Context) error {
	if _, err := t.request(ctx, Request{Op: OpDetach}, EvDetached); err != nil {
		return err
	}
	t.mu.Lock()
	t.held = false
	t.mu.Unlock()
	select {
	case <-t.exited:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("pmix: detach: wait for the tool to exit: %w", ctx.Err())
	}
}

// Close releases a job that is still held, then ends the tool process: closing its input makes
// it finalise and exit; one that does not within closeWait is killed. A tool that launched a job
// still running is not waited for: it stays until the job ends, which it would not outlive.
// Close is idempotent.
func (t *Tool) Close() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	held := t.held
	t.mu.Unlock()
	var errs []error
	if held {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := t.Release(ctx); err != nil {
			errs = append(errs, fmt.Errorf("pmix: close: %w", err))
		}
		cancel()
	}
	// The tool releases a held job itself on end of input too.
	t.reqs.Close()
	t.mu.Lock()
	launched := t.launched
	t.mu.Unlock()
	if launched {
		select {
		case <-t.ended:
		default:
			// The launcher is the tool's child: the tool stays until the job ends (its output
			// still reaching the output file) and exits then.
			return errors.Join(errs...)
		}
	}
	select {
	case <-t.exited:
	case <-time.After(closeWait):
		t.cmd.Process.Kill()
		<-t.exited
		errs = append(errs, fmt.Errorf("pmix: close: tool process %d did not exit on end of input; killed", t.cmd.Process.Pid))
	}
	return errors.Join(errs...)
}

// closeWait bounds how long Close waits for the tool to finalise and exit; it covers a
// PMIx_tool_set_server still waiting out its timeout.
var closeWait = 30 * time.Second

// tailWriter passes writes on and keeps the last bytes written, for error messages.
type tailWriter struct {
	mu   sync.Mutex
	w    io.Writer
	tail []byte
}

const tailMax = 2048

func (tw *tailWriter) Write(p []byte) (int, error) {
	tw.mu.Lock()
	defer tw.mu.Unlock()
	tw.tail = append(tw.tail, p...)
	if len(tw.tail) > tailMax {
		tw.tail = append(tw.tail[:0], tw.tail[len(tw.tail)-tailMax:]...)
	}
	if tw.w != nil {
		// A failing destination must not stop the draining: the tool would block on a full pipe.
		tw.w.Write(p)
	}
	return len(p), nil
}

// tailText returns ": " and the last lines written, or "" when nothing was.
func (tw *tailWriter) tailText() string {
	tw.mu.Lock()
	defer tw.mu.Unlock()
	s := strings.TrimSpace(string(tw.tail))
	if s == "" {
		return ""
	}
	if lines := strings.Split(s, "\n"); len(lines) > 8 {
		s = strings.Join(lines[len(lines)-8:], "\n")
	}
	return "; its last output: " + s
}
