package symbols

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestKernelCore lets a native program abort and dump core through the kernel — whose cores
// leave file-backed text out and describe it in NT_FILE — and compares what gdb and the
// package make of that core.
func TestKernelCore(t *testing.T) {
	gdb := needTool(t, "gdb")
	pattern, _ := os.ReadFile("/proc/sys/kernel/core_pattern")
	if strings.HasPrefix(string(pattern), "|") {
		t.Skipf("the kernel pipes core dumps to %s; this test needs core_pattern to name a file",
			strings.TrimSpace(string(pattern)))
	}
	dir := t.TempDir()
	exe := buildCrash(t, dir, "crash", "-O0")
	cmd := exec.Command("sh", "-c", "ulimit -c unlimited; exec ./crash")
	cmd.Dir = dir
	if err := cmd.Run(); err == nil {
		t.Fatal("the program did not abort")
	}
	var core string
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "core") {
			core = filepath.Join(dir, e.Name())
		}
	}
	if core == "" {
		t.Fatalf("no core file in %s (core_pattern %q)", dir, strings.TrimSpace(string(pattern)))
	}
	c, err := OpenCore(core, &CoreOptions{Executable: exe, Cache: testCache})
	if err != nil {
		t.Fatal(err)
	}
	// The kernel wrote no text; reading code must come from the executable through NT_FILE.
	if len(c.Files) == 0 {
		t.Fatal("core has no NT_FILE note")
	}
	main := c.Process.Executable().Bin.FunctionsNamed("main")[0]
	code := make([]byte, 16)
	if _, err := c.ReadAt(code, main.Entry+c.Process.Executable().Bias); err != nil {
		t.Fatalf("read main's code from the core: %v", err)
	}
	want := make([]byte, 16)
	if _, err := c.Process.Executable().Bin.ReadCode(want, main.Entry); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(code, want) {
		t.Fatalf("main's code through the core %x, in the file %x", code, want)
	}
	c.Close()

	src, _ := filepath.Abs("testdata/crash/crash.c")
	st := markers(t, src)[0]
	var out gdbLive
	runGDB(t, gdb, "core", dir, map[string]any{"name": st.Name, "function": st.Name, "exprs": st.Exprs}, &out, exe, core)
	var agr agreement
	compareCore(t, exe, core, out.Stops[0], st.Name, &agr)
	t.Logf("agreement kernel core: %d/%d", agr.ok, agr.total)
	for _, m := range agr.misses {
		t.Errorf("differs: %s", m)
	}
}
