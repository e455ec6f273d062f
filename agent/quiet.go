package agent

import (
	"context"

	"github.com/hpcdap/hpcdap/cdti"
)

// Quiet stops. A cdti.Collective with CollectiveQuietStop applies StopProcess to many ranks
// and reports their stops in its one reduced answer instead of a Notify per rank. For each of
// this agent's ranks the Router calls QuietStop before the StopProcess: the stop that
// StopProcess starts is marked quiet, and when every thread has stopped it becomes the
// holder's notification in flight without being sent (notif.unsent); the wait QuietStop
// returns then reports it, and the collective's answer says Reported. A stop still under way
// when the wait ends loses its mark and is notified as usual. A plain StopProcess of the same
// tool on a process stopped quietly sends the notification after all, so a tool that lost
// the collective's answer still learns of the stop; ContinueProcess, StepThread or
// ReleaseControl satisfy it as any notification.

// QuietStop arranges that rank's next stop for c's tool, the holder, is not notified, and
// returns the wait for it (cdti.QuietStopper).
func (h *handler) QuietStop(c *cdti.Conn, rank uint32) func(context.Context) bool {
	none := func(context.Context) bool { return false }
	p, tc := h.agent().proc(rank), conn(c)
	if p == nil || tc == nil {
		return none
	}
	done := make(chan struct{})
	var t *tool
	if err := p.do(func() {
		if p.exited || p.holder == nil || p.holder.tc != tc {
			return
		}
		t = p.holder
		p.quietFor, p.quietDone = t, done
	}); err != nil || t == nil {
		return none
	}
	return func(ctx context.Context) bool {
		select {
		case <-done:
		case <-ctx.Done():
		}
		quiet := false
		p.do(func() {
			if p.quietFor == t && (p.quietDone == done || p.quietDone == nil) {
				p.quietFor, p.quietDone = nil, nil
			}
			if n := p.inflight; n != nil && n.unsent && p.holder == t {
				quiet = true
				return
			}
			for i := range p.pending { // not stopped yet: notified when it is
				p.pending[i].quiet = false
			}
		})
		return quiet
	}
}
