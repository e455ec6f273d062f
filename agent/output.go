package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"sync"
	"unicode/utf8"

	"github.com/sourcegraph/jsonrpc2"
)

// Output capture (SpawnSpec.CaptureOutput): each rank writes fd 1 and 2 into pipes of its own,
// which the agent drains continuously into an outputHub. The hub keeps a bounded history per
// rank and forwards every chunk to the management connections that called output.subscribe.

// OutputMethod is the JSON-RPC notification that carries a rank's output to subscribers.
const OutputMethod = "output"

// OutputParams is one output notification: a chunk of text (what one read of the rank's pipe
// returned, as valid UTF-8) or, once per stream, the end of that stream.
type OutputParams struct {
	Rank   int    `json:"rank"`
	Stream string `json:"stream"` // "stdout" or "stderr"
	Text   string `json:"text,omitempty"`
	EOF    bool   `json:"eof,omitempty"`
	// Seq numbers the rank's chunks from 1, by the agent that serves the rank; agents above
	// relay it unchanged, so that a chunk replayed to a new subscriber after a loss in the
	// tree is known for a repeat (mgmt.Subtree). A drop notice carries the number of the
	// last chunk it stands for.
	Seq uint64 `json:"seq,omitempty"`
}

// CapabilityOutput is announced in HelloResult.Capabilities when output capture is on.
const CapabilityOutput = "output"

const (
	outputReadSize     = 64 << 10 // one read of a pipe, so one chunk, at most
	outputHistoryLimit = 1 << 20  // text kept per rank for later subscribers
	relayHistoryLimit  = 64 << 10 // text kept per rank of an agent below (its agent keeps more)
	outputQueueLimit   = 8 << 20  // text queued per subscriber beyond its replay
)

// OutputSubscribeParams are the parameters of output.subscribe: After gives, by rank, the
// sequence number of the last chunk the subscriber has (from another agent, before a loss in
// the tree, or from an earlier subscription), so that the history it is sent starts after it.
type OutputSubscribeParams struct {
	After map[int]uint64 `json:"after,omitempty"`
}

// outputHub collects the ranks' output and fans it out to subscribers. It never blocks a
// reader: history is bounded by dropping its oldest chunks, and a subscriber whose queue
// overflows is disconnected.
type outputHub struct {
	logf func(string, ...any)

	mu         sync.Mutex
	queueLimit int
	// sendBuffer, when nonzero, is the kernel send buffer of management connections: tests
	// shrink it so that a stalled reader's queue fills without megabytes held by the kernel.
	sendBuffer int
	hist       map[int]*outputHistory
	subs       map[*outputSub]struct{}
}

// outputHistory is one rank's kept output: events[head:] in order, text bytes counted.
type outputHistory struct {
	events      []OutputParams
	head        int
	bytes       int
	dropped     int    // text bytes removed to stay within the bound
	droppedFrom string // stream of the first removed chunk, where the notice goes
	droppedSeq  uint64 // the sequence number of the last removed chunk
	seq         uint64 // the last chunk's sequence number, for the rank's own output
	limit       int    // the bound of bytes
}

func newOutputHub(logf func(string, ...any)) *outputHub {
	return &outputHub{logf: logf, queueLimit: outputQueueLimit,
		hist: make(map[int]*outputHistory), subs: make(map[*outputSub]struct{})}
}

// setLimits sets the per-subscriber queue bound and the connections' send buffer (tests).
func (h *outputHub) setLimits(queue, sendBuffer int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.queueLimit, h.sendBuffer = queue, sendBuffer
}

func (h *outputHub) sendBufferSize() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.sendBuffer
}

// publish records ev and queues it for every subscriber.
func (h *outputHub) publish(ev OutputParams) { h.add(ev, false) }

// relay publishes a chunk of a rank of an agent below, keeping its sequence number.
func (h *outputHub) relay(ev OutputParams) { h.add(ev, true) }

