package ppc64

import (
	"debug/elf"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
)

// disasmSource has loops, a switch (jump table), floating point, calls direct and through a
// pointer, varargs, a vectorisable loop and atomics, to give the disassembler varied -O2 code.
const disasmSource = `#include <stdio.h>
#include <stdlib.h>
#include <string.h>
struct s { double d; long l; };
__attribute__((noinline)) int add(int a, int b) { return a + b; }
__attribute__((noinline)) long g(long *p, int n, double x, struct s *q) {
	long t = 0;
	for (int i = 0; i < n; i++) { t += p[i] * 3 + (long)(x * i); if (p[i] > 100) t ^= q->l; }
	q->d = x * t;
	printf("%ld %s\n", t, strchr("abc", 'b'));
	return t + add(n, 3);
}
__attribute__((noinline)) const char *name(int k) {
	switch (k) { case 0: return "zero"; case 1: return "one"; case 2: return "two"; case 3: return "three";
	case 4: return "four"; case 5: return "five"; case 6: return "six"; default: return "many"; }
}
__attribute__((noinline)) void scale(float *restrict a, const float *restrict b, int n) {
	for (int i = 0; i < n; i++) a[i] = a[i] * 2.5f + b[i];
}
static long counter;
__attribute__((noinline)) long bump(long k) { return __atomic_add_fetch(&counter, k, __ATOMIC_SEQ_CST); }
__attribute__((noinline)) unsigned long bits(unsigned long x, unsigned y) {
	return (x << 7) ^ (x >> 13) ^ (y << 3) ^ (y >> 29) ^ ((x >> 3) & 0xff) ^ __builtin_popcountl(x) ^ __builtin_clzl(x | 1);
}
int cmp(const void *a, const void *b) { return *(const int *)a - *(const int *)b; }
int main(int argc, char **argv) {
	struct s q = {1, 2}; long a[4] = {1, 2, 3, 4}; int v[5] = {5, 3, 1, 4, 2};
	float f[8] = {0}, h[8] = {1};
	qsort(v, 5, sizeof v[0], cmp);
	scale(f, h, argc + 6);
	puts(name(argc));
	return (int)(g(a, argc, 2.0, &q) + bump(argc) + bits(argc, argc) + v[0] + (int)f[0]);
}
`

// funcsOfSource are the functions of disasmSource.
var funcsOfSource = []string{"add", "g", "name", "scale", "bump", "bits", "cmp", "main"}

// objdumpTargetText matches "0xADDR" operands after normalisation.
var hexOperand = regexp.MustCompile(`0x[0-9a-f]+$`)

// TestDisassembleFunctionsMatchObjdump disassembles every function of a program compiled at
// -O2, big- and little-endian, and compares each instruction with objdump's line for it.
func TestDisassembleFunctionsMatchObjdump(t *testing.T) {
	for _, a := range []crossArch{archBE, archLE} {
		t.Run(a.name, func(t *testing.T) {
			exe := a.compile(t, t.TempDir(), "prog", disasmSource, "-O2", "-mcpu=power8")
			fh, err := os.Open(exe)
			if err != nil {
				t.Fatal(err)
			}
			defer fh.Close()
			r, err := NewResolver(fh)
			if err != nil {
				t.Fatal(err)
			}
			want := a.objdumpText(t, exe)
			total := 0
			for _, name := range funcsOfSource {
				e, err := r.Lookup(name)
				if err != nil {
					t.Fatal(err)
				}
				code := textBytes(t, r.File(), e.Global, e.Size)
				insts := Disassemble(code, e.Global, r.File().ByteOrder)
				if len(insts) != int(e.Size/4) {
					t.Errorf("%s: %d instructions for %d bytes", name, len(insts), e.Size)
				}
				for _, in := range insts {
					total++
					w, ok := want[in.Addr]
					if !ok {
						t.Errorf("%s %#x: objdump has no line", name, in.Addr)
						continue
					}
					if in.Text != w {
						t.Errorf("%s %#x: %q, objdump %q", name, in.Addr, in.Text, w)
					}
					checkBranch(t, in, w)
				}
			}
			t.Logf("%s: %d instructions of %d functions identical to objdump", a.name, total, len(funcsOfSource))
		})
	}
}

