package dns

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"sbx.dev/sbx/internal/network/rules"
	"sbx.dev/sbx/internal/testutil"
)

// Sources: each client binds one of these loopback addresses.
const (
	srcAllow   = "127.0.0.2" // sandbox sbx-a, allowlist
	srcFull    = "127.0.0.3" // sandbox sbx-b, full with blocks
	srcUnknown = "127.0.0.4" // no sandbox
	srcNone    = "127.0.0.5" // sandbox sbx-n, mode none
	srcSpare   = "127.0.0.6" // sandbox sbx-c, full, for limits
)

func serverZone() map[string]rrset {
	many := make([]string, 60)
	for i := range many {
		many[i] = "198.51.100." + strconv.Itoa(100+i)
	}
	return map[string]rrset{
		"allowed.test":  {a: []string{"198.51.100.10"}, aaaa: []string{"2001:db8::10"}, txt: "hello"},
		"a.wild.test":   {a: []string{"198.51.100.11"}},
		"bad.wild.test": {a: []string{"198.51.100.12"}},
		"wild.test":     {a: []string{"198.51.100.15"}},
		"rebind.test":   {a: []string{"127.0.0.1", "198.51.100.13"}},
		"meta.test":     {a: []string{"169.254.169.254"}, aaaa: []string{"fd00:ec2::254"}},
		"mixed.test":    {a: []string{"198.51.100.66", "198.51.100.14"}},
		"local.test":    {a: []string{"198.18.0.1"}},
		"subnet.test":   {a: []string{"10.213.0.5"}},
		"mapped.test":   {aaaa: []string{"::ffff:127.0.0.1", "2001:db8::16"}},
		"v6only.test":   {aaaa: []string{"2001:db8::20"}},
		"alias.test":    {cname: "allowed.test"},
		"many.test":     {a: many},
		"*.evil.test":   {a: []string{"198.51.100.99"}, txt: "exfiltrated"},
		"evil.test":     {a: []string{"198.51.100.99"}},
	}
}

// harness is a Server on loopback UDP and TCP with a fake authoritative
// server as its upstream, and the events it logged.
type harness struct {
	srv      *Server
	auth     *fakeAuth
	udp, tcp string // the server's addresses

	mu     sync.Mutex
	events []Event // guarded by mu
}

func newHarness(t *testing.T, configure func(*Server)) *harness {
	t.Helper()
	h := &harness{auth: newFakeAuth(t, "127.0.0.1", 0, serverZone())}
	u := newTestUpstream(t, h.auth.addr)
	sets := map[string]struct {
		set *rules.Set
		id  string
	}{
		srcAllow: {mustSet(t, rules.Allowlist,
			[]string{"allowed.test", "*.wild.test", "rebind.test", "meta.test", "mixed.test", "many.test", "mapped.test", "v6only.test", "192.0.2.10", "127.0.0.1"},
			[]string{"bad.wild.test", "198.51.100.66"}), "sbx-a"},
		srcFull:  {mustSet(t, rules.Full, nil, []string{"*.evil.test", "blocked.test"}), "sbx-b"},
		srcNone:  {mustSet(t, rules.None, nil, nil), "sbx-n"},
		srcSpare: {mustSet(t, rules.Full, nil, nil), "sbx-c"},
	}
	forbidden := rules.NewForbidden(netip.MustParsePrefix("10.213.0.0/16"))
	forbidden.SetLocal([]netip.Addr{netip.MustParseAddr("198.18.0.1")})
	h.srv = &Server{
		Policy: func(src netip.Addr) (*rules.Set, string, bool) {
			s, ok := sets[src.String()]
			return s.set, s.id, ok
		},
		Upstream:  u,
		Forbidden: forbidden,
		Log: func(e Event) {
			h.mu.Lock()
			defer h.mu.Unlock()
			h.events = append(h.events, e)
		},
	}
	if configure != nil {
		configure(h.srv)
	}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h.udp, h.tcp = pc.LocalAddr().String(), ln.Addr().String()
	errs := make(chan error, 2)
	go func() { errs <- h.srv.ServePacket(pc) }()
	go func() { errs <- h.srv.ServeStream(ln) }()
	t.Cleanup(func() {
		if err := h.srv.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		for range 2 {
			// ErrServerClosed: a test over before its Serve call began.
			if err := <-errs; err != nil && !errors.Is(err, ErrServerClosed) {
				t.Errorf("Serve returned %v after Close; want nil", err)
			}
		}
	})
	return h
}

func mustSet(t *testing.T, mode rules.Mode, allow, block []string) *rules.Set {
	t.Helper()
	s, err := rules.Compile(mode, allow, block)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func (h *harness) takeEvents() []Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	e := h.events
	h.events = nil
	return e
}

