package httpapi

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"sbx.dev/sbx/api/openapi"
	"sbx.dev/sbx/internal/manager"
	"sbx.dev/sbx/internal/sandbox"
	"sbx.dev/sbx/internal/server/e2bapi"
	"sbx.dev/sbx/internal/testutil"
)

func TestParsePreviewHost(t *testing.T) {
	id := sandbox.NewID()
	p := newPreview(PreviewOptions{})
	q := newPreview(PreviewOptions{Domain: "Preview.Example.com."})
	for _, c := range []struct {
		p    preview
		host string
		port int
		ok   bool
	}{
		{p, "8000-" + string(id) + ".localhost", 8000, true},
		{p, "8000-" + string(id) + ".localhost:7070", 8000, true},
		{p, "8000-" + strings.ToUpper(string(id)) + ".LOCALHOST.:7070", 8000, true},
		{p, "1-" + string(id) + ".localhost", 1, true},
		{p, "70000-" + string(id) + ".localhost", 70000, true}, // out of range: the proxy's 502
		{p, "0-" + string(id) + ".localhost", 0, true},
		{p, "1234567890-" + string(id) + ".localhost", 0, false}, // too many digits
		{p, "abc-" + string(id) + ".localhost", 0, false},
		{p, "-" + string(id) + ".localhost", 0, false},
		{p, "8000" + string(id) + ".localhost", 0, false},
		{p, "8000-" + string(id)[:25] + ".localhost", 0, false}, // not an id
		{p, "8000-" + string(id) + "x.localhost", 0, false},
		{p, "8000-" + string(id) + ".localhost.evil", 0, false},
		{p, "x.8000-" + string(id) + ".localhost", 0, false},
		{p, "8000-" + string(id) + "localhost", 0, false},
		{p, "localhost:7070", 0, false},
		{p, "127.0.0.1:7070", 0, false},
		{p, "[::1]:7070", 0, false},
		{p, "", 0, false},
		{q, "3000-" + string(id) + ".preview.example.com", 3000, true},
		{q, "3000-" + string(id) + ".localhost", 0, false},
	} {
		gotID, port, ok := c.p.parseHost(c.host)
		if ok != c.ok || port != c.port || (ok && gotID != id) {
			t.Errorf("parseHost(%q) under %s = %s, %d, %v; want %s, %d, %v", c.host, c.p.domain, gotID, port, ok, id, c.port, c.ok)
		}
	}
}

func TestPreviewURLs(t *testing.T) {
	id := sandbox.ID("abcdefghijklmnopqrstuvwxyz")
	acc := manager.PortAccess{Token: "tok", Public: true}
	for _, c := range []struct {
		opts         PreviewOptions
		url, pathURL string
	}{
		{PreviewOptions{Listen: "127.0.0.1:7070"}, "http://8000-" + string(id) + ".localhost:7070/", "http://127.0.0.1:7070/v1/sandboxes/" + string(id) + "/proxy/8000/"},
		{PreviewOptions{Listen: "0.0.0.0:80"}, "http://8000-" + string(id) + ".localhost/", "http://localhost:80/v1/sandboxes/" + string(id) + "/proxy/8000/"},
		{PreviewOptions{Listen: "[::1]:7070", Domain: "sbx.test"}, "http://8000-" + string(id) + ".sbx.test:7070/", "http://[::1]:7070/v1/sandboxes/" + string(id) + "/proxy/8000/"},
		{PreviewOptions{Listen: "127.0.0.1:7070", Scheme: "https", Domain: "preview.example.com", PublicURL: "https://sbx.example.com/"},
			"https://8000-" + string(id) + ".preview.example.com/", "https://sbx.example.com/v1/sandboxes/" + string(id) + "/proxy/8000/"},
		{PreviewOptions{Listen: "127.0.0.1:7070", PublicURL: "http://sbx.example.com:8080/base"},
			"http://8000-" + string(id) + ".localhost:8080/", "http://sbx.example.com:8080/base/v1/sandboxes/" + string(id) + "/proxy/8000/"},
	} {
		got := newPreview(c.opts).urls(id, 8000, acc)
		want := openapi.PreviewURL{Port: 8000, URL: c.url, PathURL: c.pathURL, Token: "tok", Public: true}
		if got != want {
			t.Errorf("urls under %+v = %+v, want %+v", c.opts, got, want)
		}
	}
}

func TestStripQueryAndCookie(t *testing.T) {
	for _, c := range []struct{ raw, value, rest string }{
		{"", "", ""},
		{"a=1&b=2", "", "a=1&b=2"},
		{"sbx_token=abc", "abc", ""},
		{"a=1&sbx_token=abc&b=%20x&sbx_token=def", "abc", "a=1&b=%20x"},
		{"sbx%5Ftoken=abc&a=1", "abc", "a=1"}, // an escaped name is the name
		{"sbx_tokens=abc", "", "sbx_tokens=abc"},
	} {
		value, rest := stripQuery(c.raw, "sbx_token")
		if value != c.value || rest != c.rest {
			t.Errorf("stripQuery(%q) = %q, %q; want %q, %q", c.raw, value, rest, c.value, c.rest)
		}
	}
	h := http.Header{"Cookie": {"a=1; sbx_preview_token=tok; b=2", "sbx_preview_token=x"}}
	stripCookie(h, "sbx_preview_token")
	if got := h.Values("Cookie"); !slices.Equal(got, []string{"a=1; b=2"}) {
		t.Errorf("stripCookie = %q, want the other cookies only", got)
	}
	h = http.Header{"Cookie": {"sbx_preview_token=tok"}}
	if stripCookie(h, "sbx_preview_token"); h.Get("Cookie") != "" {
		t.Errorf("stripCookie of the only cookie left %q", h.Get("Cookie"))
	}
}

