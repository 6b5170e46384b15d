package network

import (
	"fmt"
	"os"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// tableName is the router namespace's one nftables table.
const tableName = "sbx"

// vethPrefix starts the router-side name of every sandbox's veth.
const vethPrefix = "sb"

// applyRules (re)writes the router namespace's table: every TCP connection a
// sandbox opens is redirected to the egress proxy, its DNS (UDP and TCP 53)
// to the resolver; the router answers nothing else, and forwards nothing (its
// ip_forward is off as well). Which sandbox a flow belongs to is its source
// address, which the strict reverse-path filter binds to the sandbox's veth.
func applyRules(ns *os.File, proxyPort, dnsPort, udpPort uint16) error {
	c, err := nftables.New(nftables.WithNetNSFd(int(ns.Fd())))
	if err != nil {
		return err
	}
	t := &nftables.Table{Name: tableName, Family: nftables.TableFamilyINet}
	c.AddTable(t) // add then delete: delete of a missing table fails the batch
	c.DelTable(t)
	t = c.AddTable(t)
	accept, drop := nftables.ChainPolicyAccept, nftables.ChainPolicyDrop
	nat := c.AddChain(&nftables.Chain{Name: "redirect", Table: t, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityNATDest, Policy: &accept})
	input := c.AddChain(&nftables.Chain{Name: "input", Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookInput, Priority: nftables.ChainPriorityFilter, Policy: &accept})
	c.AddChain(&nftables.Chain{Name: "forward", Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityFilter, Policy: &drop})
	guard := c.AddChain(&nftables.Chain{Name: "guard", Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityRaw, Policy: &accept})
	tproxy := c.AddChain(&nftables.Chain{Name: "udp", Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityMangle, Policy: &accept})

	fromSandbox := []expr.Any{
		&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte(vethPrefix)}, // a prefix: cmp compares len(Data) bytes
	}
	rule := func(ch *nftables.Chain, e ...expr.Any) {
		c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: append(append([]expr.Any{}, fromSandbox...), e...)})
	}
	l4 := func(proto byte) []expr.Any {
		return []expr.Any{
			&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{proto}},
		}
	}
	dport := func(port uint16) []expr.Any {
		return []expr.Any{
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.BigEndian.PutUint16(port)},
		}
	}
	redirect := func(port uint16) []expr.Any {
		return []expr.Any{
			&expr.Immediate{Register: 1, Data: binaryutil.BigEndian.PutUint16(port)},
			&expr.Redir{RegisterProtoMin: 1},
		}
	}
	cat := func(parts ...[]expr.Any) []expr.Any {
		var out []expr.Any
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	verdict := func(k expr.VerdictKind) []expr.Any { return []expr.Any{&expr.Verdict{Kind: k}} }

	// guard: a sandbox speaks IPv4 only, from its own subnet's addresses.
	rule(guard, cat([]expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: []byte{unix.NFPROTO_IPV4}},
	}, verdict(expr.VerdictDrop))...)

	// udp: every other UDP datagram to the relay's transparent socket,
	// marked so that the router's policy routing delivers it locally.
	mark := []expr.Any{
		&expr.Immediate{Register: 1, Data: binaryutil.NativeEndian.PutUint32(udpMark)},
		&expr.Meta{Key: expr.MetaKeyMARK, SourceRegister: true, Register: 1},
	}
	rule(tproxy, cat(l4(unix.IPPROTO_UDP),
		[]expr.Any{
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
			&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: binaryutil.BigEndian.PutUint16(53)},
			&expr.Immediate{Register: 1, Data: binaryutil.BigEndian.PutUint16(udpPort)},
			&expr.TProxy{Family: unix.NFPROTO_IPV4, TableFamily: byte(nftables.TableFamilyINet), RegPort: 1},
		}, mark, verdict(expr.VerdictAccept))...)

	// redirect: DNS to the resolver, every other TCP flow to the proxy.
	rule(nat, cat(l4(unix.IPPROTO_UDP), dport(53), redirect(dnsPort))...)
	rule(nat, cat(l4(unix.IPPROTO_TCP), dport(53), redirect(dnsPort))...)
	rule(nat, cat(l4(unix.IPPROTO_TCP), redirect(proxyPort))...)

	// input: the proxy and the resolver, nothing else of the router.
	rule(input, cat(l4(unix.IPPROTO_TCP), dport(proxyPort), verdict(expr.VerdictAccept))...)
	rule(input, cat(l4(unix.IPPROTO_TCP), dport(dnsPort), verdict(expr.VerdictAccept))...)
	rule(input, cat(l4(unix.IPPROTO_UDP), dport(dnsPort), verdict(expr.VerdictAccept))...)
	rule(input, cat([]expr.Any{
		&expr.Meta{Key: expr.MetaKeyMARK, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(udpMark)},
	}, verdict(expr.VerdictAccept))...)
	rule(input, verdict(expr.VerdictDrop)...)
	if err := c.Flush(); err != nil {
		return fmt.Errorf("writing the router's nftables rules: %w", err)
	}
	return nil
}
