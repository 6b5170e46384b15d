package dns

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"sbx.dev/sbx/internal/testutil"
)

// writeFile replaces path's contents by renaming a new file over it, as
// resolvconf and editors do.
func writeFile(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func addrs(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

func sameAddrs(a, b []netip.Addr) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.SortFunc(a, netip.Addr.Compare)
	slices.SortFunc(b, netip.Addr.Compare)
	return slices.Equal(a, b)
}

func TestParseResolvConf(t *testing.T) {
	tests := []struct {
		name, in string
		servers  []string
		timeout  time.Duration
		attempts int
	}{
		{"empty", "", nil, 0, 0},
		{"one", "nameserver 192.0.2.53\n", []string{"192.0.2.53"}, 0, 0},
		{"comments and junk",
			"# generated\n; also a comment\nsearch corp.example\ndomain corp.example\nnameserver 192.0.2.1 # inline\nnameserver not-an-ip\nnameserver\nbogus line\n",
			[]string{"192.0.2.1"}, 0, 0},
		{"ipv6 with zone and mapped", "nameserver fe80::1%eth0\nnameserver ::ffff:192.0.2.9\nnameserver 2001:db8::53\n",
			[]string{"fe80::1%eth0", "192.0.2.9", "2001:db8::53"}, 0, 0},
		{"at most three", "nameserver 192.0.2.1\nnameserver 192.0.2.2\nnameserver 192.0.2.3\nnameserver 192.0.2.4\n",
			[]string{"192.0.2.1", "192.0.2.2", "192.0.2.3"}, 0, 0},
		{"options", "options ndots:2 timeout:3 attempts:4 rotate\nnameserver 127.0.0.53\n", []string{"127.0.0.53"}, 3 * time.Second, 4},
		{"options clamped", "options timeout:0 attempts:99\n", nil, time.Second, 5},
		{"options garbage", "options timeout:x attempts:\n", nil, 0, 0},
		{"tabs", "nameserver\t192.0.2.7\n", []string{"192.0.2.7"}, 0, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := parseResolvConf([]byte(tc.in))
			var got []string
			for _, a := range c.servers {
				got = append(got, a.String())
			}
			if !slices.Equal(got, tc.servers) || c.timeout != tc.timeout || c.attempts != tc.attempts {
				t.Errorf("parseResolvConf(%q) = %v, %v, %d; want %v, %v, %d", tc.in, got, c.timeout, c.attempts, tc.servers, tc.timeout, tc.attempts)
			}
		})
	}
	if got := (resolvConf{}).serverAddrs("53"); !slices.Equal(got, []string{"127.0.0.1:53"}) {
		t.Errorf("no nameserver: serverAddrs = %v; want 127.0.0.1:53, as glibc", got)
	}
	c := parseResolvConf([]byte("nameserver fe80::1%eth0\nnameserver 192.0.2.1\n"))
	if got := c.serverAddrs("5353"); !slices.Equal(got, []string{"[fe80::1%eth0]:5353", "192.0.2.1:5353"}) {
		t.Errorf("serverAddrs = %v", got)
	}
}

func TestParseHosts(t *testing.T) {
	h := parseHosts([]byte(`# comment
127.0.0.1	localhost
::1 localhost ip6-localhost # trailing comment
192.0.2.5 Pinned.Test pinned-alias.test.
192.0.2.6 pinned.test
192.0.2.5 pinned.test
not-an-ip broken.test
fe80::1%eth0 zoned.test
::ffff:192.0.2.7 mapped.test
192.0.2.8
`))
	tests := map[string][]netip.Addr{
		"localhost":         addrs("127.0.0.1", "::1"),
		"ip6-localhost":     addrs("::1"),
		"pinned.test":       addrs("192.0.2.5", "192.0.2.6"),
		"pinned-alias.test": addrs("192.0.2.5"),
		"zoned.test":        addrs("fe80::1"),
		"mapped.test":       addrs("192.0.2.7"),
		"broken.test":       nil,
	}
	for name, want := range tests {
		if got := h[name]; !slices.Equal(got, want) {
			t.Errorf("hosts[%q] = %v; want %v", name, got, want)
		}
	}
}

