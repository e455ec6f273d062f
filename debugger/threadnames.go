package debugger

import (
	"context"
	"fmt"
	"hash/fnv"
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
		defer func() { plan.learned(rs.mem.recorded()) }()
	}
	list, err := p.List()
	if err != nil {
		return out
	}
	mods, _ := rs.modules(ctx, false)
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

// labelPlan is what labelling the threads of the first rank of a module layout read of its
// memory through CDTI (the thread library's list heads and thread descriptors: a few
// pages). Another rank of the same layout reads those ranges of its own memory with its
// thread list in one Query (listWithPlan), then labels its threads with no round trip per
// pointer followed: ranks of one program without address randomization keep that data at the
// same addresses. What a rank holds elsewhere (its data differs) is read as before, so the
// labels never depend on the plan, only the number of round trips does.
type labelPlan struct {
	once  sync.Once
	ready chan struct{} // closed when spans are known
	spans []memSpan
}

// learned records what the leading rank read and lets the others go (once: later calls do
// nothing).
func (p *labelPlan) learned(spans []memSpan) {
	p.once.Do(func() {
		p.spans = spans
		close(p.ready)
	})
}

// listWithPlan waits for plan to be learned and reads the rank's thread list and the plan's
// memory of the rank in one Query, the memory for threadLabels; nil when that fails (the
// caller lists the threads on its own).
func (rs *rankSymbols) listWithPlan(ctx context.Context, plan *labelPlan) []cdti.ThreadEntry {
	select {
	case <-plan.ready:
	case <-ctx.Done():
		return nil
	}
	res := rs.mem.prefetch(ctx, plan.spans, &cdti.GetThreadList{})
	if len(res) == 1 && res[0].Code == cdti.CmdSuccess {
		if a, ok := res[0].Ack.(*cdti.GetThreadListAck); ok && len(a.Threads) > 0 {
			return a.Threads
		}
	}
	return nil
}

// labelPlan returns the plan of the layout of mods, and whether the caller leads it (it
// labels its rank's threads as before and then calls learned).
func (j *Job) labelPlan(mods []*symbols.Module) (*labelPlan, bool) {
	// The layout's hash is its key: ranks whose layouts collide would only read ranges that
	// do not help them.
	h := fnv.New64a()
	for _, m := range mods {
		fmt.Fprintf(h, "%s@%#x;", m.Path, m.Bias)
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
