package debugger

import (
	"context"
	"fmt"
	"hash/fnv"
	"slices"
	"sync"

	"github.com/hpcdap/hpcdap/cdti"
	"github.com/hpcdap/hpcdap/symbols"
)

// threadLabel is what the thread library says of one thread, for its DAP name: the symbol of
// its start routine and its pthread_t (0 before the thread library is initialised, without one,
// or for an LWP on no thread list).
type threadLabel struct {
	routine string
	pthread uint64
}

// threadLabels reads the rank's thread list through threaddb and labels each LWP, best effort:
// a thread the library does not know keeps a name made of its LWP alone. lwps are the
// kernel's threads as just listed, which threaddb then need not ask for again. With a plan,
// the rank leads it (lead: what it reads is recorded for the others) or follows it (its
// data was read with its list, listWithPlan).
func (rs *rankSymbols) threadLabels(ctx context.Context, lwps []int, plan *labelPlan, lead bool) map[int]threadLabel {
	out := map[int]threadLabel{}
	if rs.ensure(ctx) != nil {
		return out // no symbols, no memory: the threads are named by their LWPs
	}
	// The thread library's data is read once here, not again at this stop: its pages are not
	// kept.
	defer rs.mem.dropScratch()
	rs.mu.Lock()
	rs.lwps = lwps
	rs.mu.Unlock()
	defer func() {
		rs.mu.Lock()
		rs.lwps = nil
		rs.mu.Unlock()
	}()
	p, err := rs.threadDB()
	if err != nil {
		return out
	}
	// Labelling is done once a rank (again only for threads it has not seen): the handle is
	// not kept for it, thread-local storage opens its own when a variable needs one.
	defer rs.dropThreadDB(p)
	if lead {
		rs.mem.recordFetches()
	}
	mods, _ := rs.modules(ctx, false)
	if lead {
		defer func() { plan.learned(mods, rs.mem.recorded()) }()
	}
	list, err := p.List()
	if err != nil {
		return out
	}
	proc := rs.newProcess(mods, 0)
	for _, t := range list.Threads {
		if t.LWP == 0 {
			continue // exited, awaiting a join: no kernel thread to show
		}
		l := threadLabel{pthread: t.Pthread}
		if t.StartRoutine != 0 {
			// On ppc64 ELFv1 the start routine is a function descriptor in .opd, which the
			// symbol table names after the function too.
			if sym, _, ok := proc.SymbolAt(t.StartRoutine); ok {
				l.routine = sym.Name
			}
		}
		out[t.LWP] = l
	}
	return out
}

// threadName is "rank 3 · worker (LWP 4242) 0x7f0c2a1fe6c0": the rank, the thread's role (main
// for the process leader, else its start routine when known), its LWP and, once the thread
// library knows the thread, its pthread_t as gdb's "info threads" shows it. Behind a BG/Q CNK
// the hardware thread that runs it follows the LWP: "(LWP 4242, core 3/thread 1)".
func threadName(r *Rank, lwp int, l threadLabel, hw string) string {
	role := l.routine
	if lwp == r.leader {
		role = "main"
	}
	if role == "" {
		role = "thread"
	}
	where := fmt.Sprintf("LWP %d", lwp)
	if hw != "" {
		where += ", " + hw
	}
	name := fmt.Sprintf("rank %d · %s (%s)", r.Num, role, where)
	if l.pthread != 0 {
		name += fmt.Sprintf(" %#x", l.pthread)
	}
	return name
}

// labelPlan is what labelling the threads of the first rank of a set of modules read of its
// memory through CDTI: the blocks of the thread library's list heads and thread descriptors
// that its reads used (2 KiB of three pages for a single-threaded rank), each range relative
// to a module (planSpan). Another rank of the same files rebases those ranges onto its own
// load addresses and reads them with its thread list in one Query (listWithPlan), then
// labels its threads with no round trip per pointer followed. Without address randomization
// the ranks of a program load their files at the same addresses; with it the kernel places
// a process's libraries and anonymous mmap regions (thread stacks and descriptors) top-down
// from one random base, so those ranges keep their distance from the libraries (the
// executable and the heap have bases of their own, and a thread created after a thread's
// malloc arena may lie elsewhere). What a rank holds elsewhere (its data differs) is read as
// before, so the labels never depend on the plan, only the number of round trips does.
type labelPlan struct {
	once  sync.Once
	ready chan struct{} // closed when spans are known
	spans []planSpan
}

// planSpan is a range of memory the leading rank read, as offsets from the load bias of the
// module that holds it or, for a range in no module (an anonymous mapping), of the module
// nearest to it.
type planSpan struct {
	module string // the module's path
	name   string // the module as the process's link map names it ("" the executable)
	lo, hi uint64 // offsets from its bias (modulo 2⁶⁴)
}

