package adapter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/go-dap"
	"github.com/hpcdap/hpcdap/debugger"
)

// Conn is one DAP client connection and the job it debugs. Requests are handled one at a
// time, in order, by the dispatcher goroutine; events come from the job's goroutines. Every
// message is written under the send lock, which also assigns its seq, so seqs reach the wire
// in order.
type Conn struct {
	srv   *Server
	conn  io.ReadWriteCloser
	codec *codec
	// id numbers the connection in its server: it owns its breakpoints in a shared job
	// (debugger.BPSet.Owner).
	id int
	// peerUID is the user of the client's process (-1: not known): only the user of a shared
	// session may join it.
	peerUID int
	// ctx bounds the work done for the client's requests: it is cancelled when the client's
	// stream ends or the session closes, so that a request in flight (a launch, a stack
	// read from ranks that do not answer) does not outlive the client. The job's teardown does
	// not use it.
	ctx    context.Context
	cancel context.CancelFunc

	sendMu sync.Mutex
	seq    int
	broken bool // a write failed: the client is gone

	mu          sync.Mutex
	initialized bool
	client      dap.InitializeRequestArguments
	job         *debugger.Job
	started     bool // launch or attach succeeded
	configDone  bool
	launchedJob bool            // launched (terminate kills) rather than attached (disconnect detaches)
	launchArgs  json.RawMessage // the launch request's arguments, for a restart without new ones
	// jobGen numbers the session's jobs: events of a job that a restart replaced are dropped.
	jobGen     atomic.Int64
	entryStop  bool // stopAtEntry
	logDir     string
	ownLogDir  bool
	done       chan struct{}
	closeOnce  sync.Once
	progressID int
	sources    sourceCache // which recorded source paths exist here
	handles    handles     // frame ids and variables references of the ranks' stops
	// share is the job's share: its clients, its name. joined: this client joined a job
	// another client started (attach with joinSession).
	share  *share
	joined bool
	catch  catchUp // a joiner's account of the stops it was told

	// entryInPlace: the launcher held the ranks past main; the entry stop is where they are.
	entryInPlace bool
	// callTimeout bounds a function call in an expression (0: the default, callTimeout).
	callTimeout time.Duration
	fanout      int         // the fan-out of the agents' tree (0: the default)
	priority    uint8       // the CDTI priority the job's ranks are attached with (0: the default)
	cancels     cancelTable // the requests a cancel request may end
	dispatched  int         // the seq of the last request whose handling began

	// pending counts the requests handed to the dispatcher and not yet handled; only the
	// reader adds to it, so at 0 the dispatcher is idle until the reader hands it more.
	pending atomic.Int64

	// inPlaceSeq is the seq of the request being dispatched whose failure the client shows
	// where the user looks (see errorShownInPlace), -1 when there is none.
	inPlaceSeq atomic.Int64
}

func newConn(srv *Server, conn io.ReadWriteCloser, id, peerUID int) *Conn {
	s := &Conn{srv: srv, conn: conn, codec: newCodec(), id: id, peerUID: peerUID, done: make(chan struct{})}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.inPlaceSeq.Store(-1)
	s.handles.init()
	return s
}

// run reads and handles requests until the client disconnects or the stream ends.
func (s *Conn) run() {
	reqs := make(chan dap.Message, 64)
	go s.read(reqs)
	for m := range reqs {
		keep := s.dispatch(m)
		s.pending.Add(-1)
		if !keep {
			break
		}
	}
	s.close()
	// Drain the reader so it is not stuck on a full channel.
	go func() {
		for range reqs {
		}
	}()
}

// read turns the byte stream into requests; problems with the stream are answered here.
func (s *Conn) read(out chan<- dap.Message) {
	defer close(out)
	// The client is gone once its stream ends: what its requests started stops.
	defer s.cancel()
	defer s.recoverPanic("reading requests")
	fr := newFrameReader(s.conn)
	for {
		body, err := fr.read()
		if err != nil {
			var fe *frameError
			if errors.As(err, &fe) {
				id := errMalformed
				if fe.seq != 0 || fe.command != "" {
					id = errTooLarge
				}
				s.sendErrorRaw(fe.seq, fe.command, id, fe.msg)
				continue
			}
			if !errors.Is(err, io.EOF) && !errors.Is(err, os.ErrClosed) {
				s.srv.logf("adapter: session: read: %v", err)
			}
			return
		}
		m, derr := s.decode(body)
		if derr != nil {
			s.sendErrorRaw(derr.seq, derr.command, derr.id, derr.msg)
			continue
		}
		if m == nil {
			continue
		}
		if c, ok := m.(*dap.CancelRequest); ok {
			s.onCancelRequest(c)
			continue
		}
		if s.answerInline(m) {
			continue
		}
		s.pending.Add(1)
		select {
		case out <- m:
		case <-s.done:
			return
		}
	}
}

