package symbols

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/hpcdap/hpcdap/bpcode"
)

// zeroMachine answers every register with 0 and every read with zero bytes below 1 MiB.
type zeroMachine struct{}

func (zeroMachine) Register(int) (uint64, error) { return 0x1000, nil }
func (zeroMachine) ReadMemory(addr uint64, buf []byte) error {
	if addr >= 1<<20 {
		return errors.New("unmapped")
	}
	clear(buf)
	return nil
}

// FuzzCompileCondition compiles arbitrary expressions at every function of the C test
// program: the compiler gives a program bpcode accepts (it checks its own output) or an
// error, never a panic, and what it gives runs.
func FuzzCompileCondition(f *testing.F) {
	for _, s := range []string{"argc > 1 && argv[1][0] == 'x'", "*p == 3", "s->name[2] != 0 || !q", "x * 2.5f < 1e3",
		"a.b.c[i % 4] - -3", "(v / 7) % 5 == -(i & 3) + 1", "u < 5u || c == '\\n'", "g_counter >> 3 == 1ul",
		"r->id * 3 + depth > 4", "g_recs[1].next->id == 2 && depth_reached < 3", "local == depth"} {
		f.Add(s)
	}
	exe := filepath.Join(f.TempDir(), "prog")
	if err := os.WriteFile(exe, fuzzSeedBinary(f, "-g", "-O0"), 0o755); err != nil {
		f.Fatal(err)
	}
	b, err := Open(exe, nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, expr string) {
		for _, fn := range b.Functions() {
			p, err := b.CompileCondition(expr, fn.Entry)
			if err != nil {
				continue
			}
			q, err := bpcode.Decode(p.Encode())
			if err != nil {
				t.Fatalf("%q at %s: compiled program refused: %v", expr, fn.Name, err)
			}
			q.Eval(zeroMachine{}, 0)
		}
	})
}
