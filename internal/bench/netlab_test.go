package bench

import (
	"context"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestNetLab builds the lab and fetches from its upstream directly from the
// host namespace and through the relay from the client namespace: the
// bytes arrive whole, and the upstream server sees each request come from
// the host namespace's address, so the relay dialled from there and not
// from the bench's own namespace.
func TestNetLab(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the lab needs root (network namespaces)")
	}
	l, err := NewNetLab()
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	const n = 5 << 20
	ctx := context.Background()
	for _, c := range []struct {
		name, ns, url string
	}{
		{"direct", l.HostNS, l.UpstreamAddrURL()},
		{"relay", l.clientNS(), l.RelayURL()},
	} {
		l.lastPeer.Store(netip.AddrPort{})
		out, err := l.in(ctx, c.ns, "curl", "-sS", "--noproxy", "*", "-o", "/dev/null", "-w", "%{size_download}", c.url+"/bytes?n="+strconv.Itoa(n))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got, _ := strconv.Atoi(strings.TrimSpace(out)); got != n {
			t.Errorf("%s: %s bytes, want %d", c.name, out, n)
		}
		if peer, _ := l.lastPeer.Load().(netip.AddrPort); peer.Addr() != labHostAddr.Addr() {
			t.Errorf("%s: the upstream saw the request from %v, want %v", c.name, peer, labHostAddr.Addr())
		}
	}
	// The client namespace reaches the upstream only through the relay:
	// it has no route there.
	if out, err := l.in(ctx, l.clientNS(), "curl", "-sS", "--max-time", "2", "-o", "/dev/null", l.UpstreamAddrURL()+"/"); err == nil {
		t.Errorf("the client namespace reached the upstream directly: %s", out)
	}
}
