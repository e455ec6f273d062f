// Package dapclient is a small Debug Adapter Protocol client: it sends requests, matches
// responses to them, and queues events so that a caller can wait for them in order. hpcdap's
// demo drives the adapter with it, and the adapter's tests hold scripted conversations with it
// (against hpcdap and against other adapters such as lldb-vscode).
package dapclient

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Message is any DAP message as received: the envelope decoded, the body kept raw.
type Message struct {
	Seq        int             `json:"seq"`
	Type       string          `json:"type"`
	Command    string          `json:"command,omitempty"`
	Event      string          `json:"event,omitempty"`
	RequestSeq int             `json:"request_seq,omitempty"`
	Success    bool            `json:"success,omitempty"`
	Message    string          `json:"message,omitempty"`
	Body       json.RawMessage `json:"body,omitempty"`
	Arguments  json.RawMessage `json:"arguments,omitempty"`
	Raw        []byte          `json:"-"`
}

// Decode unmarshals the message's body into v.
func (m *Message) Decode(v any) error {
	if len(m.Body) == 0 {
		return fmt.Errorf("%s%s: no body", m.Command, m.Event)
	}
	return json.Unmarshal(m.Body, v)
}

// ResponseError is a response with success false.
type ResponseError struct {
	Command string
	Message string
	ID      int
}

// Error words the failure as "command: message".
func (e *ResponseError) Error() string { return fmt.Sprintf("%s: %s", e.Command, e.Message) }

// Client is one DAP connection. It is safe for concurrent use.
type Client struct {
	w io.WriteCloser
	r *bufio.Reader

	// OnSend and OnReceive, when set before the first request, see every message (for
	// transcripts and logs).
	OnSend    func(raw []byte)
	OnReceive func(m *Message)

	wmu     sync.Mutex
	mu      sync.Mutex
	cond    *sync.Cond
	seq     int
	pending map[int]chan *Message
	events  []*Message
	taken   []bool
	err     error
	done    chan struct{}
}

// New starts a client on a stream (the adapter's stdio, or a TCP connection).
func New(r io.Reader, w io.WriteCloser) *Client {
	c := &Client{w: w, r: bufio.NewReaderSize(r, 1<<20), pending: map[int]chan *Message{}, done: make(chan struct{})}
	c.cond = sync.NewCond(&c.mu)
	go c.readLoop()
	return c
}

// Close closes the write side.
func (c *Client) Close() error { return c.w.Close() }

// Done is closed when the connection's read side ends.
func (c *Client) Done() <-chan struct{} { return c.done }

func (c *Client) readLoop() {
	defer close(c.done)
	for {
		body, err := readFrame(c.r)
		if err != nil {
			c.mu.Lock()
			c.err = err
			for _, ch := range c.pending {
				close(ch)
			}
			c.pending = map[int]chan *Message{}
			c.cond.Broadcast()
			c.mu.Unlock()
			return
		}
		m := &Message{Raw: body}
		if err := json.Unmarshal(body, m); err != nil {
			continue
		}
		if c.OnReceive != nil {
			c.OnReceive(m)
		}
		c.mu.Lock()
		switch m.Type {
		case "response":
			if ch := c.pending[m.RequestSeq]; ch != nil {
				delete(c.pending, m.RequestSeq)
				ch <- m
			} else if m.RequestSeq == 0 || !m.Success {
				// An error answer to something unparseable: keep it where tests can see it.
				c.events = append(c.events, m)
				c.taken = append(c.taken, false)
			}
		case "event":
			c.events = append(c.events, m)
			c.taken = append(c.taken, false)
		case "request":
			// Reverse requests (runInTerminal, startDebugging) are declined.
			go c.writeJSON(map[string]any{"type": "response", "request_seq": m.Seq, "command": m.Command,
				"success": false, "message": "not supported by this client"})
		}
		c.cond.Broadcast()
		c.mu.Unlock()
	}
}

// readFrame reads one Content-Length framed body.
func readFrame(r *bufio.Reader) ([]byte, error) {
	n := -1
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return nil, err
		}
		line = strings.TrimRight(line, "\r\n")
		if line == "" {
			if n >= 0 {
				break
			}
			continue
		}
		if v, ok := strings.CutPrefix(line, "Content-Length:"); ok {
			n, err = strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				return nil, fmt.Errorf("bad Content-Length %q", v)
			}
		}
	}
	b := make([]byte, n)
	_, err := io.ReadFull(r, b)
	return b, err
}

