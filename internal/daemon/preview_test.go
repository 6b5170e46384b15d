package daemon

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sbx.dev/sbx/api/openapi"
	"sbx.dev/sbx/internal/testutil"
)

func TestEnsurePreviewKey(t *testing.T) {
	dir := t.TempDir()
	log := testutil.Logger(t)
	path := filepath.Join(dir, "preview.key")
	first, err := ensurePreviewKey(dir, log)
	if err != nil || len(first) != 32 {
		t.Fatalf("ensurePreviewKey = %x, %v; want 32 bytes", first, err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("preview.key = %v, %v; want mode 0600", fi, err)
	}
	os.Chmod(path, 0o644)
	again, err := ensurePreviewKey(dir, log)
	if err != nil || !bytes.Equal(again, first) {
		t.Errorf("a second start = %x, %v; want the same secret", again, err)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Errorf("preview.key mode = %v after a start, want 0600", fi.Mode())
	}
	for _, bad := range []string{"", "zz\n", strings.Repeat("ab", 16) + "\n"} {
		os.WriteFile(path, []byte(bad), 0o600)
		fresh, err := ensurePreviewKey(dir, log)
		if err != nil || len(fresh) != 32 || bytes.Equal(fresh, first) {
			t.Errorf("over a preview.key of %q: %x, %v; want a new 32-byte secret", bad, fresh, err)
		}
	}
}

// The daemon routes preview hosts to the proxy, forms URLs with the port it
// listens on, and keeps tokens across a restart.
func TestServePreview(t *testing.T) {
	setup(t)
	dir := filepath.Join(t.TempDir(), "data")
	d := start(t, dir)
	key, _ := os.ReadFile(filepath.Join(dir, "admin.key"))
	call := func(method, host, path, body string) (int, []byte) {
		t.Helper()
		req, _ := http.NewRequest(method, d.url+path, strings.NewReader(body))
		if host != "" {
			req.Host = host
		}
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(key)))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	st, b := call("POST", "", "/v1/sandboxes", "{}")
	var sb openapi.Sandbox
	if st != 201 || json.Unmarshal(b, &sb) != nil {
		t.Fatalf("create = %d %s", st, b)
	}
	defer call("DELETE", "", "/v1/sandboxes/"+sb.ID, "")
	urlOf := func() openapi.PreviewURL {
		t.Helper()
		st, b := call("GET", "", "/v1/sandboxes/"+sb.ID+"/ports/3000/url", "")
		var u openapi.PreviewURL
		if st != 200 || json.Unmarshal(b, &u) != nil {
			t.Fatalf("GET …/ports/3000/url = %d %s", st, b)
		}
		return u
	}
	u := urlOf()
	port := d.url[strings.LastIndexByte(d.url, ':'):]
	if u.URL != "http://3000-"+sb.ID+".localhost"+port+"/" || u.PathURL != d.url+"/v1/sandboxes/"+sb.ID+"/proxy/3000/" || u.Token == "" {
		t.Errorf("preview URL = %+v; want the daemon's port %s", u, port)
	}
	// A preview host is the proxy's, whatever the path: the API key opens
	// nothing there, and the fake sandbox has nothing on the port.
	if st, b := call("GET", "3000-"+sb.ID+".localhost"+port, "/v1/health", ""); st != 401 {
		t.Errorf("GET /v1/health on the preview host = %d %s, want the proxy's 401", st, b)
	}
	d.stop(t)
	d = start(t, dir)
	if again := urlOf(); again.Token != u.Token {
		t.Errorf("the token changed across a restart: %q → %q", u.Token, again.Token)
	}
}
