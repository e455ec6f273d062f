package agent

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/hpcdap/hpcdap/target"
	"github.com/hpcdap/hpcdap/target/ptrace"
)

// Fork/exec following (FollowExec, `hpcdap agent --follow-exec PROGRAM -- LAUNCHER ARGS...`)
// finds the ranks of a launcher that publishes no MPIR table the agent can use (Debian's
// MPICH hydra): the launcher is spawned with every fork followed; each new process (a hydra
// proxy, a rank before its exec) is held at its first instruction, adopted and let run,
// still followed. A process whose exec makes it run PROGRAM (compared by file identity with
// /proc/PID/exe) is a rank: it is held right after that exec, before its first instruction,
// its rank read from PMI_RANK (or PMIX_RANK) in /proc/PID/environ and its job size from
// PMI_SIZE (or PMIX_SIZE), and it is served on CDTI as a spawned rank is: loaded but not
// started until a tool takes control (Control's sndSignal is delivered at its first ld.so
// instruction or at its entry point), and let go untraced once its last tool leaves. The
// management plane announces each rank (ranks, ranks.subscribe). Forks of a rank are let go.
// Once as many ranks as PMI_SIZE says have been caught, the proxies are let go; the launcher
// stays traced until it exits, so that "launcher" reports its exit status and --kill-on-exit
// can end it. Signals reach the followed processes as if untraced.

// FollowSpec describes the launcher FollowExec starts.
type FollowSpec struct {
	Argv    []string   // the launcher's command line
	Program string     // the ranks' executable; a relative path is taken from Dir, or PATH
	Env     []string   // nil: the agent's environment (without HPCDAP_TOKEN)
	Dir     string     // working directory ("" for the agent's)
	Stdio   []*os.File // the launcher's standard files (index = fd; nil: /dev/null)
}

// FollowExec starts spec's launcher and serves the ranks it creates as they exec the program.
// It returns once the launcher runs; ranks appear later.
func (a *Agent) FollowExec(spec FollowSpec) error {
	fb, ok := a.backend.(forkBackend)
	if !ok {
		return errors.New("agent: follow exec: the back end cannot follow forks (use the ptrace back end)")
	}
	if len(spec.Argv) == 0 {
		return errors.New("agent: follow exec: no launcher")
	}
	prog, err := resolveProgram(spec.Program, spec.Dir)
	if err != nil {
		return fmt.Errorf("agent: follow exec: program %s: %w", spec.Program, err)
	}
	env := spec.Env
	if env == nil {
		env = os.Environ()
	}
	env = withoutVar(withoutVar(withoutVar(env, "HPCDAP_TOKEN"), "HPCDAP_RANK"), "HPCDAP_NP")
	tp, err := fb.SpawnWith(spec.Argv, env, spec.Dir, spec.Stdio,
		ptrace.SpawnOptions{FollowForks: true, ExitKill: a.killOnExit})
	if err != nil {
		return fmt.Errorf("agent: follow exec: spawn %s: %w", spec.Argv[0], err)
	}
	pid := tp.Info().Pid
	l := &launcherRec{pid: pid, exe: tp.Info().Exe}
	f := &follower{a: a, fb: fb, prog: prog, launcher: l, events: make(chan followEvent),
		procs: make(map[int]*followed), quit: make(chan struct{}), ended: make(chan struct{})}
	a.setLauncher(l)
	a.mu.Lock()
	a.follow = f
	a.mu.Unlock()
	f.watch(pid, tp)
	go f.run()
	if err := tp.Resume(pid, 0); err != nil {
		return fmt.Errorf("agent: follow exec: start %s: %w", spec.Argv[0], err)
	}
	a.logf("agent: following %s (pid %d) for ranks running %s", spec.Argv[0], pid, prog)
	return nil
}

