package adapter

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/go-dap"
	"github.com/hpcdap/hpcdap/debugger"
	"github.com/hpcdap/hpcdap/launch"
)

// capabilities are what hpcdap implements, announced in the initialize response.
func capabilities() Capabilities {
	c := Capabilities{}
	c.SupportsConfigurationDoneRequest = true
	c.SupportsFunctionBreakpoints = true
	c.SupportsConditionalBreakpoints = true
	c.SupportsHitConditionalBreakpoints = true
	c.SupportsLogPoints = true
	c.SupportsEvaluateForHovers = true
	c.SupportsCompletionsRequest = true
	c.SupportsStepInTargetsRequest = true
	c.SupportsGotoTargetsRequest = true
	c.SupportsCancelRequest = true
	c.SupportsRestartRequest = true
	c.SupportsSetVariable = true
	c.SupportsDataBreakpoints = true
	c.SupportsInstructionBreakpoints = true
	c.SupportsReadMemoryRequest = true
	c.SupportsWriteMemoryRequest = true
	c.SupportsDisassembleRequest = true
	c.SupportsSteppingGranularity = true
	c.SupportsSingleThreadExecutionRequests = true
	c.SupportsExceptionInfoRequest = true
	c.SupportsModulesRequest = true
	c.SupportsLoadedSourcesRequest = true
	c.SupportsTerminateRequest = true
	c.SupportTerminateDebuggee = true
	c.SupportsDelayedStackTraceLoading = true
	c.SupportsBreakpointLocationsRequest = true
	c.SupportsClipboardContext = true
	c.SupportsValueFormattingOptions = true
	c.ExceptionBreakpointFilters = []dap.ExceptionBreakpointsFilter{{
		Filter: "signals", Label: "Signals",
		Description: "Stop when a rank receives a signal (SIGSEGV, SIGFPE, SIGABRT, SIGINT, SIGUSR1, ...)", Default: true,
	}}
	return c
}

func (s *Conn) onInitializeRequest(req *dap.InitializeRequest) {
	s.mu.Lock()
	if s.initialized {
		s.mu.Unlock()
		s.sendError(&req.Request, errDuplicateRequest, "initialize was already sent in this session")
		return
	}
	a := req.Arguments
	if a.PathFormat != "" && a.PathFormat != "path" {
		s.mu.Unlock()
		s.sendError(&req.Request, errBadArguments, fmt.Sprintf("pathFormat %q: only \"path\" is supported", a.PathFormat))
		return
	}
	s.initialized = true
	s.client = a
	s.mu.Unlock()
	s.send(&InitializeResponse{Response: newResponse(&req.Request), Body: capabilities()})
}

// Line and column conversion for clients that count from 0.
func (s *Conn) lineOut(l int) int {
	if l > 0 && !s.client.LinesStartAt1 {
		return l - 1
	}
	return l
}

func (s *Conn) lineIn(l int) int {
	if !s.client.LinesStartAt1 {
		return l + 1
	}
	return l
}

func (s *Conn) colOut(c int) int {
	if c > 0 && !s.client.ColumnsStartAt1 {
		return c - 1
	}
	return c
}

// startMode guards launch and attach: one job per session.
func (s *Conn) claimStart(r *dap.Request) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started || s.job != nil {
		s.sendError(r, errDuplicateRequest, "this session already debugs a job")
		return false
	}
	s.started = true
	return true
}

func (s *Conn) releaseStart() {
	s.mu.Lock()
	s.started = false
	s.mu.Unlock()
}

func (s *Conn) prepareLogDir() (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.logDir != "" {
		return s.logDir, nil
	}
	if s.srv.cfg.LogDir != "" {
		s.logDir = s.srv.cfg.LogDir
		return s.logDir, os.MkdirAll(s.logDir, 0o700)
	}
	d, err := os.MkdirTemp("", "hpcdap-session-*")
	if err != nil {
		return "", err
	}
	s.logDir, s.ownLogDir = d, true
	return d, nil
}

func (s *Conn) agentExe() (string, error) {
	if s.srv.cfg.AgentPath != "" {
		return s.srv.cfg.AgentPath, nil
	}
	return launch.AgentExecutable()
}

// argError picks the error id for a bad launch or attach argument.
func argError(err error) int {
	if errors.Is(err, errNotYet) {
		return errNotYetSupported
	}
	return errBadArguments
}

