//go:build cgo && pmix

package pmix

/*
#cgo pkg-config: pmix
#include <stdlib.h>
#include <pmix_tool.h>
#include "pmixtool.h"
*/
import "C"

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/hpcdap/hpcdap/procimage"
	"golang.org/x/sys/unix"
)

// Built reports whether this binary holds the PMIx tool.
const Built = true

// Event codes the tool registers for (pmix_common.h).
const (
	codeReadyForDebug  = int(C.PMIX_READY_FOR_DEBUG)
	codeLaunchComplete = int(C.PMIX_LAUNCH_COMPLETE)
	codeJobEnd         = int(C.PMIX_EVENT_JOB_END)
	codeLostConnection = int(C.PMIX_ERR_LOST_CONNECTION)
)

// setServerTimeout bounds the wait for a launcher to call back (seconds). A program that is
// not a PMIx launcher never does; a real one does within a second.
const setServerTimeout = 10

// pmixEvent is what the C event handler found in one notification.
type pmixEvent struct {
	code     int
	source   string // the notifying proc's nspace
	nspace   string // PMIX_NSPACE
	affected string // PMIX_EVENT_AFFECTED_PROC's nspace
	// affectedRank is PMIX_EVENT_AFFECTED_PROC's rank, -1 when none is named (the whole job):
	// in a job's end, the rank whose end ended the job (PRRTE).
	affectedRank int
	message      string // PMIX_EVENT_TEXT_MESSAGE: the launcher's own words on the event
	breakpoint   string
	exitCode     int
	haveExit     bool
	term         int
	haveTerm     bool
}

// pmixEvents carries notifications from libpmix's progress thread, which must never block.
var pmixEvents = make(chan pmixEvent, 4096)

//export goPMIxEvent
func goPMIxEvent(code C.int, source *C.char, rank C.uint32_t, nspace, affected *C.char, affectedRank C.uint32_t,
	breakpoint, message *C.char, exitCode, haveExit, term, haveTerm C.int) {
	ev := pmixEvent{
		code: int(code), source: goString(source), nspace: goString(nspace),
		affected: goString(affected), affectedRank: -1, breakpoint: goString(breakpoint), message: goString(message),
		exitCode: int(exitCode), haveExit: haveExit != 0, term: int(term), haveTerm: haveTerm != 0,
	}
	if affected != nil && affectedRank < C.PMIX_RANK_VALID {
		ev.affectedRank = int(affectedRank)
	}
	select {
	case pmixEvents <- ev:
	default:
		fmt.Fprintf(os.Stderr, "pmix: event %d from %s dropped: queue full\n", ev.code, ev.source)
	}
}

//export goPMIxOutput
func goPMIxOutput(channel C.int, nspace *C.char, rank C.uint32_t, data *C.char, n C.size_t) {
	output.add(int(channel), goString(nspace), uint32(rank), C.GoBytes(unsafe.Pointer(data), C.int(n)))
}

func goString(s *C.char) string {
	if s == nil {
		return ""
	}
	return C.GoString(s)
}

// pmixError names the call, its object and PMIx's status.
func pmixError(call string, rc C.int) error {
	return fmt.Errorf("pmix: %s: %s", call, C.GoString(C.hp_error_string(rc)))
}

// server is the state of one tool process.
type server struct {
	out *json.Encoder // events, on descriptor 3
	mu  sync.Mutex

	inited      bool
	nspace      string // the tool's own
	launcherNs  string
	launcherPid int
	appNs       string
	daemonNs    string // the debugger daemons' job, once spawned
	hold        string // the hold the job is at, "" once released
	procs       []Proc // the job's proc table, once read (at its launch's end, and when ready)
	// How the job ended, once it has: its status, and the rank whose end ended it (-1 when the
	// launcher named none) with the launcher's words on it.
	endStatus    int
	endRank      int
	endMessage   string
	lost         bool
	ended        bool
	launchSeen   map[string]bool // nspaces with LAUNCH_COMPLETE
	pulled       map[string]bool // nspaces whose output is pulled
	launcherExit chan string     // how the launcher ended, once
	// PMIx calls run off the main goroutine, to be waited for at the end (inflight), or given
	// up when one never returns (stuck: libpmix waits on a launcher that no longer answers,
	// and the tool then exits without finalising). One left unanswered when the front end
	// went away (left) is given leftWait to return at the end before it is taken for stuck.
	inflight sync.WaitGroup
	stuck    bool
	left     bool
	// The release of a job held in PMIx_Init is sent again on this timer (release.go).
	again  <-chan time.Time
	agains int
}

