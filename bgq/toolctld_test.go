package bgq

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hpcdap/hpcdap/cdti"
	"github.com/hpcdap/hpcdap/ppc64"
)

// checkJobsDir checks jobctld's and the toolctlds' entries of /jobs/<id>/ on every I/O node.
func checkJobsDir(t *testing.T, j *Job, exe string) {
	t.Helper()
	for k, n := range j.ions {
		dir := n.jobDir(j.ID())
		if l, err := os.Readlink(filepath.Join(dir, "exe")); err != nil || l != exe {
			t.Errorf("ion%d exe → %q, %v; want %s", k, l, err, exe)
		}
		for name, want := range map[string]string{"cmdline": exe + "\x00", "tools/protocol": "6\n",
			"loginuid": fmt.Sprintf("%d\n", os.Getuid())} {
			if b, err := os.ReadFile(filepath.Join(dir, name)); err != nil || string(b) != want {
				t.Errorf("ion%d %s = %q, %v; want %q", k, name, b, err, want)
			}
		}
		for _, d := range []string{"tools", "tools_status", "toolctl_rank", "toolctl_node"} {
			if fi, err := os.Stat(filepath.Join(dir, d)); err != nil || !fi.IsDir() {
				t.Errorf("ion%d %s: %v", k, d, err)
			}
		}
		for _, cn := range n.nodes {
			sock := n.socketPath(cn.cnk.node)
			links := []string{filepath.Join("toolctl_node", fmt.Sprint(cn.cnk.node))}
			for _, r := range cn.cnk.ranks {
				links = append(links, filepath.Join("toolctl_rank", fmt.Sprint(r)))
			}
			for _, l := range links {
				if got, err := filepath.EvalSymlinks(filepath.Join(dir, l)); err != nil || got != sock {
					t.Errorf("ion%d %s → %q, %v; want %s", k, l, got, err, sock)
				}
			}
		}
	}
}

// TestComputeNodesThroughToolctld drives 4 ranks on 2 compute nodes of 2 I/O nodes through
// one raw tool connection per toolctl_node socket: attach to every rank of the node, take
// control, plant a breakpoint on work, continue, read each hit's first argument register,
// run to exit. Every byte the tool wrote reached the CNK link unaltered.
func TestComputeNodesThroughToolctld(t *testing.T) {
	var tmu sync.Mutex
	traced := map[uint32][][]byte{}
	j, out := testJob(t, 4, 2, 1, func(node uint32, in bool, b []byte) {
		if in {
			return
		}
		tmu.Lock()
		traced[node] = append(traced[node], b)
		tmu.Unlock()
	})
	_, exe := built(t)
	work := workEntry(t, exe)
	checkJobsDir(t, j, exe)

	pt := j.Proctable()
	if len(pt) != 4 {
		t.Fatalf("proc table %+v", pt)
	}
	for _, p := range pt {
		node := uint32(p.Rank / 2)
		if p.Node != node || p.Host != fmt.Sprintf("ion%d", node) || p.Executable != exe {
			t.Errorf("proc table entry %+v: want node %d on ion%d", p, node, node)
		}
	}

	ctx := context.Background()
	recs := map[uint32]*recorder{}
	for node := uint32(0); node < 2; node++ {
		c, rec := dialTool(t, nodePath(j, int(node), node), 1, j.ID())
		recs[node] = rec
		first := node * 2
		ack, err := c.Attach(ctx, first, cdti.RanksInNode, cdti.NewTag("bgqtest"), 10)
		if err != nil || ack.ReturnCode != cdti.Success {
			t.Fatalf("attach node %d: %v %+v", node, err, ack)
		}
		if fmt.Sprint(ack.Ranks) != fmt.Sprint([]uint32{first, first + 1}) {
			t.Fatalf("attach node %d: ranks %v", node, ack.Ranks)
		}
		for r := first; r < first+2; r++ {
			ca, err := c.Control(ctx, r, cdti.Control{NotifySet: cdti.Signals(int(syscall.SIGTRAP), int(syscall.SIGSTOP)),
				SendSignal: uint32(syscall.SIGSTOP), DynamicNotify: cdti.DynamicNotifyStart})
			if err != nil || ca.ReturnCode != cdti.Success || ca.ControllingToolID != 1 {
				t.Fatalf("control rank %d: %v %+v", r, err, ca)
			}
		}
		if node == 1 {
			if err := j.Start(); err != nil {
				t.Fatal(err)
			}
		}
		hits := map[uint32]int{}
		ended := 0
		for ended < 2 {
			n := nextNotify(t, c)
			r := n.Rank
			switch {
			case n.Kind == cdti.NotifyTypeSignal && n.Signal.Signal == uint32(syscall.SIGSTOP):
				update(t, c, r, &cdti.SetBreakpoint{Addr: work, Instruction: ppc64.TrapWordCNK})
			case n.Kind == cdti.NotifyTypeSignal && n.Signal.Signal == uint32(syscall.SIGTRAP):
				if n.Signal.Reason != cdti.SignalBreakpoint || n.Signal.InstAddress != work {
					t.Fatalf("rank %d: notify %+v", r, n.Signal)
				}
				rs, err := c.Query(ctx, r, &cdti.GetGeneralRegs{ThreadID: n.Signal.ThreadID})
				if err != nil || rs[0].Code != cdti.CmdSuccess {
					t.Fatalf("rank %d: registers: %v", r, err)
				}
				if got, want := rs[0].Ack.(*cdti.GetGeneralRegsAck).GPR[3], uint64(r)+40+uint64(hits[r]); got != want {
					t.Errorf("rank %d hit %d: r3 = %d, want %d", r, hits[r]+1, got, want)
				}
				hits[r]++
			case n.Kind == cdti.NotifyTypeTermination:
				if !n.Exit.Exited() || n.Exit.ExitCode() != 0 {
					t.Errorf("rank %d ended %v", r, n.Exit)
				}
				ended++
				continue
			default:
				t.Fatalf("rank %d: unexpected notify %+v", r, n)
			}
			update(t, c, r, &cdti.SetContinuationSignal{}, &cdti.ContinueProcess{})
		}
		for r := first; r < first+2; r++ {
			if hits[r] != 2 {
				t.Errorf("rank %d: %d breakpoint hits, want 2", r, hits[r])
			}
		}
	}
	got := waitOutput(t, j, out)
	for r := 0; r < 4; r++ {
		if want := fmt.Sprintf("rank %d sum %d\n", r, 6*r+242); !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}

	// The CNK link carried the tool's bytes unaltered, in order, beside the NotifyAcks toolctld
	// sends and the control system's own requests.
	tmu.Lock()
	defer tmu.Unlock()
	for node, rec := range recs {
		sent := rec.frames(t)
		var relayed [][]byte
		for _, b := range traced[node] {
			h, _ := cdti.ParseHeader(b)
			if h.Type != cdti.MsgNotifyAck && h.ToolID != controlToolID {
				relayed = append(relayed, b)
			}
		}
		if len(sent) != len(relayed) || len(sent) == 0 {
			t.Fatalf("node %d: the tool wrote %d messages, the CNK link carried %d", node, len(sent), len(relayed))
		}
		for i := range sent {
			if !bytes.Equal(sent[i], relayed[i]) {
				t.Errorf("node %d message %d: tool wrote % x, CNK link carried % x", node, i, sent[i], relayed[i])
			}
		}
	}
}

