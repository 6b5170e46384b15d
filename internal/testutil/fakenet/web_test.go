package fakenet

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// TestWebServers fetches each site over HTTP and HTTPS (verified against
// CAPool, with SNI) from the host namespace, by name and over IPv6, and checks
// the right server answered and logged the host, SNI and addresses.
func TestWebServers(t *testing.T) {
	n := New(t)
	c := n.HTTPClient(n.HostNS)
	tests := []struct {
		url   string
		host  string
		local netip.AddrPort
		tls   bool
	}{
		{"http://allowed.test/", AllowedName, netip.AddrPortFrom(AllowedAddr, 80), false},
		{"https://allowed.test/", AllowedName, netip.AddrPortFrom(AllowedAddr, 443), true},
		{"https://www.allowed.test/", "www.allowed.test", netip.AddrPortFrom(AllowedAddr, 443), true},
		{"http://blocked.test/", BlockedName, netip.AddrPortFrom(BlockedAddr, 80), false},
		{"https://blocked.test/", BlockedName, netip.AddrPortFrom(BlockedAddr, 443), true},
		{"http://evil.test/", EvilName, netip.AddrPortFrom(EvilAddr, 80), false},
		{"https://evil.test/", EvilName, netip.AddrPortFrom(EvilAddr, 443), true},
		{"http://[2001:db8:1::10]/", "2001:db8:1::10", netip.AddrPortFrom(AllowedAddr6, 80), false},
		{"https://[2001:db8:1::10]/", "2001:db8:1::10", netip.AddrPortFrom(AllowedAddr6, 443), true},
		{"https://[2001:db8:1::20]/", "2001:db8:1::20", netip.AddrPortFrom(BlockedAddr6, 443), true},
		{"https://198.18.1.30/", "198.18.1.30", netip.AddrPortFrom(EvilAddr, 443), true},
	}
	for _, tc := range tests {
		t.Run(tc.url, func(t *testing.T) {
			n.Reset()
			resp, body := get(t, c, "GET", tc.url+"some/path?q=1", nil, nil)
			if resp.StatusCode != http.StatusOK || body != "hello from "+tc.host {
				t.Errorf("got %d %q, want 200 %q", resp.StatusCode, body, "hello from "+tc.host)
			}
			if (resp.TLS != nil) != tc.tls {
				t.Errorf("TLS %v, want %v", resp.TLS != nil, tc.tls)
			}
			reqs := n.HTTPRequests(tc.host)
			if len(reqs) != 1 {
				t.Fatalf("HTTPRequests(%s) = %v, want one\n%s", tc.host, reqs, dump(n))
			}
			e := reqs[0]
			if e.Local != tc.local || !e.Remote.Addr().IsValid() || e.Method != "GET" || e.Path != "/some/path?q=1" || e.TLS != tc.tls {
				t.Errorf("logged %v; want GET /some/path?q=1 at %s, TLS %v", e, tc.local, tc.tls)
			}
			if e.Header.Get("User-Agent") == "" {
				t.Errorf("logged headers %v lack User-Agent", e.Header)
			}
			if n.Connects(tc.local) != 1 {
				t.Errorf("Connects(%s) = %d, want 1", tc.local, n.Connects(tc.local))
			}
			if !tc.tls {
				return
			}
			// An IP literal is not sent as SNI.
			sni := tc.host
			if _, err := netip.ParseAddr(tc.host); err == nil {
				sni = ""
			}
			if e.SNI != sni {
				t.Errorf("request logged SNI %q, want %q", e.SNI, sni)
			}
			if h := n.TLSHellos(sni); len(h) != 1 || h[0].Local != tc.local {
				t.Errorf("TLSHellos(%q) = %v, want one at %s", sni, h, tc.local)
			}
		})
	}
	c.CloseIdleConnections()
}

