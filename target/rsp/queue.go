package rsp

import (
	"sync"

	"github.com/hpcdap/hpcdap/target"
)

// eventQueue delivers events in order without ever blocking the producer: events wait in a
// slice until the consumer takes them from out.
type eventQueue struct {
	mu     sync.Mutex
	q      []target.Event
	ended  bool
	wakeup chan struct{}
	out    chan target.Event
	gone   chan struct{} // closed when nobody will read out any more
	once   sync.Once
}

func newEventQueue() *eventQueue {
	q := &eventQueue{wakeup: make(chan struct{}, 1), out: make(chan target.Event), gone: make(chan struct{})}
	go q.forward()
	return q
}

// push appends an event; pushes after end are dropped.
func (q *eventQueue) push(ev target.Event) {
	q.mu.Lock()
	if !q.ended {
		q.q = append(q.q, ev)
	}
	q.mu.Unlock()
	q.wake()
}

// end closes out once the queued events have been delivered.
func (q *eventQueue) end() {
	q.mu.Lock()
	q.ended = true
	q.mu.Unlock()
	q.wake()
}

func (q *eventQueue) wake() {
	select {
	case q.wakeup <- struct{}{}:
	default:
	}
}

func (q *eventQueue) forward() {
	for {
		q.mu.Lock()
		if len(q.q) == 0 {
			ended := q.ended
			q.mu.Unlock()
			if ended {
				close(q.out)
				return
			}
			select {
			case <-q.wakeup:
			case <-q.gone:
				close(q.out)
				return
			}
			continue
		}
		ev := q.q[0]
		q.q = q.q[1:]
		q.mu.Unlock()
		select {
		case q.out <- ev:
		case <-q.gone:
			close(q.out)
			return
		}
	}
}

// abandon ends delivery at once, dropping undelivered events.
func (q *eventQueue) abandon() {
	q.once.Do(func() { close(q.gone) })
	q.end()
}