// packQuery builds a query; edns 0 means no OPT record.
func packQuery(t testing.TB, id uint16, name string, typ dnsmessage.Type, edns int) []byte {
	t.Helper()
	m := dnsmessage.Message{
		Header:    dnsmessage.Header{ID: id, RecursionDesired: true},
		Questions: []dnsmessage.Question{{Name: dnsmessage.MustNewName(name), Type: typ, Class: dnsmessage.ClassINET}},
	}
	if edns > 0 {
		var rh dnsmessage.ResourceHeader
		rh.SetEDNS0(edns, dnsmessage.RCodeSuccess, false)
		m.Additionals = []dnsmessage.Resource{{Header: rh, Body: &dnsmessage.OPTResource{}}}
	}
	b, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// exchangeRaw sends req from src over proto ("udp", "tcp") and returns the raw reply.
func (h *harness) exchangeRaw(t testing.TB, proto, src string, req []byte) []byte {
	t.Helper()
	srcIP := net.ParseIP(src)
	var c net.Conn
	var err error
	if proto == "udp" {
		c, err = (&net.Dialer{LocalAddr: &net.UDPAddr{IP: srcIP}}).Dial("udp", h.udp)
	} else {
		c, err = (&net.Dialer{LocalAddr: &net.TCPAddr{IP: srcIP}}).Dial("tcp", h.tcp)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second)) // a lost answer fails the test instead of hanging it
	if proto == "udp" {
		if _, err := c.Write(req); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 65535)
		n, err := c.Read(buf)
		if err != nil {
			t.Fatalf("%s from %s: no reply: %v", proto, src, err)
		}
		return buf[:n]
	}
	if _, err := c.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(req))), req...)); err != nil {
		t.Fatal(err)
	}
	return readTCPMsg(t, c)
}

func readTCPMsg(t testing.TB, c net.Conn) []byte {
	t.Helper()
	var l [2]byte
	if _, err := io.ReadFull(c, l[:]); err != nil {
		t.Fatalf("reading a TCP answer: %v", err)
	}
	b := make([]byte, binary.BigEndian.Uint16(l[:]))
	if _, err := io.ReadFull(c, b); err != nil {
		t.Fatalf("reading a TCP answer: %v", err)
	}
	return b
}

func unpack(t testing.TB, b []byte) *dnsmessage.Message {
	t.Helper()
	var m dnsmessage.Message
	if err := m.Unpack(b); err != nil {
		t.Fatalf("unpacking the reply: %v", err)
	}
	return &m
}

func (h *harness) query(t testing.TB, proto, src, name string, typ dnsmessage.Type) *dnsmessage.Message {
	t.Helper()
	return unpack(t, h.exchangeRaw(t, proto, src, packQuery(t, 0x1234, name, typ, 0)))
}

func answerAddrs(m *dnsmessage.Message) []netip.Addr {
	var out []netip.Addr
	for _, r := range m.Answers {
		switch b := r.Body.(type) {
		case *dnsmessage.AResource:
			out = append(out, netip.AddrFrom4(b.A))
		case *dnsmessage.AAAAResource:
			out = append(out, netip.AddrFrom16(b.AAAA))
		}
	}
	return out
}