// seen is what the upstream of the preview tests saw of one request.
type seen struct {
	Method, Path, RawPath, Query, Host string
	Header                             http.Header
	Body                               string
}

// previewEnv is the API with one sandbox whose port 8000 is served by an
// upstream of the test's own: a real HTTP server on loopback, reached
// through the fake driver's DialPort.
type previewEnv struct {
	*apiEnv
	id       string
	token    string
	mu       sync.Mutex
	seen     []seen
	upstream *httptest.Server
	mux      *http.ServeMux
}

func newPreviewEnv(t *testing.T) *previewEnv {
	t.Helper()
	e := &previewEnv{apiEnv: newAPI(t, Options{Preview: PreviewOptions{Listen: "127.0.0.1:7070"}})}
	e.mux = http.NewServeMux()
	e.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		s := seen{Method: r.Method, Path: r.URL.Path, RawPath: r.URL.RawPath, Query: r.URL.RawQuery, Host: r.Host, Header: r.Header.Clone(), Body: string(b)}
		e.mu.Lock()
		e.seen = append(e.seen, s)
		e.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(s)
	})
	e.upstream = httptest.NewServer(e.mux)
	t.Cleanup(e.upstream.Close)
	e.id = e.sandbox(`{}`)
	e.serve(e.id, map[int]string{8000: e.upstream.Listener.Addr().String()})
	resp, b := e.do("GET", "/v1/sandboxes/"+e.id+"/ports/8000/url", "")
	var u openapi.PreviewURL
	if resp.StatusCode != 200 || json.Unmarshal(b, &u) != nil || u.Token == "" {
		t.Fatalf("GET …/ports/8000/url = %d %s", resp.StatusCode, b)
	}
	e.token = u.Token
	return e
}

// serve makes the ports of sandbox id reach the addresses given; others
// refuse.
func (e *previewEnv) serve(id string, ports map[int]string) {
	e.d.ServePorts(sandbox.ID(id), func(ctx context.Context, port int) (net.Conn, error) {
		var nd net.Dialer
		if addr, ok := ports[port]; ok {
			return nd.DialContext(ctx, "tcp", addr)
		}
		return nd.DialContext(ctx, "tcp", "127.0.0.1:1") // refused
	})
}

func (e *previewEnv) last() seen {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.seen) == 0 {
		e.t.Fatalf("the upstream saw no request")
	}
	return e.seen[len(e.seen)-1]
}

func (e *previewEnv) count() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.seen)
}

// host is the preview host of port of sandbox id.
func host(port int, id string) string { return fmt.Sprintf("%d-%s.localhost:7070", port, id) }

