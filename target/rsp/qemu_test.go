package rsp

import (
	"bufio"
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hpcdap/hpcdap/arch"
	"github.com/hpcdap/hpcdap/internal/testenv"
	"github.com/hpcdap/hpcdap/ppc64"
	"github.com/hpcdap/hpcdap/target"
)

// loopSource calls add() 10,000 times, with a floating-point sum alongside.
const loopSource = `#include <stdio.h>
int total;
double scale = 1.5;
__attribute__((noinline)) int add(int a, int b) { return a + b; }
int main(void) {
	double f = 0;
	for (int i = 0; i < 10000; i++) { total = add(total, i); f += scale; }
	printf("%d %g\n", total, f);
	return 0;
}
`

// loopOutput is what loopSource prints when every call ran.
const loopOutput = "49995000 15000\n"

// breakLoop plants trap words at addr and handles hits until the program exits or hits
// reaches limit (0: no limit). At each hit it checks the event, puts the original word back,
// steps, and plants the trap again. It returns the number of hits.
func breakLoop(t testing.TB, p *Process, addr uint64, limit int) int {
	t.Helper()
	orig := make([]byte, 4)
	if _, err := p.ReadMemory(addr, orig); err != nil {
		t.Fatal(err)
	}
	trap := p.Info().Arch.BreakInstr
	if _, err := p.WriteMemory(addr, trap); err != nil {
		t.Fatal(err)
	}
	tid := leader(t, p)
	if err := p.Resume(tid, 0); err != nil {
		t.Fatal(err)
	}
	hits := 0
	for {
		ev := next(t, p)
		if ev.Kind == target.EventExit {
			if ev.Status != 0 {
				t.Fatalf("program exited with wait status %#x", ev.Status)
			}
			return hits
		}
		if ev.Kind != target.EventSignal || ev.Signal != sigTRAP || ev.Trap != target.TrapBreakpoint || ev.PC != addr || ev.Code != trapBrkpt {
			t.Fatalf("hit %d: event %+v, want SIGTRAP breakpoint at %#x", hits+1, ev, addr)
		}
		hits++
		if hits == limit {
			return hits
		}
		if _, err := p.WriteMemory(addr, orig); err != nil {
			t.Fatal(err)
		}
		if err := p.Step(ev.Tid, 0); err != nil {
			t.Fatal(err)
		}
		if sev := next(t, p); sev.Kind != target.EventSignal || sev.Trap != target.TrapStep || sev.Tid != ev.Tid {
			t.Fatalf("hit %d: step event %+v", hits, sev)
		}
		if _, err := p.WriteMemory(addr, trap); err != nil {
			t.Fatal(err)
		}
		if err := p.Resume(ev.Tid, 0); err != nil {
			t.Fatal(err)
		}
	}
}

// TestBreakpointLoop plants the CNK trap word at add's entry (resolved through the .opd
// descriptor on big-endian, the local entry on little-endian) and counts its 10,000 hits.
func TestBreakpointLoop(t *testing.T) {
	for _, a := range []crossArch{archBE, archLE} {
		t.Run(a.name, func(t *testing.T) {
			emu, modern := a.qemu(t)
			exe := a.compile(t, "loop", loopSource, "-O0")
			var out bytes.Buffer
			p := launch(t, emu, []string{exe}, Options{Stdout: &out})
			info := p.Info()
			if info.Machine != elf.EM_PPC64 || info.ByteOrder != a.order || info.PtrSize != 8 || info.Arch.PCAfterBreak != 0 {
				t.Fatalf("info %+v", info)
			}
			if want := ppc64.PutWord(a.order, ppc64.TrapWordCNK); !bytes.Equal(info.Arch.BreakInstr, want) {
				t.Fatalf("BreakInstr % x, want % x", info.Arch.BreakInstr, want)
			}
			if p.Capabilities().TextWrites != modern {
				t.Fatalf("TextWrites %v with QEMU %q", p.Capabilities().TextWrites, p.Capabilities().EmulatorVersion)
			}
			addr := resolve(t, exe, "add")
			start := time.Now()
			hits := breakLoop(t, p, addr, 0)
			d := time.Since(start)
			if hits != 10000 {
				t.Fatalf("%d hits, want 10000", hits)
			}
			p.Wait()
			if out.String() != loopOutput {
				t.Fatalf("program printed %q, want %q", out.String(), loopOutput)
			}
			t.Logf("%s (%s): 10000 hits in %v, %.0f hits/s", a.name, p.Capabilities().EmulatorVersion, d.Round(time.Millisecond), 10000/d.Seconds())
		})
	}
}