func TestServerAnswers(t *testing.T) {
	testutil.CheckLeaks(t)
	h := newHarness(t, nil)
	A, AAAA, TXT := dnsmessage.TypeA, dnsmessage.TypeAAAA, dnsmessage.TypeTXT
	const (
		ok  = dnsmessage.RCodeSuccess
		nx  = dnsmessage.RCodeNameError
		ref = dnsmessage.RCodeRefused
	)
	tests := []struct {
		src   string
		name  string
		typ   dnsmessage.Type
		rcode dnsmessage.RCode
		addrs []string
		rules []string // the events, in order
	}{
		{srcAllow, "allowed.test.", A, ok, []string{"198.51.100.10"}, nil},
		{srcAllow, "ALLOWED.Test.", A, ok, []string{"198.51.100.10"}, nil},
		{srcAllow, "allowed.test.", AAAA, ok, nil, nil}, // no IPv6 in the sandboxes
		{srcAllow, "notlisted.test.", A, nx, nil, []string{"not in allowlist"}},
		{srcAllow, "secret-1234.evil.test.", A, nx, nil, []string{"not in allowlist"}},
		{srcAllow, "secret-1234.evil.test.", TXT, nx, nil, []string{"not in allowlist"}},
		{srcAllow, "a.wild.test.", A, ok, []string{"198.51.100.11"}, nil},
		{srcAllow, "wild.test.", A, nx, nil, []string{"not in allowlist"}},
		{srcAllow, "bad.wild.test.", A, nx, nil, []string{"block bad.wild.test"}},
		{srcAllow, "rebind.test.", A, ok, []string{"198.51.100.13"}, []string{"rebinding: 127.0.0.1 is loopback"}},
		{srcAllow, "meta.test.", A, nx, nil, []string{"rebinding: 169.254.169.254 is link-local or metadata", "rebinding: fd00:ec2::254 is metadata"}},
		{srcAllow, "mixed.test.", A, ok, []string{"198.51.100.14"}, []string{"rebinding: 198.51.100.66 is in block 198.51.100.66/32"}},
		{srcAllow, "mapped.test.", A, ok, nil, []string{"rebinding: 127.0.0.1 is loopback"}},
		{srcAllow, "192.0.2.10.", A, ok, []string{"192.0.2.10"}, nil},
		{srcAllow, "3221225994.", A, ok, []string{"192.0.2.10"}, nil},
		{srcAllow, "192.0.2.10.", AAAA, ok, nil, nil},
		{srcAllow, "192.0.2.11.", A, nx, nil, []string{"not in allowlist"}},
		{srcAllow, "127.0.0.1.", A, nx, nil, []string{"127.0.0.1 is loopback"}}, // allowed by the set, never by Forbidden
		{srcAllow, "999.1.1.1.", A, nx, nil, []string{"invalid name"}},
		{srcAllow, "exa mple.test.", A, nx, nil, []string{"invalid name"}},
		{srcFull, "allowed.test.", A, ok, []string{"198.51.100.10"}, nil},
		{srcFull, "alias.test.", A, ok, []string{"198.51.100.10"}, nil},
		{srcFull, "x.evil.test.", A, nx, nil, []string{"block *.evil.test"}},
		{srcFull, "x.evil.test.", TXT, nx, nil, []string{"block *.evil.test"}},
		{srcFull, "local.test.", A, nx, nil, []string{"rebinding: 198.18.0.1 is host address 198.18.0.1"}},
		{srcFull, "subnet.test.", A, nx, nil, []string{"rebinding: 10.213.0.5 is blocked range 10.213.0.0/16"}},
		{srcFull, "0x7f.1.", A, nx, nil, []string{"127.0.0.1 is loopback"}},
		{srcFull, "169.254.169.254.", A, nx, nil, []string{"169.254.169.254 is link-local or metadata"}},
		{srcFull, "203.0.113.5.", A, ok, []string{"203.0.113.5"}, nil},
		{srcFull, "nonexistent.test.", A, nx, nil, nil},
		{srcFull, "localhost.", A, nx, nil, []string{"rebinding: 127.0.0.1 is loopback"}}, // from the hosts file
		{srcNone, "allowed.test.", A, nx, nil, []string{"mode none"}},
		{srcUnknown, "allowed.test.", A, ref, nil, []string{"unknown source"}},
	}
	for _, proto := range []string{"udp", "tcp"} {
		for _, tc := range tests {
			name := fmt.Sprintf("%s/%s/%s/%s", proto, tc.src, tc.name, typeName(tc.typ))
			h.takeEvents()
			m := h.query(t, proto, tc.src, tc.name, tc.typ)
			got := answerAddrs(m)
			if m.Header.RCode != tc.rcode || !sameAddrs(got, addrs(tc.addrs...)) {
				t.Errorf("%s: %s %v; want %s %v", name, rcodeName(m.Header.RCode), got, rcodeName(tc.rcode), tc.addrs)
			}
			var rules []string
			for _, e := range h.takeEvents() {
				rules = append(rules, e.Rule)
				wantSbx := map[string]string{srcAllow: "sbx-a", srcFull: "sbx-b", srcNone: "sbx-n"}[tc.src]
				if e.Sandbox != wantSbx || e.Src != netip.MustParseAddr(tc.src) || e.Type != typeName(tc.typ) ||
					e.Name != strings.ToLower(strings.TrimSuffix(tc.name, ".")) || e.Time.IsZero() {
					t.Errorf("%s: event %+v; want sandbox %q, source %s, name %q, type %s", name, e, wantSbx, tc.src, tc.name, typeName(tc.typ))
				}
			}
			if !slices.Equal(rules, tc.rules) {
				t.Errorf("%s: events %q; want %q", name, rules, tc.rules)
			}
		}
	}
	// NW-06: nothing under evil.test, and no type but A and AAAA, ever reached the upstream.
	for _, q := range h.auth.queries() {
		if strings.HasSuffix(q.name, "evil.test") || (q.typ != dnsmessage.TypeA && q.typ != dnsmessage.TypeAAAA) ||
			q.name == "notlisted.test" || q.name == "bad.wild.test" || q.name == "wild.test" {
			t.Errorf("the upstream saw a query for %s %s; a denied name or type must never reach it", q.name, typeName(q.typ))
		}
	}
}

func TestServerIPv6(t *testing.T) {
	h := newHarness(t, func(s *Server) { s.IPv6 = true })
	tests := []struct {
		name  string
		typ   dnsmessage.Type
		rcode dnsmessage.RCode
		addrs []string
	}{
		{"allowed.test.", dnsmessage.TypeAAAA, dnsmessage.RCodeSuccess, []string{"2001:db8::10"}},
		{"allowed.test.", dnsmessage.TypeA, dnsmessage.RCodeSuccess, []string{"198.51.100.10"}},
		{"v6only.test.", dnsmessage.TypeAAAA, dnsmessage.RCodeSuccess, []string{"2001:db8::20"}},
		{"v6only.test.", dnsmessage.TypeA, dnsmessage.RCodeSuccess, nil},
		{"meta.test.", dnsmessage.TypeAAAA, dnsmessage.RCodeNameError, nil},
		{"mapped.test.", dnsmessage.TypeAAAA, dnsmessage.RCodeSuccess, []string{"2001:db8::16"}},
	}
	for _, tc := range tests {
		m := h.query(t, "udp", srcAllow, tc.name, tc.typ)
		if got := answerAddrs(m); m.Header.RCode != tc.rcode || !sameAddrs(got, addrs(tc.addrs...)) {
			t.Errorf("%s %s: %s %v; want %s %v", tc.name, typeName(tc.typ), rcodeName(m.Header.RCode), got, rcodeName(tc.rcode), tc.addrs)
		}
	}
}

