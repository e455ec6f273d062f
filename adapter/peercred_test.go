package adapter

import (
	"errors"
	"net"
	"strings"
	"testing"
)

// TestPeerUIDFromTable: the peer's user is that of its one live socket, even where the socket
// table lists that socket more than once (the kernel writes it a page per read, and a socket
// opened or closed between reads shifts the rest); two live sockets claiming the peer's
// address, a peer whose socket is closing, and a socket missing from the table are errors;
// only a missing one has the table read again (errNotInTable).
func TestPeerUIDFromTable(t *testing.T) {
	la := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 0x1f90}
	ra := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 0x8001}
	own := tcpRow{local: "0100007F:1F90", remote: "0100007F:8001", state: tcpEstablished, uid: 0, inode: 10}
	peer := tcpRow{local: "0100007F:8001", remote: "0100007F:1F90", state: tcpEstablished, uid: 1000, inode: 11}
	other := tcpRow{local: "0100007F:9000", remote: "0100007F:1F90", state: tcpEstablished, uid: 1001, inode: 12}
	closing := peer
	closing.state, closing.inode = 8, 0 // CLOSE_WAIT, no descriptor
	twin := peer
	twin.inode, twin.uid = 13, 1002
	for _, c := range []struct {
		name string
		rows []tcpRow
		uid  int
		err  string
	}{
		{"once", []tcpRow{other, own, peer}, 1000, ""},
		{"listed three times", []tcpRow{peer, own, other, peer, peer}, 1000, ""},
		{"two live sockets", []tcpRow{own, peer, twin}, 0, "2 live sockets claim the address"},
		{"closing", []tcpRow{own, closing}, 0, "closed its socket"},
		{"no peer", []tcpRow{own, other}, 0, "not a socket of this host (not in the socket table)"},
		{"no own socket", []tcpRow{peer}, 0, "socket inode 10 of 127.0.0.1:32769: not in the socket table"},
	} {
		uid, err := peerUID(c.rows, la, ra, own.inode)
		switch {
		case c.err == "" && (err != nil || uid != c.uid):
			t.Errorf("%s: uid %d, %v; want %d", c.name, uid, err, c.uid)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%s: uid %d, %v; want an error saying %q", c.name, uid, err, c.err)
		case errors.Is(err, errNotInTable) != strings.Contains(c.err, "not in the socket table"):
			t.Errorf("%s: %v: read again %v", c.name, err, errors.Is(err, errNotInTable))
		}
	}
}
