package threaddb

import (
	"errors"
	"fmt"
	"slices"
)

// maxThreads bounds a list walk, so that a corrupted (cyclic or runaway) list in target memory
// ends in an error instead of a hang.
const maxThreads = 1 << 20

// State is a thread's state as libthread_db reports it (td_thr_state_e), derived from the
// cancelhandling word.
type State int

const (
	// StateActive is a thread that has not begun to exit.
	StateActive State = iota
	// StateZombie is a thread that is exiting or has exited but has not been joined.
	StateZombie
	// StateUnknown is a thread whose descriptor says it has terminated.
	StateUnknown
)

// String names the state as libthread_db's td_thr_state_e does.
func (s State) String() string {
	switch s {
	case StateActive:
		return "active"
	case StateZombie:
		return "zombie"
	case StateUnknown:
		return "unknown"
	}
	return fmt.Sprintf("State(%d)", int(s))
}

// CancelHandling is the raw cancelhandling word of struct pthread. The bit meanings below are
// glibc's own (nptl/descr.h); libthread_db compiles them in rather than describing them.
type CancelHandling uint32

const (
	cancelStateBit = 1 << 0 // cancellation disabled
	cancelTypeBit  = 1 << 1 // asynchronous cancellation
	cancelingBit   = 1 << 2
	canceledBit    = 1 << 3
	exitingBit     = 1 << 4
	terminatedBit  = 1 << 5
)

// CancelDisabled reports pthread_setcancelstate(PTHREAD_CANCEL_DISABLE).
func (c CancelHandling) CancelDisabled() bool { return c&cancelStateBit != 0 }

// CancelAsync reports asynchronous cancellation: pthread_setcanceltype(PTHREAD_CANCEL_ASYNCHRONOUS),
// or a thread blocked in a cancellation point, which glibc makes asynchronous for the duration of
// the call.
func (c CancelHandling) CancelAsync() bool { return c&cancelTypeBit != 0 }

// Canceled reports a cancellation request that has been acted on or is pending.
func (c CancelHandling) Canceled() bool { return c&(cancelingBit|canceledBit) != 0 }

// Exiting reports a thread that has begun to exit.
func (c CancelHandling) Exiting() bool { return c&exitingBit != 0 }

// Terminated reports a thread that has finished exiting.
func (c CancelHandling) Terminated() bool { return c&terminatedBit != 0 }

// Thread is what the thread library knows of one thread: the fields libthread_db's
// td_thr_get_info reports.
type Thread struct {
	// LWP is the kernel thread id (the tid field). It is 0 for a thread that has exited but whose
	// descriptor is still listed (a joinable thread not yet joined).
	LWP int
	// Pthread is the thread's pthread_t: the address of its struct pthread. It is 0 for a thread
	// known only as an LWP: before the thread library is initialised, without a thread library,
	// or for an LWP that is on no thread list.
	Pthread uint64
	// StartRoutine is the function pointer given to pthread_create (0 for the initial thread). On
	// ppc64 big-endian (ELFv1) it is the address of a function descriptor in .opd.
	StartRoutine uint64
	Cancel       CancelHandling
	State        State
	// SchedPolicy and SchedPriority are the policy and priority last set through the pthread API.
	SchedPolicy   int32
	SchedPriority int32
	// ReportEvents is set when the debugger enabled thread event reporting for this thread.
	ReportEvents bool
}

// fieldSpan is the byte range of struct pthread holding every field a walk decodes, so each
// thread costs one read of that range rather than of the whole structure.
type fieldSpan struct {
	lo, hi uint64
}

var spanFields = []string{
	"pthread_list", "pthread_tid", "pthread_start_routine", "pthread_cancelhandling",
	"pthread_schedpolicy", "pthread_schedparam_sched_priority", "pthread_report_events",
}

func newFieldSpan(l *Library) (fieldSpan, error) {
	s := fieldSpan{lo: ^uint64(0)}
	for _, n := range spanFields {
		d, ok := l.descs[n]
		if !ok {
			continue
		}
		count := uint64(max(d.Count, 1))
		s.lo = min(s.lo, uint64(d.Offset))
		s.hi = max(s.hi, uint64(d.Offset)+count*d.Bytes())
	}
	if s.hi <= s.lo {
		return s, fmt.Errorf("threaddb: no struct pthread fields described")
	}
	return s, nil
}

