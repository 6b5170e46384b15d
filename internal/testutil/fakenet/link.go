// This file implements the addressing: the veth between host and inet, the
// addresses on each side, host's routes (everything to inet), and inet's policy
// routing that makes every address local for the catch-all.

package fakenet

import (
	"fmt"
	"net"
	"net/netip"
	"os"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// catchMark marks, in inet, packets for addresses no server holds; catchTable
// routes them to inet itself, where the catch-all takes them.
const (
	catchMark  = 0x66616b65 // "fake"
	catchTable = 166
)

// The veth's ends have fixed MAC addresses, and each side knows the other's
// addresses as permanent neighbours: no ARP or neighbour discovery is needed.
// (Without them the first neighbour solicitation from host after setup is
// lost, and the first IPv6 connection waits a second for the retry.)
var (
	hostMAC = net.HardwareAddr{0x02, 0x66, 0x6e, 0, 0, 0x01}
	inetMAC = net.HardwareAddr{0x02, 0x66, 0x6e, 0, 0, 0x02}
)

// configure sets up both namespaces. It runs each half on a thread inside the
// namespace, with netlink sockets created there, so nothing reaches the test
// process's own namespace.
func configure(hostNS, inetNS string) error {
	inetFile, err := os.Open(inetNS)
	if err != nil {
		return fmt.Errorf("opening network namespace: %w", err)
	}
	defer inetFile.Close()
	if err := do(hostNS, func() error { return configureHost(int(inetFile.Fd())) }); err != nil {
		return fmt.Errorf("configuring the host namespace: %w", err)
	}
	if err := do(inetNS, configureInet); err != nil {
		return fmt.Errorf("configuring the inet namespace: %w", err)
	}
	return nil
}

// configureHost runs in host: it makes the veth (its peer goes straight into
// inet, whose fd is inetFD), addresses it, and routes everything through it.
func configureHost(inetFD int) error {
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return fmt.Errorf("opening netlink: %w", err)
	}
	defer h.Close()
	if err := linkUp(h, "lo"); err != nil {
		return err
	}
	veth := &netlink.Veth{
		LinkAttrs:        netlink.LinkAttrs{Name: HostLink, HardwareAddr: hostMAC},
		PeerName:         InetLink,
		PeerHardwareAddr: inetMAC,
		PeerNamespace:    netlink.NsFd(inetFD),
	}
	if err := h.LinkAdd(veth); err != nil {
		return fmt.Errorf("adding veth %s: %w", HostLink, err)
	}
	// Without DAD the link-local address is usable at once too.
	if err := sysctl("net/ipv6/conf/"+HostLink+"/accept_dad", "0"); err != nil {
		return err
	}
	link, err := h.LinkByName(HostLink)
	if err != nil {
		return fmt.Errorf("finding %s: %w", HostLink, err)
	}
	for _, p := range []netip.Prefix{netip.PrefixFrom(HostAddr, 24), netip.PrefixFrom(HostAddr6, 64)} {
		if err := addrAdd(h, link, p); err != nil {
			return err
		}
	}
	if err := neighbours(h, link, inetMAC, InetAddr, DNSAddr, InetAddr6, DNSAddr6); err != nil {
		return err
	}
	if err := h.LinkSetUp(link); err != nil {
		return fmt.Errorf("bringing %s up: %w", HostLink, err)
	}
	routes := []struct {
		dst netip.Prefix
		gw  netip.Addr
	}{
		{FakePrefix, InetAddr},
		{netip.PrefixFrom(MetadataAddr, 32), InetAddr},
		{netip.PrefixFrom(MetadataECSAddr, 32), InetAddr},
		{netip.PrefixFrom(MetadataAlibabaAddr, 32), InetAddr},
		{netip.MustParsePrefix("0.0.0.0/0"), InetAddr},
		{FakePrefix6, InetAddr6},
		{netip.MustParsePrefix("::/0"), InetAddr6},
	}
	for _, r := range routes {
		err := h.RouteAdd(&netlink.Route{LinkIndex: link.Attrs().Index, Dst: ipNet(r.dst), Gw: r.gw.AsSlice()})
		if err != nil {
			return fmt.Errorf("adding route %s via %s: %w", r.dst, r.gw, err)
		}
	}
	return nil
}