// testZone is the fake authoritative server's zone for the Upstream tests.
func testZone() map[string]rrset {
	many := make([]string, 100)
	for i := range many {
		many[i] = "198.51.100." + strconv.Itoa(i+1)
	}
	return map[string]rrset{
		"allowed.test": {a: []string{"198.51.100.10"}, aaaa: []string{"2001:db8::10"}},
		"pinned.test":  {a: []string{"198.51.100.50"}},
		"alias.test":   {cname: "alias2.test"},
		"alias2.test":  {cname: "allowed.test"},
		"v4only.test":  {a: []string{"198.51.100.4"}},
		"huge.test":    {a: many},
		"fail.test":    {rcode: dnsmessage.RCodeServerFailure},
		"short.test":   {a: []string{"198.51.100.5"}, ttl: 1},
		"one.test":     {a: []string{"198.51.100.1"}},
		"two.test":     {a: []string{"198.51.100.2"}},
	}
}

func newTestUpstream(t *testing.T, servers ...string) *Upstream {
	t.Helper()
	hosts := filepath.Join(t.TempDir(), "hosts")
	writeFile(t, hosts, "127.0.0.1 localhost\n")
	u := NewUpstream(servers, hosts)
	u.Timeout, u.Attempts = 2*time.Second, 1
	return u
}

func TestUpstreamLookup(t *testing.T) {
	testutil.CheckLeaks(t)
	auth := newFakeAuth(t, "127.0.0.1", 0, testZone())
	u := newTestUpstream(t, auth.addr)
	tests := []struct {
		name string
		want []netip.Addr
	}{
		{"allowed.test", addrs("198.51.100.10", "2001:db8::10")},
		{"ALLOWED.test.", addrs("198.51.100.10", "2001:db8::10")},
		{"v4only.test", addrs("198.51.100.4")},
		{"alias.test", addrs("198.51.100.10", "2001:db8::10")}, // through two CNAMEs
		{"localhost", addrs("127.0.0.1")},                      // the hosts file
		{"127.1", addrs("127.0.0.1")},                          // a literal is returned as it is
		{"[::1]", addrs("::1")},
	}
	for _, tc := range tests {
		got, err := u.Lookup(t.Context(), tc.name)
		if err != nil || !sameAddrs(got, tc.want) {
			t.Errorf("Lookup(%q) = %v, %v; want %v", tc.name, got, err, tc.want)
		}
	}
	if n := auth.count("localhost", 0) + auth.count("127.1", 0) + auth.count("[::1]", 0); n != 0 {
		t.Errorf("the nameserver saw %d queries for the hosts file's names and literals; want 0", n)
	}

	_, err := u.Lookup(t.Context(), "missing.test")
	if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "missing.test") {
		t.Errorf("Lookup(missing.test) = %v; want ErrNotFound naming the name", err)
	}
	_, err = u.Lookup(t.Context(), "fail.test")
	if err == nil || errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "fail.test") || !strings.Contains(err.Error(), "SERVFAIL") {
		t.Errorf("Lookup(fail.test) = %v; want an error naming the name and SERVFAIL, not ErrNotFound", err)
	}
	for _, bad := range []string{"", "exa mple.test", "999.1.1.1", "a..b"} {
		if got, err := u.Lookup(t.Context(), bad); err == nil {
			t.Errorf("Lookup(%q) = %v; want an error", bad, got)
		}
	}
}

func TestUpstreamTruncatedAnswerRetriesOverTCP(t *testing.T) {
	auth := newFakeAuth(t, "127.0.0.1", 0, testZone())
	u := newTestUpstream(t, auth.addr)
	got, err := u.Lookup(t.Context(), "huge.test")
	if err != nil || len(got) != 100 {
		t.Fatalf("Lookup(huge.test) = %d addresses, %v; want 100", len(got), err)
	}
	tcp := 0
	for _, q := range auth.queries() {
		if q.name == "huge.test" && q.typ == dnsmessage.TypeA && q.tcp {
			tcp++
		}
	}
	if tcp != 1 {
		t.Errorf("the nameserver saw %d TCP queries for huge.test A; want 1 after the truncated UDP answer", tcp)
	}
}

