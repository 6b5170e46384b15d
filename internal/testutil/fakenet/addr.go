// This file names the fake internet's hosts and addresses. They exist only
// inside the namespaces New makes.

package fakenet

import "net/netip"

// Names the fake DNS server answers (see DNS in dns.go for the full zone).
const (
	AllowedName = "allowed.test"     // 198.18.1.10, 2001:db8:1::10; also *.allowed.test
	BlockedName = "blocked.test"     // 198.18.1.20, 2001:db8:1::20
	EvilName    = "evil.test"        // 198.18.1.30, 2001:db8:1::30; also *.evil.test
	TXTName     = "txt.allowed.test" // TXT TXTRecord, and allowed.test's addresses
	MetaName    = "meta.test"        // 169.254.169.254, fd00:ec2::254
	LoopName    = "loop.test"        // 127.0.0.1, ::1
	LANName     = "lan.test"         // 10.9.9.9
	HostName    = "host.test"        // 198.18.0.1, 2001:db8::1: the host namespace itself
	RebindName  = "rebind.test"      // alternately allowed.test's address and loopback, TTL 0
	V6OnlyName  = "v6only.test"      // AAAA 2001:db8:1::10 only
	// GCPMetadataName is the one name outside .test that the DNS server
	// answers (169.254.169.254), so a test of NW-08 reaches the address after
	// resolution as it would on a cloud VM.
	GCPMetadataName = "metadata.google.internal"

	// TXTRecord is the text of txt.allowed.test's TXT record.
	TXTRecord = "fakenet txt record"
)

// Nameserver is the fake DNS server's address, for the daemon's upstream
// resolver; Nameserver6 is the same server over IPv6.
const (
	Nameserver  = "198.18.0.53:53"
	Nameserver6 = "[2001:db8::53]:53"
)

// Interface names: HostLink is host's end of the veth, InetLink inet's.
const (
	HostLink = "fakenet0"
	InetLink = "fakenet1"
)

// Addresses. The veth between host and inet is in 198.18.0.0/24 and
// 2001:db8::/64; the services sit on inet's loopback, routed from host through
// the veth like everything else.
var (
	HostAddr  = netip.MustParseAddr("198.18.0.1") // host's uplink: the daemon's own address
	HostAddr6 = netip.MustParseAddr("2001:db8::1")
	InetAddr  = netip.MustParseAddr("198.18.0.2") // inet's end: host's gateway
	InetAddr6 = netip.MustParseAddr("2001:db8::2")

	DNSAddr  = netip.MustParseAddr("198.18.0.53")
	DNSAddr6 = netip.MustParseAddr("2001:db8::53")

	AllowedAddr  = netip.MustParseAddr("198.18.1.10")
	AllowedAddr6 = netip.MustParseAddr("2001:db8:1::10")
	BlockedAddr  = netip.MustParseAddr("198.18.1.20")
	BlockedAddr6 = netip.MustParseAddr("2001:db8:1::20")
	EvilAddr     = netip.MustParseAddr("198.18.1.30")
	EvilAddr6    = netip.MustParseAddr("2001:db8:1::30")

	MetadataAddr        = netip.MustParseAddr("169.254.169.254") // AWS, GCP, Azure, …
	MetadataAddr6       = netip.MustParseAddr("fd00:ec2::254")   // AWS over IPv6
	MetadataAlibabaAddr = netip.MustParseAddr("100.100.100.200")
	MetadataECSAddr     = netip.MustParseAddr("169.254.170.2") // AWS ECS task credentials

	LANAddr = netip.MustParseAddr("10.9.9.9") // lan.test; nothing serves it, the catch-all logs it
)

// Prefixes routed from host to inet besides the default routes.
var (
	FakePrefix  = netip.MustParsePrefix("198.18.0.0/15")
	FakePrefix6 = netip.MustParsePrefix("2001:db8::/32")
)

// webAddrs serve HTTP on :80 and HTTPS on :443.
func webAddrs() []netip.Addr {
	return []netip.Addr{AllowedAddr, AllowedAddr6, BlockedAddr, BlockedAddr6, EvilAddr, EvilAddr6}
}

// metadataAddrs serve the fake metadata service on :80.
func metadataAddrs() []netip.Addr {
	return []netip.Addr{MetadataAddr, MetadataAddr6, MetadataAlibabaAddr, MetadataECSAddr}
}

// Ports of the raw listeners on allowed.test's addresses.
var (
	RawTCPPorts = []uint16{22, 25, 9000}
	RawUDPPorts = []uint16{443, 9999} // 9999 echoes each datagram back; 443 (QUIC) stays silent
)