// TestToolctldRefusals: a fifth connection gets ErrorAck(ToolMaxAttachedExceeded) of 40 bytes
// and is closed; a message type tools may not send gets ErrorAck(UnsupportedType); a tool id
// another connection attached gets ToolIdConflict from toolctld; a tool that never attached
// gets ToolIdError.
func TestToolctldRefusals(t *testing.T) {
	j, _ := testJob(t, 2, 2, 1, nil)
	path := filepath.Join(j.ions[0].jobDir(j.ID()), "toolctl_rank", "1")
	var conns []net.Conn
	for i := 0; i < cdti.MaxActiveTools; i++ {
		c, err := net.Dial("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns = append(conns, c)
	}
	// The first four are served: the first attaches as tool 3.
	send := func(c net.Conn, m cdti.Message) cdti.Message {
		t.Helper()
		b, err := cdti.Encode(m)
		if err != nil {
			t.Fatal(err)
		}
		if err := cdti.WriteFrame(c, b); err != nil {
			t.Fatal(err)
		}
		r, err := cdti.ReadFrame(c)
		if err != nil {
			t.Fatal(err)
		}
		reply, err := cdti.DecodeMessage(r)
		if err != nil {
			t.Fatal(err)
		}
		return reply
	}
	hdr := func(tool uint32) cdti.Header {
		return cdti.Header{Service: cdti.ServiceToolctl, Version: cdti.ProtocolVersion, Rank: 1, SequenceID: 9, JobID: j.ID(), ToolID: tool}
	}
	if r := send(conns[0], &cdti.Attach{Header: hdr(3), Tag: cdti.NewTag("one"), Priority: 5, Select: cdti.RanksInNode}); r.Hdr().ReturnCode != cdti.Success {
		t.Fatalf("attach: %v", r.Hdr().ReturnCode)
	}
	if r := send(conns[1], &cdti.Attach{Header: hdr(3), Tag: cdti.NewTag("two"), Priority: 6}); r.MessageType() != cdti.MsgAttachAck || r.Hdr().ReturnCode != cdti.ToolIdConflict {
		t.Errorf("second attach of tool 3: %v %v, want AttachAck ToolIdConflict", r.MessageType(), r.Hdr().ReturnCode)
	}
	if r := send(conns[2], &cdti.Query{Header: hdr(3), Commands: []cdti.Command{&cdti.GetProcessData{}}}); r.MessageType() != cdti.MsgQueryAck || r.Hdr().ReturnCode != cdti.ToolIdError {
		t.Errorf("query of tool 3 from another connection: %v %v, want QueryAck ToolIdError", r.MessageType(), r.Hdr().ReturnCode)
	}
	if r := send(conns[0], &cdti.NotifyAck{Header: hdr(3)}); r.MessageType() != cdti.MsgErrorAck || r.Hdr().ReturnCode != cdti.UnsupportedType {
		t.Errorf("NotifyAck from a tool: %v %v, want ErrorAck UnsupportedType", r.MessageType(), r.Hdr().ReturnCode)
	}

	fifth, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer fifth.Close()
	b, err := cdti.ReadFrame(fifth)
	if err != nil {
		t.Fatalf("fifth connection: %v", err)
	}
	h, _ := cdti.ParseHeader(b)
	if h.Type != cdti.MsgErrorAck || h.ReturnCode != cdti.ToolMaxAttachedExceeded || h.Length != 40 || len(b) != 40 {
		t.Errorf("fifth connection got %v (%d bytes)", h, len(b))
	}
	if _, err := fifth.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Errorf("fifth connection after the ErrorAck: %v, want EOF", err)
	}
}