var (
	// gdb's `maint print remote-registers`: Name Nr Rel Offset Size Type RemoteNr g/G-offset.
	gdbRemoteReg = regexp.MustCompile(`^\s+(\S+)\s+\d+\s+\d+\s+\d+\s+(\d+)\s+\S+\s+(\d+)\s+(\d+)\s*$`)
	// `info registers`: "r1             0x7fffee7ff980      140737194752384".
	gdbReg = regexp.MustCompile(`^(r\d+|pc|msr|cr|lr|ctr|xer|fpscr)\s+(0x[0-9a-f]+)\s`)
	// `info registers float`: "f1             1.5                 (raw 0x3ff8000000000000)".
	gdbFloat = regexp.MustCompile(`^(f\d+)\s+.*\(raw (0x[0-9a-f]+)\)`)
	// `p/x $pc`: "$3 = 0x10000858".
	gdbValue = regexp.MustCompile(`^\$\d+ = (0x[0-9a-f]+)$`)
)

// TestTargetDescriptionMatchesGDB compares the register numbers and g-packet offsets read
// from the stub's target description with gdb-multiarch's view of the same stub.
func TestTargetDescriptionMatchesGDB(t *testing.T) {
	a := archBE
	emu, _ := a.qemu(t)
	exe := a.compile(t, "loop", loopSource, "-O0")
	p := launch(t, emu, []string{exe}, Options{})
	out := underGDB(t, a, emu, []string{exe}, "maint print remote-registers")
	n := 0
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		m := gdbRemoteReg.FindStringSubmatch(sc.Text())
		if m == nil || m[1] == "''" {
			continue
		}
		size, _ := strconv.Atoi(m[2])
		num, _ := strconv.Atoi(m[3])
		off, _ := strconv.Atoi(m[4])
		r := p.td.reg(m[1])
		if r == nil {
			t.Errorf("%s: not in the parsed description", m[1])
			continue
		}
		if r.Num != num || r.Offset != off || r.Size() != size {
			t.Errorf("%s: number %d offset %d size %d; gdb %d %d %d", m[1], r.Num, r.Offset, r.Size(), num, off, size)
		}
		n++
	}
	if n < 70 || p.td.Arch != "powerpc:common64" {
		t.Fatalf("only %d registers compared (arch %q):\n%s", n, p.td.Arch, out)
	}
	t.Logf("%d registers agree with gdb-multiarch", n)
}