// decode is codec.decode, answering a message that breaks the decoder as an internal error of
// that request instead of ending the server.
func (s *Conn) decode(body []byte) (m dap.Message, derr *decodeError) {
	defer func() {
		if p := recover(); p != nil {
			s.srv.logf("adapter: decode: internal error: %v\n%s", p, debug.Stack())
			seq, cmd := scanEnvelope(body)
			m, derr = nil, &decodeError{seq: seq, command: cmd, id: errInternal, msg: fmt.Sprintf("internal error decoding the request: %v", p)}
		}
	}()
	return s.codec.decode(body)
}

// recoverPanic, deferred at the top of a goroutine of the session or its job, stops a panic
// there from ending the server and every session: it is logged with its stack and reported to
// this session's client as an error output event, and the server goes on. what names the
// goroutine's work ("exit of rank 3").
func (s *Conn) recoverPanic(what string) {
	if p := recover(); p != nil {
		debugger.ReportPanic(s.events(), what, p)
	}
}

// close ends the session: the client leaves its job as a disconnect without arguments would
// (the last client of a job ends it).
func (s *Conn) close() {
	s.closeOnce.Do(func() {
		close(s.done)
		s.cancel()
		s.leave(nil)
		s.conn.Close()
		if s.ownLogDir && s.logDir != "" {
			os.RemoveAll(s.logDir)
		}
	})
}