// TestToolctldDroppedTool: a tool that holds control of two ranks stopped at a breakpoint
// and whose socket then closes is forgotten by toolctld alone, which does not tell the CNK
// (cdti-v6.md §9.6): the CNK still has the tool attached and in control, so another tool is
// refused control naming it, and the tool's id, free again at toolctld, is refused by the
// CNK. Giving the ranks back is the tool's duty (TestCIOSAgentGivesBack).
func TestToolctldDroppedTool(t *testing.T) {
	j, _ := testJob(t, 2, 2, 1, nil, "spin")
	_, exe := built(t)
	work := workEntry(t, exe)
	c, _ := dialTool(t, nodePath(j, 0, 0), 4, j.ID())
	ctx := context.Background()
	if ack, err := c.Attach(ctx, 0, cdti.RanksInNode, cdti.NewTag("drop"), 20); err != nil || ack.ReturnCode != cdti.Success {
		t.Fatalf("attach: %v %+v", err, ack)
	}
	for r := uint32(0); r < 2; r++ {
		if ca, err := c.Control(ctx, r, cdti.Control{NotifySet: cdti.Signals(int(syscall.SIGTRAP), int(syscall.SIGSTOP)),
			SendSignal: uint32(syscall.SIGSTOP), DynamicNotify: cdti.DynamicNotifyStart}); err != nil || ca.ReturnCode != cdti.Success {
			t.Fatalf("control rank %d: %v %+v", r, err, ca)
		}
	}
	if err := j.Start(); err != nil {
		t.Fatal(err)
	}
	stopped := 0
	for stopped < 2 {
		n := nextNotify(t, c)
		switch {
		case n.Kind == cdti.NotifyTypeSignal && n.Signal.Signal == uint32(syscall.SIGSTOP):
			update(t, c, n.Rank, &cdti.SetBreakpoint{Addr: work, Instruction: ppc64.TrapWordCNK})
			update(t, c, n.Rank, &cdti.SetContinuationSignal{}, &cdti.ContinueProcess{})
		case n.Kind == cdti.NotifyTypeSignal && n.Signal.Reason == cdti.SignalBreakpoint:
			stopped++
		default:
			t.Fatalf("unexpected notify %+v", n)
		}
	}
	c.Close() // both ranks stopped at the trap, the tool in control

	other, _ := dialTool(t, nodePath(j, 0, 0), 5, j.ID())
	if ack, err := other.Attach(ctx, 0, cdti.RanksInNode, cdti.NewTag("other"), 30); err != nil || ack.ReturnCode != cdti.Success {
		t.Fatalf("another tool's attach: %v %+v", err, ack)
	}
	for r := uint32(0); r < 2; r++ {
		ca, err := other.Control(ctx, r, cdti.Control{NotifySet: cdti.Signals(int(syscall.SIGTRAP))})
		if ca == nil || ca.ReturnCode != cdti.ToolControlConflict || ca.ControllingToolID != 4 {
			t.Errorf("rank %d: another tool's control: %v %+v, want ToolControlConflict held by tool 4", r, err, ca)
		}
	}
	again, _ := dialTool(t, nodePath(j, 0, 0), 4, j.ID())
	if ack, err := again.Attach(ctx, 0, cdti.RanksInNode, cdti.NewTag("again"), 40); ack == nil || ack.ReturnCode != cdti.ToolIdConflict {
		t.Errorf("tool id 4 from a new socket: %v %+v, want the CNK's ToolIdConflict", err, ack)
	}
}

