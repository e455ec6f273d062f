package agent

import (
	"bytes"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/hpcdap/hpcdap/amd64"
	"github.com/hpcdap/hpcdap/cdti"
	"github.com/hpcdap/hpcdap/internal/testenv"
)

// A breakpoint at a function found with nm stops the process with the PC there (read through
// GetRegisterSet), the Notify reports it, and the traceback walks into the callers.
func TestBreakpointAtFunction(t *testing.T) {
	h := newHarness(t, "")
	out := h.spawn(1, progBin, "loop", "3")
	tt, first := startStopped(t, h, 1)
	pid := h.rankPid(0)

	// The spawned process is held at its first instruction: ld.so's entry point.
	interp := interpreterEntry(t, pid)
	if first.InstAddress != interp {
		t.Errorf("first stop at %#x, want ld.so's entry %#x", first.InstAddress, interp)
	}

	hit, inner, main := testenv.NMSymbol(t, progBin, "hit"), testenv.NMSymbol(t, progBin, "inner"), testenv.NMSymbol(t, progBin, "main")
	tt.setBreak(0, hit)
	// The text shows the trap to the process, the original to the tool.
	if got := procMem(t, pid, hit, 1)[0]; got != 0xCC {
		t.Errorf("/proc/%d/mem at hit = %#x, want the int3 0xCC", pid, got)
	}
	_, text := textBytes(t, progBin)
	f, _ := elf.Open(progBin)
	sec := f.Section(".text")
	f.Close()
	if got, want := tt.memory(0, hit, 4), text[hit-sec.Addr:hit-sec.Addr+4]; !bytes.Equal(got, want) {
		t.Errorf("GetMemory at hit = % x, want the original % x", got, want)
	}

	tt.cont(0)
	n := tt.signalNotify()
	if n.Reason != cdti.SignalBreakpoint || n.InstAddress != hit || n.Signal != uint32(syscall.SIGTRAP) {
		t.Fatalf("notify %+v, want Breakpoint SIGTRAP at hit %#x", n, hit)
	}
	if n.ThreadID != uint32(pid) {
		t.Errorf("notify thread %d, want the leader %d", n.ThreadID, pid)
	}
	if pc := tt.pc(0, 0); pc != hit {
		t.Errorf("PC after the hit (threadID 0 = the notified thread) = %#x, want %#x", pc, hit)
	}
	frames, err := tt.c.Traceback(ctx(), 0, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(frames) < 3 || frames[0].PC != hit || !inFunc(t, progBin, "inner", frames[1].PC) ||
		!inFunc(t, progBin, "main", frames[2].PC) {
		t.Errorf("traceback %+v: want hit %#x, then a return address in inner (%#x), then in main (%#x)",
			frames, hit, inner, main)
	}
	// GetThreadData's stackInfo: the saved return addresses of the same walk.
	td := tt.query(0, &cdti.GetThreadData{}).Ack.(*cdti.GetThreadDataAck)
	if len(td.Frames) < 2 || td.Frames[0].SavedLR != frames[1].PC || td.Frames[1].SavedLR != frames[2].PC {
		t.Errorf("stackInfo %+v does not match the traceback %+v", td.Frames, frames)
	}
	if td.ToolState != cdti.ToolSuspend {
		t.Errorf("toolState %v, want Suspend", td.ToolState)
	}
	if sp := binary64(tt.regs(0, 0), amd64.OffRSP); td.StackCurrent != sp || td.StackStart <= sp {
		t.Errorf("stack current %#x start %#x, want SP %#x below the start", td.StackCurrent, td.StackStart, sp)
	}

	// The other two hits, then the end.
	tt.cont(0)
	if n := tt.signalNotify(); n.InstAddress != hit {
		t.Fatalf("second hit %+v", n)
	}
	tt.mustUpdate(0, &cdti.ResetBreakpoint{Addr: hit, Instruction: uint32(text[hit-sec.Addr])})
	tt.cont(0)
	if st := tt.waitTermination(0); !st.Exited() || st.ExitCode() != 0 {
		t.Errorf("exit status %v", st)
	}
	out.waitFor(t, "iterations 3 counter 3")
}

func binary64(b []byte, off int) uint64 { return le.Uint64(b[off:]) }

// interpreterEntry computes ld.so's entry point in a process: AT_BASE + the interpreter's
// e_entry (read from the ELF file, the oracle).
func interpreterEntry(t testing.TB, pid int) uint64 {
	t.Helper()
	auxv, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/auxv")
	if err != nil {
		t.Fatal(err)
	}
	var base uint64
	for i := 0; i+16 <= len(auxv); i += 16 {
		if le.Uint64(auxv[i:]) == 7 { // AT_BASE
			base = le.Uint64(auxv[i+8:])
		}
	}
	f, err := elf.Open(progBin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var interp string
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b := make([]byte, p.Filesz)
			p.ReadAt(b, 0)
			interp = strings.TrimRight(string(b), "\x00")
		}
	}
	ld, err := elf.Open(interp)
	if err != nil {
		t.Fatalf("open interpreter %q: %v", interp, err)
	}
	defer ld.Close()
	return base + ld.Entry
}

