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
	"time"
	"unsafe"
)

// launch runs the indirect flow: start the launcher through PMIx_Spawn so that it calls back,
// make it the tool's server, ask for its job's output, release it, and wait until its job is
// held (or launched, without a hold).
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
	if err := s.spawnLauncher(r, env, uri); err != nil {
		return err
	}
	s.emit(Event{Ev: EvLauncher, LauncherPid: s.launcherPid, Nspace: s.launcherNs})

	cns := C.CString(s.launcherNs)
	defer C.free(unsafe.Pointer(cns))
	// set_server waits up to its timeout for the launcher to call back; a launcher that exits
	// first is reported at once (the call still runs out before the tool finalises).
	setServer := make(chan C.int, 1)
	s.inflight = make(chan struct{})
	go func() {
		defer close(s.inflight)
		setServer <- C.hp_set_server(cns, setServerTimeout)
	}()
	what := fmt.Sprintf("PMIx_tool_set_server %s rank 0 (%s, pid %d)", s.launcherNs, r.Launcher, s.launcherPid)
	select {
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
	case how := <-s.launcherExit:
		s.launcherExit <- how
		return fmt.Errorf("pmix: %s: the launcher %s without calling back: not a PMIx launcher?", what, how)
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
		return err
	}
	if err := s.pullOutput(s.appNs); err != nil {
		return err
	}
	s.hold = r.Hold
	return s.readyEvent()
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
	// libpmix reaps the launcher; watch its pid instead, for the time before it calls back
	// (afterwards its exit shows as a lost connection).
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

// waitLaunched waits for READY_FOR_DEBUG (held) or LAUNCH_COMPLETE (no hold) for the application.
func (s *server) waitLaunched(r Request, reqs <-chan Request) error {
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
		case next, ok := <-reqs:
			if !ok {
				return errors.New("pmix: launch: the front end went away")
			}
			s.fail(fmt.Errorf("pmix: %s: a launch is in progress", next.Op))
		}
	}
}

func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// A zombie has exited.
	i := strings.LastIndexByte(string(b), ')')
	return i < 0 || i+2 >= len(b) || b[i+2] != 'Z'
}