func (s *server) emit(ev Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.out.Encode(ev)
}

// fail reports that request seq failed (seq 0: a request that could not be read).
func (s *server) fail(seq uint64, err error) {
	ev := Event{Ev: EvError, Seq: seq, Error: err.Error()}
	var ended *JobEndedError
	if errors.As(err, &ended) {
		ev.Gone, ev.Status, ev.Ended = ended.Gone, ended.Status, ended.Ended
	}
	s.emit(ev)
}

// ServeTool serves the tool protocol: requests on stdin, events on events, until stdin ends or a
// detach request. Then a job the tool still holds is released and the tool finalises — at end
// of input, once a job it launched has ended.
func ServeTool(stdin io.Reader, events *os.File) error {
	// The launcher this process starts inherits its descriptors: keep it off the request and
	// event pipes (it would read requests as the job's input, and hold the event pipe open).
	if f, ok := stdin.(*os.File); ok && f.Fd() == 0 {
		fd, err := syscall.Dup(0)
		if err != nil {
			return fmt.Errorf("pmix: tool: move stdin: %w", err)
		}
		syscall.CloseOnExec(fd)
		null, err := os.Open(os.DevNull)
		if err != nil {
			return fmt.Errorf("pmix: tool: %w", err)
		}
		// unix.Dup2 is dup3 on Linux: arm64, riscv64 and loong64 have no dup2 system call.
		err = unix.Dup2(int(null.Fd()), 0)
		null.Close()
		if err != nil {
			return fmt.Errorf("pmix: tool: %s on stdin: %w", os.DevNull, err)
		}
		stdin = os.NewFile(uintptr(fd), "requests")
	}
	syscall.CloseOnExec(int(events.Fd()))
	// The front end reads this process's standard error. Once it is gone (killed), a write
	// there, such as a rank's labelled standard error, must fail with EPIPE rather than end
	// the tool, and with the tool the launcher, its child, and the job. The signal is caught,
	// not ignored: the launcher this tool starts keeps the default action for its own pipes.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	s := &server{out: json.NewEncoder(events), launchSeen: map[string]bool{}, pulled: map[string]bool{}}

	reqs := make(chan Request)
	go func() {
		defer close(reqs)
		sc := bufio.NewScanner(stdin)
		sc.Buffer(make([]byte, 64<<10), 16<<20)
		for sc.Scan() {
			var r Request
			if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
				s.fail(0, fmt.Errorf("pmix: request %q: %v", sc.Text(), err))
				continue
			}
			reqs <- r
		}
	}()
	defer s.finalize()
	for {
		select {
		case r, ok := <-reqs:
			if !ok {
				// The front end is gone: a job this tool launched is kept to its end.
				s.releaseHeld()
				s.outliveFrontEnd()
				s.endLauncher()
				return nil
			}
			if r.Op == OpDetach {
				s.releaseHeld()
				s.finalize()
				s.emit(Event{Ev: EvDetached, Seq: r.Seq})
				return nil
			}
			s.serve(r, reqs)
		case ev := <-pmixEvents:
			s.handle(ev)
		case <-s.again:
			s.releaseAgain()
		}
	}
}