// get sends method path to the daemon with Host host (the API's when
// empty) and headers hdr (name, value, …), without following redirects.
func (e *previewEnv) send(method, host, path, body string, hdr ...string) (*http.Response, []byte) {
	e.t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, e.srv.URL+path, r)
	if err != nil {
		e.t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Add(hdr[i], hdr[i+1])
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		e.t.Fatalf("%s %s (Host %s): %v", method, path, host, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

func TestPreviewByHost(t *testing.T) {
	e := newPreviewEnv(t)
	h := host(8000, e.id)
	resp, b := e.send("GET", h, "/a/b?x=1&y=2", "", openapi.PreviewTokenHeader, e.token, "X-Forwarded-For", "6.6.6.6",
		"Cookie", "app=1", "Connection", "X-Hop", "X-Hop", "1", "Authorization", "Basic YXBwOmFwcA==")
	if resp.StatusCode != 200 {
		t.Fatalf("GET with the token header = %d %s", resp.StatusCode, b)
	}
	s := e.last()
	if s.Path != "/a/b" || s.Query != "x=1&y=2" || s.Host != h {
		t.Errorf("the sandbox saw %s ?%s Host %s; want /a/b ?x=1&y=2 Host %s", s.Path, s.Query, s.Host, h)
	}
	for name, want := range map[string]string{
		openapi.PreviewTokenHeader: "", "X-Hop": "", "Cookie": "app=1",
		"Authorization":     "Basic YXBwOmFwcA==", // the app's own: the host form takes no API key
		"X-Forwarded-For":   "127.0.0.1",          // the client's own claim is dropped
		"X-Forwarded-Host":  h,
		"X-Forwarded-Proto": "http",
	} {
		if got := strings.Join(s.Header.Values(name), ","); got != want {
			t.Errorf("the sandbox saw %s: %q, want %q", name, got, want)
		}
	}

	for _, c := range []struct {
		name   string
		hdr    []string
		status int
		code   string
	}{
		{"no token", nil, 401, "unauthenticated"},
		{"a wrong token", []string{openapi.PreviewTokenHeader, e.token + "x"}, 403, "permission_denied"},
		{"the token twice", []string{openapi.PreviewTokenHeader, e.token, openapi.PreviewTokenHeader, e.token}, 403, "permission_denied"},
		{"an API key", []string{"Authorization", "Bearer " + e.apiEnv.token}, 401, "unauthenticated"},
		{"a wrong cookie", []string{"Cookie", openapi.PreviewCookie + "=nope"}, 401, "unauthenticated"},
	} {
		n := e.count()
		resp, b := e.send("GET", h, "/", "", c.hdr...)
		if resp.StatusCode != c.status || decodeErr(t, b).Code != c.code || e.count() != n {
			t.Errorf("%s: %d %s (the sandbox saw %d requests); want %d %s, none reaching the sandbox", c.name, resp.StatusCode, b, e.count()-n, c.status, c.code)
		}
		if c.status == 401 && resp.Header.Get("WWW-Authenticate") == "" {
			t.Errorf("%s: 401 without WWW-Authenticate", c.name)
		}
	}
	// An API key sent along never reaches the sandbox, though the host form
	// does not take it.
	if resp, b := e.send("GET", h, "/", "", openapi.PreviewTokenHeader, e.token, "Authorization", "Bearer "+e.apiEnv.token); resp.StatusCode != 200 ||
		e.last().Header.Get("Authorization") != "" {
		t.Errorf("the token with an API key = %d %s; the sandbox saw Authorization %q", resp.StatusCode, b, e.last().Header.Get("Authorization"))
	}
	// The token of one sandbox opens no other.
	other := e.sandbox(`{}`)
	e.serve(other, map[int]string{8000: e.upstream.Listener.Addr().String()})
	if resp, b := e.send("GET", host(8000, other), "/", "", openapi.PreviewTokenHeader, e.token); resp.StatusCode != 403 {
		t.Errorf("another sandbox's token = %d %s, want 403", resp.StatusCode, b)
	}
	// An unknown sandbox: the same refusals; with a token of its own, once
	// its sandbox is gone, not found.
	unknown := string(sandbox.NewID())
	for _, hdr := range [][]string{nil, {openapi.PreviewTokenHeader, e.token}} {
		r1, _ := e.send("GET", host(8000, unknown), "/", "", hdr...)
		r2, _ := e.send("GET", host(8000, other), "/", "", hdr...)
		if hdr == nil && (r1.StatusCode != 401 || r2.StatusCode != 401) || hdr != nil && (r1.StatusCode != 403 || r2.StatusCode != 403) {
			t.Errorf("unknown sandbox %v = %d, existing one = %d; want the same refusal", hdr, r1.StatusCode, r2.StatusCode)
		}
	}
	_, ub := e.do("GET", "/v1/sandboxes/"+other+"/ports/8000/url", "")
	var u openapi.PreviewURL
	json.Unmarshal(ub, &u)
	e.do("DELETE", "/v1/sandboxes/"+other, "")
	if resp, b := e.send("GET", host(8000, other), "/", "", openapi.PreviewTokenHeader, u.Token); resp.StatusCode != 404 || decodeErr(t, b).Code != "not_found" {
		t.Errorf("a deleted sandbox's port = %d %s, want 404", resp.StatusCode, b)
	}

	// Other hosts are the API's.
	for _, hh := range []string{"localhost:7070", "127.0.0.1", "abc-" + e.id + ".localhost", "8000-" + e.id + ".example.com", "8000-nope.localhost"} {
		resp, b := e.send("GET", hh, "/v1/health", "")
		var hl openapi.Health
		if resp.StatusCode != 200 || json.Unmarshal(b, &hl) != nil || hl.Status == "" {
			t.Errorf("GET /v1/health with Host %s = %d %s, want the API's answer", hh, resp.StatusCode, b)
		}
	}
	// And the preview host is never the API's, even for its paths.
	if resp, b := e.send("GET", h, "/v1/sandboxes", "", "Authorization", "Bearer "+e.apiEnv.token); resp.StatusCode != 401 {
		t.Errorf("GET /v1/sandboxes on a preview host with the API key = %d %s, want the proxy's 401", resp.StatusCode, b)
	}

	// Each request let in is audited, never with its query.
	recs, err := e.m.Audit(manager.WithKey(t.Context(), e.key), manager.AuditQuery{SandboxID: e.id})
	if err != nil {
		t.Fatal(err)
	}
	var proxied []string
	for _, r := range recs {
		if r.Action == "proxy" {
			proxied = append(proxied, r.Target+" "+r.Detail+" "+r.Outcome)
		}
	}
	if want := []string{"GET :8000/ status=200 via=token ok", "GET :8000/a/b status=200 via=token ok"}; !slices.Equal(proxied, want) {
		t.Errorf("audit of proxied requests = %q, want %q: those let in", proxied, want)
	}
}

func TestPreviewQueryTokenAndCookie(t *testing.T) {
	e := newPreviewEnv(t)
	h := host(8000, e.id)
	n := e.count()
	resp, b := e.send("GET", h, "/page?a=1&sbx_token="+e.token+"&b=2", "")
	if resp.StatusCode != 302 || resp.Header.Get("Location") != "/page?a=1&b=2" || e.count() != n {
		t.Fatalf("GET ?sbx_token = %d Location %q %s, want 302 to the URL without it, nothing forwarded", resp.StatusCode, resp.Header.Get("Location"), b)
	}
	var cookie *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == openapi.PreviewCookie {
			cookie = c
		}
	}
	if cookie == nil || cookie.Value != e.token || !cookie.HttpOnly || cookie.SameSite != http.SameSiteLaxMode || cookie.Path != "/" || cookie.Domain != "" {
		t.Fatalf("Set-Cookie %q: want the token, HttpOnly, SameSite=Lax, Path=/, host-only", resp.Header.Values("Set-Cookie"))
	}
	ck := cookie.Name + "=" + cookie.Value
	// A sandbox's answer cannot set that cookie: one page could otherwise
	// overwrite the cookie that opens another sandbox's preview.
	e.mux.HandleFunc("/setcookie", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Add("Set-Cookie", openapi.PreviewCookie+"=junk; Path=/")
		w.Header().Add("Set-Cookie", "app=2; Path=/")
	})
	if resp, _ := e.send("GET", h, "/setcookie", "", "Cookie", ck); !slices.Equal(resp.Header.Values("Set-Cookie"), []string{"app=2; Path=/"}) {
		t.Errorf("the client got Set-Cookie %q from the sandbox, want app=2 only", resp.Header.Values("Set-Cookie"))
	}
	resp, b = e.send("GET", h, "/page?a=1&b=2", "", "Cookie", "app=1; "+ck)
	if resp.StatusCode != 200 {
		t.Fatalf("GET with the cookie = %d %s", resp.StatusCode, b)
	}
	if s := e.last(); s.Header.Get("Cookie") != "app=1" || s.Query != "a=1&b=2" {
		t.Errorf("the sandbox saw Cookie %q ?%s, want app=1 alone", s.Header.Get("Cookie"), s.Query)
	}
	// The cookie counts for requests from the preview itself only.
	for _, c := range []struct {
		origin string
		status int
	}{
		{"http://" + h, 200},
		{"https://" + h, 200},
		{"http://8000-" + string(sandbox.NewID()) + ".localhost:7070", 403}, // another preview: same site, not same origin
		{"https://evil.example", 403},
		{"null", 403},
	} {
		resp, b := e.send("POST", h, "/form", "x=1", "Cookie", ck, "Origin", c.origin)
		if resp.StatusCode != c.status {
			t.Errorf("POST with the cookie from Origin %s = %d %s, want %d", c.origin, resp.StatusCode, b, c.status)
		}
	}
	// Any other method with the query token goes through, without it.
	resp, b = e.send("POST", h, "/api?sbx_token="+e.token, "body")
	if s := e.last(); resp.StatusCode != 200 || s.Method != "POST" || s.Query != "" || s.Body != "body" {
		t.Errorf("POST ?sbx_token = %d %s; the sandbox saw %s ?%s %q", resp.StatusCode, b, s.Method, s.Query, s.Body)
	}
	if resp, _ := e.send("GET", h, "/?sbx_token=wrong", ""); resp.StatusCode != 403 {
		t.Errorf("GET ?sbx_token=wrong = %d, want 403", resp.StatusCode)
	}
}