func TestServerTypesNotServed(t *testing.T) {
	h := newHarness(t, nil)
	types := []dnsmessage.Type{dnsmessage.TypeTXT, dnsmessage.TypeMX, dnsmessage.TypeSRV, dnsmessage.TypeALL,
		dnsmessage.TypeCNAME, dnsmessage.TypeNS, dnsmessage.TypePTR, dnsmessage.TypeSOA, dnsmessage.TypeHTTPS,
		dnsmessage.TypeSVCB, 10 /* NULL */, 257 /* CAA */, 4242}
	for _, typ := range types {
		for range 2 { // asked twice, logged once
			m := h.query(t, "udp", srcFull, "allowed.test.", typ)
			if m.Header.RCode != dnsmessage.RCodeSuccess || len(m.Answers) != 0 {
				t.Errorf("allowed.test %s: %s with %d answers; want an empty NOERROR", typeName(typ), rcodeName(m.Header.RCode), len(m.Answers))
			}
		}
		m := h.query(t, "udp", srcFull, "x.evil.test.", typ)
		if m.Header.RCode != dnsmessage.RCodeNameError {
			t.Errorf("x.evil.test %s: %s; want NXDOMAIN", typeName(typ), rcodeName(m.Header.RCode))
		}
		var got []string
		for _, e := range h.takeEvents() {
			got = append(got, e.Rule)
		}
		want := []string{"type " + typeName(typ) + " not served", "block *.evil.test"}
		if !slices.Equal(got, want) {
			t.Errorf("%s: events %q; want %q", typeName(typ), got, want)
		}
	}
	if typeName(4242) != "TYPE4242" || typeName(dnsmessage.TypeALL) != "ANY" {
		t.Errorf("typeName: %s, %s", typeName(4242), typeName(dnsmessage.TypeALL))
	}
	for _, q := range h.auth.queries() {
		t.Errorf("the upstream saw %s %s; no type but A and AAAA is ever forwarded", q.name, typeName(q.typ))
	}
}

// TestServerExfiltration is NW-06: names carrying data, under a denying
// allowlist and under a block in full, over UDP and TCP, in every type, never
// reach the upstream.
func TestServerExfiltration(t *testing.T) {
	h := newHarness(t, func(s *Server) { s.RateQPS, s.RateBurst = 1e6, 1e6 })
	for i := range 50 {
		secret := fmt.Sprintf("c2VjcmV0LXZhbHVlLSVk%04x", i)
		for _, src := range []string{srcAllow, srcFull} {
			for _, proto := range []string{"udp", "tcp"} {
				for _, typ := range []dnsmessage.Type{dnsmessage.TypeA, dnsmessage.TypeAAAA, dnsmessage.TypeTXT, dnsmessage.TypeALL} {
					m := h.query(t, proto, src, secret+".evil.test.", typ)
					if m.Header.RCode != dnsmessage.RCodeNameError {
						t.Fatalf("%s %s from %s over %s: %s; want NXDOMAIN", secret, typeName(typ), src, proto, rcodeName(m.Header.RCode))
					}
				}
			}
		}
	}
	if n := len(h.auth.queries()); n != 0 {
		t.Errorf("the upstream saw %d queries (%v); want none", n, h.auth.queries()[0])
	}
}

func TestServerReplyHeader(t *testing.T) {
	h := newHarness(t, func(s *Server) { s.AnswerTTL = time.Hour })
	for _, proto := range []string{"udp", "tcp"} {
		for _, rd := range []bool{true, false} {
			q := dnsmessage.Message{
				Header:    dnsmessage.Header{ID: 0xbeef, RecursionDesired: rd},
				Questions: []dnsmessage.Question{{Name: dnsmessage.MustNewName("AlLoWeD.tEsT."), Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET}},
			}
			req, _ := q.Pack()
			m := unpack(t, h.exchangeRaw(t, proto, srcAllow, req))
			if m.Header.ID != 0xbeef || !m.Header.Response || m.Header.RecursionDesired != rd || !m.Header.RecursionAvailable || m.Header.Truncated {
				t.Errorf("%s RD=%v: header %+v; want ID beef, QR, RD as asked, RA, no TC", proto, rd, m.Header)
			}
			if len(m.Questions) != 1 || m.Questions[0] != q.Questions[0] {
				t.Errorf("%s: questions %v; want the question echoed as asked", proto, m.Questions)
			}
			if len(m.Answers) != 1 || m.Answers[0].Header.Name != q.Questions[0].Name || m.Answers[0].Header.TTL > 30 || m.Answers[0].Header.TTL == 0 {
				t.Errorf("%s: answers %v; want one, owned by the name as asked, TTL in (0, 30]", proto, m.Answers)
			}
		}
	}
}

