package agent

import (
	"bufio"
	"crypto/hmac"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hpcdap/hpcdap/cdti"
	"github.com/hpcdap/hpcdap/internal/testenv"
	"github.com/hpcdap/hpcdap/procimage"
)

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// hpcdapBinary builds the hpcdap command once.
func hpcdapBinary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		binPath = filepath.Join(buildDir, "hpcdap")
		out, err := exec.Command("go", "build", "-o", binPath, "github.com/hpcdap/hpcdap/cmd/hpcdap").CombinedOutput()
		if err != nil {
			binErr = err
			binPath = string(out)
		}
	})
	if binErr != nil {
		t.Fatalf("go build hpcdap: %v\n%s", binErr, binPath)
	}
	return binPath
}

// agentProc is a running `hpcdap agent`.
type agentProc struct {
	cmd    *exec.Cmd
	stdout *bufio.Reader
	stderr *syncBuffer
	addr   string
}

func startAgentBinary(t *testing.T, env []string, args ...string) *agentProc {
	t.Helper()
	needPrograms(t)
	cmd := exec.Command(hpcdapBinary(t), append([]string{"agent"}, args...)...)
	cmd.Env = append(withoutVar(os.Environ(), "HPCDAP_TOKEN"), env...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	ap := &agentProc{cmd: cmd, stdout: bufio.NewReader(stdout), stderr: &syncBuffer{}}
	cmd.Stderr = ap.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			t.Logf("agent stderr:\n%s", ap.stderr.String())
		}
	})
	return ap
}

// listening reads the "listening on" line.
func (ap *agentProc) listening(t *testing.T) string {
	t.Helper()
	line := make(chan string, 1)
	go func() {
		s, _ := ap.stdout.ReadString('\n')
		line <- s
	}()
	select {
	case s := <-line:
		addr, ok := strings.CutPrefix(strings.TrimSpace(s), "listening on ")
		if !ok {
			t.Fatalf("first stdout line %q", s)
		}
		ap.addr = addr
		return addr
	case <-time.After(20 * time.Second):
		t.Fatalf("no listening line; stderr:\n%s", ap.stderr.String())
	}
	return ""
}

func dialAgent(t *testing.T, addr string, id uint32) *testTool {
	t.Helper()
	c, err := cdti.Dial(ctx(), "tcp", addr, cdti.ClientOptions{ToolID: id, Token: []byte(testToken), Timeout: 30 * time.Second})
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { c.Close() })
	return &testTool{t: t, c: c, id: id}
}

// mgmtShutdown asks an agent to end through the management plane.
func mgmtShutdown(t *testing.T, addr string, kill bool) {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	r := bufio.NewReader(nc)
	writeHello(t, nc, r, 1, testToken, "")
	var hello HelloResult
	readRPC(t, r, &hello)
	writeRPC(t, nc, 2, "shutdown", ShutdownParams{Kill: kill})
	var empty struct{}
	readRPC(t, r, &empty)
}

// The built binary in spawn mode: two ranks, breakpoint hits counted on both, exit statuses,
// one line on stdout, shutdown through the management plane.
func TestBinarySpawn(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out")
	ap := startAgentBinary(t, []string{"HPCDAP_TOKEN=" + testToken}, "--listen", "127.0.0.1:0", "--np", "2",
		"--output", out, "--", progBin, "loop", "5")
	addr := ap.listening(t)
	tt := dialAgent(t, addr, 1)
	ack, err := tt.c.Attach(ctx(), 0, cdti.RanksInNode, cdti.NewTag("bin"), 99)
	if err != nil || len(ack.Ranks) != 2 {
		t.Fatalf("attach: %+v %v", ack, err)
	}
	hit := testenv.NMSymbol(t, progBin, "hit")
	for r := uint32(0); r < 2; r++ {
		// The ranks get their rank, not the session token the agent was started with.
		pid := tt.query(r, &cdti.GetProcessData{}).Ack.(*cdti.GetProcessDataAck).TGID
		env, err := os.ReadFile("/proc/" + strconv.Itoa(int(pid)) + "/environ")
		if err != nil {
			t.Fatal(err)
		}
		vars := strings.Split(string(env), "\x00")
		if hasPrefix(vars, "HPCDAP_TOKEN=") || !contains(vars, "HPCDAP_RANK="+strconv.Itoa(int(r))) {
			t.Errorf("rank %d environment %q", r, vars)
		}
		tt.control(r, int(syscall.SIGSTOP), cdti.DynamicNotifyDLoader)
		if n := tt.notify(); n.Rank != r || n.Signal.Signal != uint32(syscall.SIGSTOP) {
			t.Fatalf("%+v", n)
		}
		tt.setBreak(r, hit)
	}
	tt.cont(0)
	tt.cont(1)
	hits := map[uint32]int{}
	ended := 0
	for ended < 2 {
		n := tt.notify()
		switch n.Kind {
		case cdti.NotifyTypeSignal:
			if n.Signal.InstAddress != hit {
				t.Fatalf("%+v", n)
			}
			hits[n.Rank]++
			tt.cont(n.Rank)
		case cdti.NotifyTypeTermination:
			if n.Exit.ExitCode() != 0 {
				t.Errorf("rank %d: %v", n.Rank, n.Exit)
			}
			ended++
		}
	}
	if hits[0] != 5 || hits[1] != 5 {
		t.Errorf("hits per rank %v, want 5 each", hits)
	}
	mgmtShutdown(t, addr, false)
	rest, _ := io.ReadAll(ap.stdout)
	if err := ap.cmd.Wait(); err != nil {
		t.Errorf("agent exit: %v", err)
	}
	if len(rest) != 0 {
		t.Errorf("more on stdout after the listening line: %q", rest)
	}
	b, _ := os.ReadFile(out)
	if strings.Count(string(b), "iterations 5 counter 10") != 2 {
		t.Errorf("ranks' output %q", b)
	}
}

