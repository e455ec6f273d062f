package adapter

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"fmt"

	"github.com/google/go-dap"
	"github.com/hpcdap/hpcdap/symbols"
)

// maxReadMemory bounds one readMemory answer (its base64 must stay far below the client's
// message limit).
const maxReadMemory = 1 << 20

// viewProcess returns the process that memory and disassembly references are read in (see
// referenceRank).
func (j *Job) viewProcess(ctx context.Context) (*Rank, *symbols.Process, error) {
	r := j.referenceRank()
	if r == nil {
		return nil, nil, fmt.Errorf("no rank is alive")
	}
	j.mu.Lock()
	stopped := r.state == rankStopped
	t := r.mainThread()
	j.mu.Unlock()
	if stopped && t != nil {
		if ts, err := r.sym.stack(ctx, t.LWP); err == nil {
			return r, ts.proc, nil
		}
	}
	mods, err := r.sym.modules(ctx, false)
	if err != nil {
		return nil, nil, err
	}
	return r, r.sym.newProcess(mods, 0), nil
}

func (s *Session) onReadMemoryRequest(req *dap.ReadMemoryRequest) {
	j := s.currentJob(&req.Request)
	if j == nil {
		return
	}
	a := req.Arguments
	addr, err := parseAddress(a.MemoryReference, a.Offset)
	if err != nil {
		s.sendError(&req.Request, errReadMemory, "readMemory: "+err.Error())
		return
	}
	if a.Count < 0 {
		s.sendError(&req.Request, errReadMemory, "readMemory: negative count")
		return
	}
	count := min(a.Count, maxReadMemory)
	ctx, cancel := context.WithTimeout(s.ctx, defaultTimeout)
	defer cancel()
	var data []byte
	if j.core != nil {
		data = make([]byte, count)
		n, _ := j.core.core.ReadAt(data, addr)
		data = data[:n]
	} else {
		r := j.referenceRank()
		if r == nil {
			s.sendError(&req.Request, errReadMemory, "readMemory: no rank is alive")
			return
		}
		if err := r.sym.ensure(ctx); err != nil {
			s.sendError(&req.Request, errReadMemory, "readMemory: "+err.Error())
			return
		}
		data, _ = r.sym.mem.readDirect(ctx, addr, count)
		if len(data) < count {
			// Read what precedes the first unreadable page.
			data = s.readPrefix(ctx, r, addr, count)
		}
	}
	resp := &dap.ReadMemoryResponse{Response: newResponse(&req.Request)}
	resp.Body.Address = fmt.Sprintf("%#x", addr)
	resp.Body.Data = base64.StdEncoding.EncodeToString(data)
	resp.Body.UnreadableBytes = a.Count - len(data)
	s.send(resp)
}

// readPrefix reads as many bytes from addr as are readable, page by page.
func (s *Session) readPrefix(ctx context.Context, r *Rank, addr uint64, count int) []byte {
	var out []byte
	for len(out) < count {
		a := addr + uint64(len(out))
		n := min(count-len(out), int(pageSize-a%pageSize))
		b, err := r.sym.mem.readDirect(ctx, a, n)
		out = append(out, b...)
		if err != nil || len(b) < n {
			break
		}
	}
	return out
}

func (s *Session) onWriteMemoryRequest(req *dap.WriteMemoryRequest) {
	j := s.currentJob(&req.Request)
	if j == nil {
		return
	}
	a := req.Arguments
	if j.core != nil {
		s.sendError(&req.Request, errWriteMemory, "writeMemory: a core file cannot be changed")
		return
	}
	addr, err := parseAddress(a.MemoryReference, a.Offset)
	if err != nil {
		s.sendError(&req.Request, errWriteMemory, "writeMemory: "+err.Error())
		return
	}
	data, err := base64.StdEncoding.DecodeString(a.Data)
	if err != nil {
		s.sendError(&req.Request, errWriteMemory, "writeMemory: data is not base64: "+err.Error())
		return
	}
	r := j.referenceRank()
	if r == nil {
		s.sendError(&req.Request, errWriteMemory, "writeMemory: no rank is alive")
		return
	}
	ctx, cancel := context.WithTimeout(s.ctx, defaultTimeout)
	defer cancel()
	if err := r.sym.ensure(ctx); err != nil {
		s.sendError(&req.Request, errWriteMemory, "writeMemory: "+err.Error())
		return
	}
	if _, err := r.sym.mem.WriteAt(data, addr); err != nil {
		s.sendError(&req.Request, errWriteMemory, fmt.Sprintf("writeMemory at %#x on rank %d: %v", addr, r.Num, err))
		return
	}
	resp := &dap.WriteMemoryResponse{Response: newResponse(&req.Request)}
	resp.Body.BytesWritten = len(data)
	s.send(resp)
	s.mu.Lock()
	inval, memEv := s.client.SupportsInvalidatedEvent, s.client.SupportsMemoryEvent
	s.mu.Unlock()
	if memEv {
		s.sendEvent("memory", map[string]any{"memoryReference": a.MemoryReference, "offset": a.Offset, "count": len(data)})
	}
	if inval {
		s.sendEvent("invalidated", map[string]any{"areas": []string{"variables"}})
	}
}

