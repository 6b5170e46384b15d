package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"sbx.dev/sbx/api/openapi"
	"sbx.dev/sbx/internal/sandbox"
	"sbx.dev/sbx/internal/testutil"
)

const id = "aaaaaaaaaaaaaaaaaaaaaaaaaa"

func serve(t *testing.T, h http.HandlerFunc) *Client {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	c, err := New(srv.URL, "k")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func TestErrorsDecodeToClasses(t *testing.T) {
	for _, tc := range []struct {
		status int
		body   string
		class  error
		msg    string
	}{
		{404, `{"error":{"code":"not_found","message":"get ` + id + `: sandbox not found","op":"get","sandbox_id":"` + id + `"}}`, sandbox.ErrNotFound, "get " + id + ": sandbox not found"},
		{400, `{"error":{"code":"invalid_argument","message":"create: invalid argument: timeout: 0 s is below 1 s","op":"create"}}`, sandbox.ErrInvalid, "create: invalid argument: timeout: 0 s is below 1 s"},
		{401, `{"error":{"code":"unauthenticated","message":"list: unauthenticated: invalid API key","op":"list"}}`, sandbox.ErrUnauthenticated, "list: unauthenticated: invalid API key"},
		{409, `{"error":{"code":"failed_precondition","message":"x"}}`, sandbox.ErrWrongState, "get " + id + ": x"},
		{503, `{"error":{"code":"isolation_unavailable","message":"create: isolation unavailable: no backend","op":"create"}}`, sandbox.ErrIsolation, "create: isolation unavailable: no backend"},
		{501, `{"error":{"code":"unimplemented","message":"pause: unsupported","op":"pause"}}`, errors.ErrUnsupported, "pause: unsupported"},
		{502, `<html>bad gateway</html>`, sandbox.ErrUnavailable, "get " + id + ": HTTP 502: <html>bad gateway</html>"},
		{500, `{"error":{"code":"internal","message":"get: internal error","op":"get"}}`, errInternal, "get: internal error"},
	} {
		c := serve(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Retry-After", "3")
			w.WriteHeader(tc.status)
			io.WriteString(w, tc.body)
		})
		_, err := c.Get(t.Context(), id)
		if !errors.Is(err, tc.class) {
			t.Errorf("%d %s: errors.Is(%v, %v) = false", tc.status, tc.body, err, tc.class)
		}
		var se *sandbox.Error
		if !errors.As(err, &se) {
			t.Errorf("%d: %T is not a *sandbox.Error", tc.status, err)
		}
		if err.Error() != tc.msg {
			t.Errorf("%d: message %q, want %q", tc.status, err.Error(), tc.msg)
		}
		if d, ok := RetryAfter(err); !ok || d != 3*time.Second {
			t.Errorf("%d: RetryAfter = %v %v", tc.status, d, ok)
		}
	}
}

func TestCodesRoundTrip(t *testing.T) {
	for _, c := range codes {
		if got := Code(&sandbox.Error{Op: "x", Err: c.class}); got != c.code {
			t.Errorf("Code(%v) = %s, want %s", c.class, got, c.code)
		}
	}
}

func TestUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	c, _ := New("http://"+addr, "k")
	_, err = c.List(t.Context(), nil)
	if !errors.Is(err, sandbox.ErrUnavailable) || !strings.Contains(err.Error(), addr) || !strings.Contains(err.Error(), "sbx serve") ||
		strings.Contains(err.Error(), "\n") {
		t.Errorf("unreachable daemon: %v", err)
	}
}

func TestUnixSocket(t *testing.T) {
	testutil.CheckLeaks(t)
	sock := filepath.Join(t.TempDir(), "sbx.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/health" {
			http.NotFound(w, r)
			return
		}
		io.WriteString(w, `{"status":"ok","backends":[{"name":"native","available":true,"primary":true}]}`)
	})}
	go srv.Serve(l)
	defer srv.Close()
	c, err := New("unix:"+sock, "")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	h, err := c.Health(t.Context())
	if err != nil || h.Status != "ok" || h.Backends[0].Name != "native" {
		t.Errorf("Health over unix socket = %+v, %v", h, err)
	}
}