func (c *Client) writeJSON(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return c.WriteRaw(b)
}

// WriteRaw frames and sends bytes as one message, whatever they hold (malformed-input tests).
func (c *Client) WriteRaw(body []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.OnSend != nil {
		c.OnSend(body)
	}
	if _, err := fmt.Fprintf(c.w, "Content-Length: %d\r\n\r\n", len(body)); err != nil {
		return err
	}
	_, err := c.w.Write(body)
	return err
}

// WriteBytes sends bytes without framing (framing tests).
func (c *Client) WriteBytes(b []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_, err := c.w.Write(b)
	return err
}

// Send sends a request and returns a channel that receives its response.
func (c *Client) Send(command string, args any) (int, <-chan *Message, error) {
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return 0, nil, err
	}
	c.seq++
	seq := c.seq
	ch := make(chan *Message, 1)
	c.pending[seq] = ch
	c.mu.Unlock()
	req := map[string]any{"seq": seq, "type": "request", "command": command}
	if args != nil {
		req["arguments"] = args
	}
	if err := c.writeJSON(req); err != nil {
		return 0, nil, err
	}
	return seq, ch, nil
}

// DefaultTimeout bounds Request and WaitEvent.
var DefaultTimeout = 60 * time.Second

// Request sends a request and waits for its response (success or not).
func (c *Client) Request(command string, args any) (*Message, error) {
	_, ch, err := c.Send(command, args)
	if err != nil {
		return nil, err
	}
	select {
	case m, ok := <-ch:
		if !ok {
			return nil, fmt.Errorf("%s: connection closed: %v", command, c.Err())
		}
		return m, nil
	case <-time.After(DefaultTimeout):
		return nil, fmt.Errorf("%s: no response within %v", command, DefaultTimeout)
	}
}

// Call sends a request, fails on an error response, and decodes the body into out (if not nil).
func (c *Client) Call(command string, args any, out any) error {
	m, err := c.Request(command, args)
	if err != nil {
		return err
	}
	if !m.Success {
		re := &ResponseError{Command: command, Message: m.Message}
		var b struct {
			Error struct {
				ID int `json:"id"`
			} `json:"error"`
		}
		if json.Unmarshal(m.Body, &b) == nil {
			re.ID = b.Error.ID
		}
		return re
	}
	if out != nil {
		return m.Decode(out)
	}
	return nil
}

// Err returns why the connection ended.
func (c *Client) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// WaitEvent returns the oldest event named name not returned before, waiting up to timeout.
// match, if not nil, skips events it rejects (they stay available).
func (c *Client) WaitEvent(name string, timeout time.Duration, match func(*Message) bool) (*Message, error) {
	return c.WaitAny([]string{name}, timeout, match)
}

// WaitAny is WaitEvent for the first event with any of the names.
func (c *Client) WaitAny(names []string, timeout time.Duration, match func(*Message) bool) (*Message, error) {
	name := strings.Join(names, " or ")
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	deadline := time.Now().Add(timeout)
	timer := time.AfterFunc(timeout, func() {
		c.mu.Lock()
		c.cond.Broadcast()
		c.mu.Unlock()
	})
	defer timer.Stop()
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		for i, m := range c.events {
			if c.taken[i] || !want[m.Event] {
				continue
			}
			if match != nil && !match(m) {
				continue
			}
			c.taken[i] = true
			return m, nil
		}
		if c.err != nil {
			return nil, fmt.Errorf("waiting for %s event: connection closed: %v", name, c.err)
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("no %s event within %v", name, timeout)
		}
		c.cond.Wait()
	}
}

// Events returns every event received so far (taken or not).
func (c *Client) Events(name string) []*Message {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*Message
	for _, m := range c.events {
		if name == "" || m.Event == name {
			out = append(out, m)
		}
	}
	return out
}

// UnsolicitedErrors returns error responses that answered no request this client sent
// (answers to malformed input).
func (c *Client) UnsolicitedErrors() []*Message {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*Message
	for _, m := range c.events {
		if m.Type == "response" {
			out = append(out, m)
		}
	}
	return out
}

// ErrClosed is returned after the connection ended.
var ErrClosed = errors.New("dapclient: connection closed")
