package debugger

import (
	"context"
	"fmt"

	"github.com/hpcdap/hpcdap/arch"
	"github.com/hpcdap/hpcdap/cdti"
	"github.com/hpcdap/hpcdap/symbols"
)

// The Registers scope shows a machine's arch.Registers, in gdb's "info registers" order, read
// from and written to the native register sets the agent exchanges.

// cdtiSet is the CDTI register set that holds a native set.
func cdtiSet(s arch.Set) cdti.RegisterSet {
	if s == arch.Float {
		return cdti.RegSetFloat
	}
	return cdti.RegSetGeneral
}

// nativeSet returns the set of gp and fp that holds register s.
func nativeSet(s arch.Register, gp, fp []byte) []byte {
	if s.Set == arch.Float {
		return fp
	}
	return gp
}

// RegisterValue formats register s from native sets, as gdb's "info registers" shows the raw
// value (hex for integer registers, bytes for vector ones).
func RegisterValue(a *symbols.Arch, s arch.Register, gp, fp []byte) (string, bool) {
	src := nativeSet(s, gp, fp)
	if s.Off+s.Size > len(src) {
		return "", false
	}
	b := src[s.Off : s.Off+s.Size]
	switch s.Size {
	case 8:
		return fmt.Sprintf("%#x", a.ByteOrder.Uint64(b)), true
	case 4:
		return fmt.Sprintf("%#x", a.ByteOrder.Uint32(b)), true
	}
	// Wide registers: hex bytes, most significant first (as gdb's uint128 view).
	v := "0x"
	for i := len(b) - 1; i >= 0; i-- {
		v += fmt.Sprintf("%02x", b[i])
	}
	return v, true
}

// patchNative returns the native set holding DWARF register reg with its bytes replaced by
// value (target order), for SetRegisterSet.
func patchNative(a *symbols.Arch, gp, fp []byte, reg int, value []byte) (cdti.RegisterSet, []byte, error) {
	if s, ok := a.Register(reg); ok {
		if src := nativeSet(s, gp, fp); s.Off+s.Size <= len(src) {
			data := append([]byte(nil), src...)
			v := make([]byte, s.Size)
			copy(v, value)
			copy(data[s.Off:], v)
			return cdtiSet(s.Set), data, nil
		}
	}
	return 0, nil, fmt.Errorf("register %s cannot be written", a.RegName(reg))
}

// patchByName is patchNative for a register named in the Registers scope.
func patchByName(a *symbols.Arch, gp, fp []byte, name string, v uint64) (cdti.RegisterSet, []byte, error) {
	for _, s := range a.Registers {
		if s.Name != name || s.Size > 8 {
			continue
		}
		src := nativeSet(s, gp, fp)
		if s.Off+s.Size > len(src) {
			break
		}
		data := append([]byte(nil), src...)
		switch s.Size {
		case 8:
			a.ByteOrder.PutUint64(data[s.Off:], v)
		case 4:
			a.ByteOrder.PutUint32(data[s.Off:], uint32(v))
		}
		return cdtiSet(s.Set), data, nil
	}
	return 0, nil, fmt.Errorf("register %s cannot be written", name)
}

// FaultAddress computes the address a faulting instruction accessed from its memory operand
// and the thread's registers (the CDTI Notify carries a data address for watchpoints only).
func FaultAddress(ctx context.Context, r *Rank, lwp int) (uint64, bool) {
	ts, err := r.sym.stack(ctx, lwp)
	if err != nil {
		return 0, false
	}
	pc, _ := ts.regs.PC()
	var code [16]byte
	n, _ := ts.proc.Mem.ReadAt(code[:], pc)
	return ts.proc.Arch.AccessAddress(code[:n], pc, ts.GP)
}

// SetRegister writes register name of thread t, in the register set read at its stop (ts).
func (j *Job) SetRegister(ctx context.Context, t *Thread, ts *ThreadStack, name string, val uint64) error {
	r := t.Rank
	if ts.BGQ != nil {
		cmd, err := ts.BGQ.SetCommand(uint32(t.LWP), name, val)
		if err != nil {
			return fmt.Errorf("register %s cannot be written", name)
		}
		return r.sym.update(ctx, "write "+name, t.LWP, cmd)
	}
	set, data, err := patchByName(ts.proc.Arch, ts.GP, ts.FP, name, val)
	if err != nil {
		return err
	}
	return r.node.client.SetRegisterSet(ctx, uint32(r.Num), uint32(t.LWP), set, data)
}