func TestUpstreamHostsFileFirst(t *testing.T) {
	auth := newFakeAuth(t, "127.0.0.1", 0, testZone())
	hosts := filepath.Join(t.TempDir(), "hosts")
	writeFile(t, hosts, "192.0.2.50 pinned.test\n2001:db8::50 pinned.test\n")
	u := NewUpstream([]string{auth.addr}, hosts)
	got, err := u.Lookup(t.Context(), "Pinned.Test.")
	if err != nil || !sameAddrs(got, addrs("192.0.2.50", "2001:db8::50")) {
		t.Fatalf("Lookup(pinned.test) = %v, %v; want the hosts file's 192.0.2.50, 2001:db8::50", got, err)
	}
	if n := auth.count("pinned.test", 0); n != 0 {
		t.Errorf("the nameserver saw %d queries for a name in the hosts file; want 0", n)
	}
	// The hosts file changes: the name now comes from DNS.
	writeFile(t, hosts, "192.0.2.51 other.test\n")
	got, err = u.Lookup(t.Context(), "pinned.test")
	if err != nil || !sameAddrs(got, addrs("198.51.100.50")) {
		t.Errorf("after the hosts file changed: Lookup(pinned.test) = %v, %v; want DNS's 198.51.100.50", got, err)
	}
	got, err = u.Lookup(t.Context(), "other.test")
	if err != nil || !sameAddrs(got, addrs("192.0.2.51")) {
		t.Errorf("after the hosts file changed: Lookup(other.test) = %v, %v; want 192.0.2.51", got, err)
	}
	// A missing hosts file is an empty one.
	os.Remove(hosts)
	if got, err := u.Lookup(t.Context(), "other.test"); !errors.Is(err, ErrNotFound) {
		t.Errorf("hosts file removed: Lookup(other.test) = %v, %v; want ErrNotFound", got, err)
	}
}

func TestUpstreamResolvConf(t *testing.T) {
	// resolv.conf names no ports: both fake servers listen on one port, at
	// 127.0.0.1 and 127.0.0.2, and the Upstream asks that port.
	auth1, auth2 := newFakeAuthPair(t, "127.0.0.1", "127.0.0.2", testZone)
	dir := t.TempDir()
	resolv, hosts := filepath.Join(dir, "resolv.conf"), filepath.Join(dir, "hosts")
	writeFile(t, resolv, "# test\nsearch example.com\nnameserver 127.0.0.1\noptions timeout:1 attempts:1\n")
	writeFile(t, hosts, "")
	u := newUpstream(nil, hosts, resolv)
	u.port = strconv.Itoa(auth1.port())

	if got, err := u.Lookup(t.Context(), "one.test"); err != nil || !sameAddrs(got, addrs("198.51.100.1")) {
		t.Fatalf("Lookup(one.test) = %v, %v", got, err)
	}
	if auth1.count("one.test", 0) != 2 || auth2.count("one.test", 0) != 0 {
		t.Errorf("one.test: 127.0.0.1 saw %d queries, 127.0.0.2 %d; want 2 (A, AAAA) and 0", auth1.count("one.test", 0), auth2.count("one.test", 0))
	}
	if n := auth1.count("one.test.example.com", 0); n != 0 {
		t.Errorf("the search domain was applied (%d queries); names are looked up as given", n)
	}
	if _, timeout, attempts := u.config(); timeout != time.Second || attempts != 1 {
		t.Errorf("config() timeout, attempts = %v, %d; want resolv.conf's 1s, 1", timeout, attempts)
	}

	writeFile(t, resolv, "nameserver 127.0.0.2\n")
	if got, err := u.Lookup(t.Context(), "two.test"); err != nil || !sameAddrs(got, addrs("198.51.100.2")) {
		t.Fatalf("Lookup(two.test) = %v, %v", got, err)
	}
	if auth1.count("two.test", 0) != 0 || auth2.count("two.test", 0) != 2 {
		t.Errorf("after resolv.conf changed: 127.0.0.1 saw %d queries for two.test, 127.0.0.2 %d; want 0 and 2", auth1.count("two.test", 0), auth2.count("two.test", 0))
	}
}

