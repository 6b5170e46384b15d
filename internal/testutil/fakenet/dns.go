// This file implements the authoritative DNS server for .test, on
// Nameserver and Nameserver6, UDP and TCP. Every question is logged.
//
// The zone (TTL 30 unless said):
//
//	allowed.test, *.allowed.test  A 198.18.1.10  AAAA 2001:db8:1::10
//	txt.allowed.test              the same, and TXT TXTRecord
//	blocked.test                  A 198.18.1.20  AAAA 2001:db8:1::20
//	evil.test, *.evil.test        A 198.18.1.30  AAAA 2001:db8:1::30
//	meta.test                     A 169.254.169.254  AAAA fd00:ec2::254
//	metadata.google.internal      A 169.254.169.254
//	loop.test                     A 127.0.0.1  AAAA ::1
//	lan.test                      A 10.9.9.9
//	host.test                     A 198.18.0.1  AAAA 2001:db8::1
//	rebind.test                   TTL 0; A 198.18.1.10, then 127.0.0.1, and so on per query
//	                              (AAAA 2001:db8:1::10, then ::1, counted apart)
//	v6only.test                   AAAA 2001:db8:1::10 (no A)
//	test                          SOA, NS ns.test; ns.test A 198.18.0.53 AAAA 2001:db8::53
//
// Any other name is NXDOMAIN; a name without the asked type gets an empty
// answer (NODATA). Negative answers carry test's SOA.

package fakenet

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

const dnsTTL = 30

type dnsServer struct {
	n  *Internet
	mu sync.Mutex
	// rebind counts rebind.test's questions per type; guarded by mu.
	rebind map[dnsmessage.Type]int
}

func (s *dnsServer) resetRebind() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rebind = nil
}

// records holds a name's data.
type records struct {
	v4, v6 []netip.Addr
	txt    []string
	ttl    uint32
	apex   bool // test itself: SOA and NS
}

func addrs(a ...netip.Addr) []netip.Addr { return a }

// lookup returns name's records; ok is false when the name does not exist.
func (s *dnsServer) lookup(name string, t dnsmessage.Type) (r records, ok bool) {
	r.ttl = dnsTTL
	switch {
	case name == "test":
		r.apex = true
	case name == "ns.test":
		r.v4, r.v6 = addrs(DNSAddr), addrs(DNSAddr6)
	case underName(name, AllowedName):
		r.v4, r.v6 = addrs(AllowedAddr), addrs(AllowedAddr6)
		if name == TXTName {
			r.txt = []string{TXTRecord}
		}
	case name == BlockedName:
		r.v4, r.v6 = addrs(BlockedAddr), addrs(BlockedAddr6)
	case underName(name, EvilName):
		r.v4, r.v6 = addrs(EvilAddr), addrs(EvilAddr6)
	case name == MetaName:
		r.v4, r.v6 = addrs(MetadataAddr), addrs(MetadataAddr6)
	case name == GCPMetadataName:
		r.v4 = addrs(MetadataAddr)
	case name == LoopName:
		r.v4, r.v6 = addrs(netip.MustParseAddr("127.0.0.1")), addrs(netip.IPv6Loopback())
	case name == LANName:
		r.v4 = addrs(LANAddr)
	case name == HostName:
		r.v4, r.v6 = addrs(HostAddr), addrs(HostAddr6)
	case name == RebindName:
		r.ttl = 0
		if t != dnsmessage.TypeA && t != dnsmessage.TypeAAAA {
			break
		}
		s.mu.Lock()
		if s.rebind == nil {
			s.rebind = make(map[dnsmessage.Type]int)
		}
		i := s.rebind[t]
		s.rebind[t]++
		s.mu.Unlock()
		if i%2 == 0 {
			r.v4, r.v6 = addrs(AllowedAddr), addrs(AllowedAddr6)
		} else {
			r.v4, r.v6 = addrs(netip.MustParseAddr("127.0.0.1")), addrs(netip.IPv6Loopback())
		}
	case name == V6OnlyName:
		r.v6 = addrs(AllowedAddr6)
	default:
		return r, false
	}
	return r, true
}

