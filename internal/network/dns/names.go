// This file implements the names of DNS types and response codes, as dig
// prints them.

package dns

import (
	"strconv"

	"golang.org/x/net/dns/dnsmessage"
)

var typeNames = map[dnsmessage.Type]string{
	1: "A", 2: "NS", 5: "CNAME", 6: "SOA", 10: "NULL", 12: "PTR", 13: "HINFO", 15: "MX", 16: "TXT",
	17: "RP", 18: "AFSDB", 25: "KEY", 28: "AAAA", 29: "LOC", 33: "SRV", 35: "NAPTR", 39: "DNAME",
	41: "OPT", 43: "DS", 44: "SSHFP", 46: "RRSIG", 47: "NSEC", 48: "DNSKEY", 50: "NSEC3",
	52: "TLSA", 59: "CDS", 60: "CDNSKEY", 61: "OPENPGPKEY", 64: "SVCB", 65: "HTTPS", 99: "SPF",
	249: "TKEY", 250: "TSIG", 251: "IXFR", 252: "AXFR", 255: "ANY", 256: "URI", 257: "CAA",
}

// typeName returns "A", "TXT", …, or "TYPE1234" (RFC 3597) for the others.
func typeName(t dnsmessage.Type) string {
	if n, ok := typeNames[t]; ok {
		return n
	}
	return "TYPE" + strconv.Itoa(int(t))
}

var rcodeNames = map[dnsmessage.RCode]string{
	0: "NOERROR", 1: "FORMERR", 2: "SERVFAIL", 3: "NXDOMAIN", 4: "NOTIMP", 5: "REFUSED", 16: "BADVERS",
}

// rcodeName returns "NXDOMAIN", …, or "RCODE12".
func rcodeName(r dnsmessage.RCode) string {
	if n, ok := rcodeNames[r]; ok {
		return n
	}
	return "RCODE" + strconv.Itoa(int(r))
}
