//go:build cgo && pmix

package pmix

/*
#include <pmix_tool.h>
*/
import "C"

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/hpcdap/hpcdap/procimage"
)

// PRRTE reports a job ready for debug before every rank is at its hold: once its ranks are
// launched for a stop-on-exec hold (a rank may still be running through its exec, or between
// the launcher's detach and the stop it leaves pending), once the first of them is there for
// a hold in PMIx_Init (a rank still starting, on a loaded node, has not called PMIx_Init
// yet). A job reported held must be held, and the release of a job held in PMIx_Init reaches
// only the ranks that wait for it when it goes: a rank that came later would wait for ever,
// or for the front end's next repeat of the release (release.go), and a rank kept stopped
// short of PMIx_Init by the debugger, as an all-stop does, for longer than the repeats go
// on. So the tool reports the job ready only once each rank is at its hold.

// holdTimeout bounds the wait for the ranks to reach their hold, the launcher's answers to it
// included; their state is read first at once, then every holdPoll (from /proc), or for a hold
// in PMIx_Init (from the launcher's proc table) after holdPoll, the interval doubling up to
// holdPollMax (at thousands of ranks each read of the proc table is a request the launcher
// answers for every rank, while it launches them); after holdNote the tool says on its
// standard error which ranks it waits for.
const (
	holdTimeout = 30 * time.Second
	holdPoll    = 25 * time.Millisecond
	holdPollMax = 500 * time.Millisecond
	holdNote    = time.Second
)

// waitAtHold waits until pending names no rank: pending returns the ranks of this host not yet
// at their hold (here) and those of other hosts (there), as the hold's where says ("stopped
// at exec", "in PMIx_Init"), waiting for the launcher at most limit. pending is asked at the
// start and then on the poll's ticks only, not on the events and requests that come between;
// the poll's interval doubles from holdPoll up to maxPoll. When the launcher does not answer
// within what is left of the wait (errQueryLate), its last answer stands.
// A rank of this host not there within holdTimeout fails the launch; ranks of other hosts
// that the launcher does not report there within it are left to the release's repeats, and
// the tool says so on its standard error.
//
// The wait serves what the tool's loop would meanwhile: a request is refused as during the
// rest of the launch, and the front end's going away (the end of reqs), the job's end, the
// lost connection to the launcher and the launcher's exit end it at once with an error.
func (s *server) waitAtHold(reqs <-chan Request, where string, maxPoll time.Duration, pending func(limit time.Duration) (here, there []string, err error)) error {
	deadline := time.Now().Add(holdTimeout)
	expired, note := time.NewTimer(holdTimeout), time.NewTimer(holdNote)
	defer expired.Stop()
	defer note.Stop()
	poll := holdPoll
	tick := time.NewTimer(poll)
	defer tick.Stop()
	here, there, err := pending(holdTimeout)
	for {
		if err != nil {
			return err
		}
		waiting := append(here[:len(here):len(here)], there...)
		if len(waiting) == 0 {
			return nil
		}
		if !time.Now().Before(deadline) {
			if len(here) == 0 {
				fmt.Fprintf(os.Stderr, "pmix: launch: ranks of other hosts not reported %s %v after the launcher reported %s ready, left to the release's repeats: %s\n",
					where, holdTimeout, s.appNs, strings.Join(there, ", "))
				return nil
			}
			return fmt.Errorf("pmix: launch: ranks not %s %v after the launcher reported them held: %s",
				where, holdTimeout, strings.Join(waiting, ", "))
		}
		select {
		case <-tick.C:
			if left := time.Until(deadline); left > 0 {
				h, t, e := pending(left)
				if !errors.Is(e, errQueryLate) {
					here, there, err = h, t, e
				}
			}
			poll = min(2*poll, maxPoll)
			tick.Reset(poll)
		case <-note.C:
			fmt.Fprintf(os.Stderr, "pmix: launch: %s reported ready; waiting for ranks to be %s: %s\n",
				s.appNs, where, strings.Join(waiting, ", "))
		case <-expired.C:
			// The deadline is acted on above.
		case ev := <-pmixEvents:
			s.handle(ev)
			if s.ended {
				return fmt.Errorf("pmix: launch: job %s ended before its ranks were %s", s.appNs, where)
			}
			if s.lost {
				return fmt.Errorf("pmix: launch: lost the connection to the launcher (pid %d) before the ranks of %s were %s",
					s.launcherPid, s.appNs, where)
			}
		case how := <-s.launcherExit:
			s.launcherExit <- how
			return fmt.Errorf("pmix: launch: the launcher (pid %d) %s before the ranks of %s were %s", s.launcherPid, how, s.appNs, where)
		case next, ok := <-reqs:
			if err := s.duringLaunch(next, ok); err != nil {
				return err
			}
		}
	}
}