func TestServerMalformed(t *testing.T) {
	h := newHarness(t, nil)
	good := packQuery(t, 7, "allowed.test.", dnsmessage.TypeA, 0)
	with := func(f func(*dnsmessage.Message)) []byte {
		var m dnsmessage.Message
		if err := m.Unpack(good); err != nil {
			t.Fatal(err)
		}
		f(&m)
		b, err := m.Pack()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	// A header of ID 7 announcing one question, then raw question bytes.
	raw := func(question ...byte) []byte {
		return append([]byte{0, 7, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0}, question...)
	}
	label := func(n int) []byte { return append([]byte{byte(n)}, []byte(strings.Repeat("a", n))...) }
	longName := slices.Concat(label(63), label(63), label(63), label(63), []byte{0, 0, 1, 0, 1}) // 256 bytes
	tests := []struct {
		name  string
		req   []byte
		rcode dnsmessage.RCode
		echo  bool // the question is echoed
	}{
		{"two questions", with(func(m *dnsmessage.Message) { m.Questions = append(m.Questions, m.Questions[0]) }), dnsmessage.RCodeFormatError, false},
		{"no question", with(func(m *dnsmessage.Message) { m.Questions = nil }), dnsmessage.RCodeFormatError, false},
		{"class CH", with(func(m *dnsmessage.Message) { m.Questions[0].Class = dnsmessage.ClassCHAOS }), dnsmessage.RCodeFormatError, true},
		{"opcode STATUS", with(func(m *dnsmessage.Message) { m.Header.OpCode = 2 }), dnsmessage.RCodeNotImplemented, true},
		{"opcode NOTIFY", with(func(m *dnsmessage.Message) { m.Header.OpCode = 4 }), dnsmessage.RCodeNotImplemented, true},
		{"label of 64", raw(slices.Concat(label(64), []byte{0, 0, 1, 0, 1})...), dnsmessage.RCodeFormatError, false},
		{"name over 253", raw(longName...), dnsmessage.RCodeFormatError, false},
		{"question cut short", raw(label(5)...), dnsmessage.RCodeFormatError, false},
		{"pointer loop", raw(0xc0, 12, 0, 1, 0, 1), dnsmessage.RCodeFormatError, false},
		{"dot in a label", raw(slices.Concat([]byte{3, 'a', '.', 'b'}, []byte{0, 0, 1, 0, 1})...), dnsmessage.RCodeFormatError, false},
		{"two OPT", with(func(m *dnsmessage.Message) {
			var rh dnsmessage.ResourceHeader
			rh.SetEDNS0(1232, 0, false)
			m.Additionals = []dnsmessage.Resource{{Header: rh, Body: &dnsmessage.OPTResource{}}, {Header: rh, Body: &dnsmessage.OPTResource{}}}
		}), dnsmessage.RCodeFormatError, true},
		{"EDNS version 1", with(func(m *dnsmessage.Message) {
			var rh dnsmessage.ResourceHeader
			rh.SetEDNS0(1232, 0, false)
			rh.TTL |= 1 << 16
			m.Additionals = []dnsmessage.Resource{{Header: rh, Body: &dnsmessage.OPTResource{}}}
		}), rcodeBadVers, true},
	}
	for _, proto := range []string{"udp", "tcp"} {
		for _, tc := range tests {
			m := unpack(t, h.exchangeRaw(t, proto, srcAllow, tc.req))
			rcode := m.Header.RCode
			for _, r := range m.Additionals {
				if r.Header.Type == dnsmessage.TypeOPT {
					rcode = r.Header.ExtendedRCode(rcode)
				}
			}
			if m.Header.ID != 7 || !m.Header.Response || rcode != tc.rcode || (len(m.Questions) == 1) != tc.echo {
				t.Errorf("%s %s: ID %d, %s, %d questions; want ID 7, %s, question echoed %v", proto, tc.name, m.Header.ID, rcodeName(rcode), len(m.Questions), rcodeName(tc.rcode), tc.echo)
			}
		}
	}
	// Nothing reached the upstream, and the server still answers.
	if q := h.auth.queries(); len(q) != 0 {
		t.Errorf("the upstream saw %v", q)
	}
	if m := h.query(t, "udp", srcAllow, "allowed.test.", dnsmessage.TypeA); len(m.Answers) != 1 {
		t.Errorf("after malformed queries: %v", m)
	}
}

func TestServerNoReplyToReplies(t *testing.T) {
	s := &Server{Policy: func(netip.Addr) (*rules.Set, string, bool) { return nil, "x", true }}
	reply := packQuery(t, 9, "allowed.test.", dnsmessage.TypeA, 0)
	reply[2] |= 0x80 // QR
	for _, req := range [][]byte{reply, nil, {0, 1, 2}, make([]byte, 11)} {
		if resp := s.answer(t.Context(), netip.MustParseAddr(srcAllow), req, false); resp != nil {
			t.Errorf("answer(%x) = %x; want no reply", req, resp)
		}
	}
}

func TestServerTruncation(t *testing.T) {
	h := newHarness(t, nil)
	tests := []struct {
		proto string
		edns  int
		trunc bool
		n     int
		max   int
	}{
		{"udp", 0, true, 0, 512},
		{"udp", 1232, false, 60, 1232},
		{"udp", 4096, false, 60, 1232},
		{"udp", 100, true, 0, 512}, // an EDNS size below 512 means 512
		{"tcp", 0, false, 60, 65535},
	}
	for _, tc := range tests {
		b := h.exchangeRaw(t, tc.proto, srcAllow, packQuery(t, 3, "many.test.", dnsmessage.TypeA, tc.edns))
		m := unpack(t, b)
		if m.Header.Truncated != tc.trunc || len(m.Answers) != tc.n || len(b) > tc.max || len(m.Questions) != 1 {
			t.Errorf("%s EDNS %d: TC %v, %d answers, %d bytes; want TC %v, %d answers, at most %d bytes, the question",
				tc.proto, tc.edns, m.Header.Truncated, len(m.Answers), len(b), tc.trunc, tc.n, tc.max)
		}
		hasOPT := slices.ContainsFunc(m.Additionals, func(r dnsmessage.Resource) bool { return r.Header.Type == dnsmessage.TypeOPT })
		if hasOPT != (tc.edns > 0) {
			t.Errorf("%s EDNS %d: OPT in the reply %v; want it exactly when the query had one", tc.proto, tc.edns, hasOPT)
		}
	}
}

func TestServerRateLimit(t *testing.T) {
	h := newHarness(t, func(s *Server) { s.RateQPS, s.RateBurst = 0.001, 5 })
	for i := range 8 {
		m := h.query(t, "udp", srcAllow, "allowed.test.", dnsmessage.TypeA)
		want := dnsmessage.RCodeSuccess
		if i >= 5 {
			want = dnsmessage.RCodeRefused
		}
		if m.Header.RCode != want || m.Header.ID != 0x1234 || len(m.Questions) != 1 {
			t.Errorf("query %d: %s, ID %x; want %s with the question", i, rcodeName(m.Header.RCode), m.Header.ID, rcodeName(want))
		}
	}
	// TCP counts against the same bucket; another source has its own.
	if m := h.query(t, "tcp", srcAllow, "allowed.test.", dnsmessage.TypeA); m.Header.RCode != dnsmessage.RCodeRefused {
		t.Errorf("over TCP after the burst: %s; want REFUSED", rcodeName(m.Header.RCode))
	}
	if m := h.query(t, "udp", srcFull, "allowed.test.", dnsmessage.TypeA); m.Header.RCode != dnsmessage.RCodeSuccess {
		t.Errorf("another source: %s; want NOERROR", rcodeName(m.Header.RCode))
	}
	var limited []Event
	for _, e := range h.takeEvents() {
		if e.Rule == "rate limit" {
			limited = append(limited, e)
		}
	}
	// Refusals are reported at most once a second (TestLimiter): at least one here.
	if len(limited) == 0 || len(limited) > 2 {
		t.Errorf("rate limit events %+v; want one or two", limited)
	}
	for _, e := range limited {
		if e.Sandbox != "sbx-a" || e.Name != "allowed.test" || e.Type != "A" {
			t.Errorf("rate limit event %+v; want sbx-a's allowed.test A", e)
		}
	}
}

func TestLimiter(t *testing.T) {
	now := time.Unix(1000, 0)
	l := newLimiter(10, 3)
	l.now = func() time.Time { return now }
	a, b := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
	steps := []struct {
		advance      time.Duration
		src          netip.Addr
		ok, reported bool
	}{
		{0, a, true, false}, {0, a, true, false}, {0, a, true, false},
		{0, a, false, true},                      // the burst is spent: refused, reported
		{0, a, false, false},                     // refused, not reported again within the second
		{0, b, true, false},                      // another source has its own bucket
		{100 * time.Millisecond, a, true, false}, // one token back
		{0, a, false, false},
		{time.Second, a, true, false}, // refilled to the burst, no more
		{0, a, true, false}, {0, a, true, false},
		{0, a, false, true}, // more than a second since the last report
	}
	for i, st := range steps {
		now = now.Add(st.advance)
		if ok, rep := l.allow(st.src); ok != st.ok || rep != st.reported {
			t.Errorf("step %d: allow(%s) = %v, %v; want %v, %v", i, st.src, ok, rep, st.ok, st.reported)
		}
	}
	// Many sources: the table stays bounded.
	for i := range 3 * maxBuckets {
		now = now.Add(time.Second)
		l.allow(netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)}))
	}
	if n := len(l.buckets); n > maxBuckets {
		t.Errorf("%d buckets after %d sources; want at most %d", n, 3*maxBuckets, maxBuckets)
	}
}