func TestPreviewByPath(t *testing.T) {
	e := newPreviewEnv(t)
	prefix := "/v1/sandboxes/" + e.id + "/proxy/8000"
	// The owner's API key, which the sandbox never sees.
	resp, b := e.send("GET", "", prefix+"/a%2Fb/c?x=1", "", "Authorization", "Bearer "+e.apiEnv.token)
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s with the API key = %d %s", prefix, resp.StatusCode, b)
	}
	s := e.last()
	if s.Path != "/a/b/c" || s.RawPath != "/a%2Fb/c" || s.Query != "x=1" || s.Header.Get("Authorization") != "" ||
		s.Header.Get("X-Forwarded-Prefix") != prefix || s.Host != "127.0.0.1:8000" {
		t.Errorf("the sandbox saw %+v; want /a%%2Fb/c ?x=1, no Authorization, X-Forwarded-Prefix %s", s, prefix)
	}
	// The token in the header; the app's own Authorization passes.
	resp, b = e.send("PUT", "", prefix+"/", "data", openapi.PreviewTokenHeader, e.token, "Authorization", "Basic YXBwOmFwcA==")
	if s := e.last(); resp.StatusCode != 200 || s.Path != "/" || s.Body != "data" || s.Header.Get("Authorization") != "Basic YXBwOmFwcA==" {
		t.Errorf("PUT with the token = %d %s; the sandbox saw %+v", resp.StatusCode, b, s)
	}
	// The query token: a cookie scoped to this port's prefix.
	resp, _ = e.send("GET", "", prefix+"/x?sbx_token="+e.token, "")
	if resp.StatusCode != 302 || resp.Header.Get("Location") != prefix+"/x" || !strings.Contains(resp.Header.Get("Set-Cookie"), "Path="+prefix+"/;") {
		t.Errorf("GET ?sbx_token by path = %d Location %q Set-Cookie %q", resp.StatusCode, resp.Header.Get("Location"), resp.Header.Get("Set-Cookie"))
	}
	// Every method.
	for _, m := range append(proxyMethods, "HEAD") {
		if resp, b := e.send(m, "", prefix+"/m", "", openapi.PreviewTokenHeader, e.token); resp.StatusCode != 200 || e.last().Method != m {
			t.Errorf("%s by path = %d %s", m, resp.StatusCode, b)
		}
	}

	// Another key's sandbox is, to this key, an unknown one.
	other, _ := e.newKey("other")
	unknown := string(sandbox.NewID())
	r1, b1 := e.send("GET", "", prefix+"/", "", "Authorization", "Bearer "+other)
	r2, b2 := e.send("GET", "", "/v1/sandboxes/"+unknown+"/proxy/8000/", "", "Authorization", "Bearer "+other)
	d1, d2 := decodeErr(t, b1), decodeErr(t, b2)
	if r1.StatusCode != 404 || r2.StatusCode != 404 || strings.ReplaceAll(d1.Message, e.id, "ID") != strings.ReplaceAll(d2.Message, unknown, "ID") || d1.Code != d2.Code {
		t.Errorf("a foreign sandbox by path = %d %s; an unknown one = %d %s; want the same 404", r1.StatusCode, b1, r2.StatusCode, b2)
	}
	for _, c := range []struct {
		name   string
		hdr    []string
		status int
	}{
		{"no credential", nil, 401},
		{"a wrong key", []string{"Authorization", "Bearer wrong"}, 401},
		{"a wrong token", []string{openapi.PreviewTokenHeader, "wrong"}, 403},
		{"the token as an API key", []string{"Authorization", "Bearer " + e.token}, 401},
	} {
		if resp, b := e.send("GET", "", prefix+"/", "", c.hdr...); resp.StatusCode != c.status {
			t.Errorf("%s by path = %d %s, want %d", c.name, resp.StatusCode, b, c.status)
		}
	}
	// The port's root without its slash is sent to it.
	if resp, _ := e.send("GET", "", prefix+"?q=1", "", openapi.PreviewTokenHeader, e.token); resp.StatusCode/100 != 3 || resp.Header.Get("Location") != prefix+"/?q=1" {
		t.Errorf("GET %s?q=1 = %d Location %q, want a redirect to %s/?q=1", prefix, resp.StatusCode, resp.Header.Get("Location"), prefix)
	}
	if resp, b := e.send("GET", "", "/v1/sandboxes/"+e.id+"/proxy/http/", "", openapi.PreviewTokenHeader, e.token); resp.StatusCode != 400 {
		t.Errorf("a port that is no number = %d %s, want 400", resp.StatusCode, b)
	}
}

