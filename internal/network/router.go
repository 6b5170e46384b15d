// Package network connects sandboxes that may reach out (the allowlist and
// full tiers) to the daemon's egress proxy and resolver, and to nothing else.
//
// Every such sandbox gets a veth pair: eth0 inside, with one /32 address and a
// default route, and its other end in the router, a network namespace the
// daemon owns (pinned in its data dir, so it outlives a restart). The router
// forwards nothing: nftables redirects each TCP flow to the proxy's listener,
// DNS to the resolver's and other UDP (TPROXY) to the full tier's relay
// (udp.go), sockets the daemon opened inside it, and drops everything else.
// The proxy and the relay dial out from the daemon's own namespace.
// So the only way out of a sandbox is through the daemon, under the
// sandbox's rules; the host's own namespace is never changed.
package network

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sync"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"sbx.dev/sbx/internal/logkey"
	"sbx.dev/sbx/internal/sandbox"
)

// DefaultSubnet holds the router's address (the first) and the sandboxes'.
var DefaultSubnet = netip.MustParsePrefix("10.213.0.0/16")

// Ports the router's listeners take inside its namespace. ExplicitProxyPort is
// the gateway port of HTTP(S)_PROXY; the redirect brings it to the proxy too.
const (
	ProxyPort         = 15001
	DNSPort           = 15053
	ExplicitProxyPort = 3128
)

// Config configures a Router.
type Config struct {
	// Dir holds the router's pinned namespace.
	Dir string
	// Subnet is the sandboxes' address range (DefaultSubnet when zero).
	Subnet netip.Prefix
	Log    *slog.Logger
}

// Router is the daemon's side of every networked sandbox.
type Router struct {
	cfg     Config
	log     *slog.Logger
	pin     string
	gateway netip.Addr

	mu     sync.Mutex
	ns     *os.File        // nil until first needed
	nl     *netlink.Handle // in ns
	byID   map[sandbox.ID]netip.Addr
	byAddr map[netip.Addr]sandbox.ID
	next   netip.Addr // where the search for a free address starts
	// started is called once the namespace exists, to open the listeners in it.
	started func(ns *os.File) error
}

// New returns a router; its namespace is made (or re-adopted) on first use.
// started is called with the namespace when it is first opened, to open the
// proxy's and resolver's listeners in it.
func New(cfg Config, started func(ns *os.File) error) (*Router, error) {
	if !cfg.Subnet.IsValid() {
		cfg.Subnet = DefaultSubnet
	}
	if !cfg.Subnet.Addr().Is4() || cfg.Subnet.Bits() > 28 {
		return nil, fmt.Errorf("network subnet %s: want an IPv4 prefix of /28 or wider", cfg.Subnet)
	}
	cfg.Subnet = cfg.Subnet.Masked()
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	gw := cfg.Subnet.Addr().Next()
	return &Router{
		cfg: cfg, log: log.With(logkey.Component, "network"), pin: filepath.Join(cfg.Dir, "router.netns"),
		gateway: gw, next: gw.Next(), started: started,
		byID: map[sandbox.ID]netip.Addr{}, byAddr: map[netip.Addr]sandbox.ID{},
	}, nil
}

// Gateway is the router's address as the sandboxes see it: their resolver
// and explicit proxy.
func (r *Router) Gateway() netip.Addr { return r.gateway }

// Subnet is the sandboxes' address range.
func (r *Router) Subnet() netip.Prefix { return r.cfg.Subnet }

// Lookup names the sandbox with address a.
func (r *Router) Lookup(a netip.Addr) (sandbox.ID, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	id, ok := r.byAddr[a.Unmap()]
	return id, ok
}

