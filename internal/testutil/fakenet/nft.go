// This file implements the catch-all's packet steering in inet: TCP and UDP
// for which no ordinary socket exists go, by TPROXY, to the catch-all's
// transparent sockets; echo requests are delivered locally whatever their
// destination, for the ICMP listener.
//
// The rules, in nft's syntax (table inet fakenet, chain prerouting, hook
// prerouting, priority mangle):
//
//	iifname != "fakenet1" accept
//	meta l4proto tcp socket transparent 0 accept   # a server listens, or a connection to one
//	meta l4proto udp socket transparent 0 accept
//	meta nfproto ipv4 meta l4proto tcp tproxy ip to :<tcp4> meta mark set <mark> accept
//	meta nfproto ipv6 meta l4proto tcp tproxy ip6 to :<tcp6> meta mark set <mark> accept
//	meta nfproto ipv4 meta l4proto udp tproxy ip to :<udp4> meta mark set <mark> accept
//	meta nfproto ipv6 meta l4proto udp tproxy ip6 to :<udp6> meta mark set <mark> accept
//	meta nfproto ipv4 meta l4proto icmp icmp type echo-request meta mark set <mark>
//	meta nfproto ipv6 meta l4proto icmpv6 icmpv6 type echo-request meta mark set <mark>
//
// "socket transparent 0" matches when the kernel finds an ordinary socket for
// the packet (the servers bind their own addresses, never a wildcard), so only
// what nobody serves goes on to the catch-all. Link.go's rule routes marked
// packets to a local route.

package fakenet

import (
	"fmt"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// catchPorts are the ports of the catch-all's transparent sockets.
type catchPorts struct{ tcp4, tcp6, udp4, udp6 uint16 }

// installCatchAll programs the rules above. It must run inside inet: the
// netlink socket is created on the calling thread at Flush.
func installCatchAll(p catchPorts) error {
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("opening nftables: %w", err)
	}
	t := c.AddTable(&nftables.Table{Family: nftables.TableFamilyINet, Name: "fakenet"})
	ch := c.AddChain(&nftables.Chain{
		Name: "prerouting", Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityMangle,
	})
	add := func(exprs ...expr.Any) { c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: exprs}) }
	accept := &expr.Verdict{Kind: expr.VerdictAccept}

	ifname := make([]byte, unix.IFNAMSIZ)
	copy(ifname, InetLink)
	add(&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: ifname},
		accept)
	for _, proto := range []byte{unix.IPPROTO_TCP, unix.IPPROTO_UDP} {
		add(append(l4proto(proto),
			&expr.Socket{Key: expr.SocketKeyTransparent, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{0}},
			accept)...)
	}
	mark := []expr.Any{
		&expr.Immediate{Register: 1, Data: binaryutil.NativeEndian.PutUint32(catchMark)},
		&expr.Meta{Key: expr.MetaKeyMARK, SourceRegister: true, Register: 1},
	}
	for _, r := range []struct {
		family byte
		proto  byte
		port   uint16
	}{
		{unix.NFPROTO_IPV4, unix.IPPROTO_TCP, p.tcp4},
		{unix.NFPROTO_IPV6, unix.IPPROTO_TCP, p.tcp6},
		{unix.NFPROTO_IPV4, unix.IPPROTO_UDP, p.udp4},
		{unix.NFPROTO_IPV6, unix.IPPROTO_UDP, p.udp6},
	} {
		exprs := append(nfproto(r.family), l4proto(r.proto)...)
		exprs = append(exprs,
			&expr.Immediate{Register: 1, Data: binaryutil.BigEndian.PutUint16(r.port)},
			&expr.TProxy{Family: r.family, TableFamily: byte(nftables.TableFamilyINet), RegPort: 1})
		exprs = append(exprs, mark...)
		add(append(exprs, accept)...)
	}
	for _, r := range []struct {
		family, proto, echo byte
	}{
		{unix.NFPROTO_IPV4, unix.IPPROTO_ICMP, 8},
		{unix.NFPROTO_IPV6, unix.IPPROTO_ICMPV6, 128},
	} {
		exprs := append(nfproto(r.family), l4proto(r.proto)...)
		exprs = append(exprs,
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 0, Len: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{r.echo}})
		add(append(exprs, mark...)...)
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("installing the catch-all's nftables rules: %w", err)
	}
	return nil
}

func nfproto(f byte) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{f}},
	}
}

func l4proto(p byte) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{p}},
	}
}
