package dns

import (
	"context"
	"net/netip"
	"sync"
	"testing"

	"golang.org/x/net/dns/dnsmessage"

	"sbx.dev/sbx/internal/network/rules"
)

// recordingUpstream answers every lookup at once, with addresses both allowed
// and forbidden, and records the names asked.
type recordingUpstream struct {
	mu    sync.Mutex
	names []string
}

func (r *recordingUpstream) Lookup(_ context.Context, name string) ([]netip.Addr, error) {
	r.mu.Lock()
	r.names = append(r.names, name)
	r.mu.Unlock()
	return addrs("198.51.100.10", "127.0.0.1", "169.254.169.254", "2001:db8::10", "::ffff:10.0.0.1"), nil
}

// FuzzAnswer feeds the packet handler arbitrary bytes. It must never panic;
// a reply must parse, carry the query's ID, fit 512 bytes over UDP unless the
// query had EDNS (then 1232), and never hold a forbidden address; the upstream
// is only ever asked for names the set allows.
func FuzzAnswer(f *testing.F) {
	for _, seed := range [][]byte{
		packQuery(f, 1, "allowed.test.", dnsmessage.TypeA, 0),
		packQuery(f, 2, "x.wild.test.", dnsmessage.TypeAAAA, 1232),
		packQuery(f, 3, "secret.evil.test.", dnsmessage.TypeTXT, 0),
		packQuery(f, 4, "0x7f.1.", dnsmessage.TypeA, 4096),
		packQuery(f, 5, "allowed.test.", dnsmessage.TypeALL, 0),
		{0, 7, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0xc0, 12, 0, 1, 0, 1},
		{0, 7, 0x10, 0, 0, 2, 0, 0, 0, 0, 0, 0},
		{},
	} {
		f.Add(seed, false)
		f.Add(seed, true)
	}
	set, err := rules.Compile(rules.Allowlist, []string{"allowed.test", "*.wild.test", "192.0.2.1"}, []string{"bad.wild.test", "10.0.0.0/8"})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, req []byte, tcp bool) {
		up := &recordingUpstream{}
		s := &Server{
			Policy:    func(netip.Addr) (*rules.Set, string, bool) { return set, "sbx-f", true },
			Upstream:  up,
			Forbidden: rules.NewForbidden(),
			IPv6:      true,
		}
		resp := s.answer(t.Context(), netip.MustParseAddr("127.0.0.2"), req, tcp)
		for _, n := range up.names {
			if !set.Name(n).Allow {
				t.Fatalf("the upstream was asked for %q, which the set denies", n)
			}
		}
		if resp == nil {
			return
		}
		q, ok := parseQuery(req)
		if !ok {
			t.Fatalf("a reply %x to a query whose header does not parse", resp)
		}
		var m dnsmessage.Message
		if err := m.Unpack(resp); err != nil {
			t.Fatalf("the reply does not parse: %v", err)
		}
		if m.Header.ID != q.h.ID || !m.Header.Response {
			t.Fatalf("reply header %+v to query ID %d", m.Header, q.h.ID)
		}
		limit := 65535
		if !tcp {
			limit = 512
			if q.edns {
				limit = 1232
			}
		}
		if len(resp) > limit {
			t.Fatalf("reply of %d bytes; the limit is %d", len(resp), limit)
		}
		for _, a := range answerAddrs(&m) {
			if forbidden, why := s.Forbidden.Check(a); forbidden {
				t.Fatalf("the reply holds %v, which is %s", a, why)
			}
			if blocked, _ := set.Blocked(a); blocked {
				t.Fatalf("the reply holds %v, which the set blocks", a)
			}
		}
	})
}