// outliveFrontEnd keeps the tool until the job it launched ends, once its front end has gone
// (end of input): the launcher is this process's child and is lost with it, and with the
// launcher the job; meanwhile the job's output still goes to the output file. A job this tool
// attached to, or one whose launcher is gone, needs nothing of it.
func (s *server) outliveFrontEnd() {
	if s.launcherExit == nil || s.appNs == "" {
		return
	}
	for !s.ended && !s.lost {
		select {
		case ev := <-pmixEvents:
			s.handle(ev)
		case how := <-s.launcherExit:
			s.launcherExit <- how
			return
		}
	}
}

// endLauncher makes sure the launcher this tool spawned ends with its job: once the job has
// ended (or the connection to the launcher is lost), a launcher still there after
// launcherLinger is sent SIGTERM, then SIGKILL. Left alone it can outlive the tool, its only
// parent, for good (PRRTE's prterun, orphaned while it tears its job down).
func (s *server) endLauncher() {
	if s.launcherExit == nil || s.launcherPid <= 0 || !s.ended && !s.lost {
		return
	}
	for _, sig := range []syscall.Signal{0, syscall.SIGTERM, syscall.SIGKILL} {
		if sig != 0 {
			fmt.Fprintf(os.Stderr, "pmix: the launcher (pid %d) outlived its job: %v\n", s.launcherPid, sig)
			syscall.Kill(s.launcherPid, sig)
		}
		select {
		case how := <-s.launcherExit:
			s.launcherExit <- how
			return
		case <-time.After(launcherLinger):
		}
	}
}

// launcherLinger is how long a launcher is given to end by itself once its job has ended,
// and then once signalled.
const launcherLinger = 5 * time.Second

// releaseHeld releases a job still at its hold point: nothing may be left stopped.
func (s *server) releaseHeld() {
	if s.hold != "" && !s.lost && !s.ended {
		if err := s.release(); err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
	}
}

// leftWait is how long the end waits for a PMIx call left when the front end went away: the
// launch's end has ended the launcher by then, and a call to it returns with an error.
const leftWait = 5 * time.Second

// finalize waits for the PMIx calls in flight and finalises libpmix, unless a call is stuck.
func (s *server) finalize() {
	if s.left && !s.stuck {
		returned := make(chan struct{})
		go func() {
			s.inflight.Wait()
			close(returned)
		}()
		select {
		case <-returned:
		case <-time.After(leftWait):
			fmt.Fprintf(os.Stderr, "pmix: a PMIx call left when the front end went away has not returned within %v: not finalising\n", leftWait)
			s.stuck = true
		}
		s.left = false
	}
	if s.stuck {
		// A PMIx call never returned: PMIx_tool_finalize would wait on it too.
		s.inited = false
	} else {
		s.inflight.Wait()
	}
	if s.inited {
		s.inited = false
		C.hp_tool_finalize()
	}
	output.flush()
}

func (s *server) serve(r Request, reqs <-chan Request) {
	var err error
	switch r.Op {
	case OpLaunch:
		err = s.launch(r, reqs)
	case OpAttach:
		err = s.attach(r)
	case OpRelease:
		if s.appNs == "" {
			err = errors.New("pmix: release: no job")
		} else if err = s.release(); err == nil {
			s.emit(Event{Ev: EvReleased, Seq: r.Seq, Nspace: s.appNs})
		}
	case OpDaemons:
		err = s.spawnDaemons(r)
	case OpKill:
		if s.appNs == "" {
			err = errors.New("pmix: kill: no job")
		} else if ns := firstOf(r.Nspace, s.appNs); ns != s.appNs && ns != s.daemonNs {
			err = fmt.Errorf("pmix: kill: %s is not a job of this tool", ns)
		} else if err = s.signal(ns, r.Signal); err == nil {
			s.emit(Event{Ev: EvKilled, Seq: r.Seq, Nspace: ns})
		}
	default:
		err = fmt.Errorf("pmix: request: unknown op %q", r.Op)
	}
	if err != nil {
		s.fail(r.Seq, err)
	}
}

