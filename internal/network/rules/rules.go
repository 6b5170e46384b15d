// Package rules compiles a sandbox's egress tier and its allow and block lists
// into a Set that answers, for a DNS name or an address, whether a connection
// may go and which rule decided; it also holds the addresses no sandbox may
// reach under any tier (Forbidden) and the one parser of hosts (ParseHost) that
// tells IP literals, in every spelling, from names. It is pure logic: it knows
// nothing of sandboxes, proxies or namespaces.
package rules

import (
	"fmt"
	"net/netip"
	"strings"
)

// Mode is a sandbox's network tier.
type Mode string

const (
	None      Mode = "none"      // loopback only
	Allowlist Mode = "allowlist" // only the listed names and addresses
	Full      Mode = "full"      // any outbound address that is not forbidden
)

// MaxEntries is the most entries an allow or a block list may have.
const MaxEntries = 1000

// Error is a bad rule, naming the field ("network.allow[2]") and why.
type Error struct{ Field, Reason string }

func (e *Error) Error() string { return e.Field + ": " + e.Reason }

// Verdict says whether a connection may go and which rule decided:
// "full", "allow <entry>", "block <entry>", "not in allowlist", "mode none".
type Verdict struct {
	Allow bool
	Rule  string
}

// Set is one sandbox's compiled egress rules; immutable, safe for concurrent use.
type Set struct {
	mode         Mode
	allow, block list
}

// list is one compiled allow or block list.
type list struct {
	names    map[string]bool // exact names, normalised
	suffixes map[string]bool // "example.com" for the entry *.example.com
	nets     []netip.Prefix
	entries  []string // normalised, in the order given, without duplicates
}

// Compile checks and compiles a tier and its lists; every error is an *Error
// naming the field. Domain names are ASCII letters, digits and hyphens (IDN in
// punycode), case folded, with one trailing dot allowed; a wildcard *.example.com
// matches every name strictly under example.com; an IP address becomes a /32 or
// /128; a CIDR is masked; IPv4-mapped IPv6 forms are unmapped. A CIDR written in
// IPv6 that is wider than ::ffff:0:0/96 stays IPv6 and matches no IPv4 address.
func Compile(mode Mode, allow, block []string) (*Set, error) {
	switch mode {
	case None:
		if len(allow) > 0 {
			return nil, &Error{"network.allow", "mode none takes no allow list"}
		}
		if len(block) > 0 {
			return nil, &Error{"network.block", "mode none takes no block list"}
		}
	case Full:
		if len(allow) > 0 {
			return nil, &Error{"network.allow", "mode full takes no allow list (only allowlist does)"}
		}
	case Allowlist:
	default:
		return nil, &Error{"network.mode", fmt.Sprintf("unknown mode %q (known: %s, %s, %s)", string(mode), None, Allowlist, Full)}
	}
	s := &Set{mode: mode}
	var err error
	if s.allow, err = compileList("network.allow", allow); err != nil {
		return nil, err
	}
	if s.block, err = compileList("network.block", block); err != nil {
		return nil, err
	}
	return s, nil
}

func compileList(field string, entries []string) (list, error) {
	l := list{names: map[string]bool{}, suffixes: map[string]bool{}}
	if len(entries) > MaxEntries {
		return l, &Error{field, fmt.Sprintf("%d entries; at most %d", len(entries), MaxEntries)}
	}
	seen := map[string]bool{}
	for i, raw := range entries {
		e, err := parseEntry(raw)
		if err != nil {
			return l, &Error{fmt.Sprintf("%s[%d]", field, i),
				fmt.Sprintf("%q is not a domain name, a wildcard (*.example.com), an IP address or a CIDR: %v", raw, err)}
		}
		norm := e.String()
		if seen[norm] {
			continue
		}
		seen[norm] = true
		l.entries = append(l.entries, norm)
		switch {
		case e.net.IsValid():
			l.nets = append(l.nets, e.net)
		case e.wildcard:
			l.suffixes[e.name] = true
		default:
			l.names[e.name] = true
		}
	}
	return l, nil
}

// entry is one parsed list entry: a name, a wildcard's parent name, or a prefix.
type entry struct {
	name     string
	wildcard bool
	net      netip.Prefix
}

func (e entry) String() string {
	switch {
	case e.net.IsValid():
		return e.net.String()
	case e.wildcard:
		return "*." + e.name
	}
	return e.name
}

func parseEntry(s string) (entry, error) {
	switch {
	case s == "":
		return entry{}, fmt.Errorf("empty")
	case strings.Contains(s, "/"):
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return entry{}, err
		}
		return entry{net: normPrefix(p)}, nil
	case strings.Contains(s, ":"):
		a, err := netip.ParseAddr(s)
		if err != nil {
			return entry{}, err
		}
		if a.Zone() != "" {
			return entry{}, fmt.Errorf("an address in a rule takes no zone")
		}
		a = a.Unmap()
		return entry{net: netip.PrefixFrom(a, a.BitLen())}, nil
	case strings.HasPrefix(s, "*."):
		name, err := ruleName(s[2:])
		if err != nil {
			return entry{}, err
		}
		return entry{name: name, wildcard: true}, nil
	}
	if numericLast(strings.TrimSuffix(s, ".")) {
		a, err := netip.ParseAddr(s)
		if err != nil || !a.Is4() {
			if h, isIP, _ := ParseHost(s); isIP {
				return entry{}, fmt.Errorf("not a canonical IP address (write %s)", h)
			}
			return entry{}, fmt.Errorf("ends in a number but is not an IP address")
		}
		return entry{net: netip.PrefixFrom(a, 32)}, nil
	}
	name, err := ruleName(s)
	if err != nil {
		return entry{}, err
	}
	return entry{name: name}, nil
}

