package debugger

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/hpcdap/hpcdap/bpcode"
	"github.com/hpcdap/hpcdap/cdti"
	"github.com/hpcdap/hpcdap/symbols"
)

// Comparison by the agents. The front end evaluates the expression in one rank itself (the
// representative), compiles it for the frame it was found in (symbols.CompileValueInStack: a
// bpcode program that unwinds from the thread's registers to that frame and checks every pc
// on the way, relative to its modules' load biases) and sends that program to the other ranks
// reached through the same connection with one EvaluateValue collective. The answer comes back
// through the tree of agents grouped by value: the front end receives distinct values, not one
// message a rank. Ranks stopped elsewhere fail the program's checks; a next round takes one
// of them as its representative, up to compareRounds rounds. Where the front end holds every
// rank's stack of this stop, it knows the places: each has its rounds, beside the others', and
// they end when one finds no other rank at its representative's place.
//
// The choice of frame is the front end's (the innermost frame with the name in scope), and is
// carried over only where it cannot depend on values: every frame tried before the one that
// answered failed on an unknown name. An evaluation that failed on unknown names alone is
// carried over the same way, to the ranks at the same place (a probe of every frame). The
// representative's value from its agent must equal the front end's own, or the round ends:
// compiled and interpreted evaluation never disagree unseen. What the compiler refuses
// (floating-point and pointer values, calls, frames found without call frame information),
// every rank whose agent does not answer in time, and every rank no round answers, are
// evaluated by the front end. Left as a limit: a rank that loaded a library of its own
// (dlopen) exporting the name is taken, at the same pcs, to see what the representative saw.

// compareRounds bounds the representatives of one connection's ranks.
const compareRounds = 8

// compareByAgents evaluates a comparison: what it can through the agents, writing out[i] for
// each rank i it answers, and the rest through front (the front end's own evaluation of the
// ranks of those indexes). The ranks of one connection (and one place, where placeOf knows
// it) have their rounds beside the others', and what the rounds leave goes to the front
// end as soon as they end; the rounds have half the time left, so that a slow agent leaves the
// front end time for its ranks.
func (j *Job) compareByAgents(ctx context.Context, ranks []*Rank, expr string, level *int, out []RankValue, front func([]int)) {
	idx := make(map[*Rank]int, len(ranks))
	var leaders []*Rank
	var alone []int // ranks for the front end from the start
	j.mu.Lock()
	for i, r := range ranks {
		if t := r.mainThread(); r.state == RankStopped && t != nil && t.LWP == r.Pid {
			idx[r] = i
			leaders = append(leaders, r)
		} else {
			alone = append(alone, i)
		}
	}
	j.mu.Unlock()
	var groups [][]*Rank
	if len(leaders) > 1 && !j.noCollective.Load() {
		var single []*Rank
		groups, single = j.collectiveGroups(leaders)
		for _, r := range single {
			alone = append(alone, idx[r])
		}
	} else {
		for _, r := range leaders {
			alone = append(alone, idx[r])
		}
	}
	agentCtx := ctx
	if d, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		agentCtx, cancel = context.WithTimeout(ctx, time.Until(d)/2)
		defer cancel()
	}
	// Each connection's ranks, by place where it is known: the rounds of each place run beside
	// the others', and ranks alone at their place go straight to the front end.
	type part struct {
		ranks []*Rank
		known bool // one place, as placeOf knows it
	}
	var parts []part
	for _, g := range groups {
		places := make([]comparePlace, len(g))
		unknown := false
		for i, r := range g {
			places[i] = j.placeOf(r)
			unknown = unknown || !places[i].known
		}
		by := map[comparePlace][]*Rank{}
		var order []comparePlace
		for i, r := range g {
			k := places[i]
			if unknown {
				// One rank's place unknown: the rounds find them all (a representative whose
				// place is known would otherwise stand alone, and the next be unwound).
				k = comparePlace{exe: k.exe}
			}
			if _, seen := by[k]; !seen {
				order = append(order, k)
			}
			by[k] = append(by[k], r)
		}
		for _, k := range order {
			parts = append(parts, part{ranks: by[k], known: k.known})
		}
	}
	var wg sync.WaitGroup
	wg.Go(func() { front(alone) })
	ForEach(len(parts), func(i int) {
		left := j.compareRoundsOn(ctx, agentCtx, parts[i].ranks, parts[i].known, expr, level, func(r *Rank, v RankValue) {
			out[idx[r]] = v // every rank is in one part only
		})
		rest := make([]int, len(left))
		for i, r := range left {
			rest[i] = idx[r]
		}
		front(rest)
	})
	wg.Wait()
}

