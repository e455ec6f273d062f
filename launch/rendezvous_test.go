package launch

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hpcdap/hpcdap/cdti"
)

// registerAt runs an agent's side of a registration with the rendezvous at addr (the
// challenge, then agent.register for one rank) and waits until the front end closes the
// connection.
func registerAt(addr, token string, rank int) error {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	send := func(v any) error {
		b, _ := json.Marshal(v)
		_, err := fmt.Fprintf(c, "Content-Length: %d\r\n\r\n%s", len(b), b)
		return err
	}
	mine := cdti.NewNonce()
	if err := send(map[string]any{"jsonrpc": "2.0", "id": 1, "method": "agent.challenge", "params": map[string]any{"nonce": mine}}); err != nil {
		return err
	}
	r := bufio.NewReader(c)
	var ans struct {
		Result struct {
			Nonce []byte `json:"nonce"`
		} `json:"result"`
	}
	if err := readRPC(r, &ans); err != nil {
		return fmt.Errorf("rank %d: challenge: %w", rank, err)
	}
	reg := map[string]any{"proof": cdti.HelloProof([]byte(token), cdti.HelloRoleAgent, ans.Result.Nonce, mine),
		"node": "node1", "address": "127.0.0.1:1", "pid": 1, "ranks": []map[string]int{{"rank": rank, "pid": 1}}}
	if err := send(map[string]any{"jsonrpc": "2.0", "method": "agent.register", "params": reg}); err != nil {
		return err
	}
	io.Copy(io.Discard, r) // until the front end closes
	return nil
}

// More agents than the rendezvous buffers (a node of 256 ranks at 2 ranks per agent, a job of
// many nodes) register at once while the front end is busy: every registration reaches it,
// none is dropped because the buffer was full (the front end would wait its whole time limit
// for the dropped ones and fail naming them).
func TestRendezvousManyAgents(t *testing.T) {
	const token, n = "session-token", 200
	rv, err := listenRendezvous(token)
	if err != nil {
		t.Fatal(err)
	}
	defer rv.close()
	addr := fmt.Sprintf("127.0.0.1:%d", rv.port())
	var wg sync.WaitGroup
	var ended atomic.Int32
	errs := make(chan error, n)
	for r := range n {
		wg.Go(func() {
			if err := registerAt(addr, token, r); err != nil {
				errs <- err
			}
			ended.Add(1)
		})
	}
	// The front end reads nothing until the buffer is full and the registrations that came
	// after it have been handled (their connections closed), or a while has passed.
	for len(rv.regs) < cap(rv.regs) {
		time.Sleep(time.Millisecond)
	}
	for wait := time.Now().Add(3 * time.Second); int(ended.Load()) < n-cap(rv.regs) && time.Now().Before(wait); {
		time.Sleep(time.Millisecond)
	}
	got := map[int]bool{}
	for len(got) < n {
		select {
		case reg := <-rv.regs:
			got[reg.Ranks[0].Rank] = true
		case err := <-errs:
			t.Fatal(err)
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of %d registrations reached the front end", len(got), n)
		}
	}
	wg.Wait()
}
