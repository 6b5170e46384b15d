package fakenet

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// ask sends one question from the host namespace to server over proto and
// returns the response.
func ask(t *testing.T, n *Internet, proto, server, name string, qtype dnsmessage.Type) dnsmessage.Message {
	t.Helper()
	q := dnsmessage.Message{
		Header:    dnsmessage.Header{ID: uint16(time.Now().UnixNano()), RecursionDesired: true},
		Questions: []dnsmessage.Question{{Name: dnsmessage.MustNewName(name + "."), Type: qtype, Class: dnsmessage.ClassINET}},
	}
	msg, err := q.Pack()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := n.Dial(ctx, n.HostNS, proto, server)
	if err != nil {
		t.Fatalf("dialing %s %s: %v", proto, server, err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	var resp []byte
	if proto == "tcp" {
		if _, err := c.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(msg))), msg...)); err != nil {
			t.Fatal(err)
		}
		var size [2]byte
		if _, err := io.ReadFull(c, size[:]); err != nil {
			t.Fatalf("reading a DNS answer over TCP: %v", err)
		}
		resp = make([]byte, binary.BigEndian.Uint16(size[:]))
		if _, err := io.ReadFull(c, resp); err != nil {
			t.Fatalf("reading a DNS answer over TCP: %v", err)
		}
	} else {
		if _, err := c.Write(msg); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 65536)
		m, err := c.Read(buf)
		if err != nil {
			t.Fatalf("reading a DNS answer over UDP: %v", err)
		}
		resp = buf[:m]
	}
	var m dnsmessage.Message
	if err := m.Unpack(resp); err != nil {
		t.Fatalf("unpacking a DNS answer: %v", err)
	}
	if m.ID != q.ID || !m.Response || !m.Authoritative {
		t.Fatalf("answer header %+v does not answer %+v authoritatively", m.Header, q.Header)
	}
	return m
}

// answers renders m's answers: addresses, and "txt:<text>" for TXT records.
func answers(m dnsmessage.Message) []string {
	var out []string
	for _, rr := range m.Answers {
		switch b := rr.Body.(type) {
		case *dnsmessage.AResource:
			out = append(out, netip.AddrFrom4(b.A).String())
		case *dnsmessage.AAAAResource:
			out = append(out, netip.AddrFrom16(b.AAAA).String())
		case *dnsmessage.TXTResource:
			for _, s := range b.TXT {
				out = append(out, "txt:"+s)
			}
		default:
			out = append(out, rr.Header.Type.String())
		}
	}
	return out
}

// TestDNSAnswers asks each name of the zone from the host namespace, over UDP
// and TCP and over IPv4 and IPv6, and checks the answer and that the log saw
// the question.
func TestDNSAnswers(t *testing.T) {
	n := New(t)
	tests := []struct {
		name  string
		qtype dnsmessage.Type
		rcode dnsmessage.RCode
		want  []string
	}{
		{AllowedName, dnsmessage.TypeA, dnsmessage.RCodeSuccess, []string{"198.18.1.10"}},
		{AllowedName, dnsmessage.TypeAAAA, dnsmessage.RCodeSuccess, []string{"2001:db8:1::10"}},
		{"a.b.allowed.test", dnsmessage.TypeA, dnsmessage.RCodeSuccess, []string{"198.18.1.10"}},
		{TXTName, dnsmessage.TypeTXT, dnsmessage.RCodeSuccess, []string{"txt:" + TXTRecord}},
		{TXTName, dnsmessage.TypeA, dnsmessage.RCodeSuccess, []string{"198.18.1.10"}},
		{AllowedName, dnsmessage.TypeTXT, dnsmessage.RCodeSuccess, nil},
		{BlockedName, dnsmessage.TypeA, dnsmessage.RCodeSuccess, []string{"198.18.1.20"}},
		{BlockedName, dnsmessage.TypeAAAA, dnsmessage.RCodeSuccess, []string{"2001:db8:1::20"}},
		{"sub.blocked.test", dnsmessage.TypeA, dnsmessage.RCodeNameError, nil},
		{EvilName, dnsmessage.TypeA, dnsmessage.RCodeSuccess, []string{"198.18.1.30"}},
		{"c2VjcmV0.evil.test", dnsmessage.TypeA, dnsmessage.RCodeSuccess, []string{"198.18.1.30"}},
		{"c2VjcmV0.evil.test", dnsmessage.TypeTXT, dnsmessage.RCodeSuccess, nil},
		{MetaName, dnsmessage.TypeA, dnsmessage.RCodeSuccess, []string{"169.254.169.254"}},
		{MetaName, dnsmessage.TypeAAAA, dnsmessage.RCodeSuccess, []string{"fd00:ec2::254"}},
		{GCPMetadataName, dnsmessage.TypeA, dnsmessage.RCodeSuccess, []string{"169.254.169.254"}},
		{LoopName, dnsmessage.TypeA, dnsmessage.RCodeSuccess, []string{"127.0.0.1"}},
		{LoopName, dnsmessage.TypeAAAA, dnsmessage.RCodeSuccess, []string{"::1"}},
		{LANName, dnsmessage.TypeA, dnsmessage.RCodeSuccess, []string{"10.9.9.9"}},
		{HostName, dnsmessage.TypeA, dnsmessage.RCodeSuccess, []string{"198.18.0.1"}},
		{HostName, dnsmessage.TypeAAAA, dnsmessage.RCodeSuccess, []string{"2001:db8::1"}},
		{V6OnlyName, dnsmessage.TypeA, dnsmessage.RCodeSuccess, nil},
		{V6OnlyName, dnsmessage.TypeAAAA, dnsmessage.RCodeSuccess, []string{"2001:db8:1::10"}},
		{"nothing.test", dnsmessage.TypeA, dnsmessage.RCodeNameError, nil},
		{"example.com", dnsmessage.TypeA, dnsmessage.RCodeNameError, nil},
	}
	for _, tc := range tests {
		for _, via := range []struct{ proto, server string }{{"udp", Nameserver}, {"tcp", Nameserver}, {"udp", Nameserver6}} {
			t.Run(tc.name+"/"+tc.qtype.String()+"/"+via.proto+via.server, func(t *testing.T) {
				n.Reset()
				m := ask(t, n, via.proto, via.server, tc.name, tc.qtype)
				if m.RCode != tc.rcode {
					t.Errorf("rcode %v, want %v", m.RCode, tc.rcode)
				}
				if got := answers(m); !slices.Equal(got, tc.want) {
					t.Errorf("answers %q, want %q", got, tc.want)
				}
				if len(m.Answers) == 0 && (len(m.Authorities) != 1 || m.Authorities[0].Header.Type != dnsmessage.TypeSOA) {
					t.Errorf("a negative answer carries authorities %v, want test's SOA", m.Authorities)
				}
				server := netip.MustParseAddrPort(via.server)
				e := waitFor(t, n, "the query in the log", Is(KindDNS))
				if e.Name != tc.name || e.QType != typeName(tc.qtype) || e.Proto != via.proto || e.Local != server || e.CatchAll {
					t.Errorf("logged %v; want %s %s over %s at %s", e, tc.name, typeName(tc.qtype), via.proto, server)
				}
				if want := HostAddr; server.Addr().Is6() {
					if e.Remote.Addr() != HostAddr6 {
						t.Errorf("query logged from %s, want %s", e.Remote, HostAddr6)
					}
				} else if e.Remote.Addr() != want {
					t.Errorf("query logged from %s, want %s", e.Remote, want)
				}
			})
		}
	}
}