// open makes or re-adopts the namespace. r.mu is held.
func (r *Router) open() error {
	if r.ns != nil {
		return nil
	}
	ns, err := openPinned(r.pin)
	if errors.Is(err, os.ErrNotExist) {
		if err := pinNetns(r.pin); err != nil {
			return err
		}
		ns, err = openPinned(r.pin)
	}
	if err != nil {
		return fmt.Errorf("opening the router namespace: %w", err)
	}
	err = inNetns(ns, func() error {
		for k, v := range map[string]string{
			"net/ipv4/ip_forward":                "0",
			"net/ipv4/conf/all/rp_filter":        "1",
			"net/ipv4/conf/default/rp_filter":    "1",
			"net/ipv6/conf/all/disable_ipv6":     "1",
			"net/ipv6/conf/default/disable_ipv6": "1",
		} {
			if err := sysctl(k, v); err != nil {
				return err
			}
		}
		lo, err := netlink.LinkByName("lo")
		if err != nil {
			return err
		}
		if err := netlink.LinkSetUp(lo); err != nil {
			return err
		}
		// The UDP relay's datagrams (marked by TPROXY) are delivered
		// locally, whatever their destination.
		rule := netlink.NewRule()
		rule.Mark, rule.Table, rule.Family = udpMark, udpTable, unix.AF_INET
		if err := netlink.RuleAdd(rule); err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("the UDP relay's routing rule: %w", err)
		}
		local := &netlink.Route{LinkIndex: lo.Attrs().Index, Dst: &net.IPNet{IP: net.IPv4zero, Mask: net.CIDRMask(0, 32)},
			Table: udpTable, Type: unix.RTN_LOCAL, Scope: netlink.SCOPE_HOST}
		if err := netlink.RouteReplace(local); err != nil {
			return fmt.Errorf("the UDP relay's local route: %w", err)
		}
		return nil
	})
	if err == nil {
		err = applyRules(ns, ProxyPort, DNSPort, UDPPort)
	}
	var nl *netlink.Handle
	if err == nil {
		nl, err = netlink.NewHandleAt(netns.NsHandle(ns.Fd()))
	}
	if err == nil && r.started != nil {
		err = r.started(ns)
	}
	if err != nil {
		ns.Close()
		return fmt.Errorf("setting up the router namespace: %w", err)
	}
	r.ns, r.nl = ns, nl
	return nil
}

// vethName is the router-side name of id's veth.
func vethName(id sandbox.ID) string {
	n := vethPrefix + string(id)
	return n[:min(len(n), unix.IFNAMSIZ-1)]
}

// Attach connects the sandbox whose network namespace is sandboxNS: a veth
// pair, eth0 inside with the next free address, routes both ways. It returns
// the sandbox's address.
func (r *Router) Attach(ctx context.Context, id sandbox.ID, sandboxNS *os.File) (netip.Addr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if a, ok := r.byID[id]; ok {
		return a, nil
	}
	if err := r.open(); err != nil {
		return netip.Addr{}, err
	}
	// Attached by an earlier run of the daemon: adopt it.
	if l, err := r.nl.LinkByName(vethName(id)); err == nil {
		if a, ok := r.routedAddr(l); ok {
			r.byID[id], r.byAddr[a] = a, id
			return a, nil
		}
		r.nl.LinkDel(l) // half made: start again
	}
	addr, err := r.alloc()
	if err != nil {
		return netip.Addr{}, err
	}
	if err := r.plumb(id, addr, sandboxNS); err != nil {
		if l, lerr := r.nl.LinkByName(vethName(id)); lerr == nil {
			r.nl.LinkDel(l) // takes the peer with it
		}
		return netip.Addr{}, fmt.Errorf("connecting sandbox %s to the network: %w", id, err)
	}
	r.byID[id], r.byAddr[addr] = addr, id
	r.log.DebugContext(ctx, "attached", logkey.SandboxID, id, "addr", addr)
	return addr, nil
}

// alloc finds a free address, starting after the last one handed out so an
// address is not reused at once. r.mu is held.
func (r *Router) alloc() (netip.Addr, error) {
	a := r.next
	for range 1 << (32 - r.cfg.Subnet.Bits()) {
		if !r.cfg.Subnet.Contains(a) || a == r.lastAddr() {
			a = r.gateway.Next()
		}
		if _, taken := r.byAddr[a]; !taken && a != r.gateway {
			r.next = a.Next()
			return a, nil
		}
		a = a.Next()
	}
	return netip.Addr{}, fmt.Errorf("%w: no free address in %s", sandbox.ErrLimit, r.cfg.Subnet)
}

// lastAddr is the subnet's broadcast address, never handed out.
func (r *Router) lastAddr() netip.Addr {
	b := r.cfg.Subnet.Addr().As4()
	host := uint32(1)<<(32-r.cfg.Subnet.Bits()) - 1
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3]) | host
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