// resolveProgram finds the file a rank runs: an absolute path as is; a relative path from dir
// (or the agent's directory); a bare name that is not there, in PATH.
func resolveProgram(prog, dir string) (string, error) {
	if prog == "" {
		return "", errors.New("empty path")
	}
	p := prog
	if !filepath.IsAbs(p) {
		p = filepath.Join(dir, p)
		if _, err := os.Stat(p); err != nil && filepath.Base(prog) == prog {
			lp, lerr := exec.LookPath(prog)
			if lerr != nil {
				return "", lerr
			}
			p = lp
		}
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(abs); err != nil {
		return "", err
	}
	return abs, nil
}

// follower is the goroutine that follows a launcher's processes; it owns procs.
type follower struct {
	a        *Agent
	fb       forkBackend
	prog     string
	launcher *launcherRec
	// events is unbuffered: a watcher's event is either taken by run, which handles it, or,
	// once the following has stopped, passed through by the watcher. A buffered event that
	// run no longer reads would leave its thread stopped for good (the launcher in the stop
	// of stop's SIGTERM, which it then never handles).
	events   chan followEvent
	quit     chan struct{}
	ended    chan struct{}
	stopOnce sync.Once

	// Owned by run.
	procs    map[int]*followed
	caught   int
	jobSize  int
	complete bool // every rank of the job caught: the proxies were let go
}

// followed is one process being followed (the launcher, a proxy, a process before its exec).
type followed struct {
	tp   target.Process
	next chan bool     // after an EventExec: true to keep forwarding, false when handed to a proc
	gone chan struct{} // closed when the watcher has stopped reading the stream
}

type followEvent struct {
	pid int
	ev  target.Event
}

// watch forwards pid's events to the follower until the stream ends or the process is handed
// over to a proc at its exec. Once the following has stopped, it lets the process run as if
// untraced until it is let go or ends.
func (f *follower) watch(pid int, tp target.Process) {
	fp := &followed{tp: tp, next: make(chan bool, 1), gone: make(chan struct{})}
	f.procs[pid] = fp
	go func() {
		defer close(fp.gone)
		events := tp.Events()
		for ev := range events {
			select {
			case f.events <- followEvent{pid, ev}:
			case <-f.quit:
				f.passThrough(tp, ev)
				f.passAll(tp, events)
				return
			}
			if ev.Kind == target.EventExec {
				select {
				case keep := <-fp.next:
					if !keep {
						return // a rank: its proc reads the stream from now on
					}
				case <-f.quit:
					f.passThrough(tp, ev)
					f.passAll(tp, events)
					return
				}
			}
		}
	}()
}

// passAll lets a process run as if untraced until its stream ends.
func (f *follower) passAll(tp target.Process, events <-chan target.Event) {
	for ev := range events {
		f.passThrough(tp, ev)
	}
}

// passThrough resumes the thread an event stopped, delivering its signal. A process created
// once the following has ended is let go at once: held, it would stay stopped until the
// tracer closes, and a launcher that waits for it (one that forks to end its job) with it.
func (f *follower) passThrough(tp target.Process, ev target.Event) {
	switch ev.Kind {
	case target.EventSignal:
		tp.Resume(ev.Tid, ev.Signal)
	case target.EventStopped, target.EventNewThread, target.EventExec:
		tp.Resume(ev.Tid, 0)
	case target.EventFork:
		cp, err := f.fb.Adopt(ev.Child, ptrace.AdoptOptions{})
		if err != nil {
			f.a.logf("agent: follow: let child %d go: %v", ev.Child, err)
			return
		}
		letGo(cp)
	}
}

func (f *follower) run() {
	defer close(f.ended)
	for {
		select {
		case e := <-f.events:
			f.handle(e)
		case <-f.quit:
			return
		}
	}
}

func (f *follower) handle(e followEvent) {
	fp := f.procs[e.pid]
	if fp == nil {
		return // let go meanwhile (its watcher was told to go on, see letGoFollowed)
	}
	ev := e.ev
	switch ev.Kind {
	case target.EventFork:
		f.adopt(ev.Child)
	case target.EventExec:
		if f.isRank(e.pid) {
			fp.next <- false
			delete(f.procs, e.pid)
			f.catch(e.pid, fp.tp)
			return
		}
		fp.next <- true
		f.resume(e.pid, fp.tp, ev.Tid, 0)
	case target.EventSignal:
		f.resume(e.pid, fp.tp, ev.Tid, ev.Signal)
	case target.EventStopped, target.EventNewThread:
		f.resume(e.pid, fp.tp, ev.Tid, 0)
	case target.EventExit:
		delete(f.procs, e.pid)
		if e.pid == f.launcher.pid {
			f.launcher.mu.Lock()
			f.launcher.exited, f.launcher.status = true, ev.Status
			f.launcher.mu.Unlock()
			f.a.logf("agent: launcher pid %d ended: %s", e.pid, waitString(ev.Status))
		}
	}
}

func (f *follower) resume(pid int, tp target.Process, tid, sig int) {
	if err := tp.Resume(tid, sig); err != nil && !errors.Is(err, target.ErrExited) && !errors.Is(err, target.ErrNoThread) {
		f.a.logf("agent: follow: resume pid %d tid %d: %v", pid, tid, err)
	}
}

// adopt takes over a new process held at its first instruction and lets it run, followed
// (before the job is complete) or untraced (after).
func (f *follower) adopt(child int) {
	cp, err := f.fb.Adopt(child, ptrace.AdoptOptions{FollowForks: !f.complete})
	if err != nil {
		f.a.logf("agent: follow: adopt pid %d: %v", child, err)
		return
	}
	if f.complete {
		letGo(cp)
		return
	}
	f.watch(child, cp)
	f.resume(child, cp, child, 0)
}

// letGo detaches a process and drains its stream in the background.
func letGo(tp target.Process) {
	if err := tp.Detach(); err == nil {
		go func() {
			for range tp.Events() {
			}
		}()
	}
}

// letGoFollowed lets a followed process go; its watcher, if it waits for a word after an
// exec, is told to carry on so that it reads the stream to its end.
func letGoFollowed(fp *followed) {
	select {
	case fp.next <- true:
	default:
	}
	letGo(fp.tp)
}

// isRank reports whether pid now runs the program.
func (f *follower) isRank(pid int) bool {
	exe, err := os.Stat("/proc/" + strconv.Itoa(pid) + "/exe")
	if err != nil {
		return false
	}
	want, err := os.Stat(f.prog)
	return err == nil && os.SameFile(exe, want)
}

// catch serves a process that has just exec'd the program as a rank, held at its exec.
func (f *follower) catch(pid int, tp target.Process) {
	env, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	rank, okRank := envInt(env, "PMI_RANK", "PMIX_RANK")
	size, _ := envInt(env, "PMI_SIZE", "PMIX_SIZE")
	if !okRank || rank < 0 {
		f.a.logf("agent: follow: pid %d runs %s without PMI_RANK: let go", pid, f.prog)
		letGo(tp)
		return
	}
	if size > 0 {
		f.jobSize = size
	}
	if f.jobSize > 0 && f.caught+1 >= f.jobSize && !f.complete {
		// The job's last rank: the proxies are let go before it is announced, so that a front
		// end that has heard of every rank finds them untraced.
		f.complete = true
		for cpid, fp := range f.procs {
			if cpid == f.launcher.pid {
				continue
			}
			delete(f.procs, cpid)
			letGoFollowed(fp)
		}
	}
	p := newProc(f.a, uint32(rank), pid, tp, false)
	p.snap.JobSize = size
	if err := f.a.addProc(p); err != nil {
		f.a.logf("agent: follow: pid %d: %v: let go", pid, err)
		letGo(tp)
		return
	}
	f.caught++
	f.a.logf("agent: follow: rank %d is pid %d, held at its exec", rank, pid)
}

// envInt finds the first of names in a NUL-separated environment block.
func envInt(env []byte, names ...string) (int, bool) {
	for _, name := range names {
		for _, kv := range bytes.Split(env, []byte{0}) {
			if v, ok := bytes.CutPrefix(kv, []byte(name+"=")); ok {
				n, err := strconv.Atoi(string(v))
				return n, err == nil
			}
		}
	}
	return 0, false
}

// stop ends the following: with kill, the launcher gets SIGTERM (so that it ends its job),
// the other followed processes SIGKILL, and whatever has not ended within a few seconds
// SIGKILL; without, every followed process is let go untraced.
func (f *follower) stop(kill bool) {
	f.stopOnce.Do(func() {
		close(f.quit)
		<-f.ended
		for pid, fp := range f.procs {
			switch {
			case !kill:
				letGoFollowed(fp)
			case pid == f.launcher.pid:
				fp.tp.Kill(0, int(syscall.SIGTERM))
			default:
				fp.tp.Kill(0, int(syscall.SIGKILL))
			}
		}
		if !kill {
			return
		}
		deadline := time.Now().Add(5 * time.Second)
		for _, fp := range f.procs {
			select {
			case <-fp.gone:
			case <-time.After(time.Until(deadline)):
				fp.tp.Kill(0, int(syscall.SIGKILL))
				select {
				case <-fp.gone:
				case <-time.After(2 * time.Second):
				}
			}
		}
	})
}

// waitString describes a POSIX wait status.
func waitString(status int) string {
	ws := syscall.WaitStatus(status)
	switch {
	case ws.Exited():
		return fmt.Sprintf("exit status %d", ws.ExitStatus())
	case ws.Signaled():
		return fmt.Sprintf("killed by %v", ws.Signal())
	}
	return fmt.Sprintf("wait status %#x", status)
}

// releaseChild lets go a process a rank created while its forks were followed (a rank caught
// by FollowExec was adopted before its exec showed it was one): ranks' children are not the
// agent's business, and a followed child stays held until adopted.
func (p *proc) releaseChild(pid int) {
	fb, ok := p.a.backend.(forkBackend)
	if !ok {
		return
	}
	go func() {
		cp, err := fb.Adopt(pid, ptrace.AdoptOptions{})
		if err != nil {
			p.a.logf("agent: rank %d: let child %d go: %v", p.rank, pid, err)
			return
		}
		letGo(cp)
	}()
}