// Without a session token the agent refuses to start.
func TestBinaryNeedsToken(t *testing.T) {
	ap := startAgentBinary(t, nil, "--listen", "127.0.0.1:0", "--", progBin)
	err := ap.cmd.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(ap.stderr.String(), "HPCDAP_TOKEN") {
		t.Errorf("exit %v, stderr %q", err, ap.stderr.String())
	}
}

// --connect: the agent registers with the front end (agent.register, authenticated by the
// token), which then connects to the announced address for both planes.
func TestBinaryConnect(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ap := startAgentBinary(t, []string{"HPCDAP_TOKEN=" + testToken}, "--connect", l.Addr().String(), "--np", "1",
		"--", progBin, "loop", "1")
	p := acceptRegistration(t, l)
	if len(p.Ranks) != 1 || p.Pid != ap.cmd.Process.Pid {
		t.Fatalf("registration %+v", p)
	}
	// The front end is on loopback: so is the agent's listener, and only there.
	host, port, _ := net.SplitHostPort(p.Address)
	if host != "127.0.0.1" {
		t.Errorf("agent announced %s, want a loopback address like its front end's", p.Address)
	}
	if ip := nonLoopbackIP(t); ip != nil {
		if c, err := net.Dial("tcp", net.JoinHostPort(ip.String(), port)); err == nil {
			c.Close()
			t.Errorf("agent with a loopback front end accepts connections on %s too", ip)
		}
	}
	tt := dialAgent(t, p.Address, 1)
	tt.attach(0, 10, "fe")
	if pd := tt.query(0, &cdti.GetProcessData{}).Ack.(*cdti.GetProcessDataAck); pd.TGID != uint32(p.Ranks[0].Pid) {
		t.Errorf("process data %+v, registration %+v", pd, p.Ranks)
	}
	mgmtShutdown(t, p.Address, true)
	if err := ap.cmd.Wait(); err != nil {
		t.Errorf("agent exit: %v", err)
	}
}

