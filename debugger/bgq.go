package debugger

import (
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"strings"

	"github.com/hpcdap/hpcdap/cdti"
	"github.com/hpcdap/hpcdap/ppc64"
	"github.com/hpcdap/hpcdap/symbols"
)

// Ranks behind a Blue Gene/Q CNK. A CNK speaks CDTI v6 and answers every extension command
// with CmdInval; the first such answer (to GetTargetInfo, when the rank's symbols are first
// loaded) marks the rank's node, and from then on the engine does what a debugger of a real
// BG/Q does:
//
//   - the machine and byte order come from the executable's ELF header (the program the launch
//     names; on BG/Q the proc table's executable), and the program is taken as static: its
//     load bias from the auxiliary vector, libraries only if a link map is readable;
//   - registers are read with GetGeneralRegs, GetSpecialRegs, GetFloatRegs (QPX) and
//     GetDebugRegs in one Query, turned into the Linux sets the symbol code unwinds with, and
//     shown in the Registers scope under their BG/Q names; they are written with the v6 Set
//     commands;
//   - stacks are unwound here (no GetTraceback, no GatherStacks);
//   - ranks are stopped with SIGSTOP (stopRank), breakpoint conditions are decided here
//     (agentcond.go), and expressions that call functions are refused;
//   - thread names carry the hardware thread that runs each thread (GetThreadData).

// loadFromELF is loadLocked for a rank whose agent does not answer GetTargetInfo: the
// machine and byte order come from the executable the launch named.
func (rs *rankSymbols) loadFromELF(ctx context.Context, gen listGen) error {
	r := rs.rank
	if r.Exe == "" {
		return fmt.Errorf("rank %d: its agent does not describe the process (a BG/Q CNK) and the launch names no executable", r.Num)
	}
	f, err := elf.Open(r.Exe)
	if err != nil {
		return fmt.Errorf("rank %d: its agent does not describe the process (a BG/Q CNK): read the executable: %w", r.Num, err)
	}
	machine, order := f.Machine, f.ByteOrder
	f.Close()
	if rs.arch, err = symbols.ArchFor(machine, order); err != nil {
		return fmt.Errorf("rank %d: %s: %w", r.Num, r.Exe, err)
	}
	if machine != elf.EM_PPC64 {
		return fmt.Errorf("rank %d: %s is %v, but an agent without the extensions (a BG/Q CNK) has Power registers only", r.Num, r.Exe, machine)
	}
	rs.order, rs.exe, rs.cnk = order, r.Exe, true
	rs.mem = &rankMemory{rs: rs}
	if !r.node.cnk.Swap(true) {
		r.job.logf("the agent of %s speaks CDTI v6 only (a BG/Q CNK): machine from %s, registers by the v6 commands, stacks unwound here", r.node.host, r.Exe)
	}
	return rs.readModulesLocked(ctx, gen, false)
}

// behindCNK reports whether r's agent is a BG/Q CNK (known once it refused GetTargetInfo). It
// takes no lock: memory is read with the rank's symbol lock held.
func (r *Rank) behindCNK() bool { return r.node != nil && r.node.cnk.Load() }

// isCNK reports whether the rank's agent is a BG/Q CNK (known once its symbols are loaded).
func (rs *rankSymbols) isCNK() bool {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return rs.cnk
}

// bgqRegisters reads a thread's BG/Q register sets in one Query.
func (rs *rankSymbols) bgqRegisters(ctx context.Context, lwp int) (*ppc64.BGQRegs, error) {
	res, err := rs.client().Query(ctx, rs.num(), ppc64.BGQQuery(uint32(lwp))...)
	if err != nil {
		return nil, fmt.Errorf("rank %d: LWP %d: read registers: %w", rs.rank.Num, lwp, err)
	}
	var b ppc64.BGQRegs
	if err := b.FromBGQAcks(res); err != nil {
		return nil, fmt.Errorf("rank %d: LWP %d: read registers: %w", rs.rank.Num, lwp, err)
	}
	return &b, nil
}

// setNative writes a thread's native register set (set, data as patchNative gives them):
// with SetRegisterSet, or against a CNK with the v6 Set commands.
func (rs *rankSymbols) setNative(ctx context.Context, lwp int, set cdti.RegisterSet, data []byte) error {
	if !rs.isCNK() {
		return rs.client().SetRegisterSet(ctx, rs.num(), uint32(lwp), set, data)
	}
	b, err := rs.bgqRegisters(ctx, lwp)
	if err != nil {
		return err
	}
	gp, fp := data, []byte(nil)
	if set == cdti.RegSetFloat {
		gp, fp = nil, data
	}
	cmds, err := b.SetNative(uint32(lwp), gp, fp, rs.Arch().ByteOrder)
	if err != nil {
		return fmt.Errorf("rank %d: LWP %d: write registers: %w", rs.rank.Num, lwp, err)
	}
	return rs.update(ctx, "write registers", lwp, cmds...)
}

// update sends cmds in one Update and fails on the first command that fails.
func (rs *rankSymbols) update(ctx context.Context, what string, lwp int, cmds ...cdti.Command) error {
	res, err := rs.client().Update(ctx, rs.num(), cmds...)
	if err != nil {
		return fmt.Errorf("rank %d: LWP %d: %s: %w", rs.rank.Num, lwp, what, err)
	}
	for i, r := range res {
		if r.Code != cdti.CmdSuccess {
			return fmt.Errorf("rank %d: LWP %d: %s: %v: %v", rs.rank.Num, lwp, what, cmds[i].CommandType(), r.Code)
		}
	}
	return nil
}

// RegisterView is one register of the Registers scope.
type RegisterView struct {
	Name  string
	Value string
	// EvaluateName is the expression that reads it ("$pc"), "" if expressions cannot.
	EvaluateName string
}

// Registers lists the thread's registers at its stop, in the machine's order: against a
// BG/Q CNK its BG/Q sets by their BG/Q names (QPX registers as four doublewords, element 0
// the scalar FPR), else the machine's native sets as gdb's "info registers" names them.
func (ts *ThreadStack) Registers() []RegisterView {
	var out []RegisterView
	if ts.BGQ != nil {
		for _, r := range ts.BGQ.List() {
			v := RegisterView{Name: r.Name}
			if r.Alias != "" {
				v.EvaluateName = "$" + r.Alias
			}
			if len(r.Words) == 1 {
				v.Value = fmt.Sprintf("%#x", r.Words[0])
			} else {
				w := make([]string, len(r.Words))
				for i, x := range r.Words {
					w[i] = fmt.Sprintf("%#x", x)
				}
				v.Value = "{" + strings.Join(w, ", ") + "}"
			}
			out = append(out, v)
		}
		return out
	}
	if ts.proc == nil {
		return nil
	}
	a := ts.proc.Arch
	for _, slot := range a.Registers {
		if v, ok := RegisterValue(a, slot, ts.GP, ts.FP); ok {
			out = append(out, RegisterView{Name: slot.Name, Value: v, EvaluateName: "$" + slot.Name})
		}
	}
	return out
}

// errCNKNoCalls refuses a function call in an expression on a rank behind a CNK.
func errCNKNoCalls(r *Rank, name string) error {
	return fmt.Errorf("call %s: rank %d runs under a Blue Gene/Q CNK, which cannot run functions for a debugger (CDTI v6 has no such command): expressions that call functions are refused there", name, r.Num)
}

// hardwareThreads names the hardware thread (core and thread) that runs each of lwps of a
// rank behind a CNK, from GetThreadData (16 threads per Query); best effort.
func (r *Rank) hardwareThreads(ctx context.Context, lwps []int) map[int]string {
	out := map[int]string{}
	if !r.sym.isCNK() {
		return out
	}
	cmds := make([]cdti.Command, len(lwps))
	for i, l := range lwps {
		cmds[i] = &cdti.GetThreadData{ThreadID: uint32(l)}
	}
	res, err := r.node.client.QueryBatch(ctx, uint32(r.Num), cmds)
	if err != nil && !errors.Is(err, context.Canceled) {
		r.job.logf("rank %d: thread data: %v", r.Num, err)
	}
	for i, x := range res {
		if a, ok := x.Ack.(*cdti.GetThreadDataAck); ok && x.Code == cdti.CmdSuccess && i < len(lwps) {
			out[lwps[i]] = fmt.Sprintf("core %d/thread %d", a.Core, a.HWThread)
		}
	}
	return out
}