// learned records what the leading rank, whose modules are mods (the executable first, as
// rankSymbols lists them), read and lets the others go (once: later calls do nothing).
func (p *labelPlan) learned(mods []*symbols.Module, spans []memSpan) {
	p.once.Do(func() {
		for _, s := range spans {
			if m := nearestModule(mods, s); m != nil {
				ps := planSpan{module: m.Path, name: m.Path, lo: s.lo - m.Bias, hi: s.hi - m.Bias}
				if m == mods[0] {
					ps.name = ""
				}
				p.spans = append(p.spans, ps)
			}
		}
		close(p.ready)
	})
}

// rebased returns the plan's ranges at the load addresses of mods.
func (p *labelPlan) rebased(mods []*symbols.Module) []memSpan {
	var out []memSpan
	for _, s := range p.placed(mods) {
		if s.lo < s.hi {
			out = append(out, s)
		}
	}
	return out
}

// placed returns each of the plan's ranges at the load addresses of mods, in the plan's
// order: an empty span for one whose module mods lack (or that wraps around).
func (p *labelPlan) placed(mods []*symbols.Module) []memSpan {
	bias := make(map[string]uint64, len(mods))
	for _, m := range mods {
		if _, dup := bias[m.Path]; !dup {
			bias[m.Path] = m.Bias
		}
	}
	out := make([]memSpan, len(p.spans))
	for i, s := range p.spans {
		if b, ok := bias[s.module]; ok && s.lo+b < s.hi+b {
			out[i] = memSpan{s.lo + b, s.hi + b}
		}
	}
	return out
}

// commands returns the command list that reads the plan's ranges relative to their modules,
// after the commands first (the same list for every rank of the plan's files, wherever each
// loaded them), and the index of each range's first command.
func (p *labelPlan) commands(first ...cdti.Command) (cmds []cdti.Command, at []int) {
	return readCommands(first, len(p.spans), func(i int) []cdti.Command {
		s := p.spans[i]
		return cdti.SplitGetModuleMemory(0, s.name, s.lo, int(s.hi-s.lo), cdti.SpecAccessUseThreadState)
	})
}

// nearestModule returns the module of mods that holds s or, if none does, the one at the
// shortest distance from it; nil without modules.
func nearestModule(mods []*symbols.Module, s memSpan) *symbols.Module {
	var best *symbols.Module
	var bestDist uint64
	for _, m := range mods {
		var d uint64
		switch {
		case s.hi <= m.Lo:
			d = m.Lo - s.hi + 1
		case s.lo >= m.Hi:
			d = s.lo - m.Hi + 1
		}
		if best == nil || d < bestDist {
			best, bestDist = m, d
		}
	}
	return best
}

// listWithPlan waits for plan to be learned and reads the rank's thread list and the plan's
// memory of the rank (rebased onto mods, its modules) in one Query, the memory for
// threadLabels; nil when that fails (the caller lists the threads on its own).
func (rs *rankSymbols) listWithPlan(ctx context.Context, plan *labelPlan, mods []*symbols.Module) []cdti.ThreadEntry {
	select {
	case <-plan.ready:
	case <-ctx.Done():
		return nil
	}
	res := rs.mem.prefetch(ctx, plan.rebased(mods), &cdti.GetThreadList{})
	if len(res) == 1 && res[0].Code == cdti.CmdSuccess {
		if a, ok := res[0].Ack.(*cdti.GetThreadListAck); ok && len(a.Threads) > 0 {
			return a.Threads
		}
	}
	return nil
}

// labelPlan returns the plan of the files of mods, and whether the caller leads it (it
// labels its rank's threads as before and then calls learned).
func (j *Job) labelPlan(mods []*symbols.Module) (*labelPlan, bool) {
	// The set of files is the key, whatever their load addresses; ranks whose sets collide
	// would only read ranges that do not help them.
	paths := make([]string, len(mods))
	for i, m := range mods {
		paths[i] = m.Path
	}
	slices.Sort(paths)
	h := fnv.New64a()
	for _, p := range paths {
		fmt.Fprintf(h, "%s;", p)
	}
	key := h.Sum64()
	j.labelMu.Lock()
	defer j.labelMu.Unlock()
	if p := j.labelPlans[key]; p != nil {
		return p, false
	}
	if j.labelPlans == nil {
		j.labelPlans = map[uint64]*labelPlan{}
	}
	p := &labelPlan{ready: make(chan struct{})}
	j.labelPlans[key] = p
	return p, true
}
