package rules

import (
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"
)

func mustCompile(t *testing.T, mode Mode, allow, block []string) *Set {
	t.Helper()
	s, err := Compile(mode, allow, block)
	if err != nil {
		t.Fatalf("Compile(%q, %q, %q): %v", mode, allow, block, err)
	}
	return s
}

func TestCompileErrors(t *testing.T) {
	many := make([]string, MaxEntries+1)
	for i := range many {
		many[i] = "example.com"
	}
	tests := []struct {
		name         string
		mode         Mode
		allow, block []string
		field        string
		reason       string // a substring of the reason
	}{
		{"unknown mode", "open", nil, nil, "network.mode", `unknown mode "open" (known: none, allowlist, full)`},
		{"empty mode", "", nil, nil, "network.mode", "unknown mode"},
		{"none with allow", None, []string{"example.com"}, nil, "network.allow", "mode none takes no allow list"},
		{"none with block", None, nil, []string{"example.com"}, "network.block", "mode none takes no block list"},
		{"full with allow", Full, []string{"example.com"}, nil, "network.allow", "only allowlist"},
		{"space", Allowlist, []string{"a.com", "b.com", "exa mple.com"}, nil, "network.allow[2]",
			`"exa mple.com" is not a domain name, a wildcard (*.example.com), an IP address or a CIDR`},
		{"empty entry", Allowlist, []string{""}, nil, "network.allow[0]", "empty"},
		{"empty label", Allowlist, []string{"a..com"}, nil, "network.allow[0]", "empty label"},
		{"leading dot", Allowlist, []string{".a.com"}, nil, "network.allow[0]", "empty label"},
		{"two trailing dots", Allowlist, []string{"a.com.."}, nil, "network.allow[0]", "empty label"},
		{"long label", Allowlist, []string{strings.Repeat("a", 64) + ".com"}, nil, "network.allow[0]", "longer than 63"},
		{"long name", Allowlist, []string{strings.Repeat("abcdefghi.", 25) + "abcd"}, nil, "network.allow[0]", "longer than 253"},
		{"idn", Allowlist, []string{"bücher.de"}, nil, "network.allow[0]", "punycode"},
		{"underscore", Allowlist, []string{"_dmarc.example.com"}, nil, "network.allow[0]", `character '_'`},
		{"hyphen edge", Allowlist, []string{"-a.com"}, nil, "network.allow[0]", "hyphen"},
		{"inner wildcard", Allowlist, []string{"a.*.com"}, nil, "network.allow[0]", "whole first label"},
		{"bare wildcard", Allowlist, []string{"*"}, nil, "network.allow[0]", "whole first label"},
		{"wildcard of nothing", Allowlist, []string{"*."}, nil, "network.allow[0]", "empty name"},
		{"double wildcard", Allowlist, []string{"*.*.com"}, nil, "network.allow[0]", "whole first label"},
		{"wildcard of an IP", Allowlist, []string{"*.1.2.3.4"}, nil, "network.allow[0]", "ends in a number"},
		{"bad CIDR", Allowlist, []string{"10.0.0.0/33"}, nil, "network.allow[0]", "10.0.0.0/33"},
		{"bad IP", Allowlist, []string{"999.1.1.1"}, nil, "network.allow[0]", "ends in a number"},
		{"octal IP", Allowlist, []string{"0177.0.0.1"}, nil, "network.allow[0]", "write 127.0.0.1"},
		{"short IP", Allowlist, []string{"10.1"}, nil, "network.allow[0]", "write 10.0.0.1"},
		{"numeric TLD", Allowlist, []string{"example.123"}, nil, "network.allow[0]", "ends in a number"},
		{"zone", Allowlist, []string{"fe80::1%eth0"}, nil, "network.allow[0]", "zone"},
		{"bad IPv6", Allowlist, []string{"1::2::3"}, nil, "network.allow[0]", "1::2::3"},
		{"bad block", Full, nil, []string{"ok.com", "x y"}, "network.block[1]", `"x y"`},
		{"too many allow", Allowlist, many, nil, "network.allow", "at most 1000"},
		{"too many block", Full, nil, many, "network.block", "at most 1000"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Compile(tc.mode, tc.allow, tc.block)
			var re *Error
			if !errors.As(err, &re) {
				t.Fatalf("Compile(%q, %q, %q) = %v, %v; want an *Error", tc.mode, tc.allow, tc.block, s, err)
			}
			if re.Field != tc.field || !strings.Contains(re.Reason, tc.reason) {
				t.Errorf("Compile(%q, %q, %q) = %q; want field %q, reason containing %q", tc.mode, tc.allow, tc.block, err, tc.field, tc.reason)
			}
			if !strings.HasPrefix(err.Error(), tc.field+": ") {
				t.Errorf("Error() = %q; want it to begin with %q", err, tc.field+": ")
			}
		})
	}
}