// dispatch handles one request; false ends the session.
func (s *Conn) dispatch(m dap.Message) (keep bool) {
	req, ok := m.(dap.RequestMessage)
	if !ok {
		return true
	}
	r := req.GetRequest()
	defer func() {
		if p := recover(); p != nil {
			s.srv.logf("adapter: %s: internal error: %v\n%s", r.Command, p, debug.Stack())
			s.sendError(r, errInternal, fmt.Sprintf("internal error in %s: %v", r.Command, p))
			keep = true
		}
	}()
	if s.cancelledBeforeStart(r.Seq) {
		s.sendCancelled(r)
		return true
	}
	s.mu.Lock()
	initialized := s.initialized
	s.mu.Unlock()
	if !initialized {
		switch m.(type) {
		case *dap.InitializeRequest, *DisconnectRequest:
		default:
			s.sendError(r, errNotInitialized, fmt.Sprintf("%s before initialize: send initialize first", r.Command))
			return true
		}
	}
	switch req := m.(type) {
	case *dap.InitializeRequest: // Required
		s.onInitializeRequest(req)
	case *dap.LaunchRequest: // Required
		s.onLaunchRequest(req)
	case *dap.AttachRequest: // Required
		s.onAttachRequest(req)
	case *dap.ConfigurationDoneRequest: // Optional (capability 'supportsConfigurationDoneRequest')
		s.onConfigurationDoneRequest(req)
	case *DisconnectRequest: // Required
		s.onDisconnectRequest(req)
		return false
	case *dap.RestartRequest: // Optional (capability 'supportsRestartRequest')
		s.onRestartRequest(req)
	case *dap.TerminateRequest: // Optional (capability 'supportsTerminateRequest')
		s.onTerminateRequest(req)
	case *dap.SetBreakpointsRequest: // Required
		s.onSetBreakpointsRequest(req)
	case *dap.SetFunctionBreakpointsRequest: // Optional (capability 'supportsFunctionBreakpoints')
		s.onSetFunctionBreakpointsRequest(req)
	case *dap.SetInstructionBreakpointsRequest: // Optional (capability 'supportsInstructionBreakpoints')
		s.onSetInstructionBreakpointsRequest(req)
	case *dap.SetExceptionBreakpointsRequest: // Required (exceptionBreakpointFilters)
		s.onSetExceptionBreakpointsRequest(req)
	case *DataBreakpointInfoRequest: // Optional (capability 'supportsDataBreakpoints')
		s.onDataBreakpointInfoRequest(req)
	case *SetDataBreakpointsRequest: // Optional (capability 'supportsDataBreakpoints')
		s.onSetDataBreakpointsRequest(req)
	case *dap.BreakpointLocationsRequest: // Optional (capability 'supportsBreakpointLocationsRequest')
		s.onBreakpointLocationsRequest(req)
	case *dap.ThreadsRequest: // Required
		s.onThreadsRequest(req)
	case *dap.StackTraceRequest: // Required
		s.onStackTraceRequest(req)
	case *dap.ScopesRequest: // Required
		s.onScopesRequest(req)
	case *dap.VariablesRequest: // Required
		s.onVariablesRequest(req)
	case *dap.SetVariableRequest: // Optional (capability 'supportsSetVariable')
		s.onSetVariableRequest(req)
	case *dap.EvaluateRequest: // Required
		if errorShownInPlace(req.Arguments.Context) {
			s.inPlaceSeq.Store(int64(r.Seq))
			defer s.inPlaceSeq.Store(-1)
		}
		s.onEvaluateRequest(req)
	case *dap.CompletionsRequest: // Optional (capability 'supportsCompletionsRequest')
		// The console shows no completion when none comes: a failure is no news for the user.
		s.inPlaceSeq.Store(int64(r.Seq))
		defer s.inPlaceSeq.Store(-1)
		s.onCompletionsRequest(req)
	case *dap.ContinueRequest: // Required
		s.onContinueRequest(req)
	case *dap.NextRequest: // Required
		s.onNextRequest(req)
	case *dap.StepInRequest: // Required
		s.onStepInRequest(req)
	case *dap.GotoTargetsRequest: // Optional (capability 'supportsGotoTargetsRequest')
		s.onGotoTargetsRequest(req)
	case *dap.GotoRequest:
		s.onGotoRequest(req)
	case *dap.StepInTargetsRequest: // Optional (capability 'supportsStepInTargetsRequest')
		s.onStepInTargetsRequest(req)
	case *dap.StepOutRequest: // Required
		s.onStepOutRequest(req)
	case *dap.PauseRequest: // Required
		s.onPauseRequest(req)
	case *dap.ReadMemoryRequest: // Optional (capability 'supportsReadMemoryRequest')
		s.onReadMemoryRequest(req)
	case *dap.WriteMemoryRequest: // Optional (capability 'supportsWriteMemoryRequest')
		s.onWriteMemoryRequest(req)
	case *dap.DisassembleRequest: // Optional (capability 'supportsDisassembleRequest')
		s.onDisassembleRequest(req)
	case *dap.ExceptionInfoRequest: // Optional (capability 'supportsExceptionInfoRequest')
		s.onExceptionInfoRequest(req)
	case *dap.ModulesRequest: // Optional (capability 'supportsModulesRequest')
		s.onModulesRequest(req)
	case *dap.LoadedSourcesRequest: // Optional (capability 'supportsLoadedSourcesRequest')
		s.onLoadedSourcesRequest(req)
	case *dap.SourceRequest: // Required
		s.onSourceRequest(req)
	case *RanksRequest: // hpcdap
		s.onRanksRequest(req)
	case *FocusRequest: // hpcdap
		s.onFocusRequest(req)
	case *ParallelStacksRequest: // hpcdap
		s.onParallelStacksRequest(req)
	case *CompareExpressionRequest: // hpcdap
		s.onCompareExpressionRequest(req)
	case *SessionsRequest: // hpcdap
		s.respond(&req.Request, SessionsBody{Sessions: s.srv.sessionsOf(s.peerUID)})
	default:
		s.sendError(r, errUnsupported, fmt.Sprintf("unsupported request %q", r.Command))
	}
	return true
}

// The sending side.

// send writes one message, assigning its seq under the send lock.
func (s *Conn) send(m dap.Message) {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	if s.broken {
		return
	}
	s.seq++
	setSeq(m, s.seq)
	if dc, ok := s.conn.(interface{ SetWriteDeadline(time.Time) error }); ok {
		dc.SetWriteDeadline(time.Now().Add(s.srv.writeTimeout()))
	}
	if err := writeMessage(s.conn, m); err != nil {
		// The client is gone or does not read: end the session (its reader fails on the
		// closed stream) rather than leave every sender of events blocked here.
		s.broken = true
		s.srv.logf("adapter: session: write: %v; ending the session", err)
		s.conn.Close()
	}
}

// setSeq fills the seq of any go-dap or package message.
func setSeq(m dap.Message, seq int) {
	switch v := m.(type) {
	case dap.ResponseMessage:
		v.GetResponse().Seq = seq
	case dap.EventMessage:
		v.GetEvent().Seq = seq
	}
}

// newResponse returns the success response header for a request.
func newResponse(r *dap.Request) dap.Response {
	return dap.Response{ProtocolMessage: dap.ProtocolMessage{Type: "response"}, Command: r.Command,
		RequestSeq: r.Seq, Success: true}
}

