package proxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"sbx.dev/sbx/internal/network/rules"
)

// fakeNet is the proxy's world in a test: names resolve to made-up public
// addresses, and dialling one reaches a loopback server standing in for it,
// which records what arrived.
type fakeNet struct {
	t       testing.TB
	p       *Proxy
	ln      net.Listener
	rules   atomic.Pointer[rules.Set]
	dst     atomic.Value // netip.AddrPort: the next connection's original destination
	names   map[string][]netip.Addr
	servers map[netip.AddrPort]string // made-up address → loopback server
	mu      sync.Mutex
	events  []Event
	dials   []string // made-up addresses dialled
	tlsSrv  *httptest.Server
	pool    *x509.CertPool
}

var (
	allowedIP = netip.MustParseAddr("198.18.1.10")
	blockedIP = netip.MustParseAddr("198.18.1.20")
	rawIP     = netip.MustParseAddr("198.18.1.30")
)

// newFakeNet starts a proxy over the fake net; each tweak changes its
// Config before it serves (a Config is not changed while it does).
func newFakeNet(t testing.TB, mode rules.Mode, allow, block []string, tweaks ...func(*Config)) *fakeNet {
	t.Helper()
	f := &fakeNet{t: t, names: map[string][]netip.Addr{
		"allowed.test":     {allowedIP},
		"blocked.test":     {blockedIP},
		"rebind.test":      {netip.MustParseAddr("127.0.0.1")},
		"meta.test":        {netip.MustParseAddr("169.254.169.254")},
		"www.allowed.test": {allowedIP},
	}, servers: map[netip.AddrPort]string{}}
	f.setRules(mode, allow, block)
	// HTTP servers for allowed and blocked, saying who they are and what Host came.
	for _, ip := range []netip.Addr{allowedIP, blockedIP} {
		name := map[netip.Addr]string{allowedIP: "allowed", blockedIP: "blocked"}[ip]
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			f.record("http " + name + " Host=" + r.Host + " " + r.URL.RequestURI())
			fmt.Fprintf(w, "hello from %s", name)
		}))
		t.Cleanup(s.Close)
		f.servers[netip.AddrPortFrom(ip, 80)] = s.Listener.Addr().String()
	}
	f.tlsSrv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.record("https Host=" + r.Host + " SNI=" + r.TLS.ServerName)
		fmt.Fprint(w, "hello over tls")
	}))
	f.tlsSrv.StartTLS()
	t.Cleanup(f.tlsSrv.Close)
	f.pool = x509.NewCertPool()
	f.pool.AddCert(f.tlsSrv.Certificate())
	for _, ip := range []netip.Addr{allowedIP, blockedIP} {
		f.servers[netip.AddrPortFrom(ip, 443)] = f.tlsSrv.Listener.Addr().String()
	}
	// A server that speaks first, like SSH.
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { raw.Close() })
	go func() {
		for {
			c, err := raw.Accept()
			if err != nil {
				return
			}
			f.record("raw connect")
			c.Write([]byte("SSH-2.0-fake\r\n"))
			c.Close()
		}
	}()
	f.servers[netip.AddrPortFrom(rawIP, 22)] = raw.Addr().String()

	cfg := Config{
		Policy: func(src netip.Addr) (Sandbox, bool) {
			if src != netip.MustParseAddr("127.0.0.1") {
				return Sandbox{}, false
			}
			return Sandbox{ID: "sb1", Rules: f.rules.Load()}, true
		},
		OriginalDst: func(net.Conn) (netip.AddrPort, error) { return f.dst.Load().(netip.AddrPort), nil },
		Gateway:     netip.MustParseAddr("10.213.0.1"), ExplicitPort: 3128,
		Resolve: func(_ context.Context, name string) ([]netip.Addr, error) {
			if a, ok := f.names[name]; ok {
				return a, nil
			}
			return nil, fmt.Errorf("%s: no such host", name)
		},
		Forbidden: rules.NewForbidden(netip.MustParsePrefix("10.213.0.0/16")),
		Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
			f.mu.Lock()
			f.dials = append(f.dials, addr)
			f.mu.Unlock()
			real, ok := f.servers[netip.MustParseAddrPort(addr)]
			if !ok {
				return nil, fmt.Errorf("dial %s: connection refused", addr)
			}
			var d net.Dialer
			return d.DialContext(ctx, network, real)
		},
		Log: func(e Event) {
			f.mu.Lock()
			f.events = append(f.events, e)
			f.mu.Unlock()
		},
		ServerFirst: 100 * time.Millisecond,
		FirstBytes:  500 * time.Millisecond,
	}
	for _, tweak := range tweaks {
		tweak(&cfg)
	}
	f.p = New(cfg)
	f.ln, err = net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go f.p.Serve(f.ln)
	t.Cleanup(func() { f.ln.Close(); f.p.Close() })
	return f
}