// handle records one notification and reports job end and lost connections.
func (s *server) handle(ev pmixEvent) {
	switch ev.code {
	case codeReadyForDebug:
		// The aggregated event for the job the launcher started names it in PMIX_NSPACE.
		if s.appNs == "" && ev.nspace != "" && ev.nspace != s.launcherNs {
			s.appNs = ev.nspace
		}
	case codeLaunchComplete:
		if ns := firstOf(ev.nspace, ev.affected); ns != "" {
			s.launchSeen[ns] = true
		}
	case codeJobEnd:
		ns := firstOf(ev.affected, ev.nspace, ev.source)
		if ns != "" && ns == s.daemonNs {
			status := ev.term
			if ev.haveExit {
				status = ev.exitCode
			}
			s.emit(Event{Ev: EvDaemonsEnd, Nspace: ns, Status: status})
			return
		}
		if ns == "" || ns == s.launcherNs || (s.appNs != "" && ns != s.appNs) {
			return
		}
		if s.appNs == "" {
			s.appNs = ns
		}
		status := ev.term
		if ev.haveExit {
			status = ev.exitCode
		}
		if !s.ended {
			output.flush()
			s.ended = true
			s.endStatus, s.endRank, s.endMessage = status, ev.affectedRank, ev.message
			s.hold = ""
			end := Event{Ev: EvEnd, Nspace: ns, Status: status, Message: s.endText()}
			if p, ok := s.endCause(); ok {
				end.Gone = []Proc{p}
			}
			s.emit(end)
		}
	case codeLostConnection:
		if !s.lost {
			s.lost = true
			s.emit(Event{Ev: EvLost, Nspace: s.launcherNs})
		}
	}
}

func firstOf(ss ...string) string {
	for _, s := range ss {
		if s != "" {
			return s
		}
	}
	return ""
}

func (s *server) initTool(attachPid int) error {
	if s.inited || s.nspace != "" {
		return errors.New("pmix: tool init: this tool already serves a job")
	}
	var ns [256]C.char
	var rank C.uint32_t
	if rc := C.hp_tool_init(C.int(attachPid), &ns[0], C.size_t(len(ns)), &rank); rc != 0 {
		if attachPid > 0 {
			return pmixError(fmt.Sprintf("PMIx_tool_init with PMIX_SERVER_PIDINFO %d", attachPid), rc)
		}
		return pmixError("PMIx_tool_init", rc)
	}
	s.inited = true
	s.nspace = C.GoString(&ns[0])
	return nil
}

func (s *server) register(codes ...int) error {
	for _, code := range codes {
		if rc := C.hp_register(C.int(code)); rc != 0 {
			return pmixError(fmt.Sprintf("PMIx_Register_event_handler %s", C.GoString(C.hp_error_string(C.int(code)))), rc)
		}
	}
	return nil
}

func (s *server) getString(nspace string, rank uint32, key string) (string, error) {
	cns, ckey := C.CString(nspace), C.CString(key)
	defer C.free(unsafe.Pointer(cns))
	defer C.free(unsafe.Pointer(ckey))
	var out *C.char
	if rc := C.hp_get_string(cns, C.uint32_t(rank), ckey, &out); rc != 0 {
		return "", pmixError(fmt.Sprintf("PMIx_Get %s", key), rc)
	}
	defer C.free(unsafe.Pointer(out))
	return C.GoString(out), nil
}

// readyEvent reads the proc table of the application and reports it in the reply to request
// seq; reqs are the requests that come meanwhile (nil: none are read).
func (s *server) readyEvent(seq uint64, reqs <-chan Request) error {
	procs, err := s.procTableBounded(s.appNs, reqs, queryTimeout)
	if err != nil {
		return err
	}
	s.procs = procs
	hold := s.hold
	if hold == "" {
		hold = HoldNone
	}
	switch hold {
	case HoldExec:
		if err := s.waitStoppedAtExec(reqs); err != nil {
			return err
		}
	case HoldInit:
		if err := s.waitInInit(reqs); err != nil {
			return err
		}
	}
	s.emit(Event{Ev: EvReady, Seq: seq, LauncherPid: s.launcherPid, Nspace: s.appNs, Hold: hold, Procs: s.procs,
		Version: C.GoString(C.hp_version())})
	return nil
}