func TestCompileAccepts(t *testing.T) {
	for _, mode := range []Mode{None, Allowlist, Full} {
		if _, err := Compile(mode, nil, nil); err != nil {
			t.Errorf("Compile(%q, nil, nil) = %v", mode, err)
		}
	}
	max := make([]string, MaxEntries)
	for i := range max {
		max[i] = "example.com"
	}
	if _, err := Compile(Allowlist, max, max); err != nil {
		t.Errorf("Compile with %d entries per list: %v", MaxEntries, err)
	}
}

func TestLists(t *testing.T) {
	s := mustCompile(t, Allowlist,
		[]string{"Example.COM.", "*.Example.com", "example.com", "192.0.2.1", "::ffff:10.0.0.0/104", "10.1.2.3/8", "2001:DB8::1", "xn--bcher-kva.de"},
		[]string{"Evil.test", "198.51.100.7/24", "::ffff:203.0.113.9"})
	allow, block := s.Lists()
	wantAllow := []string{"example.com", "*.example.com", "192.0.2.1/32", "10.0.0.0/8", "2001:db8::1/128", "xn--bcher-kva.de"}
	wantBlock := []string{"evil.test", "198.51.100.0/24", "203.0.113.9/32"}
	if !slices.Equal(allow, wantAllow) || !slices.Equal(block, wantBlock) {
		t.Errorf("Lists() = %q, %q; want %q, %q", allow, block, wantAllow, wantBlock)
	}
	allow[0] = "changed"
	if again, _ := s.Lists(); again[0] != "example.com" {
		t.Errorf("Lists() shares its slice with the caller")
	}
	if s.Mode() != Allowlist {
		t.Errorf("Mode() = %q", s.Mode())
	}
}

func TestName(t *testing.T) {
	allow := mustCompile(t, Allowlist,
		[]string{"allowed.test", "*.wild.test", "API.Mixed.Test.", "*.both.test", "both.test", "192.0.2.10", "10.9.0.0/16"},
		[]string{"bad.wild.test", "*.deep.wild.test", "*.evil.test", "evil.test", "10.9.9.0/24"})
	full := mustCompile(t, Full, nil, []string{"*.evil.test", "blocked.test", "203.0.113.0/24"})
	none := mustCompile(t, None, nil, nil)
	tests := []struct {
		set  *Set
		name string
		want Verdict
	}{
		{allow, "allowed.test", Verdict{true, "allow allowed.test"}},
		{allow, "ALLOWED.TEST.", Verdict{true, "allow allowed.test"}},
		{allow, "sub.allowed.test", Verdict{false, "not in allowlist"}},
		{allow, "notallowed.test", Verdict{false, "not in allowlist"}},
		{allow, "allowed.test.evil", Verdict{false, "not in allowlist"}},
		{allow, "wild.test", Verdict{false, "not in allowlist"}}, // the apex is not under the wildcard
		{allow, "a.wild.test", Verdict{true, "allow *.wild.test"}},
		{allow, "a.b.c.wild.test", Verdict{true, "allow *.wild.test"}},
		{allow, "x-wild.test", Verdict{false, "not in allowlist"}},
		{allow, "xwild.test", Verdict{false, "not in allowlist"}},
		{allow, "bad.wild.test", Verdict{false, "block bad.wild.test"}},
		{allow, "BAD.wild.test.", Verdict{false, "block bad.wild.test"}},
		{allow, "x.bad.wild.test", Verdict{true, "allow *.wild.test"}}, // the block is exact
		{allow, "deep.wild.test", Verdict{true, "allow *.wild.test"}},
		{allow, "a.deep.wild.test", Verdict{false, "block *.deep.wild.test"}},
		{allow, "api.mixed.test", Verdict{true, "allow api.mixed.test"}},
		{allow, "both.test", Verdict{true, "allow both.test"}},
		{allow, "x.both.test", Verdict{true, "allow *.both.test"}},
		{allow, "evil.test", Verdict{false, "block evil.test"}},
		{allow, "secret.evil.test", Verdict{false, "block *.evil.test"}},
		{allow, "test", Verdict{false, "not in allowlist"}},
		{allow, "under_score.wild.test", Verdict{true, "allow *.wild.test"}},
		// IP literals are judged as addresses.
		{allow, "192.0.2.10", Verdict{true, "allow 192.0.2.10/32"}},
		{allow, "3221225994", Verdict{true, "allow 192.0.2.10/32"}},
		{allow, "10.9.1.1", Verdict{true, "allow 10.9.0.0/16"}},
		{allow, "10.9.9.1", Verdict{false, "block 10.9.9.0/24"}},
		{allow, "192.0.2.11", Verdict{false, "not in allowlist"}},
		{allow, "[::ffff:192.0.2.10]", Verdict{true, "allow 192.0.2.10/32"}},
		{allow, "999.1.1.1", Verdict{false, "invalid name"}},
		{allow, "", Verdict{false, "invalid name"}},
		{allow, "a b.test", Verdict{false, "invalid name"}},
		{full, "anything.example", Verdict{true, "full"}},
		{full, "x.evil.test", Verdict{false, "block *.evil.test"}},
		{full, "evil.test", Verdict{true, "full"}},
		{full, "Blocked.Test.", Verdict{false, "block blocked.test"}},
		{full, "203.0.113.5", Verdict{false, "block 203.0.113.0/24"}},
		{full, "0xcb007105", Verdict{false, "block 203.0.113.0/24"}},
		{none, "allowed.test", Verdict{false, "mode none"}},
		{none, "192.0.2.10", Verdict{false, "mode none"}},
		{nil, "allowed.test", Verdict{false, "mode none"}},
	}
	for _, tc := range tests {
		mode := tc.set.Mode()
		if got := tc.set.Name(tc.name); got != tc.want {
			t.Errorf("%s: Name(%q) = %+v, want %+v", mode, tc.name, got, tc.want)
		}
	}
}