func TestThrottle(t *testing.T) {
	now := time.Unix(1000, 0)
	th := throttle{now: func() time.Time { return now }}
	a, b := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
	steps := []struct {
		advance time.Duration
		src     netip.Addr
		rule    string
		want    bool
	}{
		{0, a, "busy", true},
		{0, a, "busy", false},
		{0, a, "too many connections", true},
		{0, b, "busy", true},
		{999 * time.Millisecond, a, "busy", false},
		{time.Millisecond, a, "busy", true},
	}
	for i, st := range steps {
		now = now.Add(st.advance)
		if got := th.allow(st.src, st.rule); got != st.want {
			t.Errorf("step %d: allow(%s, %q) = %v; want %v", i, st.src, st.rule, got, st.want)
		}
	}
}

// blockingUpstream holds every lookup until released, announcing each.
type blockingUpstream struct {
	entered chan string
	release chan struct{}
}

func (b *blockingUpstream) Lookup(ctx context.Context, name string) ([]netip.Addr, error) {
	b.entered <- name
	select {
	case <-b.release:
		return addrs("198.51.100.10"), nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func TestServerInFlightBound(t *testing.T) {
	testutil.CheckLeaks(t)
	up := &blockingUpstream{entered: make(chan string, 10), release: make(chan struct{})}
	h := newHarness(t, func(s *Server) { s.MaxInFlight, s.Upstream = 2, up })
	type result struct {
		m   *dnsmessage.Message
		err error
	}
	results := make(chan result, 2)
	for _, src := range []string{srcAllow, srcFull} {
		go func() {
			c, err := (&net.Dialer{LocalAddr: &net.UDPAddr{IP: net.ParseIP(src)}}).Dial("udp", h.udp)
			if err != nil {
				results <- result{err: err}
				return
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(10 * time.Second))
			c.Write(packQuery(t, 1, "allowed.test.", dnsmessage.TypeA, 0))
			buf := make([]byte, 512)
			n, err := c.Read(buf)
			if err != nil {
				results <- result{err: err}
				return
			}
			var m dnsmessage.Message
			results <- result{&m, m.Unpack(buf[:n])}
		}()
	}
	<-up.entered
	<-up.entered
	// Both slots are taken: the next query fails at once instead of queueing.
	m := h.query(t, "udp", srcSpare, "allowed.test.", dnsmessage.TypeA)
	if m.Header.RCode != dnsmessage.RCodeServerFailure {
		t.Errorf("a third query while two lookups are in flight: %s; want SERVFAIL", rcodeName(m.Header.RCode))
	}
	close(up.release)
	for range 2 {
		r := <-results
		if r.err != nil || r.m.Header.RCode != dnsmessage.RCodeSuccess {
			t.Errorf("held query: %v, %v", r.m, r.err)
		}
	}
	// The slots are free again.
	if m := h.query(t, "udp", srcSpare, "allowed.test.", dnsmessage.TypeA); m.Header.RCode != dnsmessage.RCodeSuccess {
		t.Errorf("after the lookups ended: %s; want NOERROR", rcodeName(m.Header.RCode))
	}
	if !slices.ContainsFunc(h.takeEvents(), func(e Event) bool { return e.Rule == "busy" && e.Sandbox == "sbx-c" }) {
		t.Errorf("no busy event for sbx-c")
	}
}

func TestServerTCPPipelined(t *testing.T) {
	h := newHarness(t, nil)
	c, err := (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(srcAllow)}}).Dial("tcp", h.tcp)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	names := map[uint16]string{1: "allowed.test.", 2: "a.wild.test.", 3: "notlisted.test.", 4: "allowed.test."}
	var batch []byte
	for id := uint16(1); id <= 4; id++ {
		q := packQuery(t, id, names[id], dnsmessage.TypeA, 0)
		batch = append(append(batch, binary.BigEndian.AppendUint16(nil, uint16(len(q)))...), q...)
	}
	if _, err := c.Write(batch); err != nil { // four queries in one write
		t.Fatal(err)
	}
	seen := map[uint16]bool{}
	for range 4 {
		m := unpack(t, readTCPMsg(t, c))
		if names[m.Header.ID] == "" || seen[m.Header.ID] || len(m.Questions) != 1 || m.Questions[0].Name.String() != names[m.Header.ID] {
			t.Errorf("answer %+v does not match a query sent, or came twice", m.Header)
		}
		seen[m.Header.ID] = true
	}
}