func (s *Conn) onLaunchRequest(req *dap.LaunchRequest) {
	plan, err := planLaunch(req.Arguments)
	if err != nil {
		s.sendError(&req.Request, argError(err), named("launch", err))
		return
	}
	if !s.claimStart(&req.Request) {
		return
	}
	sh := s.newShare(plan.sessionName, plan.coreFile == "")
	if err := sh.reserve(); err != nil {
		s.abandonShare(sh)
		s.sendError(&req.Request, errBadArguments, named("launch", err))
		return
	}
	s.sources.paths = plan.paths
	s.mu.Lock()
	s.callTimeout = plan.callTimeout
	s.fanout = plan.fanout
	s.priority = plan.priority
	s.mu.Unlock()
	if plan.coreFile != "" {
		j, err := debugger.OpenCoreJob(s.jobConfig(), plan.coreFile, plan.program)
		if err != nil {
			s.abandonShare(sh)
			s.sendError(&req.Request, errFailedToLaunch, named("launch", err))
			return
		}
		sh.started(j, plan.program)
		s.mu.Lock()
		s.job = j
		s.mu.Unlock()
		s.send(&dap.ProcessEvent{Event: newEvent("process"), Body: dap.ProcessEventBody{Name: plan.program,
			StartMethod: "attachForSuspendedLaunch", PointerSize: 64}})
		s.send(&dap.InitializedEvent{Event: newEvent("initialized")})
		s.send(&dap.LaunchResponse{Response: newResponse(&req.Request)})
		return
	}
	j, inPlace, err := s.launchJob(&req.Request, plan)
	if err != nil {
		s.abandonShare(sh)
		s.sendError(&req.Request, errFailedToLaunch, named("launch", err))
		return
	}
	sh.started(j, plan.program)
	s.mu.Lock()
	s.job = j
	s.launchedJob = true
	s.launchArgs = req.Arguments
	s.entryStop = plan.stopAtEntry
	s.entryInPlace = inPlace
	s.mu.Unlock()
	s.send(&dap.ProcessEvent{Event: newEvent("process"), Body: dap.ProcessEventBody{Name: plan.program,
		SystemProcessId: j.Ranks()[0].Pid, IsLocalProcess: true, StartMethod: "launch", PointerSize: 64}})
	s.send(&dap.InitializedEvent{Event: newEvent("initialized")})
	s.send(&dap.LaunchResponse{Response: newResponse(&req.Request)})
}

// launchJob starts the job a launch plan describes (not a core file): its agents, its ranks,
// through a launcher when the plan names one, held before they run.
func (s *Conn) launchJob(r *dap.Request, plan *launchPlan) (*debugger.Job, bool, error) {
	logDir, err := s.prepareLogDir()
	if err != nil {
		return nil, false, fmt.Errorf("log directory: %w", err)
	}
	exe, err := s.agentExe()
	if err != nil {
		return nil, false, err
	}
	start := (&launch.LocalSpawn{AgentPath: exe, LogDir: logDir, NP: plan.np, Program: plan.program, Args: plan.args,
		AgentArgs: emulatorAgentArgs(plan), Env: plan.env, Dir: plan.cwd, NoASLR: plan.noASLR, PerAgent: plan.perAgent}).Start
	title := fmt.Sprintf("Starting %d rank(s) of %s", plan.np, filepath.Base(plan.program))
	var wl *debugger.WLMJob
	if plan.launcher != "" {
		wl = &debugger.WLMJob{Req: launchRequest(plan), AgentExe: exe, LogDir: logDir, Logger: s.srv.cfg.Log, Timeout: wlmPhaseTimeout,
			Phase: s.launchPhase, Syms: s.srv.symbolCache(), RanksPerAgent: plan.perAgent}
		start = wl.Start
		title = fmt.Sprintf("Starting %s through %s", filepath.Base(plan.program), plan.launcher)
	}
	j, err := s.startJob(r, start, plan.mode, plan.focus, title, false)
	inPlace := false
	if err == nil && wl != nil {
		if inPlace, err = s.releaseWLM(j, wl, plan.stopAtEntry, true); err != nil {
			// The job was brought up: its ranks and agents go before the launcher.
			j.Kill(2 * time.Second)
			j.CloseNodes(true)
		}
	}
	if err != nil {
		if wl != nil {
			// A rank that ended before the debugger took it is why the start failed.
			if gone := wl.RanksGone(); gone != nil {
				err = fmt.Errorf("%w (%v)", gone, err)
			}
			wl.End(true)
		}
		return nil, false, err
	}
	if plan.noDebug {
		j.SetNoDebug()
	}
	return j, inPlace, nil
}