// newEvent returns an event header.
func newEvent(name string) dap.Event {
	return dap.Event{ProtocolMessage: dap.ProtocolMessage{Type: "event"}, Event: name}
}

// respond sends a response with any body.
func (s *Conn) respond(r *dap.Request, body any) {
	s.send(&Response{Response: newResponse(r), Body: body})
}

// sendError answers r with an error.
func (s *Conn) sendError(r *dap.Request, id int, msg string) {
	s.sendErrorRaw(r.Seq, r.Command, id, msg)
}

func (s *Conn) sendErrorRaw(seq int, command string, id int, msg string) {
	message := msg
	if id == errCancelled {
		message = "cancelled" // DAP's word for a request that a cancel request ended
	}
	e := &dap.ErrorResponse{Response: dap.Response{ProtocolMessage: dap.ProtocolMessage{Type: "response"},
		Command: command, RequestSeq: seq, Success: false, Message: message}}
	// A thread whose rank runs, or a handle of a stop that is over, is a race of the protocol
	// (a client reads a stack or expands a variable just as the user resumes), not a failure
	// the user must be told about; nor is a cancel the user asked for.
	show := s.inPlaceSeq.Load() != int64(seq) && id != errRunning && id != errStale && id != errCancelled
	e.Body.Error = &dap.ErrorMessage{Id: id, Format: msg, ShowUser: show}
	s.send(e)
}

// errorShownInPlace reports whether a client shows the failure of an evaluate request of this
// context where the expression is (the hover, the watch list, the console), so that the error
// must not also be raised as a notification: a client that shows every showUser error (VS Code
// does) would otherwise pop one up each time the pointer rests on a word that is not a
// variable, and for every watch expression out of scope at each stop.
func errorShownInPlace(context string) bool {
	switch context {
	case "hover", "watch", "repl":
		return true
	}
	return false
}

// sendEvent sends an event with any body.
func (s *Conn) sendEvent(name string, body any) {
	s.send(&Event{Event: newEvent(name), Body: body})
}

// sendOutput sends an output event.
func (s *Conn) sendOutput(category, text string) { s.events().Output(category, text, -1) }

// sendContinued tells the client that threads it did not name are running again.
func (s *Conn) sendContinued(threads []*debugger.Thread, except int) {
	for _, t := range threads {
		if t.ID != except {
			s.events().Continued(t.ID)
		}
	}
}

// continuedEvent is the continued event of a thread (all: of every thread).
func continuedEvent(threadID int, all bool) *dap.ContinuedEvent {
	return &dap.ContinuedEvent{Event: newEvent("continued"), Body: dap.ContinuedEventBody{ThreadId: threadID, AllThreadsContinued: all}}
}

// othersContinued tells the other clients of a shared job that a thread this client resumed
// runs again (with all, every thread).
func (s *Conn) othersContinued(threadID int, all bool) {
	s.mu.Lock()
	sh := s.share
	s.mu.Unlock()
	if sh != nil {
		sh.othersContinued(s, threadID, all)
	}
}

// sendTerminated sends the terminated event.
func (s *Conn) sendTerminated() {
	s.send(&dap.TerminatedEvent{Event: newEvent("terminated")})
}

// Progress reporting (DAP progressStart/Update/End), when the client supports it.

func (s *Conn) progressStart(title string) string {
	s.mu.Lock()
	if !s.client.SupportsProgressReporting {
		s.mu.Unlock()
		return ""
	}
	s.progressID++
	id := fmt.Sprintf("hpcdap-%d", s.progressID)
	s.mu.Unlock()
	s.sendEvent("progressStart", map[string]any{"progressId": id, "title": title, "percentage": 0})
	return id
}

func (s *Conn) progressUpdate(id, msg string, pct float64) {
	if id != "" {
		s.sendEvent("progressUpdate", map[string]any{"progressId": id, "message": msg, "percentage": pct})
	}
}

func (s *Conn) progressEnd(id, msg string) {
	if id != "" {
		s.sendEvent("progressEnd", map[string]any{"progressId": id, "message": msg})
	}
}

// currentJob returns the job, or answers r with an error when there is none.
func (s *Conn) currentJob(r *dap.Request) *debugger.Job {
	s.mu.Lock()
	j := s.job
	s.mu.Unlock()
	if j == nil {
		s.sendError(r, errNoJob, fmt.Sprintf("%s: no program is being debugged (launch or attach first)", r.Command))
	}
	return j
}