// TestDNSRebind checks rebind.test alternates between allowed.test's address
// and loopback with TTL 0, per type, and that Reset restarts it.
func TestDNSRebind(t *testing.T) {
	n := New(t)
	for round := range 2 {
		for i, want := range []string{"198.18.1.10", "127.0.0.1", "198.18.1.10", "127.0.0.1"} {
			m := ask(t, n, "udp", Nameserver, RebindName, dnsmessage.TypeA)
			if got := answers(m); !slices.Equal(got, []string{want}) {
				t.Fatalf("round %d, query %d: answers %q, want %s", round, i, got, want)
			}
			if ttl := m.Answers[0].Header.TTL; ttl != 0 {
				t.Errorf("TTL %d, want 0", ttl)
			}
			if i == 1 { // AAAA counts apart: it starts at the public address
				m := ask(t, n, "udp", Nameserver, RebindName, dnsmessage.TypeAAAA)
				if got := answers(m); !slices.Equal(got, []string{"2001:db8:1::10"}) {
					t.Fatalf("AAAA answers %q, want 2001:db8:1::10", got)
				}
			}
		}
		n.Reset()
	}
}

// TestDNSQueriesCountsEveryWay checks DNSQueries counts questions at the DNS
// server and those sent to any other address, which the catch-all logs and
// leaves unanswered (NW-06).
func TestDNSQueriesCountsEveryWay(t *testing.T) {
	n := New(t)
	if got := n.DNSQueries(EvilName); got != 0 {
		t.Fatalf("DNSQueries before any query = %d", got)
	}
	ask(t, n, "udp", Nameserver, "c2VjcmV0.evil.test", dnsmessage.TypeA)
	ask(t, n, "tcp", Nameserver6, EvilName, dnsmessage.TypeTXT)
	ask(t, n, "udp", Nameserver, AllowedName, dnsmessage.TypeA)

	// Straight to another resolver's address, over UDP and TCP: nobody
	// answers, the catch-all logs it.
	q := dnsmessage.Message{Questions: []dnsmessage.Question{{Name: dnsmessage.MustNewName("x.evil.test."), Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET}}}
	msg, _ := q.Pack()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, to := range []struct{ proto, addr string }{{"udp", "203.0.113.53:53"}, {"tcp", "[2001:db8:ffff::53]:53"}} {
		c, err := n.Dial(ctx, n.HostNS, to.proto, to.addr)
		if err != nil {
			t.Fatal(err)
		}
		out := msg
		if to.proto == "tcp" {
			out = append(binary.BigEndian.AppendUint16(nil, uint16(len(msg))), msg...)
		}
		if _, err := c.Write(out); err != nil {
			t.Fatal(err)
		}
		local := netip.MustParseAddrPort(to.addr)
		waitFor(t, n, "the caught query", func(e Event) bool { return e.Kind == KindDNS && e.CatchAll && e.Local == local })
		c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		if m, err := c.Read(make([]byte, 512)); err == nil || m > 0 {
			t.Errorf("the catch-all answered a DNS query over %s (%d bytes, %v)", to.proto, m, err)
		} else if ne, ok := err.(net.Error); to.proto == "udp" && (!ok || !ne.Timeout()) {
			t.Errorf("reading an unanswered query over UDP: %v, want a timeout", err)
		}
		c.Close()
	}
	if got := n.DNSQueries(EvilName); got != 4 {
		t.Errorf("DNSQueries(evil.test) = %d, want 4\n%s", got, dump(n))
	}
	if got := n.DNSQueries("test"); got != 5 {
		t.Errorf("DNSQueries(test) = %d, want 5", got)
	}
	if got := n.DNSQueries("l.test"); got != 0 {
		t.Errorf("DNSQueries(l.test) = %d, want 0: a suffix matches whole labels", got)
	}
}