// readThread reads and decodes the struct pthread at pd.
func (p *Process) readThread(pd uint64) (Thread, []byte, error) {
	buf := make([]byte, p.span.hi-p.span.lo)
	if err := p.read(pd+p.span.lo, buf, "struct pthread"); err != nil {
		return Thread{}, nil, err
	}
	t, err := p.decodeThread(pd, buf)
	return t, buf, err
}

// decodeThread decodes the fields of a struct pthread copy that starts at span.lo.
func (p *Process) decodeThread(pd uint64, buf []byte) (Thread, error) {
	t := Thread{Pthread: pd}
	get := func(name string) (uint64, error) {
		if _, ok := p.lib.descs[name]; !ok {
			return 0, nil
		}
		v, err := p.local(name, buf, pd+p.span.lo, pd, 0)
		if err != nil {
			return 0, fmt.Errorf("threaddb: decode struct pthread at %#x: %w", pd, err)
		}
		return v, nil
	}
	tid, err := get("pthread_tid")
	if err != nil {
		return t, err
	}
	t.LWP = int(int32(tid))
	if t.StartRoutine, err = get("pthread_start_routine"); err != nil {
		return t, err
	}
	ch, err := get("pthread_cancelhandling")
	if err != nil {
		return t, err
	}
	t.Cancel = CancelHandling(ch)
	pol, err := get("pthread_schedpolicy")
	if err != nil {
		return t, err
	}
	t.SchedPolicy = int32(pol)
	prio, err := get("pthread_schedparam_sched_priority")
	if err != nil {
		return t, err
	}
	t.SchedPriority = int32(prio)
	ev, err := get("pthread_report_events")
	if err != nil {
		return t, err
	}
	t.ReportEvents = ev != 0
	switch {
	case !t.Cancel.Exiting():
		t.State = StateActive
	case !t.Cancel.Terminated():
		t.State = StateZombie
	default:
		t.State = StateUnknown
	}
	return t, nil
}

// List walks the thread library's two thread lists (threads on user-provided stacks, which
// include the initial thread, then threads on stacks the library allocated) as libthread_db's
// td_ta_thr_iter does, and adds any LWP the kernel reports that no descriptor claims. Before the
// thread library is initialised, or without one, it reports the kernel's LWPs only and says so
// in the Status.
func (p *Process) List() (ThreadList, error) {
	if p.lib == nil {
		return p.lwpOnly(StatusNoLibrary)
	}
	h, err := p.heads()
	if errors.Is(err, ErrNotInitialized) {
		return p.lwpOnly(StatusNotInitialized)
	}
	if err != nil {
		return ThreadList{}, fmt.Errorf("threaddb: list threads of process %d: %w", p.pid, err)
	}
	if h.userNext == 0 {
		return p.lwpOnly(StatusNotInitialized)
	}
	p.markReady()
	seen := make(map[uint64]bool)
	var threads []Thread
	if threads, err = p.walk(h.user, h.userNext, threads, seen, "_dl_stack_user"); err != nil {
		return ThreadList{}, fmt.Errorf("threaddb: list threads of process %d: %w", p.pid, err)
	}
	if threads, err = p.walk(h.used, h.usedNext, threads, seen, "_dl_stack_used"); err != nil {
		return ThreadList{}, fmt.Errorf("threaddb: list threads of process %d: %w", p.pid, err)
	}
	if p.thr != nil {
		lwps, err := p.thr.LWPs()
		if err != nil {
			return ThreadList{}, fmt.Errorf("threaddb: list threads of process %d: LWPs: %w", p.pid, err)
		}
		known := make(map[int]bool, len(threads))
		for _, t := range threads {
			known[t.LWP] = true
		}
		for _, lwp := range sortLWPs(lwps, p.pid) {
			if !known[lwp] {
				threads = append(threads, Thread{LWP: lwp})
			}
		}
	}
	return ThreadList{Status: StatusReady, Threads: threads}, nil
}

