package debugger

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"syscall"
	"time"

	"github.com/hpcdap/hpcdap/cdti"
)

// Collectives. Where one CDTI connection reaches many ranks (the root's, through the tree of
// agents; or one agent's, serving a node of many ranks), the engine applies one command list to
// all of them with one cdti.Collective: the all-stop of a job and the pause of a rank set (a
// quiet StopProcess), the continue of a rank set (ContinueProcess), and planting and removing
// breakpoints on every rank (the originals read with one GetMemory, the SetBreakpoint and
// ResetBreakpoint lists sent once per distinct list). The front end then sends one request
// and receives one reduced answer (distinct outcomes, not ranks), however many ranks the
// connection reaches. Ranks reached by a connection of their own, behind a BG/Q CNK, or
// behind agents that refuse the extension, are handled rank by rank, as is every rank whose
// part of a collective failed in a way that the rank-by-rank path handles better (an agent too
// slow to answer in time, a back end that cannot interrupt).
//
// Stops and their events. A quiet StopProcess reports the stop in the collective's answer
// (StopProcessAck.Reported) instead of a Notify: for each such rank the engine hands its
// notification handler the Notify(SIGSTOP, Interrupt) the agent did not send, on the rank's
// main thread, exactly as it would have handled the real one; so the all-stop's collector and
// the DAP events see one stop per rank, none lost, none doubled. A rank whose stop could not be
// completed within the collective's wait is notified as usual (Stopping, not Reported), and one
// that was already stopping for a reason of its own (a breakpoint hit whose Notify is on its
// way) answers that this notification is the stop. The rank's evMu is held around the
// collective as around the single StopProcess (sendStop): ranks are locked in rank order.

// collectiveTimeout bounds one collective of run control: above the agents' own wait (the
// Router's, 30 s by default, shrinking down the tree).
const collectiveTimeout = 40 * time.Second

// collectiveGroups splits ranks into the groups one Collective serves (more than one rank
// reached through one connection to agents known to have the extensions: a rank of their
// node answered GetTargetInfo) and the ranks to handle one by one.
func (j *Job) collectiveGroups(ranks []*Rank) (groups [][]*Rank, single []*Rank) {
	if j.noCollective.Load() {
		return nil, ranks
	}
	at := map[*cdti.Client]int{}
	for _, r := range ranks {
		n := r.node
		if n == nil || n.client == nil || n.cnk.Load() || !n.ext.Load() {
			single = append(single, r)
			continue
		}
		i, ok := at[n.client]
		if !ok {
			i = len(groups)
			at[n.client] = i
			groups = append(groups, nil)
		}
		groups[i] = append(groups[i], r)
	}
	kept := groups[:0]
	for _, g := range groups {
		if len(g) > 1 {
			kept = append(kept, g)
		} else {
			single = append(single, g...)
		}
	}
	return kept, single
}

// rankAnswer is one rank's part of a collective's answer: its results, or why it has none
// (an error of the rank's reply, or, for a rank behind a lost agent, an error for which
// unreachable reports true).
type rankAnswer struct {
	res []cdti.Result
	err error
}

// collective applies cmds to ranks (reached through one connection) with one Collective and
// returns each rank's answer. An error means no answer at all: the caller goes rank by rank
// (an agent that refuses the extension turns collectives off for the session).
func (j *Job) collective(ctx context.Context, ranks []*Rank, flags cdti.CollectiveFlags, cmds ...cdti.Command) (map[*Rank]rankAnswer, error) {
	var nums []uint32
	for _, r := range ranks {
		nums = append(nums, uint32(r.Num))
	}
	a, err := ranks[0].node.client.Collective(ctx, flags, cdti.RanksOf(nums...), cmds...)
	if err != nil {
		if errors.Is(err, cdti.UnsupportedType) {
			j.noCollective.Store(true)
		}
		j.logf("collective %v on %d ranks: %v", cmds[0].CommandType(), len(ranks), err)
		return nil, err
	}
	j.logf("collective %v on %d ranks: %d outcomes, %d unreachable", cmds[0].CommandType(), len(ranks), len(a.Groups), a.Unreachable.Count())
	out := make(map[*Rank]rankAnswer, len(ranks))
	for _, x := range a.Unreachable.Ranks() {
		if r := j.rank(int(x)); r != nil {
			out[r] = rankAnswer{err: &cdti.ReturnCodeError{Reply: cdti.MsgCollectiveAck, Code: cdti.RequestFailed,
				ErrorCode: cdti.ErrorCodeUnreachable}}
		}
	}
	for _, g := range a.Groups {
		ans := rankAnswer{res: g.Results}
		if g.Code != cdti.Success {
			ans = rankAnswer{err: &cdti.ReturnCodeError{Reply: cdti.MsgCollectiveAck, Code: g.Code, ErrorCode: g.ErrorCode}}
		}
		for _, x := range g.Ranks.Ranks() {
			if r := j.rank(int(x)); r != nil {
				out[r] = ans
			}
		}
	}
	for _, r := range ranks {
		if _, ok := out[r]; !ok {
			out[r] = rankAnswer{err: fmt.Errorf("rank %d: not in the collective's answer", r.Num)}
		}
	}
	return out, nil
}

