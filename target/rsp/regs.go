package rsp

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"

	"github.com/hpcdap/hpcdap/ppc64"
	"github.com/hpcdap/hpcdap/target"
)

// ptRegsIndex maps target-description register names to pt_regs doublewords.
func ptRegsIndex(name string) (int, bool) {
	if n, ok := strings.CutPrefix(name, "r"); ok {
		if i, err := strconv.Atoi(n); err == nil && i >= 0 && i < 32 && strconv.Itoa(i) == n {
			return i, true
		}
	}
	i, ok := map[string]int{"pc": ppc64.PtNIP, "msr": ppc64.PtMSR, "orig_r3": ppc64.PtOrigGPR3,
		"ctr": ppc64.PtCTR, "lr": ppc64.PtLink, "xer": ppc64.PtXER, "cr": ppc64.PtCCR,
		"trap": ppc64.PtTrap}[name]
	return i, ok
}

// floatRegs returns the description's f0–f31 and fpscr, or an error naming a missing one.
func (p *Process) floatRegs() ([]*register, error) {
	var regs []*register
	for i := 0; i < 32; i++ {
		r := p.td.reg(fmt.Sprintf("f%d", i))
		if r == nil {
			return nil, fmt.Errorf("rsp: %s: target description has no f%d: %w", p.obj(), i, target.ErrUnsupported)
		}
		regs = append(regs, r)
	}
	if r := p.td.reg("fpscr"); r != nil {
		regs = append(regs, r)
	}
	return regs, nil
}

// Registers returns a register set of a thread: RegsGeneral as ppc64 pt_regs, RegsFloat as the
// 32 FPRs and the FPSCR (elf_fpregset_t), in the target's byte order. pt_regs fields the stub
// does not have (orig_gpr3, softe, trap, dar, dsisr, result under QEMU) are 0.
func (p *Process) Registers(tid int, set target.RegSet) ([]byte, error) {
	p.req.Lock()
	defer p.req.Unlock()
	if _, err := p.stoppedThread("read registers", tid); err != nil {
		return nil, err
	}
	if err := p.selectThread(tid); err != nil {
		return nil, err
	}
	switch set {
	case target.RegsGeneral:
		g, err := p.readG()
		if err != nil {
			return nil, err
		}
		var regs ppc64.PtRegs
		words := regs.Words()
		for _, r := range p.td.Regs {
			i, ok := ptRegsIndex(r.Name)
			if !ok || r.Offset+r.Size() > len(g) {
				continue
			}
			*words[i] = p.uint(g[r.Offset : r.Offset+r.Size()])
		}
		return regs.Marshal(p.order), nil
	case target.RegsFloat:
		regs, err := p.floatRegs()
		if err != nil {
			return nil, err
		}
		var f ppc64.FPRegs
		for i, r := range regs {
			raw, err := p.readRegister(r)
			if err != nil {
				return nil, err
			}
			if i < 32 {
				f.FPR[i] = p.uint(raw)
			} else {
				f.FPSCR = p.uint(raw)
			}
		}
		return f.Marshal(p.order), nil
	}
	return nil, fmt.Errorf("rsp: read registers %s thread %d: set %d: %w", p.obj(), tid, set, target.ErrUnsupported)
}

// uint decodes a register value of 1, 2, 4 or 8 bytes in target byte order.
func (p *Process) uint(b []byte) uint64 {
	switch len(b) {
	case 1:
		return uint64(b[0])
	case 2:
		return uint64(p.order.Uint16(b))
	case 4:
		return uint64(p.order.Uint32(b))
	case 8:
		return p.order.Uint64(b)
	}
	return 0
}

// putUint encodes v into b (1, 2, 4 or 8 bytes) in target byte order.
func (p *Process) putUint(b []byte, v uint64) {
	switch len(b) {
	case 1:
		b[0] = byte(v)
	case 2:
		p.order.PutUint16(b, uint16(v))
	case 4:
		p.order.PutUint32(b, uint32(v))
	case 8:
		p.order.PutUint64(b, v)
	}
}

// readG reads the g packet. Unavailable bytes ("xx") read as 0.
func (p *Process) readG() ([]byte, error) {
	r, err := p.request("g")
	if err != nil {
		return nil, fmt.Errorf("rsp: read registers %s: %w", p.obj(), err)
	}
	if err := p.checkReply("read registers", r, false); err != nil {
		return nil, err
	}
	g, err := decodeHex(bytes.ReplaceAll(r, []byte("x"), []byte("0")))
	if err != nil {
		return nil, fmt.Errorf("rsp: read registers %s: bad reply: %w", p.obj(), err)
	}
	return g, nil
}

// readRegister reads one register with p.
func (p *Process) readRegister(r *register) ([]byte, error) {
	op := "read register " + r.Name
	reply, err := p.request(fmt.Sprintf("p%x", r.Num))
	if err != nil {
		return nil, fmt.Errorf("rsp: %s %s: %w", op, p.obj(), err)
	}
	if err := p.checkReply(op, reply, false); err != nil {
		return nil, err
	}
	raw, err := decodeHex(bytes.ReplaceAll(reply, []byte("x"), []byte("0")))
	if err != nil || len(raw) != r.Size() {
		return nil, fmt.Errorf("rsp: %s %s: bad reply %q", op, p.obj(), short(string(reply)))
	}
	return raw, nil
}

// writeRegister writes one register with P.
func (p *Process) writeRegister(r *register, v uint64) error {
	raw := make([]byte, r.Size())
	p.putUint(raw, v)
	return p.requestOK("write register "+r.Name, fmt.Sprintf("P%x=%s", r.Num, hex.EncodeToString(raw)))
}