// --connect with --attach: a rank whose process has ended before the agent starts, reaped or
// not, is named in the registration's gone list, and the node's other ranks are still served; with --listen the
// agent refuses such a list outright.
func TestBinaryConnectGoneRank(t *testing.T) {
	needPrograms(t)
	live := exec.Command(progBin, "run")
	out := newOutFile(t)
	live.Stdout = out.f
	if err := live.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { live.Process.Kill(); live.Wait() }()
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	// A rank that has died but is not reaped yet (its parent, here the test, has not waited
	// for it) has ended too.
	zombie := exec.Command("true")
	if err := zombie.Start(); err != nil {
		t.Fatal(err)
	}
	defer zombie.Wait()
	for {
		if st, err := procimage.ReadStatus(zombie.Process.Pid); err != nil || st.State == 'Z' {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	list := "0=" + strconv.Itoa(live.Process.Pid) + ",1=" + strconv.Itoa(dead.Process.Pid) + ",2=" + strconv.Itoa(zombie.Process.Pid)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ap := startAgentBinary(t, []string{"HPCDAP_TOKEN=" + testToken}, "--connect", l.Addr().String(), "--attach", list)
	p := acceptRegistration(t, l)
	if len(p.Ranks) != 1 || p.Ranks[0].Rank != 0 || p.Ranks[0].Pid != live.Process.Pid {
		t.Errorf("ranks served %+v, want rank 0 (pid %d) alone", p.Ranks, live.Process.Pid)
	}
	if len(p.Gone) != 2 || p.Gone[0].Rank != 1 || p.Gone[0].Pid != dead.Process.Pid || p.Gone[0].Error == "" ||
		p.Gone[1].Rank != 2 || p.Gone[1].Pid != zombie.Process.Pid || !strings.Contains(p.Gone[1].Error, "ended") {
		t.Errorf("gone %+v, want rank 1 (pid %d) and rank 2 (pid %d) ended", p.Gone, dead.Process.Pid, zombie.Process.Pid)
	}
	mgmtShutdown(t, p.Address, false)
	if err := ap.cmd.Wait(); err != nil {
		t.Errorf("agent exit: %v", err)
	}

	strict := startAgentBinary(t, []string{"HPCDAP_TOKEN=" + testToken}, "--listen", "127.0.0.1:0", "--attach", list)
	if err := strict.cmd.Wait(); err == nil || !strings.Contains(strict.stderr.String(), "no such process") {
		t.Errorf("--listen with a gone pid: exit %v, stderr %q", err, strict.stderr.String())
	}
}

// SIGTERM: the agent removes its traps and lets the process go; SIGKILL: the kernel lets the
// process go (it is never left stopped), but what the agent had planted stays: the thread that
// was stopped on a breakpoint receives its SIGTRAP and the process dies of it.
func TestBinaryAttachAndKill(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		t.Run(sig.String(), func(t *testing.T) {
			needPrograms(t)
			prog := exec.Command(progBin, "run")
			out := newOutFile(t)
			prog.Stdout = out.f
			if err := prog.Start(); err != nil {
				t.Fatal(err)
			}
			defer prog.Process.Kill()
			out.waitFor(t, "pid ")
			pid := prog.Process.Pid
			ap := startAgentBinary(t, []string{"HPCDAP_TOKEN=" + testToken}, "--listen", "127.0.0.1:0",
				"--attach", "0="+strconv.Itoa(pid))
			tt := dialAgent(t, ap.listening(t), 1)
			tt.attach(0, 99, "dbg")
			tt.control(0, int(syscall.SIGSTOP), cdti.DynamicNotifyDLoader)
			tt.signalNotify()
			hit := testenv.NMSymbol(t, progBin, "hit")
			tt.setBreak(0, hit)
			tt.cont(0)
			if n := tt.signalNotify(); n.InstAddress != hit {
				t.Fatalf("%+v", n)
			}
			ap.cmd.Process.Signal(sig)
			ap.cmd.Wait()
			if sig == syscall.SIGTERM {
				checkUntouched(t, pid)
				return
			}
			done := make(chan error, 1)
			go func() { done <- prog.Wait() }()
			select {
			case err := <-done:
				ee, ok := err.(*exec.ExitError)
				ws, _ := ee.Sys().(syscall.WaitStatus)
				if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGTRAP {
					t.Errorf("process ended with %v, want death by SIGTRAP (the documented residue)", err)
				}
			case <-time.After(20 * time.Second):
				t.Fatalf("process neither ran nor ended: states %v", taskStates(t, pid))
			}
		})
	}
}

// nonLoopbackIP returns an address of this host's that is not loopback, or nil when it has none.
func nonLoopbackIP(t *testing.T) net.IP {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
			return n.IP
		}
	}
	return nil
}

// acceptRegistration plays the front end of a --connect agent: it answers the agent's
// challenge with its proof of the session token, reads the agent.register notification and
// checks the agent's proof, which must answer its nonce.
func acceptRegistration(t *testing.T, l net.Listener) RegisterParams {
	t.Helper()
	l.(*net.TCPListener).SetDeadline(time.Now().Add(20 * time.Second))
	nc, err := l.Accept()
	if err != nil {
		t.Fatalf("no registration: %v", err)
	}
	defer nc.Close()
	r := bufio.NewReader(nc)
	var ch struct {
		Method string          `json:"method"`
		ID     *int            `json:"id"`
		Params ChallengeParams `json:"params"`
	}
	if err := newBoundedCodec(true).ReadObject(r, &ch); err != nil {
		t.Fatal(err)
	}
	if ch.Method != ChallengeMethod || ch.ID == nil {
		t.Fatalf("first message %+v, want the %s call", ch, ChallengeMethod)
	}
	mine := cdti.NewNonce()
	newBoundedCodec(true).WriteObject(nc, map[string]any{"jsonrpc": "2.0", "id": *ch.ID,
		"result": ChallengeResult{Nonce: mine, Proof: cdti.HelloProof([]byte(testToken), cdti.HelloRoleTool, ch.Params.Nonce, mine)}})
	var msg struct {
		Method string         `json:"method"`
		ID     *int           `json:"id"`
		Params RegisterParams `json:"params"`
	}
	if err := newBoundedCodec(true).ReadObject(r, &msg); err != nil {
		t.Fatal(err)
	}
	if msg.Method != RegisterMethod || msg.ID != nil ||
		!hmac.Equal(msg.Params.Proof, cdti.HelloProof([]byte(testToken), cdti.HelloRoleAgent, mine, ch.Params.Nonce)) {
		t.Fatalf("registration %+v: not an %s notification with the proof of the token", msg, RegisterMethod)
	}
	return msg.Params
}
