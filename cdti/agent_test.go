package cdti

import (
	"context"
	"debug/elf"
	"net"
	"sync"
	"testing"
	"time"
)

// memAgent is a handler that serves one process image held in memory: enough semantics to
// check that requests and answers cross the framework intact. Memory at address a initially
// holds byte(a*7).
type memAgent struct {
	base uint64
	ext  bool // answers the extension commands (false: behaves as a BG/Q CNK, CmdInval)

	mu      sync.Mutex
	mem     []byte
	regs    map[RegisterSet][]byte
	lastCmd []Command     // commands of the last Query or Update, as the handler saw them
	gate    chan struct{} // when set, Query waits for a value before answering
	closed  chan error    // receives the error of every closed connection
	opened  chan *Conn
}

func newMemAgent(size int) *memAgent {
	a := &memAgent{base: 0x100000, ext: true, mem: make([]byte, size), regs: map[RegisterSet][]byte{},
		closed: make(chan error, 16), opened: make(chan *Conn, 16)}
	for i := range a.mem {
		a.mem[i] = byte((a.base + uint64(i)) * 7)
	}
	a.regs[RegSetGeneral] = make([]byte, 216) // x86_64 user_regs_struct
	for i := range a.regs[RegSetGeneral] {
		a.regs[RegSetGeneral][i] = byte(i)
	}
	a.regs[RegSetFloat] = make([]byte, 6000) // larger than DefaultRegisterSetSize
	return a
}

func memPattern(addr uint64, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte((addr + uint64(i)) * 7)
	}
	return b
}

func (a *memAgent) Opened(c *Conn) { a.opened <- c }

func (a *memAgent) Closed(c *Conn, err error) { a.closed <- err }

func (a *memAgent) Attach(c *Conn, m *Attach) *AttachAck {
	if m.Priority == 13 {
		return &AttachAck{Header: Header{ReturnCode: ToolPriorityConflict}}
	}
	return &AttachAck{Ranks: []uint32{m.Rank}}
}

func (a *memAgent) Detach(c *Conn, m *Detach) *DetachAck { return &DetachAck{Ranks: []uint32{m.Rank}} }

// Control grants control; a SendSignal is reported as a Notify after the ack, as CNK does.
func (a *memAgent) Control(c *Conn, m *Control) *ControlAck {
	if m.NotifySet == 0 {
		return &ControlAck{Header: Header{ReturnCode: ToolControlConflict, ErrorCode: 1}, ControllingToolID: 99,
			Tag: NewTag("other"), Priority: 98}
	}
	if m.SendSignal != 0 {
		c.AfterReply(func() {
			c.Notify(&Notify{Header: Header{Rank: m.Rank, ToolID: m.ToolID}, Kind: NotifyTypeSignal,
				Signal: NotifySignal{Signal: m.SendSignal, ThreadID: 100, Reason: SignalGeneric}})
		})
	}
	return &ControlAck{ControllingToolID: uint16(m.ToolID), Tag: NewTag("tool"), Priority: 50}
}

func (a *memAgent) inRange(addr uint64, n int) bool {
	return addr >= a.base && addr+uint64(n) <= a.base+uint64(len(a.mem)) && addr+uint64(n) >= addr
}