// checkBranch compares the branch facts of in with objdump's text w for it: a call is a
// branch mnemonic ending in "l" (bl, bctrl, blrl, bcl, beql, ...), a direct branch names its
// target.
func checkBranch(t *testing.T, in Inst, w string) {
	t.Helper()
	mn := strings.Fields(w)[0]
	mn = strings.TrimRight(mn, "+-")
	isBranch := strings.HasPrefix(mn, "b") && in.Branch() != NotBranch
	if (in.Branch() != NotBranch) != (strings.HasPrefix(mn, "b") && !strings.HasPrefix(mn, "brinc")) {
		t.Errorf("%#x %q: Branch() = %v", in.Addr, w, in.Branch())
	}
	if !isBranch {
		if in.IsCall() {
			t.Errorf("%#x %q: IsCall for a non-branch", in.Addr, w)
		}
		return
	}
	links := strings.HasSuffix(mn, "l") || strings.HasSuffix(mn, "la")
	if in.Links() != links {
		t.Errorf("%#x %q: Links() = %v", in.Addr, w, in.Links())
	}
	if target, ok := in.Target(); ok {
		if got := fmt.Sprintf("%#x", target); hexOperand.FindString(w) != got {
			t.Errorf("%#x %q: Target() = %s", in.Addr, w, got)
		}
	} else if in.Branch() == BranchDirect {
		t.Errorf("%#x %q: direct branch without target", in.Addr, w)
	}
	if in.Next() != in.Addr+4 {
		t.Errorf("%#x: Next() = %#x", in.Addr, in.Next())
	}
}

// textBytes returns size bytes of f's contents at address addr.
func textBytes(t *testing.T, f *elf.File, addr, size uint64) []byte {
	t.Helper()
	for _, s := range f.Sections {
		if s.Flags&elf.SHF_ALLOC != 0 && s.Type == elf.SHT_PROGBITS && addr >= s.Addr && addr+size <= s.Addr+s.Size {
			b := make([]byte, size)
			if _, err := s.ReadAt(b, int64(addr-s.Addr)); err != nil {
				t.Fatal(err)
			}
			return b
		}
	}
	t.Fatalf("no section holds [%#x, %#x)", addr, addr+size)
	return nil
}

// TestDisassembleWholeTextAgreement disassembles the whole .text of static executables (the C
// library included) and measures agreement with objdump. Every disagreement must be one of the
// two documented kinds: a word objdump rejects as an invalid form (reserved bits set; it shows
// data in text) that ppc64asm decodes, or an instruction ppc64asm does not know (attn and the
// transactional-memory instructions), which Decode shows as .long like objdump does data.
func TestDisassembleWholeTextAgreement(t *testing.T) {
	for _, a := range []crossArch{archBE, archLE} {
		t.Run(a.name, func(t *testing.T) {
			exe := a.compile(t, t.TempDir(), "prog", disasmSource, "-O2", "-static")
			f, err := elf.Open(exe)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			text := f.Section(".text")
			code, err := text.Data()
			if err != nil {
				t.Fatal(err)
			}
			want := a.objdumpText(t, exe, "-j", ".text")
			same, invalid, unknown := 0, 0, 0
			for _, in := range Disassemble(code, text.Addr, f.ByteOrder) {
				w := want[in.Addr]
				switch {
				case in.Text == w:
					same++
				case strings.HasPrefix(w, ".long ") && in.Op != 0:
					invalid++
				case strings.HasPrefix(in.Text, ".long ") && w != "" && !strings.HasPrefix(w, ".long"):
					unknown++
				default:
					t.Errorf("%#x: %q, objdump %q", in.Addr, in.Text, w)
				}
			}
			n := same + invalid + unknown
			t.Logf("%s: %d of %d instructions identical to objdump (%.3f%%); %d invalid forms decoded, %d instructions unknown to ppc64asm",
				a.name, same, n, 100*float64(same)/float64(n), invalid, unknown)
		})
	}
}
