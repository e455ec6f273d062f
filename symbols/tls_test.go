package symbols

import (
	"errors"
	"testing"

	"github.com/hpcdap/hpcdap/amd64"
)

// staticTLS resolves thread-local variables of the executable as glibc lays them out on
// x86-64 (TLS variant II: the executable's block ends at the thread pointer, fs_base). It
// stands in for the thread library package that serves the TLSResolver hook.
type staticTLS struct{ calls int }

func (s *staticTLS) TLSAddress(regs *Regs, mod *Module, offset uint64) (uint64, error) {
	s.calls++
	seg, ok := mod.Bin.TLSSegment()
	if !ok {
		return 0, errors.New("module has no TLS segment")
	}
	tp, ok := regs.Get(amd64.DwarfFSBase)
	if !ok {
		return 0, errors.New("no thread pointer")
	}
	align := seg.Align
	if align == 0 {
		align = 1
	}
	block := (seg.Memsz + align - 1) &^ (align - 1)
	return tp - block + offset, nil
}

// TestTLSHook evaluates thread-local variables through the TLSResolver hook and compares
// with gdb (which reads them through libthread_db).
func TestTLSHook(t *testing.T) {
	b := buildProgram(t, "tls", "-g", "-O0")
	live := b.liveDump(t)
	if len(live.Stops) != 1 {
		t.Fatal("gdb did not stop")
	}
	st := live.Stops[0]
	c, err := OpenCore(st.Core, &CoreOptions{Executable: b.exe, Cache: testCache})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	frames, err := c.Process.Stack(c.Threads[0].Regs, nil)
	if err != nil || len(frames) == 0 {
		t.Fatal(err)
	}
	// Without a resolver the package says so instead of guessing.
	if _, err := frames[0].Eval("tls_counter"); err == nil {
		t.Error("thread-local variable evaluated without a TLS resolver")
	}
	res := &staticTLS{}
	c.Process.TLS = res
	for _, p := range st.Prints {
		v, err := frames[0].Eval(p.Expr)
		if err != nil {
			t.Errorf("print %s: %v", p.Expr, err)
			continue
		}
		if got, want := v.PrintString(), gdbResult(p.Out); got != want {
			t.Errorf("print %s: got %q, gdb %q", p.Expr, got, want)
		}
	}
	if res.calls == 0 {
		t.Error("the TLS hook was not called")
	}
}