// waitStoppedAtExec waits until every rank of the proc table on this host is stopped and
// untraced, as the stop-on-exec hold leaves it (waitAtHold). A rank that has ended is left to
// the caller, which names it. If no rank is on this host by its name while one runs here all
// the same (its pid runs its executable), the host names do not match and the launch fails
// rather than check none.
func (s *server) waitStoppedAtExec(reqs <-chan Request) error {
	host, _ := os.Hostname()
	if err := checkHostNames(s.procs, host); err != nil {
		return err
	}
	return s.waitAtHold(reqs, "stopped at exec", holdPoll, func(time.Duration) ([]string, []string, error) {
		return notStoppedAtExec(s.procs, host), nil, nil
	})
}

// waitInInit waits until the launcher reports every rank of the job connected to its PMIx
// server (PMIX_PROC_STATE_CONNECTED in the proc table, which it reads again each time): a rank
// of a job held in PMIx_Init connects in PMIx_Init and then waits there for the release. A
// rank that has ended is left to the caller, which names it; the proc table read last is the
// job's. A launcher whose table gives no rank a state (PMIX_PROC_STATE_UNDEF) is not waited for.
//
// The launcher must report the state CONNECTED (or a later one) for a rank in PMIx_Init, as
// PRRTE does: one that reports other states but never CONNECTED fails every launch held in
// PMIx_Init after holdTimeout, with each rank's state in the error. Such a launcher cannot be
// told from one whose ranks are all late, which is what this wait is there to catch.
func (s *server) waitInInit(reqs <-chan Request) error {
	host, _ := os.Hostname()
	return s.waitAtHold(reqs, "in PMIx_Init", holdPollMax, func(limit time.Duration) (here, there []string, err error) {
		procs, err := s.procTableBounded(s.appNs, reqs, limit)
		if err != nil {
			return nil, nil, err
		}
		s.procs = procs
		if !slices.ContainsFunc(procs, func(p Proc) bool { return p.state != int(C.PMIX_PROC_STATE_UNDEF) }) {
			// A launcher that reports no process state cannot say which rank is there: the
			// release's repeats are all there is.
			fmt.Fprintf(os.Stderr, "pmix: launch: the launcher reports no process states for %s: not waiting for its ranks to reach PMIx_Init\n", s.appNs)
			return nil, nil, nil
		}
		for _, p := range procs {
			if p.state >= int(C.PMIX_PROC_STATE_CONNECTED) {
				continue
			}
			what := fmt.Sprintf("rank %d pid %d on %s (launcher's state %d)", p.Rank, p.Pid, p.Host, p.state)
			if !sameHost(p.Host, host) {
				there = append(there, what)
			} else if p.Pid <= 0 || alive(p.Pid) {
				here = append(here, what)
			}
		}
		return here, there, nil
	})
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
		if st, err := procimage.ReadStatus(p.Pid); err == nil && st.State != 'Z' && st.State != 'X' && (st.State != 'T' || st.TracerPid != 0) {
			running = append(running, fmt.Sprintf("rank %d pid %d (state %c, tracer %d)", p.Rank, p.Pid, st.State, st.TracerPid))
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