// walk follows one circular thread list from its head, appending each thread.
func (p *Process) walk(head, next uint64, out []Thread, seen map[uint64]bool, name string) ([]Thread, error) {
	listOff := uint64(p.lib.descs["pthread_list"].Offset)
	for next != head {
		if next == 0 || next < listOff {
			return out, fmt.Errorf("threaddb: %s: corrupt list link %#x", name, next)
		}
		if seen[next] {
			return out, fmt.Errorf("threaddb: %s: list revisits %#x (cycle)", name, next)
		}
		if len(seen) >= maxThreads {
			return out, fmt.Errorf("threaddb: %s: more than %d threads", name, maxThreads)
		}
		seen[next] = true
		pd := next - listOff
		t, buf, err := p.readThread(pd)
		if err != nil {
			return out, fmt.Errorf("threaddb: %s: %w", name, err)
		}
		out = append(out, t)
		if next, err = p.local("list_t_next", buf, pd+p.span.lo, next, 0); err != nil {
			return out, fmt.Errorf("threaddb: %s: next link of %#x: %w", name, pd, err)
		}
	}
	return out, nil
}

// lwpOnly reports the kernel's LWPs without thread library information.
func (p *Process) lwpOnly(s Status) (ThreadList, error) {
	if p.thr == nil {
		return ThreadList{}, fmt.Errorf("threaddb: list threads of process %d (%v): no Threads to list LWPs", p.pid, s)
	}
	lwps, err := p.thr.LWPs()
	if err != nil {
		return ThreadList{}, fmt.Errorf("threaddb: list threads of process %d (%v): LWPs: %w", p.pid, s, err)
	}
	l := ThreadList{Status: s}
	for _, lwp := range sortLWPs(lwps, p.pid) {
		l.Threads = append(l.Threads, Thread{LWP: lwp})
	}
	return l, nil
}

// sortLWPs orders LWPs with the process id (the initial thread) first, then ascending.
func sortLWPs(lwps []int, pid int) []int {
	s := slices.Clone(lwps)
	slices.SortFunc(s, func(a, b int) int {
		switch {
		case a == b:
			return 0
		case a == pid:
			return -1
		case b == pid:
			return 1
		case a < b:
			return -1
		}
		return 1
	})
	return slices.Compact(s)
}

// MapLWP returns the thread running on an LWP (td_ta_map_lwp2thr followed by td_thr_get_info):
// the LWP's thread pointer leads to its struct pthread, whose tid field must name the LWP.
// Before the thread library is initialised it returns the initial thread by LWP only
// (Pthread 0), and ErrNotInitialized for any other LWP.
func (p *Process) MapLWP(lwp int) (Thread, error) {
	if p.lib == nil {
		return Thread{}, fmt.Errorf("threaddb: map LWP %d: %w", lwp, ErrNoThreadLibrary)
	}
	st, err := p.Status()
	if err != nil {
		return Thread{}, fmt.Errorf("threaddb: map LWP %d: %w", lwp, err)
	}
	if st == StatusNotInitialized {
		if lwp == p.pid {
			return Thread{LWP: lwp}, nil
		}
		return Thread{}, fmt.Errorf("threaddb: map LWP %d of process %d: %w", lwp, p.pid, ErrNotInitialized)
	}
	pd, err := p.lwpPthread(lwp)
	if err != nil {
		return Thread{}, err
	}
	t, _, err := p.readThread(pd)
	if err != nil {
		return Thread{}, fmt.Errorf("threaddb: map LWP %d: %w", lwp, err)
	}
	if t.LWP != lwp {
		return Thread{}, fmt.Errorf("threaddb: map LWP %d: struct pthread at %#x has tid %d", lwp, pd, t.LWP)
	}
	return t, nil
}

// MapThreadPointer returns the thread whose thread-pointer register holds tp (the FS base on
// x86_64, r13 on ppc64, as Threads.ThreadPointer returns it). It serves callers that hold a
// thread's registers rather than its LWP, such as a DWARF evaluator resolving thread-local
// storage for a frame.
func (p *Process) MapThreadPointer(tp uint64) (Thread, error) {
	if p.lib == nil {
		return Thread{}, fmt.Errorf("threaddb: map thread pointer %#x: %w", tp, ErrNoThreadLibrary)
	}
	if tp == 0 {
		return Thread{}, fmt.Errorf("threaddb: map thread pointer 0: TLS not set up")
	}
	pd, err := p.pthreadFromTP(tp)
	if err != nil {
		return Thread{}, fmt.Errorf("threaddb: map thread pointer %#x: %w", tp, err)
	}
	t, _, err := p.readThread(pd)
	if err != nil {
		return Thread{}, fmt.Errorf("threaddb: map thread pointer %#x: %w", tp, err)
	}
	return t, nil
}

