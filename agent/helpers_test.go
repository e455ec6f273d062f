package agent

import (
	"bufio"
	"bytes"
	"context"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"log"
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

	"github.com/hpcdap/hpcdap/amd64"
	"github.com/hpcdap/hpcdap/cdti"
	"github.com/hpcdap/hpcdap/internal/testenv"
	"github.com/hpcdap/hpcdap/target/ptrace"
)

// Test programs, built once per test binary.
var (
	buildDir   string
	buildErr   error
	progBin    string // testdata/prog.c, -O0, frame pointers, no PIE
	threadsBin string // testdata/threads.c
	outputBin  string // testdata/output.c
)

const testToken = "s3cret-session-token"

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "agent-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	buildDir = dir
	progBin = filepath.Join(dir, "prog")
	threadsBin = filepath.Join(dir, "threads")
	outputBin = filepath.Join(dir, "output")
	buildErr = buildPrograms()
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func buildPrograms() error {
	if _, err := exec.LookPath("gcc"); err != nil {
		return errors.New("gcc not found: install the Debian packages gcc and libc6-dev")
	}
	flags := []string{"-g", "-O0", "-fno-omit-frame-pointer", "-fno-stack-protector", "-no-pie"}
	for _, b := range []struct{ out, src string }{{progBin, "prog.c"}, {threadsBin, "threads.c"}, {outputBin, "output.c"}} {
		args := append(append([]string(nil), flags...), "-pthread", "-o", b.out, filepath.Join("testdata", b.src))
		if out, err := exec.Command("gcc", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("gcc %s: %v\n%s", b.src, err, out)
		}
	}
	return nil
}

func needPrograms(t testing.TB) {
	t.Helper()
	if buildErr != nil {
		t.Fatalf("building the test programs: %v", buildErr)
	}
}

