package rsp

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hpcdap/hpcdap/internal/testenv"
	"github.com/hpcdap/hpcdap/ppc64"
	"github.com/hpcdap/hpcdap/target"
)

// crossArch is one of the two Power targets the tests build programs for.
type crossArch struct {
	name   string // qemu suffix: ppc64 or ppc64le
	prefix string // cross tool prefix
	gccPkg string
	order  binary.ByteOrder
}

var (
	archBE = crossArch{"ppc64", "powerpc64-linux-gnu-", "gcc-powerpc64-linux-gnu", binary.BigEndian}
	archLE = crossArch{"ppc64le", "powerpc64le-linux-gnu-", "gcc-powerpc64le-linux-gnu", binary.LittleEndian}
)

// qemu returns the emulator for a, preferring QEMU ≥ 9 from the cache. With only the
// system's QEMU 7.2 it says so: trap words in text then become stub breakpoints.
func (a crossArch) qemu(t testing.TB) (path string, modern bool) {
	t.Helper()
	p := filepath.Join(testenv.QEMUDir(), "qemu-"+a.name)
	if _, err := os.Stat(p); err == nil {
		return p, true
	}
	sys, err := exec.LookPath("qemu-" + a.name)
	if err != nil {
		t.Fatalf("qemu-%s not found in %s nor on PATH: run scripts/qemu-user.sh (QEMU ≥ 9) or install the Debian package qemu-user", a.name, testenv.QEMUDir())
	}
	t.Logf("QEMU ≥ 9 not in %s (scripts/qemu-user.sh puts it there): using %s, where trap words in text fall back to Z0 stub breakpoints", testenv.QEMUDir(), sys)
	return sys, false
}

// compile builds a static program with the cross compiler.
func (a crossArch) compile(t testing.TB, name, src string, flags ...string) string {
	t.Helper()
	gcc := testenv.NeedTool(t, a.prefix+"gcc", a.gccPkg)
	dir := t.TempDir()
	c := filepath.Join(dir, name+".c")
	if err := os.WriteFile(c, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(dir, name)
	args := append([]string{"-g", "-static", "-o", exe, c}, flags...)
	if out, err := exec.Command(gcc, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", gcc, err, out)
	}
	return exe
}

// resolve returns the breakpoint address of function fn in exe (descriptor or local entry).
func resolve(t testing.TB, exe, fn string) uint64 {
	t.Helper()
	f, err := os.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := ppc64.NewResolver(f)
	if err != nil {
		t.Fatal(err)
	}
	e, err := r.Lookup(fn)
	if err != nil {
		t.Fatal(err)
	}
	return e.Breakpoint()
}

// deterministic writes a wrapper that runs the emulator so that two runs of a program (one
// under this client, one under gdb) get the same addresses. QEMU ≥ 9 places the program's
// memory among its own host mappings, which vary from run to run even without address
// randomisation; a reserved guest address space (-R) makes the layout fixed. QEMU 7.2 only
// needs randomisation off (setarch -R).
func deterministic(t testing.TB, emulator string) string {
	t.Helper()
	version, err := emulatorVersion(emulator)
	if err != nil {
		t.Fatal(err)
	}
	var script string
	if qemuMajor(version) >= 9 {
		script = fmt.Sprintf("#!/bin/sh\nexec %s -R 0x8000000000 \"$@\"\n", emulator)
	} else {
		setarch := testenv.NeedTool(t, "setarch", "util-linux")
		script = fmt.Sprintf("#!/bin/sh\nexec %s -R %s \"$@\"\n", setarch, emulator)
	}
	w := filepath.Join(t.TempDir(), "qemu-fixed")
	if err := os.WriteFile(w, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return w
}

// launch starts exe under emulator and registers cleanup.
func launch(t testing.TB, emulator string, args []string, o Options) *Process {
	t.Helper()
	if o.Stdout == nil {
		o.Stdout = &bytes.Buffer{}
	}
	p, err := LaunchWith(emulator, args, []string{"PATH=/usr/bin:/bin"}, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// outputWaiter is a program's standard output that tells when a marker line has been written:
// a test that must not act before the program reached some point (a signal handler
// installed, a loop entered) waits for the line the program prints there.
type outputWaiter struct {
	marker string
	seen   chan struct{}
	mu     sync.Mutex
	out    bytes.Buffer
}

func newOutputWaiter(marker string) *outputWaiter {
	return &outputWaiter{marker: marker, seen: make(chan struct{})}
}

func (w *outputWaiter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	had := strings.Contains(w.out.String(), w.marker+"\n")
	w.out.Write(b)
	if !had && strings.Contains(w.out.String(), w.marker+"\n") {
		close(w.seen)
	}
	return len(b), nil
}

// wait returns once the marker line has been written; the program must print it soon.
func (w *outputWaiter) wait(t testing.TB) {
	t.Helper()
	select {
	case <-w.seen:
	case <-time.After(30 * time.Second):
		w.mu.Lock()
		defer w.mu.Unlock()
		t.Fatalf("no %q line within 30 s; output %q", w.marker, w.out.String())
	}
}

// next waits for the next event.
func next(t testing.TB, p *Process) target.Event {
	t.Helper()
	select {
	case ev, ok := <-p.Events():
		if !ok {
			t.Fatalf("event stream closed: %v", p.Err())
		}
		return ev
	case <-time.After(30 * time.Second):
		t.Fatal("no event within 30 s")
	}
	return target.Event{}
}

// leader returns the first thread.
func leader(t testing.TB, p *Process) int {
	t.Helper()
	ths, err := p.Threads()
	if err != nil || len(ths) == 0 {
		t.Fatalf("threads: %v %v", ths, err)
	}
	return ths[0]
}

// underGDB runs exe under a second emulator with gdb-multiarch attached through the stub,
// runs gdb's commands, and returns gdb's output.
func underGDB(t testing.TB, a crossArch, emulator string, args []string, commands ...string) string {
	t.Helper()
	gdb := testenv.NeedTool(t, "gdb-multiarch", "gdb-multiarch")
	emu := exec.Command(emulator, args...)
	emu.Env = []string{"PATH=/usr/bin:/bin"}
	sock := testenv.StartQEMUStub(t, emu)
	endian := "big"
	if a.order == binary.LittleEndian {
		endian = "little"
	}
	gargs := []string{"-nx", "-batch", "-ex", "set architecture powerpc:common64", "-ex", "set endian " + endian,
		"-ex", "set confirm off", "-ex", "target remote " + sock}
	for _, c := range commands {
		gargs = append(gargs, "-ex", c)
	}
	gargs = append(gargs, "-ex", "kill")
	out, err := exec.Command(gdb, gargs...).CombinedOutput()
	if err != nil {
		t.Fatalf("gdb-multiarch: %v\n%s", err, out)
	}
	return string(out)
}

// traceOut returns stderr when RSP_TRACE is set, for following a test's packets.
func traceOut() io.Writer {
	if os.Getenv("RSP_TRACE") != "" {
		return os.Stderr
	}
	return nil
}