// SetRegisters replaces a register set of a thread (layouts as for Registers). pt_regs fields
// the stub does not have are ignored.
func (p *Process) SetRegisters(tid int, set target.RegSet, b []byte) error {
	p.req.Lock()
	defer p.req.Unlock()
	t, err := p.stoppedThread("write registers", tid)
	if err != nil {
		return err
	}
	if err := p.selectThread(tid); err != nil {
		return err
	}
	switch set {
	case target.RegsGeneral:
		var regs ppc64.PtRegs
		if err := regs.Unmarshal(b, p.order); err != nil {
			return fmt.Errorf("rsp: write registers %s thread %d: %w", p.obj(), tid, err)
		}
		words := regs.Words()
		g, err := p.readG()
		if err != nil {
			return err
		}
		for _, r := range p.td.Regs {
			if i, ok := ptRegsIndex(r.Name); ok && r.Offset+r.Size() <= len(g) {
				p.putUint(g[r.Offset:r.Offset+r.Size()], *words[i])
			}
		}
		if err := p.requestOK("write registers", "G"+hex.EncodeToString(g)); err != nil {
			return err
		}
		p.mu.Lock()
		t.pc, t.pcKnown = regs.NIP, true
		p.mu.Unlock()
		return nil
	case target.RegsFloat:
		var f ppc64.FPRegs
		if err := f.Unmarshal(b, p.order); err != nil {
			return fmt.Errorf("rsp: write registers %s thread %d: %w", p.obj(), tid, err)
		}
		regs, err := p.floatRegs()
		if err != nil {
			return err
		}
		for i, r := range regs {
			v := f.FPSCR
			if i < 32 {
				v = f.FPR[i]
			}
			if err := p.writeRegister(r, v); err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("rsp: write registers %s thread %d: set %d: %w", p.obj(), tid, set, target.ErrUnsupported)
}

// PC returns a thread's program counter.
func (p *Process) PC(tid int) (uint64, error) {
	p.req.Lock()
	defer p.req.Unlock()
	t, err := p.stoppedThread("read pc", tid)
	if err != nil {
		return 0, err
	}
	p.mu.Lock()
	pc, known := t.pc, t.pcKnown
	p.mu.Unlock()
	if known {
		return pc, nil
	}
	pc, err = p.readPC(tid)
	if err != nil {
		return 0, err
	}
	p.mu.Lock()
	t.pc, t.pcKnown = pc, true
	p.mu.Unlock()
	return pc, nil
}

// readPC reads the pc register of tid. The caller holds p.req.
func (p *Process) readPC(tid int) (uint64, error) {
	if err := p.selectThread(tid); err != nil {
		return 0, err
	}
	raw, err := p.readRegister(p.pcReg)
	if err != nil {
		return 0, err
	}
	return p.uint(raw), nil
}

// SetPC sets a thread's program counter.
func (p *Process) SetPC(tid int, pc uint64) error {
	p.req.Lock()
	defer p.req.Unlock()
	t, err := p.stoppedThread("write pc", tid)
	if err != nil {
		return err
	}
	if err := p.selectThread(tid); err != nil {
		return err
	}
	if err := p.writeRegister(p.pcReg, pc); err != nil {
		return err
	}
	p.mu.Lock()
	t.pc, t.pcKnown = pc, true
	p.mu.Unlock()
	return nil
}

// SetWatchpoint arms a watchpoint with Z2 (write), Z3 (read) or Z4 (access). The protocol's
// watchpoints cover every thread, so tid only has to exist. QEMU user mode has none
// (target.ErrUnsupported).
func (p *Process) SetWatchpoint(tid, slot int, addr uint64, size int, kind target.WatchKind) error {
	p.req.Lock()
	defer p.req.Unlock()
	if _, err := p.stoppedThread("set watchpoint", tid); err != nil {
		return err
	}
	if slot < 0 || slot >= p.caps.Watchpoints {
		return fmt.Errorf("rsp: set watchpoint %s slot %d: %w (%d slots)", p.obj(), slot, target.ErrUnsupported, p.caps.Watchpoints)
	}
	if _, busy := p.watch[slot]; busy {
		return fmt.Errorf("rsp: set watchpoint %s slot %d: %w", p.obj(), slot, target.ErrBusy)
	}
	if err := p.requestOK("set watchpoint", fmt.Sprintf("Z%d,%x,%x", zKind(kind), addr, size)); err != nil {
		return err
	}
	p.mu.Lock()
	p.watch[slot] = watchpoint{addr: addr, size: size, kind: kind}
	p.mu.Unlock()
	return nil
}

// ClearWatchpoint disarms a slot.
func (p *Process) ClearWatchpoint(tid, slot int) error {
	p.req.Lock()
	defer p.req.Unlock()
	if _, err := p.stoppedThread("clear watchpoint", tid); err != nil {
		return err
	}
	w, ok := p.watch[slot]
	if !ok {
		return nil
	}
	if err := p.requestOK("clear watchpoint", fmt.Sprintf("z%d,%x,%x", zKind(w.kind), w.addr, w.size)); err != nil {
		return err
	}
	p.mu.Lock()
	delete(p.watch, slot)
	p.mu.Unlock()
	return nil
}

// zKind is the Z packet type of a watch kind.
func zKind(k target.WatchKind) int {
	switch k {
	case target.WatchRead:
		return 3
	case target.WatchReadWrite:
		return 4
	}
	return 2
}