func (s *Conn) onAttachRequest(req *dap.AttachRequest) {
	name, paths, err := joinPlan(req.Arguments)
	if err != nil {
		s.sendError(&req.Request, errBadArguments, named("attach", err))
		return
	}
	if name != "" {
		s.onJoin(req, name, paths)
		return
	}
	plan, err := planAttach(req.Arguments)
	if err != nil {
		s.sendError(&req.Request, argError(err), named("attach", err))
		return
	}
	if !s.claimStart(&req.Request) {
		return
	}
	sh := s.newShare(plan.sessionName, false)
	if err := sh.reserve(); err != nil {
		s.abandonShare(sh)
		s.sendError(&req.Request, errBadArguments, named("attach", err))
		return
	}
	s.sources.paths = plan.paths
	s.mu.Lock()
	s.fanout = plan.fanout
	s.priority = plan.priority
	s.mu.Unlock()
	if plan.waitName != "" {
		if err := s.waitForProcess(&req.Request, plan); err != nil {
			s.abandonShare(sh)
			if errors.Is(err, errCancelledRequest) {
				s.sendCancelled(&req.Request)
				return
			}
			s.sendError(&req.Request, errFailedToAttach, named("attach", err))
			return
		}
	}
	logDir, err := s.prepareLogDir()
	if err == nil {
		var exe string
		if exe, err = s.agentExe(); err == nil {
			start := (&launch.LocalAttach{AgentPath: exe, LogDir: logDir, Pids: plan.pids}).Start
			title := fmt.Sprintf("Attaching to %d process(es)", len(plan.pids))
			var wl *debugger.WLMJob
			if plan.launcherPid != 0 || plan.slurmJob != "" {
				wl = &debugger.WLMJob{Req: launch.Request{LauncherPid: plan.launcherPid, SlurmJob: plan.slurmJob, PMIxNamespace: plan.nspace},
					AgentExe: exe, LogDir: logDir, Logger: s.srv.cfg.Log, Timeout: wlmPhaseTimeout, Phase: s.launchPhase,
					RanksPerAgent: plan.perAgent}
				start = wl.Start
				switch title = fmt.Sprintf("Attaching to the job of launcher pid %d", plan.launcherPid); {
				case plan.slurmJob != "":
					title = "Attaching to Slurm job step " + plan.slurmJob
				case plan.nspace != "":
					title = fmt.Sprintf("Attaching to PMIx namespace %s (launcher pid %d)", plan.nspace, plan.launcherPid)
				}
			}
			var j *debugger.Job
			j, err = s.startJob(&req.Request, start, plan.mode, plan.focus, title, true)
			if err == nil && wl != nil {
				if _, err = s.releaseWLM(j, wl, false, false); err != nil {
					j.Detach()
					j.CloseNodes(false)
				}
			}
			if wl != nil && err != nil {
				wl.End(false)
			}
			if err == nil {
				sh.started(j, j.Ranks()[0].Exe)
				s.mu.Lock()
				s.job = j
				s.launchedJob = false
				s.entryStop = plan.stopAtEntry
				s.mu.Unlock()
				s.send(&dap.ProcessEvent{Event: newEvent("process"), Body: dap.ProcessEventBody{Name: j.Ranks()[0].Exe,
					SystemProcessId: j.Ranks()[0].Pid, IsLocalProcess: true, StartMethod: "attach", PointerSize: 64}})
				s.send(&dap.InitializedEvent{Event: newEvent("initialized")})
				s.send(&dap.AttachResponse{Response: newResponse(&req.Request)})
				return
			}
		}
	}
	s.abandonShare(sh)
	s.sendError(&req.Request, errFailedToAttach, named("attach", err))
}