func (f *fakeNet) setRules(mode rules.Mode, allow, block []string) {
	s, err := rules.Compile(mode, allow, block)
	if err != nil {
		f.t.Fatal(err)
	}
	f.rules.Store(s)
}

func (f *fakeNet) record(s string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.events = append(f.events, Event{Proto: "server", Rule: s})
}

// seen lists what the servers recorded.
func (f *fakeNet) seen() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, e := range f.events {
		if e.Proto == "server" {
			out = append(out, e.Rule)
		}
	}
	return out
}

func (f *fakeNet) refusals() []Event {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []Event
	for _, e := range f.events {
		if e.Proto != "server" && !e.Allowed {
			out = append(out, e)
		}
	}
	return out
}

func (f *fakeNet) reset() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.events, f.dials = nil, nil
}

// connect opens a connection "to" dst, as a redirected sandbox flow.
func (f *fakeNet) connect(dst string) net.Conn {
	f.t.Helper()
	f.dst.Store(netip.MustParseAddrPort(dst))
	c, err := net.Dial("tcp", f.ln.Addr().String())
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { c.Close() })
	return c
}

// get sends one HTTP request on c and returns the status and body.
func get(t *testing.T, c net.Conn, req string) (int, string) {
	t.Helper()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestTransparentHTTP(t *testing.T) {
	f := newFakeNet(t, rules.Allowlist, []string{"allowed.test", "*.allowed.test"}, nil)

	// Control: an allowed Host reaches its server, Host intact.
	code, body := get(t, f.connect("198.18.1.10:80"), "GET /x HTTP/1.1\r\nHost: allowed.test\r\n\r\n")
	if code != 200 || body != "hello from allowed" {
		t.Fatalf("allowed.test: %d %q", code, body)
	}
	if s := f.seen(); len(s) != 1 || s[0] != "http allowed Host=allowed.test /x" {
		t.Fatalf("server saw %q", s)
	}

	for _, tc := range []struct{ name, dst, req, rule string }{
		{"blocked Host", "198.18.1.20:80", "GET / HTTP/1.1\r\nHost: blocked.test\r\n\r\n", "not in allowlist"},
		{"fronted Host to an allowed IP", "198.18.1.10:80", "GET / HTTP/1.1\r\nHost: blocked.test\r\n\r\n", "not in allowlist"},
		{"absolute URI to a blocked host", "198.18.1.10:80", "GET http://blocked.test/ HTTP/1.1\r\nHost: allowed.test\r\n\r\n", "not in allowlist"},
		{"raw IP Host", "198.18.1.10:80", "GET / HTTP/1.1\r\nHost: 198.18.1.10\r\n\r\n", "not in allowlist"},
		{"decimal IP Host", "198.18.1.10:80", "GET / HTTP/1.1\r\nHost: 3323068682\r\n\r\n", "not in allowlist"},
		{"loopback in hex", "198.18.1.10:80", "GET / HTTP/1.1\r\nHost: 0x7f000001\r\n\r\n", "loopback"},
		{"rebinding name", "198.18.1.10:80", "GET / HTTP/1.1\r\nHost: rebind.test\r\n\r\n", "not in allowlist"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f.reset()
			code, body := get(t, f.connect(tc.dst), tc.req)
			if code != http.StatusForbidden || !strings.Contains(body, tc.rule) {
				t.Errorf("got %d %q, want 403 naming %q", code, body, tc.rule)
			}
			if s := f.seen(); len(s) != 0 {
				t.Errorf("a server saw %q", s)
			}
			if r := f.refusals(); len(r) != 1 || r[0].Sandbox != "sb1" || !strings.Contains(r[0].Rule, tc.rule) {
				t.Errorf("refusals logged: %+v", r)
			}
		})
	}

	// An absolute URI's host is the one judged and sent, whatever the Host
	// header says (RFC 9112 §3.2.2): no fronting through the header.
	f.reset()
	code, body = get(t, f.connect("198.18.1.10:80"), "GET http://allowed.test/a HTTP/1.1\r\nHost: blocked.test\r\n\r\n")
	if code != 200 || body != "hello from allowed" {
		t.Errorf("absolute URI to allowed.test with Host blocked.test: %d %q", code, body)
	}
	if s := f.seen(); len(s) != 1 || s[0] != "http allowed Host=allowed.test /a" {
		t.Errorf("server saw %q", s)
	}

	// Each request on a kept-alive connection is judged: the second, to a
	// blocked Host, is refused.
	f.reset()
	c := f.connect("198.18.1.10:80")
	if code, _ := get(t, c, "GET /1 HTTP/1.1\r\nHost: allowed.test\r\n\r\n"); code != 200 {
		t.Fatalf("first request: %d", code)
	}
	if code, _ := get(t, c, "GET /2 HTTP/1.1\r\nHost: blocked.test\r\n\r\n"); code != 403 {
		t.Fatalf("second request: %d, want 403", code)
	}
}

