package debugger

import (
	"context"
	"fmt"
	"slices"

	"github.com/hpcdap/hpcdap/bpcode"
	"github.com/hpcdap/hpcdap/cdti"
	"github.com/hpcdap/hpcdap/symbols"
)

// Conditions decided next to the process. A breakpoint's condition and hit condition are
// compiled, per distinct binary and address, into a bpcode site that the rank's agent
// evaluates at every hit (cdti.SetTrapCondition): only the hits that stop are reported. What
// cannot be compiled, a log point, a trap that a step or another breakpoint shares, and an
// agent that answers CmdInval (a BG/Q CNK) leave the decision here, as before.

// compiledSite is a breakpoint's site compiled for one binary and link-time address, with
// the condition and hit condition it was compiled from.
type compiledSite struct {
	site []byte // bpcode.Site encoding; nil when it could not be compiled
	err  error
	cond string
	hit  hitCondition
	log  string // the log message's parts, printed
}

type siteKey struct {
	bin  *symbols.Binary
	addr uint64
}

// condCmd is one SetTrapCondition of a plan: site nil removes the agent's condition.
type condCmd struct {
	addr    uint64
	bias    uint64
	site    []byte
	bp      int  // the breakpoint it decides (0 when removing)
	carryOn bool // it replaces the agent's condition of the same breakpoint: count on from it
}

// syntaxError returns why a breakpoint's condition or a log message's expression is
// not an expression ("" when they parse), for a refusal at set time.
func (m BPMeta) syntaxError() string {
	if m.cond != "" {
		if err := symbols.CheckSyntax(m.cond); err != nil {
			return fmt.Sprintf("condition %q: %v", m.cond, err)
		}
	}
	for _, p := range m.log {
		if p.hasExpr {
			if err := symbols.CheckSyntax(p.expr); err != nil {
				return fmt.Sprintf("log message expression {%s}: %v", p.expr, err)
			}
		}
	}
	return ""
}

// hitOp is a hit condition as the agent takes it (nil: every hit counts).
func (h *hitCondition) hitOp() (bpcode.HitOp, uint64) {
	if h == nil {
		return bpcode.HitAny, 0
	}
	return h.op, uint64(h.n)
}

// agentSite works out what r's agent should decide at address a, wanted by the breakpoints
// want: the encoded site and the load bias, or nil when the front end decides. b.mu is held.
func (b *breakpoints) agentSite(r *Rank, mods []*symbols.Module, a uint64, want []*Breakpoint, s *site) ([]byte, uint64, int) {
	if r.node.noTrapConds.Load() || len(want) != 1 || (s != nil && s.temp > 0) {
		return nil, 0, 0
	}
	bp := want[0]
	if bp.Kind == bpEntry || (bp.log != nil && !r.node.output) || (bp.cond == "" && bp.hit == nil && bp.log == nil) {
		return nil, 0, 0
	}
	if bp.hit != nil && len(bp.addrsFor(mods)) > 1 {
		// Hits are counted per breakpoint, and an agent counts per address: a breakpoint of
		// several locations (inlined code, templates) with a hit condition is counted here.
		return nil, 0, 0
	}
	for _, m := range mods {
		for _, l := range bp.locs[m.Bin] {
			if l.Addr+m.Bias != a {
				continue
			}
			cs := b.compile(bp, m.Bin, l.Addr)
			if cs.site == nil {
				return nil, 0, 0
			}
			return cs.site, m.Bias, bp.ID
		}
	}
	return nil, 0, 0
}

// compile compiles bp's site for one binary and address, once for each condition, hit
// condition and log message; the first failure is said in the console. b.mu is held.
func (b *breakpoints) compile(bp *Breakpoint, bin *symbols.Binary, addr uint64) *compiledSite {
	k := siteKey{bin, addr}
	var hit hitCondition
	if bp.hit != nil {
		hit = *bp.hit
	}
	logKey := fmt.Sprint(bp.log)
	if cs := bp.compiled[k]; cs != nil && cs.cond == bp.cond && cs.hit == hit && cs.log == logKey {
		return cs
	}
	cs := &compiledSite{cond: bp.cond, hit: hit, log: logKey}
	site := &bpcode.Site{}
	site.HitOp, site.HitN = bp.hit.hitOp()
	what := ""
	if bp.cond != "" {
		if site.Cond, cs.err = bin.CompileCondition(bp.cond, addr); cs.err != nil {
			what = fmt.Sprintf("condition %q", bp.cond)
		}
	}
	for _, part := range bp.log {
		if cs.err != nil {
			break
		}
		lp := bpcode.LogPart{Text: part.text}
		if part.hasExpr {
			if lp.Expr, lp.Format, cs.err = bin.CompileValue(part.expr, addr); cs.err != nil {
				what = fmt.Sprintf("log message expression {%s}", part.expr)
			}
		}
		site.Log = append(site.Log, lp)
	}
	if cs.err == nil {
		cs.site = site.Encode()
	}
	if bp.compiled == nil {
		bp.compiled = map[siteKey]*compiledSite{}
	}
	bp.compiled[k] = cs
	if cs.err != nil && !bp.fallbackSaid {
		bp.fallbackSaid = true
		b.j.output("console", fmt.Sprintf("breakpoint %d: %s is evaluated by the debugger at each hit, not next to the process: %v\n",
			bp.ID, what, cs.err))
	}
	return cs
}

