package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// previewServers is a sandbox's program in the preview tests, python3's
// standard library only: a file server on 8000 (http.server), a stream on
// 8001 that writes its second line only once /workspace/go exists, a
// WebSocket echo on 8002 (RFC 6455 by hand), and on 8003 an answer whose
// header holds a bare CR.
const previewServers = `
import base64, hashlib, http.server, os, socket, socketserver, struct, threading, time

os.chdir("/workspace")

class Stream(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.end_headers()
        self.wfile.write(b"line 1\n")
        self.wfile.flush()
        while not os.path.exists("/workspace/go"):
            time.sleep(0.05)
        self.wfile.write(b"line 2\n")
    def log_message(self, *a):
        pass

def read_exact(c, n):
    b = b""
    while len(b) < n:
        chunk = c.recv(n - len(b))
        if not chunk:
            raise EOFError
        b += chunk
    return b

class WS(socketserver.BaseRequestHandler):
    def handle(self):
        c = self.request
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = c.recv(4096)
            if not chunk:
                return
            head += chunk
        key = ""
        for line in head.decode("latin-1").split("\r\n"):
            if line.lower().startswith("sec-websocket-key:"):
                key = line.split(":", 1)[1].strip()
        accept = base64.b64encode(hashlib.sha1((key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").encode()).digest()).decode()
        c.sendall(("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                   "Sec-WebSocket-Accept: " + accept + "\r\n\r\n").encode())
        try:
            while True:
                b0, b1 = read_exact(c, 2)
                op, n = b0 & 0x0F, b1 & 0x7F
                if n == 126:
                    n = struct.unpack(">H", read_exact(c, 2))[0]
                elif n == 127:
                    n = struct.unpack(">Q", read_exact(c, 8))[0]
                mask = read_exact(c, 4) if b1 & 0x80 else b"\0\0\0\0"
                data = bytes(x ^ mask[i % 4] for i, x in enumerate(read_exact(c, n)))
                if op == 8:
                    c.sendall(bytes([0x88, len(data)]) + data)
                    return
                if op in (1, 2):
                    out = b"echo: " + data
                    if len(out) < 126:
                        hdr = bytes([0x80 | op, len(out)])
                    elif len(out) < 65536:
                        hdr = bytes([0x80 | op, 126]) + struct.pack(">H", len(out))
                    else:
                        hdr = bytes([0x80 | op, 127]) + struct.pack(">Q", len(out))
                    c.sendall(hdr + out)
        except EOFError:
            return

class Split(socketserver.BaseRequestHandler):
    def handle(self):
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.request.recv(4096)
            if not chunk:
                return
            head += chunk
        self.request.sendall(b"HTTP/1.1 200 OK\r\nX-Evil: a\rInjected: yes\r\nContent-Length: 2\r\n\r\nok")

class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *a):
        pass

class Server(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    daemon_threads = True

for port, handler in ((8000, Quiet), (8001, Stream), (8002, WS), (8003, Split)):
    threading.Thread(target=Server(("127.0.0.1", port), handler).serve_forever, daemon=True).start()
threading.Event().wait()
`

// previewClient sends requests to the daemon's TCP listener with the Host
// header given, without following redirects.
type previewClient struct {
	t *testing.T
	d *daemon
	c *http.Client
}