// normPrefix unmaps an IPv4-mapped prefix (::ffff:10.0.0.0/104 is 10.0.0.0/8) and masks it.
func normPrefix(p netip.Prefix) netip.Prefix {
	if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
		p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
	}
	return p.Masked()
}

// ruleName checks and normalises a domain name of a rule: letters, digits and
// hyphens only, no label starting or ending with a hyphen.
func ruleName(s string) (string, error) {
	n := strings.ToLower(strings.TrimSuffix(s, "."))
	if n == "" {
		return "", fmt.Errorf("empty name")
	}
	if len(n) > maxName {
		return "", fmt.Errorf("name longer than %d characters", maxName)
	}
	for _, label := range strings.Split(n, ".") {
		switch {
		case label == "":
			return "", fmt.Errorf("empty label")
		case len(label) > maxLabel:
			return "", fmt.Errorf("label %q longer than %d characters", label, maxLabel)
		case label[0] == '-' || label[len(label)-1] == '-':
			return "", fmt.Errorf("label %q starts or ends with a hyphen", label)
		}
		for _, r := range label {
			switch {
			case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-':
			case r == '*':
				return "", fmt.Errorf("a wildcard is only allowed as the whole first label (*.example.com)")
			case r > 0x7f:
				return "", fmt.Errorf("internationalised names must be given in punycode (xn--...)")
			default:
				return "", fmt.Errorf("character %q is not allowed in a domain name", r)
			}
		}
	}
	if numericLast(n) {
		return "", fmt.Errorf("ends in a number but is not an IP address")
	}
	return n, nil
}

// Mode returns the tier.
func (s *Set) Mode() Mode {
	if s == nil {
		return None
	}
	return s.mode
}

// Lists returns the allow and block entries, normalised ("example.com",
// "*.example.com", "10.0.0.0/8", "192.0.2.1/32"), for reporting.
func (s *Set) Lists() (allow, block []string) {
	if s == nil {
		return nil, nil
	}
	return append([]string(nil), s.allow.entries...), append([]string(nil), s.block.entries...)
}

// Name says whether a connection to the DNS name may go. Block entries come
// first (Rule "block <entry>"); then full allows (Rule "full"), allowlist
// allows a name an allow entry matches (Rule "allow <entry>", else "not in
// allowlist"), none denies (Rule "mode none"). Case and one trailing dot do not
// matter. A name that is an IP literal is judged as Addr of that IP; a name that
// is neither is denied (Rule "invalid name").
func (s *Set) Name(name string) Verdict {
	a, isIP, err := ParseHost(name)
	switch {
	case err != nil:
		return Verdict{false, "invalid name"}
	case isIP:
		return s.Addr(a)
	case s == nil:
		return Verdict{false, "mode none"}
	}
	n := strings.ToLower(strings.TrimSuffix(name, "."))
	if e, ok := s.block.matchName(n); ok {
		return Verdict{false, "block " + e}
	}
	switch s.mode {
	case Full:
		return Verdict{true, "full"}
	case Allowlist:
		if e, ok := s.allow.matchName(n); ok {
			return Verdict{true, "allow " + e}
		}
		return Verdict{false, "not in allowlist"}
	}
	return Verdict{false, "mode none"}
}

// Addr says whether a connection to the address may go when no name is known.
// Block CIDRs come first; then full allows, allowlist allows only an address an
// allow CIDR or IP contains, none denies. IPv4-mapped addresses are unmapped and
// zones ignored. Forbidden addresses are not this method's concern.
func (s *Set) Addr(a netip.Addr) Verdict {
	if s == nil {
		return Verdict{false, "mode none"}
	}
	a = a.WithZone("").Unmap()
	if !a.IsValid() {
		return Verdict{false, "invalid address"}
	}
	if p, ok := s.block.matchAddr(a); ok {
		return Verdict{false, "block " + p}
	}
	switch s.mode {
	case Full:
		return Verdict{true, "full"}
	case Allowlist:
		if p, ok := s.allow.matchAddr(a); ok {
			return Verdict{true, "allow " + p}
		}
		return Verdict{false, "not in allowlist"}
	}
	return Verdict{false, "mode none"}
}

// Blocked reports whether a block CIDR or IP covers the address, and which
// ("block 10.0.0.0/8"): the DNS server drops such addresses from the answers for
// an allowed name.
func (s *Set) Blocked(a netip.Addr) (blocked bool, rule string) {
	if s == nil {
		return false, ""
	}
	if p, ok := s.block.matchAddr(a.WithZone("").Unmap()); ok {
		return true, "block " + p
	}
	return false, ""
}

// matchName returns the entry matching the normalised name n: the exact name,
// else the wildcard of its nearest parent.
func (l *list) matchName(n string) (string, bool) {
	if l.names[n] {
		return n, true
	}
	for rest := n; ; {
		i := strings.IndexByte(rest, '.')
		if i < 0 {
			return "", false
		}
		rest = rest[i+1:]
		if l.suffixes[rest] {
			return "*." + rest, true
		}
	}
}

func (l *list) matchAddr(a netip.Addr) (string, bool) {
	for _, p := range l.nets {
		if p.Contains(a) {
			return p.String(), true
		}
	}
	return "", false
}