// Memory read through the agent equals the executable's bytes, for the whole text section.
func TestMemoryEqualsELF(t *testing.T) {
	h := newHarness(t, "")
	h.spawn(1, progBin, "loop", "1")
	tt, _ := startStopped(t, h, 1)
	addr, want := textBytes(t, progBin)
	got := tt.memory(0, addr, len(want)) // split into several GetMemory by the client
	if !bytes.Equal(got, want) {
		t.Fatalf("text read through the agent differs from the ELF file (%d bytes)", len(want))
	}
	// An address outside the process: CmdParmErr.
	r := tt.query(0, &cdti.GetMemory{Addr: 8, Length: 8})
	if r.Code != cdti.CmdParmErr {
		t.Errorf("GetMemory at 8: %v, want CmdParmErr", r.Code)
	}
	// Longer than MaxMemorySize: CmdLngthErr (sent with EncodeLax's rules through a raw query).
	rs := rawQuery(t, tt, 0, &cdti.GetMemory{Addr: addr, Length: cdti.MaxMemorySize + 1})
	if rs[0].Code != cdti.CmdLngthErr {
		t.Errorf("GetMemory of %d bytes: %v, want CmdLngthErr", cdti.MaxMemorySize+1, rs[0].Code)
	}
}

// Hitting a breakpoint 1,000 times in a loop is counted exactly, and the program confirms its
// 1,000 iterations.
func TestThousandHits(t *testing.T) {
	h := newHarness(t, "")
	out := h.spawn(1, progBin, "loop", "1000")
	tt, _ := startStopped(t, h, 1)
	hit := testenv.NMSymbol(t, progBin, "hit")
	tt.setBreak(0, hit)
	tt.cont(0)
	hits := 0
	for {
		n := tt.notify()
		if n.Kind == cdti.NotifyTypeTermination {
			if !n.Exit.Exited() || n.Exit.ExitCode() != 0 {
				t.Errorf("exit %v", n.Exit)
			}
			break
		}
		if n.Signal.Reason != cdti.SignalBreakpoint || n.Signal.InstAddress != hit {
			t.Fatalf("notify %+v", n.Signal)
		}
		hits++
		tt.cont(0)
	}
	if hits != 1000 {
		t.Errorf("%d breakpoint hits, want 1000", hits)
	}
	out.waitFor(t, "iterations 1000 counter 499500")
}

// Stepping from a planted breakpoint executes the original instruction: the thread arrives at
// the next instruction (objdump), the trap stays planted and is hit again on the next call.
func TestStepOverBreakpoint(t *testing.T) {
	h := newHarness(t, "")
	h.spawn(1, progBin, "loop", "2")
	tt, _ := startStopped(t, h, 1)
	pid := h.rankPid(0)
	hit := testenv.NMSymbol(t, progBin, "hit")
	tt.setBreak(0, hit)
	tt.cont(0)
	if n := tt.signalNotify(); n.InstAddress != hit {
		t.Fatalf("hit %+v", n)
	}
	next := nextInstruction(t, progBin, "hit", hit)
	tt.mustUpdate(0, &cdti.StepThread{})
	n := tt.signalNotify()
	if n.Reason != cdti.SignalStepComplete || n.InstAddress != next {
		t.Fatalf("step notify %+v, want StepComplete at %#x", n, next)
	}
	if pc := tt.pc(0, 0); pc != next {
		t.Errorf("pc %#x after the step, want %#x", pc, next)
	}
	if b := procMem(t, pid, hit, 1)[0]; b != 0xCC {
		t.Errorf("trap not re-inserted after the step: %#x", b)
	}
	// A second step from an ordinary instruction.
	next2 := nextInstruction(t, progBin, "hit", next)
	tt.mustUpdate(0, &cdti.StepThread{})
	if n := tt.signalNotify(); n.Reason != cdti.SignalStepComplete || n.InstAddress != next2 {
		t.Fatalf("second step %+v, want %#x", n, next2)
	}
	tt.cont(0)
	if n := tt.signalNotify(); n.Reason != cdti.SignalBreakpoint || n.InstAddress != hit {
		t.Fatalf("second hit %+v", n)
	}
	tt.cont(0)
	if st := tt.waitTermination(0); st.ExitCode() != 0 {
		t.Errorf("exit %v", st)
	}
}

