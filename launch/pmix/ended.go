//go:build cgo && pmix

package pmix

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"
)

// How a launch notices that its job ended before it was ready. A rank that dies before its
// hold ends the job, and the launcher says so in its own time, or not at all: PRRTE may report
// the job ready for debug with the rank already dead, report the job's end with no ready
// event, stop answering the tool's queries while it ends the job, or stall with the dead
// rank unreaped (prterun 3.0.8 under load: both its threads waiting, the job's proc table
// query never answered). So the tool reads the proc table as soon as the job is launched
// and watches the ranks of its host itself, and no PMIx request to the launcher made after
// its release is waited for longer than a bound.

// endWait bounds how long a launch that failed once its launcher was released waits for the
// launcher to report its job's end, which says why it failed.
const endWait = 2 * time.Second

// queryTimeout bounds a proc table query to the launcher; stuckAfter is the margin after
// which a libpmix call that should have returned by itself (PMIx_tool_set_server, asked
// without waiting, within setServerTimeout) is taken for stuck.
const (
	queryTimeout = 30 * time.Second
	stuckAfter   = 5 * time.Second
)

// rankWatch is how often the ranks of this host are looked at while the tool waits on the
// launcher.
const rankWatch = 50 * time.Millisecond

// inflightCall counts a PMIx call run off the main goroutine; the function it returns marks
// its return.
func (s *server) inflightCall() func() {
	s.inflight.Add(1)
	return s.inflight.Done
}

// readLaunchedTable reads the proc table of a held job once the launcher reports it launched,
// before it reports it ready: should a rank end before its hold, the table gives its host and
// pid, and its pid lets the tool see it end (endedRanks). A launcher that answers with an
// error is ending the job (its end follows); one that does not answer at all has stalled,
// and the launch fails with that error, as it does when the front end goes away meanwhile.
func (s *server) readLaunchedTable(r Request, reqs <-chan Request) error {
	if r.Hold == "" || s.procs != nil || s.ended || s.lost {
		return nil
	}
	for ns := range s.launchSeen {
		if ns != s.launcherNs && (s.appNs == "" || ns == s.appNs) {
			s.procs = []Proc{} // read once
			procs, err := s.procTableBounded(ns, reqs, queryTimeout)
			if err == nil {
				s.procs = procs
			} else if s.stuck || err == errFrontEndGone {
				return err
			}
			return nil
		}
	}
	return nil
}

// endedRanks returns the ranks of the proc table read so far that run on this host and have
// ended (gone, or a zombie its launcher has not reaped).
func (s *server) endedRanks() []Proc {
	host, _ := os.Hostname()
	var gone []Proc
	for _, p := range s.procs {
		if sameHost(p.Host, host) && p.Pid > 0 && !alive(p.Pid) {
			gone = append(gone, p)
		}
	}
	return gone
}

// procTableBounded reads the proc table of nspace from the launcher, waiting at most limit
// (queryTimeout at most), and less when a rank of this host ends meanwhile (the job is then
// ending and the launcher may never answer): the error is then a *JobEndedError naming it. A
// launcher that does not answer within queryTimeout is taken for stuck; one that does not
// answer within a shorter limit (what was left of a caller's own wait) is not, and the error
// is errQueryLate. Requests that come meanwhile on reqs (nil: none are read) are refused as
// during the rest of the launch, and the front end's going away ends the wait at once. Either
// way a query not answered is left to itself.
func (s *server) procTableBounded(nspace string, reqs <-chan Request, limit time.Duration) ([]Proc, error) {
	short := limit < queryTimeout
	limit = min(limit, queryTimeout)
	type result struct {
		procs []Proc
		err   error
	}
	res := make(chan result, 1)
	done := s.inflightCall()
	go func() {
		defer done()
		procs, err := s.procTable(nspace)
		res <- result{procs, err}
	}()
	expired := time.After(limit)
	tick := time.NewTicker(rankWatch)
	defer tick.Stop()
	for {
		select {
		case r := <-res:
			return r.procs, r.err
		case <-tick.C:
			if gone := s.endedRanks(); len(gone) > 0 {
				s.stuck = true
				return nil, s.goneError(gone, fmt.Sprintf("the proc table query of %s unanswered", nspace))
			}
		case <-expired:
			if short {
				// The launcher may well answer it.
				s.left = true
				return nil, errQueryLate
			}
			s.stuck = true
			return nil, fmt.Errorf("pmix: PMIx_Query_info PMIX_QUERY_PROC_TABLE %s: no answer from the launcher (pid %d) within %v",
				nspace, s.launcherPid, limit.Round(time.Millisecond))
		case next, ok := <-reqs:
			if err := s.duringLaunch(next, ok); err != nil {
				// The query is left to itself: the launcher may well answer it.
				s.left = true
				return nil, err
			}
		}
	}
}

