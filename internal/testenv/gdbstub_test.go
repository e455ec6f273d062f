package testenv

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// stubProgram exits with a status gdb reports, so that a session through the stub shows the
// program ran to its end under gdb's control.
const stubProgram = "int main(void) { return 7; }\n"

// buildStatic compiles stubProgram statically for qemu-x86_64.
func buildStatic(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	src := filepath.Join(dir, "prog.c")
	if err := os.WriteFile(src, []byte(stubProgram), 0o644); err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(dir, "prog")
	if err := Build("gcc", NeedTool(t, "gcc", "gcc"), "-static", "-o", exe, src); err != nil {
		t.Fatal(err)
	}
	return exe
}

// gdbSession connects gdb-multiarch to the stub at where and continues the program to its end.
func gdbSession(t *testing.T, exe, where string) string {
	t.Helper()
	gdb := NeedTool(t, "gdb-multiarch", "gdb-multiarch")
	out, _ := exec.Command(gdb, "-nx", "-batch", "-ex", "set confirm off", "-ex", "file "+exe,
		"-ex", "target remote "+where, "-ex", "continue").CombinedOutput()
	return string(out)
}

// TestStartQEMUStub connects gdb to the socket at once, with no retry of its own: the stub
// listens when StartQEMUStub returns, and the program runs to its end under gdb.
func TestStartQEMUStub(t *testing.T) {
	exe := buildStatic(t)
	emu := exec.Command(QEMUUser(t, "qemu-x86_64"), exe)
	sock := StartQEMUStub(t, emu)
	if fi, err := os.Stat(filepath.Dir(sock)); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("socket directory: %v, %v (want mode 0700)", fi, err)
	}
	if out := gdbSession(t, exe, sock); !strings.Contains(out, "exited with code 07") {
		t.Fatalf("gdb through %s:\n%s", sock, out)
	}
	if err := emu.Wait(); err == nil || !strings.Contains(err.Error(), "exit status 7") {
		t.Errorf("emulator: %v, want exit status 7", err)
	}
}

// TestStartQEMUStubSlowEmulator stops the emulator as soon as it starts, as a loaded machine
// can hold it before it opens its stub, and resumes it later: StartQEMUStub returns only once
// the stub listens, and gdb, which retries nothing on a socket, then reaches the program.
func TestStartQEMUStubSlowEmulator(t *testing.T) {
	exe := buildStatic(t)
	var resumed sync.WaitGroup
	stubStarted = func(c *exec.Cmd) {
		if err := c.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Errorf("stop the emulator: %v", err)
		}
		resumed.Go(func() {
			time.Sleep(2 * time.Second)
			_ = c.Process.Signal(syscall.SIGCONT)
		})
	}
	defer func() { stubStarted = nil }()
	defer resumed.Wait()
	sock := StartQEMUStub(t, exec.Command(QEMUUser(t, "qemu-x86_64"), exe))
	if ok, err := unixListening(sock); !ok || err != nil {
		t.Fatalf("StartQEMUStub returned before its stub listened on %s (%v)", sock, err)
	}
	if out := gdbSession(t, exe, sock); !strings.Contains(out, "exited with code 07") {
		t.Fatalf("gdb through %s:\n%s", sock, out)
	}
}

// TestStartQEMUStubTCP checks that the address returned is the started emulator's own
// listening port, and that gdb reaches the program there.
func TestStartQEMUStubTCP(t *testing.T) {
	exe := buildStatic(t)
	addr, emu := StartQEMUStubTCP(t, exec.Command(QEMUUser(t, "qemu-x86_64"), exe))
	port := emu.Args[2]
	if !strings.HasSuffix(addr, ":"+port) || emu.Args[1] != "-g" {
		t.Fatalf("address %s, emulator %q", addr, emu.Args)
	}
	if out := gdbSession(t, exe, addr); !strings.Contains(out, "exited with code 07") {
		t.Fatalf("gdb through %s:\n%s", addr, out)
	}
}

// TestTCPListeningOwner checks the check StartQEMUStubTCP relies on: a port another process
// listens on is not the emulator's.
func TestTCPListeningOwner(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	sleeper := exec.Command("sleep", "60")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sleeper.Process.Kill(); _ = sleeper.Wait() }()
	if ok, err := tcpListening(os.Getpid(), port); !ok || err != nil {
		t.Errorf("own listener on %d: %v, %v", port, ok, err)
	}
	if ok, err := tcpListening(sleeper.Process.Pid, port); ok || err != nil {
		t.Errorf("port %d counted as another process's: %v, %v", port, ok, err)
	}
}

// TestWaitStubExited checks that the wait for a stub ends, with an error, when the emulator
// exits without listening: QEMU loads the program before it opens its stub.
func TestWaitStubExited(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "sock")
	emu := exec.Command(QEMUUser(t, "qemu-x86_64"), "-g", sock, "/nonexistent/program")
	if err := emu.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = emu.Process.Kill(); _ = emu.Wait() }()
	err := waitStub(emu, func() (bool, error) { return unixListening(sock) })
	if err == nil || !strings.Contains(err.Error(), "emulator exited before its stub listened") {
		t.Errorf("wait for a stub that never listens: %v", err)
	}
}
