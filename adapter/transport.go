package adapter

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"regexp"
	"strconv"
	"strings"

	"github.com/google/go-dap"
)

// MaxMessageSize bounds the body of one DAP message read from a client (go-dap's own bound).
// A larger message is discarded without being buffered and answered with an error response.
const MaxMessageSize = 4 << 20

// maxHeaderLine bounds one header line; a client that sends an endless header is cut off
// rather than buffered.
const maxHeaderLine = 1024

// frameError is a framing problem the session reports to the client and then survives: the
// stream is still positioned at the start of the next message.
type frameError struct {
	msg     string
	seq     int    // the request's seq when it could be recovered (0 otherwise)
	command string // likewise
}

func (e *frameError) Error() string { return e.msg }

// errStreamBroken marks a framing problem after which the stream cannot be resynchronised.
var errStreamBroken = errors.New("dap: stream broken")

// frameReader reads Content-Length framed messages with bounded headers and bodies. Headers
// other than Content-Length are ignored, as the base protocol allows.
type frameReader struct {
	r *bufio.Reader
}

func newFrameReader(r io.Reader) *frameReader {
	return &frameReader{r: bufio.NewReaderSize(r, 64<<10)}
}

// read returns the next message body. A *frameError means the message was unusable but the
// stream is intact; any other error ends the session.
func (f *frameReader) read() ([]byte, error) {
	length := -1
	sawHeader := false
	var bad string
	for {
		line, err := f.line()
		if err != nil {
			return nil, err
		}
		if line == "" {
			if !sawHeader {
				continue // stray blank line between messages
			}
			break
		}
		sawHeader = true
		name, value, ok := strings.Cut(line, ":")
		if !ok {
			bad = fmt.Sprintf("malformed header line %q", truncate(line, 80))
			continue
		}
		if strings.EqualFold(strings.TrimSpace(name), "Content-Length") {
			n, err := strconv.ParseInt(strings.TrimSpace(value), 10, 64)
			if err != nil || n < 0 {
				bad = fmt.Sprintf("bad Content-Length %q", truncate(strings.TrimSpace(value), 40))
				continue
			}
			length = int(min(n, 1<<40))
		}
	}
	if length < 0 {
		if bad == "" {
			bad = "message without Content-Length header"
		}
		return nil, &frameError{msg: "dap: " + bad}
	}
	if bad != "" {
		if err := f.discard(length); err != nil {
			return nil, err
		}
		return nil, &frameError{msg: "dap: " + bad}
	}
	if length > MaxMessageSize {
		head, err := f.discardKeepingHead(length, 4096)
		if err != nil {
			return nil, err
		}
		fe := &frameError{msg: fmt.Sprintf("dap: message of %d bytes exceeds the limit of %d bytes", length, MaxMessageSize)}
		fe.seq, fe.command = scanEnvelope(head)
		return nil, fe
	}
	body := make([]byte, length)
	if _, err := io.ReadFull(f.r, body); err != nil {
		return nil, err
	}
	return body, nil
}

// line reads one header line terminated by "\r\n" (a bare "\n" is tolerated).
func (f *frameReader) line() (string, error) {
	var b []byte
	for {
		c, err := f.r.ReadByte()
		if err != nil {
			return "", err
		}
		if c == '\n' {
			return strings.TrimSuffix(string(b), "\r"), nil
		}
		if len(b) >= maxHeaderLine {
			return "", fmt.Errorf("%w: header line longer than %d bytes", errStreamBroken, maxHeaderLine)
		}
		b = append(b, c)
	}
}

func (f *frameReader) discard(n int) error {
	_, err := io.CopyN(io.Discard, f.r, int64(n))
	return err
}

// discardKeepingHead skips n bytes and returns their first keep bytes.
func (f *frameReader) discardKeepingHead(n, keep int) ([]byte, error) {
	keep = min(keep, n)
	head := make([]byte, keep)
	if _, err := io.ReadFull(f.r, head); err != nil {
		return nil, err
	}
	return head, f.discard(n - keep)
}