// TestHTTPClient checks that the client HTTPClient hands other protocols
// reaches the daemon's socket and sends the key with each request.
func TestHTTPClient(t *testing.T) {
	testutil.CheckLeaks(t)
	sock := filepath.Join(t.TempDir(), "sbx.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s %s %s", r.URL.Path, r.Header.Get("Authorization"), r.Header.Get("User-Agent"))
	})}
	go srv.Serve(l)
	defer srv.Close()
	c, err := New("unix:"+sock, "sbx_secret", WithUserAgent("sbx-test"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	hc := c.HTTPClient()
	defer hc.CloseIdleConnections()
	resp, err := hc.Get(c.URL("/mcp"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if got, want := string(b), "/mcp Bearer sbx_secret sbx-test"; got != want {
		t.Errorf("the server saw %q, want %q", got, want)
	}
	if c.Address() != "unix:"+sock {
		t.Errorf("Address() = %q", c.Address())
	}
}

func TestExecStream(t *testing.T) {
	c := serve(t, func(w http.ResponseWriter, r *http.Request) {
		// The client asks for frames; a daemon that answers NDJSON is read too.
		if r.Header.Get("Accept") != openapi.FramesMediaType || r.URL.Path != "/v1/sandboxes/"+id+"/exec" {
			t.Errorf("request %s %s Accept %q", r.Method, r.URL, r.Header.Get("Accept"))
		}
		io.WriteString(w, `{"type":"started","process_id":"p1","pid":3}`+"\n"+
			`{"type":"stdout","data":"hi\n"}`+"\n"+
			`{"type":"stderr","data":"\ufffd","data_base64":"/w=="}`+"\n"+
			`{"type":"result","process_id":"p1","pid":3,"exit_code":3,"reason":"exited","stdout":"hi\n"}`+"\n")
	})
	var out, errOut []byte
	var types []string
	res, err := c.ExecStream(t.Context(), id, openapi.ExecRequest{Argv: []string{"x"}}, func(ev openapi.Event) error {
		types = append(types, ev.Type)
		switch ev.Type {
		case "stdout":
			out = append(out, EventData(ev)...)
		case "stderr":
			errOut = append(errOut, EventData(ev)...)
		}
		return nil
	})
	if err != nil || res.ExitCode != 3 || res.ProcessID != "p1" || ExitCode(res) != 3 {
		t.Fatalf("ExecStream = %+v, %v", res, err)
	}
	if string(out) != "hi\n" || string(errOut) != "\xff" || strings.Join(types, ",") != "started,stdout,stderr,result" {
		t.Errorf("events %v, stdout %q, stderr %q", types, out, errOut)
	}
}

func TestExecStreamErrors(t *testing.T) {
	for _, tc := range []struct {
		body  string
		class error
	}{
		{`{"type":"started","process_id":"p1","pid":3}` + "\n" + `{"type":"error","error":{"code":"agent_lost","message":"exec ` + id + `: agent lost","op":"exec","sandbox_id":"` + id + `"}}` + "\n", sandbox.ErrAgentLost},
		{`{"type":"started","process_id":"p1","pid":3}` + "\n", sandbox.ErrUnavailable}, // cut short
		{`not json` + "\n", sandbox.ErrUnavailable},
	} {
		c := serve(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, tc.body) })
		_, err := c.ExecStream(t.Context(), id, openapi.ExecRequest{Command: "x"}, nil)
		if !errors.Is(err, tc.class) {
			t.Errorf("stream %q: %v, want %v", tc.body, err, tc.class)
		}
	}
}

func TestExitCode(t *testing.T) {
	for _, tc := range []struct {
		r    openapi.ExecResult
		want int
	}{
		{openapi.ExecResult{Reason: "exited", ExitCode: 0}, 0},
		{openapi.ExecResult{Reason: "exited", ExitCode: 7}, 7},
		{openapi.ExecResult{Reason: "exited", ExitCode: 127}, 127},
		{openapi.ExecResult{Reason: "timeout", ExitCode: 137, Signal: 9}, 124},
		{openapi.ExecResult{Reason: "signaled", Signal: 15, ExitCode: 143}, 143},
		{openapi.ExecResult{Reason: "killed", Signal: 9}, 137},
		{openapi.ExecResult{Reason: "oom"}, 137},
		{openapi.ExecResult{Reason: "agent_lost"}, 125},
		{openapi.ExecResult{Reason: "exited", ExitCode: 300}, 125},
	} {
		if got := ExitCode(&tc.r); got != tc.want {
			t.Errorf("ExitCode(%+v) = %d, want %d", tc.r, got, tc.want)
		}
	}
}

// lazy produces n bytes without holding them.
type lazy struct{ n int64 }

func (l *lazy) Read(p []byte) (int, error) {
	if l.n <= 0 {
		return 0, io.EOF
	}
	k := min(int64(len(p)), l.n)
	for i := range p[:k] {
		p[i] = byte(i)
	}
	l.n -= k
	return int(k), nil
}

// Upload streams: 200 MiB go out chunked, and the heap does not grow with them.
func TestUploadStreams(t *testing.T) {
	const n = 200 << 20
	var got int64
	var chunked bool
	c := serve(t, func(w http.ResponseWriter, r *http.Request) {
		chunked = r.ContentLength == -1 && len(r.TransferEncoding) == 1 && r.TransferEncoding[0] == "chunked"
		if r.URL.Query().Get("mode") != "0755" || r.URL.Query().Get("path") != "/w/big" || r.Header.Get("Content-Type") != "application/octet-stream" {
			t.Errorf("upload request %s %v", r.URL, r.Header)
		}
		got, _ = io.Copy(io.Discard, r.Body)
		fmt.Fprintf(w, `{"path":"/w/big","type":"file","size":%d,"mode":"0755"}`, got)
	})
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	fi, err := c.Upload(t.Context(), id, "/w/big", &lazy{n: n}, 0o755)
	runtime.ReadMemStats(&after)
	if err != nil || fi.Size != n || got != n {
		t.Fatalf("Upload = %+v, %v; server read %d", fi, err, got)
	}
	if !chunked {
		t.Errorf("upload was not sent chunked")
	}
	if grew := int64(after.HeapInuse) - int64(before.HeapInuse); grew > 64<<20 {
		t.Errorf("heap grew by %d MiB during a 200 MiB upload", grew>>20)
	}
}

func TestDownload(t *testing.T) {
	c := serve(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "4")
		w.Write([]byte{0, 1, 0xff, 2})
	})
	var sb strings.Builder
	n, err := c.DownloadTo(t.Context(), id, "/x", &sb)
	if err != nil || n != 4 || sb.String() != "\x00\x01\xff\x02" {
		t.Errorf("DownloadTo = %d %v %q", n, err, sb.String())
	}
}