// onJoin makes the client a member of the running shared session name (attach with
// joinSession): it debugs that job as it is, with its own breakpoints, frame ids and
// variables references; its configurationDone lets nothing run but tells it of the stops
// that hold.
func (s *Conn) onJoin(req *dap.AttachRequest, name string, paths pathMap) {
	if !s.claimStart(&req.Request) {
		return
	}
	s.catch.begin(true) // before it is a member: the job's stops from then on wait for its replay
	sh, j, err := s.join(name)
	if err != nil {
		s.catch.begin(false)
		s.releaseStart()
		s.sendError(&req.Request, errFailedToAttach, named("attach", err))
		return
	}
	s.sources.paths = paths
	s.mu.Lock()
	s.job = j
	s.launchedJob = sh.launched
	s.joined = true
	s.mu.Unlock()
	s.send(&dap.ProcessEvent{Event: newEvent("process"), Body: dap.ProcessEventBody{Name: sh.info().Program,
		SystemProcessId: j.Ranks()[0].Pid, IsLocalProcess: true, StartMethod: "attach", PointerSize: 64}})
	s.send(&dap.InitializedEvent{Event: newEvent("initialized")})
	s.send(&dap.AttachResponse{Response: newResponse(&req.Request)})
}

// abandonShare drops the share of a launch or attach that failed.
func (s *Conn) abandonShare(sh *share) {
	sh.abandon()
	s.mu.Lock()
	if s.share == sh {
		s.share = nil
	}
	s.mu.Unlock()
	s.releaseStart()
}

// leave takes the client out of its job (a disconnect, or its stream ending); see
// share.leave.
func (s *Conn) leave(terminate *bool) {
	s.mu.Lock()
	sh := s.share
	s.share, s.job = nil, nil
	s.mu.Unlock()
	if sh != nil {
		sh.leave(s, terminate)
	}
}

// waitForProcess waits, up to the plan's timeout, for a process that runs the program the plan
// names to start, and makes it the plan's one rank.
func (s *Conn) waitForProcess(r *dap.Request, plan *attachPlan) error {
	ctx, cancel := context.WithTimeoutCause(s.requestContext(r), plan.waitTimeout,
		fmt.Errorf("none started within %v", plan.waitTimeout))
	defer cancel()
	defer s.requestDone(r)
	m, err := launch.WaitForProcess(ctx, plan.waitName, func() {
		s.sendOutput("console", fmt.Sprintf("Waiting up to %v for a process running %q to start\n", plan.waitTimeout, plan.waitName))
	})
	if err != nil {
		return err
	}
	plan.pids[0] = m.Pid
	return nil
}

// launchPhase tells the client, on its console, where a launch through a launcher is.
func (s *Conn) launchPhase(msg string) { s.sendOutput("console", msg+"\n") }

// startJob brings a job up, with progress events: its agents (start, from package launch),
// then its ranks. If the ranks cannot all be taken, a launched job is killed; an attached one
// (attach) is given back as a detach leaves it, for it is not the session's to end.
// A cancel of request r (the launch or attach) ends the start.
func (s *Conn) startJob(r *dap.Request, start func(ctx context.Context, progress func(done, total int)) (*launch.Agents, error),
	mode debugger.StopMode, focus, title string, attach bool) (*debugger.Job, error) {
	ctx, cancel := context.WithTimeout(s.requestContext(r), 5*time.Minute)
	defer cancel()
	defer s.requestDone(r)
	pid := s.progressStart(title)
	g, err := start(ctx, func(done, total int) {
		s.progressUpdate(pid, fmt.Sprintf("%d of %d agent(s) up", done, total), 10*float64(done)/float64(total))
	})
	if err != nil {
		s.progressEnd(pid, "failed")
		return nil, err
	}
	j, err := debugger.NewJob(ctx, s.jobConfig(), g, mode, focus)
	if err != nil {
		g.Kill()
		s.progressEnd(pid, "failed")
		return nil, err
	}
	last := time.Time{}
	err = j.Start(ctx, func(done, total int) {
		if done == total || time.Since(last) > 100*time.Millisecond {
			last = time.Now()
			s.progressUpdate(pid, fmt.Sprintf("%d of %d rank(s) held", done, total), 10+80*float64(done)/float64(total))
		}
	})
	if err == nil {
		if firstErr := j.LoadSymbols(ctx); firstErr != nil {
			s.sendOutput("important", fmt.Sprintf("symbols: %v\n", firstErr))
		}
	}
	if err != nil {
		if attach {
			j.Detach()
			j.CloseNodes(false)
		} else {
			j.Kill(2 * time.Second)
			j.CloseNodes(true)
		}
		s.progressEnd(pid, "failed")
		return nil, err
	}
	s.progressEnd(pid, fmt.Sprintf("%d rank(s) ready", len(j.Ranks())))
	j.FlushChanged()
	return j, nil
}