func (p *previewClient) get(method, host, path string, hdr ...string) (*http.Response, []byte) {
	p.t.Helper()
	req, err := http.NewRequest(method, p.d.url+path, nil)
	if err != nil {
		p.t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Add(hdr[i], hdr[i+1])
	}
	resp, err := p.c.Do(req)
	if err != nil {
		p.t.Fatalf("%s %s (Host %s): %v", method, path, host, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

// Preview URLs on the native backend, network tier none: python3's servers
// in the sandbox reached by host and by path, with the token, its cookie or
// an API key, or none once public (kept across a restart); a stream that
// arrives as written, a WebSocket, a closed port, a header with a bare CR.
func TestPreview(t *testing.T) {
	d := startDaemon(t, "", "SBX_POOL_SIZE=0")
	dir := d.dataDir
	defer func() { d.cleanup() }()
	id := d.create(map[string]any{"network": "none"})
	if r := d.exec(id, map[string]any{"command": "cat > /workspace/servers.py && echo hello from the sandbox > /workspace/hello.txt",
		"stdin": previewServers}); r.ExitCode != 0 {
		t.Fatalf("writing the servers: %+v", r)
	}
	if st, b := d.api("POST", "/v1/sandboxes/"+id+"/exec", map[string]any{"command": "exec python3 /workspace/servers.py",
		"background": true}); st != 202 {
		t.Fatalf("starting the servers = %d %s", st, b)
	}
	var u struct {
		URL, PathURL, Token string
		Public              bool
	}
	st, b := d.api("GET", "/v1/sandboxes/"+id+"/ports/8000/url", nil)
	if st != 200 || json.Unmarshal(b, &struct {
		URL     *string `json:"url"`
		PathURL *string `json:"path_url"`
		Token   *string `json:"token"`
	}{&u.URL, &u.PathURL, &u.Token}) != nil {
		t.Fatalf("GET …/ports/8000/url = %d %s", st, b)
	}
	port := d.url[strings.LastIndexByte(d.url, ':'):]
	host := func(p int) string { return fmt.Sprintf("%d-%s.localhost%s", p, id, port) }
	if u.URL != "http://"+host(8000)+"/" || u.PathURL != d.url+"/v1/sandboxes/"+id+"/proxy/8000/" {
		t.Errorf("preview URLs = %+v", u)
	}
	p := &previewClient{t: t, d: d, c: &http.Client{Timeout: 60 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
	tok := []string{"X-Sbx-Preview-Token", u.Token}

	// The servers start in the background: wait, boundedly, for each port.
	for _, port := range []int{8000, 8001, 8002, 8003} {
		for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			c, err := net.Dial("tcp", d.url[len("http://"):])
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(c, "OPTIONS / HTTP/1.1\r\nHost: %s\r\nX-Sbx-Preview-Token: %s\r\nConnection: close\r\n\r\n", host(port), u.Token)
			c.SetReadDeadline(time.Now().Add(30 * time.Second))
			raw, _ := io.ReadAll(c)
			c.Close()
			if !strings.Contains(string(raw), "nothing listening") {
				break // an answer, whatever it is: something listens
			}
			if time.Now().After(deadline) {
				t.Fatalf("port %d never answered through the proxy: %q\n%s", port, raw, d.log.String())
			}
		}
	}

	t.Run("file by host and by path", func(t *testing.T) {
		p.t = t
		for name, c := range map[string]struct {
			host, path string
			hdr        []string
		}{
			"host, token":  {host(8000), "/hello.txt", tok},
			"path, token":  {"", "/v1/sandboxes/" + id + "/proxy/8000/hello.txt", tok},
			"path, key":    {"", "/v1/sandboxes/" + id + "/proxy/8000/hello.txt", []string{"Authorization", "Bearer " + d.key}},
			"host, query":  {host(8000), "/hello.txt?sbx_token=" + u.Token, nil},
			"path, cookie": {"", "/v1/sandboxes/" + id + "/proxy/8000/hello.txt", []string{"Cookie", "sbx_preview_token=" + u.Token}},
		} {
			resp, b := p.get("GET", c.host, c.path, c.hdr...)
			if name == "host, query" {
				if resp.StatusCode != 302 || resp.Header.Get("Location") != "/hello.txt" || !strings.Contains(resp.Header.Get("Set-Cookie"), "HttpOnly") {
					t.Errorf("%s: %d Location %q Set-Cookie %q, want 302 to /hello.txt with the cookie", name, resp.StatusCode,
						resp.Header.Get("Location"), resp.Header.Get("Set-Cookie"))
				}
				continue
			}
			if resp.StatusCode != 200 || string(b) != "hello from the sandbox\n" {
				t.Errorf("%s: %d %q", name, resp.StatusCode, b)
			}
		}
		for name, c := range map[string]struct {
			hdr    []string
			status int
		}{
			"no token":                {nil, 401},
			"a wrong token":           {[]string{"X-Sbx-Preview-Token", "nope"}, 403},
			"the API key on the host": {[]string{"Authorization", "Bearer " + d.key}, 401},
		} {
			if resp, b := p.get("GET", host(8000), "/hello.txt", c.hdr...); resp.StatusCode != c.status {
				t.Errorf("%s: %d %s, want %d", name, resp.StatusCode, b, c.status)
			}
		}
		// The token is no API key.
		for _, path := range []string{"/v1/sandboxes/" + id, "/v1/sandboxes/" + id + "/pty"} {
			if resp, b := p.get("GET", "", path, "Authorization", "Bearer "+u.Token); resp.StatusCode != 401 {
				t.Errorf("GET %s with the preview token = %d %s, want 401", path, resp.StatusCode, b)
			}
		}
	})

	t.Run("stream", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second) // a buffering proxy would hold line 1: fail, not hang
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "GET", d.url+"/", nil)
		req.Host = host(8001)
		req.Header.Set(tok[0], tok[1])
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		br := bufio.NewReader(resp.Body)
		// The first line arrives while the sandbox holds back the second,
		// which it writes only once the test says so.
		if line, err := br.ReadString('\n'); err != nil || line != "line 1\n" {
			t.Fatalf("first line = %q, %v", line, err)
		}
		if r := d.sh(id, "touch /workspace/go"); r.ExitCode != 0 {
			t.Fatalf("touch: %+v", r)
		}
		if rest, err := io.ReadAll(br); err != nil || string(rest) != "line 2\n" {
			t.Errorf("the rest = %q, %v", rest, err)
		}
	})

	t.Run("websocket", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
		defer cancel()
		c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(d.url, "http")+"/", &websocket.DialOptions{
			Host: host(8002), HTTPHeader: http.Header{tok[0]: {tok[1]}}})
		if err != nil {
			t.Fatalf("dialing the sandbox's WebSocket: %v", err)
		}
		defer c.CloseNow()
		c.SetReadLimit(1 << 20)
		for _, msg := range []string{"hello", strings.Repeat("y", 70_000)} {
			if err := c.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
				t.Fatal(err)
			}
			if _, got, err := c.Read(ctx); err != nil || string(got) != "echo: "+msg {
				t.Fatalf("read %.40q, %v", got, err)
			}
		}
		c.Close(websocket.StatusNormalClosure, "")
	})

	t.Run("closed port", func(t *testing.T) {
		p.t = t
		for _, c := range []struct{ host, path string }{{host(9000), "/"}, {"", "/v1/sandboxes/" + id + "/proxy/9000/"}} {
			resp, b := p.get("GET", c.host, c.path, tok...)
			e := decodeError(t, b)
			// 502 unavailable, not 504: refused at once, not timed out.
			if resp.StatusCode != 502 || e.Error.Code != "unavailable" || !strings.Contains(e.Error.Message, id) ||
				!strings.Contains(e.Error.Message, "nothing listening on port 9000") {
				t.Errorf("GET %s%s = %d %s, want 502 naming the sandbox and port 9000", c.host, c.path, resp.StatusCode, b)
			}
		}
	})

	t.Run("header with a bare CR", func(t *testing.T) {
		c, err := net.Dial("tcp", d.url[len("http://"):])
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: %s\r\nX-Sbx-Preview-Token: %s\r\nConnection: close\r\n\r\n", host(8003), u.Token)
		c.SetReadDeadline(time.Now().Add(30 * time.Second))
		raw, _ := io.ReadAll(c)
		head, _, _ := strings.Cut(string(raw), "\r\n\r\n")
		if !strings.HasPrefix(head, "HTTP/1.1 502 ") || strings.Contains(strings.ToLower(head), "\r\ninjected") {
			t.Errorf("the client got %q, want 502 and no Injected header", head)
		}
	})

	t.Run("public across a restart", func(t *testing.T) {
		p.t = t
		if st, b := d.api("PUT", "/v1/sandboxes/"+id+"/ports/8000", map[string]any{"public": true}); st != 200 {
			t.Fatalf("PUT public = %d %s", st, b)
		}
		if resp, b := p.get("GET", host(8000), "/hello.txt"); resp.StatusCode != 200 {
			t.Errorf("a public port without a token = %d %s", resp.StatusCode, b)
		}
		d.stop()
		d = startDaemon(t, dir, "SBX_POOL_SIZE=0")
		p.d = d
		port = d.url[strings.LastIndexByte(d.url, ':'):]
		if resp, b := p.get("GET", host(8000), "/hello.txt"); resp.StatusCode != 200 || string(b) != "hello from the sandbox\n" {
			t.Errorf("the public port after a restart = %d %s", resp.StatusCode, b)
		}
		_, b := d.api("GET", "/v1/sandboxes/"+id, nil)
		var sb struct {
			PublicPorts []int `json:"public_ports"`
		}
		if json.Unmarshal(b, &sb) != nil || len(sb.PublicPorts) != 1 || sb.PublicPorts[0] != 8000 {
			t.Errorf("public_ports after a restart: %s", b)
		}
		if _, b := d.api("GET", "/v1/sandboxes/"+id+"/ports/8000/url", nil); !strings.Contains(string(b), u.Token) {
			t.Errorf("the token changed across a restart: %s", b)
		}
		d.api("PUT", "/v1/sandboxes/"+id+"/ports/8000", map[string]any{"public": false})
		if resp, _ := p.get("GET", host(8000), "/hello.txt"); resp.StatusCode != 401 {
			t.Errorf("the port made private again, without a token = %d, want 401", resp.StatusCode)
		}
	})

	// The CLI prints a URL a browser opens as is.
	out, errOut, code := d.cli("url", id, "8000")
	if code != 0 || strings.TrimSpace(out) != "http://"+host(8000)+"/?sbx_token="+u.Token {
		t.Errorf("sbx url = %d %q %q", code, out, errOut)
	}
}