// qname is a question's name as the log keeps it: as sent (resolvers may mix
// its case), without the final dot.
func qname(q dnsmessage.Question) string {
	name := strings.TrimSuffix(q.Name.String(), ".")
	if name == "" {
		return "."
	}
	return name
}

func typeName(t dnsmessage.Type) string { return strings.TrimPrefix(t.String(), "Type") }

// answer parses a query and builds the response (nil when the query cannot be
// parsed enough to answer), logging each question.
func (s *dnsServer) answer(query []byte, proto string, local, remote netip.AddrPort) []byte {
	var p dnsmessage.Parser
	h, err := p.Start(query)
	if err != nil {
		s.n.log.add(Event{Kind: KindDNS, Op: "query", Proto: proto, Local: local, Remote: remote, Detail: "malformed: " + err.Error()})
		return nil
	}
	qs, err := p.AllQuestions()
	if err != nil || h.Response {
		s.n.log.add(Event{Kind: KindDNS, Op: "query", Proto: proto, Local: local, Remote: remote, Detail: "malformed"})
		return reply(h, nil, dnsmessage.RCodeFormatError, false, nil)
	}
	p.SkipAllAnswers()
	p.SkipAllAuthorities()
	edns := false
	for {
		rh, err := p.AdditionalHeader()
		if err != nil {
			break
		}
		if rh.Type == dnsmessage.TypeOPT {
			edns = true
		}
		p.SkipAdditional()
	}
	if len(qs) == 0 {
		s.n.log.add(Event{Kind: KindDNS, Op: "query", Proto: proto, Local: local, Remote: remote, Detail: "no question"})
		return reply(h, nil, dnsmessage.RCodeFormatError, edns, nil)
	}
	q := qs[0] // nobody sends more than one; answer the first
	name := qname(q)
	ev := Event{Kind: KindDNS, Op: "query", Proto: proto, Local: local, Remote: remote, Name: name, QType: typeName(q.Type)}
	if h.OpCode != 0 {
		ev.Detail = "NOTIMP"
		s.n.log.add(ev)
		return reply(h, &q, dnsmessage.RCodeNotImplemented, edns, nil)
	}
	r, ok := s.lookup(strings.ToLower(name), q.Type)
	if !ok {
		ev.Detail = "NXDOMAIN"
		s.n.log.add(ev)
		return reply(h, &q, dnsmessage.RCodeNameError, edns, nil)
	}
	var rrs []dnsmessage.Resource
	var shown []string
	hdr := dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: r.ttl}
	want := func(t dnsmessage.Type) bool { return q.Type == t || q.Type == dnsmessage.TypeALL }
	if want(dnsmessage.TypeA) {
		for _, a := range r.v4 {
			rrs = append(rrs, dnsmessage.Resource{Header: hdr, Body: &dnsmessage.AResource{A: a.As4()}})
			shown = append(shown, a.String())
		}
	}
	if want(dnsmessage.TypeAAAA) {
		for _, a := range r.v6 {
			rrs = append(rrs, dnsmessage.Resource{Header: hdr, Body: &dnsmessage.AAAAResource{AAAA: a.As16()}})
			shown = append(shown, a.String())
		}
	}
	if want(dnsmessage.TypeTXT) && len(r.txt) > 0 {
		rrs = append(rrs, dnsmessage.Resource{Header: hdr, Body: &dnsmessage.TXTResource{TXT: r.txt}})
		shown = append(shown, "TXT "+strings.Join(r.txt, " "))
	}
	if r.apex && want(dnsmessage.TypeSOA) {
		rrs = append(rrs, soa())
		shown = append(shown, "SOA")
	}
	if r.apex && want(dnsmessage.TypeNS) {
		rrs = append(rrs, dnsmessage.Resource{Header: hdr, Body: &dnsmessage.NSResource{NS: dnsmessage.MustNewName("ns.test.")}})
		shown = append(shown, "NS ns.test")
	}
	ev.Detail = strings.Join(shown, " ")
	if len(rrs) == 0 {
		ev.Detail = "NODATA"
	}
	s.n.log.add(ev)
	return reply(h, &q, dnsmessage.RCodeSuccess, edns, rrs)
}

