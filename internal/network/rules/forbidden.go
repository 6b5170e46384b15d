// This file implements Forbidden: the addresses no sandbox may reach under any
// tier, whatever its lists say.

package rules

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync/atomic"
)

// Forbidden is the set of addresses no sandbox may reach under any tier: fixed
// ranges (loopback, link-local and metadata, multicast, reserved, ranges that
// embed IPv4), operator ranges given to NewForbidden, and the host's own
// addresses given to SetLocal. Safe for concurrent use.
type Forbidden struct {
	extra []netip.Prefix
	local atomic.Pointer[map[netip.Addr]bool]
}

type forbiddenRange struct {
	net netip.Prefix
	why string
}

// fixedForbidden is checked in order: the first match names the reason.
var fixedForbidden = []forbiddenRange{
	{netip.MustParsePrefix("0.0.0.0/8"), "unspecified or this network"},
	{netip.MustParsePrefix("127.0.0.0/8"), "loopback"},
	{netip.MustParsePrefix("169.254.0.0/16"), "link-local or metadata"}, // 169.254.169.254, 169.254.170.2
	{netip.MustParsePrefix("100.100.100.200/32"), "metadata"},
	{netip.MustParsePrefix("224.0.0.0/4"), "multicast"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved or broadcast"},
	{netip.MustParsePrefix("::/128"), "unspecified"},
	{netip.MustParsePrefix("::1/128"), "loopback"},
	{netip.MustParsePrefix("::/96"), "IPv4-compatible IPv6 (embeds IPv4)"},
	{netip.MustParsePrefix("fe80::/10"), "link-local"},
	{netip.MustParsePrefix("ff00::/8"), "multicast"},
	{netip.MustParsePrefix("fd00:ec2::254/128"), "metadata"},
	{netip.MustParsePrefix("64:ff9b::/96"), "NAT64 (embeds IPv4)"},
	{netip.MustParsePrefix("64:ff9b:1::/48"), "local NAT64 (embeds IPv4)"},
	{netip.MustParsePrefix("2002::/16"), "6to4 (embeds IPv4)"},
	{netip.MustParsePrefix("2001::/32"), "Teredo (embeds IPv4)"},
}

// NewForbidden returns the fixed forbidden ranges plus extra (the sandbox
// subnet, operator blocks); an invalid prefix in extra is ignored. IPv4-mapped
// prefixes are unmapped.
func NewForbidden(extra ...netip.Prefix) *Forbidden {
	f := &Forbidden{}
	for _, p := range extra {
		if p.IsValid() {
			f.extra = append(f.extra, normPrefix(p))
		}
	}
	return f
}

// SetLocal sets the host's own addresses, replacing the previous set.
func (f *Forbidden) SetLocal(addrs []netip.Addr) {
	m := make(map[netip.Addr]bool, len(addrs))
	for _, a := range addrs {
		m[a.WithZone("").Unmap()] = true
	}
	f.local.Store(&m)
}

// Check reports whether a is forbidden and why ("loopback", "link-local or
// metadata", "multicast", "host address 198.18.0.1", "blocked range
// 10.213.0.0/16"). It unmaps IPv4-mapped addresses and ignores zones first; the
// invalid (zero) address is forbidden.
func (f *Forbidden) Check(a netip.Addr) (forbidden bool, why string) {
	a = a.WithZone("").Unmap()
	if !a.IsValid() {
		return true, "invalid address"
	}
	for _, r := range fixedForbidden {
		if r.net.Contains(a) {
			return true, r.why
		}
	}
	if f == nil {
		return false, ""
	}
	if m := f.local.Load(); m != nil && (*m)[a] {
		return true, "host address " + a.String()
	}
	for _, p := range f.extra {
		if p.Contains(a) {
			return true, "blocked range " + p.String()
		}
	}
	return false, ""
}

// HostAddrs lists the addresses of this network namespace's interfaces,
// unmapped, without zones, sorted and without duplicates.
func HostAddrs() ([]netip.Addr, error) {
	ifaddrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("listing interface addresses: %w", err)
	}
	var out []netip.Addr
	for _, ia := range ifaddrs {
		var ip net.IP
		switch v := ia.(type) {
		case *net.IPNet:
			ip = v.IP
		case *net.IPAddr:
			ip = v.IP
		default:
			continue
		}
		if a, ok := netip.AddrFromSlice(ip); ok {
			out = append(out, a.Unmap())
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return slices.Compact(out), nil
}