// A preview token is no API key: every route but the proxy refuses it,
// however it is sent (SECURITY.md §2.3: "a preview token is accepted by the
// PTY route of its sandbox" is a bug).
func TestPreviewTokenIsNoAPIKey(t *testing.T) {
	e := newPreviewEnv(t)
	sb := "/v1/sandboxes/" + e.id
	for _, rt := range []struct{ method, path, body string }{
		{"GET", sb, ""},
		{"GET", "/v1/sandboxes", ""},
		{"POST", sb + "/exec", `{"command":"true"}`},
		{"GET", sb + "/pty", ""},
		{"GET", sb + "/files/read?path=/etc/passwd", ""},
		{"GET", sb + "/ports/8000/url", ""},
		{"PUT", sb + "/ports/8000", `{"public":true}`},
		{"DELETE", sb, ""},
	} {
		for _, hdr := range [][]string{
			{"Authorization", "Bearer " + e.token},
			{openapi.PreviewTokenHeader, e.token},
			{"Cookie", openapi.PreviewCookie + "=" + e.token},
			{"Sec-WebSocket-Protocol", openapi.PtySubprotocol + ", " + openapi.PtyBearerPrefix + e.token},
		} {
			path := rt.path
			if hdr[0] == "Cookie" {
				path += map[bool]string{true: "&", false: "?"}[strings.Contains(path, "?")] + "sbx_token=" + e.token
			}
			req, _ := http.NewRequest(rt.method, e.srv.URL+path, strings.NewReader(rt.body))
			req.Header.Set(hdr[0], hdr[1])
			resp, err := e.srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 401 {
				t.Errorf("%s %s with the preview token as %s = %d %s, want 401", rt.method, rt.path, hdr[0], resp.StatusCode, b)
			}
		}
	}
	if _, b := e.do("GET", sb, ""); !strings.Contains(string(b), `"running"`) {
		t.Errorf("the sandbox after the attempts: %s", b)
	}
}

