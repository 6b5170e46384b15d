package network

import (
	"context"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"sbx.dev/sbx/internal/osthread"
	"sbx.dev/sbx/internal/sandbox"
	"sbx.dev/sbx/internal/testutil"
)

// newNetns makes a network namespace standing in for a sandbox's; it lives
// as long as the returned file is open.
func newNetns(t *testing.T) *os.File {
	t.Helper()
	var f *os.File
	err := osthread.Discarded(func() error {
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			return err
		}
		var err error
		f, err = os.Open("/proc/thread-self/ns/net")
		return err
	})
	if err != nil {
		t.Fatalf("making a network namespace: %v", err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

type listeners struct {
	proxy net.Listener
	dns   net.PacketConn
}

func newTestRouter(t *testing.T) (*Router, *listeners) {
	t.Helper()
	testutil.RequireRoot(t)
	testutil.RequireNamespaces(t)
	ls := &listeners{}
	r, err := New(Config{Dir: t.TempDir(), Log: testutil.Logger(t)}, func(ns *os.File) error {
		return inNetns(ns, func() error {
			var err error
			if ls.proxy, err = net.Listen("tcp4", "0.0.0.0:15001"); err != nil {
				return err
			}
			ls.dns, err = net.ListenPacket("udp4", "0.0.0.0:15053")
			return err
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if ls.proxy != nil {
			ls.proxy.Close()
			ls.dns.Close()
		}
		if err := r.Close(true); err != nil {
			t.Errorf("closing the router: %v", err)
		}
		if _, err := os.Stat(r.pin); !os.IsNotExist(err) {
			t.Errorf("router namespace pin %s left behind: %v", r.pin, err)
		}
	})
	return r, ls
}

// TestAttach connects two stand-in sandboxes and checks what each sees: its
// own address and a route to the gateway; TCP to anywhere lands at the
// proxy's listener with its original destination; DNS at the resolver's;
// nothing reaches the other sandbox or the router's other ports.
func TestAttach(t *testing.T) {
	r, ls := newTestRouter(t)
	ctx := context.Background()
	nsA, nsB := newNetns(t), newNetns(t)
	idA, idB := sandbox.NewID(), sandbox.NewID()
	a, err := r.Attach(ctx, idA, nsA)
	if err != nil {
		t.Fatal(err)
	}
	b, err := r.Attach(ctx, idB, nsB)
	if err != nil {
		t.Fatal(err)
	}
	if a == b || !r.Subnet().Contains(a) || !r.Subnet().Contains(b) {
		t.Fatalf("addresses %s and %s: want two distinct ones in %s", a, b, r.Subnet())
	}
	if got, _ := r.Lookup(a); got != idA {
		t.Errorf("Lookup(%s) = %q, want %s", a, got, idA)
	}
	if again, _ := r.Attach(ctx, idA, nsA); again != a {
		t.Errorf("second Attach gave %s, want %s", again, a)
	}

	// A TCP connection to a made-up destination arrives at the proxy's listener.
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ls.proxy.Accept()
		if err == nil {
			accepted <- c
		}
	}()
	dst := netip.MustParseAddrPort("198.18.5.5:8080")
	var client net.Conn
	if err := inNetns(nsA, func() error {
		var err error
		client, err = net.DialTimeout("tcp4", dst.String(), 2*time.Second)
		return err
	}); err != nil {
		t.Fatalf("dialing out of sandbox A: %v", err)
	}
	defer client.Close()
	select {
	case c := <-accepted:
		defer c.Close()
		orig, err := OriginalDst(c)
		if err != nil || orig != dst {
			t.Errorf("OriginalDst = %v, %v; want %v", orig, err, dst)
		}
		src := netip.MustParseAddrPort(c.RemoteAddr().String())
		if src.Addr() != a {
			t.Errorf("the proxy sees source %s, want sandbox A's %s", src, a)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("the proxy's listener saw no connection")
	}

	// DNS to the gateway lands at the resolver's socket (positive control
	// for the UDP probes below).
	if err := inNetns(nsA, func() error {
		c, err := net.Dial("udp4", net.JoinHostPort(r.Gateway().String(), "53"))
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Write([]byte("query"))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	ls.dns.SetReadDeadline(time.Now().Add(3 * time.Second))
	n, from, err := ls.dns.ReadFrom(buf)
	if err != nil || string(buf[:n]) != "query" || netip.MustParseAddrPort(from.String()).Addr() != a {
		t.Fatalf("resolver socket read %q from %v, %v; want \"query\" from %s", buf[:n], from, err, a)
	}

	// Sandbox B listens; A can reach neither B's address nor the router's
	// other UDP ports (both would be forwarding or local delivery, both off).
	var bl net.PacketConn
	if err := inNetns(nsB, func() error {
		var err error
		bl, err = net.ListenPacket("udp4", ":9999")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer bl.Close()
	if err := inNetns(nsA, func() error {
		c, err := net.Dial("udp4", net.JoinHostPort(b.String(), "9999"))
		if err != nil {
			return err
		}
		defer c.Close()
		c.Write([]byte("to B"))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// Control: B's socket works from inside B.
	if err := inNetns(nsB, func() error {
		c, err := net.Dial("udp4", "127.0.0.1:9999")
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Write([]byte("self"))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	bl.SetReadDeadline(time.Now().Add(time.Second))
	for {
		n, _, err := bl.ReadFrom(buf)
		if err != nil {
			t.Fatal("sandbox B's control datagram did not arrive")
		}
		if got := string(buf[:n]); got == "to B" {
			t.Fatal("sandbox A reached sandbox B")
		} else if got == "self" {
			break
		}
	}
	// B's TCP port is out of reach too: the SYN goes to the proxy instead.
	go func() {
		c, err := ls.proxy.Accept()
		if err == nil {
			accepted <- c
		}
	}()
	if err := inNetns(nsA, func() error {
		c, err := net.DialTimeout("tcp4", net.JoinHostPort(b.String(), "22"), time.Second)
		if err == nil {
			c.Close()
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	select {
	case c := <-accepted:
		orig, _ := OriginalDst(c)
		if orig.Addr() != b {
			t.Errorf("redirected flow's destination %v, want B's %s", orig, b)
		}
		c.Close()
	case <-time.After(3 * time.Second):
		t.Fatal("A's connection to B did not land at the proxy")
	}

	// Inside, IPv6 is off: no address but IPv4 on eth0.
	if err := inNetns(nsA, func() error {
		eth, err := netlink.LinkByName("eth0")
		if err != nil {
			return err
		}
		addrs, err := netlink.AddrList(eth, netlink.FAMILY_ALL)
		if err != nil {
			return err
		}
		for _, ad := range addrs {
			if ad.IP.To4() == nil {
				t.Errorf("eth0 has IPv6 address %s", ad.IPNet)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	// Detach removes both ends and frees the address.
	for _, id := range []sandbox.ID{idA, idB} {
		if err := r.Detach(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if err := inNetns(nsA, func() error {
		if _, err := netlink.LinkByName("eth0"); err == nil {
			t.Error("eth0 still in sandbox A after Detach")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	links, _ := r.nl.LinkList()
	for _, l := range links {
		if strings.HasPrefix(l.Attrs().Name, vethPrefix) {
			t.Errorf("veth %s left in the router", l.Attrs().Name)
		}
	}
	if _, ok := r.Lookup(a); ok {
		t.Errorf("address %s still known after Detach", a)
	}
}

// TestReadopt checks a router restarted over the same directory (a daemon
// restart) adopts a sandbox's veth and address rather than making new ones.
func TestReadopt(t *testing.T) {
	r, ls := newTestRouter(t)
	ctx := context.Background()
	id := sandbox.NewID()
	ns := newNetns(t)
	a, err := r.Attach(ctx, id, ns)
	if err != nil {
		t.Fatal(err)
	}
	// What a daemon's exit leaves: the namespace and its veths.
	ls.proxy.Close()
	ls.dns.Close()
	if err := r.Close(false); err != nil {
		t.Fatal(err)
	}
	r.byID, r.byAddr = map[sandbox.ID]netip.Addr{}, map[netip.Addr]sandbox.ID{}

	got, err := r.Attach(ctx, id, ns)
	if err != nil || got != a {
		t.Fatalf("Attach after a restart = %v, %v; want the same address %s", got, err, a)
	}
	links, _ := r.nl.LinkList()
	n := 0
	for _, l := range links {
		if strings.HasPrefix(l.Attrs().Name, vethPrefix) {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d veths in the router after re-adoption, want 1", n)
	}
	id2 := sandbox.NewID()
	if other, err := r.Attach(ctx, id2, newNetns(t)); err != nil || other == a {
		t.Errorf("a new sandbox after re-adoption got %v, %v", other, err)
	}
	for _, x := range []sandbox.ID{id, id2} {
		if err := r.Detach(ctx, x); err != nil {
			t.Fatal(err)
		}
	}
}