func TestRebindingRefused(t *testing.T) {
	f := newFakeNet(t, rules.Allowlist, []string{"rebind.test", "meta.test", "allowed.test"}, nil)
	for _, host := range []string{"rebind.test", "meta.test"} {
		f.reset()
		code, body := get(t, f.connect("198.18.1.10:80"), "GET / HTTP/1.1\r\nHost: "+host+"\r\n\r\n")
		if code != 403 || !strings.Contains(body, "resolves to") {
			t.Errorf("%s: %d %q, want 403 (resolves to a forbidden address)", host, code, body)
		}
		if len(f.dials) != 0 {
			t.Errorf("%s: dialled %v", host, f.dials)
		}
	}
}

func tlsClient(t *testing.T, f *fakeNet, c net.Conn, sni string) error {
	tc := tls.Client(c, &tls.Config{ServerName: sni, RootCAs: f.pool, InsecureSkipVerify: true})
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if err := tc.Handshake(); err != nil {
		return err
	}
	fmt.Fprintf(tc, "GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", sni)
	resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	io.ReadAll(resp.Body)
	return nil
}

func TestTransparentTLS(t *testing.T) {
	f := newFakeNet(t, rules.Allowlist, []string{"allowed.test"}, nil)
	if err := tlsClient(t, f, f.connect("198.18.1.10:443"), "allowed.test"); err != nil {
		t.Fatalf("control: TLS to allowed.test: %v", err)
	}
	if s := f.seen(); len(s) != 1 || s[0] != "https Host=allowed.test SNI=allowed.test" {
		t.Fatalf("server saw %q", s)
	}
	// SNI blocked.test, even sent to allowed.test's address.
	for _, dst := range []string{"198.18.1.20:443", "198.18.1.10:443"} {
		f.reset()
		if err := tlsClient(t, f, f.connect(dst), "blocked.test"); err == nil {
			t.Errorf("TLS with SNI blocked.test to %s went through", dst)
		}
		if s := f.seen(); len(s) != 0 {
			t.Errorf("server saw %q", s)
		}
		if len(f.dials) != 0 {
			t.Errorf("dialled %v", f.dials)
		}
	}
}

func TestRawTCP(t *testing.T) {
	f := newFakeNet(t, rules.Allowlist, []string{"allowed.test"}, nil)
	read := func(c net.Conn) string {
		c.SetDeadline(time.Now().Add(3 * time.Second))
		b, _ := io.ReadAll(c)
		return string(b)
	}
	if got := read(f.connect("198.18.1.30:22")); got != "" {
		t.Errorf("raw TCP to an address not listed: read %q", got)
	}
	if s := f.seen(); len(s) != 0 {
		t.Errorf("server saw %q", s)
	}
	// Control: the same with its CIDR listed; the server speaks first.
	f.setRules(rules.Allowlist, []string{"198.18.1.0/24"}, nil)
	if got := read(f.connect("198.18.1.30:22")); got != "SSH-2.0-fake\r\n" {
		t.Errorf("raw TCP to a listed CIDR: read %q", got)
	}
	// full: anything not forbidden; forbidden never.
	f.setRules(rules.Full, nil, nil)
	f.reset()
	if got := read(f.connect("198.18.1.30:22")); got != "SSH-2.0-fake\r\n" {
		t.Errorf("full: read %q", got)
	}
	for _, dst := range []string{"169.254.169.254:80", "127.0.0.1:22", "10.213.0.7:22", "10.213.0.1:22"} {
		f.reset()
		read(f.connect(dst))
		if len(f.dials) != 0 || len(f.refusals()) != 1 {
			t.Errorf("full, %s: dials %v, refusals %+v", dst, f.dials, f.refusals())
		}
	}
}

