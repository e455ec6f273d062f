//go:build linux && amd64

// Package agentbench measures package threaddb reading a process through a real hpcdap agent:
// target memory comes through CDTI GetMemory, as it does for the adapter. It holds benchmarks
// only, apart from package threaddb's tests, so that those do not depend on the agent.
package agentbench_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hpcdap/hpcdap/agent"
	"github.com/hpcdap/hpcdap/cdti"
	"github.com/hpcdap/hpcdap/target/ptrace"
	"github.com/hpcdap/hpcdap/threaddb"
)

const (
	benchThreads = 1000
	token        = "agentbench"
)

// cdtiMemory reads a rank's memory with GetMemory and counts the CDTI Query messages (round
// trips) and GetMemory commands it sends.
type cdtiMemory struct {
	c             *cdti.Client
	queries, cmds atomic.Int64
	bytes         atomic.Int64
}

func (m *cdtiMemory) ReadAt(b []byte, addr uint64) (int, error) {
	cmds := cdti.SplitGetMemory(0, addr, len(b), cdti.SpecAccessUseThreadState)
	batches, err := cdti.Batch(cdti.MsgQuery, cmds)
	if err != nil {
		return 0, err
	}
	m.queries.Add(int64(len(batches)))
	m.cmds.Add(int64(len(cmds)))
	m.bytes.Add(int64(len(b)))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	data, err := m.c.ReadMemory(ctx, 0, 0, addr, len(b), cdti.SpecAccessUseThreadState)
	n := copy(b, data)
	if err == nil && n < len(b) {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

// cdtiThreads lists threads with GetThreadList and reads the FS base from the general
// register set (x86_64 user_regs_struct), counting the Query messages.
type cdtiThreads struct {
	c       *cdti.Client
	queries atomic.Int64
}

func (t *cdtiThreads) LWPs() ([]int, error) {
	t.queries.Add(1)
	l, err := t.c.ThreadList(context.Background(), 0)
	if err != nil {
		return nil, err
	}
	out := make([]int, len(l))
	for i, e := range l {
		out[i] = int(e.TID)
	}
	return out, nil
}

func (t *cdtiThreads) ThreadPointer(lwp int) (uint64, error) {
	t.queries.Add(1)
	regs, err := t.c.RegisterSet(context.Background(), 0, uint32(lwp), cdti.RegSetGeneral)
	if err != nil {
		return 0, err
	}
	const fsBase = 21 * 8 // fs_base in user_regs_struct
	if len(regs) < fsBase+8 {
		return 0, fmt.Errorf("general registers of %d: %d bytes", lwp, len(regs))
	}
	return binary.LittleEndian.Uint64(regs[fsBase:]), nil
}

// setup starts the static test program of package threaddb with 1,000 blocked workers, an
// in-process agent over ptrace on loopback, and a CDTI tool that has stopped the process.
func setup(b *testing.B) (*threaddb.Process, *cdtiMemory, *cdtiThreads) {
	b.Helper()
	dir := b.TempDir()
	src, _ := filepath.Abs("../testdata/threads.c")
	exe := filepath.Join(dir, "threads_static")
	if out, err := exec.Command("gcc", "-g", "-O0", "-pthread", "-static", "-o", exe, src).CombinedOutput(); err != nil {
		b.Fatalf("gcc: %v\n%s", err, out)
	}
	cmd := exec.Command(exe, fmt.Sprint(benchThreads))
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { stdin.Close(); cmd.Process.Kill(); cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "ready") {
		b.Fatalf("test program: %q, %v", line, err)
	}

	tr, err := ptrace.NewTracer()
	if err != nil {
		b.Fatal(err)
	}
	a, err := agent.New(agent.Config{Token: token, Backend: tr, Node: "bench", Logger: log.New(io.Discard, "", 0)})
	if err != nil {
		b.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	b.Cleanup(stop)
	go a.Serve(ctx, l)
	if err := a.AttachRanks(map[uint32]int{0: cmd.Process.Pid}); err != nil {
		b.Fatal(err)
	}
	c, err := cdti.Dial(ctx, "tcp", l.Addr().String(), cdti.ClientOptions{ToolID: 1, Token: []byte(token), Timeout: 60 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	if _, err := c.Attach(ctx, 0, cdti.RankInHeader, cdti.NewTag("bench"), 0); err != nil {
		b.Fatal(err)
	}
	if _, err := c.Control(ctx, 0, cdti.Control{NotifySet: cdti.Signals(int(syscall.SIGTRAP), int(syscall.SIGSTOP)),
		SendSignal: uint32(syscall.SIGSTOP), WatchPolicy: cdti.WatchNoPropagate}); err != nil {
		b.Fatal(err)
	}
	select {
	case <-c.Notifications():
	case <-time.After(60 * time.Second):
		b.Fatal("the process did not stop")
	}
	mem, thr := &cdtiMemory{c: c}, &cdtiThreads{c: c}
	p, err := threaddb.Open(cmd.Process.Pid, []threaddb.Module{{Path: exe}}, mem, thr)
	if err != nil {
		b.Fatal(err)
	}
	if l, err := p.List(); err != nil || len(l.Threads) != benchThreads+1 {
		b.Fatalf("List: %d threads, %v", len(l.Threads), err)
	}
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", cmd.Process.Pid)); err != nil {
		b.Fatal(err)
	}
	return p, mem, thr
}

// BenchmarkListCDTI1000 walks the thread lists of a stopped process with 1,001 threads through
// an hpcdap agent: each Memory.ReadAt is one GetMemory Query over loopback TCP, and the LWPs
// come from one GetThreadList. queries/op counts CDTI round trips.
func BenchmarkListCDTI1000(b *testing.B) {
	p, mem, thr := setup(b)
	q0, c0, by0, t0 := mem.queries.Load(), mem.cmds.Load(), mem.bytes.Load(), thr.queries.Load()
	b.ResetTimer()
	for b.Loop() {
		if _, err := p.List(); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	n := float64(b.N)
	b.ReportMetric(float64(mem.queries.Load()-q0+thr.queries.Load()-t0)/n, "queries/op")
	b.ReportMetric(float64(mem.cmds.Load()-c0)/n, "getmemory/op")
	b.ReportMetric(float64(mem.bytes.Load()-by0)/n, "readbytes/op")
}

// BenchmarkMapLWPCDTI1000 maps every LWP to its thread through the agent: one GetRegisterSet
// for the FS base and one GetMemory for the descriptor per thread.
func BenchmarkMapLWPCDTI1000(b *testing.B) {
	p, mem, thr := setup(b)
	lwps, err := thr.LWPs()
	if err != nil || len(lwps) != benchThreads+1 {
		b.Fatalf("LWPs: %d, %v", len(lwps), err)
	}
	q0, t0 := mem.queries.Load(), thr.queries.Load()
	b.ResetTimer()
	for b.Loop() {
		for _, lwp := range lwps {
			if _, err := p.MapLWP(lwp); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(mem.queries.Load()-q0+thr.queries.Load()-t0)/float64(b.N), "queries/op")
}