func TestDiscover(t *testing.T) {
	env := func(m map[string]string) Env {
		return Env{Getenv: func(k string) string { return m[k] }, Euid: 1000}
	}
	c, err := DiscoverEnv(env(map[string]string{"SBX_URL": "http://127.0.0.1:7070", "SBX_API_KEY": "k"}))
	if err != nil || c.base != "http://127.0.0.1:7070" || c.key != "k" {
		t.Errorf("SBX_URL: %+v %v", c, err)
	}
	dir := t.TempDir()
	_, err = DiscoverEnv(env(map[string]string{"SBX_DATA_DIR": dir}))
	if err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "sbx.sock")) || !strings.Contains(err.Error(), "sbx serve") {
		t.Errorf("no daemon: %v", err)
	}
	l, err := net.Listen("unix", filepath.Join(dir, "sbx.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	os.WriteFile(filepath.Join(dir, "admin.key"), []byte("sbx_secret\n"), 0o600)
	c, err = DiscoverEnv(env(map[string]string{"SBX_DATA_DIR": dir}))
	if err != nil || c.key != "sbx_secret" || c.where != "unix:"+filepath.Join(dir, "sbx.sock") {
		t.Errorf("data dir: %+v %v", c, err)
	}
	if got := DataDir(func(k string) string { return map[string]string{"HOME": "/home/u"}[k] }, 1000); got != "/home/u/.local/state/sbx" {
		t.Errorf("DataDir = %s", got)
	}
	if got := DataDir(func(string) string { return "" }, 0); got != "/var/lib/sbx" {
		t.Errorf("DataDir as root = %s", got)
	}
}

func TestContextCancel(t *testing.T) {
	block := make(chan struct{})
	c := serve(t, func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done(); close(block) })
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	_, err := c.Get(ctx, id)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Get with an expired ctx = %v", err)
	}
	<-block
}
