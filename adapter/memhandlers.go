package adapter

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"fmt"

	"github.com/google/go-dap"
	"github.com/hpcdap/hpcdap/debugger"
	"github.com/hpcdap/hpcdap/symbols"
)

// maxReadMemory bounds one readMemory answer (its base64 must stay far below the client's
// message limit).
const maxReadMemory = 1 << 20

func (s *Conn) onReadMemoryRequest(req *dap.ReadMemoryRequest) {
	j := s.currentJob(&req.Request)
	if j == nil {
		return
	}
	a := req.Arguments
	addr, err := debugger.ParseAddress(a.MemoryReference, a.Offset)
	if err != nil {
		s.sendError(&req.Request, errReadMemory, "readMemory: "+err.Error())
		return
	}
	if a.Count < 0 {
		s.sendError(&req.Request, errReadMemory, "readMemory: negative count")
		return
	}
	count := min(a.Count, maxReadMemory)
	ctx, cancel := context.WithTimeout(s.ctx, debugger.DefaultTimeout)
	defer cancel()
	data, err := j.ReadMemory(ctx, addr, count)
	if err != nil {
		s.sendError(&req.Request, errReadMemory, "readMemory: "+err.Error())
		return
	}
	resp := &dap.ReadMemoryResponse{Response: newResponse(&req.Request)}
	resp.Body.Address = fmt.Sprintf("%#x", addr)
	resp.Body.Data = base64.StdEncoding.EncodeToString(data)
	resp.Body.UnreadableBytes = a.Count - len(data)
	s.send(resp)
}

func (s *Conn) onWriteMemoryRequest(req *dap.WriteMemoryRequest) {
	j := s.currentJob(&req.Request)
	if j == nil {
		return
	}
	a := req.Arguments
	if err := j.Frozen(); err != nil {
		s.sendError(&req.Request, errWriteMemory, "writeMemory: "+err.Error())
		return
	}
	addr, err := debugger.ParseAddress(a.MemoryReference, a.Offset)
	if err != nil {
		s.sendError(&req.Request, errWriteMemory, "writeMemory: "+err.Error())
		return
	}
	data, err := base64.StdEncoding.DecodeString(a.Data)
	if err != nil {
		s.sendError(&req.Request, errWriteMemory, "writeMemory: data is not base64: "+err.Error())
		return
	}
	r := j.ReferenceRank()
	if r == nil {
		s.sendError(&req.Request, errWriteMemory, "writeMemory: no rank is alive")
		return
	}
	if err := j.RankAuthority(r); err != nil {
		s.sendError(&req.Request, errWriteMemory, "writeMemory: "+err.Error())
		return
	}
	ctx, cancel := context.WithTimeout(s.ctx, debugger.DefaultTimeout)
	defer cancel()
	if err := j.WriteMemory(ctx, r, addr, data); err != nil {
		s.sendError(&req.Request, errWriteMemory, "writeMemory: "+err.Error())
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

func (s *Conn) onDisassembleRequest(req *dap.DisassembleRequest) {
	j := s.currentJob(&req.Request)
	if j == nil {
		return
	}
	a := req.Arguments
	base, err := debugger.ParseAddress(a.MemoryReference, a.Offset)
	if err != nil {
		s.sendError(&req.Request, errDisassemble, "disassemble: "+err.Error())
		return
	}
	count := a.InstructionCount
	if count <= 0 || count > 10000 {
		s.sendError(&req.Request, errDisassemble, fmt.Sprintf("disassemble: instructionCount %d (1…10000)", count))
		return
	}
	ctx, cancel := context.WithTimeout(s.ctx, debugger.DefaultTimeout)
	defer cancel()
	p, err := j.ViewProcess(ctx)
	if err != nil {
		s.sendError(&req.Request, errDisassemble, "disassemble: "+err.Error())
		return
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