func TestPreviewPublicPorts(t *testing.T) {
	e := newPreviewEnv(t)
	h := host(8000, e.id)
	sandboxJSON := func() openapi.Sandbox {
		t.Helper()
		_, b := e.do("GET", "/v1/sandboxes/"+e.id, "")
		var sb openapi.Sandbox
		json.Unmarshal(b, &sb)
		return sb
	}
	if sb := sandboxJSON(); sb.PublicPorts == nil || len(sb.PublicPorts) != 0 {
		t.Errorf("public_ports of a new sandbox = %v, want []", sb.PublicPorts)
	}
	resp, b := e.do("PUT", "/v1/sandboxes/"+e.id+"/ports/8000", `{"public":true}`)
	var u openapi.PreviewURL
	if resp.StatusCode != 200 || json.Unmarshal(b, &u) != nil || !u.Public || u.Token != e.token ||
		u.URL != "http://8000-"+e.id+".localhost:7070/" || u.PathURL != "http://127.0.0.1:7070/v1/sandboxes/"+e.id+"/proxy/8000/" {
		t.Fatalf("PUT public = %d %s", resp.StatusCode, b)
	}
	if resp, b := e.send("GET", h, "/open", ""); resp.StatusCode != 200 {
		t.Errorf("a public port without a token = %d %s", resp.StatusCode, b)
	}
	if resp, _ := e.send("GET", host(8001, e.id), "/", ""); resp.StatusCode != 401 {
		t.Errorf("another port of the sandbox without a token = %d, want 401", resp.StatusCode)
	}
	if resp, b := e.send("GET", h, "/", "", openapi.PreviewTokenHeader, "stale"); resp.StatusCode != 200 || e.last().Header.Get(openapi.PreviewTokenHeader) != "" {
		t.Errorf("a public port with a wrong token = %d %s; want served, the header stripped", resp.StatusCode, b)
	}
	if sb := sandboxJSON(); !slices.Equal(sb.PublicPorts, []int{8000}) {
		t.Errorf("public_ports = %v, want [8000]", sb.PublicPorts)
	}
	_, lb := e.do("GET", "/v1/sandboxes", "")
	var list openapi.SandboxList
	json.Unmarshal(lb, &list)
	if len(list.Sandboxes) != 1 || !slices.Equal(list.Sandboxes[0].PublicPorts, []int{8000}) {
		t.Errorf("list = %s, want public_ports [8000]", lb)
	}
	// Only the owner changes it.
	other, _ := e.newKey("other")
	if resp, b := e.do("PUT", "/v1/sandboxes/"+e.id+"/ports/8000", `{"public":false}`, "Authorization", "Bearer "+other); resp.StatusCode != 404 {
		t.Errorf("another key's PUT = %d %s, want 404", resp.StatusCode, b)
	}
	if resp, b := e.do("GET", "/v1/sandboxes/"+e.id+"/ports/8000/url", "", "Authorization", "Bearer "+other); resp.StatusCode != 404 {
		t.Errorf("another key's GET …/url = %d %s, want 404", resp.StatusCode, b)
	}
	for _, body := range []string{`{}`, `{"public":"yes"}`, `{"public":null}`, `[]`} {
		if resp, b := e.do("PUT", "/v1/sandboxes/"+e.id+"/ports/8000", body); resp.StatusCode != 400 {
			t.Errorf("PUT %s = %d %s, want 400", body, resp.StatusCode, b)
		}
	}
	for _, port := range []string{"0", "65536", "x", "-1"} {
		if resp, b := e.do("GET", "/v1/sandboxes/"+e.id+"/ports/"+port+"/url", ""); resp.StatusCode != 400 || !strings.Contains(decodeErr(t, b).Message, "port") {
			t.Errorf("GET …/ports/%s/url = %d %s, want 400 naming the port", port, resp.StatusCode, b)
		}
	}
	e.do("PUT", "/v1/sandboxes/"+e.id+"/ports/8000", `{"public":false}`)
	if resp, _ := e.send("GET", h, "/", ""); resp.StatusCode != 401 {
		t.Errorf("a port made private again, without a token = %d, want 401", resp.StatusCode)
	}
	if sb := sandboxJSON(); len(sb.PublicPorts) != 0 {
		t.Errorf("public_ports after PUT false = %v", sb.PublicPorts)
	}
}

func TestPreviewUnreachablePort(t *testing.T) {
	e := newPreviewEnv(t)
	for _, c := range []struct {
		host, path string
		port       int
	}{
		{host(9000, e.id), "/", 9000},
		{host(70000, e.id), "/", 70000},
		{host(0, e.id), "/", 0},
		{"", "/v1/sandboxes/" + e.id + "/proxy/9000/", 9000},
		{"", "/v1/sandboxes/" + e.id + "/proxy/70000/", 70000},
	} {
		resp, b := e.send("GET", c.host, c.path, "", openapi.PreviewTokenHeader, e.token)
		d := decodeErr(t, b)
		if resp.StatusCode != 502 || d.Code != "unavailable" || d.SandboxID != e.id || !strings.Contains(d.Message, e.id) ||
			!strings.Contains(d.Message, fmt.Sprintf("port %d", c.port)) {
			t.Errorf("GET %s%s = %d %+v, want 502 naming the sandbox and port %d", c.host, c.path, resp.StatusCode, d, c.port)
		}
	}
}

// rawUpstream serves port 8000 of the sandbox with a TCP server that reads
// one request and writes answer; got receives what it read.
func (e *previewEnv) rawUpstream(answer string) <-chan string {
	e.t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { l.Close() })
	got := make(chan string, 16)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.SetDeadline(time.Now().Add(10 * time.Second))
			var req strings.Builder
			br := bufio.NewReader(c)
			for { // the head, and a chunked body's last chunk if any
				line, err := br.ReadString('\n')
				req.WriteString(line)
				if err != nil || (line == "\r\n" && !strings.Contains(strings.ToLower(req.String()), "transfer-encoding: chunked")) ||
					strings.HasSuffix(req.String(), "\r\n0\r\n\r\n") {
					break
				}
			}
			io.WriteString(c, answer)
			c.Close()
			got <- req.String()
		}
	}()
	e.serve(e.id, map[int]string{8000: l.Addr().String()})
	return got
}

