package launch

import (
	"net"
	"os"
	"strings"
	"testing"
)

// TestAdvertiseHostNeverLoopbackForRemoteNodes: the front end tells agents an address of the
// route toward their nodes. Nodes on this host get loopback; as soon as one node is reached
// through another interface, its address is advertised, even when this host's name resolves
// to loopback (Debian's 127.0.1.1, or 127.0.0.1 as here).
func TestAdvertiseHostNeverLoopbackForRemoteNodes(t *testing.T) {
	fe := &Frontend{wlm: slurmWLM{}}
	host, _ := os.Hostname()
	got, err := fe.advertiseHost([]string{host})
	if err != nil || !net.ParseIP(got).IsLoopback() {
		t.Errorf("nodes on this host: advertise %q, %v; want loopback", got, err)
	}
	var other net.IP
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
			other = n.IP
			break
		}
	}
	if other == nil {
		t.Skip("this host has no address but loopback")
	}
	got, err = fe.advertiseHost([]string{host, other.String()})
	if err != nil || net.ParseIP(got).IsLoopback() {
		t.Errorf("a node reached through %s: advertise %q, %v; want a non-loopback address", other, got, err)
	}
	if got, err := fe.advertiseHost([]string{"no-such-node.invalid"}); err == nil {
		if ip := net.ParseIP(got); ip == nil || ip.IsLoopback() {
			t.Errorf("unresolvable node: advertise %q, want an error or a non-loopback address", got)
		}
	} else if !strings.Contains(err.Error(), "HPCDAP_FRONTEND_HOST") {
		t.Errorf("unresolvable node: %v; want the error to name HPCDAP_FRONTEND_HOST", err)
	}
}
