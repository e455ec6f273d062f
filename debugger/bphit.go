package debugger

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/hpcdap/hpcdap/bpcode"
	"github.com/hpcdap/hpcdap/symbols"
)

// hit decides what a breakpoint notification at addr means for rank r: whether to stop, and
// why. Conditions are evaluated in the stopped thread's innermost frame; hit counts are kept
// per rank; log points print and never stop. A hit the agent decided (its trap condition
// held) stops as it is; one whose condition the agent could not evaluate is evaluated here,
// which says why and stops.
func (b *breakpoints) hit(r *Rank, tid int, addr uint64, how hitSource) (bool, stopInfo) {
	ctx, cancel := context.WithTimeout(context.Background(), DefaultTimeout)
	defer cancel()
	mods, _ := r.sym.modules(ctx, false)
	b.mu.Lock()
	var matched []*Breakpoint
	for _, bp := range b.allUser() {
		if !bp.Ranks.Contains(r.Num) {
			continue
		}
		for _, a := range bp.addrsFor(mods) {
			if a == addr {
				matched = append(matched, bp)
				break
			}
		}
	}
	b.mu.Unlock()
	info := stopInfo{reason: "breakpoint", tid: tid}
	if len(matched) == 0 {
		if b.isUserSite(r, addr) {
			return true, info
		}
		// The agent reports a Breakpoint only for a trap it planted, so this is one that was
		// removed after the thread hit it (a temporary one of a step that has ended, or a
		// breakpoint the user cleared while this hit waited behind another stop). The agent
		// put the thread back on addr, where the original instruction stands again: it runs
		// as if the trap had never been there.
		b.j.logf("rank %d: hit of removed breakpoint %#x: go on", r.Num, addr)
		return false, info
	}
	stop := false
	for _, bp := range matched {
		if bp.Kind == bpEntry {
			b.mu.Lock()
			b.passed[r] = true // not planted on this rank again
			b.mu.Unlock()
			go b.sync(context.Background(), []*Rank{r})
			return true, stopInfo{reason: "entry", tid: tid}
		}
		if (how != hitTrap || !b.agentDecided(r, addr, bp)) && !b.metaHolds(ctx, r, tid, bp) {
			continue
		}
		stop = true
		info.bps = append(info.bps, bp.ID)
		switch bp.Kind {
		case BPFunction:
			info.reason = "function breakpoint"
		case BPInstruction:
			info.reason = "instruction breakpoint"
		}
	}
	return stop, info
}

// hitSource says how a breakpoint hit came to the front end.
type hitSource int

const (
	hitTrap    hitSource = iota // the agent reported the trap (and decided it, if it holds a condition)
	hitCondErr                  // the agent reported the trap: its condition could not be evaluated
	hitStep                     // a step of the front end's arrived at the breakpoint's address
)

// metaHolds applies a hit breakpoint's condition, hit condition and log message, the same for
// every kind: it reports whether the hit stops the rank.
func (b *breakpoints) metaHolds(ctx context.Context, r *Rank, tid int, bp *Breakpoint) bool {
	b.mu.Lock()
	m, id := bp.BPMeta, bp.ID
	b.mu.Unlock()
	ok, err := b.j.conditionHolds(ctx, r, tid, m.cond)
	if err != nil {
		b.j.output("console", fmt.Sprintf("rank %d: breakpoint %d: condition %q: %v\n", r.Num, id, m.cond, err))
		ok = true // as gdb does: an error in a condition stops
	}
	if !ok {
		return false
	}
	b.j.mu.Lock()
	r.hits[id]++
	n := r.hits[id]
	b.j.mu.Unlock()
	if m.hit != nil && !m.hit.holds(n) {
		return false
	}
	if m.log != nil {
		b.j.logPoint(ctx, r, tid, m.log)
		return false
	}
	return true
}

// hitCondition is a parsed hit condition, in the agents' terms (bpcode.HitOp), so that the
// front end and an agent decide a hit alike.
type hitCondition struct {
	op bpcode.HitOp
	n  int
}