func TestExplicitProxy(t *testing.T) {
	f := newFakeNet(t, rules.Allowlist, []string{"allowed.test"}, nil)
	connectTo := func(target string) (net.Conn, int) {
		c := f.connect("10.213.0.1:3128")
		c.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"})
		if err != nil {
			t.Fatal(err)
		}
		return c, resp.StatusCode
	}
	c, code := connectTo("allowed.test:443")
	if code != 200 {
		t.Fatalf("CONNECT allowed.test: %d", code)
	}
	if err := tlsClient(t, f, c, "allowed.test"); err != nil {
		t.Fatalf("TLS in the tunnel: %v", err)
	}
	// SNI blocked.test inside a tunnel to allowed.test.
	f.reset()
	c, code = connectTo("allowed.test:443")
	if code != 200 {
		t.Fatalf("CONNECT: %d", code)
	}
	if err := tlsClient(t, f, c, "blocked.test"); err == nil {
		t.Error("fronted SNI inside the tunnel went through")
	}
	if s := f.seen(); len(s) != 0 {
		t.Errorf("server saw %q", s)
	}
	if r := f.refusals(); len(r) != 1 || !strings.Contains(r[0].Rule, "differs from the CONNECT target") {
		t.Errorf("refusals %+v", r)
	}
	// CONNECT to a blocked name: 403, nothing dialled.
	f.reset()
	if _, code := connectTo("blocked.test:443"); code != 403 {
		t.Errorf("CONNECT blocked.test: %d", code)
	}
	if len(f.dials) != 0 {
		t.Errorf("dialled %v", f.dials)
	}
	// Absolute-form HTTP through the proxy port.
	f.reset()
	code2, body := get(t, f.connect("10.213.0.1:3128"), "GET http://allowed.test/p HTTP/1.1\r\nHost: allowed.test\r\n\r\n")
	if code2 != 200 || body != "hello from allowed" {
		t.Errorf("absolute-form: %d %q", code2, body)
	}
	// Another gateway port: refused.
	f.reset()
	code3, _ := get(t, f.connect("10.213.0.1:8080"), "GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n")
	if code3 == 200 || len(f.refusals()) != 1 {
		t.Errorf("gateway port 8080: %d, refusals %+v", code3, f.refusals())
	}
	// Through Go's own proxy support (HTTPS_PROXY), end to end.
	f.reset()
	proxyURL, _ := url.Parse("http://proxy")
	tr := &http.Transport{
		Proxy: http.ProxyURL(proxyURL),
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			f.dst.Store(netip.MustParseAddrPort("10.213.0.1:3128"))
			var d net.Dialer
			return d.DialContext(ctx, "tcp", f.ln.Addr().String())
		},
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true},
	}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Get("https://allowed.test/")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "hello over tls" {
		t.Errorf("via HTTPS_PROXY: %q", b)
	}
}

func TestUnknownSourceAndCut(t *testing.T) {
	f := newFakeNet(t, rules.Full, nil, nil)
	// A source the policy does not know gets nothing.
	f.dst.Store(netip.MustParseAddrPort("198.18.1.10:80"))
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}
	c, err := d.Dial("tcp", f.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	code, _ := get(t, c, "GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n")
	c.Close()
	if code != 0 || len(f.dials) != 0 {
		t.Errorf("unknown source: %d, dials %v", code, f.dials)
	}
	// Cut ends an open connection.
	c = f.connect("198.18.1.10:80")
	if code, _ := get(t, c, "GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n"); code != 200 {
		t.Fatal(code)
	}
	for deadline := time.Now().Add(2 * time.Second); f.p.Open("sb1") == 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	f.p.Cut("sb1")
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("after Cut, read: %v, want EOF", err)
	}
}