// TestToolctldOneRequestAtATime: two tools pipelining queries to the two ranks of one compute
// node all get their answers, and the CNK link carries one request at a time: each request
// is followed by its ack before the next is written (the FIFO of §2.7). Each tool's Notify
// reaches that tool alone.
func TestToolctldOneRequestAtATime(t *testing.T) {
	type frame struct {
		in bool
		h  cdti.Header
	}
	var tmu sync.Mutex
	var link []frame
	j, _ := testJob(t, 2, 2, 1, func(_ uint32, in bool, b []byte) {
		h, _ := cdti.ParseHeader(b)
		if h.Type == cdti.MsgNotify || h.Type == cdti.MsgNotifyAck {
			return
		}
		tmu.Lock()
		link = append(link, frame{in, h})
		tmu.Unlock()
	})
	ctx := context.Background()
	const n = 40
	var wg sync.WaitGroup
	var clients []*cdti.Client
	for tool := uint32(1); tool <= 2; tool++ {
		c, err := net.Dial("unix", filepath.Join(j.ions[0].jobDir(j.ID()), "toolctl_rank", fmt.Sprint(tool-1)))
		if err != nil {
			t.Fatal(err)
		}
		cl := cdti.NewClient(c, cdti.ClientOptions{ToolID: tool, JobID: j.ID(), Timeout: time.Minute}) // pipelining
		defer cl.Close()
		clients = append(clients, cl)
		rank := tool - 1
		if ack, err := cl.Attach(ctx, rank, cdti.RankInHeader, cdti.NewTag("pipe"), uint8(tool)); err != nil || ack.ReturnCode != cdti.Success {
			t.Fatalf("attach tool %d: %v %+v", tool, err, ack)
		}
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rs, err := cl.Query(ctx, rank, &cdti.GetProcessData{})
				if err != nil || rs[0].Code != cdti.CmdSuccess {
					t.Errorf("tool %d query %d: %v", tool, i, err)
					return
				}
				if r := rs[0].Ack.(*cdti.GetProcessDataAck).Rank; r != rank {
					t.Errorf("tool %d: process data of rank %d, want %d", tool, r, rank)
				}
			}()
		}
	}
	wg.Wait()
	// Each tool takes control of its rank, which stops with SIGSTOP: each Notify reaches the
	// tool it names, and only that one.
	for i, cl := range clients {
		rank := uint32(i)
		if ca, err := cl.Control(ctx, rank, cdti.Control{NotifySet: cdti.Signals(int(syscall.SIGSTOP)),
			SendSignal: uint32(syscall.SIGSTOP), DynamicNotify: cdti.DynamicNotifyStart}); err != nil || ca.ReturnCode != cdti.Success {
			t.Fatalf("control of rank %d: %v %+v", rank, err, ca)
		}
	}
	for i, cl := range clients {
		if n := nextNotify(t, cl); n.Rank != uint32(i) || n.ToolID != uint32(i+1) || n.Signal.Signal != uint32(syscall.SIGSTOP) {
			t.Errorf("tool %d received %+v", i+1, n)
		}
	}
	tmu.Lock()
	defer tmu.Unlock()
	tools := 0
	for i, f := range link {
		if f.in != (i%2 == 1) {
			t.Fatalf("link frame %d (%v, in %v): requests and acks do not alternate", i, f.h.Type, f.in)
		}
		if f.in {
			req := link[i-1].h
			if f.h.Type != req.Type+1 || f.h.SequenceID != req.SequenceID || f.h.ToolID != req.ToolID {
				t.Fatalf("link frame %d: %v answers %v", i, f.h, req)
			}
		} else if f.h.ToolID != controlToolID {
			tools++
		}
	}
	if tools != 2*(n+2) {
		t.Errorf("the link carried %d tool requests, want %d", tools, 2*(n+2))
	}
}

// TestJobHeldUntilStart: a loaded job's ranks stand before their first instruction, alive,
// until Start (StartJob), and then run to their end.
func TestJobHeldUntilStart(t *testing.T) {
	j, out := testJob(t, 4, 2, 2, nil)
	live := 0
	for _, cn := range j.ions[0].nodes {
		rs, err := cn.ctl.running()
		if err != nil {
			t.Fatal(err)
		}
		live += len(rs)
	}
	if b, _ := os.ReadFile(out); live != 4 || len(b) != 0 {
		t.Fatalf("before StartJob: %d ranks alive, output %q; want 4 held, silent", live, b)
	}
	if err := j.Start(); err != nil {
		t.Fatal(err)
	}
	got := waitOutput(t, j, out)
	for r := 0; r < 4; r++ {
		if want := fmt.Sprintf("rank %d sum %d\n", r, 6*r+242); !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
}