func (h *outputHub) add(ev OutputParams, relayed bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	hs := h.hist[ev.Rank]
	if hs == nil {
		hs = &outputHistory{limit: outputHistoryLimit}
		if relayed {
			hs.limit = relayHistoryLimit
		}
		h.hist[ev.Rank] = hs
	}
	if !relayed {
		hs.seq++
		ev.Seq = hs.seq
	}
	hs.events = append(hs.events, ev)
	hs.bytes += len(ev.Text)
	for hs.bytes > hs.limit {
		// Drop the oldest text; end-of-stream markers stay (they carry no bytes).
		i := hs.head
		for hs.events[i].Text == "" {
			i++
		}
		old := hs.events[i]
		if hs.dropped == 0 {
			hs.droppedFrom = old.Stream
		}
		hs.dropped += len(old.Text)
		hs.droppedSeq = old.Seq
		hs.bytes -= len(old.Text)
		copy(hs.events[hs.head+1:i+1], hs.events[hs.head:i])
		hs.events[hs.head] = OutputParams{}
		hs.head++
	}
	if hs.head > 1024 && hs.head > len(hs.events)/2 {
		hs.events = append([]OutputParams(nil), hs.events[hs.head:]...)
		hs.head = 0
	}
	for s := range h.subs {
		if !s.push(ev) {
			delete(h.subs, s)
			h.logf("agent: output subscriber %s: more than %d bytes unread: disconnected", s.name, h.queueLimit)
			go s.conn.Close()
		}
	}
}

// subscribe queues the history of every rank after the chunks the subscriber has (after, by
// rank), in rank order, each preceded by a drop notice if some of what it lacks was dropped,
// for a new subscriber, which then gets every later chunk. The notice is numbered as the last
// chunk it stands for, so that one who had that chunk drops it as a repeat.
func (h *outputHub) subscribe(conn *jsonrpc2.Conn, name string, after map[int]uint64) *outputSub {
	h.mu.Lock()
	defer h.mu.Unlock()
	ranks := make([]int, 0, len(h.hist))
	for r := range h.hist {
		ranks = append(ranks, r)
	}
	sort.Ints(ranks)
	s := &outputSub{conn: conn, name: name, wake: make(chan struct{}, 1), done: make(chan struct{})}
	replay := 0
	for _, r := range ranks {
		hs := h.hist[r]
		if hs.dropped > 0 && hs.droppedSeq > after[r] {
			s.queue = append(s.queue, OutputParams{Rank: r, Stream: hs.droppedFrom, Seq: hs.droppedSeq,
				Text: fmt.Sprintf("[hpcdap: %d bytes of output dropped]\n", hs.dropped)})
		}
		for _, ev := range hs.events[hs.head:] {
			if ev.Seq > after[r] {
				s.queue = append(s.queue, ev)
				replay += len(ev.Text)
			}
		}
	}
	s.queued = replay
	s.limit = replay + h.queueLimit
	h.subs[s] = struct{}{}
	go s.run()
	s.signal()
	return s
}

// unsubscribe stops forwarding to s.
func (h *outputHub) unsubscribe(s *outputSub) {
	h.mu.Lock()
	delete(h.subs, s)
	h.mu.Unlock()
	s.stop()
}

// outputSub is one subscribed management connection with its queue, written by run.
type outputSub struct {
	conn *jsonrpc2.Conn
	name string
	wake chan struct{}
	done chan struct{}
	once sync.Once

	mu     sync.Mutex
	queue  []OutputParams
	queued int // text bytes in queue
	limit  int
}

// push queues ev; false when the queue is over its bound (the subscriber must be dropped).
func (s *outputSub) push(ev OutputParams) bool {
	s.mu.Lock()
	if s.queued+len(ev.Text) > s.limit {
		s.mu.Unlock()
		return false
	}
	s.queue = append(s.queue, ev)
	s.queued += len(ev.Text)
	s.mu.Unlock()
	s.signal()
	return true
}

func (s *outputSub) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *outputSub) stop() { s.once.Do(func() { close(s.done) }) }

// run writes the queue as notifications until the subscription ends or a write fails.
func (s *outputSub) run() {
	for {
		select {
		case <-s.done:
			return
		case <-s.wake:
		}
		for {
			s.mu.Lock()
			batch := s.queue
			s.queue = nil
			s.mu.Unlock()
			if len(batch) == 0 {
				break
			}
			for _, ev := range coalesceLog(batch) {
				if err := s.conn.Notify(context.Background(), OutputMethod, ev); err != nil {
					s.stop()
					return
				}
				s.mu.Lock()
				s.queued -= len(ev.Text)
				s.mu.Unlock()
			}
		}
	}
}

