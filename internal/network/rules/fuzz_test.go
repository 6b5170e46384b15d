package rules

import (
	"net"
	"net/netip"
	"strconv"
	"strings"
	"testing"
)

// FuzzCompile checks that no allowlist ever allows a name or an address that no
// allow entry covers, or one that a block entry covers: there is no allow-all.
// Coverage is decided by a reference written here from the spec, not by Set.
func FuzzCompile(f *testing.F) {
	seeds := []struct{ allow, block, probe string }{
		{"example.com", "", "example.com"},
		{"*.example.com", "", "example.com"},
		{"*.example.com", "", "a.b.example.com"},
		{"*.example.com", "bad.example.com", "bad.example.com"},
		{"*.test", "*.evil.test", "x.evil.test"},
		{"10.0.0.0/8", "10.1.0.0/16", "10.1.2.3"},
		{"::ffff:10.0.0.0/104", "", "10.3.4.5"},
		{"::/0", "", "1.2.3.4"},
		{"0.0.0.0/0", "", "::ffff:1.2.3.4"},
		{"2001:db8::/32", "", "2001:db8::1"},
		{"Example.COM.", "", "EXAMPLE.com"},
		{"192.0.2.1", "", "3221225985"},
		{"192.0.2.1", "", "0xc0.0.2.1"},
		{"a.com,*.b.com", "c.b.com", "C.B.COM."},
		{"*.com", "", "com"},
		{"", "", "anything"},
	}
	for _, s := range seeds {
		f.Add(s.allow, s.block, s.probe)
	}
	f.Fuzz(func(t *testing.T, allowS, blockS, probe string) {
		allow, block := splitEntries(allowS), splitEntries(blockS)
		s, err := Compile(Allowlist, allow, block)
		if err != nil {
			return
		}
		if v := s.Name(probe); v.Allow {
			if !refAllowsName(allow, block, probe) {
				t.Fatalf("Compile(allowlist, %q, %q).Name(%q) = %+v; no allow entry covers it, or a block entry does", allow, block, probe, v)
			}
		}
		for _, a := range probeAddrs(probe) {
			if v := s.Addr(a); v.Allow && !refAllowsAddr(allow, block, a) {
				t.Fatalf("Compile(allowlist, %q, %q).Addr(%v) = %+v; no allow entry covers it, or a block entry does", allow, block, a, v)
			}
		}
		// A name no entry mentions is never allowed unless a wildcard covers it.
		if v := s.Name("zz-unlisted-9d1f.invalid"); v.Allow && !refAllowsName(allow, block, "zz-unlisted-9d1f.invalid") {
			t.Fatalf("Compile(allowlist, %q, %q) allows an unlisted name: %+v", allow, block, v)
		}
	})
}