// The sandbox controls its response's headers; a CR in one must not split it
// into two on the way to the client (SECURITY.md AP-08).
func TestPreviewResponseHeaderSplitting(t *testing.T) {
	e := newPreviewEnv(t)
	for _, c := range []struct {
		answer  string
		refused bool // else normalised: served, every header on a line of its own
	}{
		{"HTTP/1.1 200 OK\r\nX-Evil: a\rInjected: yes\r\nContent-Length: 2\r\n\r\nok", true},
		{"HTTP/1.1 200 OK\r\nX-Evil: a\x00b\r\nContent-Length: 2\r\n\r\nok", true},
		{"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nok!", true},
		{"HTTP/1.1 200 OK\r\n X-Folded: yes\r\nContent-Length: 2\r\n\r\nok", true},
		{"HTTP/1.1 200 OK\r\nX-Evil: a\nInjected : yes\r\nContent-Length: 2\r\n\r\nok", false}, // a bare LF ends a line; "Injected " is no name
	} {
		answer := c.answer
		e.rawUpstream(answer)
		conn, err := net.Dial("tcp", e.srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(conn, "GET / HTTP/1.1\r\nHost: %s\r\n%s: %s\r\nConnection: close\r\n\r\n", host(8000, e.id), openapi.PreviewTokenHeader, e.token)
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		raw, _ := io.ReadAll(conn)
		conn.Close()
		head, _, _ := strings.Cut(string(raw), "\r\n\r\n")
		for _, line := range strings.Split(head, "\r\n") {
			if strings.HasPrefix(strings.ToLower(line), "injected") || strings.Contains(line, "\r") || strings.Contains(line, "\n") {
				t.Errorf("answer %q reached the client as a header line %q", answer, line)
			}
		}
		if c.refused && !strings.HasPrefix(string(raw), "HTTP/1.1 502 ") {
			t.Errorf("answer %q: the client got %q, want 502", answer, head)
		}
		if !c.refused && !strings.HasPrefix(string(raw), "HTTP/1.1 200 ") {
			t.Errorf("answer %q: the client got %q, want it served, normalised", answer, head)
		}
	}
}

// Framing is the daemon's: a request with both Content-Length and
// Transfer-Encoding reaches the sandbox framed by one of them only, and
// conflicting lengths never reach it (SECURITY.md AP-08).
func TestPreviewRequestSmuggling(t *testing.T) {
	e := newPreviewEnv(t)
	e.do("PUT", "/v1/sandboxes/"+e.id+"/ports/8000", `{"public":true}`)
	got := e.rawUpstream("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
	h := host(8000, e.id)
	send := func(req string) string {
		t.Helper()
		conn, err := net.Dial("tcp", e.srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		io.WriteString(conn, req)
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		raw, _ := io.ReadAll(conn)
		return string(raw)
	}
	// CL.TE: by Content-Length the body would hide a second request.
	smuggle := "GET /smuggled HTTP/1.1\r\nHost: " + h + "\r\nConnection: close\r\n\r\n"
	resp := send("POST /first HTTP/1.1\r\nHost: " + h + "\r\nContent-Length: " + fmt.Sprint(5+len(smuggle)) +
		"\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + smuggle)
	var upstream []string
	for deadline := time.After(10 * time.Second); len(upstream) < 2; {
		select {
		case r := <-got:
			upstream = append(upstream, r)
		case <-deadline:
			t.Fatalf("the sandbox saw %d requests: %q; the client got %q", len(upstream), upstream, resp)
		}
	}
	first := upstream[0]
	if !strings.HasPrefix(first, "POST /first ") || strings.Contains(strings.ToLower(first), "content-length") ||
		!strings.Contains(strings.ToLower(first), "transfer-encoding: chunked") || strings.Contains(first, "smuggled") {
		t.Errorf("the sandbox's first request = %q; want POST /first framed by chunked alone, holding nothing of the next", first)
	}
	if !strings.HasPrefix(upstream[1], "GET /smuggled ") {
		t.Errorf("the sandbox's second request = %q, want the client's second, on its own", upstream[1])
	}
	// Two lengths that disagree: 400 from the daemon, nothing forwarded.
	resp = send("POST /x HTTP/1.1\r\nHost: " + h + "\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab")
	if !strings.HasPrefix(resp, "HTTP/1.1 400 ") {
		t.Errorf("two Content-Lengths = %q, want 400", resp)
	}
	select {
	case r := <-got:
		t.Errorf("the sandbox got %q", r)
	case <-time.After(200 * time.Millisecond):
	}
}

func TestPreviewStreaming(t *testing.T) {
	e := newPreviewEnv(t)
	release := make(chan struct{})
	e.mux.HandleFunc("/events", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: first\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		io.WriteString(w, "data: last\n\n")
	})
	req, _ := http.NewRequest("GET", e.srv.URL+"/events", nil)
	req.Host = host(8000, e.id)
	req.Header.Set(openapi.PreviewTokenHeader, e.token)
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	// The first event arrives while the sandbox still holds the last.
	if line, err := br.ReadString('\n'); err != nil || line != "data: first\n" {
		t.Fatalf("first line = %q, %v", line, err)
	}
	close(release)
	rest, _ := io.ReadAll(br)
	if string(rest) != "\ndata: last\n\n" {
		t.Errorf("the rest = %q", rest)
	}
}

// TestPreviewFullDuplex: a sandbox's server that answers before it has the
// whole request body (a stream, an upload it judges early) still gets the
// rest, and the client the whole answer.
func TestPreviewFullDuplex(t *testing.T) {
	e := newPreviewEnv(t)
	e.mux.Handle("/duplex", testutil.EarlyAnswer())
	req, err := http.NewRequest("POST", e.srv.URL+"/duplex", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host(8000, e.id)
	req.Header.Set(openapi.PreviewTokenHeader, e.token)
	testutil.CheckFullDuplex(t, e.srv.Client(), req)
}

func TestPreviewWebSocket(t *testing.T) {
	e := newPreviewEnv(t)
	e.mux.HandleFunc("/ws", func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		c.SetReadLimit(1 << 20)
		for {
			typ, msg, err := c.Read(r.Context())
			if err != nil {
				return
			}
			if err := c.Write(r.Context(), typ, append([]byte("echo: "), msg...)); err != nil {
				return
			}
		}
	})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for name, dial := range map[string]func() (*websocket.Conn, error){
		"by host": func() (*websocket.Conn, error) {
			c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(e.srv.URL, "http")+"/ws", &websocket.DialOptions{
				Host: host(8000, e.id), HTTPHeader: http.Header{openapi.PreviewTokenHeader: {e.token}}})
			return c, err
		},
		"by path": func() (*websocket.Conn, error) {
			c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(e.srv.URL, "http")+"/v1/sandboxes/"+e.id+"/proxy/8000/ws", &websocket.DialOptions{
				HTTPHeader: http.Header{"Authorization": {"Bearer " + e.apiEnv.token}}})
			return c, err
		},
	} {
		c, err := dial()
		if err != nil {
			t.Fatalf("%s: dialing the sandbox's WebSocket: %v", name, err)
		}
		c.SetReadLimit(1 << 20)
		for _, msg := range []string{"hello", strings.Repeat("x", 100_000)} {
			if err := c.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
				t.Fatalf("%s: write: %v", name, err)
			}
			_, got, err := c.Read(ctx)
			if err != nil || string(got) != "echo: "+msg {
				t.Fatalf("%s: read %.40q, %v", name, got, err)
			}
		}
		c.Close(websocket.StatusNormalClosure, "")
	}
	// Without a token the upgrade is refused before the sandbox.
	_, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(e.srv.URL, "http")+"/ws", &websocket.DialOptions{Host: host(8000, e.id)})
	if err == nil || resp == nil || resp.StatusCode != 401 {
		t.Errorf("a WebSocket without the token: %v, %v; want 401", resp, err)
	}
	// With the cookie, from another origin: refused (cross-site WebSocket hijacking).
	_, resp, err = websocket.Dial(ctx, "ws"+strings.TrimPrefix(e.srv.URL, "http")+"/ws", &websocket.DialOptions{Host: host(8000, e.id),
		HTTPHeader: http.Header{"Cookie": {openapi.PreviewCookie + "=" + e.token}, "Origin": {"http://evil.example"}}})
	if err == nil || resp == nil || resp.StatusCode != 403 {
		t.Errorf("a WebSocket with the cookie from another origin: %v, %v; want 403", resp, err)
	}
}