func (r *Router) plumb(id sandbox.ID, addr netip.Addr, sandboxNS *os.File) error {
	name := vethName(id)
	la := netlink.NewLinkAttrs()
	la.Name = name
	// IPv6 off inside before eth0 exists: it never gets a link-local address.
	if err := inNetns(sandboxNS, func() error {
		if err := sysctl("net/ipv6/conf/all/disable_ipv6", "1"); err != nil {
			return err
		}
		return sysctl("net/ipv6/conf/default/disable_ipv6", "1")
	}); err != nil {
		return err
	}
	veth := &netlink.Veth{LinkAttrs: la, PeerName: "eth0", PeerNamespace: netlink.NsFd(sandboxNS.Fd())}
	if err := r.nl.LinkAdd(veth); err != nil {
		return fmt.Errorf("adding veth %s: %w", name, err)
	}
	host, err := r.nl.LinkByName(name)
	if err != nil {
		return err
	}
	gw := &net.IPNet{IP: r.gateway.AsSlice(), Mask: net.CIDRMask(32, 32)}
	if err := r.nl.AddrAdd(host, &netlink.Addr{IPNet: gw}); err != nil {
		return fmt.Errorf("addressing %s: %w", name, err)
	}
	if err := r.nl.LinkSetUp(host); err != nil {
		return err
	}
	self := &net.IPNet{IP: addr.AsSlice(), Mask: net.CIDRMask(32, 32)}
	if err := r.nl.RouteAdd(&netlink.Route{LinkIndex: host.Attrs().Index, Dst: self, Scope: netlink.SCOPE_LINK, Src: r.gateway.AsSlice()}); err != nil {
		return fmt.Errorf("routing %s: %w", addr, err)
	}
	in, err := netlink.NewHandleAt(netns.NsHandle(sandboxNS.Fd()))
	if err != nil {
		return err
	}
	defer in.Close()
	eth, err := in.LinkByName("eth0")
	if err != nil {
		return err
	}
	if err := in.AddrAdd(eth, &netlink.Addr{IPNet: self}); err != nil {
		return fmt.Errorf("addressing eth0: %w", err)
	}
	if err := in.LinkSetUp(eth); err != nil {
		return err
	}
	if lo, err := in.LinkByName("lo"); err == nil && lo.Attrs().Flags&net.FlagUp == 0 {
		in.LinkSetUp(lo)
	}
	return in.RouteAdd(&netlink.Route{LinkIndex: eth.Attrs().Index, Gw: r.gateway.AsSlice(), Flags: int(netlink.FLAG_ONLINK)})
}

// Detach removes id's veth (and eth0 with it), its routes and the
// connection-tracking entries of its address, and frees the address. A
// sandbox that was not attached is not an error.
func (r *Router) Detach(ctx context.Context, id sandbox.ID) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ns == nil {
		// Not opened since the start: a sandbox of an earlier run may still
		// have its veth, if the namespace exists.
		if _, err := os.Stat(r.pin); err != nil {
			return nil
		}
		if err := r.open(); err != nil {
			return err
		}
	}
	var errs []error
	l, err := r.nl.LinkByName(vethName(id))
	if err == nil {
		// ENODEV: gone meanwhile, with the sandbox's namespace (a veth
		// pair goes when either end's namespace does).
		if err := r.nl.LinkDel(l); err != nil && !errors.Is(err, unix.ENODEV) {
			errs = append(errs, fmt.Errorf("removing veth %s: %w", vethName(id), err))
		}
	} else if !errors.As(err, new(netlink.LinkNotFoundError)) {
		errs = append(errs, err)
	}
	if a, ok := r.byID[id]; ok {
		f := &netlink.ConntrackFilter{}
		f.AddIP(netlink.ConntrackOrigSrcIP, a.AsSlice())
		if _, err := r.nl.ConntrackDeleteFilters(netlink.ConntrackTable, unix.AF_INET, f); err != nil {
			errs = append(errs, fmt.Errorf("flushing the connections of %s: %w", a, err))
		}
		delete(r.byAddr, a)
		delete(r.byID, id)
	}
	if len(errs) == 0 {
		r.log.DebugContext(ctx, "detached", logkey.SandboxID, id)
	}
	return errors.Join(errs...)
}

// routedAddr is the sandbox address routed through veth l.
func (r *Router) routedAddr(l netlink.Link) (netip.Addr, bool) {
	routes, err := r.nl.RouteList(l, netlink.FAMILY_V4)
	if err != nil {
		return netip.Addr{}, false
	}
	for _, rt := range routes {
		if rt.Dst == nil {
			continue
		}
		if a, ok := netip.AddrFromSlice(rt.Dst.IP); ok && r.cfg.Subnet.Contains(a.Unmap()) {
			return a.Unmap(), true
		}
	}
	return netip.Addr{}, false
}

// Close closes the router's handles; when no sandbox is attached and remove
// is set, the namespace goes too. Sandboxes still attached keep their
// namespace for the next daemon to adopt.
func (r *Router) Close(remove bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.nl != nil {
		r.nl.Close()
		r.nl = nil
	}
	if r.ns != nil {
		r.ns.Close()
		r.ns = nil
	}
	if remove && len(r.byID) == 0 {
		if _, err := os.Stat(r.pin); err == nil {
			return unpin(r.pin)
		}
	}
	return nil
}
