package proxy

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"sbx.dev/sbx/internal/network/rules"
	"sbx.dev/sbx/internal/testutil"
)

// testCA issues certificates for tests: one CA, leaves on demand.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testCA{cert: cert, key: key, pool: pool}
}

func (c *testCA) leaf(host string) (*tls.Certificate, error) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: host}, DNSNames: []string{host},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, &key.PublicKey, c.key)
	if err != nil {
		return nil, err
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}

// fakeSecrets holds one proxy-mode secret of sandbox sb1 for allowed.test.
type fakeSecrets struct{}

const (
	testPlaceholder = "PLACEHOLDER-1"
	testSecret      = "the-real-token"
)

func (fakeSecrets) Intercept(id, host string) bool { return id == "sb1" && host == "allowed.test" }

func (fakeSecrets) Rewrite(id, host string, h http.Header, secure bool) (left []string) {
	for k, vs := range h {
		for i, v := range vs {
			if !strings.Contains(v, testPlaceholder) {
				continue
			}
			if id == "sb1" && host == "allowed.test" && secure {
				h[k][i] = strings.ReplaceAll(v, testPlaceholder, testSecret)
			} else {
				left = append(left, fmt.Sprintf("left for %s (secure %v)", host, secure))
			}
		}
	}
	return left
}

// TestIntercept: TLS to a host a proxy-mode secret names is terminated with
// the proxy's certificate, the placeholder is swapped for the value in the
// request's headers, and the request goes on over TLS verified against the
// upstream's certificate. Elsewhere, and over plain HTTP, it is not.
func TestIntercept(t *testing.T) {
	upstreamCA, proxyCA := newTestCA(t), newTestCA(t)
	f := newFakeNet(t, rules.Allowlist, []string{"allowed.test", "www.allowed.test"}, nil, func(c *Config) {
		c.Secrets, c.Leaf, c.UpstreamRoots = fakeSecrets{}, proxyCA.leaf, upstreamCA.pool
	})
	var mu sync.Mutex
	var seen []string
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Host+" "+r.Header.Get("Authorization"))
		mu.Unlock()
		if r.URL.Path == "/duplex" {
			testutil.EarlyAnswer().ServeHTTP(w, r)
			return
		}
		fmt.Fprint(w, "ok")
	}))
	leaf, _ := upstreamCA.leaf("allowed.test")
	up.TLS = &tls.Config{Certificates: []tls.Certificate{*leaf}}
	up.StartTLS()
	defer up.Close()
	f.servers[netip.AddrPortFrom(allowedIP, 443)] = up.Listener.Addr().String()

	tlsGet := func(c net.Conn, sni string) (string, error) {
		tc := tls.Client(c, &tls.Config{ServerName: sni, RootCAs: proxyCA.pool})
		tc.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprintf(tc, "GET / HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nConnection: close\r\n\r\n", sni, testPlaceholder)
		resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.Status + " " + string(b), nil
	}
	// Transparent TLS to allowed.test: the client verifies the proxy's CA.
	if got, err := tlsGet(f.connect("198.18.1.10:443"), "allowed.test"); err != nil || !strings.HasPrefix(got, "200") {
		t.Fatalf("intercepted request: %q, %v", got, err)
	}
	// Through a CONNECT tunnel, the same.
	c := f.connect("10.213.0.1:3128")
	fmt.Fprint(c, "CONNECT allowed.test:443 HTTP/1.1\r\nHost: allowed.test:443\r\n\r\n")
	br := bufio.NewReader(c)
	if resp, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"}); err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %v %v", resp, err)
	}
	if got, err := tlsGet(c, "allowed.test"); err != nil || !strings.HasPrefix(got, "200") {
		t.Fatalf("intercepted request in a tunnel: %q, %v", got, err)
	}
	mu.Lock()
	if len(seen) != 2 || seen[0] != "allowed.test Bearer "+testSecret || seen[1] != seen[0] {
		t.Errorf("upstream saw %q, want the secret twice", seen)
	}
	seen = nil
	mu.Unlock()

	// An upstream answering before it has the whole request body (a
	// stream's server) still gets the rest, and the sandbox the whole
	// answer: the intercepted path is full duplex.
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			f.dst.Store(netip.MustParseAddrPort("198.18.1.10:443"))
			var d net.Dialer
			return d.DialContext(ctx, "tcp", f.ln.Addr().String())
		},
		TLSClientConfig: &tls.Config{ServerName: "allowed.test", RootCAs: proxyCA.pool},
	}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequest("POST", "https://allowed.test/duplex", nil)
	if err != nil {
		t.Fatal(err)
	}
	testutil.CheckFullDuplex(t, &http.Client{Transport: tr}, req)
	mu.Lock()
	seen = nil
	mu.Unlock()

	// A host the secret does not name is passed through untouched: the
	// client sees the upstream's own certificate, the placeholder stays.
	f.names["www.allowed.test"] = []netip.Addr{allowedIP}
	leaf2, _ := upstreamCA.leaf("www.allowed.test")
	up.TLS.Certificates = append(up.TLS.Certificates, *leaf2)
	tc := tls.Client(f.connect("198.18.1.10:443"), &tls.Config{ServerName: "www.allowed.test", RootCAs: upstreamCA.pool})
	tc.SetDeadline(time.Now().Add(5 * time.Second))
	if err := tc.Handshake(); err != nil {
		t.Errorf("a host without secrets: TLS not passed through: %v", err)
	}
	tc.Close()

	// Plain HTTP to the secret's host: not substituted, and logged.
	f.reset()
	code, _ := get(t, f.connect("198.18.1.10:80"), "GET / HTTP/1.1\r\nHost: allowed.test\r\nAuthorization: Bearer "+testPlaceholder+"\r\n\r\n")
	if code != 200 {
		t.Errorf("plain HTTP: %d", code)
	}
	if s := f.seen(); len(s) != 1 || strings.Contains(s[0], testSecret) {
		t.Errorf("plain HTTP server saw %q", s)
	}
	if r := f.refusals(); len(r) != 1 || !strings.Contains(r[0].Rule, "secure false") {
		t.Errorf("refusals: %+v", r)
	}
	// The secret never reached the sandbox's side: the responses above are
	// the upstream's, and no event holds it.
	for _, e := range f.events {
		if strings.Contains(e.Rule, testSecret) || strings.Contains(e.Dst, testSecret) {
			t.Errorf("an event holds the secret: %+v", e)
		}
	}
	// A fronted request inside an intercepted connection is refused.
	tc = tls.Client(f.connect("198.18.1.10:443"), &tls.Config{ServerName: "allowed.test", RootCAs: proxyCA.pool})
	tc.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(tc, "GET / HTTP/1.1\r\nHost: blocked.test\r\nAuthorization: Bearer %s\r\n\r\n", testPlaceholder)
	if resp, err := http.ReadResponse(bufio.NewReader(tc), nil); err != nil || resp.StatusCode != 403 {
		t.Errorf("Host blocked.test inside TLS to allowed.test: %v %v, want 403", resp, err)
	}
}
