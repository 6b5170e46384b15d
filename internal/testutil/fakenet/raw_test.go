package fakenet

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
)

func dialHost(t *testing.T, n *Internet, network string, to netip.AddrPort) net.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := n.Dial(ctx, n.HostNS, network, to.String())
	if err != nil {
		t.Fatalf("dialing %s %s from host: %v", network, to, err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	return c
}

// TestRawTCP connects to each raw TCP listener from the host namespace and
// checks the banner, and that the connect and the first bytes are logged.
func TestRawTCP(t *testing.T) {
	n := New(t)
	for _, a := range []netip.Addr{AllowedAddr, AllowedAddr6} {
		for _, port := range RawTCPPorts {
			to := netip.AddrPortFrom(a, port)
			t.Run(to.String(), func(t *testing.T) {
				c := dialHost(t, n, "tcp", to)
				if b := banners[port]; b != "" {
					got := make([]byte, len(b))
					if _, err := io.ReadFull(c, got); err != nil || string(got) != b {
						t.Errorf("banner %q, %v; want %q", got, err, b)
					}
				}
				msg := "probe " + strconv.Itoa(int(port)) + "\r\n"
				if _, err := io.WriteString(c, msg); err != nil {
					t.Fatal(err)
				}
				e := waitFor(t, n, "the first bytes", func(e Event) bool { return e.Kind == KindTCP && e.Op == OpData && e.Local == to })
				if string(e.Data) != msg || e.CatchAll || e.Remote != addrPort(c.LocalAddr()) {
					t.Errorf("logged %v, want %q from %s", e, msg, c.LocalAddr())
				}
				if got := n.Connects(to); got != 1 {
					t.Errorf("Connects(%s) = %d, want 1", to, got)
				}
			})
		}
	}
}

// TestUDP sends datagrams to the UDP listeners: 443 logs and stays silent,
// 9999 logs and echoes.
func TestUDP(t *testing.T) {
	n := New(t)
	for _, a := range []netip.Addr{AllowedAddr, AllowedAddr6} {
		for _, port := range RawUDPPorts {
			to := netip.AddrPortFrom(a, port)
			t.Run(to.String(), func(t *testing.T) {
				c := dialHost(t, n, "udp", to)
				msg := []byte("quic-ish probe to " + to.String())
				if _, err := c.Write(msg); err != nil {
					t.Fatal(err)
				}
				e := waitFor(t, n, "the datagram", func(e Event) bool { return e.Kind == KindUDP && e.Local == to })
				if !bytes.Equal(e.Data, msg) || e.CatchAll || e.Remote != addrPort(c.LocalAddr()) {
					t.Errorf("logged %v, want %q from %s", e, msg, c.LocalAddr())
				}
				if port == 9999 {
					got := make([]byte, 1500)
					m, err := c.Read(got)
					if err != nil || !bytes.Equal(got[:m], msg) {
						t.Errorf("echo %q, %v; want %q", got[:m], err, msg)
					}
				}
				if got := len(n.Datagrams(to)); got != 1 {
					t.Errorf("Datagrams(%s) = %d, want 1", to, got)
				}
			})
		}
	}
}

// TestCatchAll sends TCP and UDP from host to addresses and ports nothing
// serves (the route host has to the whole internet ends in inet) and checks the
// catch-all logs each at its original destination.
func TestCatchAll(t *testing.T) {
	n := New(t)
	for _, to := range []netip.AddrPort{
		netip.MustParseAddrPort("203.0.113.7:443"),
		netip.MustParseAddrPort("10.9.9.9:8080"),
		netip.MustParseAddrPort("198.18.1.10:8080"),   // a served address, an unserved port
		netip.MustParseAddrPort("169.254.169.254:81"), // the metadata address, another port
		netip.MustParseAddrPort("198.18.0.2:80"),      // inet's own uplink address
		netip.MustParseAddrPort("[2001:db8:ffff::1]:8443"),
		netip.MustParseAddrPort("[fd00:ec2::254]:443"),
	} {
		t.Run(to.String(), func(t *testing.T) {
			n.Reset()
			c := dialHost(t, n, "tcp", to)
			if _, err := io.WriteString(c, "hello "+to.String()); err != nil {
				t.Fatal(err)
			}
			e := waitFor(t, n, "the caught bytes", func(e Event) bool { return e.Op == OpData })
			if e.Kind != KindTCP || !e.CatchAll || e.Local != to || string(e.Data) != "hello "+to.String() || e.Remote != addrPort(c.LocalAddr()) {
				t.Errorf("logged %v, want the catch-all's at %s", e, to)
			}
			if got := n.Connects(to); got != 1 {
				t.Errorf("Connects(%s) = %d, want 1", to, got)
			}

			u := dialHost(t, n, "udp", to)
			if _, err := u.Write([]byte("datagram")); err != nil {
				t.Fatal(err)
			}
			e = waitFor(t, n, "the caught datagram", Is(KindUDP))
			if !e.CatchAll || e.Local != to || string(e.Data) != "datagram" || e.Remote != addrPort(u.LocalAddr()) {
				t.Errorf("logged %v, want the catch-all's at %s", e, to)
			}
			if got := len(n.Reached(to.Addr())); got != 3 {
				t.Errorf("Reached(%s) = %d events, want 3 (connect, data, datagram)\n%s", to.Addr(), got, dump(n))
			}
		})
	}
}

// TestICMPEcho pings served and unserved addresses from host and checks the
// echo requests are logged at their destination.
func TestICMPEcho(t *testing.T) {
	n := New(t)
	for _, to := range []netip.Addr{AllowedAddr, netip.MustParseAddr("203.0.113.9"), AllowedAddr6, netip.MustParseAddr("2001:db8:ffff::9")} {
		t.Run(to.String(), func(t *testing.T) {
			n.Reset()
			network, typ, proto := "ip4:icmp", icmp.Type(ipv4.ICMPTypeEcho), 1
			if to.Is6() {
				network, typ, proto = "ip6:ipv6-icmp", ipv6.ICMPTypeEchoRequest, 58
			}
			pc, err := n.ListenPacket(n.HostNS, network, "")
			if err != nil {
				t.Fatal(err)
			}
			defer pc.Close()
			payload := []byte("ping " + to.String())
			msg, err := (&icmp.Message{Type: typ, Body: &icmp.Echo{ID: 7, Seq: 1, Data: payload}}).Marshal(nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := pc.WriteTo(msg, &net.IPAddr{IP: to.AsSlice()}); err != nil {
				t.Fatal(err)
			}
			e := waitFor(t, n, "the echo request", Is(KindICMP))
			if e.Local.Addr() != to || string(e.Data) != string(payload) || e.Detail != "id=7 seq=1" {
				t.Errorf("logged %v, want an echo to %s", e, to)
			}
			// The kernel answers those to inet's own addresses (for ICMPv6 it
			// fills in the checksum too); the catch-all's are only logged.
			if to != AllowedAddr && to != AllowedAddr6 {
				return
			}
			pc.SetReadDeadline(time.Now().Add(10 * time.Second))
			buf := make([]byte, 1500)
			for {
				m, _, err := pc.ReadFrom(buf)
				if err != nil {
					t.Fatalf("reading the echo reply: %v", err)
				}
				reply, err := icmp.ParseMessage(proto, buf[:m])
				if err == nil && (reply.Type == ipv4.ICMPTypeEchoReply || reply.Type == ipv6.ICMPTypeEchoReply) {
					break
				}
			}
		})
	}
}

// TestHostCanary connects to each host canary from inside the host namespace
// and checks each connect and its bytes are logged as canary events.
func TestHostCanary(t *testing.T) {
	n := New(t)
	for _, to := range n.HostCanary.All() {
		if !to.IsValid() || to.Port() == 0 {
			t.Fatalf("canary address %s", to)
		}
		c := dialHost(t, n, "tcp", to)
		io.WriteString(c, "knock")
		e := waitFor(t, n, "the canary's log", func(e Event) bool { return e.Kind == KindCanary && e.Op == OpData && e.Local == to })
		if string(e.Data) != "knock" {
			t.Errorf("logged %v", e)
		}
		if got := n.Connects(to); got != 1 {
			t.Errorf("Connects(%s) = %d, want 1", to, got)
		}
	}
	if a := n.HostCanary.Uplink.Addr(); a != HostAddr {
		t.Errorf("uplink canary on %s, want %s", a, HostAddr)
	}
	// The canaries live in host: inet reaches the uplink one through the veth,
	// and its own loopback holds no canary.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := n.Dial(ctx, n.InetNS, "tcp", n.HostCanary.Loopback.String())
	if err == nil {
		c.Close()
		t.Errorf("inet reached %s on its own loopback", n.HostCanary.Loopback)
	}
}