var (
	seqRE     = regexp.MustCompile(`"seq"\s*:\s*(\d{1,9})`)
	commandRE = regexp.MustCompile(`"command"\s*:\s*"([A-Za-z0-9_/.\-]{1,64})"`)
)

// scanEnvelope recovers seq and command from the start of a message too large (or too broken)
// to decode, so that the error response can name the request.
func scanEnvelope(b []byte) (int, string) {
	seq := 0
	if m := seqRE.FindSubmatch(b); m != nil {
		seq, _ = strconv.Atoi(string(m[1]))
	}
	cmd := ""
	if m := commandRE.FindSubmatch(b); m != nil {
		cmd = string(m[1])
	}
	return seq, cmd
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// envelope is the part of every DAP message needed to answer it, decoded leniently.
type envelope struct {
	Seq       json.RawMessage `json:"seq"`
	Type      json.RawMessage `json:"type"`
	Command   json.RawMessage `json:"command"`
	Arguments json.RawMessage `json:"arguments"`
	// Fields of responses and events, which go-dap's decoder checks in any message.
	Success json.RawMessage `json:"success"`
	Event   json.RawMessage `json:"event"`
}

// decodeError is a message that arrived whole but cannot be handled; it is answered with an
// error response naming seq and command when they could be read.
type decodeError struct {
	seq     int
	command string
	msg     string
	id      int
}

func (e *decodeError) Error() string { return e.msg }

// codec decodes client messages: go-dap's types, hpcdap's custom requests, and the newer DAP
// arguments go-dap v0.12.0 lacks (decoded into this package's types).
type codec struct {
	base      *dap.Codec
	overrides map[string]func() dap.Message
	// decoded holds, for each request command go-dap decoded, the type it decoded it into
	// (nil when go-dap gives that command's requests defaults): the next ones of that
	// command are decoded in one pass over the body instead of go-dap's two. Only the
	// connection's reader decodes.
	decoded map[string]reflect.Type
}

func newCodec() *codec {
	c := &codec{base: dap.NewCodec(), overrides: map[string]func() dap.Message{}, decoded: map[string]reflect.Type{}}
	for name, ctor := range customRequests {
		ctor := ctor
		c.base.RegisterRequest(name, func() dap.Message { return ctor() }, func() dap.Message { return &dap.Response{} })
	}
	c.overrides["dataBreakpointInfo"] = func() dap.Message { return &DataBreakpointInfoRequest{} }
	c.overrides["setDataBreakpoints"] = func() dap.Message { return &SetDataBreakpointsRequest{} }
	c.overrides["disconnect"] = func() dap.Message { return &DisconnectRequest{} }
	return c
}

// decode turns one body into a request. Anything that is not a well-formed request becomes a
// *decodeError.
func (c *codec) decode(body []byte) (dap.Message, *decodeError) {
	var env envelope
	if err := json.Unmarshal(body, &env); err != nil {
		seq, cmd := scanEnvelope(body)
		return nil, &decodeError{seq: seq, command: cmd, id: errMalformed, msg: fmt.Sprintf("malformed message: %v", jsonError(err))}
	}
	var typ, command string
	json.Unmarshal(env.Type, &typ)
	json.Unmarshal(env.Command, &command)
	var seq int
	if env.Seq == nil || json.Unmarshal(env.Seq, &seq) != nil || seq < 0 {
		return nil, &decodeError{seq: 0, command: command, id: errMalformed, msg: `malformed message: "seq" must be a non-negative integer`}
	}
	if typ != "request" {
		if typ == "response" {
			// Answers to reverse requests (runInTerminal, startDebugging): the adapter sends
			// none today, so they are dropped rather than answered.
			return nil, nil
		}
		return nil, &decodeError{seq: seq, command: command, id: errMalformed, msg: fmt.Sprintf("message type %q is not a request", typ)}
	}
	if command == "" {
		return nil, &decodeError{seq: seq, id: errMalformed, msg: `request without "command"`}
	}
	if string(bytes.TrimSpace(env.Arguments)) == "[]" {
		// Empty arguments encoded as an empty array (Lua's JSON encoders cannot tell an empty
		// object from an empty list): the same as {}.
		body = emptyArguments(body)
	}
	if ctor, ok := c.overrides[command]; ok {
		m := ctor()
		if err := json.Unmarshal(body, m); err != nil {
			return nil, &decodeError{seq: seq, command: command, id: errMalformed, msg: fmt.Sprintf("%s: bad arguments: %v", command, jsonError(err))}
		}
		return m, nil
	}
	if t := c.decoded[command]; t != nil && env.Success == nil && env.Event == nil {
		m := reflect.New(t).Interface().(dap.Message)
		if env.Arguments == nil {
			// The envelope was all there was to read (threads, configurationDone).
			r := m.(dap.RequestMessage).GetRequest()
			r.Seq, r.Type, r.Command = seq, typ, command
			return m, nil
		}
		if err := json.Unmarshal(body, m); err != nil {
			return nil, &decodeError{seq: seq, command: command, id: errMalformed, msg: fmt.Sprintf("%s: bad arguments: %v", command, jsonError(err))}
		}
		return m, nil
	}
	m, err := c.base.DecodeMessage(body)
	if err != nil {
		var fe *dap.DecodeProtocolMessageFieldError
		if errors.As(err, &fe) {
			return nil, &decodeError{seq: seq, command: command, id: errUnsupported, msg: fmt.Sprintf("unsupported request %q", command)}
		}
		return nil, &decodeError{seq: seq, command: command, id: errMalformed, msg: fmt.Sprintf("%s: bad arguments: %v", command, jsonError(err))}
	}
	if _, seen := c.decoded[command]; !seen {
		c.decoded[command] = c.plainType(command, m)
	}
	return m, nil
}

// plainType returns the type of m, a request go-dap decoded, if go-dap makes each request of
// that command as the zero value of its type (initialize's has defaults; nil: not plain).
func (c *codec) plainType(command string, m dap.Message) reflect.Type {
	t := reflect.TypeOf(m)
	if t.Kind() != reflect.Pointer {
		return nil
	}
	name, err := json.Marshal(command)
	if err != nil {
		return nil
	}
	bare, err := c.base.DecodeMessage([]byte(`{"seq":0,"type":"request","command":` + string(name) + `}`))
	if err != nil {
		return nil
	}
	zero, ok := reflect.New(t.Elem()).Interface().(dap.RequestMessage)
	if !ok {
		return nil
	}
	zero.GetRequest().Type, zero.GetRequest().Command = "request", command
	if !reflect.DeepEqual(bare, zero) {
		return nil
	}
	return t.Elem()
}

// emptyArguments returns a request body with its "arguments" replaced by {}.
func emptyArguments(body []byte) []byte {
	var fields map[string]json.RawMessage
	if json.Unmarshal(body, &fields) != nil {
		return body
	}
	fields["arguments"] = json.RawMessage("{}")
	b, err := json.Marshal(fields)
	if err != nil {
		return body
	}
	return b
}

// jsonError words a JSON error for a user: which field had which wrong type.
func jsonError(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		field := te.Field
		if field == "" {
			field = "(message)"
		}
		return fmt.Sprintf("field %s: %s is not a valid %s", field, te.Value, te.Type)
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Sprintf("invalid JSON at byte %d: %v", se.Offset, err)
	}
	return err.Error()
}

// writeMessage frames one message.
func writeMessage(w io.Writer, m any) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	frame := make([]byte, 0, len(b)+32)
	frame = append(frame, "Content-Length: "...)
	frame = strconv.AppendInt(frame, int64(len(b)), 10)
	frame = append(append(frame, "\r\n\r\n"...), b...)
	_, err = w.Write(frame)
	return err
}
