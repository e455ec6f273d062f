package rsp

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/hpcdap/hpcdap/ppc64"
	"github.com/hpcdap/hpcdap/target"
)

// usable checks that requests can be made: the process is there and stopped.
func (p *Process) usable(op string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.done:
		return fmt.Errorf("rsp: %s %s: %w", op, p.obj(), target.ErrExited)
	case p.running:
		return fmt.Errorf("rsp: %s %s: %w", op, p.obj(), target.ErrRunning)
	}
	return nil
}

// ReadMemory reads len(b) bytes at addr with m requests of at most half the stub's packet
// size each. It returns the bytes read before any error; an address the stub cannot read
// gives target.ErrAddress. Trap words standing in for stub breakpoints read back as written.
func (p *Process) ReadMemory(addr uint64, b []byte) (int, error) {
	p.req.Lock()
	defer p.req.Unlock()
	if err := p.usable("read memory"); err != nil {
		return 0, err
	}
	n, err := p.readMemory(addr, b)
	p.mu.Lock()
	for a, v := range p.virt {
		w := ppc64.PutWord(p.order, v.word)
		for i := range w {
			if a+uint64(i) >= addr && a+uint64(i) < addr+uint64(n) {
				b[a+uint64(i)-addr] = w[i]
			}
		}
	}
	p.mu.Unlock()
	return n, err
}

// maxRead is the largest m request: its hex reply must fit the stub's packet size.
func (p *Process) maxRead() int {
	if p.pktSize <= 0 {
		return 200
	}
	return p.pktSize / 2
}

// readMemory reads real memory. The caller holds p.req.
func (p *Process) readMemory(addr uint64, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		chunk := min(len(b)-n, p.maxRead())
		a := addr + uint64(n)
		op := fmt.Sprintf("read memory at %#x", a)
		r, err := p.request(fmt.Sprintf("m%x,%x", a, chunk))
		if err != nil {
			return n, fmt.Errorf("rsp: %s %s: %w", op, p.obj(), err)
		}
		if err := p.checkReply(op, r, true); err != nil {
			return n, err
		}
		data, err := decodeHex(bytes.TrimRight(r, "x")) // gdbserver marks unavailable bytes with x
		if err != nil || len(data) > chunk {
			return n, fmt.Errorf("rsp: %s %s: bad reply %q", op, p.obj(), short(string(r)))
		}
		if len(data) == 0 {
			return n, fmt.Errorf("rsp: %s %s: %w (empty reply)", op, p.obj(), target.ErrAddress)
		}
		n += copy(b[n:], data)
	}
	return n, nil
}

// WriteMemory writes b at addr with M requests. Program text is written too where the stub
// can (QEMU ≥ 9, gdbserver). Where it cannot (QEMU 7.2 refuses with E14), a 4-byte aligned
// write of a trap word is carried out as a stub breakpoint (Z0) at that address, and writing
// the original word back removes it; Capabilities and Notes report that this happened.
func (p *Process) WriteMemory(addr uint64, b []byte) (int, error) {
	p.req.Lock()
	defer p.req.Unlock()
	if err := p.usable("write memory"); err != nil {
		return 0, err
	}
	word, isWord := uint32(0), len(b) == 4 && addr%4 == 0
	if isWord {
		word = p.order.Uint32(b)
		p.mu.Lock()
		v, ok := p.virt[addr]
		p.mu.Unlock()
		if ok {
			if ppc64.IsTrap(word) {
				// Still a trap: the stub breakpoint stays; reads show the new word.
				p.mu.Lock()
				v.word = word
				p.virt[addr] = v
				p.mu.Unlock()
				return 4, nil
			}
			if err := p.requestOK(fmt.Sprintf("remove breakpoint at %#x", addr), fmt.Sprintf("z0,%x,4", addr)); err != nil {
				return 0, err
			}
			p.mu.Lock()
			delete(p.virt, addr)
			p.mu.Unlock()
			if bytes.Equal(b, v.orig) {
				p.noteWord(addr, b)
				return 4, nil
			}
		}
	}
	n, err := p.writeMemory(addr, b)
	if err == nil {
		p.noteWord(addr, b)
		return n, nil
	}
	if !isWord || !ppc64.IsTrap(word) || !errors.Is(err, target.ErrAddress) {
		return n, err
	}
	// The stub cannot write here (text under QEMU 7.2): plant a stub breakpoint instead.
	orig := make([]byte, 4)
	if _, rerr := p.readMemory(addr, orig); rerr != nil {
		return 0, err
	}
	r, zerr := p.request(fmt.Sprintf("Z0,%x,4", addr))
	if zerr != nil || string(r) != "OK" {
		return 0, fmt.Errorf("%w; stub breakpoint instead: %q %v", err, r, zerr)
	}
	p.mu.Lock()
	p.virt[addr] = virtualTrap{word: word, orig: orig}
	if p.caps.TextWrites {
		p.caps.TextWrites = false
		p.notes = append(p.notes, fmt.Sprintf("the stub cannot write program text (at %#x): trap words there are stub breakpoints (Z0)", addr))
	}
	p.caps.StubBreakpoints = true
	p.mu.Unlock()
	return 4, nil
}

// writeMemory writes real memory. The caller holds p.req.
func (p *Process) writeMemory(addr uint64, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		a := addr + uint64(n)
		header := fmt.Sprintf("M%x,%x:", a, len(b)-n)
		chunk := min(len(b)-n, (p.maxWrite()-len(header))/2)
		header = fmt.Sprintf("M%x,%x:", a, chunk)
		op := fmt.Sprintf("write memory at %#x", a)
		if err := p.requestOKMem(op, header+hex.EncodeToString(b[n:n+chunk])); err != nil {
			return n, err
		}
		n += chunk
	}
	return n, nil
}

// maxWrite is the largest packet a write may use.
func (p *Process) maxWrite() int {
	if p.pktSize <= 0 {
		return 400
	}
	return p.pktSize
}

// requestOKMem sends a memory request that answers OK, mapping E14 to target.ErrAddress.
func (p *Process) requestOKMem(op, cmd string) error {
	r, err := p.request(cmd)
	if err != nil {
		return fmt.Errorf("rsp: %s %s: %w", op, p.obj(), err)
	}
	if err := p.checkReply(op, r, true); err != nil {
		return err
	}
	if string(r) != "OK" {
		return fmt.Errorf("rsp: %s %s: unexpected reply %q", op, p.obj(), short(string(r)))
	}
	return nil
}

// noteWord remembers the instruction words a write leaves, so that a stop at one of them is
// classified without reading memory; words it only partly covers are forgotten.
func (p *Process) noteWord(addr uint64, b []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	end := addr + uint64(len(b))
	if len(b) == 4 && addr%4 == 0 {
		p.words[addr] = p.order.Uint32(b)
		return
	}
	for a := range p.words {
		if a+4 > addr && a < end {
			delete(p.words, a)
		}
	}
}
