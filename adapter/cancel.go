package adapter

import (
	"context"
	"errors"

	"github.com/google/go-dap"
)

// Cancellation. Requests are handled one at a time, so a cancel request is answered by the
// reader as it arrives: it cancels the context of the request being handled, when that
// request took one (requestContext: the wait of an attach by "waitFor"), or marks a request
// still queued so that it is answered "cancelled" without being handled. Requests that took
// no context run to their end; a cancel for them changes nothing.

// errCancelledRequest is the cause of a cancelled request's context.
var errCancelledRequest = errors.New("cancelled")

// cancels is the session's table of cancellable requests.
type cancelTable struct {
	active map[int]context.CancelCauseFunc // seq → cancel, for requests that took a context
	queued map[int]bool                    // seqs cancelled before their handling began
}

// requestContext returns a context for request r that a cancel request ends; requestDone
// must follow.
func (s *Conn) requestContext(r *dap.Request) context.Context {
	ctx, cancel := context.WithCancelCause(s.ctx)
	s.mu.Lock()
	if s.cancels.active == nil {
		s.cancels.active = map[int]context.CancelCauseFunc{}
	}
	s.cancels.active[r.Seq] = cancel
	s.mu.Unlock()
	return ctx
}

// requestDone forgets request r's context.
func (s *Conn) requestDone(r *dap.Request) {
	s.mu.Lock()
	cancel := s.cancels.active[r.Seq]
	delete(s.cancels.active, r.Seq)
	s.mu.Unlock()
	if cancel != nil {
		cancel(nil)
	}
}

// onCancelRequest, run by the reader, cancels the request it names (DAP's progressId form is
// not supported: progress belongs to a request, which is cancelled by its seq).
func (s *Conn) onCancelRequest(req *dap.CancelRequest) {
	a := req.Arguments
	if a.RequestId == 0 {
		s.sendError(&req.Request, errBadArguments, "cancel: give the requestId of the request to cancel")
		return
	}
	s.mu.Lock()
	if cancel, ok := s.cancels.active[a.RequestId]; ok {
		cancel(errCancelledRequest)
	} else if a.RequestId > s.dispatched {
		if s.cancels.queued == nil {
			s.cancels.queued = map[int]bool{}
		}
		s.cancels.queued[a.RequestId] = true
	}
	s.mu.Unlock()
	s.send(&dap.CancelResponse{Response: newResponse(&req.Request)})
}

// cancelledBeforeStart reports, and forgets, that request seq was cancelled while queued.
func (s *Conn) cancelledBeforeStart(seq int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dispatched = seq
	if s.cancels.queued[seq] {
		delete(s.cancels.queued, seq)
		return true
	}
	return false
}

// sendCancelled is the answer to a request ended by a cancel request: DAP's "cancelled",
// without showUser (the user asked for it).
func (s *Conn) sendCancelled(r *dap.Request) {
	s.sendError(r, errCancelled, r.Command+": cancelled")
}