func soa() dnsmessage.Resource {
	return dnsmessage.Resource{
		Header: dnsmessage.ResourceHeader{Name: dnsmessage.MustNewName("test."), Class: dnsmessage.ClassINET, TTL: dnsTTL},
		Body: &dnsmessage.SOAResource{
			NS: dnsmessage.MustNewName("ns.test."), MBox: dnsmessage.MustNewName("hostmaster.test."),
			Serial: 1, Refresh: 3600, Retry: 600, Expire: 86400, MinTTL: dnsTTL,
		},
	}
}

// reply builds a response to h; answers empty with rcode success is NODATA,
// and negative answers carry test's SOA.
func reply(h dnsmessage.Header, q *dnsmessage.Question, rcode dnsmessage.RCode, edns bool, answers []dnsmessage.Resource) []byte {
	b := dnsmessage.NewBuilder(make([]byte, 0, 512), dnsmessage.Header{
		ID: h.ID, Response: true, OpCode: h.OpCode, Authoritative: true,
		RecursionDesired: h.RecursionDesired, RCode: rcode,
	})
	b.EnableCompression()
	b.StartQuestions()
	if q != nil {
		b.Question(*q)
	}
	b.StartAnswers()
	for _, rr := range answers {
		switch body := rr.Body.(type) {
		case *dnsmessage.AResource:
			b.AResource(rr.Header, *body)
		case *dnsmessage.AAAAResource:
			b.AAAAResource(rr.Header, *body)
		case *dnsmessage.TXTResource:
			b.TXTResource(rr.Header, *body)
		case *dnsmessage.SOAResource:
			b.SOAResource(rr.Header, *body)
		case *dnsmessage.NSResource:
			b.NSResource(rr.Header, *body)
		}
	}
	b.StartAuthorities()
	if q != nil && len(answers) == 0 && (rcode == dnsmessage.RCodeSuccess || rcode == dnsmessage.RCodeNameError) {
		s := soa()
		b.SOAResource(s.Header, *s.Body.(*dnsmessage.SOAResource))
	}
	b.StartAdditionals()
	if edns {
		var rh dnsmessage.ResourceHeader
		rh.SetEDNS0(1232, dnsmessage.RCodeSuccess, false)
		b.OPTResource(rh, dnsmessage.OPTResource{})
	}
	msg, err := b.Finish()
	if err != nil {
		return nil
	}
	return msg
}

// serveUDP answers queries on pc.
func (s *dnsServer) serveUDP(pc *net.UDPConn) {
	buf := make([]byte, 65536)
	local := addrPort(pc.LocalAddr())
	for {
		m, from, err := pc.ReadFromUDPAddrPort(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		if resp := s.answer(buf[:m], "udp", local, from); resp != nil {
			pc.WriteToUDPAddrPort(resp, from)
		}
	}
}

// serveTCP answers length-prefixed queries on each connection l accepts.
func (s *dnsServer) serveTCP(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		s.n.wg.Go(func() {
			defer c.Close()
			local, remote := addrPort(c.LocalAddr()), addrPort(c.RemoteAddr())
			var size [2]byte
			for {
				c.SetReadDeadline(time.Now().Add(30 * time.Second))
				if _, err := io.ReadFull(c, size[:]); err != nil {
					return
				}
				msg := make([]byte, binary.BigEndian.Uint16(size[:]))
				if _, err := io.ReadFull(c, msg); err != nil {
					return
				}
				resp := s.answer(msg, "tcp", local, remote)
				if resp == nil {
					return
				}
				out := binary.BigEndian.AppendUint16(nil, uint16(len(resp)))
				if _, err := c.Write(append(out, resp...)); err != nil {
					return
				}
			}
		})
	}
}

// logCaughtDNS logs the questions of a DNS query the catch-all took (sent to an
// address other than the DNS server's). It is never answered.
func (n *Internet) logCaughtDNS(msg []byte, proto string, local, remote netip.AddrPort) {
	var p dnsmessage.Parser
	if _, err := p.Start(msg); err != nil {
		return
	}
	qs, err := p.AllQuestions()
	if err != nil {
		return
	}
	for _, q := range qs {
		n.log.add(Event{Kind: KindDNS, Op: "query", CatchAll: true, Proto: proto, Local: local, Remote: remote,
			Name: qname(q), QType: typeName(q.Type), Detail: "not answered"})
	}
}