func (a *memAgent) Query(c *Conn, m *Query) ([]Result, ReturnCode) {
	a.mu.Lock()
	gate := a.gate
	a.lastCmd = m.Commands
	a.mu.Unlock()
	if gate != nil {
		<-gate
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	rs := make([]Result, len(m.Commands))
	for i, cmd := range m.Commands {
		switch x := cmd.(type) {
		case *GetMemory:
			if !a.inRange(x.Addr, int(x.Length)) {
				rs[i].Code = CmdAddrErr
				continue
			}
			o := x.Addr - a.base
			rs[i].Ack = &GetMemoryAck{ThreadID: 100, Addr: x.Addr, Length: x.Length,
				Data: append([]byte(nil), a.mem[o:o+uint64(x.Length)]...)}
		case *GetThreadList:
			rs[i].Ack = &GetThreadListAck{ThreadID: 100, Threads: []ThreadEntry{{100, false}, {101, true}}}
		case *GetTargetInfo:
			if !a.ext {
				rs[i].Code = CmdInval
				continue
			}
			rs[i].Ack = &GetTargetInfoAck{ThreadID: 100, Machine: elf.EM_X86_64, ByteOrder: elf.ELFDATA2LSB, PtrSize: 8,
				PageSize: 4096, Pid: 4242, Exe: "/bin/app"}
		case *GetRegisterSet:
			r, ok := a.regs[x.Set]
			switch {
			case !a.ext:
				rs[i].Code = CmdInval
			case !ok:
				rs[i].Code = CmdParmErr
			case uint32(len(r)) > x.Limit():
				rs[i].Code = CmdLngthErr
			default:
				rs[i].Ack = &GetRegisterSetAck{ThreadID: x.ThreadID, Set: x.Set, Data: append([]byte(nil), r...)}
			}
		case *GetTraceback:
			if !a.ext {
				rs[i].Code = CmdInval
				continue
			}
			var fs []TraceFrame
			for j := range min(x.Limit(), 3) {
				fs = append(fs, TraceFrame{PC: 0x401000 + uint64(j), CFA: 0x7ff000 + 16*uint64(j)})
			}
			rs[i].Ack = &GetTracebackAck{ThreadID: x.ThreadID, Frames: fs}
		default:
			rs[i].Code = CmdInval
		}
	}
	return rs, Success
}

func (a *memAgent) Update(c *Conn, m *Update) ([]Result, ReturnCode) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.lastCmd = m.Commands
	rs := make([]Result, len(m.Commands))
	for i, cmd := range m.Commands {
		switch x := cmd.(type) {
		case *SetMemory:
			if !a.inRange(x.Addr, len(x.Data)) {
				rs[i].Code = CmdAddrErr
				continue
			}
			copy(a.mem[x.Addr-a.base:], x.Data)
			rs[i].Ack = &SetMemoryAck{ThreadID: 100, Addr: x.Addr, Length: uint32(len(x.Data))}
		case *SendSignal:
			sig := x.Signal
			c.AfterReply(func() {
				c.Notify(&Notify{Header: Header{Rank: m.Rank, ToolID: m.ToolID}, Kind: NotifyTypeSignal,
					Signal: NotifySignal{Signal: sig, ThreadID: 100}})
			})
		case *SetRegisterSet:
			if !a.ext {
				rs[i].Code = CmdInval
				continue
			}
			a.regs[x.Set] = append([]byte(nil), x.Data...)
		case *HoldThread, *ContinueProcess, *StepThread, *ReleaseControl:
		default:
			rs[i].Code = CmdInval
		}
	}
	return rs, Success
}

const testToken = "0123456789abcdef0123456789abcdef"

// testServer runs a Server with agent a, reachable over loopback TCP or net.Pipe.
type testServer struct {
	srv *Server
	ln  net.Listener
}

func startServer(t *testing.T, a any) *testServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &testServer{srv: &Server{Handler: a, Token: []byte(testToken), Node: "node7"}, ln: ln}
	go s.srv.Serve(ln)
	t.Cleanup(func() { s.srv.Close() })
	return s
}

// dial connects a Client over the given transport ("tcp" or "pipe") and says Hello.
func (s *testServer) dial(t *testing.T, transport string, opts ClientOptions) *Client {
	t.Helper()
	if opts.Token == nil {
		opts.Token = []byte(testToken)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var c *Client
	var err error
	if transport == "tcp" {
		c, err = Dial(ctx, "tcp", s.ln.Addr().String(), opts)
	} else {
		cs, ss := net.Pipe()
		go s.srv.ServeConn(ss)
		c = NewClient(cs, opts)
		if _, err = c.Hello(ctx, opts.Token); err != nil {
			c.Close()
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}
