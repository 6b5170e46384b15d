package rules

import (
	"net/netip"
	"strings"
	"testing"
)

func TestParseHost(t *testing.T) {
	tests := []struct {
		host    string
		want    string // the address; "" for a name
		wantErr bool
	}{
		// IPv4 in every inet_aton spelling.
		{host: "127.0.0.1", want: "127.0.0.1"},
		{host: "127.0.0.1.", want: "127.0.0.1"},
		{host: "2130706433", want: "127.0.0.1"},
		{host: "0x7f000001", want: "127.0.0.1"},
		{host: "0X7F000001", want: "127.0.0.1"},
		{host: "017700000001", want: "127.0.0.1"},
		{host: "0177.0.0.1", want: "127.0.0.1"},
		{host: "0177.0.0.01", want: "127.0.0.1"},
		{host: "0x7f.1", want: "127.0.0.1"},
		{host: "0x7f.0.1", want: "127.0.0.1"},
		{host: "127.1", want: "127.0.0.1"},
		{host: "127.0.1", want: "127.0.0.1"},
		{host: "1.2.3", want: "1.2.0.3"},
		{host: "1.2.772", want: "1.2.3.4"},
		{host: "1.131844", want: "1.2.3.4"},
		{host: "0", want: "0.0.0.0"},
		{host: "00", want: "0.0.0.0"},
		{host: "0x0", want: "0.0.0.0"},
		{host: "4294967295", want: "255.255.255.255"},
		{host: "0xffffffff", want: "255.255.255.255"},
		{host: "169.254.43518", want: "169.254.169.254"},
		{host: "0xa9.0xfe.0xa9.0xfe", want: "169.254.169.254"},
		{host: "0251.0376.0251.0376", want: "169.254.169.254"},
		{host: "0x00000000000000a9.254.169.254", want: "169.254.169.254"},
		{host: "000000000000000000000000000000127.0.0.1", want: "87.0.0.1"}, // octal 0127
		// IPv6.
		{host: "::1", want: "::1"},
		{host: "[::1]", want: "::1"},
		{host: "[0:0:0:0:0:0:0:1]", want: "::1"},
		{host: "fe80::1%eth0", want: "fe80::1"},
		{host: "[fe80::1%25eth0]", want: "fe80::1"},
		{host: "::ffff:127.0.0.1", want: "127.0.0.1"},
		{host: "[::ffff:127.0.0.1]", want: "127.0.0.1"},
		{host: "::ffff:7f00:1", want: "127.0.0.1"},
		{host: "[::ffff:a9fe:a9fe]", want: "169.254.169.254"},
		{host: "2001:DB8::1", want: "2001:db8::1"},
		{host: "[1.2.3.4]", want: "1.2.3.4"},
		// Names.
		{host: "example.com"},
		{host: "Example.COM."},
		{host: "1.2.3.4.nip.io"},
		{host: "127.0.0.1.nip.io"},
		{host: "0x7f.example"},
		{host: "example.0x7fg"},
		{host: "_dmarc.example.com"},
		{host: "xn--bcher-kva.de"},
		{host: "localhost"},
		{host: "a-b.c-d"},
		{host: strings.Repeat("a", 63) + ".com"},
		{host: strings.Repeat("abcdefghi.", 25) + "abc"}, // 253
		// Errors.
		{host: "", wantErr: true},
		{host: ".", wantErr: true},
		{host: "999.1.1.1", wantErr: true},
		{host: "256.0.0.1", wantErr: true},
		{host: "1.2.3.256", wantErr: true},
		{host: "1.2.65536", wantErr: true},
		{host: "1.16777216", wantErr: true},
		{host: "4294967296", wantErr: true},
		{host: "0x100000000", wantErr: true},
		{host: "99999999999999999999999999", wantErr: true},
		{host: "1.2.3.4.5", wantErr: true},
		{host: "08.0.0.1", wantErr: true},
		{host: "0x", wantErr: true},
		{host: "1.0x", wantErr: true},
		{host: "1..2", wantErr: true},
		{host: "example.123", wantErr: true},
		{host: "foo.0x1f", wantErr: true},
		{host: "127.0.0.1..", wantErr: true},
		{host: ".example.com", wantErr: true},
		{host: "a..b", wantErr: true},
		{host: "exa mple.com", wantErr: true},
		{host: "127.0.0.1 ", wantErr: true},
		{host: " 127.0.0.1", wantErr: true},
		{host: "ex\x00ample.com", wantErr: true},
		{host: "ex\nample.com", wantErr: true},
		{host: "bücher.de", wantErr: true},
		{host: "１２７.０.０.１", wantErr: true},
		{host: "*.example.com", wantErr: true},
		{host: "example.com:80", wantErr: true},
		{host: "[::1", wantErr: true},
		{host: "[]", wantErr: true},
		{host: "[example.com]", wantErr: true},
		{host: "1::2::3", wantErr: true},
		{host: "::ffff:0x7f.1", wantErr: true},
		{host: "127%2e0%2e0%2e1", wantErr: true},
		{host: strings.Repeat("a", 64) + ".com", wantErr: true},
		{host: strings.Repeat("abcdefghi.", 25) + "abcd", wantErr: true}, // 254
	}
	for _, tc := range tests {
		a, isIP, err := ParseHost(tc.host)
		switch {
		case tc.wantErr:
			if err == nil {
				t.Errorf("ParseHost(%q) = %v, %v, nil; want an error", tc.host, a, isIP)
			}
		case err != nil:
			t.Errorf("ParseHost(%q) error %v", tc.host, err)
		case tc.want == "":
			if isIP {
				t.Errorf("ParseHost(%q) = %v, true; want a name", tc.host, a)
			}
		case !isIP || a != netip.MustParseAddr(tc.want):
			t.Errorf("ParseHost(%q) = %v, %v; want %s, true", tc.host, a, isIP, tc.want)
		}
	}
}