// errQueryLate is procTableBounded's error for a query not answered within a caller's limit
// shorter than queryTimeout.
var errQueryLate = errors.New("pmix: proc table query not answered in the time left")

// goneError is the error of a launch whose ranks gone ended before the job was ready, as the
// tool saw them end (why: what the launcher had not done by then).
func (s *server) goneError(gone []Proc, why string) error {
	var names []string
	for _, p := range gone {
		names = append(names, procText(p))
	}
	return &JobEndedError{Msg: fmt.Sprintf("pmix: launch: ranks of %s ended before it was ready (%s): %s",
		firstOf(s.appNs, s.launcherNs+"@1"), why, strings.Join(names, ", ")), Gone: gone}
}

// notReady returns the error of a launch that failed with err after the launcher was
// released: a *JobEndedError naming the rank whose end ended the job when the launcher
// reports that end within endWait (or before its own exit is seen), or when the tool sees a
// rank of its host ended; else err.
func (s *server) notReady(err error) error {
	if _, ok := err.(*JobEndedError); ok || err == errFrontEndGone {
		return err
	}
	limit := time.After(endWait)
	exited := false
	var settle <-chan time.Time
	tick := time.NewTicker(rankWatch)
	defer tick.Stop()
wait:
	for !s.ended && !s.lost {
		select {
		case ev := <-pmixEvents:
			s.handle(ev)
		case how := <-s.launcherExitOnce(exited):
			s.launcherExit <- how
			// Notifications still on their way are read for a moment.
			exited, settle = true, time.After(exitSettle)
		case <-tick.C:
			if len(s.endedRanks()) > 0 && s.stuck {
				// The launcher stalled: it reports nothing more.
				break wait
			}
		case <-settle:
			break wait
		case <-limit:
			break wait
		}
	}
	gone, ok := s.endCause()
	if !ok {
		if gone := s.endedRanks(); len(gone) > 0 {
			return s.goneError(gone, "the launcher's report: "+err.Error())
		}
		return err
	}
	msg := fmt.Sprintf("pmix: launch: job %s ended with status %d before it was ready: %s",
		firstOf(s.appNs, s.launcherNs+"@1"), s.endStatus, procText(gone))
	if m := s.endText(); m != "" {
		msg += " (the launcher: " + m + ")"
	}
	return &JobEndedError{Msg: msg, Gone: []Proc{gone}, Ended: true, Status: s.endStatus}
}

// endCause returns the rank the launcher named as the cause of its job's end, with its host
// and pid from the proc table where it was read; false before the job's end, or when the
// launcher named none.
func (s *server) endCause() (Proc, bool) {
	if !s.ended || s.endRank < 0 {
		return Proc{}, false
	}
	gone := Proc{Rank: s.endRank}
	for _, p := range s.procs {
		if p.Rank == s.endRank {
			gone = p
		}
	}
	return gone, true
}

// endText is the launcher's message on its job's end on one line, "" when it gave none.
func (s *server) endText() string {
	return strings.Join(strings.Fields(s.endMessage), " ")
}

// launcherExitOnce is the channel on which the launcher's exit is read, nil once it was
// (exited).
func (s *server) launcherExitOnce(exited bool) <-chan string {
	if exited {
		return nil
	}
	return s.launcherExit
}

// procText names a rank of the proc table with its host and pid where they are known.
func procText(p Proc) string {
	t := fmt.Sprintf("rank %d", p.Rank)
	if p.Host != "" {
		t += " on " + p.Host
	}
	if p.Pid > 0 {
		t += fmt.Sprintf(" (pid %d)", p.Pid)
	}
	return t
}
