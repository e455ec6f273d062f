package adapter

import (
	"bufio"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// peerUser returns the user of the process at the other end of conn, -1 with an error when
// it cannot be told.
//
// A Unix socket's peer is known from the kernel (SO_PEERCRED). A TCP peer on this host is found
// in /proc/net/tcp{,6}: the row whose local address is conn's remote address and whose remote
// address is conn's local one. Only a live row counts — ESTABLISHED, with a socket inode —
// because a socket its process has already closed is orphaned and shows uid 0 there; a peer
// that hangs up before it could be checked is not known (the server refuses it), never taken
// for root. The server's own side of the connection must appear too, with the inode of
// conn's descriptor, so the rows read are this connection's and not a stale pair with the
// same addresses.
func peerUser(conn net.Conn) (int, error) {
	var uid int
	var err error
	switch c := conn.(type) {
	case *net.UnixConn:
		uid, err = unixPeerUID(c)
	case *net.TCPConn:
		uid, err = tcpPeerUID(c)
	default:
		return -1, fmt.Errorf("cannot tell the user of a %T connection", conn)
	}
	if err != nil {
		return -1, err
	}
	return uid, nil
}

// unixPeerUID returns the user of the process that connected a Unix socket.
func unixPeerUID(c *net.UnixConn) (int, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return 0, err
	}
	var cred *syscall.Ucred
	var serr error
	if err := rc.Control(func(fd uintptr) {
		cred, serr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil {
		return 0, err
	}
	if serr != nil {
		return 0, fmt.Errorf("peer credentials: %w", serr)
	}
	return int(cred.Uid), nil
}

// tcpPeerUID returns the user owning the live local socket at the other end of c.
func tcpPeerUID(c *net.TCPConn) (int, error) {
	la, _ := c.LocalAddr().(*net.TCPAddr)
	ra, _ := c.RemoteAddr().(*net.TCPAddr)
	if la == nil || ra == nil {
		return 0, errors.New("connection has no TCP addresses")
	}
	own, err := socketInode(c)
	if err != nil {
		return 0, err
	}
	// The table is read again when a row is missing from it: a socket closed between two of
	// the kernel's pages of it shifts the rest, and a row can be skipped as well as repeated.
	for tries := 1; ; tries++ {
		var rows []tcpRow
		for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
			r, err := readTCPTable(f)
			if err != nil && !errors.Is(err, os.ErrNotExist) {
				return 0, err
			}
			rows = append(rows, r...)
		}
		uid, err := peerUID(rows, la, ra, own)
		if !errors.Is(err, errNotInTable) || tries == 3 {
			return uid, err
		}
	}
}

// errNotInTable is what peerUID's error wraps when the server's socket or the peer's is not in
// the table read.
var errNotInTable = errors.New("not in the socket table")

// peerUID picks the peer's uid from socket table rows: the server's own row (local la, remote
// ra, inode own) must be there, and exactly one live socket for the peer (local ra, remote
// la). A socket may be listed twice: the kernel writes the table a page per read, and a
// socket opened or closed between two reads shifts the rest.
func peerUID(rows []tcpRow, la, ra *net.TCPAddr, own uint64) (int, error) {
	sawOwn := false
	uid, dead := -1, 0
	live := map[uint64]bool{} // the peer's live sockets, by inode
	for _, r := range rows {
		switch {
		case r.inode == own && addrMatches(r.local, la) && addrMatches(r.remote, ra):
			sawOwn = true
		case addrMatches(r.local, ra) && addrMatches(r.remote, la):
			if r.state != tcpEstablished || r.inode == 0 {
				dead++
				continue
			}
			live[r.inode] = true
			uid = r.uid
		}
	}
	switch {
	case !sawOwn:
		return 0, fmt.Errorf("socket inode %d of %s: %w", own, ra, errNotInTable)
	case len(live) == 0 && dead > 0:
		return 0, fmt.Errorf("peer %s closed its socket before its user could be checked", ra)
	case len(live) == 0:
		return 0, fmt.Errorf("peer %s is not a socket of this host (%w): cannot tell its user", ra, errNotInTable)
	case len(live) > 1:
		return 0, fmt.Errorf("peer %s: %d live sockets claim the address", ra, len(live))
	}
	return uid, nil
}

// socketInode returns the inode of the socket behind c's descriptor.
func socketInode(c *net.TCPConn) (uint64, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return 0, err
	}
	var st syscall.Stat_t
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = syscall.Fstat(int(fd), &st) }); err != nil {
		return 0, err
	}
	if serr != nil {
		return 0, fmt.Errorf("stat socket: %w", serr)
	}
	return st.Ino, nil
}

// tcpEstablished is TCP_ESTABLISHED in the st column of /proc/net/tcp.
const tcpEstablished = 1

// tcpRow is one socket of /proc/net/tcp{,6}.
type tcpRow struct {
	local, remote string // "0100007F:1F90": address words in host order, port
	state         int
	uid           int
	inode         uint64
}

// readTCPTable reads the sockets listed in one /proc/net/tcp file.
func readTCPTable(path string) ([]tcpRow, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var rows []tcpRow
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		// sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode
		if len(fields) < 10 || fields[0] == "sl" {
			continue
		}
		st, err1 := strconv.ParseUint(fields[3], 16, 8)
		uid, err2 := strconv.Atoi(fields[7])
		ino, err3 := strconv.ParseUint(fields[9], 10, 64)
		if err1 != nil || err2 != nil || err3 != nil {
			return nil, fmt.Errorf("%s: malformed row %q", path, sc.Text())
		}
		rows = append(rows, tcpRow{local: fields[1], remote: fields[2], state: int(st), uid: uid, inode: ino})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return rows, nil
}

// addrMatches compares a /proc/net/tcp address ("0100007F:1F90", little-endian words) with
// a TCP address.
func addrMatches(field string, a *net.TCPAddr) bool {
	host, port, ok := strings.Cut(field, ":")
	if !ok {
		return false
	}
	p, err := strconv.ParseUint(port, 16, 16)
	if err != nil || int(p) != a.Port {
		return false
	}
	raw, err := hex.DecodeString(host)
	if err != nil {
		return false
	}
	// The kernel prints each 32-bit word in host (little-endian) order.
	ip := make(net.IP, len(raw))
	for i := 0; i+4 <= len(raw); i += 4 {
		ip[i], ip[i+1], ip[i+2], ip[i+3] = raw[i+3], raw[i+2], raw[i+1], raw[i]
	}
	return ip.Equal(a.IP) || (len(ip) == 16 && a.IP.To4() != nil && ip.Equal(a.IP.To16()))
}