// daemonSupport says why the launcher cannot start debugger daemons for the job, "" when its
// debug support lists PMIX_DEBUG_TARGET (PRRTE's lists it, but not PMIX_DEBUGGER_DAEMONS,
// which it honours) or its debug or spawn support lists PMIX_DEBUGGER_DAEMONS.
func (s *server) daemonSupport() string {
	var said []string
	for _, key := range []string{"pmix.qry.debug", "pmix.qry.spawn"} {
		ckey := C.CString(key)
		var out *C.char
		rc := C.hp_query_string(ckey, &out)
		C.free(unsafe.Pointer(ckey))
		if rc != 0 {
			said = append(said, pmixError("PMIx_Query_info "+key, rc).Error())
			continue
		}
		list := C.GoString(out)
		C.free(unsafe.Pointer(out))
		for _, a := range strings.Split(list, ",") {
			if a = strings.TrimSpace(a); a == C.PMIX_DEBUGGER_DAEMONS || a == C.PMIX_DEBUG_TARGET && key == "pmix.qry.debug" {
				return ""
			}
		}
		said = append(said, key+": "+list)
	}
	return "neither its debug support lists " + C.PMIX_DEBUG_TARGET + " nor its spawn support " + C.PMIX_DEBUGGER_DAEMONS +
		" (" + strings.Join(said, "; ") + ")"
}

// spawnDaemons has the launcher start the job's debugger daemons.
func (s *server) spawnDaemons(r Request) error {
	switch {
	case s.appNs == "":
		return errors.New("pmix: daemons: no job")
	case s.daemonNs != "":
		return fmt.Errorf("pmix: daemons: the daemons of %s run already (%s)", s.appNs, s.daemonNs)
	case !filepath.IsAbs(r.Program):
		return fmt.Errorf("pmix: daemons: program %q is not an absolute path", r.Program)
	}
	if why := s.daemonSupport(); why != "" {
		return fmt.Errorf("pmix: daemons: the launcher cannot start debugger daemons: %s", why)
	}
	argv := append([]string{r.Program}, r.ProgramArgs...)
	cprog, cdir, ctarget := C.CString(r.Program), C.CString(r.Dir), C.CString(s.appNs)
	defer C.free(unsafe.Pointer(cprog))
	defer C.free(unsafe.Pointer(cdir))
	defer C.free(unsafe.Pointer(ctarget))
	cargv, freeArgv := cstrings(argv)
	defer freeArgv()
	cenv, freeEnv := cstrings(r.Env)
	defer freeEnv()
	var ns [256]C.char
	if rc := C.hp_spawn_daemons(cprog, cargv, cenv, cdir, ctarget, &ns[0], C.size_t(len(ns))); rc != 0 {
		return pmixError(fmt.Sprintf("PMIx_Spawn %s as debugger daemons of %s", filepath.Base(r.Program), s.appNs), rc)
	}
	s.daemonNs = C.GoString(&ns[0])
	s.emit(Event{Ev: EvDaemons, Seq: r.Seq, Nspace: s.daemonNs})
	return nil
}

func (s *server) procTable(nspace string) ([]Proc, error) {
	cns := C.CString(nspace)
	defer C.free(unsafe.Pointer(cns))
	var cp *C.hp_proc
	var n C.size_t
	if rc := C.hp_proctable(cns, &cp, &n); rc != 0 {
		return nil, pmixError("PMIx_Query_info PMIX_QUERY_PROC_TABLE "+nspace, rc)
	}
	defer C.hp_free_procs(cp, n)
	host, _ := os.Hostname()
	return goProcs(cp, n, func(h string) bool { return sameHost(h, host) }), nil
}