// TestTLSHelloLoggedWhenHandshakeFails checks the hello is logged with its SNI
// even when the client then rejects the certificate, and that a client trusting
// only CAPool verifies each certificate name.
func TestTLSHelloLoggedWhenHandshakeFails(t *testing.T) {
	n := New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tests := []struct {
		addr   netip.Addr
		sni    string
		roots  bool
		wantOK bool
	}{
		{AllowedAddr, AllowedName, true, true},
		{AllowedAddr, "x.allowed.test", true, true},
		{AllowedAddr, BlockedName, true, true}, // fronting: one certificate serves every name
		{AllowedAddr, MetaName, true, false},   // not in the certificate
		{BlockedAddr6, BlockedName, false, false},
		{EvilAddr, "", true, true}, // no SNI: verified against the address instead
	}
	for _, tc := range tests {
		n.Reset()
		raw, err := n.Dial(ctx, n.HostNS, "tcp", netip.AddrPortFrom(tc.addr, 443).String())
		if err != nil {
			t.Fatal(err)
		}
		cfg := &tls.Config{ServerName: tc.sni, RootCAs: n.CAPool}
		if !tc.roots {
			cfg.RootCAs = x509.NewCertPool()
		}
		if tc.sni == "" {
			// Go's client sends no SNI for an IP, but wants a name to verify:
			// verify the address by hand.
			cfg.InsecureSkipVerify = true
			cfg.VerifyPeerCertificate = func(raw [][]byte, _ [][]*x509.Certificate) error {
				cert, err := x509.ParseCertificate(raw[0])
				if err != nil {
					return err
				}
				_, err = cert.Verify(x509.VerifyOptions{DNSName: tc.addr.String(), Roots: n.CAPool})
				return err
			}
		}
		conn := tls.Client(raw, cfg)
		err = conn.HandshakeContext(ctx)
		conn.Close()
		if (err == nil) != tc.wantOK {
			t.Errorf("handshake with %s at %s: %v, want success %v", tc.sni, tc.addr, err, tc.wantOK)
		}
		e := waitFor(t, n, "the hello", Is(KindTLS))
		if e.Name != tc.sni || e.Local != netip.AddrPortFrom(tc.addr, 443) {
			t.Errorf("logged %v, want a hello for %q at %s", e, tc.sni, tc.addr)
		}
	}
}

// TestWebPaths exercises /echo, /big, /upload, /redirect and /ws.
func TestWebPaths(t *testing.T) {
	n := New(t)
	c := n.HTTPClient(n.HostNS)
	defer c.CloseIdleConnections()

	t.Run("echo", func(t *testing.T) {
		resp, body := get(t, c, "GET", "https://allowed.test/echo", nil, http.Header{"Authorization": {"Bearer s3cret"}, "X-Extra": {"a", "b"}})
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d", resp.StatusCode)
		}
		var h http.Header
		if err := json.Unmarshal([]byte(body), &h); err != nil {
			t.Fatalf("decoding %q: %v", body, err)
		}
		if h.Get("Authorization") != "Bearer s3cret" || strings.Join(h["X-Extra"], ",") != "a,b" || h.Get("Host") != AllowedName {
			t.Errorf("echoed %v", h)
		}
		if e := n.HTTPRequests(AllowedName); len(e) == 0 || e[len(e)-1].Header.Get("Authorization") != "Bearer s3cret" {
			t.Errorf("the log lacks the request's Authorization header: %v", e)
		}
	})
	t.Run("big", func(t *testing.T) {
		for _, size := range []int{0, 1, 255, 256, 100_000, 3 << 20} {
			resp, body := get(t, c, "GET", "http://allowed.test/big?n="+strconv.Itoa(size), nil, nil)
			if resp.StatusCode != http.StatusOK || body != string(BigBody(size)) {
				t.Errorf("/big?n=%d: %d, %d bytes, want %d matching BigBody", size, resp.StatusCode, len(body), size)
			}
		}
		if resp, _ := get(t, c, "GET", "http://allowed.test/big?n=-1", nil, nil); resp.StatusCode != http.StatusBadRequest {
			t.Errorf("/big?n=-1: %d, want 400", resp.StatusCode)
		}
	})
	t.Run("upload", func(t *testing.T) {
		data := bytes.Repeat([]byte("upload me "), 500_000)
		sum := sha256.Sum256(data)
		resp, body := get(t, c, "PUT", "https://blocked.test/upload", bytes.NewReader(data), nil)
		if resp.StatusCode != http.StatusOK || body != hex.EncodeToString(sum[:]) {
			t.Errorf("upload: %d %q, want %x", resp.StatusCode, body, sum)
		}
	})
	t.Run("redirect", func(t *testing.T) {
		resp, _ := get(t, c, "GET", "https://allowed.test/redirect?to=https://blocked.test/echo", nil, nil)
		if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != "https://blocked.test/echo" {
			t.Errorf("redirect: %d to %q", resp.StatusCode, resp.Header.Get("Location"))
		}
	})
	t.Run("ws", func(t *testing.T) {
		for _, u := range []string{"ws://allowed.test/ws", "wss://allowed.test/ws"} {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			ws, _, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPClient: c})
			if err != nil {
				cancel()
				t.Fatalf("dialing %s: %v", u, err)
			}
			for _, msg := range []string{"one", "two"} {
				if err := ws.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
					t.Fatal(err)
				}
				typ, got, err := ws.Read(ctx)
				if err != nil || typ != websocket.MessageText || string(got) != msg {
					t.Errorf("%s echoed %v %q %v, want %q", u, typ, got, err, msg)
				}
			}
			ws.Close(websocket.StatusNormalClosure, "")
			cancel()
		}
	})
}

