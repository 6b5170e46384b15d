package httpapi

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"sbx.dev/sbx/internal/sandbox"
)

func TestCheckOrigin(t *testing.T) {
	allowed := []string{"ui.example.com", "*.tools.example.com:8443"}
	for _, c := range []struct {
		origin, host string
		ok           bool
	}{
		{"", "127.0.0.1:7070", true}, // not a browser
		{"http://127.0.0.1:7070", "127.0.0.1:7070", true},
		{"https://SBX.example.com", "sbx.example.com", true},
		{"https://ui.example.com", "127.0.0.1:7070", true},
		{"https://a.tools.example.com:8443", "127.0.0.1:7070", true},
		{"https://a.tools.example.com", "127.0.0.1:7070", false}, // another port
		{"http://evil.example", "127.0.0.1:7070", false},
		{"http://127.0.0.1:7071", "127.0.0.1:7070", false},
		{"null", "127.0.0.1:7070", false}, // a sandboxed iframe, a file: page
		{"http://ui.example.com.evil.example", "127.0.0.1:7070", false},
	} {
		err := checkOrigin(c.origin, c.host, allowed)
		if (err == nil) != c.ok || (err != nil && !errors.Is(err, sandbox.ErrDenied)) {
			t.Errorf("checkOrigin(%q, %q) = %v, want ok %v", c.origin, c.host, err, c.ok)
		}
	}
}

// A terminal's WebSocket and /mcp refuse a page of another origin before
// anything starts, with the key or without; the daemon's own origin and a
// client with no Origin pass.
func TestOriginRoutes(t *testing.T) {
	e := newAPI(t, Options{MCP: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTeapot) })})
	id := e.sandbox(`{}`)
	ws := []string{"Connection", "Upgrade", "Upgrade", "websocket", "Sec-WebSocket-Version", "13", "Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="}
	resp, b := e.do("GET", "/v1/sandboxes/"+id+"/pty?cmd=sh", "", append(ws, "Origin", "http://evil.example")...)
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(b), "evil.example") {
		t.Errorf("terminal from another origin = %d %s", resp.StatusCode, b)
	}
	resp, b = e.do("POST", "/mcp", "{}", "Origin", "http://evil.example")
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("/mcp from another origin = %d %s", resp.StatusCode, b)
	}
	for _, hdr := range [][]string{nil, {"Origin", e.srv.URL}} {
		if resp, b := e.do("POST", "/mcp", "{}", hdr...); resp.StatusCode != http.StatusTeapot {
			t.Errorf("/mcp with %v = %d %s, want the MCP handler's answer", hdr, resp.StatusCode, b)
		}
	}
}