// E2B's SDKs reach a sandbox's other ports by its routing headers or its
// host, with the sandbox's access token in their traffic header: the
// preview proxy serves both, the token standing for a preview token.
func TestPreviewByE2BRouting(t *testing.T) {
	e := newPreviewEnv(t)
	e.s.e2b = e2bapi.New(e.m, e2bapi.Options{Log: testutil.Logger(t)})
	tok, err := e.m.AccessToken(t.Context(), sandbox.ID(e.id))
	if err != nil {
		t.Fatal(err)
	}
	other := e.sandbox(`{}`)
	otherTok, err := e.m.AccessToken(t.Context(), sandbox.ID(other))
	if err != nil {
		t.Fatal(err)
	}
	route := []string{"E2b-Sandbox-Id", e.id, "E2b-Sandbox-Port", "8000"}
	resp, b := e.send("GET", "", "/app?q=1", "", append(route, e2bapi.TrafficHeader, tok)...)
	if resp.StatusCode != 200 {
		t.Fatalf("by E2B's headers with the traffic token = %d %s", resp.StatusCode, b)
	}
	if s := e.last(); s.Path != "/app" || s.Query != "q=1" || s.Header.Get(e2bapi.TrafficHeader) != "" {
		t.Errorf("the sandbox saw %s ?%s with the traffic header %q", s.Path, s.Query, s.Header.Get(e2bapi.TrafficHeader))
	}
	resp, b = e.send("GET", host(8000, e.id), "/by-host", "", e2bapi.TrafficHeader, tok)
	if resp.StatusCode != 200 || e.last().Path != "/by-host" {
		t.Errorf("by host with the traffic token = %d %s", resp.StatusCode, b)
	}
	n := e.count()
	for _, c := range []struct {
		hdr    []string
		status int
	}{
		{route, 401},
		{append(route, e2bapi.TrafficHeader, "wrong"), 403},
		{append(route, e2bapi.TrafficHeader, otherTok), 403},
		{append(route, e2bapi.TrafficHeader, e.token), 403}, // the preview token is no access token
	} {
		resp, b := e.send("GET", "", "/app", "", c.hdr...)
		if resp.StatusCode != c.status {
			t.Errorf("%v = %d %s, want %d", c.hdr, resp.StatusCode, b, c.status)
		}
	}
	if e.count() != n {
		t.Errorf("refused requests reached the sandbox")
	}
}
