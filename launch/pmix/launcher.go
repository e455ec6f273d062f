//go:build cgo && pmix

package pmix

/*
#include <stdlib.h>
#include <pmix_tool.h>
#include "pmixtool.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/hpcdap/hpcdap/procimage"
)

// launch runs the indirect flow: start the launcher through PMIx_Spawn so that it calls back,
// make it the tool's server, ask for its job's output, release it, and wait until its job is
// held (or launched, without a hold). A launch that fails, or whose front end goes away,
// before the job is reported ready ends the launcher and everything it started.
func (s *server) launch(r Request, reqs <-chan Request) error {
	if !filepath.IsAbs(r.Launcher) {
		return fmt.Errorf("pmix: launch: launcher %q is not an absolute path", r.Launcher)
	}
	if r.Program == "" {
		return errors.New("pmix: launch: no program")
	}
	switch r.Hold {
	case "", HoldInit, HoldExec:
	default:
		return fmt.Errorf("pmix: launch: unknown hold %q (want %q, %q or none)", r.Hold, HoldExec, HoldInit)
	}
	if err := s.initTool(0); err != nil {
		return err
	}
	uri, err := s.getString(s.nspace, 0, "pmix.mysrvr.uri")
	if err != nil {
		return err
	}
	if err := s.register(codeLostConnection); err != nil {
		return err
	}
	env := r.Env
	if len(env) == 0 {
		env = os.Environ()
	}
	if err := withStderrOnStdout(func() error { return s.spawnLauncher(r, env, uri) }); err != nil {
		return err
	}
	s.emit(Event{Ev: EvLauncher, LauncherPid: s.launcherPid, Nspace: s.launcherNs})
	if err := s.startJob(r, reqs); err != nil {
		s.abandon()
		return err
	}
	return nil
}

// startJob takes a spawned launcher to its job's ready event.
func (s *server) startJob(r Request, reqs <-chan Request) error {
	cns := C.CString(s.launcherNs)
	defer C.free(unsafe.Pointer(cns))
	// Asked every callBackPoll whether the launcher has called back (up to setServerTimeout);
	// a launcher that exits first is reported at once. The asking goroutine owns its copy of
	// the name: it may be left in libpmix (stuckAfter).
	setServer := make(chan C.int, 1)
	stop := make(chan struct{})
	defer close(stop)
	done := s.inflightCall()
	go func(ns string) {
		defer done()
		cns := C.CString(ns)
		defer C.free(unsafe.Pointer(cns))
		setServer <- waitCallBack(cns, stop)
	}(s.launcherNs)
	what := fmt.Sprintf("PMIx_tool_set_server %s rank 0 (%s, pid %d)", s.launcherNs, r.Launcher, s.launcherPid)
	stuck := time.After(setServerTimeout*time.Second + stuckAfter)
	for connected := false; !connected; {
		select {
		case <-stuck:
			// The call never returned: libpmix waits on a launcher that no longer answers.
			s.stuck = true
			return fmt.Errorf("pmix: %s: no answer within %v: the launcher (pid %d) started but does not answer",
				what, setServerTimeout*time.Second+stuckAfter, s.launcherPid)
		case rc := <-setServer:
			if rc != 0 {
				err := pmixError(what, rc)
				select {
				case how := <-s.launcherExit:
					s.launcherExit <- how
					return fmt.Errorf("%w; the launcher %s", err, how)
				default:
					return fmt.Errorf("%w: the launcher runs but did not call back: not a PMIx launcher?", err)
				}
			}
			connected = true
		case how := <-s.launcherExit:
			s.launcherExit <- how
			return fmt.Errorf("pmix: %s: the launcher %s without calling back: not a PMIx launcher?", what, how)
		case next, ok := <-reqs:
			if err := s.duringLaunch(next, ok); err != nil {
				return err
			}
		}
	}
	// Registrations made before set_server would stay with the tool itself.
	if err := s.register(codeReadyForDebug, codeLaunchComplete, codeJobEnd, codeLostConnection); err != nil {
		return err
	}
	// The launcher's first job is <its nspace>@1: ask for its output before it can start.
	// Output pulled later arrives, but labelled with the tool's own name, not the rank's.
	if err := s.pullOutput(s.launcherNs + "@1"); err != nil {
		return err
	}
	if rc := C.hp_release(cns, 0); rc != 0 {
		return pmixError(fmt.Sprintf("PMIx_Notify_event DEBUGGER_RELEASE to %s@0", s.launcherNs), rc)
	}
	if err := s.waitLaunched(r, reqs); err != nil {
		return s.notReady(err)
	}
	// From here the job is at its hold: a failure ends it with the launcher.
	s.hold = r.Hold
	if err := s.pullOutput(s.appNs); err != nil {
		return s.notReady(err)
	}
	if err := s.readyEvent(r.Seq, reqs); err != nil {
		return s.notReady(err)
	}
	return nil
}

// callBackPoll is how often the tool asks whether the launcher has called back. libpmix's
// own wait for the connection (PMIX_WAIT_FOR_CONNECTION) looks only every quarter of a
// second (OpenPMIx 5.0), while a launcher calls back within tens of milliseconds.
const callBackPoll = 5 * time.Millisecond

// callBackSettle is how long the tool leaves a launcher that has just called back before it
// sends it anything. The launcher's first act on the connection is its own request for its
// job data (in PMIx_server_init; the answer carries the launch directives, the hold among
// them). Both processes number their requests from the same first tag and match a reply to
// a request by that tag alone (OpenPMIx 5.0.7), so a request of the tool's that crosses the
// launcher's on the wire is taken by each side for the other's reply: the tool's request
// seems to succeed (the launcher's request reads as PMIX_SUCCESS), the launcher decodes it as
// its job data and runs the job without the hold, and a later request of the tool's fails
// (PMIX_ERR_SERVER_FAILED_REQUEST). The launcher sends its request right after the connection
// and is answered at once; this interval lets it through first.
const callBackSettle = 50 * time.Millisecond

// waitCallBack makes the launcher of nspace the tool's server as soon as it has called back,
// and returns callBackSettle later; PMIX_ERR_NOT_FOUND when it has not called back within
// setServerTimeout, PMIX_ERR_TIMEOUT when stop closes first.
func waitCallBack(cns *C.char, stop <-chan struct{}) C.int {
	deadline := time.Now().Add(setServerTimeout * time.Second)
	for {
		rc := C.hp_set_server(cns)
		if rc == 0 {
			time.Sleep(callBackSettle)
			return 0
		}
		if rc != C.PMIX_ERR_UNREACH {
			return rc
		}
		if time.Now().After(deadline) {
			return C.PMIX_ERR_NOT_FOUND
		}
		select {
		case <-stop:
			return C.PMIX_ERR_TIMEOUT
		case <-time.After(callBackPoll):
		}
	}
}

// duringLaunch answers a request read while a launch is in progress (ok false: the input
// ended), and says whether the launch must be given up.
func (s *server) duringLaunch(next Request, ok bool) error {
	if !ok {
		return errFrontEndGone
	}
	s.fail(next.Seq, fmt.Errorf("pmix: %s: a launch is in progress", next.Op))
	return nil
}

// errFrontEndGone ends a launch whose front end went away (the end of its requests): nothing
// more is waited for, and what the launch started is ended.
var errFrontEndGone = errors.New("pmix: launch: the front end went away")

// launcherGrace is how long a launcher given up has to end its job after SIGTERM before it
// and the processes it started are killed.
const launcherGrace = 5 * time.Second

// abandon ends what a launch that failed started: the launcher, told with SIGTERM to end its
// job on every node, and after launcherGrace killed together with every process it started
// on this host (ranks stopped on exec do not act on SIGTERM). Nothing is left held.
func (s *server) abandon() {
	s.hold = ""
	pid := s.launcherPid
	if pid <= 0 || !alive(pid) {
		return
	}
	// The launcher's descendants, gathered while it lives: once it is gone, its orphans
	// are no longer found through it.
	tree := map[int]uint64{}
	descendants(pid, tree)
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil && err != syscall.ESRCH {
		fmt.Fprintf(os.Stderr, "pmix: launch: end launcher %d: %v\n", pid, err)
	}
	deadline := time.Now().Add(launcherGrace)
	for alive(pid) && time.Now().Before(deadline) {
		descendants(pid, tree)
		time.Sleep(50 * time.Millisecond)
	}
	if alive(pid) {
		descendants(pid, tree)
		syscall.Kill(pid, syscall.SIGKILL)
	}
	for p, start := range tree {
		if st, ok := startTime(p); ok && st == start {
			syscall.Kill(p, syscall.SIGKILL)
		}
	}
}

// descendants adds every descendant of pid, with its start time, to tree.
func descendants(pid int, tree map[int]uint64) {
	dirs, _ := os.ReadDir("/proc")
	children := map[int][]int{}
	for _, d := range dirs {
		p, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		if ppid, ok := parentPid(p); ok {
			children[ppid] = append(children[ppid], p)
		}
	}
	for next := children[pid]; len(next) > 0; {
		p := next[0]
		next = append(next[1:], children[p]...)
		if st, ok := startTime(p); ok {
			tree[p] = st
		}
	}
}

// statFields returns the fields of /proc/PID/stat after the command name (field 3 on): the
// start time is there only (/proc/PID/status has none).
func statFields(pid int) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil
	}
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(string(b[i+1:]))
}

// parentPid returns the parent of pid.
func parentPid(pid int) (int, bool) {
	st, err := procimage.ReadStatus(pid)
	return st.PPid, err == nil
}

// startTime returns the start time of pid (field 22), which tells a process from a later
// one with its pid.
func startTime(pid int) (uint64, bool) {
	f := statFields(pid)
	if len(f) < 20 {
		return 0, false
	}
	st, err := strconv.ParseUint(f[19], 10, 64)
	return st, err == nil
}

// spawnLauncher starts the launcher through PMIx_Spawn, calling back to uri, with the hold as
// a launch directive (PRRTE 3.0's own --stop-in-init does not hold the ranks: their PMIx_Init
// does not see the key; the directive does).
func (s *server) spawnLauncher(r Request, env []string, uri string) error {
	argv := append(append(append([]string{r.Launcher}, r.Args...), r.Program), r.ProgramArgs...)
	ccmd, cdir, chold, curi := C.CString(r.Launcher), C.CString(r.Dir), C.CString(r.Hold), C.CString(uri)
	defer C.free(unsafe.Pointer(ccmd))
	defer C.free(unsafe.Pointer(cdir))
	defer C.free(unsafe.Pointer(chold))
	defer C.free(unsafe.Pointer(curi))
	cargv, freeArgv := cstrings(argv)
	defer freeArgv()
	cenv, freeEnv := cstrings(env)
	defer freeEnv()
	var ns [256]C.char
	if rc := C.hp_spawn_launcher(ccmd, cargv, cenv, cdir, chold, curi, &ns[0], C.size_t(len(ns))); rc != 0 {
		return pmixError("PMIx_Spawn "+r.Launcher, rc)
	}
	s.launcherNs = C.GoString(&ns[0])
	s.launcherPid = childPid()
	// libpmix reaps the launcher; watch its pid instead: before it calls back, and until its
	// job is ready (its exit does not always show as a lost connection, nor its job's end).
	s.launcherExit = make(chan string, 1)
	go func(pid int) {
		for gone := 0; gone < 2; {
			if alive(pid) {
				gone = 0
			} else {
				gone++
			}
			time.Sleep(100 * time.Millisecond)
		}
		s.launcherExit <- "exited"
	}(s.launcherPid)
	return nil
}

// withStderrOnStdout runs spawn (which forks the launcher) with this process's standard error
// on its standard output when that is a file (the job's output file), so that the launcher
// and what it starts inherit the file, not the pipe to the front end, whose end would kill
// them with SIGPIPE at their next message.
func withStderrOnStdout(spawn func() error) error {
	if st, err := os.Stdout.Stat(); err != nil || !st.Mode().IsRegular() {
		return spawn()
	}
	saved, err := syscall.Dup(2)
	if err != nil {
		return spawn()
	}
	defer syscall.Close(saved)
	if err := unix.Dup2(1, 2); err != nil {
		return spawn()
	}
	defer unix.Dup2(saved, 2)
	return spawn()
}

// cstrings returns a NULL-terminated C array of C strings and its destructor.
func cstrings(ss []string) (**C.char, func()) {
	arr := (**C.char)(C.calloc(C.size_t(len(ss)+1), C.size_t(unsafe.Sizeof(uintptr(0)))))
	v := unsafe.Slice(arr, len(ss)+1)
	for i, s := range ss {
		v[i] = C.CString(s)
	}
	return arr, func() {
		for _, p := range v[:len(ss)] {
			C.free(unsafe.Pointer(p))
		}
		C.free(unsafe.Pointer(arr))
	}
}

// childPid returns the pid of this process's one child (the launcher libpmix started).
func childPid() int {
	tasks, _ := filepath.Glob("/proc/self/task/*/children")
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				return pid
			}
		}
	}
	return 0
}