// TestHostMismatchIsLoggedByHost checks a request for blocked.test sent to
// allowed.test's address is logged under blocked.test at allowed.test's
// address: the shape NW-05's checks read.
func TestHostMismatchIsLoggedByHost(t *testing.T) {
	n := New(t)
	c := n.HTTPClient(n.HostNS)
	defer c.CloseIdleConnections()
	req, _ := http.NewRequest("GET", "http://198.18.1.10/", nil)
	req.Host = BlockedName
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := n.HTTPRequests(BlockedName); len(got) != 1 || got[0].Local.Addr() != AllowedAddr {
		t.Errorf("HTTPRequests(blocked.test) = %v, want one at %s", got, AllowedAddr)
	}
	if got := n.HTTPRequests(AllowedName); len(got) != 0 {
		t.Errorf("HTTPRequests(allowed.test) = %v, want none", got)
	}
}

// TestMetadata checks the metadata service on each of its addresses: the v1
// GET, the v2 token flow, a wrong token, and that every request is logged.
func TestMetadata(t *testing.T) {
	n := New(t)
	c := n.HTTPClient(n.HostNS)
	defer c.CloseIdleConnections()
	for _, a := range []netip.Addr{MetadataAddr, MetadataAddr6, MetadataAlibabaAddr, MetadataECSAddr} {
		t.Run(a.String(), func(t *testing.T) {
			n.Reset()
			base := "http://" + netip.AddrPortFrom(a, 80).String()
			resp, body := get(t, c, "GET", base+"/latest/meta-data/", nil, nil)
			if resp.StatusCode != http.StatusOK || !strings.Contains(body, "iam/") {
				t.Errorf("GET meta-data: %d %q", resp.StatusCode, body)
			}
			resp, token := get(t, c, "PUT", base+"/latest/api/token", nil, http.Header{"X-Aws-Ec2-Metadata-Token-Ttl-Seconds": {"60"}})
			if resp.StatusCode != http.StatusOK || token == "" {
				t.Fatalf("PUT token: %d %q", resp.StatusCode, token)
			}
			resp, body = get(t, c, "GET", base+"/latest/meta-data/iam/security-credentials/"+MetadataRole, nil, http.Header{"X-Aws-Ec2-Metadata-Token": {token}})
			if resp.StatusCode != http.StatusOK || !strings.Contains(body, MetadataSecret) {
				t.Errorf("GET credentials with the token: %d %q", resp.StatusCode, body)
			}
			if resp, _ := get(t, c, "GET", base+"/latest/meta-data/", nil, http.Header{"X-Aws-Ec2-Metadata-Token": {"wrong"}}); resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("GET with a wrong token: %d, want 401", resp.StatusCode)
			}
			if resp, _ := get(t, c, "PUT", base+"/latest/api/token", nil, nil); resp.StatusCode != http.StatusBadRequest {
				t.Errorf("PUT token without a TTL: %d, want 400", resp.StatusCode)
			}
			reqs := n.MetadataRequests()
			want := []string{"GET /latest/meta-data/ 200", "PUT /latest/api/token 200", "GET /latest/meta-data/iam/security-credentials/" + MetadataRole + " 200",
				"GET /latest/meta-data/ 401", "PUT /latest/api/token 400"}
			var got []string
			for _, e := range reqs {
				if e.Local != netip.AddrPortFrom(a, 80) {
					t.Errorf("logged at %s, want %s", e.Local, netip.AddrPortFrom(a, 80))
				}
				got = append(got, e.Method+" "+e.Path+" "+e.Detail)
			}
			if strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Errorf("logged\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
			if len(n.Events(Is(KindHTTP))) != 0 {
				t.Errorf("metadata requests logged as web requests too")
			}
		})
	}
}