// hitOps maps the spellings of a hit condition's operator to the agents' ("N" alone: HitGE).
var hitOps = []struct {
	text string
	op   bpcode.HitOp
}{{">=", bpcode.HitGE}, {"<=", bpcode.HitLE}, {"==", bpcode.HitEQ}, {">", bpcode.HitGT}, {"<", bpcode.HitLT},
	{"%", bpcode.HitMod}, {"=", bpcode.HitEQ}}

// parseHitCondition checks a hit condition: "N" (stop from the Nth hit on), ">= N", "> N",
// "== N", "< N", "<= N", "% N" (every Nth hit).
func parseHitCondition(s string) (op bpcode.HitOp, n int, err error) {
	s = strings.TrimSpace(s)
	op = bpcode.HitGE
	for _, o := range hitOps {
		if rest, ok := strings.CutPrefix(s, o.text); ok {
			op, s = o.op, strings.TrimSpace(rest)
			break
		}
	}
	n, err = strconv.Atoi(s)
	if err != nil || n < 0 || (op == bpcode.HitMod && n == 0) {
		return 0, 0, fmt.Errorf("hit condition %q: want a count, optionally after >=, >, ==, <=, < or %%", s)
	}
	return op, n, nil
}

// holds reports whether the hits-th hit satisfies h.
func (h hitCondition) holds(hits int) bool { return h.op.Holds(uint64(hits), uint64(h.n)) }

// logPart is a piece of a log message: text, then, when expr is set, the value of an
// expression (the message's {expr}).
type logPart struct {
	text    string
	expr    string
	hasExpr bool
}

// parseLogMessage splits a log message into text and {expressions}; a brace without its
// closing brace is text.
func parseLogMessage(msg string) []logPart {
	var parts []logPart
	for {
		i := strings.IndexByte(msg, '{')
		if i < 0 {
			break
		}
		k := strings.IndexByte(msg[i:], '}')
		if k < 0 {
			break
		}
		parts = append(parts, logPart{text: msg[:i], expr: msg[i+1 : i+k], hasExpr: true})
		msg = msg[i+k+1:]
	}
	return append(parts, logPart{text: msg})
}

// conditionHolds evaluates a breakpoint condition in the innermost frame of r's thread tid.
func (j *Job) conditionHolds(ctx context.Context, r *Rank, tid int, cond string) (bool, error) {
	if strings.TrimSpace(cond) == "" {
		return true, nil
	}
	ts, err := r.sym.stack(ctx, tid)
	if err != nil {
		return false, err
	}
	if len(ts.Frames) == 0 {
		return false, errors.New("no frame")
	}
	v, err := ts.Frames[0].Eval(cond)
	if err != nil {
		return false, err
	}
	return truthy(v)
}

// truthy reports whether a value is nonzero, as C's if does.
func truthy(v *symbols.Value) (bool, error) {
	if st := v.Type.Strip(); st != nil && st.Kind == symbols.KindFloat {
		f, err := v.Float()
		return f != 0, err
	}
	u, err := v.Uint()
	if err != nil {
		return false, err
	}
	return u != 0, nil
}

// logPoint prints a log point's message, {expressions} interpolated, as output of the rank.
func (j *Job) logPoint(ctx context.Context, r *Rank, tid int, msg []logPart) {
	ts, err := r.sym.stack(ctx, tid)
	var f *symbols.Frame
	if err == nil && len(ts.Frames) > 0 {
		f = ts.Frames[0]
	}
	var b strings.Builder
	for _, p := range msg {
		b.WriteString(p.text)
		switch {
		case !p.hasExpr:
		case f == nil:
			b.WriteString("<no frame>")
		default:
			if v, err := f.Eval(p.expr); err != nil {
				b.WriteString("<" + err.Error() + ">")
			} else {
				b.WriteString(v.String())
			}
		}
	}
	text := b.String()
	if !strings.HasSuffix(text, "\n") {
		text += "\n"
	}
	j.sendRankOutput("console", r.Num, text)
}
