package ppc64

import (
	"bufio"
	"bytes"
	"debug/elf"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// trapCases returns every trap operation with every TO value, over a few register and
// immediate choices.
func trapCases() []Trap {
	var ts []Trap
	for to := uint8(0); to < 32; to++ {
		for _, r := range [][2]uint8{{0, 0}, {2, 2}, {3, 4}, {31, 17}} {
			ts = append(ts, Trap{Op: TW, TO: to, RA: r[0], RB: r[1]}, Trap{Op: TD, TO: to, RA: r[0], RB: r[1]})
		}
		for _, si := range []int16{0, 1, -1, 100, -32768, 32767, -32763} {
			ts = append(ts, Trap{Op: TWI, TO: to, RA: 3, SI: si}, Trap{Op: TDI, TO: to, RA: 31, SI: si})
		}
	}
	return ts
}

// plain spells t with the base mnemonic, which the assembler accepts for every TO.
func (t Trap) plain() string {
	if t.Op.Form() == XForm {
		return fmt.Sprintf("%v %d,%d,%d", t.Op, t.TO, t.RA, t.RB)
	}
	return fmt.Sprintf("%v %d,%d,%d", t.Op, t.TO, t.RA, t.SI)
}

// TestTrapEncodingAgainstBinutils has the cross assembler encode every trap form and TO value,
// and checks Encode against its words, DecodeTrap against the fields, and String against
// objdump's text of the same words, in both byte orders.
func TestTrapEncodingAgainstBinutils(t *testing.T) {
	cases := trapCases()
	var src strings.Builder
	src.WriteString("\t.text\n")
	for _, c := range cases {
		src.WriteString("\t" + c.plain() + "\n")
	}
	for _, a := range []crossArch{archBE, archLE} {
		t.Run(a.name, func(t *testing.T) {
			obj := a.assemble(t, t.TempDir(), "traps", src.String())
			f, err := elf.Open(obj)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			code, err := f.Section(".text").Data()
			if err != nil {
				t.Fatal(err)
			}
			if len(code) != 4*len(cases) {
				t.Fatalf("assembled %d bytes for %d instructions", len(code), len(cases))
			}
			text := a.objdumpText(t, obj)
			for i, c := range cases {
				got := f.ByteOrder.Uint32(code[4*i:])
				w, err := c.Encode()
				if err != nil {
					t.Fatalf("%s: %v", c.plain(), err)
				}
				if w != got {
					t.Errorf("%s: Encode = %#08x, assembler %#08x", c.plain(), w, got)
				}
				d, ok := DecodeTrap(got)
				if !ok || d != c {
					t.Errorf("DecodeTrap(%#08x) = %+v, %v; want %+v", got, d, ok, c)
				}
				if !IsTrap(got) {
					t.Errorf("IsTrap(%#08x) = false for %s", got, c.plain())
				}
				if s := c.String(); s != text[uint64(4*i)] {
					t.Errorf("%s: String = %q, objdump %q", c.plain(), s, text[uint64(4*i)])
				}
				if in, _ := Decode(code[4*i:], uint64(4*i), f.ByteOrder); in.Text != text[uint64(4*i)] {
					t.Errorf("%s: Decode = %q, objdump %q", c.plain(), in.Text, text[uint64(4*i)])
				}
			}
		})
	}
}

// TestTrapWordsAgainstBinutils checks the named trap words against the assembler's encoding of
// the instructions ppc64.md §2.3 gives for them.
func TestTrapWordsAgainstBinutils(t *testing.T) {
	words := []struct {
		asm  string
		word uint32
	}{
		{"trap", TrapWordLinux},
		{"tw 12,2,2", TrapWordCNK},
		{"twi 31,0,0", TrapWordTWI},
		{"td 31,0,0", TrapWordTD},
		{"tdi 31,0,0", TrapWordTDI},
		{"twi 0,0,0", TrapWordNever},
		{"twi 14,31,-32768", FastTrapBase},
		{"twi 14,31,-32768+77", FastTrapBase | 77},
		{"twi 14,31,-1", FastTrapBase | MaxFastTrap},
	}
	var src strings.Builder
	for _, w := range words {
		src.WriteString("\t" + w.asm + "\n")
	}
	for _, a := range []crossArch{archBE, archLE} {
		obj := a.assemble(t, t.TempDir(), "words", src.String())
		f, err := elf.Open(obj)
		if err != nil {
			t.Fatal(err)
		}
		code, _ := f.Section(".text").Data()
		f.Close()
		for i, w := range words {
			if got := f.ByteOrder.Uint32(code[4*i:]); got != w.word {
				t.Errorf("%s %s: assembler %#08x, constant %#08x", a.name, w.asm, got, w.word)
			}
			if b := PutWord(f.ByteOrder, w.word); !bytes.Equal(b, code[4*i:4*i+4]) {
				t.Errorf("%s PutWord(%#08x) = % x, assembler % x", a.name, w.word, b, code[4*i:4*i+4])
			}
		}
	}
}

// TestCNKClassification checks IsTrap and Classify over the whole opcode space against
// DecodeTrap's reading of the four trap instructions, and the fast-trap numbering.
func TestCNKClassification(t *testing.T) {
	for op := uint32(0); op < 64; op++ {
		for xo := uint32(0); xo < 1024; xo++ {
			for rc := uint32(0); rc < 2; rc++ {
				w := op<<26 | 0x1f<<21 | 5<<16 | 6<<11 | xo<<1 | rc
				if op != 31 && (xo != 0 || rc != 0) {
					continue // the X-form fields mean nothing to other opcodes
				}
				_, decoded := DecodeTrap(w)
				want := op == 2 || op == 3 || op == 31 && (xo == 4 || xo == 68)
				if IsTrap(w) != want || decoded != want {
					t.Fatalf("%#08x: IsTrap %v, DecodeTrap %v, want %v", w, IsTrap(w), decoded, want)
				}
			}
		}
	}
	for n := 0; n <= MaxFastTrap; n++ {
		w, err := FastTrapWord(n)
		if err != nil {
			t.Fatal(err)
		}
		tr, ok := DecodeTrap(w)
		if !ok || tr.Op != TWI || tr.TO != 14 || tr.RA != 31 || uint16(tr.SI) != 0x8000|uint16(n) {
			t.Fatalf("fast trap %d = %#08x decodes as %+v", n, w, tr)
		}
		if got, ok := FastTrapNumber(w); !ok || got != n || Classify(w) != FastTrap {
			t.Fatalf("fast trap %d: number %d %v, class %v", n, got, ok, Classify(w))
		}
		if !tr.Unconditional() {
			t.Fatalf("fast trap %d is not unconditional", n)
		}
		if NotifyRequired(w, true) || !NotifyRequired(w, false) {
			t.Fatalf("fast trap %d: NotifyRequired wrong", n)
		}
	}
	for _, n := range []int{-1, MaxFastTrap + 1} {
		if _, err := FastTrapWord(n); err == nil {
			t.Errorf("FastTrapWord(%d) gave no error", n)
		}
	}
	for w, want := range map[uint32]TrapClass{TrapWordCNK: NormalTrap, TrapWordLinux: NormalTrap,
		TrapWordNever: NormalTrap, 0x0ddf0000: NormalTrap, 0x60000000: NotTrap, 0x7c0802a6: NotTrap} {
		if Classify(w) != want || !NotifyRequired(w, true) {
			t.Errorf("Classify(%#08x) = %v, want %v", w, Classify(w), want)
		}
	}
	if tr, _ := DecodeTrap(TrapWordCNK); tr.Op.Form() != XForm || !tr.Unconditional() {
		t.Errorf("CNK trap %+v: form %v, unconditional %v", tr, tr.Op.Form(), tr.Unconditional())
	}
	if tr, _ := DecodeTrap(TrapWordNever); tr.Unconditional() || tr.Traps(0, 0) {
		t.Errorf("twi 0,r0,0 traps")
	}
}

// TestUnconditionalExhaustive checks Unconditional for every D-form TO and immediate (and
// the X-form TO values) against Traps on the values that witness each failing comparison.
func TestUnconditionalExhaustive(t *testing.T) {
	for _, op := range []TrapOp{TWI, TDI, TW, TD} {
		for to := uint8(0); to < 32; to++ {
			for si := -32768; si < 32768; si++ {
				tr := Trap{Op: op, TO: to, RA: 3, SI: int16(si)}
				if op.Form() == XForm {
					if si != 0 {
						break
					}
					tr.RB = 4
				}
				b := uint64(int64(si))
				m := uint64(1) << 31
				if op.Doubleword() {
					m = 1 << 63
				}
				cands := []uint64{0, 1, m - 1, m, m + 1, 2*m - 1, 2*m - 2, b, b - 1, b + 1, ^uint64(0)}
				all := true
				for _, a := range cands {
					for _, rb := range cands {
						if !tr.Traps(a, rb) {
							all = false
						}
						if op.Form() == DForm {
							break
						}
					}
				}
				if tr.Unconditional() != all {
					t.Fatalf("%+v: Unconditional %v, traps on every witness %v", tr, tr.Unconditional(), all)
				}
			}
		}
	}
}

// TestTrapConditionsUnderQEMU runs every trap form and TO value on a Power CPU (QEMU user
// mode) with boundary register values and compares whether it trapped with Traps.
func TestTrapConditionsUnderQEMU(t *testing.T) {
	qemu, err := exec.LookPath("qemu-ppc64")
	if err != nil {
		t.Fatal("qemu-ppc64 not found: install the Debian package qemu-user")
	}
	values := []uint64{0, 1, 2, 0x7fffffff, 0x80000000, 0xffffffff, 0x100000000, 0xffffffff00000001,
		0x7fffffffffffffff, 0x8000000000000000, 0xffffffffffffffff, 0xffffffffffff8005}
	imms := []int16{0, -1, 5, -32763}
	var c strings.Builder
	c.WriteString(`#include <signal.h>
#include <stdio.h>
#include <ucontext.h>
static volatile int fired;
static void on_trap(int sig, siginfo_t *si, void *uc) {
	fired = 1;
	((ucontext_t *)uc)->uc_mcontext.gp_regs[32] += 4; /* NIP: skip the trap */
}
static unsigned long v[] = {`)
	for _, v := range values {
		fmt.Fprintf(&c, "%#xUL,", v)
	}
	c.WriteString("};\n#define N (sizeof v / sizeof v[0])\n")
	c.WriteString(`#define X(op, to) for (int i = 0; i < N; i++) for (int j = 0; j < N; j++) { fired = 0; \
	__asm__ volatile(#op " %0,%1,%2" :: "i"(to), "r"(v[i]), "r"(v[j])); printf(#op " %d %d %d %d\n", to, i, j, fired); }
#define D(op, to, si) for (int i = 0; i < N; i++) { fired = 0; \
	__asm__ volatile(#op " %0,%1,%2" :: "i"(to), "r"(v[i]), "i"(si)); printf(#op " %d %d %d %d\n", to, i, si, fired); }
int main(void) {
	struct sigaction sa = {0};
	sa.sa_sigaction = on_trap;
	sa.sa_flags = SA_SIGINFO;
	sigaction(SIGTRAP, &sa, 0);
`)
	for to := 0; to < 32; to++ {
		fmt.Fprintf(&c, "\tX(tw, %d) X(td, %d)\n", to, to)
		for _, si := range imms {
			fmt.Fprintf(&c, "\tD(twi, %d, %d) D(tdi, %d, %d)\n", to, si, to, si)
		}
	}
	c.WriteString("\treturn 0;\n}\n")
	dir := t.TempDir()
	exe := archBE.compile(t, dir, "conds", c.String(), "-O1", "-static")
	out := run(t, qemu, exe)
	n := 0
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 5 {
			t.Fatalf("bad line %q", sc.Text())
		}
		to, _ := strconv.Atoi(f[1])
		i, _ := strconv.Atoi(f[2])
		j, _ := strconv.Atoi(f[3])
		tr := Trap{TO: uint8(to), RA: 3, RB: 4}
		var rb uint64
		switch f[0] {
		case "tw", "td":
			tr.Op, rb = map[string]TrapOp{"tw": TW, "td": TD}[f[0]], values[j]
		default:
			tr.Op, tr.RB, tr.SI = map[string]TrapOp{"twi": TWI, "tdi": TDI}[f[0]], 0, int16(j)
		}
		if got, want := tr.Traps(values[i], rb), f[4] == "1"; got != want {
			t.Errorf("%s TO=%d a=%#x b=%d/%#x: Traps %v, the CPU trapped: %v", f[0], to, values[i], j, rb, got, want)
		}
		n++
	}
	if want := 32 * (2*len(values)*len(values) + 2*len(imms)*len(values)); n != want {
		t.Fatalf("the program reported %d cases, want %d", n, want)
	}
	t.Logf("%d trap executions agree with Traps", n)
}
