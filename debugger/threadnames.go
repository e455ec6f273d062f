package debugger

import (
	"context"
	"fmt"
)

// threadLabel is what the thread library says of one thread, for its DAP name: the symbol of
// its start routine and its pthread_t (0 before the thread library is initialised, without one,
// or for an LWP on no thread list).
type threadLabel struct {
	routine string
	pthread uint64
}

// threadLabels reads the rank's thread list through threaddb and labels each LWP, best effort:
// a thread the library does not know keeps a name made of its LWP alone.
func (rs *rankSymbols) threadLabels(ctx context.Context) map[int]threadLabel {
	out := map[int]threadLabel{}
	// The thread library's data is read once here, not again at this stop: its pages are not
	// kept.
	defer rs.mem.dropScratch()
	p, err := rs.threadDB()
	if err != nil {
		return out
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