// comparePlace is where a rank is stopped, as far as the front end knows without asking it:
// its executable and, when its main thread's stack was unwound at this stop (known), the pcs
// of that stack, each by its module and offset, so that ranks whose modules are loaded at
// different addresses share a place. An unknown place is one the rounds find.
type comparePlace struct {
	exe   string
	pcs   string
	known bool
}

// placeOf returns where rank r is stopped, as comparePlace says.
func (j *Job) placeOf(r *Rank) comparePlace {
	p := comparePlace{exe: r.sym.executable()}
	ts := r.sym.cachedStack(r.Pid)
	if ts == nil {
		return p
	}
	var b strings.Builder
	for _, f := range ts.Frames {
		if f.Kind != symbols.FrameNormal && f.Kind != symbols.FrameSignal {
			continue
		}
		if f.Module != nil {
			fmt.Fprintf(&b, "%s+%x/", f.Module.Path, f.PC-f.Module.Bias)
		} else {
			fmt.Fprintf(&b, "%x/", f.PC)
		}
	}
	p.pcs, p.known = b.String(), true
	return p
}

// compareRoundsOn evaluates expr in ranks reached through one connection: each round, the
// first rank not yet answered by the front end (within ctx), then the others that are stopped
// at its place by their agents (within agentCtx). set records each rank answered; the ranks
// left are returned: those no round reached, and those whose agent failed to answer (slow, or
// lost), which the front end tries itself. Ranks known to be at one place (known) end their
// rounds when one answers no rank but its representative; ranks of unknown places go on, as
// the next representative may stand where the others do.
func (j *Job) compareRoundsOn(ctx, agentCtx context.Context, ranks []*Rank, known bool, expr string, level *int,
	set func(*Rank, RankValue)) (left []*Rank) {
	for round := 0; round < compareRounds && len(ranks) > 1; round++ {
		rep := ranks[0]
		e := j.evalIn(ctx, rep, expr, level)
		set(rep, RankValue{Value: e.value, Err: e.err, Called: e.called})
		cmd, why := agentEvaluation(e, expr)
		if cmd == nil {
			j.logf("compare %q: %d ranks from rank %d on, by the front end: %s", expr, len(ranks), rep.Num, why)
			return append(left, ranks[1:]...)
		}
		ans, err := j.collective(agentCtx, ranks, 0, cmd)
		if err != nil {
			return append(left, ranks[1:]...)
		}
		want := e.value
		if e.err != nil {
			want = "1" // the place probe's answer
		}
		if v, ok := evaluated(ans[rep]); !ok || v != want {
			j.logf("compare %q: rank %d's agent answers %q (ok %v) where the front end has %q: by the front end",
				expr, rep.Num, v, ok, want)
			return append(left, ranks[1:]...)
		}
		var next []*Rank
		answered := 0
		for _, r := range ranks[1:] {
			a := ans[r]
			v, ok := evaluated(a)
			switch {
			case a.err != nil:
				left = append(left, r) // its agent did not answer: the front end tries
			case ok && e.err != nil:
				set(r, RankValue{Err: e.err}) // at the representative's place: its error
				answered++
			case ok:
				set(r, RankValue{Value: v})
				answered++
			default:
				next = append(next, r) // stopped elsewhere
			}
		}
		ranks = next
		if answered == 0 && known {
			break // no other rank at that place
		}
	}
	return append(left, ranks...)
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
		k := e.frame // the frame named, or else the whole stack: every frame was tried
		if k < 0 {
			k = len(fr) - 1
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
		return evaluateValue(bpcode.FmtUnsigned, prog, mods, e.stack)
	}
	prog, format, mods, err := symbols.CompileValueInStack(e.stack.Frames, e.frame, expr)
	if err != nil {
		return nil, err.Error()
	}
	return evaluateValue(format, prog, mods, e.stack)
}

// evaluateValue is the EvaluateValue of a program compiled in stack, or why it cannot be sent.
func evaluateValue(format bpcode.Format, prog *bpcode.Program, mods []*symbols.Module, stack *ThreadStack) (*cdti.EvaluateValue, string) {
	exe := stack.Frames[0].Process().Executable()
	names := make([]string, len(mods))
	for i, m := range mods {
		if m != exe {
			names[i] = m.Path // as the link map names it
		}
	}
	c := &cdti.EvaluateValue{Format: uint8(format), Program: prog.Encode(), Modules: names}
	if err := cdti.Validate(c); err != nil {
		return nil, err.Error()
	}
	return c, ""
}