// TestRegistersAndStepsMatchGDB stops at the fifth call of add under this client and, in a
// second emulator, under gdb-multiarch; compares every general and floating-point register;
// then single-steps 20 instructions in both and compares the pc after each step. Both
// emulators run without address randomisation and with the same seed, so they match.
func TestRegistersAndStepsMatchGDB(t *testing.T) {
	for _, a := range []crossArch{archBE, archLE} {
		t.Run(a.name, func(t *testing.T) {
			emu, _ := a.qemu(t)
			emu = deterministic(t, emu)
			exe := a.compile(t, "loop", loopSource, "-O0")
			args := []string{"-seed", "1", exe}
			addr := resolve(t, exe, "add")
			const steps = 20

			cmds := []string{fmt.Sprintf("break *%#x", addr), "ignore 1 4", "continue", "info registers", "info registers float"}
			for i := 0; i < steps; i++ {
				cmds = append(cmds, "stepi", "p/x $pc")
			}
			gdbOut := underGDB(t, a, emu, args, cmds...)
			want := map[string]uint64{}
			var wantPCs []uint64
			sc := bufio.NewScanner(strings.NewReader(gdbOut))
			for sc.Scan() {
				line := strings.TrimSpace(sc.Text())
				if m := gdbReg.FindStringSubmatch(line); m != nil {
					want[m[1]], _ = strconv.ParseUint(m[2], 0, 64)
				} else if m := gdbFloat.FindStringSubmatch(line); m != nil {
					// f32–f63 are gdb's views of the vector registers (VSX), not FPRs.
					if n, _ := strconv.Atoi(m[1][1:]); n < 32 {
						want[m[1]], _ = strconv.ParseUint(m[2], 0, 64)
					}
				} else if m := gdbValue.FindStringSubmatch(line); m != nil {
					v, _ := strconv.ParseUint(m[1], 0, 64)
					wantPCs = append(wantPCs, v)
				}
			}
			if len(want) != 32+7+32 || len(wantPCs) != steps || want["pc"] != addr {
				t.Fatalf("gdb gave %d registers, %d pcs, pc %#x:\n%s", len(want), len(wantPCs), want["pc"], gdbOut)
			}

			p := launch(t, emu, args, Options{})
			if hits := breakLoop(t, p, addr, 5); hits != 5 {
				t.Fatalf("%d hits", hits)
			}
			tid := leader(t, p)
			gen, err := p.Registers(tid, target.RegsGeneral)
			if err != nil {
				t.Fatal(err)
			}
			var regs ppc64.PtRegs
			if err := regs.Unmarshal(gen, a.order); err != nil {
				t.Fatal(err)
			}
			fl, err := p.Registers(tid, target.RegsFloat)
			if err != nil {
				t.Fatal(err)
			}
			var fregs ppc64.FPRegs
			if err := fregs.Unmarshal(fl, a.order); err != nil {
				t.Fatal(err)
			}
			got := map[string]uint64{"pc": regs.NIP, "msr": regs.MSR, "cr": regs.CCR, "lr": regs.Link,
				"ctr": regs.CTR, "xer": regs.XER, "fpscr": fregs.FPSCR}
			for i := 0; i < 32; i++ {
				got[fmt.Sprintf("r%d", i)] = regs.GPR[i]
				got[fmt.Sprintf("f%d", i)] = fregs.FPR[i]
			}
			for name, w := range want {
				if got[name] != w {
					t.Errorf("%s = %#x, gdb-multiarch %#x", name, got[name], w)
				}
			}
			// The machine's register table reads the same values from the native sets.
			desc, err := arch.For(elf.EM_PPC64, a.order)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range desc.Registers {
				src := gen
				if r.Set == arch.Float {
					src = fl
				}
				w, ok := want[r.Name]
				if v := a.order.Uint64(src[r.Off : r.Off+r.Size]); !ok || v != w {
					t.Errorf("register table: %s = %#x, gdb-multiarch %#x (shown: %v)", r.Name, v, w, ok)
				}
			}
			if pc, err := p.PC(tid); err != nil || pc != addr {
				t.Errorf("PC = %#x, %v", pc, err)
			}
			if ppc64.MSRByteOrder(regs.MSR) != a.order {
				t.Errorf("MSR %#x does not say %v", regs.MSR, a.order)
			}
			// The trap is still in place: put the original back and step as gdb did.
			orig := make([]byte, 4)
			f, _ := elf.Open(exe)
			for _, s := range f.Sections {
				if addr >= s.Addr && addr < s.Addr+s.Size && s.Type == elf.SHT_PROGBITS {
					_, _ = s.ReadAt(orig, int64(addr-s.Addr))
				}
			}
			f.Close()
			if _, err := p.WriteMemory(addr, orig); err != nil {
				t.Fatal(err)
			}
			for i := 0; i < steps; i++ {
				if err := p.Step(tid, 0); err != nil {
					t.Fatal(err)
				}
				ev := next(t, p)
				if ev.Trap != target.TrapStep || ev.Tid != tid {
					t.Fatalf("step %d: %+v", i, ev)
				}
				pc, err := p.PC(tid)
				if err != nil {
					t.Fatal(err)
				}
				if pc != wantPCs[i] {
					t.Errorf("step %d: pc %#x, gdb-multiarch %#x", i+1, pc, wantPCs[i])
				}
			}
			t.Logf("%d registers and %d steps agree with gdb-multiarch", len(want), steps)
		})
	}
}

// TestMemoryMatchesELF reads every loadable segment of the program at its first instruction
// and compares it with the ELF file, checks bad addresses, and writes and reads back data.
func TestMemoryMatchesELF(t *testing.T) {
	for _, a := range []crossArch{archBE, archLE} {
		t.Run(a.name, func(t *testing.T) {
			emu, _ := a.qemu(t)
			exe := a.compile(t, "loop", loopSource, "-O0")
			p := launch(t, emu, []string{exe}, Options{})
			f, err := elf.Open(exe)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			total := 0
			for _, prog := range f.Progs {
				if prog.Type != elf.PT_LOAD || prog.Filesz == 0 {
					continue
				}
				want := make([]byte, prog.Filesz)
				if _, err := prog.ReadAt(want, 0); err != nil {
					t.Fatal(err)
				}
				got := make([]byte, prog.Filesz)
				n, err := p.ReadMemory(prog.Vaddr, got)
				if err != nil || n != len(got) {
					t.Fatalf("read segment at %#x: %d bytes, %v", prog.Vaddr, n, err)
				}
				if !bytes.Equal(got, want) {
					i := 0
					for got[i] == want[i] {
						i++
					}
					t.Fatalf("segment at %#x differs from the file at offset %#x", prog.Vaddr, i)
				}
				// Small and unaligned reads of the same bytes.
				for _, off := range []uint64{0, 1, 3, 4093, prog.Filesz - 8} {
					b := make([]byte, 8)
					if _, err := p.ReadMemory(prog.Vaddr+off, b); err != nil || !bytes.Equal(b, want[off:off+8]) {
						t.Fatalf("read 8 bytes at %#x: % x, %v; want % x", prog.Vaddr+off, b, err, want[off:off+8])
					}
				}
				total += n
			}
			if _, err := p.ReadMemory(0, make([]byte, 8)); !errors.Is(err, target.ErrAddress) {
				t.Errorf("read at 0: %v, want ErrAddress", err)
			}
			if _, err := p.WriteMemory(8, []byte{1, 2, 3, 4}); !errors.Is(err, target.ErrAddress) {
				t.Errorf("write at 8: %v, want ErrAddress", err)
			}
			// Data: write the double scale, read it back.
			scale := testenv.ELFSymbol(t, exe, "scale").Value
			v := make([]byte, 8)
			a.order.PutUint64(v, 0x4004000000000000) // 2.5
			if _, err := p.WriteMemory(scale, v); err != nil {
				t.Fatal(err)
			}
			back := make([]byte, 8)
			if _, err := p.ReadMemory(scale, back); err != nil || !bytes.Equal(back, v) {
				t.Fatalf("read back % x, %v", back, err)
			}
			t.Logf("%d bytes of segments equal the file", total)
		})
	}
}