// tcpClient dials the harness's TCP port from src.
func (h *harness) tcpClient(t *testing.T, src string) net.Conn {
	t.Helper()
	c, err := (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}).Dial("tcp", h.tcp)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	return c
}

// ask sends one query on c and reads its answer.
func ask(t *testing.T, c net.Conn) error {
	t.Helper()
	q := packQuery(t, 5, "allowed.test.", dnsmessage.TypeA, 0)
	if _, err := c.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(q))), q...)); err != nil {
		return err
	}
	var l [2]byte
	_, err := io.ReadFull(c, l[:])
	if err == nil {
		_, err = io.ReadFull(c, make([]byte, binary.BigEndian.Uint16(l[:])))
	}
	return err
}

// closedByPeer reports whether the server closed c: a read ends in EOF or a reset.
func closedByPeer(c net.Conn) bool {
	_, err := c.Read(make([]byte, 1))
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)
}

func TestServerTCPConnsPerSource(t *testing.T) {
	testutil.CheckLeaks(t)
	h := newHarness(t, func(s *Server) { s.MaxConnsPerSource = 2 })
	c1, c2 := h.tcpClient(t, srcSpare), h.tcpClient(t, srcSpare)
	if err := ask(t, c1); err != nil {
		t.Fatalf("first connection: %v", err)
	}
	if err := ask(t, c2); err != nil {
		t.Fatalf("second connection: %v", err)
	}
	if c3 := h.tcpClient(t, srcSpare); !closedByPeer(c3) {
		t.Errorf("a third connection from one source was not closed")
	}
	if err := ask(t, h.tcpClient(t, srcFull)); err != nil {
		t.Errorf("another source's connection: %v", err)
	}
	if !slices.ContainsFunc(h.takeEvents(), func(e Event) bool { return e.Rule == "too many connections" && e.Sandbox == "sbx-c" }) {
		t.Errorf("no event for the refused connection")
	}
	// A closed connection frees its slot: wait until the server has seen the
	// close (its count drops), then connect again.
	c1.Close()
	for {
		h.srv.mu.Lock()
		n := h.srv.perSrc[netip.MustParseAddr(srcSpare)]
		h.srv.mu.Unlock()
		if n < 2 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if err := ask(t, h.tcpClient(t, srcSpare)); err != nil {
		t.Errorf("a new connection after one closed: %v", err)
	}
}

func TestServerTCPIdle(t *testing.T) {
	testutil.CheckLeaks(t)
	h := newHarness(t, func(s *Server) { s.IdleTimeout = 500 * time.Millisecond })
	// A connection that has been answered and then sends nothing is closed.
	idle := h.tcpClient(t, srcAllow)
	if err := ask(t, idle); err != nil {
		t.Fatal(err)
	}
	if !closedByPeer(idle) {
		t.Errorf("an idle connection was not closed")
	}
	// So is one sending a query a byte at a time (slowloris), though bytes keep
	// coming: the whole query must arrive within the idle timeout.
	slow := h.tcpClient(t, srcAllow)
	q := packQuery(t, 6, "allowed.test.", dnsmessage.TypeA, 0)
	msg := append(binary.BigEndian.AppendUint16(nil, uint16(len(q))), q...)
	var err error
	for i := 0; i < len(msg) && err == nil; i++ {
		_, err = slow.Write(msg[i : i+1])
		time.Sleep(100 * time.Millisecond) // the whole query would take over 3 s
	}
	if err == nil && !closedByPeer(slow) {
		t.Errorf("a connection trickling a query byte by byte was not closed")
	}
	// A client that sends queries and never reads the answers is cut off too,
	// once its receive buffer is full and a write blocks past the timeout.
	greedy := h.tcpClient(t, srcSpare)
	q = packQuery(t, 7, "many.test.", dnsmessage.TypeA, 0)
	one := append(binary.BigEndian.AppendUint16(nil, uint16(len(q))), q...)
	for {
		if _, err = greedy.Write(one); err != nil {
			break
		}
	}
	if !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, syscall.EPIPE) {
		t.Errorf("writing queries without reading answers ended with %v; want the server to close the connection", err)
	}
}