// capturePipes creates the pipes of one rank's stdout and stderr and starts draining them
// into the hub once the rank has been spawned (start); the write ends go to the rank.
type capturePipes struct {
	rank       int
	readers    [2]*os.File
	writers    [2]*os.File
	streamName [2]string
}

func newCapturePipes(rank int) (*capturePipes, error) {
	c := &capturePipes{rank: rank, streamName: [2]string{"stdout", "stderr"}}
	for i := range 2 {
		r, w, err := os.Pipe()
		if err != nil {
			c.close()
			return nil, fmt.Errorf("agent: rank %d: %s pipe: %w", rank, c.streamName[i], err)
		}
		c.readers[i], c.writers[i] = r, w
	}
	return c, nil
}

// stdio is the rank's standard files: /dev/null (nil) for stdin, the pipes for 1 and 2.
func (c *capturePipes) stdio() []*os.File { return []*os.File{nil, c.writers[0], c.writers[1]} }

// start closes the agent's copies of the write ends and drains both pipes into hub.
func (c *capturePipes) start(hub *outputHub) {
	for i := range 2 {
		c.writers[i].Close()
		c.writers[i] = nil
		go drainOutput(c.readers[i], c.rank, c.streamName[i], hub)
	}
}

// close releases every end (the spawn failed).
func (c *capturePipes) close() {
	for i := range 2 {
		if c.readers[i] != nil {
			c.readers[i].Close()
		}
		if c.writers[i] != nil {
			c.writers[i].Close()
		}
	}
}

// drainOutput publishes what r yields, one chunk per read, until end of file.
func drainOutput(r io.ReadCloser, rank int, stream string, hub *outputHub) {
	defer r.Close()
	buf := make([]byte, outputReadSize)
	carry := 0
	for {
		n, err := r.Read(buf[carry:])
		if n > 0 {
			text, rest := decodeOutput(buf[:carry+n], false)
			if text != "" {
				hub.publish(OutputParams{Rank: rank, Stream: stream, Text: text})
			}
			carry = copy(buf, rest)
		}
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, os.ErrClosed) {
				hub.logf("agent: rank %d: read %s: %v", rank, stream, err)
			}
			if carry > 0 {
				text, _ := decodeOutput(buf[:carry], true)
				hub.publish(OutputParams{Rank: rank, Stream: stream, Text: text})
			}
			hub.publish(OutputParams{Rank: rank, Stream: stream, EOF: true})
			return
		}
	}
}

// decodeOutput turns b into valid UTF-8, each invalid byte becoming U+FFFD. Unless final, an
// incomplete multi-byte sequence at the end is not decoded but returned as rest, to be
// completed by the next read.
func decodeOutput(b []byte, final bool) (text string, rest []byte) {
	if !final {
		// Back up over at most utf8.UTFMax-1 trailing bytes that may start a longer sequence.
		for k := 1; k < utf8.UTFMax && k <= len(b); k++ {
			c := b[len(b)-k]
			if c < 0x80 {
				break
			}
			if utf8.RuneStart(c) {
				if !utf8.FullRune(b[len(b)-k:]) {
					rest = b[len(b)-k:]
					b = b[:len(b)-k]
				}
				break
			}
		}
	}
	if utf8.Valid(b) {
		return string(b), rest
	}
	out := make([]byte, 0, len(b)+8)
	for len(b) > 0 {
		r, size := utf8.DecodeRune(b)
		out = utf8.AppendRune(out, r) // RuneError for an invalid byte
		b = b[size:]
	}
	return string(out), rest
}

// coalesceLog joins adjacent log-point messages of one rank into one event, so that a burst of
// log-point hits goes out as few notifications.
func coalesceLog(batch []OutputParams) []OutputParams {
	out := batch[:0:0]
	for _, ev := range batch {
		if n := len(out); n > 0 && ev.Stream == LogStream && out[n-1].Stream == LogStream &&
			out[n-1].Rank == ev.Rank && len(out[n-1].Text) < outputReadSize {
			out[n-1].Text += ev.Text
			out[n-1].Seq = ev.Seq // the joined event stands for every chunk up to ev
			continue
		}
		out = append(out, ev)
	}
	return out
}