func (s *Conn) onConfigurationDoneRequest(req *dap.ConfigurationDoneRequest) {
	j := s.currentJob(&req.Request)
	if j == nil {
		return
	}
	s.mu.Lock()
	if s.configDone {
		s.mu.Unlock()
		s.sendError(&req.Request, errDuplicateRequest, "configurationDone was already sent")
		return
	}
	s.configDone = true
	entry := s.entryStop
	launched := s.launchedJob
	joined := s.joined
	s.mu.Unlock()
	if joined {
		// The job runs as the other clients left it.
		s.send(&dap.ConfigurationDoneResponse{Response: newResponse(&req.Request)})
		s.replayStops(j)
		return
	}
	if j.Frozen() != nil {
		s.send(&dap.ConfigurationDoneResponse{Response: newResponse(&req.Request)})
		j.ReportPostMortemStop()
		return
	}
	s.runConfigured(j, entry, !launched || s.entryInPlace, func() {
		s.send(&dap.ConfigurationDoneResponse{Response: newResponse(&req.Request)})
	})
}

// runConfigured lets a configured job's ranks go: with stopAtEntry (entry) they stop at main,
// or are reported stopped where they are (inPlace: attached ranks, or ranks a launcher holds
// inside MPI_Init). respond answers the request before the ranks run.
func (s *Conn) runConfigured(j *debugger.Job, entry, inPlace bool, respond func()) {
	if entry && inPlace {
		respond()
		j.ReportStoppedInPlace()
		return
	}
	if entry {
		if err := j.ArmEntry(); err != nil {
			s.sendOutput("important", fmt.Sprintf("stopAtEntry: %v; starting without stopping\n", err))
		}
	}
	respond()
	if err := j.ContinueAll(); err != nil {
		s.sendOutput("important", fmt.Sprintf("start the ranks: %v\n", err))
	}
}

// onDisconnectRequest takes the client out of its job. The last client's disconnect ends the
// job (a launched one is killed, an attached one left running, unless terminateDebuggee
// says); one of several leaves it to the others, unless terminateDebuggee is true, which
// ends it for all.
func (s *Conn) onDisconnectRequest(req *DisconnectRequest) {
	var terminate *bool
	if req.Arguments != nil {
		terminate = req.Arguments.TerminateDebuggee
	}
	s.leave(terminate)
	s.send(&dap.DisconnectResponse{Response: newResponse(&req.Request)})
}

// wlmPhaseTimeout bounds each phase of a launch or attach through a workload manager
// (launcher to MPIR_Breakpoint, agents registering).
const wlmPhaseTimeout = 60 * time.Second

// releaseWLM lets a workload manager's launcher go once startJob holds every rank, and
// records it with the job. It reports whether a stopAtEntry is satisfied where the ranks are
// (the launcher held them past main), and says so to the user.
func (s *Conn) releaseWLM(j *debugger.Job, wl *debugger.WLMJob, stopAtEntry, launched bool) (inPlace bool, err error) {
	hold := wl.Hold()
	ctx, cancel := context.WithTimeout(s.ctx, wlmPhaseTimeout)
	defer cancel()
	if err := j.ReleaseLauncher(ctx, wl); err != nil {
		return false, err
	}
	if launched && stopAtEntry && (hold == launch.HoldInInit || hold == launch.HoldNone) {
		where := "inside MPI_Init"
		if hold == launch.HoldNone {
			where = "in their first PMI exchange inside MPI_Init"
		}
		s.sendOutput("important", fmt.Sprintf("stopAtEntry: %s holds the ranks %s, so main has already run: "+
			"the ranks stop there instead of at main (set a breakpoint after MPI_Init to stop in your code)\n",
			filepath.Base(wl.Req.Launcher), where))
		return true, nil
	}
	return false, nil
}

func (s *Conn) onTerminateRequest(req *dap.TerminateRequest) {
	j := s.currentJob(&req.Request)
	if j == nil {
		return
	}
	s.send(&dap.TerminateResponse{Response: newResponse(&req.Request)})
	if j.Frozen() != nil {
		s.sendTerminated()
		return
	}
	j.Kill(5 * time.Second)
	j.AllExited() // unless the ranks' ends have reported it already
}

// named is err's message as the answer to request op: prefixed with op unless the message
// names that operation already (most launch errors do), so that it never reads "launch:
// launch: ...".
func named(op string, err error) string {
	msg := err.Error()
	if strings.HasPrefix(msg, op+": ") {
		return msg
	}
	return op + ": " + msg
}