func splitEntries(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

// probeAddrs turns the probe into addresses: parsed as an address, and its
// first bytes as raw IPv4 and IPv6 addresses.
func probeAddrs(probe string) []netip.Addr {
	var out []netip.Addr
	if a, err := netip.ParseAddr(probe); err == nil {
		out = append(out, a)
	}
	b := []byte(probe + strings.Repeat("\x00", 16))
	out = append(out, netip.AddrFrom4([4]byte(b[:4])), netip.AddrFrom16([16]byte(b[:16])))
	return out
}

// refName normalises a name the way the spec says: case folded, one trailing dot.
func refName(s string) string { return strings.ToLower(strings.TrimSuffix(s, ".")) }

// refCoversName reports whether a rule entry covers the name n (normalised).
func refCoversName(entry, n string) bool {
	e := refName(entry)
	if rest, ok := strings.CutPrefix(e, "*."); ok {
		return strings.HasSuffix(n, "."+rest) && len(n) > len(rest)+1
	}
	return e == n
}

func refAllowsName(allow, block []string, probe string) bool {
	if a, isIP, err := ParseHost(probe); err == nil && isIP {
		return refAllowsAddr(allow, block, a)
	}
	n := refName(probe)
	for _, e := range block {
		if refCoversName(e, n) {
			return false
		}
	}
	for _, e := range allow {
		if refCoversName(e, n) {
			return true
		}
	}
	return false
}

// refNet parses an address entry with package net, independently of netip.
func refNet(entry string) (*net.IPNet, bool) {
	if strings.Contains(entry, "/") {
		_, n, err := net.ParseCIDR(entry)
		if err != nil {
			return nil, false
		}
		ones, bits := n.Mask.Size()
		if v4 := n.IP.To4(); v4 != nil && bits == 128 && ones >= 96 {
			return &net.IPNet{IP: v4, Mask: net.CIDRMask(ones-96, 32)}, true
		}
		return n, true
	}
	ip := net.ParseIP(entry)
	if ip == nil {
		return nil, false
	}
	if v4 := ip.To4(); v4 != nil {
		return &net.IPNet{IP: v4, Mask: net.CIDRMask(32, 32)}, true
	}
	return &net.IPNet{IP: ip, Mask: net.CIDRMask(128, 128)}, true
}

func refContains(n *net.IPNet, a netip.Addr) bool {
	a = a.WithZone("").Unmap()
	if len(n.IP) == net.IPv4len && !a.Is4() || len(n.IP) == net.IPv6len && a.Is4() {
		return false
	}
	return n.Contains(net.IP(a.AsSlice()))
}

func refAllowsAddr(allow, block []string, a netip.Addr) bool {
	for _, e := range block {
		if n, ok := refNet(e); ok && refContains(n, a) {
			return false
		}
	}
	for _, e := range allow {
		if n, ok := refNet(e); ok && refContains(n, a) {
			return true
		}
	}
	return false
}

// FuzzParseHost checks that ParseHost never panics, that an address it returns
// round-trips, and that its IPv4 results agree with refInetAton.
func FuzzParseHost(f *testing.F) {
	for _, s := range []string{"127.0.0.1", "2130706433", "0x7f000001", "0177.0.0.1", "0x7f.1", "127.1", "1.2.3",
		"::ffff:127.0.0.1", "[::1]", "fe80::1%eth0", "1.2.3.4.nip.io", "999.1.1.1", "example.com", "0x", "08", "1.2.3.4.",
		"a..b", "xn--bcher-kva.de", "_srv.example.com", "0xffffffff", "4294967296"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, host string) {
		a, isIP, err := ParseHost(host)
		if err != nil {
			if isIP || a.IsValid() {
				t.Fatalf("ParseHost(%q) = %v, %v, %v; an error returns no address", host, a, isIP, err)
			}
		}
		if isIP {
			if !a.IsValid() || a.Zone() != "" || a.Is4In6() {
				t.Fatalf("ParseHost(%q) = %v; want a valid address without zone or mapping", host, a)
			}
			b, isIP2, err := ParseHost(a.String())
			if err != nil || !isIP2 || b != a {
				t.Fatalf("ParseHost(%q) = %v, but ParseHost(%q) = %v, %v, %v", host, a, a.String(), b, isIP2, err)
			}
			if b, isIP2, err := ParseHost("[" + a.String() + "]"); a.Is6() && (err != nil || !isIP2 || b != a) {
				t.Fatalf("ParseHost([%v]) = %v, %v, %v", a, b, isIP2, err)
			}
		}
		if err == nil && !isIP {
			// A name: valid, and no parser takes it for an address.
			if ip := net.ParseIP(strings.TrimSuffix(host, ".")); ip != nil {
				t.Fatalf("ParseHost(%q) says name; net.ParseIP says %v", host, ip)
			}
			if r, ok := refInetAton(strings.TrimSuffix(host, ".")); ok {
				t.Fatalf("ParseHost(%q) says name; inet_aton says %v", host, r)
			}
			n := strings.TrimSuffix(host, ".")
			if len(n) == 0 || len(n) > 253 {
				t.Fatalf("ParseHost(%q) says name of length %d", host, len(n))
			}
			for _, l := range strings.Split(n, ".") {
				if len(l) == 0 || len(l) > 63 || strings.Trim(l, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_") != "" {
					t.Fatalf("ParseHost(%q) says name with bad label %q", host, l)
				}
			}
		}
		// IPv4 forms: agree with the reference inet_aton.
		if !strings.ContainsAny(host, ":[]") {
			h := strings.TrimSuffix(host, ".")
			r, ok := refInetAton(h)
			switch {
			case ok && (err != nil || !isIP || a != r):
				t.Fatalf("ParseHost(%q) = %v, %v, %v; inet_aton says %v", host, a, isIP, err, r)
			case !ok && isIP:
				t.Fatalf("ParseHost(%q) = %v; inet_aton rejects it", host, a)
			}
		}
	})
}

// refInetAton is inet_aton(3) written a second way, with strconv: one to four
// dot-separated parts; each decimal, octal after a leading 0, or hex after 0x
// with at least one digit; all but the last at most 255; the last fills the
// remaining bytes.
func refInetAton(s string) (netip.Addr, bool) {
	parts := strings.Split(s, ".")
	if len(parts) < 1 || len(parts) > 4 {
		return netip.Addr{}, false
	}
	vals := make([]uint64, len(parts))
	for i, p := range parts {
		if p == "" || p[0] < '0' || p[0] > '9' {
			return netip.Addr{}, false
		}
		var v uint64
		var err error
		switch {
		case strings.HasPrefix(p, "0x") || strings.HasPrefix(p, "0X"):
			if len(p) == 2 || strings.ContainsAny(p[2:], "+-_") {
				return netip.Addr{}, false
			}
			v, err = strconv.ParseUint(p[2:], 16, 64)
		case len(p) > 1 && p[0] == '0':
			if strings.ContainsAny(p[1:], "+-_") {
				return netip.Addr{}, false
			}
			v, err = strconv.ParseUint(p[1:], 8, 64)
		default:
			v, err = strconv.ParseUint(p, 10, 64)
		}
		if err != nil {
			return netip.Addr{}, false
		}
		vals[i] = v
	}
	var sum uint64
	for i, v := range vals[:len(vals)-1] {
		if v > 255 {
			return netip.Addr{}, false
		}
		sum += v << (8 * (3 - i))
	}
	last := vals[len(vals)-1]
	if last > (uint64(1)<<(8*(5-len(vals))))-1 {
		return netip.Addr{}, false
	}
	sum += last
	return netip.AddrFrom4([4]byte{byte(sum >> 24), byte(sum >> 16), byte(sum >> 8), byte(sum)}), true
}

func TestRefInetAton(t *testing.T) {
	// The reference must itself be right for the test of ParseHost to mean anything.
	for in, want := range map[string]string{"127.1": "127.0.0.1", "0x7f.1": "127.0.0.1", "2130706433": "127.0.0.1",
		"1.2.3": "1.2.0.3", "0177.0.0.1": "127.0.0.1", "4294967295": "255.255.255.255"} {
		if got, ok := refInetAton(in); !ok || got != netip.MustParseAddr(want) {
			t.Errorf("refInetAton(%q) = %v, %v; want %s", in, got, ok, want)
		}
	}
	for _, in := range []string{"0x", "08", "1.2.3.4.5", "256.1", "4294967296", "1..2", "", "1.2.3.256"} {
		if got, ok := refInetAton(in); ok {
			t.Errorf("refInetAton(%q) = %v; want rejection", in, got)
		}
	}
}
