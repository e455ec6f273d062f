package debugger

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/hpcdap/hpcdap/cdti"
)

// Stopping running ranks for an all-stop or a pause, one rank at a time (collective.go sends
// the stops of ranks that share a connection).

// sendStop stops a running rank for an all-stop or a pause (the caller marked it awaited).
// It holds the rank's evMu, so that no notification of the rank is half handled meanwhile: the
// agent's answer that a notification on its way is the stop can then not meet one that a
// handler has decided to pass on and is about to continue (the handler, when it runs, sees
// the rank awaited and keeps it stopped). If the stop fails, a rank that has stopped or ended
// meanwhile completes the wait by its own report; one still running is given up on, said in
// the console, so that the all-stop or the pause does not wait for ever.
func (j *Job) sendStop(r *Rank) {
	defer j.recoverPanic(fmt.Sprintf("stop of rank %d", r.Num))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r.evMu.Lock()
	j.mu.Lock()
	awaited := j.awaitedLocked(r) && r.state == RankRunning && !r.quietStop
	j.mu.Unlock()
	var stopping bool
	var err error
	if awaited {
		stopping, err = j.stopRank(ctx, r)
	}
	r.evMu.Unlock()
	if !awaited {
		return // it stopped or ended meanwhile, or nobody waits any more
	}
	if err == nil {
		j.logf("rank %d: stop sent (notification to come: %v)", r.Num, stopping)
		return
	}
	j.stopFailed(r, err)
}

// stopFailed ends the wait for a rank whose stop could not be sent (err): one cut off by a
// lost agent is ended as lost; one still running is given up on, said in the console.
func (j *Job) stopFailed(r *Rank, err error) {
	j.logf("rank %d: stop not sent: %v", r.Num, err)
	if unreachable(err) {
		// Cut off by a lost agent: ended as lost (which also ends the wait for it).
		j.mu.Lock()
		r.cutOff = true
		j.mu.Unlock()
		j.onExit(r, cdti.ExitStatus(-1))
		return
	}
	j.mu.Lock()
	running := r.state == RankRunning
	r.pauseReq = false
	if j.collect == nil || !j.collect.waiting[r] {
		j.mu.Unlock()
		return
	}
	delete(j.collect.waiting, r)
	j.finishCollectLocked()
	if running {
		j.output("important", fmt.Sprintf("rank %d could not be stopped (%v); it runs on\n", r.Num, err))
	}
}

// stopRank asks r's agent to stop the rank (StopProcess) and reports whether a notification
// of that stop follows (false: one already on its way is the stop). Against an agent without
// the extension (a real CNK) it sends SIGSTOP instead, which always notifies.
func (j *Job) stopRank(ctx context.Context, r *Rank) (bool, error) {
	if err := j.noAuthority([]*Rank{r}); err != nil {
		return false, err // another tool controls it: it runs on
	}
	stopping, err := r.node.client.StopProcess(ctx, uint32(r.Num))
	if !errors.Is(err, cdti.ErrNotSupported) {
		return stopping, err
	}
	j.mu.Lock()
	sent := r.sigstopSent
	r.sigstopSent = true
	j.mu.Unlock()
	if sent {
		return true, nil // one SIGSTOP is on its way already
	}
	rs, err := r.node.client.Update(ctx, uint32(r.Num), &cdti.SendSignalToProcess{Signal: uint32(syscall.SIGSTOP)})
	if err == nil && rs[0].Code != cdti.CmdSuccess {
		err = fmt.Errorf("send SIGSTOP: %v", rs[0].Code)
	}
	if err != nil {
		j.mu.Lock()
		r.sigstopSent = false
		j.mu.Unlock()
		return false, err
	}
	return true, nil
}

// pause stops the running ranks among ranks. It reports whether any was running.
func (j *Job) pause(ranks []*Rank) bool {
	any := false
	var stop []*Rank
	j.mu.Lock()
	for _, r := range ranks {
		if r.state != RankRunning {
			continue
		}
		any = true
		r.pauseReq = true
		if r.stepper != nil {
			r.stepper.cancelLocked()
		}
		stop = append(stop, r)
	}
	j.sendStops(stop)
	j.mu.Unlock()
	return any
}