// planConds adds to p the condition commands that make r's agent decide what it should at
// each trap the plan keeps. b.mu is held.
func (b *breakpoints) planConds(p *trapPlan, mods []*symbols.Module, sites map[uint64]*site) {
	addrs := make([]uint64, 0, len(p.want))
	for a := range p.want {
		addrs = append(addrs, a)
	}
	slices.Sort(addrs)
	for _, a := range addrs {
		s := sites[a]
		site, bias, id := b.agentSite(p.r, mods, a, p.want[a], s)
		sent := ""
		if s != nil {
			sent = s.sentCond
		}
		if string(site) == sent && (site == nil || s.condBP == id) {
			continue
		}
		if site == nil && sent == "" {
			continue
		}
		p.conds = append(p.conds, condCmd{addr: a, bias: bias, site: site, bp: id,
			carryOn: site != nil && s != nil && s.sentCond != "" && s.condBP == id})
	}
}

// hitCount is a breakpoint's count of hits on one rank, as an agent hands it back.
type hitCount struct {
	bp   int
	hits int
}

// setHits records hit counts an agent handed back. j.mu must not be held.
func (j *Job) setHits(r *Rank, counts []hitCount) {
	if len(counts) == 0 {
		return
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	for _, c := range counts {
		r.hits[c.bp] = c.hits
	}
}

// condResult records the answer to one SetTrapCondition of r, and returns the hit count of
// the agent's condition it replaced, if any. b.mu is held.
func (b *breakpoints) condResult(r *Rank, sites map[uint64]*site, c *cdti.SetTrapCondition, bp int, code cdti.CmdReturnCode,
	ack *cdti.SetTrapConditionAck, err error) (hitCount, bool) {
	s := sites[c.Address]
	switch {
	case err == nil && code == cdti.CmdSuccess:
		var back hitCount
		had := false
		if s != nil {
			if s.sentCond != "" && s.condBP != 0 && s.condBP != bp && ack != nil {
				back, had = hitCount{s.condBP, int(ack.Hits)}, true
			}
			s.sentCond, s.condBP = string(c.Site), bp
		}
		return back, had
	case err == nil && code == cdti.CmdInval:
		if s != nil {
			s.sentCond, s.condBP = "", 0
		}
		if !r.node.noTrapConds.Swap(true) {
			b.j.output("console", fmt.Sprintf("the agent of %s does not evaluate breakpoint conditions: the debugger evaluates them at each hit\n", r.node.host))
		}
	default:
		if s != nil {
			s.sentCond, s.condBP = "", 0
		}
		why := fmt.Sprint(err)
		if err == nil {
			why = code.String()
		}
		b.j.logf("rank %d: trap condition at %#x: %s", r.Num, c.Address, why)
	}
	return hitCount{}, false
}

// clearAgentCond takes the agent's condition off the trap at addr of r, for a step that
// needs every hit of it reported. It reports whether there was one.
func (b *breakpoints) clearAgentCond(ctx context.Context, r *Rank, addr uint64) bool {
	b.mu.Lock()
	s := b.sites[r][addr]
	if s == nil || s.sentCond == "" {
		b.mu.Unlock()
		return false
	}
	bp := s.condBP
	s.sentCond, s.condBP = "", 0
	b.mu.Unlock()
	res, err := r.node.client.Update(ctx, uint32(r.Num), &cdti.SetTrapCondition{Address: addr})
	if err != nil || res[0].Code != cdti.CmdSuccess {
		b.j.logf("rank %d: remove the trap condition at %#x: %v %v", r.Num, addr, err, res)
		return true
	}
	if ack, ok := res[0].Ack.(*cdti.SetTrapConditionAck); ok && bp != 0 {
		b.j.setHits(r, []hitCount{{bp, int(ack.Hits)}}) // the front end counts on from here
	}
	return true
}

// agentDecided reports whether r's agent decided the hit of bp at addr: it then reported it
// because it stops.
func (b *breakpoints) agentDecided(r *Rank, addr uint64, bp *Breakpoint) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.sites[r][addr]
	return s != nil && s.sentCond != "" && s.condBP == bp.ID
}
