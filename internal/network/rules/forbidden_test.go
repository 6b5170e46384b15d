package rules

import (
	"net/netip"
	"slices"
	"testing"
)

func TestForbidden(t *testing.T) {
	f := NewForbidden(netip.MustParsePrefix("10.213.0.0/16"), netip.MustParsePrefix("::ffff:192.168.0.0/112"), netip.Prefix{})
	f.SetLocal([]netip.Addr{netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("::ffff:198.18.0.2"), netip.MustParseAddr("2001:db8::7%eth0")})
	tests := []struct {
		addr string
		why  string // "" when allowed
	}{
		{"0.0.0.0", "unspecified or this network"},
		{"0.255.1.2", "unspecified or this network"},
		{"127.0.0.1", "loopback"},
		{"127.255.255.254", "loopback"},
		{"::ffff:127.0.0.1", "loopback"},
		{"169.254.169.254", "link-local or metadata"},
		{"169.254.170.2", "link-local or metadata"},
		{"::ffff:169.254.169.254", "link-local or metadata"},
		{"169.254.0.1", "link-local or metadata"},
		{"100.100.100.200", "metadata"},
		{"224.0.0.251", "multicast"},
		{"239.255.255.250", "multicast"},
		{"240.0.0.1", "reserved or broadcast"},
		{"255.255.255.255", "reserved or broadcast"},
		{"::", "unspecified"},
		{"::1", "loopback"},
		{"::127.0.0.1", "IPv4-compatible IPv6 (embeds IPv4)"},
		{"fe80::1", "link-local"},
		{"fe80::1%eth0", "link-local"},
		{"febf::1", "link-local"},
		{"ff02::1", "multicast"},
		{"ff05::1:3", "multicast"},
		{"fd00:ec2::254", "metadata"},
		{"64:ff9b::a9fe:a9fe", "NAT64 (embeds IPv4)"},
		{"64:ff9b:1::7f00:1", "local NAT64 (embeds IPv4)"},
		{"2002:7f00:1::1", "6to4 (embeds IPv4)"},
		{"2001:0:4136:e378::1", "Teredo (embeds IPv4)"},
		{"198.18.0.1", "host address 198.18.0.1"},
		{"::ffff:198.18.0.1", "host address 198.18.0.1"},
		{"198.18.0.2", "host address 198.18.0.2"},
		{"2001:db8::7", "host address 2001:db8::7"},
		{"10.213.4.5", "blocked range 10.213.0.0/16"},
		{"192.168.0.9", "blocked range 192.168.0.0/16"},
		// Allowed.
		{"8.8.8.8", ""},
		{"10.214.0.1", ""},
		{"100.100.100.201", ""},
		{"169.253.255.255", ""},
		{"198.18.0.3", ""},
		{"223.255.255.255", ""},
		{"2001:db8::8", ""},
		{"2606:4700::1111", ""},
		{"fd00:ec2::253", ""},
		{"fec0::1", ""},
	}
	for _, tc := range tests {
		forbidden, why := f.Check(netip.MustParseAddr(tc.addr))
		if forbidden != (tc.why != "") || why != tc.why {
			t.Errorf("Check(%s) = %v, %q; want %v, %q", tc.addr, forbidden, why, tc.why != "", tc.why)
		}
	}
	if forbidden, why := f.Check(netip.Addr{}); !forbidden {
		t.Errorf("Check(zero) = false, %q; want forbidden", why)
	}
}

func TestForbiddenSetLocalReplaces(t *testing.T) {
	f := NewForbidden()
	a, b := netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("198.18.0.2")
	if forbidden, _ := f.Check(a); forbidden {
		t.Fatalf("Check(%s) before SetLocal = forbidden", a)
	}
	f.SetLocal([]netip.Addr{a})
	if forbidden, _ := f.Check(a); !forbidden {
		t.Errorf("Check(%s) after SetLocal([%s]) = allowed", a, a)
	}
	f.SetLocal([]netip.Addr{b})
	if forbidden, _ := f.Check(a); forbidden {
		t.Errorf("Check(%s) after SetLocal([%s]) = forbidden; the set was not replaced", a, b)
	}
	if forbidden, _ := f.Check(b); !forbidden {
		t.Errorf("Check(%s) after SetLocal([%s]) = allowed", b, b)
	}
	var nilF *Forbidden
	if forbidden, why := nilF.Check(netip.MustParseAddr("127.0.0.1")); !forbidden || why != "loopback" {
		t.Errorf("nil Forbidden: Check(127.0.0.1) = %v, %q; want the fixed ranges", forbidden, why)
	}
}

func TestHostAddrs(t *testing.T) {
	addrs, err := HostAddrs()
	if err != nil {
		t.Fatal(err)
	}
	// Every network namespace has lo; in the root one it carries 127.0.0.1.
	if !slices.Contains(addrs, netip.MustParseAddr("127.0.0.1")) {
		t.Errorf("HostAddrs() = %v; want 127.0.0.1 among them", addrs)
	}
	if !slices.IsSortedFunc(addrs, netip.Addr.Compare) {
		t.Errorf("HostAddrs() = %v; not sorted", addrs)
	}
	for _, a := range addrs {
		if a.Zone() != "" || a.Is4In6() {
			t.Errorf("HostAddrs() has %v; want no zones and no mapped forms", a)
		}
	}
}