// disasmInst is one decoded instruction.
type disasmInst struct {
	addr  uint64
	bytes []byte
	text  string
	bad   bool
}

// decodeAt decodes one instruction of the process at addr.
func decodeAt(p *symbols.Process, addr uint64) disasmInst {
	var code [16]byte
	n, _ := p.Mem.ReadAt(code[:], addr)
	if n == 0 {
		// Unreadable: a one-byte placeholder keeps the rows moving.
		return disasmInst{addr: addr, text: "<unreadable>", bad: true, bytes: nil}
	}
	sym := func(a uint64) (string, uint64) {
		if s, off, ok := p.SymbolAt(a); ok {
			return s.Name, a - off
		}
		return "", 0
	}
	text, length, err := p.Arch.Disassemble(code[:n], addr, sym)
	if err != nil {
		return disasmInst{addr: addr, text: "(bad)", bad: true, bytes: code[:min(n, p.Arch.InstAlign)]}
	}
	return disasmInst{addr: addr, text: text, bytes: append([]byte(nil), code[:length]...)}
}

// length of a decoded instruction (at least one byte, so that scanning always moves).
func (d disasmInst) length() uint64 { return max(uint64(len(d.bytes)), 1) }

// instructionsBefore returns up to k instruction addresses ending just before addr, decoding
// forward from a known boundary: the start of the symbol that holds the first of them.
func instructionsBefore(p *symbols.Process, addr uint64, k int) []uint64 {
	if k <= 0 {
		return nil
	}
	if align := uint64(p.Arch.InstAlign); align > 1 {
		// Aligned instruction words: count back.
		var out []uint64
		for i := k; i >= 1; i-- {
			if a := addr - align*uint64(i); a < addr {
				out = append(out, a)
			}
		}
		return out
	}
	back := uint64(k) * uint64(p.Arch.MaxInstLen)
	start := uint64(0)
	if addr > back {
		start = addr - back
	}
	// The symbol holding start begins on an instruction boundary: decode from there.
	if _, off, ok := p.SymbolAt(start); ok && off <= start {
		start -= off
	}
	var addrs []uint64
	for a := start; a < addr; {
		d := decodeAt(p, a)
		addrs = append(addrs, a)
		a += d.length()
	}
	if len(addrs) > k {
		addrs = addrs[len(addrs)-k:]
	}
	return addrs
}

func (s *Session) onDisassembleRequest(req *dap.DisassembleRequest) {
	j := s.currentJob(&req.Request)
	if j == nil {
		return
	}
	a := req.Arguments
	base, err := parseAddress(a.MemoryReference, a.Offset)
	if err != nil {
		s.sendError(&req.Request, errDisassemble, "disassemble: "+err.Error())
		return
	}
	count := a.InstructionCount
	if count <= 0 || count > 10000 {
		s.sendError(&req.Request, errDisassemble, fmt.Sprintf("disassemble: instructionCount %d (1…10000)", count))
		return
	}
	ctx, cancel := context.WithTimeout(s.ctx, defaultTimeout)
	defer cancel()
	var p *symbols.Process
	if j.core != nil {
		p = j.core.core.Process
	} else {
		var err error
		if _, p, err = j.viewProcess(ctx); err != nil {
			s.sendError(&req.Request, errDisassemble, "disassemble: "+err.Error())
			return
		}
	}
	var rows []disasmInst
	off := a.InstructionOffset
	if off < 0 {
		before := instructionsBefore(p, base, -off)
		for i := 0; i < -off-len(before); i++ {
			rows = append(rows, disasmInst{addr: 0, bad: true})
		}
		for _, ad := range before {
			rows = append(rows, decodeAt(p, ad))
		}
	}
	cur := base
	for skip := off; skip > 0; skip-- {
		cur += decodeAt(p, cur).length()
	}
	for len(rows) < count {
		d := decodeAt(p, cur)
		rows = append(rows, d)
		cur += d.length()
	}
	out := make([]DisassembledInstruction, 0, len(rows))
	lastLine, lastFile := -1, ""
	for _, d := range rows {
		di := DisassembledInstruction{DisassembledInstruction: dap.DisassembledInstruction{Address: fmt.Sprintf("%#x", d.addr),
			InstructionBytes: hex.EncodeToString(d.bytes), Instruction: d.text}}
		if d.bad {
			di.PresentationHint = "invalid"
			if d.text == "" {
				di.Instruction = "??"
			}
		}
		if sym, symOff, ok := p.SymbolAt(d.addr); ok && !d.bad {
			di.Symbol = sym.Name
			if symOff != 0 {
				di.Symbol = fmt.Sprintf("%s+%d", sym.Name, symOff)
			}
		}
		if m := p.ModuleAt(d.addr); m != nil && !d.bad {
			if l, ok := m.Bin.LineForPC(d.addr - m.Bias); ok && l.Line > 0 && (l.Line != lastLine || l.File != lastFile) {
				di.Location = s.sources.source(l.File)
				di.Line = s.lineOut(l.Line)
				lastLine, lastFile = l.Line, l.File
			}
		}
		out = append(out, di)
	}
	resp := &DisassembleResponse{Response: newResponse(&req.Request)}
	resp.Body.Instructions = out
	s.send(resp)
}