// lockRanks takes the evMu of ranks in rank order and returns the function that releases them.
func lockRanks(ranks []*Rank) func() {
	rs := slices.Clone(ranks)
	slices.SortFunc(rs, func(a, b *Rank) int { return a.Num - b.Num })
	for _, r := range rs {
		r.evMu.Lock()
	}
	return func() {
		for _, r := range rs {
			r.evMu.Unlock()
		}
	}
}

// sendStops stops running ranks for an all-stop or a pause (the caller marked them awaited):
// one quiet collective StopProcess per group of ranks sharing a connection, sendStop for the
// others. It returns at once.
func (j *Job) sendStops(ranks []*Rank) {
	groups, single := j.collectiveGroups(ranks)
	for _, g := range groups {
		go j.sendStopCollective(g)
	}
	for _, r := range single {
		go j.sendStop(r)
	}
}

// sendStopCollective is sendStop for ranks sharing a connection, in one quiet collective.
func (j *Job) sendStopCollective(ranks []*Rank) {
	defer j.recoverPanic(fmt.Sprintf("collective stop of %d ranks", len(ranks)))
	ctx, cancel := context.WithTimeout(context.Background(), collectiveTimeout)
	defer cancel()
	unlock := lockRanks(ranks)
	var awaited []*Rank
	j.mu.Lock()
	for _, r := range ranks {
		if j.awaitedLocked(r) && r.state == RankRunning && !r.quietStop {
			awaited = append(awaited, r)
		}
	}
	j.mu.Unlock()
	if len(awaited) == 0 {
		unlock()
		return
	}
	out, err := j.collective(ctx, awaited, cdti.CollectiveQuietStop, &cdti.StopProcess{})
	if err != nil {
		unlock()
		for _, r := range awaited {
			go j.sendStop(r) // rank by rank: the single path handles every case
		}
		return
	}
	var reported, again, failed []*Rank
	var why []error
	for _, r := range awaited {
		a := out[r]
		var st *cdti.StopProcessAck
		code := cdti.CmdSuccess
		if a.err == nil && len(a.res) == 1 {
			st, _ = a.res[0].Ack.(*cdti.StopProcessAck)
			code = a.res[0].Code
		}
		var rc *cdti.ReturnCodeError
		switch {
		case a.err != nil && errors.As(a.err, &rc) && rc.ErrorCode == cdti.ErrorCodeTimedOut:
			again = append(again, r) // its agent was slow: a plain stop recovers a quiet one
		case a.err != nil:
			failed, why = append(failed, r), append(why, a.err)
		case code == cdti.CmdInval:
			again = append(again, r) // no interrupt there: sendStop signals instead
		case code != cdti.CmdSuccess || st == nil:
			failed, why = append(failed, r), append(why, fmt.Errorf("stop: %v", code))
		case st.Reported:
			reported = append(reported, r)
		default:
			j.logf("rank %d: stop sent (notification to come: %v)", r.Num, st.Stopping)
		}
	}
	// Until its notification is handled, a reported rank is not stopped again by anyone.
	j.mu.Lock()
	for _, r := range reported {
		r.quietStop = true
	}
	j.mu.Unlock()
	unlock()
	for _, r := range reported {
		j.mu.Lock()
		tid, gen := r.leader, r.ctlGen
		j.mu.Unlock()
		n := &cdti.Notify{Header: cdti.Header{Rank: uint32(r.Num)}, Kind: cdti.NotifyTypeSignal,
			Signal: cdti.NotifySignal{Signal: uint32(syscall.SIGSTOP), ThreadID: uint32(tid), Reason: cdti.SignalInterrupt}}
		go j.onSignal(r, n, gen)
	}
	for _, r := range again {
		go j.sendStop(r)
	}
	for i, r := range failed {
		j.stopFailed(r, why[i])
	}
}

// Messages returns the CDTI messages the front end has sent to the job's agents and received
// from them so far, over every connection it holds.
func (j *Job) Messages() (sent, received uint64) {
	for _, g := range j.clientGroups() {
		if c := g[0].client; c != nil {
			s, r := c.Messages()
			sent, received = sent+s, received+r
		}
	}
	return sent, received
}