// configureInet runs in inet: the services' addresses, the way back to host,
// and the policy routing for the catch-all.
func configureInet() error {
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return fmt.Errorf("opening netlink: %w", err)
	}
	defer h.Close()
	// inet answers, it never forwards (a packet it did forward would bounce
	// back to host and loop until its TTL ran out); rp_filter is off so the
	// catch-all accepts any source.
	for key, val := range map[string]string{
		"net/ipv4/conf/all/forwarding":              "0",
		"net/ipv6/conf/all/forwarding":              "0",
		"net/ipv4/conf/all/rp_filter":               "0",
		"net/ipv4/conf/default/rp_filter":           "0",
		"net/ipv4/conf/" + InetLink + "/rp_filter":  "0",
		"net/ipv6/conf/" + InetLink + "/accept_dad": "0",
	} {
		if err := sysctl(key, val); err != nil {
			return err
		}
	}
	lo, err := h.LinkByName("lo")
	if err != nil {
		return fmt.Errorf("finding lo: %w", err)
	}
	if err := h.LinkSetUp(lo); err != nil {
		return fmt.Errorf("bringing lo up: %w", err)
	}
	// This kernel may lack the dummy link type: the services live on lo.
	for _, a := range append(webAddrs(), metadataAddrs()...) {
		if err := addrAdd(h, lo, netip.PrefixFrom(a, a.BitLen())); err != nil {
			return err
		}
	}
	link, err := h.LinkByName(InetLink)
	if err != nil {
		return fmt.Errorf("finding %s: %w", InetLink, err)
	}
	// The DNS server's addresses are on the veth's subnet: they must be on the
	// veth itself to answer ARP and neighbour solicitations.
	for _, p := range []netip.Prefix{
		netip.PrefixFrom(InetAddr, 24), netip.PrefixFrom(DNSAddr, 24),
		netip.PrefixFrom(InetAddr6, 64), netip.PrefixFrom(DNSAddr6, 64),
	} {
		if err := addrAdd(h, link, p); err != nil {
			return err
		}
	}
	if err := neighbours(h, link, hostMAC, HostAddr, HostAddr6); err != nil {
		return err
	}
	if err := h.LinkSetUp(link); err != nil {
		return fmt.Errorf("bringing %s up: %w", InetLink, err)
	}
	for _, r := range []struct {
		dst netip.Prefix
		gw  netip.Addr
	}{
		{netip.MustParsePrefix("0.0.0.0/0"), HostAddr},
		{netip.MustParsePrefix("::/0"), HostAddr6},
	} {
		err := h.RouteAdd(&netlink.Route{LinkIndex: link.Attrs().Index, Dst: ipNet(r.dst), Gw: r.gw.AsSlice()})
		if err != nil {
			return fmt.Errorf("adding route %s via %s: %w", r.dst, r.gw, err)
		}
	}
	// Packets nftables marks (see nft.go) are delivered locally whatever their
	// destination: the catch-all's transparent sockets take them.
	for _, fam := range []struct {
		family int
		all    netip.Prefix
	}{
		{unix.AF_INET, netip.MustParsePrefix("0.0.0.0/0")},
		{unix.AF_INET6, netip.MustParsePrefix("::/0")},
	} {
		rule := netlink.NewRule()
		rule.Family = fam.family
		rule.Mark = catchMark
		rule.Table = catchTable
		rule.Priority = 100
		if err := h.RuleAdd(rule); err != nil {
			return fmt.Errorf("adding the catch-all's rule: %w", err)
		}
		err := h.RouteAdd(&netlink.Route{
			LinkIndex: lo.Attrs().Index, Dst: ipNet(fam.all), Table: catchTable,
			Type: unix.RTN_LOCAL, Scope: netlink.SCOPE_HOST,
		})
		if err != nil {
			return fmt.Errorf("adding the catch-all's local route %s: %w", fam.all, err)
		}
	}
	return nil
}

// neighbours records addrs as permanently at mac on link.
func neighbours(h *netlink.Handle, link netlink.Link, mac net.HardwareAddr, addrs ...netip.Addr) error {
	for _, a := range addrs {
		family := unix.AF_INET
		if a.Is6() {
			family = unix.AF_INET6
		}
		err := h.NeighSet(&netlink.Neigh{
			LinkIndex: link.Attrs().Index, Family: family, State: netlink.NUD_PERMANENT,
			IP: a.AsSlice(), HardwareAddr: mac,
		})
		if err != nil {
			return fmt.Errorf("adding neighbour %s on %s: %w", a, link.Attrs().Name, err)
		}
	}
	return nil
}

func linkUp(h *netlink.Handle, name string) error {
	l, err := h.LinkByName(name)
	if err != nil {
		return fmt.Errorf("finding %s: %w", name, err)
	}
	if err := h.LinkSetUp(l); err != nil {
		return fmt.Errorf("bringing %s up: %w", name, err)
	}
	return nil
}

// addrAdd adds p to link; IPv6 addresses skip duplicate address detection so
// they are usable at once.
func addrAdd(h *netlink.Handle, link netlink.Link, p netip.Prefix) error {
	a := &netlink.Addr{IPNet: ipNet(p)}
	if p.Addr().Is6() {
		a.Flags = unix.IFA_F_NODAD
	}
	if err := h.AddrAdd(link, a); err != nil {
		return fmt.Errorf("adding %s to %s: %w", p, link.Attrs().Name, err)
	}
	return nil
}

func ipNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

// sysctl writes a value under /proc/sys; under net/ it is the calling thread's
// network namespace's.
func sysctl(key, val string) error {
	if err := os.WriteFile("/proc/sys/"+key, []byte(val), 0); err != nil {
		return fmt.Errorf("setting %s: %w", key, err)
	}
	return nil
}