// goProcs converts a C proc table to Procs by rank; the executables of the processes on this
// host (local says which) are resolved through /proc.
func goProcs(cp *C.hp_proc, n C.size_t, local func(host string) bool) []Proc {
	procs := make([]Proc, 0, int(n))
	for _, p := range unsafe.Slice(cp, int(n)) {
		pr := Proc{Rank: int(p.rank), Host: C.GoString(p.host), Pid: int(p.pid), Executable: C.GoString(p.exe), state: int(p.state)}
		if local(pr.Host) && pr.Pid > 0 {
			if exe, ok := execedImage(pr.Pid); ok {
				pr.Executable = exe
			}
		}
		procs = append(procs, pr)
	}
	slices.SortFunc(procs, func(a, b Proc) int { return a.Rank - b.Rank })
	return procs
}

// execedImage returns the executable that process pid runs, from /proc/PID/exe, and false
// when it cannot be read or when the process has not yet replaced its launcher daemon's image
// (a rank of a job not held at exec, forked and on its way to its exec: it runs its parent's
// executable). The proc table's own name is kept then.
func execedImage(pid int) (string, bool) {
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		return "", false
	}
	if st, err := procimage.ReadStatus(pid); err == nil && st.PPid > 0 {
		if parent, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", st.PPid)); err == nil && parent == exe {
			return "", false
		}
	}
	return exe, true
}

func (s *server) kill(sig int) error { return s.signal(s.appNs, sig) }

// signal sends sig to every process of the job nspace through the launcher.
func (s *server) signal(nspace string, sig int) error {
	if sig <= 0 {
		return fmt.Errorf("pmix: kill: bad signal %d", sig)
	}
	cns := C.CString(nspace)
	defer C.free(unsafe.Pointer(cns))
	if rc := C.hp_signal(cns, C.int(sig)); rc != 0 {
		return pmixError(fmt.Sprintf("PMIx_Job_control signal %d to %s", sig, nspace), rc)
	}
	return nil
}

// attach connects to a running launcher through its rendezvous file and reads its job's table.
func (s *server) attach(r Request) error {
	if r.Pid <= 0 {
		return fmt.Errorf("pmix: attach: bad launcher pid %d", r.Pid)
	}
	if !alive(r.Pid) {
		return fmt.Errorf("pmix: attach: no process %d", r.Pid)
	}
	if err := s.initTool(r.Pid); err != nil {
		return err
	}
	s.launcherPid = r.Pid
	if srv, err := s.getString(s.nspace, 0, "pmix.srv.nspace"); err == nil {
		s.launcherNs = srv
	}
	if err := s.register(codeJobEnd, codeLostConnection); err != nil {
		return err
	}
	s.appNs = r.Nspace
	if s.appNs == "" {
		all, err := s.namespaces()
		if err != nil {
			return err
		}
		var apps []string
		for _, ns := range all {
			if ns != s.launcherNs && ns != s.nspace {
				apps = append(apps, ns)
			}
		}
		if len(apps) != 1 {
			return fmt.Errorf("pmix: attach: launcher %d runs %d jobs (%s): name one", r.Pid, len(apps), strings.Join(all, ", "))
		}
		s.appNs = apps[0]
	}
	s.hold = ""
	return s.readyEvent(r.Seq, nil)
}

func (s *server) namespaces() ([]string, error) {
	var out *C.char
	if rc := C.hp_namespaces(nil, &out); rc != 0 {
		return nil, pmixError("PMIx_Query_info PMIX_QUERY_NAMESPACES", rc)
	}
	defer C.free(unsafe.Pointer(out))
	var nss []string
	for _, ns := range strings.Split(C.GoString(out), ",") {
		if ns = strings.TrimSpace(ns); ns != "" {
			nss = append(nss, ns)
		}
	}
	return nss, nil
}