func TestUpstreamCache(t *testing.T) {
	auth := newFakeAuth(t, "127.0.0.1", 0, testZone())
	u := newTestUpstream(t, auth.addr)
	for range 2 {
		if _, err := u.Lookup(t.Context(), "allowed.test"); err != nil {
			t.Fatal(err)
		}
		if _, err := u.Lookup(t.Context(), "missing.test"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("Lookup(missing.test) = %v", err)
		}
	}
	for _, name := range []string{"allowed.test", "missing.test"} {
		for _, typ := range []dnsmessage.Type{dnsmessage.TypeA, dnsmessage.TypeAAAA} {
			if n := auth.count(name, typ); n != 1 {
				t.Errorf("two lookups of %s: the nameserver saw %d %s queries; want 1", name, n, typeName(typ))
			}
		}
	}
	// Errors are not cached.
	u.Lookup(t.Context(), "fail.test")
	u.Lookup(t.Context(), "fail.test")
	if n := auth.count("fail.test", dnsmessage.TypeA); n != 2 {
		t.Errorf("two lookups of a failing name: %d queries; want 2 (failures are not cached)", n)
	}
}

func TestUpstreamCacheTTLClamped(t *testing.T) {
	u := newTestUpstream(t)
	tests := []struct {
		addrs []netip.Addr
		ttl   time.Duration
		want  time.Duration
	}{
		{addrs("192.0.2.1"), time.Second, minTTL},
		{addrs("192.0.2.1"), 0, minTTL},
		{addrs("192.0.2.1"), 60 * time.Second, 60 * time.Second},
		{addrs("192.0.2.1"), 24 * time.Hour, maxTTL},
		{nil, time.Hour, negativeTTL},
	}
	for i, tc := range tests {
		key := cacheKey{"n" + strconv.Itoa(i), dnsmessage.TypeA}
		before := time.Now()
		u.mu.Lock()
		u.store(key, tc.addrs, tc.ttl)
		e := u.cache[key]
		u.mu.Unlock()
		after := time.Now()
		if e.expires.Before(before.Add(tc.want)) || e.expires.After(after.Add(tc.want)) {
			t.Errorf("store(%v, ttl %v) expires in %v; want %v", tc.addrs, tc.ttl, e.expires.Sub(before), tc.want)
		}
	}
}

func TestUpstreamOneQueryInFlight(t *testing.T) {
	auth := newFakeAuth(t, "127.0.0.1", 0, testZone())
	u := newTestUpstream(t, auth.addr)
	arrived := auth.holdAnswers()
	var wg sync.WaitGroup
	results := make([][]netip.Addr, 5)
	for i := range results {
		wg.Go(func() { results[i], _ = u.Lookup(t.Context(), "allowed.test") })
	}
	<-arrived // A and AAAA
	<-arrived
	auth.release()
	wg.Wait()
	for i, r := range results {
		if !sameAddrs(r, addrs("198.51.100.10", "2001:db8::10")) {
			t.Errorf("lookup %d = %v", i, r)
		}
	}
	if n := auth.count("allowed.test", dnsmessage.TypeA); n != 1 {
		t.Errorf("5 concurrent lookups: %d A queries; want 1", n)
	}
}

// blackhole is a UDP nameserver that reads queries and never answers.
func blackhole(t *testing.T) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 2048)
		for {
			if _, _, err := pc.ReadFrom(buf); err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() { pc.Close(); <-done })
	return pc.LocalAddr().String()
}

