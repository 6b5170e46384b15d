// This file implements ParseHost: one normalisation of a host for every
// spelling of an IP literal that a resolver or a client might accept.

package rules

import (
	"fmt"
	"net/netip"
	"strings"
)

const (
	maxName  = 253 // characters of a name without its trailing dot
	maxLabel = 63
)

// ParseHost says whether host (from an HTTP Host header, a URL, a TLS SNI, a
// CONNECT target, without port) is an IP literal in any spelling a resolver or
// client might accept, and which address it is: a dotted quad; the inet_aton
// forms a, a.b and a.b.c, each part decimal, octal (leading 0) or hex (0x); IPv6
// with or without brackets, with a zone (dropped); IPv4-mapped IPv6 (unmapped).
// One trailing dot is ignored. The address returned has no zone and is never
// IPv4-mapped.
//
// A host whose last label is all digits or 0x-hex but that is no address is an
// error: refuse it, never resolve it. Anything else is a name (isIP false, nil
// error) if it is a valid DNS name: ASCII letters, digits, hyphens and
// underscores, labels of 1-63 characters, at most 253 in all; else an error.
func ParseHost(host string) (addr netip.Addr, isIP bool, err error) {
	switch {
	case host == "":
		return netip.Addr{}, false, fmt.Errorf("empty host")
	case host[0] == '[':
		if len(host) < 2 || host[len(host)-1] != ']' {
			return netip.Addr{}, false, fmt.Errorf("host %q: unbalanced brackets", host)
		}
		a, err := netip.ParseAddr(host[1 : len(host)-1])
		if err != nil {
			return netip.Addr{}, false, fmt.Errorf("host %q: not an IP address in brackets", host)
		}
		return a.WithZone("").Unmap(), true, nil
	case strings.IndexByte(host, ':') >= 0:
		a, err := netip.ParseAddr(host)
		if err != nil {
			return netip.Addr{}, false, fmt.Errorf("host %q: neither an IP address nor a name", host)
		}
		return a.WithZone("").Unmap(), true, nil
	}
	h := strings.TrimSuffix(host, ".")
	if numericLast(h) {
		a, ok := inetAton(h)
		if !ok {
			return netip.Addr{}, false, fmt.Errorf("host %q ends in a number but is not an IP address", host)
		}
		return a, true, nil
	}
	if err := checkName(h); err != nil {
		return netip.Addr{}, false, fmt.Errorf("host %q: %v", host, err)
	}
	return netip.Addr{}, false, nil
}

// checkName checks h (without its trailing dot) as a DNS host name.
func checkName(h string) error {
	if h == "" {
		return fmt.Errorf("empty name")
	}
	if len(h) > maxName {
		return fmt.Errorf("longer than %d characters", maxName)
	}
	n := 0 // length of the current label
	for i := 0; i < len(h); i++ {
		c := h[i]
		switch {
		case c == '.':
			if n == 0 {
				return fmt.Errorf("empty label")
			}
			n = 0
			continue
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_':
		case c >= 0x80:
			return fmt.Errorf("not ASCII (internationalised names travel in punycode)")
		default:
			return fmt.Errorf("character %q is not allowed in a name", c)
		}
		if n++; n > maxLabel {
			return fmt.Errorf("label longer than %d characters", maxLabel)
		}
	}
	if n == 0 {
		return fmt.Errorf("empty label")
	}
	return nil
}

// numericLast reports whether the last label of h is all decimal digits, or 0x
// followed by hex digits: such a host is an IPv4 literal to some parser
// (inet_aton, the WHATWG URL standard) or to none, and never a name.
func numericLast(h string) bool {
	last := h[strings.LastIndexByte(h, '.')+1:]
	if last == "" {
		return false
	}
	if len(last) >= 2 && last[0] == '0' && (last[1] == 'x' || last[1] == 'X') {
		for i := 2; i < len(last); i++ {
			if digitValue(last[i]) >= 16 {
				return false
			}
		}
		return true
	}
	for i := 0; i < len(last); i++ {
		if last[i] < '0' || last[i] > '9' {
			return false
		}
	}
	return true
}

// inetAton parses h as inet_aton(3) does: one to four parts separated by dots,
// the last filling the remaining bytes; each part decimal, octal after a leading
// 0, or hex after 0x or 0X (with at least one digit).
func inetAton(h string) (netip.Addr, bool) {
	parts := strings.Split(h, ".")
	if len(parts) > 4 {
		return netip.Addr{}, false
	}
	var v uint32
	for i, p := range parts {
		n, ok := atonPart(p)
		if !ok {
			return netip.Addr{}, false
		}
		if i < len(parts)-1 {
			if n > 0xff {
				return netip.Addr{}, false
			}
			v |= uint32(n) << (24 - 8*i)
			continue
		}
		bits := 8 * (4 - i) // the last part fills the remaining bytes
		if n >= 1<<bits {
			return netip.Addr{}, false
		}
		v |= uint32(n)
	}
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), true
}

func atonPart(p string) (uint64, bool) {
	if p == "" || p[0] < '0' || p[0] > '9' {
		return 0, false
	}
	base, digits := uint64(10), p
	if len(p) > 1 && p[0] == '0' {
		if p[1] == 'x' || p[1] == 'X' {
			base, digits = 16, p[2:]
			if digits == "" {
				return 0, false
			}
		} else {
			base, digits = 8, p[1:]
		}
	}
	var n uint64
	for i := 0; i < len(digits); i++ {
		d := digitValue(digits[i])
		if d >= base {
			return 0, false
		}
		if n = n*base + d; n > 0xffffffff {
			return 0, false
		}
	}
	return n, true
}

func digitValue(c byte) uint64 {
	switch {
	case c >= '0' && c <= '9':
		return uint64(c - '0')
	case c >= 'a' && c <= 'f':
		return uint64(c-'a') + 10
	case c >= 'A' && c <= 'F':
		return uint64(c-'A') + 10
	}
	return 99
}
