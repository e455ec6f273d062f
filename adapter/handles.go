package adapter

import (
	"sync"

	"github.com/hpcdap/hpcdap/debugger"
	"github.com/hpcdap/hpcdap/symbols"
)

// handles maps the integers DAP hands out (frame ids, variables references) to what they
// stand for. Every handle belongs to one rank's stop and dies when that rank resumes (the
// job reports it: Events.StopOver), so a client can never read a frame of a stop that is
// over; other ranks' handles survive. They are the session's: the job knows nothing of them.
// Handles start at 1000 and are never 0 (go-dap omits 0).
type handles struct {
	mu     sync.Mutex
	next   int
	m      map[int]handle
	byRank map[int][]int
}

type handle struct {
	rank int
	v    any
}

func (h *handles) init() {
	h.mu.Lock()
	h.next = 1000
	h.m = map[int]handle{}
	h.byRank = map[int][]int{}
	h.mu.Unlock()
}

// add returns a new handle for v, owned by rank r.
func (h *handles) add(r int, v any) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.next++
	if h.next >= 1<<31-1 {
		h.next = 1000
	}
	id := h.next
	h.m[id] = handle{rank: r, v: v}
	h.byRank[r] = append(h.byRank[r], id)
	return id
}

// get returns the value of a live handle.
func (h *handles) get(id int) (any, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	e, ok := h.m[id]
	return e.v, ok
}

// dropAll forgets every handle (the job they belonged to is gone); new ones keep counting.
func (h *handles) dropAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.m = map[int]handle{}
	h.byRank = map[int][]int{}
}

// dropRank forgets every handle of rank r (its stop is over).
func (h *handles) dropRank(r int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, id := range h.byRank[r] {
		delete(h.m, id)
	}
	delete(h.byRank, r)
}

// frameRef is what a frame id stands for.
type frameRef struct {
	thread *debugger.Thread
	level  int // index in the thread's stack
	frame  *symbols.Frame
	ts     *debugger.ThreadStack
}

// varKind says what a variables reference expands to.
type varKind int

const (
	varLocals varKind = iota
	varArgs
	varRegisters
	varGlobals
	varValue // the children of a value
)

// varRef is what a variables reference stands for.
type varRef struct {
	kind  varKind
	frame *frameRef
	value *symbols.Value
	expr  string // the expression that names value ("p->next"), for evaluateName
	lo    int    // first element of an array slice (indexed children)
	count int    // elements of that slice (0: all)
}