func TestAddr(t *testing.T) {
	allow := mustCompile(t, Allowlist,
		[]string{"192.0.2.10", "10.9.0.0/16", "2001:db8:1::/48", "::ffff:172.16.0.0/108", "allowed.test"},
		[]string{"10.9.9.0/24", "2001:db8:1:bad::/64"})
	full := mustCompile(t, Full, nil, []string{"203.0.113.0/24", "::ffff:198.51.100.1", "2001:db8:dead::/48"})
	none := mustCompile(t, None, nil, nil)
	tests := []struct {
		set  *Set
		addr string
		want Verdict
	}{
		{allow, "192.0.2.10", Verdict{true, "allow 192.0.2.10/32"}},
		{allow, "::ffff:192.0.2.10", Verdict{true, "allow 192.0.2.10/32"}},
		{allow, "192.0.2.11", Verdict{false, "not in allowlist"}},
		{allow, "10.9.255.255", Verdict{true, "allow 10.9.0.0/16"}},
		{allow, "10.10.0.0", Verdict{false, "not in allowlist"}},
		{allow, "10.9.9.9", Verdict{false, "block 10.9.9.0/24"}},
		{allow, "::ffff:10.9.9.9", Verdict{false, "block 10.9.9.0/24"}},
		{allow, "172.16.5.5", Verdict{true, "allow 172.16.0.0/12"}},
		{allow, "2001:db8:1:2::1", Verdict{true, "allow 2001:db8:1::/48"}},
		{allow, "2001:DB8:1:2::1%eth0", Verdict{true, "allow 2001:db8:1::/48"}},
		{allow, "2001:db8:1:bad::1", Verdict{false, "block 2001:db8:1:bad::/64"}},
		{allow, "2001:db8:2::1", Verdict{false, "not in allowlist"}},
		{full, "8.8.8.8", Verdict{true, "full"}},
		{full, "2001:db8::1", Verdict{true, "full"}},
		{full, "203.0.113.77", Verdict{false, "block 203.0.113.0/24"}},
		{full, "::ffff:203.0.113.77", Verdict{false, "block 203.0.113.0/24"}},
		{full, "198.51.100.1", Verdict{false, "block 198.51.100.1/32"}},
		{full, "2001:db8:dead:beef::1", Verdict{false, "block 2001:db8:dead::/48"}},
		{none, "192.0.2.10", Verdict{false, "mode none"}},
	}
	for _, tc := range tests {
		a := netip.MustParseAddr(tc.addr)
		if got := tc.set.Addr(a); got != tc.want {
			t.Errorf("%s: Addr(%s) = %+v, want %+v", tc.set.Mode(), tc.addr, got, tc.want)
		}
	}
	if got := full.Addr(netip.Addr{}); got.Allow {
		t.Errorf("Addr(zero) = %+v; want deny", got)
	}
}

func TestBlocked(t *testing.T) {
	s := mustCompile(t, Allowlist, []string{"allowed.test"}, []string{"10.0.0.0/8", "blocked.test", "2001:db8::/32"})
	tests := []struct {
		addr    string
		blocked bool
		rule    string
	}{
		{"10.1.2.3", true, "block 10.0.0.0/8"},
		{"::ffff:10.1.2.3", true, "block 10.0.0.0/8"},
		{"2001:db8::5", true, "block 2001:db8::/32"},
		{"192.0.2.1", false, ""}, // not allowed by Addr, but not blocked either
	}
	for _, tc := range tests {
		b, rule := s.Blocked(netip.MustParseAddr(tc.addr))
		if b != tc.blocked || rule != tc.rule {
			t.Errorf("Blocked(%s) = %v, %q; want %v, %q", tc.addr, b, rule, tc.blocked, tc.rule)
		}
	}
}
