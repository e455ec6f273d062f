package debugger

import (
	"context"
	"fmt"

	"github.com/hpcdap/hpcdap/bpcode"
	"github.com/hpcdap/hpcdap/cdti"
	"github.com/hpcdap/hpcdap/symbols"
)

// Comparison by the agents. The front end evaluates the expression in one rank itself (the
// representative), compiles it for the frame it was found in (symbols.CompileValueInStack: a
// bpcode program that unwinds from the thread's registers to that frame and checks every pc
// on the way) and sends that program to the other ranks reached through the same connection
// with one EvaluateValue collective. The answer comes back through the tree of agents grouped
// by value: the front end receives distinct values, not one message a rank. Ranks stopped
// elsewhere fail the program's checks; a next round takes one of them as its representative,
// up to compareRounds rounds.
//
// The choice of frame is the front end's (the innermost frame with the name in scope), and is
// carried over only where it cannot depend on values: every frame tried before the one that
// answered failed on an unknown name. The representative's value from its agent must equal
// the front end's own, or the round ends: compiled and interpreted evaluation never disagree
// unseen. What the compiler refuses (floating-point and pointer values, calls, frames found
// without call frame information), and every rank no round answered, are evaluated by the
// front end.

// compareRounds bounds the representatives of one connection's ranks.
const compareRounds = 8

// compareByAgents evaluates what it can of a comparison through the agents, writing out[i]
// for each rank i it answers, which it reports done.
func (j *Job) compareByAgents(ctx context.Context, ranks []*Rank, expr string, level *int, out []RankValue) []bool {
	done := make([]bool, len(ranks))
	if len(ranks) < 2 || j.noCollective.Load() {
		return done
	}
	idx := make(map[*Rank]int, len(ranks))
	var leaders []*Rank
	j.mu.Lock()
	for i, r := range ranks {
		if t := r.mainThread(); r.state == RankStopped && t != nil && t.LWP == r.Pid {
			idx[r] = i
			leaders = append(leaders, r)
		}
	}
	j.mu.Unlock()
	groups, _ := j.collectiveGroups(leaders)
	ForEach(len(groups), func(k int) {
		j.compareRoundsOn(ctx, groups[k], expr, level, func(r *Rank, v RankValue) {
			out[idx[r]], done[idx[r]] = v, true // every rank is in one group only
		})
	})
	return done
}

// compareRoundsOn evaluates expr in ranks reached through one connection: each round, the
// first rank not yet answered by the front end, then the others that are stopped at its place
// by their agents. set records each rank answered.
func (j *Job) compareRoundsOn(ctx context.Context, ranks []*Rank, expr string, level *int, set func(*Rank, RankValue)) {
	for round := 0; round < compareRounds && len(ranks) > 1; round++ {
		rep := ranks[0]
		e := j.evalIn(ctx, rep, expr, level)
		set(rep, RankValue{Value: e.value, Err: e.err, Called: e.called})
		cmd, why := agentEvaluation(e, expr)
		if cmd == nil {
			j.logf("compare %q: %d ranks from rank %d on, by the front end: %s", expr, len(ranks), rep.Num, why)
			return
		}
		ans, err := j.collective(ctx, ranks, 0, cmd)
		if err != nil {
			return
		}
		want := e.value
		if e.err != nil {
			want = "1" // the place probe's answer
		}
		if v, ok := evaluated(ans[rep]); !ok || v != want {
			j.logf("compare %q: rank %d's agent answers %q (ok %v) where the front end has %q: by the front end",
				expr, rep.Num, v, ok, want)
			return
		}
		var rest []*Rank
		for _, r := range ranks[1:] {
			a := ans[r]
			v, ok := evaluated(a)
			switch {
			case unreachable(a.err):
				set(r, RankValue{Err: fmt.Errorf("rank %d: its agent cannot be reached", r.Num)})
			case ok && e.err != nil:
				set(r, RankValue{Err: e.err}) // at the representative's place: its error
			case ok:
				set(r, RankValue{Value: v})
			default:
				rest = append(rest, r) // stopped elsewhere, or its agent could not say
			}
		}
		ranks = rest
	}
}

// evaluated is the value of a rank's answer to EvaluateValue, if it has one.
func evaluated(a rankAnswer) (string, bool) {
	if a.err != nil || len(a.res) != 1 || a.res[0].Code != cdti.CmdSuccess {
		return "", false
	}
	ack, ok := a.res[0].Ack.(*cdti.EvaluateValueAck)
	if !ok {
		return "", false
	}
	return ack.Text, true
}

// agentEvaluation is the EvaluateValue that repeats e (a front-end evaluation) in ranks
// stopped at the same place, or why there is none.
// An evaluation that failed on unknown names alone is repeated as a probe of the place
// (symbols.CompilePlace over every frame the evaluation tried), which answers "1" where the
// same code would fail the same way.
func agentEvaluation(e rankEval, expr string) (*cdti.EvaluateValue, string) {
	switch {
	case e.called != nil:
		return nil, "a function was called"
	case !e.byName && e.err != nil:
		return nil, "no value: " + e.err.Error()
	case !e.byName:
		return nil, "an inner frame failed on a value, which may differ from rank to rank"
	case e.stack == nil:
		return nil, "no stack: " + e.err.Error()
	case e.err != nil:
		fr := e.stack.Frames
		k := e.frame // the frame named, or the outermost one tried
		for i := len(fr) - 1; k < 0 && i >= 0; i-- {
			if fr[i].Function != nil {
				k = i
			}
		}
		for k >= 0 && k+1 < len(fr) && fr[k].Kind == symbols.FrameInline {
			k++ // to the physical frame that holds it
		}
		if k < 0 {
			return nil, "no value: " + e.err.Error()
		}
		prog, mods, err := symbols.CompilePlace(fr, k)
		if err != nil {
			return nil, "no value (" + e.err.Error() + "), no probe: " + err.Error()
		}
		return &cdti.EvaluateValue{Format: uint8(bpcode.FmtUnsigned), Program: prog.Encode(), Modules: moduleNames(mods, e.stack.Frames[0].Process().Executable())}, ""
	}
	prog, format, mods, err := symbols.CompileValueInStack(e.stack.Frames, e.frame, expr)
	if err != nil {
		return nil, err.Error()
	}
	return &cdti.EvaluateValue{Format: uint8(format), Program: prog.Encode(), Modules: moduleNames(mods, e.stack.Frames[0].Process().Executable())}, ""
}

// moduleNames names modules as the agent finds them in a process's link map: the executable
// "", a library by the name the link map gives it (which Module.Path is).
func moduleNames(mods []*symbols.Module, exe *symbols.Module) []string {
	out := make([]string, len(mods))
	for i, m := range mods {
		if m != exe {
			out[i] = m.Path
		}
	}
	return out
}
