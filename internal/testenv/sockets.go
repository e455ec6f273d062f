package testenv

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// SocketInodes returns the inodes of the sockets among process pid's open descriptors (none
// when it is gone).
func SocketInodes(pid int) map[string]bool {
	out := map[string]bool{}
	dir := filepath.Join("/proc", strconv.Itoa(pid), "fd")
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		link, err := os.Readlink(filepath.Join(dir, e.Name()))
		if ino, ok := strings.CutPrefix(link, "socket:["); err == nil && ok {
			out[strings.TrimSuffix(ino, "]")] = true
		}
	}
	return out
}

// TCPSocket is one socket of /proc/net/tcp or tcp6, as the kernel prints it: local and remote
// addresses (hex address:port), state (hex: "0A" listening, "01" established), inode.
type TCPSocket struct {
	Local, Remote, State, Inode string
}

// Listening reports whether the socket listens.
func (s TCPSocket) Listening() bool { return s.State == "0A" }

// Established reports whether the socket is connected.
func (s TCPSocket) Established() bool { return s.State == "01" }

// LocalPort is the socket's local port.
func (s TCPSocket) LocalPort() int { return hexPort(s.Local) }

// RemotePort is the port of the socket's peer.
func (s TCPSocket) RemotePort() int { return hexPort(s.Remote) }

func hexPort(addr string) int {
	_, p, _ := strings.Cut(addr, ":")
	n, err := strconv.ParseUint(p, 16, 16)
	if err != nil {
		return -1
	}
	return int(n)
}

// TCPSockets lists the machine's TCP sockets (IPv4 and IPv6).
func TCPSockets() ([]TCPSocket, error) {
	var out []TCPSocket
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(table)
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			return nil, err
		}
		for _, l := range strings.Split(string(b), "\n")[1:] {
			// sl local_address rem_address st queues tr retrnsmt uid timeout inode ...
			if f := strings.Fields(l); len(f) >= 10 {
				out = append(out, TCPSocket{Local: f[1], Remote: f[2], State: f[3], Inode: f[9]})
			}
		}
	}
	return out, nil
}

// UnixSocketInodes returns the inodes of the machine's Unix sockets (/proc/net/unix).
func UnixSocketInodes() (map[string]bool, error) {
	b, err := os.ReadFile("/proc/net/unix")
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, l := range strings.Split(string(b), "\n")[1:] {
		// Num RefCount Protocol Flags Type St Inode Path
		if f := strings.Fields(l); len(f) > 6 {
			out[f[6]] = true
		}
	}
	return out, nil
}