// Continuing from a breakpoint on an instruction the agent does not emulate (the store in
// hit()) steps over it for real, 50 times; the program's result proves each store happened
// exactly once.
func TestContinueOverStore(t *testing.T) {
	h := newHarness(t, "")
	out := h.spawn(1, progBin, "loop", "50")
	tt, _ := startStopped(t, h, 1)
	store := objdumpStore(t, progBin, "hit", "counter")
	tt.setBreak(0, store)
	hits := countHits(t, tt, store)
	if hits != 50 {
		t.Errorf("%d hits, want 50", hits)
	}
	out.waitFor(t, "iterations 50 counter 1225")
}

// SetRegisterSet changes a thread's registers: the argument of hit() (rdi) is replaced at the
// first call, and the program's total shows it.
func TestSetRegisterSet(t *testing.T) {
	h := newHarness(t, "")
	out := h.spawn(1, progBin, "loop", "3")
	tt, _ := startStopped(t, h, 1)
	hit := testenv.NMSymbol(t, progBin, "hit")
	tt.setBreak(0, hit)
	tt.cont(0)
	tt.signalNotify()
	regs := tt.regs(0, 0)
	if got := binary64(regs, amd64.OffRDI); got != 0 {
		t.Fatalf("first call's argument %d, want 0", got)
	}
	le.PutUint64(regs[amd64.OffRDI:], 1000)
	if err := tt.c.SetRegisterSet(ctx(), 0, 0, cdti.RegSetGeneral, regs); err != nil {
		t.Fatal(err)
	}
	if r := tt.update(0, &cdti.SetRegisterSet{Set: cdti.RegSetGeneral, Data: regs[:10]})[0]; r.Code != cdti.CmdLngthErr {
		t.Errorf("SetRegisterSet of 10 bytes: %v, want CmdLngthErr", r.Code)
	}
	tt.mustUpdate(0, &cdti.ResetBreakpoint{Addr: hit, Instruction: uint32(origByte(t, progBin, hit))})
	tt.cont(0)
	if st := tt.waitTermination(0); st.ExitCode() != 0 {
		t.Errorf("exit %v", st)
	}
	out.waitFor(t, "iterations 3 counter 1003")
}

// Continuing from breakpoints on hit()'s store of its argument to its frame and on the load
// of it back, which the agent emulates instead of stepping: 50 calls, each trap reported and
// continued, and the program's result proves each store and load happened exactly once.
func TestContinueOverFrameMoves(t *testing.T) {
	h := newHarness(t, "")
	out := h.spawn(1, progBin, "loop", "50")
	tt, _ := startStopped(t, h, 1)
	entry := testenv.NMSymbol(t, progBin, "hit")
	store := nextInstruction(t, progBin, "hit", nextInstruction(t, progBin, "hit", entry))
	load := nextInstruction(t, progBin, "hit", nextInstruction(t, progBin, "hit", store))
	for _, a := range []uint64{store, load} {
		code := tt.memory(0, a, 8)
		var m machine
		regs := make([]byte, amd64.OffRIP+8)
		amd64.SetReg(regs, amd64.OffRIP, a)
		if _, ok := m.emulate(code, regs); !ok {
			t.Fatalf("% x at %#x is not emulated", code[:4], a)
		}
		tt.setBreak(0, a)
	}
	hits := countHits(t, tt, store, load)
	if hits != 100 {
		t.Errorf("%d hits, want 100", hits)
	}
	out.waitFor(t, "iterations 50 counter 1225")
}