// TestSetRegisters changes add's second argument (r4) at its first call through the
// general register set and checks the program's result, then writes the floating-point set and
// the pc and reads them back.
func TestSetRegisters(t *testing.T) {
	for _, a := range []crossArch{archBE, archLE} {
		t.Run(a.name, func(t *testing.T) {
			emu, _ := a.qemu(t)
			exe := a.compile(t, "loop", loopSource, "-O0")
			var out bytes.Buffer
			p := launch(t, emu, []string{exe}, Options{Stdout: &out})
			addr := resolve(t, exe, "add")
			if hits := breakLoop(t, p, addr, 1); hits != 1 {
				t.Fatalf("%d hits", hits)
			}
			tid := leader(t, p)
			gen, err := p.Registers(tid, target.RegsGeneral)
			if err != nil {
				t.Fatal(err)
			}
			var regs ppc64.PtRegs
			if err := regs.Unmarshal(gen, a.order); err != nil {
				t.Fatal(err)
			}
			if regs.GPR[4] != 0 { // add(total, 0)
				t.Fatalf("r4 = %d at the first call", regs.GPR[4])
			}
			regs.GPR[4] = 5
			if err := p.SetRegisters(tid, target.RegsGeneral, regs.Marshal(a.order)); err != nil {
				t.Fatal(err)
			}
			back, err := p.Registers(tid, target.RegsGeneral)
			if err != nil || !bytes.Equal(back, regs.Marshal(a.order)) {
				t.Fatalf("read back after write: %v", err)
			}
			var f ppc64.FPRegs
			fl, err := p.Registers(tid, target.RegsFloat)
			if err != nil {
				t.Fatal(err)
			}
			if err := f.Unmarshal(fl, a.order); err != nil {
				t.Fatal(err)
			}
			f.FPR[31] = 0x400921fb54442d18 // pi; f31 is unused by add
			if err := p.SetRegisters(tid, target.RegsFloat, f.Marshal(a.order)); err != nil {
				t.Fatal(err)
			}
			if fl, err = p.Registers(tid, target.RegsFloat); err != nil || !bytes.Equal(fl, f.Marshal(a.order)) {
				t.Fatalf("FPRs read back: %v", err)
			}
			if err := p.SetPC(tid, addr+4); err != nil {
				t.Fatal(err)
			}
			if pc, err := p.PC(tid); err != nil || pc != addr+4 {
				t.Fatalf("pc %#x, %v", pc, err)
			}
			if err := p.SetPC(tid, addr); err != nil {
				t.Fatal(err)
			}
			orig := make([]byte, 4)
			f2, _ := elf.Open(exe)
			for _, s := range f2.Sections {
				if s.Type == elf.SHT_PROGBITS && addr >= s.Addr && addr < s.Addr+s.Size {
					_, _ = s.ReadAt(orig, int64(addr-s.Addr))
				}
			}
			f2.Close()
			if _, err := p.WriteMemory(addr, orig); err != nil {
				t.Fatal(err)
			}
			if err := p.Resume(tid, 0); err != nil {
				t.Fatal(err)
			}
			if ev := next(t, p); ev.Kind != target.EventExit || ev.Status != 0 {
				t.Fatalf("event %+v", ev)
			}
			p.Wait()
			if want := "49995005 15000\n"; out.String() != want {
				t.Fatalf("program printed %q, want %q", out.String(), want)
			}
		})
	}
}
