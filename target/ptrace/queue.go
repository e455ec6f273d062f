//go:build linux && amd64

package ptrace

import (
	"sync"

	"github.com/hpcdap/hpcdap/target"
)

// eventQueue delivers a process's events in order without ever blocking the tracer's thread
// and without dropping any. Events the consumer has not taken yet wait in an unbounded slice;
// a forwarding goroutine moves them to the channel. In practice the backlog is bounded by the
// number of threads, because each stop waits for the agent to resume the thread before that
// thread can produce another event. The channel is closed after the last event (EventExit, or
// the end of Detach); a consumer must read it until then or the forwarder stays blocked.
type eventQueue struct {
	mu       sync.Mutex
	buf      []target.Event
	inflight bool // the forwarder holds an event it has taken from buf but not yet sent
	final    bool // no event will follow those in buf
	kick     chan struct{}
	out      chan target.Event
}

// queueCap is the channel buffer of an event queue.
const queueCap = 16

func newEventQueue() *eventQueue {
	q := &eventQueue{kick: make(chan struct{}, 1), out: make(chan target.Event, queueCap)}
	go q.forward()
	return q
}

// newHeldEventQueue returns a queue that only collects events until release; its channel does
// not exist before (Attach has not returned the process yet, so nobody can ask for it).
func newHeldEventQueue() *eventQueue {
	return &eventQueue{kick: make(chan struct{}, 1)}
}

// release makes the channel of a held queue, large enough for every event collected so far,
// puts them all in it and starts forwarding. Once it returns, each collected event can be
// received without blocking. Releasing a queue that is not held does nothing.
func (q *eventQueue) release() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.out != nil {
		return
	}
	q.out = make(chan target.Event, max(queueCap, len(q.buf)))
	for _, ev := range q.buf {
		q.out <- ev
	}
	q.buf = nil
	go q.forward()
}

func (q *eventQueue) push(ev target.Event) {
	q.mu.Lock()
	if q.final {
		q.mu.Unlock()
		return
	}
	if len(q.buf) == 0 && !q.inflight && q.out != nil {
		// Fast path: nothing is queued ahead of ev, so sending it directly keeps the order.
		select {
		case q.out <- ev:
			q.mu.Unlock()
			return
		default:
		}
	}
	q.buf = append(q.buf, ev)
	q.mu.Unlock()
	q.wake()
}

// end marks the stream complete: the channel is closed once the queued events are delivered.
func (q *eventQueue) end() {
	q.mu.Lock()
	q.final = true
	q.mu.Unlock()
	q.wake()
}

func (q *eventQueue) wake() {
	select {
	case q.kick <- struct{}{}:
	default:
	}
}

func (q *eventQueue) forward() {
	for range q.kick {
		for {
			q.mu.Lock()
			if len(q.buf) == 0 {
				final := q.final
				q.mu.Unlock()
				if final {
					close(q.out)
					return
				}
				break
			}
			ev := q.buf[0]
			q.buf[0] = target.Event{}
			q.buf = q.buf[1:]
			q.inflight = true
			q.mu.Unlock()
			q.out <- ev
			q.mu.Lock()
			q.inflight = false
			q.mu.Unlock()
		}
	}
}