// pullOutput asks for the output of every rank of nspace (once per nspace), which
// goPMIxOutput labels and writes to the tool's stdout and stderr.
func (s *server) pullOutput(nspace string) error {
	if s.pulled[nspace] {
		return nil
	}
	s.pulled[nspace] = true
	cns := C.CString(nspace)
	defer C.free(unsafe.Pointer(cns))
	if rc := C.hp_iof_pull(cns); rc != 0 {
		return pmixError("PMIx_IOF_pull "+nspace, rc)
	}
	return nil
}

// waitLaunched waits for READY_FOR_DEBUG (held) or LAUNCH_COMPLETE (no hold) for the
// application. A held job one of whose ranks on this host ends first will not be ready.
func (s *server) waitLaunched(r Request, reqs <-chan Request) error {
	tick := time.NewTicker(rankWatch)
	defer tick.Stop()
	for {
		if s.appNs != "" && (r.Hold != "" || s.launchSeen[s.appNs]) && !s.ended {
			return nil
		}
		if r.Hold == "" && s.appNs == "" {
			for ns := range s.launchSeen {
				if ns != s.launcherNs {
					s.appNs = ns
				}
			}
			if s.appNs != "" {
				continue
			}
		}
		if s.ended {
			return fmt.Errorf("pmix: launch: job %s ended before it was ready", s.appNs)
		}
		if s.lost {
			return fmt.Errorf("pmix: launch: lost the connection to the launcher %s (pid %d) before its job was ready", r.Launcher, s.launcherPid)
		}
		select {
		case ev := <-pmixEvents:
			s.handle(ev)
			if err := s.readLaunchedTable(r, reqs); err != nil {
				return s.notReady(err)
			}
		case <-tick.C:
			if gone := s.endedRanks(); len(gone) > 0 {
				return s.notReady(s.goneError(gone, "no ready event"))
			}
		case how := <-s.launcherExit:
			s.launcherExit <- how
			// A launcher whose job failed early can exit with neither the job's end nor the
			// lost connection reported to the tool: its exit ends the wait. Notifications
			// already on their way are read first; the job's end says more.
			settle := time.After(exitSettle)
		drain:
			for !s.ended {
				select {
				case ev := <-pmixEvents:
					s.handle(ev)
				case <-settle:
					break drain
				}
			}
			if s.ended {
				return fmt.Errorf("pmix: launch: job %s ended before it was ready", s.appNs)
			}
			return fmt.Errorf("pmix: launch: the launcher %s (pid %d) %s before its job was ready", r.Launcher, s.launcherPid, how)
		case next, ok := <-reqs:
			if err := s.duringLaunch(next, ok); err != nil {
				return err
			}
		}
	}
}

// exitSettle is how long the tool still reads the launcher's notifications once it has seen
// the launcher exit before its job was ready.
const exitSettle = 200 * time.Millisecond

// alive reports whether pid is a process that has not exited: its status reads, and it is
// no zombie (nor dead).
func alive(pid int) bool {
	st, err := procimage.ReadStatus(pid)
	return err == nil && st.State != 'Z' && st.State != 'X'
}
