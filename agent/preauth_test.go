package agent

import (
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// closedByAgent waits until the agent closes conn, reading and discarding what it sends; limit
// only keeps a broken agent from hanging the test.
func closedByAgent(t *testing.T, conn net.Conn, limit time.Duration) {
	t.Helper()
	conn.SetReadDeadline(time.Now().Add(limit))
	_, err := io.Copy(io.Discard, conn)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("connection %s still open after %v: the agent did not hang up", conn.LocalAddr(), limit)
	}
}

// TestPreAuthSlowloris: a peer that sends one byte and nothing more, on either plane, is hung
// up on once the hello deadline has passed instead of holding the connection for ever.
func TestPreAuthSlowloris(t *testing.T) {
	h := newHarness(t, "")
	for _, first := range []string{"C", "\x05"} {
		conn, err := net.Dial("tcp", h.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := conn.Write([]byte(first)); err != nil {
			t.Fatal(err)
		}
		closedByAgent(t, conn, 6*helloTimeout)
	}
}

// TestPreAuthMemoryBound: before the hello, a message may not be larger than a few KiB and
// must be a call. Many peers announcing a huge body are hung up on at once, without the agent
// reserving the body; so is a peer whose first message is a response, and a CDTI peer whose
// first frame is larger than a Hello needs.
func TestPreAuthMemoryBound(t *testing.T) {
	h := newHarness(t, "")
	var conns []net.Conn
	for range 150 {
		conn, err := net.Dial("tcp", h.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		fmt.Fprintf(conn, "Content-Length: %d\r\n\r\n{", 1<<20)
		conns = append(conns, conn)
	}
	// Every one of them is closed before the next two come, so that the cap on connections
	// waiting to authenticate (which closes a connection unread) cannot meet those two.
	for _, c := range conns {
		// Well within the hello deadline: a hang-up only that deadline caused is a failure.
		closedByAgent(t, c, helloTimeout/2)
	}
	conns = conns[:0]
	response := `{"jsonrpc":"2.0","id":1,"result":{}}`
	notHello, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer notHello.Close()
	fmt.Fprintf(notHello, "Content-Length: %d\r\n\r\n%s", len(response), response)
	conns = append(conns, notHello)
	bigCDTI, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer bigCDTI.Close()
	hdr := make([]byte, 32)
	hdr[0] = 0x05
	hdr[2], hdr[3] = 5100>>8, 5100&0xff                   // Hello
	hdr[20], hdr[21], hdr[22], hdr[23] = 0, 0, 0xff, 0xf0 // 65520 bytes
	bigCDTI.Write(hdr)
	conns = append(conns, bigCDTI)
	for _, c := range conns {
		// Well within the hello deadline: a hang-up only that deadline caused is a failure.
		closedByAgent(t, c, helloTimeout/2)
	}
	// The agent logs why after it has hung up: its log is read until it says so, or 10 s.
	for _, want := range []string{"bad Content-Length \"1048576\" (limit 4096)", "management message before hello: not a call",
		"Hello of 65520 bytes (limit 4096)"} {
		for deadline := time.Now().Add(10 * time.Second); !strings.Contains(h.logBuf.String(), want); {
			if time.Now().After(deadline) {
				t.Errorf("agent log lacks %q", want)
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// TestPreAuthConnectionCap: at most maxPreAuthConns connections may wait to authenticate; the
// next is closed at once.
func TestPreAuthConnectionCap(t *testing.T) {
	h := newHarness(t, "")
	for range maxPreAuthConns {
		conn, err := net.Dial("tcp", h.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
	}
	for h.a.preAuth.Load() < maxPreAuthConns {
		time.Sleep(time.Millisecond)
	}
	extra, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	closedByAgent(t, extra, helloTimeout/2)
	if want := fmt.Sprintf("refused: %d connections already waiting to authenticate", maxPreAuthConns); !strings.Contains(h.logBuf.String(), want) {
		t.Errorf("agent log lacks %q:\n%s", want, h.logBuf.String())
	}
}
