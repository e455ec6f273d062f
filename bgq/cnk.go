package bgq

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hpcdap/hpcdap/cdti"
)

// cnkFlag is the agent option that makes an hpcdap agent answer as a BG/Q Compute Node Kernel
// beyond what every agent does (extension commands refused with CmdInval, ack payloads in no
// fixed order): the one place to name it.
const cnkFlag = "--cnk"

// cnk is one compute node: its kernel, an hpcdap agent process serving the node's ranks.
type cnk struct {
	node  uint32
	ranks []uint32
	cmd   *exec.Cmd
	addr  string // the agent's CDTI address
	token string
	ended chan struct{} // closed when the agent process has exited
	err   error         // its exit status, once ended
}

// cnkSpec is what a compute node is started with.
type cnkSpec struct {
	hpcdap    string // the hpcdap binary
	emulator  string // qemu-ppc64, a name or a path
	node      uint32
	firstRank int
	ranks     int
	jobSize   int
	jobID     uint64
	argv      []string // the program and its arguments
	env       []string // the job's environment (added to the agent's)
	dir       string
	log       string // the agent's log file
	output    *os.File
}

// newToken returns a random session token.
func newToken() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("session token: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// startCNK starts the agent of one compute node, its ranks loaded and held before their first
// instruction, and waits for its listening line.
func startCNK(ctx context.Context, s cnkSpec) (*cnk, error) {
	token, err := newToken()
	if err != nil {
		return nil, err
	}
	args := []string{"agent", "--listen", "127.0.0.1:0", "--backend", "rsp", "--emulator", s.emulator,
		"--np", strconv.Itoa(s.ranks), "--first-rank", strconv.Itoa(s.firstRank),
		"--job-size", strconv.Itoa(s.jobSize), "--job-id", strconv.FormatUint(s.jobID, 10),
		"--kill-on-exit", "--log", s.log}
	args = append(args, cnkFlag)
	args = append(append(args, "--"), s.argv...)
	cmd := exec.Command(s.hpcdap, args...)
	cmd.Env = append(append(os.Environ(), s.env...), "HPCDAP_TOKEN="+token)
	cmd.Dir = s.dir
	cmd.Stderr = s.output
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("compute node %d: start the CNK: %w", s.node, err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("compute node %d: start the CNK: %w", s.node, err)
	}
	c := &cnk{node: s.node, cmd: cmd, token: token, ended: make(chan struct{})}
	for i := 0; i < s.ranks; i++ {
		c.ranks = append(c.ranks, uint32(s.firstRank+i))
	}
	line := make(chan string, 1)
	go func() {
		br := bufio.NewReader(out)
		l, _ := br.ReadString('\n')
		line <- l
		io.Copy(s.output, br) // anything else the agent prints
	}()
	go func() {
		c.err = cmd.Wait()
		close(c.ended)
	}()
	select {
	case l := <-line:
		addr, ok := strings.CutPrefix(strings.TrimSpace(l), "listening on ")
		if !ok {
			c.kill()
			return nil, fmt.Errorf("compute node %d: the CNK did not start (%v; see %s)", s.node, c.waitErr(), s.log)
		}
		c.addr = addr
		return c, nil
	case <-ctx.Done():
		c.kill()
		return nil, fmt.Errorf("compute node %d: start the CNK: %w", s.node, ctx.Err())
	}
}

// waitErr is the agent's exit status once it has ended.
func (c *cnk) waitErr() error {
	<-c.ended
	return c.err
}

// kill ends the agent (and, with --kill-on-exit, the ranks it spawned) and waits for it.
func (c *cnk) kill() {
	c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.ended:
	case <-time.After(10 * time.Second):
		c.cmd.Process.Kill()
		<-c.ended
	}
}

// dialLink opens the link of a toolctld to this CNK and authenticates it.
func (c *cnk) dialLink(ctx context.Context) (net.Conn, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", c.addr)
	if err != nil {
		return nil, fmt.Errorf("compute node %d: link to the CNK at %s: %w", c.node, c.addr, err)
	}
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	if err := hello(conn, []byte(c.token)); err != nil {
		conn.Close()
		return nil, fmt.Errorf("compute node %d: link to the CNK at %s: %w", c.node, c.addr, err)
	}
	conn.SetDeadline(time.Time{})
	return conn, nil
}

// hello is the tool side of the hpcdap Hello exchange (cdti.ProveHello) on a connection that
// no cdti.Client reads: the agent proves the token first, then the link does.
func hello(conn net.Conn, token []byte) error {
	_, err := cdti.ProveHello(token, func(m *cdti.Hello) (*cdti.HelloAck, error) {
		m.Header = cdti.Header{Service: cdti.ServiceToolctl, Version: cdti.ProtocolVersion}
		b, err := cdti.Encode(m)
		if err != nil {
			return nil, err
		}
		if err := cdti.WriteFrame(conn, b); err != nil {
			return nil, err
		}
		r, err := cdti.ReadFrame(conn)
		if err != nil {
			return nil, err
		}
		reply, err := cdti.DecodeMessage(r)
		if err != nil {
			return nil, err
		}
		ack, ok := reply.(*cdti.HelloAck)
		if !ok {
			return nil, fmt.Errorf("hello: answered by %v (%v)", reply.MessageType(), reply.Hdr().ReturnCode)
		}
		if ack.ReturnCode != cdti.Success {
			return nil, fmt.Errorf("hello: %v", ack.ReturnCode)
		}
		return ack, nil
	})
	if err != nil {
		return fmt.Errorf("hello: %w", err)
	}
	return nil
}
