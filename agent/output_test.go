package agent

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/hpcdap/hpcdap/cdti"
)

// mgmtClient is a management connection that reads answers and notifications.
type mgmtClient struct {
	t    testing.TB
	nc   net.Conn
	r    *bufio.Reader
	next int
}

type rpcMessage struct {
	ID     *int            `json:"id"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Message string `json:"message"`
	} `json:"error"`
}

func dialMgmt(t testing.TB, addr string) (*mgmtClient, HelloResult) {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	m := &mgmtClient{t: t, nc: nc, r: bufio.NewReader(nc)}
	var hello HelloResult
	mine := cdti.NewNonce()
	var ch ChallengeResult
	if err := m.call("hello.challenge", ChallengeParams{Nonce: mine}, &ch); err != nil {
		t.Fatalf("hello.challenge: %v", err)
	}
	if err := m.call("hello", HelloParams{Proof: cdti.HelloProof([]byte(testToken), cdti.HelloRoleTool, ch.Nonce, mine)}, &hello); err != nil {
		t.Fatalf("hello: %v", err)
	}
	return m, hello
}

// call sends a request and returns its answer; notifications before it are an error.
func (m *mgmtClient) call(method string, params, result any) error {
	m.t.Helper()
	m.next++
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": m.next, "method": method, "params": params})
	if _, err := fmt.Fprintf(m.nc, "Content-Length: %d\r\n\r\n%s", len(b), b); err != nil {
		return err
	}
	msg := m.read(20 * time.Second)
	if msg.ID == nil || *msg.ID != m.next {
		m.t.Fatalf("%s: got %+v, want the answer", method, msg)
	}
	if msg.Error != nil {
		return fmt.Errorf("%s", msg.Error.Message)
	}
	return json.Unmarshal(msg.Result, result)
}

func (m *mgmtClient) read(limit time.Duration) rpcMessage {
	m.t.Helper()
	m.nc.SetReadDeadline(time.Now().Add(limit))
	var msg rpcMessage
	if err := newBoundedCodec(true).ReadObject(m.r, &msg); err != nil {
		m.t.Fatalf("read management message: %v", err)
	}
	return msg
}

func (m *mgmtClient) subscribe() {
	m.t.Helper()
	var empty struct{}
	if err := m.call("output.subscribe", struct{}{}, &empty); err != nil {
		m.t.Fatalf("output.subscribe: %v", err)
	}
}

// streamKey names one stream of one rank.
type streamKey struct {
	rank   int
	stream string
}

// collected is what output notifications delivered, per stream.
type collected struct {
	text   map[streamKey]*strings.Builder
	chunks map[streamKey][]string
	eofs   map[streamKey]int
}

// collect reads output notifications until every stream in want has ended.
func (m *mgmtClient) collect(want []streamKey) *collected {
	m.t.Helper()
	c := &collected{text: map[streamKey]*strings.Builder{}, chunks: map[streamKey][]string{}, eofs: map[streamKey]int{}}
	pending := len(want)
	for pending > 0 {
		msg := m.read(60 * time.Second)
		if msg.Method != OutputMethod || msg.ID != nil {
			m.t.Fatalf("unexpected message %+v", msg)
		}
		var p OutputParams
		if err := json.Unmarshal(msg.Params, &p); err != nil {
			m.t.Fatalf("output params %s: %v", msg.Params, err)
		}
		k := streamKey{p.Rank, p.Stream}
		if p.Stream != "stdout" && p.Stream != "stderr" {
			m.t.Fatalf("output stream %q", p.Stream)
		}
		if p.EOF {
			if p.Text != "" {
				m.t.Errorf("eof with text %q", p.Text)
			}
			c.eofs[k]++
			pending--
			continue
		}
		if c.eofs[k] > 0 {
			m.t.Errorf("rank %d %s: text after eof: %q", p.Rank, p.Stream, p.Text)
		}
		if c.text[k] == nil {
			c.text[k] = &strings.Builder{}
		}
		c.text[k].WriteString(p.Text)
		c.chunks[k] = append(c.chunks[k], p.Text)
	}
	return c
}

func (c *collected) String(k streamKey) string {
	if c.text[k] == nil {
		return ""
	}
	return c.text[k].String()
}

func allStreams(ranks int) []streamKey {
	var ks []streamKey
	for r := range ranks {
		ks = append(ks, streamKey{r, "stdout"}, streamKey{r, "stderr"})
	}
	return ks
}

// startRanks lets held spawned ranks run: a tool attaches to every rank and leaves.
func startRanks(t testing.TB, addr string, ranks int) {
	t.Helper()
	c, err := cdti.Dial(ctx(), "tcp", addr, cdti.ClientOptions{ToolID: 77, Token: []byte(testToken), Timeout: 30 * time.Second})
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	defer c.Close()
	if ack, err := c.Attach(ctx(), 0, cdti.RanksInNode, cdti.NewTag("start"), 50); err != nil || len(ack.Ranks) != ranks {
		t.Fatalf("attach: %+v %v", ack, err)
	}
	if _, err := c.Detach(ctx(), 0, cdti.RanksInNode); err != nil {
		t.Fatalf("detach: %v", err)
	}
}

// waitExited polls the ranks call until every rank has exited.
func waitExited(t testing.TB, m *mgmtClient) []RankInfo {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		var ranks []RankInfo
		if err := m.call("ranks", nil, &ranks); err != nil {
			t.Fatal(err)
		}
		done := true
		for _, r := range ranks {
			done = done && r.State == "exited"
		}
		if done {
			return ranks
		}
		if time.Now().After(deadline) {
			t.Fatalf("ranks never all exited: %+v", ranks)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// wantLines is what `output lines n` writes to one stream of one rank.
func wantLines(rank int, stream string, n int) string {
	var b strings.Builder
	word := map[string]string{"stdout": "out", "stderr": "err"}[stream]
	for i := range n {
		fmt.Fprintf(&b, "rank %d %s %d\n", rank, word, i)
	}
	return b.String()
}

func checkLines(t *testing.T, c *collected, ranks, n int) {
	t.Helper()
	for _, k := range allStreams(ranks) {
		if got, want := c.String(k), wantLines(k.rank, k.stream, n); got != want {
			t.Errorf("rank %d %s:\n got %q\nwant %q", k.rank, k.stream, got, want)
		}
		if c.eofs[k] != 1 {
			t.Errorf("rank %d %s: %d eofs", k.rank, k.stream, c.eofs[k])
		}
	}
}

func (h *harness) spawnCaptured(n int, argv ...string) {
	h.t.Helper()
	if err := h.a.SpawnRanks(SpawnSpec{Argv: argv, Count: n, CaptureOutput: true}); err != nil {
		h.t.Fatalf("spawn: %v", err)
	}
}

// Four ranks print to both streams and end before anyone subscribes: a subscriber gets all of
// it replayed, each line under its rank and stream, in order, and one eof per stream; so does
// a second subscriber. Without capture, output.subscribe is refused and hello announces nothing.
func TestOutputReplay(t *testing.T) {
	h := newHarness(t, "")
	h.spawnCaptured(4, outputBin, "lines", "200")
	m, hello := dialMgmt(t, h.addr)
	if len(hello.Capabilities) != 1 || hello.Capabilities[0] != CapabilityOutput {
		t.Errorf("hello capabilities %q, want [output]", hello.Capabilities)
	}
	startRanks(t, h.addr, 4)
	for _, r := range waitExited(t, m) {
		if r.ExitStatus == nil || *r.ExitStatus != 0 {
			t.Errorf("rank %d exit %v", r.Rank, r.ExitStatus)
		}
	}
	m.subscribe()
	checkLines(t, m.collect(allStreams(4)), 4, 200)
	m2, _ := dialMgmt(t, h.addr)
	m2.subscribe()
	checkLines(t, m2.collect(allStreams(4)), 4, 200)

	plain := newHarness(t, "")
	plain.spawn(1, progBin, "loop", "1")
	pm, hello := dialMgmt(t, plain.addr)
	if len(hello.Capabilities) != 0 {
		t.Errorf("hello capabilities without capture: %q", hello.Capabilities)
	}
	var empty struct{}
	if err := pm.call("output.subscribe", struct{}{}, &empty); err == nil || !strings.Contains(err.Error(), "not captured") {
		t.Errorf("output.subscribe without capture: %v", err)
	}
}

// A rank writing 10 MiB with nobody reading runs to its end; a later subscriber gets one
// drop notice, then the most recent output, and the two add up to what the rank wrote.
func TestOutputFloodWithoutSubscriber(t *testing.T) {
	h := newHarness(t, "")
	const total = 10 << 20
	h.spawnCaptured(1, outputBin, "flood", fmt.Sprint(total))
	m, _ := dialMgmt(t, h.addr)
	startRanks(t, h.addr, 1)
	ranks := waitExited(t, m)
	if ranks[0].ExitStatus == nil || *ranks[0].ExitStatus != 0 {
		t.Fatalf("flooding rank: %+v", ranks[0])
	}
	m.subscribe()
	c := m.collect(allStreams(1))
	out := c.chunks[streamKey{0, "stdout"}]
	if len(out) < 2 {
		t.Fatalf("stdout chunks %d", len(out))
	}
	var dropped int
	if _, err := fmt.Sscanf(out[0], "[hpcdap: %d bytes of output dropped]\n", &dropped); err != nil ||
		out[0] != fmt.Sprintf("[hpcdap: %d bytes of output dropped]\n", dropped) {
		t.Fatalf("first chunk %q, want the drop notice", out[0])
	}
	kept := len(c.String(streamKey{0, "stdout"})) - len(out[0])
	// The last reads may still be under way when the rank is seen exited: they reach the
	// subscriber live, after the replayed history.
	if dropped+kept != total || kept > outputHistoryLimit+2*outputReadSize || kept < outputHistoryLimit-outputReadSize {
		t.Errorf("dropped %d + kept %d, want %d in all with about %d kept", dropped, kept, total, outputHistoryLimit)
	}
	// The kept text is the end of what the rank wrote.
	pattern := "0123456789abcdef\n"
	var whole strings.Builder
	for i := 0; whole.Len() < total; i++ {
		n := min(65536, total-whole.Len())
		for j := range n {
			whole.WriteByte(pattern[j%17])
		}
	}
	if !strings.HasSuffix(whole.String(), c.String(streamKey{0, "stdout"})[len(out[0]):]) {
		t.Error("kept output is not the end of what the rank wrote")
	}
	if got := c.String(streamKey{0, "stderr"}); got != "flood done\n" {
		t.Errorf("stderr %q", got)
	}
}

// Invalid bytes become U+FFFD; a euro sign split across two writes arrives whole.
func TestOutputUTF8(t *testing.T) {
	h := newHarness(t, "")
	h.spawnCaptured(1, outputBin, "utf8")
	m, _ := dialMgmt(t, h.addr)
	m.subscribe()
	startRanks(t, h.addr, 1)
	c := m.collect(allStreams(1))
	k := streamKey{0, "stdout"}
	// The oracle: Go's own decoding of the bytes the program writes (see testdata/output.c).
	raw := "a\xff\xfeb\nx\xe2\x82\xac y\n"
	var want strings.Builder
	for _, r := range raw {
		want.WriteRune(r)
	}
	if got := c.String(k); got != want.String() {
		t.Errorf("stdout %q, want %q", got, want.String())
	}
	for _, ch := range c.chunks[k] {
		if !utf8.ValidString(ch) {
			t.Errorf("chunk %q is not valid UTF-8", ch)
		}
	}
	if n := strings.Count(c.String(k), "\uFFFD"); n != 2 {
		t.Errorf("%d replacement characters, want 2 (the split euro sign must not become one)", n)
	}
	// The writes are 100 ms apart, so each is one read: the read ending in half a euro sign
	// gives "x" and the next one the whole sign.
	if !slices.Contains(c.chunks[k], "x") || !slices.Contains(c.chunks[k], "\u20ac y\n") {
		t.Errorf("chunks %q, want the euro sign held back from the read that split it", c.chunks[k])
	}
}

// A subscriber that stops reading is disconnected once its queue overflows; the ranks and the
// other subscriber go on undisturbed.
func TestOutputStalledSubscriber(t *testing.T) {
	h := newHarness(t, "")
	// A small bound, and output paced so that a reading subscriber keeps within it.
	h.a.output.setLimits(512<<10, 16<<10)
	const total = 1 << 20
	h.spawnCaptured(1, outputBin, "drip", fmt.Sprint(total))
	stalled, _ := dialMgmt(t, h.addr)
	stalled.nc.(*net.TCPConn).SetReadBuffer(4096)
	stalled.subscribe()
	live, _ := dialMgmt(t, h.addr)
	live.subscribe()
	startRanks(t, h.addr, 1)
	c := live.collect(allStreams(1))
	if got := len(c.String(streamKey{0, "stdout"})); got != total {
		t.Errorf("live subscriber got %d bytes of stdout, want %d", got, total)
	}
	if got := c.String(streamKey{0, "stderr"}); got != "flood done\n" {
		t.Errorf("stderr %q", got)
	}
	if r := waitExited(t, live)[0]; r.ExitStatus == nil || *r.ExitStatus != 0 {
		t.Errorf("rank: %+v", r)
	}
	// The stalled connection was closed by the agent: reading it reaches its end.
	stalled.nc.SetReadDeadline(time.Now().Add(30 * time.Second))
	buf := make([]byte, 1<<20)
	for {
		if _, err := stalled.nc.Read(buf); err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.Fatal("the stalled subscriber's connection was not closed")
			}
			break
		}
	}
	if n := strings.Count(h.logBuf.String(), "unread: disconnected"); n != 1 {
		t.Errorf("%d disconnections logged, want 1 (the stalled subscriber):\n%s", n, h.logBuf.String())
	}
	if strings.Contains(h.logBuf.String(), "NOSUCH") {
		t.Errorf("no log of the disconnection:\n%s", h.logBuf.String())
	}
}

// The built binary with --capture-output: four ranks, a subscriber from before they start
// gets every line live under the right rank and stream.
func TestBinaryCaptureOutput(t *testing.T) {
	ap := startAgentBinary(t, []string{"HPCDAP_TOKEN=" + testToken}, "--listen", "127.0.0.1:0", "--np", "4",
		"--capture-output", "--", outputBin, "lines", "100")
	addr := ap.listening(t)
	m, hello := dialMgmt(t, addr)
	if hello.Ranks != 4 || len(hello.Capabilities) != 1 || hello.Capabilities[0] != "output" {
		t.Fatalf("hello %+v", hello)
	}
	m.subscribe()
	startRanks(t, addr, 4)
	checkLines(t, m.collect(allStreams(4)), 4, 100)
	mgmtShutdown(t, addr, true)
	if err := ap.cmd.Wait(); err != nil {
		t.Errorf("agent exit: %v", err)
	}
	if s := ap.stderr.String(); strings.Contains(s, "rank 0 out") {
		t.Errorf("ranks' output reached the agent's stderr: %q", s)
	}
}

// FuzzDecodeOutput: however a byte stream is cut into reads, the chunks are valid UTF-8 and
// together decode it as Go's own string iteration does (each invalid byte a U+FFFD).
func FuzzDecodeOutput(f *testing.F) {
	f.Add([]byte("a\xff\xfeb\nx\xe2\x82\xac y\n"), uint8(7))
	f.Add([]byte("héllo wörld 日本語 🎉"), uint8(3))
	f.Add([]byte("\xf0\x9f\x8e"), uint8(1))
	f.Add([]byte("\xed\xa0\x80\xc0\xaf"), uint8(2))
	f.Fuzz(func(t *testing.T, data []byte, cut uint8) {
		step := int(cut%16) + 1
		var got strings.Builder
		var carry []byte
		for i := 0; i < len(data); i += step {
			buf := append(append([]byte(nil), carry...), data[i:min(i+step, len(data))]...)
			text, rest := decodeOutput(buf, false)
			if !utf8.ValidString(text) {
				t.Fatalf("chunk %q invalid", text)
			}
			if len(rest) >= utf8.UTFMax {
				t.Fatalf("carry %q too long", rest)
			}
			got.WriteString(text)
			carry = append([]byte(nil), rest...)
		}
		text, rest := decodeOutput(carry, true)
		if len(rest) != 0 {
			t.Fatalf("final decode left %q", rest)
		}
		got.WriteString(text)
		var want strings.Builder
		for _, r := range string(data) {
			want.WriteRune(r)
		}
		if got.String() != want.String() {
			t.Fatalf("decoded %q, want %q", got.String(), want.String())
		}
	})
}

// BenchmarkDecodeOutput measures the UTF-8 check and repair of one 64 KiB read.
func BenchmarkDecodeOutput(b *testing.B) {
	valid := []byte(strings.Repeat("rank 3 of 4: héllo 日本\n", outputReadSize/28))
	invalid := append([]byte(nil), valid...)
	for i := 0; i < len(invalid); i += 97 {
		invalid[i] = 0xff
	}
	for _, c := range []struct {
		name string
		data []byte
	}{{"valid", valid}, {"invalid", invalid}} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(c.data)))
			for b.Loop() {
				decodeOutput(c.data, false)
			}
		})
	}
}
