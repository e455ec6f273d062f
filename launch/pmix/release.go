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
// PMIx_Init: about half a minute in all. The tool reports such a job ready once the launcher
// gives every rank connected to its server (waitInInit), but a rank registers for the release
// a moment after it connects, and the launcher may not report the ranks of other hosts
// connected at all: a rank that registers after the release went would wait in PMIx_Init for
// ever (TestPMIxLateRank). A rank past its hold no longer listens for the release, so a
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