// lwpPthread reads an LWP's thread pointer and converts it to its struct pthread address.
func (p *Process) lwpPthread(lwp int) (uint64, error) {
	if lwp <= 0 {
		return 0, fmt.Errorf("threaddb: map LWP %d: not a thread id", lwp)
	}
	if p.thr == nil {
		return 0, fmt.Errorf("threaddb: map LWP %d: no Threads to read the thread pointer", lwp)
	}
	tp, err := p.thr.ThreadPointer(lwp)
	if err != nil {
		return 0, fmt.Errorf("threaddb: map LWP %d: thread pointer: %w", lwp, err)
	}
	if tp == 0 {
		return 0, fmt.Errorf("threaddb: map LWP %d: thread pointer is 0", lwp)
	}
	pd, err := p.pthreadFromTP(tp)
	if err != nil {
		return 0, fmt.Errorf("threaddb: map LWP %d: %w", lwp, err)
	}
	return pd, nil
}

// MapPthread returns the thread whose pthread_t is pt, with its LWP (0 if the thread has exited
// and awaits a join). The descriptor must be linked into a list: its neighbours must point back
// at it, which rejects stale or wild pthread_t values without walking every thread.
func (p *Process) MapPthread(pt uint64) (Thread, error) {
	if p.lib == nil {
		return Thread{}, fmt.Errorf("threaddb: map pthread_t %#x: %w", pt, ErrNoThreadLibrary)
	}
	if pt == 0 {
		st, err := p.Status()
		if err != nil {
			return Thread{}, fmt.Errorf("threaddb: map pthread_t 0: %w", err)
		}
		if st == StatusNotInitialized {
			return Thread{LWP: p.pid}, nil
		}
		return Thread{}, fmt.Errorf("threaddb: map pthread_t 0: not a thread")
	}
	t, buf, err := p.readThread(pt)
	if err != nil {
		return Thread{}, fmt.Errorf("threaddb: map pthread_t %#x: %w", pt, err)
	}
	node := pt + uint64(p.lib.descs["pthread_list"].Offset)
	next, err := p.local("list_t_next", buf, pt+p.span.lo, node, 0)
	if err != nil {
		return Thread{}, fmt.Errorf("threaddb: map pthread_t %#x: %w", pt, err)
	}
	if _, ok := p.lib.descs["list_t_prev"]; ok {
		prev, err := p.local("list_t_prev", buf, pt+p.span.lo, node, 0)
		if err != nil {
			return Thread{}, fmt.Errorf("threaddb: map pthread_t %#x: %w", pt, err)
		}
		back, err := p.fetch("list_t_prev", next, 0, "list neighbour's prev link")
		if err != nil {
			return Thread{}, fmt.Errorf("threaddb: map pthread_t %#x: %w", pt, err)
		}
		fwd, err := p.fetch("list_t_next", prev, 0, "list neighbour's next link")
		if err != nil {
			return Thread{}, fmt.Errorf("threaddb: map pthread_t %#x: %w", pt, err)
		}
		if back != node || fwd != node {
			return Thread{}, fmt.Errorf("threaddb: map pthread_t %#x: not on a thread list (neighbours link to %#x and %#x)", pt, back, fwd)
		}
	}
	return t, nil
}

// NThreads returns the thread library's count of running threads (__nptl_nthreads, as
// td_ta_get_nthreads reports it), a cross-check for List.
func (p *Process) NThreads() (int, error) {
	if p.lib == nil {
		return 0, fmt.Errorf("threaddb: thread count: %w", ErrNoThreadLibrary)
	}
	addr, ok := p.vars["__nptl_nthreads"]
	if !ok {
		return 0, fmt.Errorf("threaddb: thread count: no __nptl_nthreads symbol in the loaded modules")
	}
	v, err := p.fetch("__nptl_nthreads", addr, 0, "__nptl_nthreads")
	if err != nil {
		return 0, fmt.Errorf("threaddb: thread count: %w", err)
	}
	return int(int32(v)), nil
}