// TestEmulateFrameMove decodes the moves between registers and frame slots that the agent
// emulates, and leaves alone those it must not (another base, RIP-relative, an index).
func TestEmulateFrameMove(t *testing.T) {
	var m machine
	regs := make([]byte, amd64.OffRIP+8)
	amd64.SetReg(regs, amd64.OffRBP, 0x7ffe1000)
	amd64.SetReg(regs, amd64.OffRDI, 0x1122334455667788)
	amd64.SetReg(regs, amd64.OffRIP, 0x401000)
	amd64.SetReg(regs, amd64.OffR9, 0x99)
	for _, c := range []struct {
		code        []byte
		n           int
		store, load uint64
		size, reg   int
	}{
		{[]byte{0x48, 0x89, 0x7d, 0xf8}, 4, 0x7ffe0ff8, 0, 8, amd64.OffRDI},                  // mov %rdi,-0x8(%rbp)
		{[]byte{0x89, 0x7d, 0xfc}, 3, 0x7ffe0ffc, 0, 4, amd64.OffRDI},                        // mov %edi,-0x4(%rbp)
		{[]byte{0x8b, 0x45, 0xfc}, 3, 0, 0x7ffe0ffc, 4, amd64.OffRAX},                        // mov -0x4(%rbp),%eax
		{[]byte{0x48, 0x8b, 0x45, 0xf8}, 4, 0, 0x7ffe0ff8, 8, amd64.OffRAX},                  // mov -0x8(%rbp),%rax
		{[]byte{0x4c, 0x89, 0x8d, 0x00, 0xff, 0xff, 0xff}, 7, 0x7ffe0f00, 0, 8, amd64.OffR9}, // mov %r9,-0x100(%rbp)
	} {
		e, ok := m.emulate(append(c.code, 0, 0, 0, 0), regs)
		if !ok || amd64.Reg(e.regs, amd64.OffRIP) != 0x401000+uint64(c.n) || e.store != c.store || e.load != c.load {
			t.Errorf("% x: %v %+v", c.code, ok, e)
			continue
		}
		if c.store != 0 && (e.storeSize != c.size || le.Uint64(e.value[:]) != amd64.Reg(regs, c.reg)) {
			t.Errorf("% x: store of %d bytes %#x", c.code, e.storeSize, e.value)
		}
		if c.load != 0 && (e.loadSize != c.size || e.loadReg != c.reg) {
			t.Errorf("% x: load of %d bytes into %d", c.code, e.loadSize, e.loadReg)
		}
	}
	for _, code := range [][]byte{
		{0x48, 0x8b, 0x15, 0xab, 0x2e, 0x00, 0x00}, // mov 0x2eab(%rip),%rdx
		{0x48, 0x89, 0x45},                         // truncated: no displacement
		{0x41, 0x89, 0x45, 0xf8},                   // REX.B: %r13 as the base
		{0x89, 0x44, 0x24, 0x08},                   // mov %eax,0x8(%rsp): a SIB byte
		{0x66, 0x89, 0x45, 0xf8},                   // a 16-bit store
	} {
		if e, ok := m.emulate(code, regs); ok {
			t.Errorf("% x emulated: %+v", code, e)
		}
	}
}

// TestEmulatedMoveFaultsAsItWould: continuing from a breakpoint on a move between a register
// and a frame slot that the process may not access (a null %rbp, a const object) must fault as
// the instruction would, not carry on with an emulated access the debugger's own rights allow.
func TestEmulatedMoveFaultsAsItWould(t *testing.T) {
	testenv.NeedTool(t, "gcc", "gcc")
	bin := filepath.Join(t.TempDir(), "slotfault")
	if out, err := exec.Command("gcc", "-g", "-O0", "-no-pie", "-o", bin, "testdata/slotfault.c").CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	for _, c := range []struct{ arg, at string }{{"null", "slot_null_load"}, {"rodata", "slot_rodata_store"}} {
		t.Run(c.arg, func(t *testing.T) {
			h := newHarness(t, "")
			out := h.spawn(1, bin, c.arg)
			tt, _ := startStopped(t, h, 1, int(syscall.SIGSEGV))
			a := testenv.NMSymbol(t, bin, c.at)
			code := tt.memory(0, a, 8)
			regs := make([]byte, amd64.OffRIP+8)
			amd64.SetReg(regs, amd64.OffRIP, a)
			var m machine
			if _, ok := m.emulate(code, regs); !ok {
				t.Fatalf("% x at %s is not an instruction the agent emulates: the test tests nothing", code[:4], c.at)
			}
			tt.setBreak(0, a)
			tt.cont(0)
			if n := tt.notify(); n.Kind != cdti.NotifyTypeSignal || n.Signal.InstAddress != a {
				t.Fatalf("first notification %+v, want the breakpoint at %#x", n, a)
			}
			tt.cont(0)
			n := tt.notify()
			if n.Kind != cdti.NotifyTypeSignal || n.Signal.Signal != uint32(syscall.SIGSEGV) || n.Signal.InstAddress != a {
				t.Errorf("continuing from %s: %+v, want SIGSEGV at %#x (output %q)", c.at, n, a, out.String())
			}
			// The access the agent may not emulate ran out of line and faulted there; the
			// fault is reported at the breakpoint, not in the scratch page.
			if pc := passesOf(t, h); pc.outOfLine != 1 || pc.emulated != 0 || pc.stepped != 0 {
				t.Errorf("passes %+v, want the one out of line", pc)
			}
			if got := tt.pc(0, n.Signal.ThreadID); got != a {
				t.Errorf("pc after the fault %#x, want the breakpoint %#x", got, a)
			}
		})
	}
}