func TestConnectionCap(t *testing.T) {
	f := newFakeNet(t, rules.Full, nil, nil, func(c *Config) { c.MaxConns = 3 })
	var held []net.Conn
	for range 3 {
		c := f.connect("198.18.1.10:80")
		held = append(held, c)
	}
	for deadline := time.Now().Add(2 * time.Second); f.p.Open("sb1") < 3 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	code, _ := get(t, f.connect("198.18.1.10:80"), "GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n")
	if code != 0 {
		t.Errorf("a 4th connection over a cap of 3 got %d", code)
	}
	held[0].Close()
	for deadline := time.Now().Add(2 * time.Second); f.p.Open("sb1") >= 3 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if code, _ := get(t, f.connect("198.18.1.10:80"), "GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n"); code != 200 {
		t.Errorf("under the cap again: %d", code)
	}
}

// BenchmarkHTTPStream moves 256 MiB over HTTP through the proxy, loopback
// on both sides: the proxy's own cost per byte.
func BenchmarkHTTPStream(b *testing.B) {
	const n = 256 << 20
	chunk := make([]byte, 1<<20)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", fmt.Sprint(n))
		for left := n; left > 0; left -= len(chunk) {
			w.Write(chunk)
		}
	}))
	defer up.Close()
	f := newFakeNet(b, rules.Full, nil, nil)
	f.servers[netip.AddrPortFrom(allowedIP, 80)] = up.Listener.Addr().String()
	b.SetBytes(n)
	for b.Loop() {
		c := f.connect("198.18.1.10:80")
		fmt.Fprint(c, "GET / HTTP/1.1\r\nHost: allowed.test\r\nConnection: close\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReaderSize(c, 256<<10), nil)
		if err != nil {
			b.Fatal(err)
		}
		if k, err := io.Copy(io.Discard, resp.Body); err != nil || k != n {
			b.Fatal(k, err)
		}
		c.Close()
	}
}

// TestForward covers the plain-HTTP forwarder: a body of known length comes
// back whole (spliced), HEAD keeps its Content-Length and has no body, a
// body of unknown length streams as it comes, and requests on one kept-alive
// connection share one upstream connection.
func TestForward(t *testing.T) {
	f := newFakeNet(t, rules.Allowlist, []string{"allowed.test"}, nil)
	big := make([]byte, 8<<20+123)
	rand.Read(big)
	release := make(chan struct{})
	var mu sync.Mutex
	upConns := 0
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/big":
			w.Header().Set("Content-Length", fmt.Sprint(len(big)))
			if r.Method != http.MethodHead {
				w.Write(big)
			}
		case "/stream":
			w.Write([]byte("first\n"))
			w.(http.Flusher).Flush()
			<-release
			w.Write([]byte("second\n"))
		default:
			fmt.Fprint(w, "ok")
		}
	}))
	up.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			mu.Lock()
			upConns++
			mu.Unlock()
		}
	}
	up.Start()
	defer up.Close()
	f.servers[netip.AddrPortFrom(allowedIP, 80)] = up.Listener.Addr().String()

	c := f.connect("198.18.1.10:80")
	c.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	do := func(req string) *http.Response {
		t.Helper()
		io.WriteString(c, req)
		resp, err := http.ReadResponse(br, &http.Request{Method: strings.Fields(req)[0]})
		if err != nil {
			t.Fatalf("%q: %v", req, err)
		}
		return resp
	}
	resp := do("GET /big HTTP/1.1\r\nHost: allowed.test\r\n\r\n")
	got, _ := io.ReadAll(resp.Body)
	if !bytes.Equal(got, big) || resp.ContentLength != int64(len(big)) {
		t.Fatalf("big body: %d bytes (Content-Length %d), want %d, equal %v", len(got), resp.ContentLength, len(big), bytes.Equal(got, big))
	}
	resp = do("HEAD /big HTTP/1.1\r\nHost: allowed.test\r\n\r\n")
	if resp.ContentLength != int64(len(big)) {
		t.Errorf("HEAD: Content-Length %d", resp.ContentLength)
	}
	resp = do("GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n")
	if b, _ := io.ReadAll(resp.Body); string(b) != "ok" {
		t.Errorf("small: %q", b)
	}
	mu.Lock()
	if upConns != 1 {
		t.Errorf("three requests on one connection used %d upstream connections, want 1", upConns)
	}
	mu.Unlock()
	resp = do("GET /stream HTTP/1.1\r\nHost: allowed.test\r\n\r\n")
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	close(release)
	if err != nil || line != "first\n" {
		t.Errorf("a streamed body's first line before the rest was written: %q, %v", line, err)
	}
}