// closedPort returns a loopback UDP address nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := pc.LocalAddr().String()
	pc.Close()
	return addr
}

func TestUpstreamUnreachable(t *testing.T) {
	testutil.CheckLeaks(t)
	silent, closed := blackhole(t), closedPort(t)
	tests := []struct {
		name    string
		servers []string
		want    []string // substrings of the error
	}{
		{"silent", []string{silent}, []string{"lookup allowed.test", silent, "no answer within 200ms", "after 2 attempts"}},
		{"refused", []string{closed}, []string{"lookup allowed.test", closed, "refused"}},
		{"both", []string{silent, closed}, []string{silent, closed}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			u := newTestUpstream(t, tc.servers...)
			u.Timeout, u.Attempts = 200*time.Millisecond, 2
			start := time.Now()
			got, err := u.Lookup(t.Context(), "allowed.test")
			if err == nil {
				t.Fatalf("Lookup = %v; want an error", got)
			}
			t.Logf("Lookup error: %v", err)
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Lookup error %q; want it to contain %q", err, w)
				}
			}
			if errors.Is(err, ErrNotFound) {
				t.Errorf("Lookup error %v is ErrNotFound; an unreachable server is not an answer", err)
			}
			// A generous correctness bound, not a speed target: 2 servers × 2
			// attempts × 200 ms, were it not bounded, would still be far below.
			if d := time.Since(start); d > 30*time.Second {
				t.Errorf("Lookup took %v; the timeouts do not bound it", d)
			}
		})
	}

	// The caller's context bounds it too, whatever the timeout.
	u := newTestUpstream(t, silent)
	u.Timeout, u.Attempts = time.Hour, 5
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	if _, err := u.Lookup(ctx, "allowed.test"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Lookup with an expiring context = %v; want context.DeadlineExceeded", err)
	}
}

func TestUpstreamNextServer(t *testing.T) {
	auth := newFakeAuth(t, "127.0.0.1", 0, testZone())
	u := newTestUpstream(t, blackhole(t), closedPort(t), auth.addr)
	u.Timeout = 100 * time.Millisecond
	got, err := u.Lookup(t.Context(), "allowed.test")
	if err != nil || !sameAddrs(got, addrs("198.51.100.10", "2001:db8::10")) {
		t.Errorf("Lookup with two dead servers before a live one = %v, %v", got, err)
	}
}

// TestUpstreamIgnoresForgedReplies sends, before the real answer, replies with
// another ID and with another question: neither may be taken.
func TestUpstreamIgnoresForgedReplies(t *testing.T) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 2048)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			var m dnsmessage.Message
			if m.Unpack(buf[:n]) != nil {
				continue
			}
			reply := func(id uint16, q dnsmessage.Question, a string) {
				r := dnsmessage.Message{Header: dnsmessage.Header{ID: id, Response: true}, Questions: []dnsmessage.Question{q}}
				if q.Type == dnsmessage.TypeA {
					r.Answers = []dnsmessage.Resource{{
						Header: dnsmessage.ResourceHeader{Name: q.Name, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET, TTL: 60},
						Body:   &dnsmessage.AResource{A: netip.MustParseAddr(a).As4()},
					}}
				}
				b, _ := r.Pack()
				pc.WriteTo(b, from)
			}
			q := m.Questions[0]
			reply(m.Header.ID+1, q, "203.0.113.66")
			other := q
			other.Name = dnsmessage.MustNewName("other.test.")
			reply(m.Header.ID, other, "203.0.113.67")
			reply(m.Header.ID, q, "198.51.100.10")
		}
	}()
	t.Cleanup(func() { pc.Close(); <-done })
	u := newTestUpstream(t, pc.LocalAddr().String())
	got, err := u.Lookup(t.Context(), "allowed.test")
	if err != nil || !sameAddrs(got, addrs("198.51.100.10")) {
		t.Errorf("Lookup = %v, %v; want only the matching reply's 198.51.100.10", got, err)
	}
}