// harness is an in-process agent with a real ptrace back end, listening on loopback.
type harness struct {
	t      testing.TB
	a      *Agent
	tracer *ptrace.Tracer
	addr   string
	logBuf *syncBuffer
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// newHarness starts an agent; opts change its configuration.
func newHarness(t testing.TB, staging string, opts ...func(*Config)) *harness {
	t.Helper()
	needPrograms(t)
	tr, err := ptrace.NewTracer()
	if err != nil {
		t.Fatalf("ptrace tracer: %v", err)
	}
	h := &harness{t: t, tracer: tr, logBuf: &syncBuffer{}}
	cfg := Config{Token: testToken, Backend: tr, StagingDir: staging, Node: "testnode",
		Logger: log.New(h.logBuf, "", log.Lmicroseconds)}
	for _, o := range opts {
		o(&cfg)
	}
	a, err := New(cfg)
	if err != nil {
		t.Fatalf("agent.New: %v", err)
	}
	h.a = a
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h.addr = l.Addr().String()
	go a.Serve(context.Background(), l)
	// The management plane reads process state while tools drive the processes: poll it all
	// along, so that the race detector sees those reads next to everything the tests do.
	stopPoll := make(chan struct{})
	polled := make(chan struct{})
	go func() {
		defer close(polled)
		for {
			select {
			case <-stopPoll:
				return
			case <-time.After(time.Millisecond):
				a.RankInfos()
				a.Health()
			}
		}
	}()
	t.Cleanup(func() {
		close(stopPoll)
		<-polled
		a.Shutdown(true)
		tr.Close()
		if t.Failed() {
			t.Logf("agent log:\n%s", h.logBuf.String())
		}
	})
	return h
}

// spawn starts n ranks of argv; their stdout goes to the returned file.
func (h *harness) spawn(n int, argv ...string) *outFile {
	h.t.Helper()
	out := newOutFile(h.t)
	err := h.a.SpawnRanks(SpawnSpec{Argv: argv, Stdio: []*os.File{nil, out.f, out.f}, Count: n})
	if err != nil {
		h.t.Fatalf("spawn: %v", err)
	}
	return out
}

// outFile collects a program's output.
type outFile struct {
	f    *os.File
	path string
}

func newOutFile(t testing.TB) *outFile {
	p := filepath.Join(t.TempDir(), "out")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return &outFile{f: f, path: p}
}

func (o *outFile) String() string {
	b, _ := os.ReadFile(o.path)
	return string(b)
}

// waitFor polls until the output contains s.
func (o *outFile) waitFor(t testing.TB, s string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(o.String(), s) {
		if time.Now().After(deadline) {
			t.Fatalf("output never contained %q; it is:\n%s", s, o.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// tool is a CDTI client acting as one tool.
type testTool struct {
	t  testing.TB
	h  *harness
	c  *cdti.Client
	id uint32
}

func (h *harness) dial(id uint32) *testTool {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := cdti.Dial(ctx, "tcp", h.addr, cdti.ClientOptions{ToolID: id, Token: []byte(testToken), Timeout: 30 * time.Second})
	if err != nil {
		h.t.Fatalf("dial agent: %v", err)
	}
	h.t.Cleanup(func() { c.Close() })
	return &testTool{t: h.t, h: h, c: c, id: id}
}

// ctx is the context of test requests; the client's Timeout bounds each.
func ctx() context.Context { return context.Background() }

func (tt *testTool) attach(rank uint32, prio uint8, tag string) {
	tt.t.Helper()
	if _, err := tt.c.Attach(ctx(), rank, cdti.RankInHeader, cdti.NewTag(tag), prio); err != nil {
		tt.t.Fatalf("tool %d: attach rank %d: %v", tt.id, rank, err)
	}
}

// control takes control of rank with SIGTRAP, SIGSTOP and extra signals in the notify set.
func (tt *testTool) control(rank uint32, sndSignal int, mode cdti.DynamicNotifyMode, extra ...int) *cdti.ControlAck {
	tt.t.Helper()
	set := cdti.Signals(append([]int{int(syscall.SIGTRAP), int(syscall.SIGSTOP)}, extra...)...)
	ack, err := tt.c.Control(ctx(), rank, cdti.Control{NotifySet: set, SendSignal: uint32(sndSignal),
		DynamicNotify: mode, WatchPolicy: cdti.WatchNoPropagate})
	if err != nil {
		tt.t.Fatalf("tool %d: control rank %d: %v", tt.id, rank, err)
	}
	return ack
}

// notify waits for the next notification.
func (tt *testTool) notify() *cdti.Notify {
	tt.t.Helper()
	select {
	case n, ok := <-tt.c.Notifications():
		if !ok {
			tt.t.Fatalf("tool %d: connection ended: %v", tt.id, tt.c.Err())
		}
		return n
	case <-time.After(20 * time.Second):
		tt.t.Fatalf("tool %d: no notification within 20 s", tt.id)
	}
	return nil
}

// signalNotify waits for a signal notification.
func (tt *testTool) signalNotify() cdti.NotifySignal {
	tt.t.Helper()
	n := tt.notify()
	if n.Kind != cdti.NotifyTypeSignal {
		tt.t.Fatalf("tool %d: got %v notification (%+v), want a signal", tt.id, n.Kind, n)
	}
	return n.Signal
}

// noNotify checks that nothing arrives for a while.
func (tt *testTool) noNotify(d time.Duration) {
	tt.t.Helper()
	select {
	case n := <-tt.c.Notifications():
		tt.t.Fatalf("tool %d: unexpected notification %+v", tt.id, n)
	case <-time.After(d):
	}
}

// one sends one command and returns its result, failing on a message-level error.
func (tt *testTool) query(rank uint32, c cdti.Command) cdti.Result {
	tt.t.Helper()
	rs, err := tt.c.Query(ctx(), rank, c)
	if err != nil {
		tt.t.Fatalf("tool %d: query %v: %v", tt.id, c.CommandType(), err)
	}
	return rs[0]
}

func (tt *testTool) update(rank uint32, cs ...cdti.Command) []cdti.Result {
	tt.t.Helper()
	rs, err := tt.c.Update(ctx(), rank, cs...)
	if err != nil {
		tt.t.Fatalf("tool %d: update: %v", tt.id, err)
	}
	return rs
}

// mustUpdate runs commands that must all succeed.
func (tt *testTool) mustUpdate(rank uint32, cs ...cdti.Command) {
	tt.t.Helper()
	for i, r := range tt.update(rank, cs...) {
		if r.Code != cdti.CmdSuccess {
			tt.t.Fatalf("tool %d: %v: %v", tt.id, cs[i].CommandType(), r.Code)
		}
	}
}

func (tt *testTool) cont(rank uint32) { tt.mustUpdate(rank, &cdti.ContinueProcess{}) }

// regs reads a thread's general registers (x86_64 user_regs_struct).
func (tt *testTool) regs(rank, tid uint32) []byte {
	tt.t.Helper()
	b, err := tt.c.RegisterSet(ctx(), rank, tid, cdti.RegSetGeneral)
	if err != nil {
		tt.t.Fatalf("tool %d: registers of %d: %v", tt.id, tid, err)
	}
	return b
}

func (tt *testTool) pc(rank, tid uint32) uint64 {
	return binary.LittleEndian.Uint64(tt.regs(rank, tid)[amd64.OffRIP:])
}

func (tt *testTool) setBreak(rank uint32, addr uint64) {
	tt.t.Helper()
	tt.mustUpdate(rank, &cdti.SetBreakpoint{Addr: addr, Instruction: 0xCC})
}

func (tt *testTool) memory(rank uint32, addr uint64, n int) []byte {
	tt.t.Helper()
	b, err := tt.c.ReadMemory(ctx(), rank, 0, addr, n, cdti.SpecAccessUseThreadState)
	if err != nil {
		tt.t.Fatalf("tool %d: read %d bytes at %#x: %v", tt.id, n, addr, err)
	}
	return b
}

// startStopped attaches a tool to rank 0 of h (spawned) and takes control with SIGSTOP at the
// first ld.so instruction; it returns once the SIGSTOP notification has arrived.
func startStopped(t testing.TB, h *harness, id uint32, extra ...int) (*testTool, cdti.NotifySignal) {
	t.Helper()
	tt := h.dial(id)
	tt.attach(0, 99, "test")
	tt.control(0, int(syscall.SIGSTOP), cdti.DynamicNotifyDLoader, extra...)
	n := tt.signalNotify()
	if n.Signal != uint32(syscall.SIGSTOP) || n.Reason != cdti.SignalGeneric {
		t.Fatalf("first notification %+v, want SIGSTOP Generic", n)
	}
	return tt, n
}

// textBytes returns the file bytes of bin's .text section and its address.
func textBytes(t testing.TB, bin string) (uint64, []byte) {
	t.Helper()
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s := f.Section(".text")
	data, err := s.Data()
	if err != nil {
		t.Fatal(err)
	}
	return s.Addr, data
}

// procMem reads a process's memory through /proc/PID/mem (the oracle, independent of the agent).
func procMem(t testing.TB, pid int, addr uint64, n int) []byte {
	t.Helper()
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/mem")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, n)
	if _, err := f.ReadAt(b, int64(addr)); err != nil {
		t.Fatalf("read /proc/%d/mem at %#x: %v", pid, addr, err)
	}
	return b
}

// taskStates reads the state letter of every thread from /proc/PID/task/*/stat.
func taskStates(t testing.TB, pid int) map[int]byte {
	t.Helper()
	dir := "/proc/" + strconv.Itoa(pid) + "/task"
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[int]byte)
	for _, e := range ents {
		tid, _ := strconv.Atoi(e.Name())
		st, err := readTaskStat(pid, tid)
		if err == nil {
			out[tid] = st.state
		}
	}
	return out
}

// procStatus reads a field of /proc/PID/status, failing the test when the process is gone.
func procStatus(t testing.TB, pid int, field string) string {
	t.Helper()
	v, err := testenv.ProcStatus(pid, field)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// objdumpStore finds, in objdump's disassembly of function fn, the instruction that writes to
// symbol target (objdump annotates RIP-relative operands with "<target>").
func objdumpStore(t testing.TB, bin, fn, target string) uint64 {
	t.Helper()
	out, err := exec.Command("objdump", "-d", "--no-show-raw-insn", "--disassemble="+fn, bin).Output()
	if err != nil {
		t.Fatalf("objdump: %v", err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, "mov") && strings.Contains(line, "<"+target+">") && strings.Contains(line, ",0x") {
			a, _, _ := strings.Cut(strings.TrimSpace(line), ":")
			v, err := strconv.ParseUint(a, 16, 64)
			if err == nil {
				return v
			}
		}
	}
	t.Fatalf("objdump: no store to %s in %s:\n%s", target, fn, out)
	return 0
}

// nextInstruction returns the address of the instruction after addr in objdump's listing.
func nextInstruction(t testing.TB, bin, fn string, addr uint64) uint64 {
	t.Helper()
	out, err := exec.Command("objdump", "-d", "--disassemble="+fn, bin).Output()
	if err != nil {
		t.Fatalf("objdump: %v", err)
	}
	var addrs []uint64
	for _, line := range strings.Split(string(out), "\n") {
		a, _, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		if v, err := strconv.ParseUint(a, 16, 64); err == nil {
			addrs = append(addrs, v)
		}
	}
	for i, a := range addrs {
		if a == addr && i+1 < len(addrs) {
			return addrs[i+1]
		}
	}
	t.Fatalf("objdump: %#x is not an instruction of %s", addr, fn)
	return 0
}

// rankPid is the pid of a rank.
func (h *harness) rankPid(rank int) int {
	for _, r := range h.a.RankInfos() {
		if r.Rank == rank {
			return r.Pid
		}
	}
	h.t.Fatalf("no rank %d", rank)
	return 0
}

// waitTermination waits for the Termination notification, skipping signal notifications
// after continuing each.
func (tt *testTool) waitTermination(rank uint32) cdti.ExitStatus {
	tt.t.Helper()
	for {
		n := tt.notify()
		switch n.Kind {
		case cdti.NotifyTypeTermination:
			if n.Version != 0 {
				tt.t.Errorf("Termination notify has version %d, want 0", n.Version)
			}
			return n.Exit
		case cdti.NotifyTypeSignal:
			tt.cont(rank)
		}
	}
}

// inFunc reports whether pc lies inside function name (after its first byte), by the ELF
// symbol table's address and size.
func inFunc(t testing.TB, bin, name string, pc uint64) bool {
	t.Helper()
	s := testenv.ELFSymbol(t, bin, name)
	if elf.ST_TYPE(s.Info) != elf.STT_FUNC {
		t.Fatalf("%s: %s is not a function", bin, name)
	}
	return pc > s.Value && pc < s.Value+s.Size
}

// rawConn is a CDTI connection without the client's checks, to send what a broken or hostile
// tool might.
type rawConn struct {
	t  testing.TB
	nc net.Conn
	r  *bufio.Reader
}

// rawDial connects and answers the agent's challenge with a proof of token (without checking
// the agent's own proof); the caller reads the final HelloAck.
func (h *harness) rawDial(token string) *rawConn {
	h.t.Helper()
	nc, err := net.Dial("tcp", h.addr)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { nc.Close() })
	rc := &rawConn{t: h.t, nc: nc, r: bufio.NewReader(nc)}
	hd := cdti.Header{Service: cdti.ServiceToolctl, Version: cdti.ProtocolVersion}
	mine := cdti.NewNonce()
	rc.send(&cdti.Hello{Header: hd, ExtVersion: cdti.ExtensionVersion, Nonce: mine})
	m, err := rc.recv()
	if err != nil {
		h.t.Fatalf("hello challenge: %v", err)
	}
	rc.send(&cdti.Hello{Header: hd, ExtVersion: cdti.ExtensionVersion,
		Proof: cdti.HelloProof([]byte(token), cdti.HelloRoleTool, m.(*cdti.HelloAck).Nonce, mine)})
	return rc
}

func (rc *rawConn) send(m cdti.Message) {
	rc.t.Helper()
	b, err := cdti.EncodeLax(m)
	if err != nil {
		rc.t.Fatal(err)
	}
	rc.write(b)
}

func (rc *rawConn) write(b []byte) {
	rc.t.Helper()
	rc.nc.SetWriteDeadline(time.Now().Add(10 * time.Second))
	if _, err := rc.nc.Write(b); err != nil {
		rc.t.Fatalf("write: %v", err)
	}
}

// recv reads the next message that is not a Notify (nil, err at the end of the stream).
func (rc *rawConn) recv() (cdti.Message, error) {
	for {
		rc.nc.SetReadDeadline(time.Now().Add(20 * time.Second))
		b, err := cdti.ReadFrame(rc.r)
		if err != nil {
			return nil, err
		}
		m, err := cdti.DecodeMessage(b)
		if err != nil {
			return nil, err
		}
		if m.MessageType() != cdti.MsgNotify {
			return m, nil
		}
	}
}

// rawQuery sends cmds in one Query through a raw connection of tool tt's id (attaching it).
func rawQuery(t testing.TB, tt *testTool, rank uint32, cmds ...cdti.Command) []cdti.Result {
	t.Helper()
	h := tt.h
	rc := h.rawDial(testToken)
	if m, err := rc.recv(); err != nil || m.Hdr().ReturnCode != cdti.Success {
		t.Fatalf("hello: %v %v", m, err)
	}
	id := tt.id + 1000
	rc.send(&cdti.Attach{Header: cdti.Header{Service: cdti.ServiceToolctl, Version: cdti.ProtocolVersion, Rank: rank, ToolID: id},
		Tag: cdti.NewTag("raw"), Priority: 0})
	if m, err := rc.recv(); err != nil || m.Hdr().ReturnCode != cdti.Success {
		t.Fatalf("attach: %v %v", m, err)
	}
	rc.send(&cdti.Query{Header: cdti.Header{Service: cdti.ServiceToolctl, Version: cdti.ProtocolVersion, Rank: rank, ToolID: id, SequenceID: 7}, Commands: cmds})
	m, err := rc.recv()
	if err != nil {
		t.Fatalf("query: %v", err)
	}
	qa, ok := m.(*cdti.QueryAck)
	if !ok || qa.ReturnCode != cdti.Success {
		t.Fatalf("query answered %#v", m)
	}
	return qa.Results
}
