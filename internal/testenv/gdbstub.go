package testenv

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// stubWait bounds how long StartQEMUStub and StartQEMUStubTCP wait for an emulator's stub to
// listen before failing the test. QEMU opens its stub only after it has loaded the program,
// which on a loaded machine can take longer than gdb's own connection retries last.
const stubWait = 2 * time.Minute

// stubPortTries is how many free ports StartQEMUStubTCP tries before failing.
const stubPortTries = 5

// StartQEMUStub starts cmd, a QEMU user-mode emulator whose Args hold its options and the
// program but no -g, with its GDB stub on a Unix socket in a private directory (mode 0700), and
// returns the socket's path once the stub listens on it. gdb connects with `target remote
// PATH`; the stub takes one connection, so nothing else should connect first.
//
// No other process can take the socket or be reached in its place, as one can with a TCP port
// chosen free and then given to the emulator. The emulator is killed and reaped at the end of
// the test unless the test has waited for it.
func StartQEMUStub(t testing.TB, cmd *exec.Cmd) string {
	t.Helper()
	// Not t.TempDir: its path holds the test's name and can exceed the 107 bytes a socket
	// path may have.
	dir, err := os.MkdirTemp("", "gdbstub-*")
	if err != nil {
		t.Fatalf("qemu gdb stub: socket directory: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "sock")
	startStub(t, cmd, "-g", sock)
	err = waitStub(cmd, func() (bool, error) { return unixListening(sock) })
	if err != nil {
		t.Fatalf("qemu gdb stub: %s: %v", strings.Join(cmd.Args, " "), err)
	}
	return sock
}

// StartQEMUStubTCP is StartQEMUStub for a test of a client that connects over TCP: the stub
// listens on a loopback-reachable port, and the address (127.0.0.1:PORT) is returned once the
// emulator's own process listens there, not merely something. A port taken by another process
// between its choice and the emulator's bind makes the emulator exit; a copy of cmd is then
// started on another port, and that copy, the one running, is returned.
func StartQEMUStubTCP(t testing.TB, cmd *exec.Cmd) (addr string, started *exec.Cmd) {
	t.Helper()
	var errs []string
	for range stubPortTries {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("qemu gdb stub: choose a port: %v", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		c := exec.Command(cmd.Path)
		c.Args = append([]string(nil), cmd.Args...)
		c.Env, c.Dir, c.Stdin, c.Stdout, c.Stderr = cmd.Env, cmd.Dir, cmd.Stdin, cmd.Stdout, cmd.Stderr
		startStub(t, c, "-g", strconv.Itoa(port))
		err = waitStub(c, func() (bool, error) { return tcpListening(c.Process.Pid, port) })
		if err == nil {
			return fmt.Sprintf("127.0.0.1:%d", port), c
		}
		errs = append(errs, fmt.Sprintf("port %d: %v", port, err))
		_ = c.Process.Kill()
		_ = c.Wait()
	}
	t.Fatalf("qemu gdb stub: %s: %s", strings.Join(cmd.Args, " "), strings.Join(errs, "; "))
	return "", nil
}

// stubStarted, when set (by this package's tests), is called with each emulator as soon as it
// has started, before the wait for its stub.
var stubStarted func(*exec.Cmd)

// startStub puts the stub option after the emulator's name in cmd's arguments, starts it, and
// has it killed and reaped at the end of the test.
func startStub(t testing.TB, cmd *exec.Cmd, opt, where string) {
	t.Helper()
	cmd.Args = append([]string{cmd.Args[0], opt, where}, cmd.Args[1:]...)
	if err := cmd.Start(); err != nil {
		t.Fatalf("qemu gdb stub: start %s: %v", cmd.Path, err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait() // an error when the test has waited already
	})
	if stubStarted != nil {
		stubStarted(cmd)
	}
}

// waitStub polls listening until it reports the stub listening, the emulator has exited (it is
// a zombie, left for its caller to reap), or stubWait has passed.
func waitStub(cmd *exec.Cmd, listening func() (bool, error)) error {
	deadline := time.Now().Add(stubWait)
	for {
		ok, err := listening()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if st, err := ProcStatus(cmd.Process.Pid, "State"); err != nil || strings.HasPrefix(st, "Z") {
			return fmt.Errorf("emulator exited before its stub listened")
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("stub not listening after %v", stubWait)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// soAcceptCon is the flag of a listening socket in /proc/net/unix (__SO_ACCEPTCON).
const soAcceptCon = 0x10000

// unixListening reports whether a socket listens at path, from the kernel's table of Unix
// sockets (/proc/net/unix): a connection, which the stub would take as its one debugger, is
// not a way to find out.
func unixListening(path string) (bool, error) {
	f, err := os.Open("/proc/net/unix")
	if err != nil {
		return false, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Scan() // header: Num RefCount Protocol Flags Type St Inode Path
	for sc.Scan() {
		fl := strings.Fields(sc.Text())
		if len(fl) < 8 || fl[7] != path {
			continue
		}
		flags, err := strconv.ParseUint(fl[3], 16, 32)
		if err == nil && flags&soAcceptCon != 0 {
			return true, nil
		}
	}
	return false, sc.Err()
}

// tcpListening reports whether process pid has a TCP socket listening on port: an inode of a
// listening socket of that port in /proc/net/tcp or tcp6 that is one of pid's descriptors.
func tcpListening(pid, port int) (bool, error) {
	socks, err := TCPSockets()
	if err != nil {
		return false, err
	}
	mine := SocketInodes(pid) // none when gone: waitStub finds out
	for _, s := range socks {
		if s.Listening() && s.LocalPort() == port && mine[s.Inode] {
			return true, nil
		}
	}
	return false, nil
}