func TestServerClose(t *testing.T) {
	testutil.CheckLeaks(t)
	s := &Server{Policy: func(netip.Addr) (*rules.Set, string, bool) { return nil, "", false }}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 2)
	go func() { errs <- s.ServePacket(pc) }()
	go func() { errs <- s.ServeStream(ln) }()
	// Once both are served (a query over each is answered), an open TCP
	// connection mid-query does not hold Close up.
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if err := ask(t, c); err != nil {
		t.Fatal(err)
	}
	c.Write([]byte{0, 40, 1})
	uc, err := net.Dial("udp", pc.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer uc.Close()
	uc.SetDeadline(time.Now().Add(10 * time.Second))
	uc.Write(packQuery(t, 1, "a.test.", dnsmessage.TypeA, 0))
	if _, err := uc.Read(make([]byte, 512)); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("Close() = %v", err)
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Errorf("Serve after Close = %v; want nil", err)
		}
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close() = %v", err)
	}
	pc2, _ := net.ListenPacket("udp", "127.0.0.1:0")
	if err := s.ServePacket(pc2); !errors.Is(err, ErrServerClosed) {
		t.Errorf("ServePacket after Close = %v; want ErrServerClosed", err)
	}
	if _, _, err := pc2.ReadFrom(nil); !errors.Is(err, net.ErrClosed) {
		t.Errorf("ServePacket after Close left its conn open (read: %v)", err)
	}
	// A PacketConn closed by its owner ends ServePacket too.
	s2 := &Server{}
	pc3, _ := net.ListenPacket("udp", "127.0.0.1:0")
	done := make(chan error)
	go func() { done <- s2.ServePacket(pc3) }()
	pc3.Close() // before or after ServePacket starts reading: it returns nil either way
	if err := <-done; err != nil {
		t.Errorf("ServePacket after its conn closed = %v; want nil", err)
	}
	s2.Close()
}
