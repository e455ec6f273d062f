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
	"regexp"
	"strings"
	"syscall"
	"time"
	"unsafe"
)

// release lets the held application run: DEBUGGER_RELEASE to its nspace (what a rank held in
// PMIx_Init waits for), and for a stop-on-exec hold SIGCONT to each rank, which the launcher
// left stopped and untraced.
func (s *server) release() error {
	cns := C.CString(s.appNs)
	defer C.free(unsafe.Pointer(cns))
	hold := s.hold
	if rc := C.hp_release(cns, C.uint32_t(C.PMIX_RANK_WILDCARD)); rc != 0 {
		return pmixError(fmt.Sprintf("PMIx_Notify_event DEBUGGER_RELEASE to %s", s.appNs), rc)
	}
	if hold == HoldInit {
		s.agains = 0
		s.again = time.After(releaseAgainAfter[0])
	}
	if hold == HoldExec {
		if err := s.continueRanks(); err != nil {
			return err
		}
	}
	s.hold = ""
	return nil
}

// continueRanks sends SIGCONT to every rank: directly on this host, through the launcher's
// job control elsewhere.
func (s *server) continueRanks() error {
	host, _ := os.Hostname()
	remote := false
	var errs []error
	for _, p := range s.procs {
		if p.Host != host {
			remote = true
			continue
		}
		if err := syscall.Kill(p.Pid, syscall.SIGCONT); err != nil && err != syscall.ESRCH {
			errs = append(errs, fmt.Errorf("pmix: release: SIGCONT rank %d pid %d: %w", p.Rank, p.Pid, err))
		}
	}
	if remote {
		if err := s.kill(int(syscall.SIGCONT)); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// releaseAgainAfter are the waits before each repeat of the release of a job held in
// PMIx_Init: about half a minute in all. The launcher reports such a job ready
// for debug (PRRTE 3.0: once every rank is launched) before every rank has reached its hold:
// a rank still starting then (a rank of a loaded node, or of a node the launcher reaches
// through its daemons) registers for the release after it went, and would wait in PMIx_Init
// for ever (TestPMIxLateRank). A rank past its hold no longer listens for the release, so a
// repeat changes nothing for it; a rank that came late is released by the next one.
var releaseAgainAfter = []time.Duration{100 * time.Millisecond, 250 * time.Millisecond, 500 * time.Millisecond,
	time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second}

// releaseAgain sends the job's release once more, and schedules the next repeat.
func (s *server) releaseAgain() {
	s.again = nil
	if !s.inited || s.ended || s.lost || s.appNs == "" {
		return
	}
	cns := C.CString(s.appNs)
	defer C.free(unsafe.Pointer(cns))
	if rc := C.hp_release(cns, C.uint32_t(C.PMIX_RANK_WILDCARD)); rc != 0 {
		fmt.Fprintln(os.Stderr, pmixError(fmt.Sprintf("PMIx_Notify_event DEBUGGER_RELEASE to %s (repeat)", s.appNs), rc))
		return
	}
	if s.agains++; s.agains < len(releaseAgainAfter) {
		s.again = time.After(releaseAgainAfter[s.agains])
	}
}

// execStopTimeout bounds the wait for the ranks of a stop-on-exec hold to reach their stop
// (waitStoppedAtExec); execStopPoll is how often their state is read; after execStopNote the
// tool says on its standard error which ranks it waits for.
const (
	execStopTimeout = 30 * time.Second
	execStopPoll    = 25 * time.Millisecond
	execStopNote    = time.Second
)

// waitStoppedAtExec waits until every rank of the proc table on this host is stopped and
// untraced, as the stop-on-exec hold leaves it. PRRTE reports the job ready for debug once its
// ranks are launched, not once they are stopped: on a loaded machine a rank may still be
// running then (through its exec, or between the launcher's detach and the stop it leaves
// pending), and a job reported held must be held. A rank that has ended is left to the
// caller, which names it; one not stopped within execStopTimeout fails the launch. If no rank
// is on this host by its name while one runs here all the same (its pid runs its executable),
// the host names do not match and the launch fails rather than check none.
//
// The wait serves what the tool's loop would meanwhile: a request is refused as during the
// rest of the launch, and the front end's going away (the end of reqs), the job's end, the
// lost connection to the launcher and the launcher's exit end it at once with an error.
func (s *server) waitStoppedAtExec(reqs <-chan Request) error {
	host, _ := os.Hostname()
	if err := checkHostNames(s.procs, host); err != nil {
		return err
	}
	deadline, note := time.After(execStopTimeout), time.After(execStopNote)
	tick := time.NewTicker(execStopPoll)
	defer tick.Stop()
	for {
		running := notStoppedAtExec(s.procs, host)
		if len(running) == 0 {
			return nil
		}
		select {
		case <-tick.C:
		case <-note:
			fmt.Fprintf(os.Stderr, "pmix: launch: %s reported held at exec; waiting for ranks to stop: %s\n",
				s.appNs, strings.Join(running, ", "))
		case <-deadline:
			return fmt.Errorf("pmix: launch: ranks not stopped at exec %v after the launcher reported them held: %s",
				execStopTimeout, strings.Join(running, ", "))
		case ev := <-pmixEvents:
			s.handle(ev)
			if s.ended {
				return fmt.Errorf("pmix: launch: job %s ended before its ranks stopped at exec", s.appNs)
			}
			if s.lost {
				return fmt.Errorf("pmix: launch: lost the connection to the launcher (pid %d) before the ranks of %s stopped at exec",
					s.launcherPid, s.appNs)
			}
		case how := <-s.launcherExit:
			s.launcherExit <- how
			return fmt.Errorf("pmix: launch: the launcher (pid %d) %s before the ranks of %s stopped at exec", s.launcherPid, how, s.appNs)
		case next, ok := <-reqs:
			if err := s.duringLaunch(next, ok); err != nil {
				return err
			}
		}
	}
}

// checkHostNames fails when no rank of procs is on host by its name while one runs here all
// the same (its pid runs its executable): the launcher names this host otherwise, and the
// ranks of this host cannot be told.
func checkHostNames(procs []Proc, host string) error {
	for _, p := range procs {
		if sameHost(p.Host, host) && p.Pid > 0 {
			return nil
		}
	}
	for _, p := range procs {
		if p.Pid <= 0 || p.Executable == "" {
			continue
		}
		if exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", p.Pid)); err == nil && exe == p.Executable {
			return fmt.Errorf("pmix: launch: rank %d (pid %d) runs on this host, named %q, but the launcher names its host %q: cannot check the stop-on-exec hold",
				p.Rank, p.Pid, host, p.Host)
		}
	}
	return nil
}

// notStoppedAtExec names the ranks of procs on host that live and are not stopped untraced.
func notStoppedAtExec(procs []Proc, host string) []string {
	var running []string
	for _, p := range procs {
		if !sameHost(p.Host, host) || p.Pid <= 0 {
			continue
		}
		if st, tracer, ok := stopState(p.Pid); ok && st != "Z" && st != "X" && (st != "T" || tracer != "0") {
			running = append(running, fmt.Sprintf("rank %d pid %d (state %s, tracer %s)", p.Rank, p.Pid, st, tracer))
		}
	}
	return running
}

// sameHost reports whether host names a and b name the same host, comparing their short
// names (before the first dot): the launcher may report a host fully qualified.
func sameHost(a, b string) bool {
	short := func(h string) string {
		if i := strings.IndexByte(h, '.'); i >= 0 {
			return h[:i]
		}
		return h
	}
	return short(a) == short(b)
}

var tracerPidLine = regexp.MustCompile(`(?m)^TracerPid:\s*(\d+)`)

// stopState returns the state letter of pid (/proc/PID/stat) and its tracer's pid
// (/proc/PID/status, "0" when untraced); ok false when the process is gone.
func stopState(pid int) (state, tracer string, ok bool) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", "", false
	}
	i := strings.LastIndexByte(string(stat), ')')
	if i < 0 || i+2 >= len(stat) {
		return "", "", false
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return "", "", false
	}
	m := tracerPidLine.FindSubmatch(status)
	if m == nil {
		return "", "", false
	}
	return string(stat[i+2]), string(m[1]), true
}
