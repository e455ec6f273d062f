package rsp

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/hpcdap/hpcdap/internal/testenv"
)

// TestStubListensOnPrivateUnixSocket: a launched emulator's GDB stub listens on a Unix socket
// in a directory of mode 0700, never on TCP, with the QEMU that scripts/qemu-user.sh provides
// and with the system's; the directory goes with the emulator.
func TestStubListensOnPrivateUnixSocket(t *testing.T) {
	emulators := map[string]string{}
	if p := filepath.Join(testenv.QEMUDir(), "qemu-ppc64le"); fileExists(p) {
		emulators["cached"] = p
	}
	if p, err := exec.LookPath("qemu-ppc64le"); err == nil {
		emulators["system"] = p
	}
	if len(emulators) == 0 {
		t.Fatal("no qemu-ppc64le: install the Debian package qemu-user or run scripts/qemu-user.sh")
	}
	exe := archLE.compile(t, "loop", loopSource, "-O0")
	for name, emu := range emulators {
		t.Run(name, func(t *testing.T) {
			p := launch(t, emu, []string{exe}, Options{})
			pid := p.emu.Process.Pid
			cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
			if err != nil {
				t.Fatal(err)
			}
			args := strings.Split(string(cmdline), "\x00")
			if len(args) < 3 || args[1] != "-g" {
				t.Fatalf("emulator command line %q: no -g", args)
			}
			dir := filepath.Dir(args[2])
			fi, err := os.Stat(dir)
			if err != nil || fi.Mode().Perm() != 0o700 {
				t.Fatalf("stub socket directory %s: %v, %v; want mode 0700", dir, fi.Mode(), err)
			}
			socks := testenv.SocketInodes(pid)
			if len(socks) == 0 {
				t.Fatalf("emulator pid %d has no socket", pid)
			}
			tcp, err := testenv.TCPSockets()
			if err != nil {
				t.Fatal(err)
			}
			unix, err := testenv.UnixSocketInodes()
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range tcp {
				if socks[s.Inode] {
					t.Errorf("emulator %s (%s) has a TCP socket (inode %s)", emu, p.Capabilities().EmulatorVersion, s.Inode)
				}
			}
			var sawUnix bool
			for ino := range socks {
				sawUnix = sawUnix || unix[ino]
			}
			if !sawUnix {
				t.Errorf("emulator %s has no Unix socket", emu)
			}
			p.Close()
			if _, err := os.Stat(dir); !os.IsNotExist(err) {
				t.Errorf("stub socket directory %s left behind: %v", dir, err)
			}
		})
	}
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }
