package daemon

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sbx.dev/sbx/internal/secrets"
	"sbx.dev/sbx/internal/testutil"
)

// The daemon makes its secrets key on the first start and keeps it: a
// secret set before a restart opens after it. A key file others may read
// stops the daemon, saying why, and is left as it is.
func TestServeSecrets(t *testing.T) {
	setup(t)
	dir := filepath.Join(t.TempDir(), "data")
	d := start(t, dir)
	keyPath := filepath.Join(dir, secrets.KeyFile)
	fi, err := os.Stat(keyPath)
	if err != nil || fi.Mode().Perm() != 0o600 || fi.Size() != secrets.KeyBytes {
		t.Fatalf("%s = %v, %v; want %d bytes, mode 0600", keyPath, fi, err, secrets.KeyBytes)
	}
	key, _ := os.ReadFile(filepath.Join(dir, "admin.key"))
	call := func(url, method, path, body string) (int, []byte) {
		t.Helper()
		req, _ := http.NewRequest(method, url+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(key)))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	const value = "restart-value-6b0f"
	if st, b := call(d.url, "POST", "/v1/secrets", `{"name":"tok","value":"`+value+`"}`); st != 201 {
		t.Fatalf("POST /v1/secrets = %d %s", st, b)
	}
	// Proxy mode needs a tier that reaches the egress proxy: on the default
	// tier (none) it is refused, naming it.
	call(d.url, "POST", "/v1/secrets", `{"name":"gh","value":"v","mode":"proxy","hosts":["api.github.com"]}`)
	if st, b := call(d.url, "POST", "/v1/sandboxes", `{"secrets":{"GH":"gh"}}`); st != 400 || !bytes.Contains(b, []byte("needs network allowlist or full")) {
		t.Errorf("create with a proxy secret = %d %s; want 400 naming the tier", st, b)
	}
	d.stop(t)
	before, _ := os.ReadFile(keyPath)

	d = start(t, dir)
	st, b := call(d.url, "POST", "/v1/sandboxes", `{"secrets":{"TOKEN":"tok"}}`)
	if st != 201 {
		t.Fatalf("create with a secret set before the restart = %d %s", st, b)
	}
	if after, _ := os.ReadFile(keyPath); !bytes.Equal(before, after) {
		t.Errorf("the secrets key changed across a restart")
	}
	d.stop(t)
	for _, name := range []string{"sbx.db", "sbx.db-wal"} {
		if raw, _ := os.ReadFile(filepath.Join(dir, name)); bytes.Contains(raw, []byte(value)) {
			t.Errorf("%s holds the secret's value in clear", name)
		}
	}

	os.Chmod(keyPath, 0o644)
	var stderr testutil.SyncBuffer
	code := run(context.Background(), args(dir), envFor(nil), io.Discard, &stderr)
	if code == 0 || !strings.Contains(stderr.String(), keyPath) || !strings.Contains(stderr.String(), "mode 0644") {
		t.Errorf("a start with secrets.key mode 0644 = %d, %q; want a failure naming the file and its mode", code, stderr.String())
	}
	if fi, _ := os.Stat(keyPath); fi.Mode().Perm() != 0o644 {
		t.Errorf("the refused key file's mode changed to %v", fi.Mode())
	}
	if got, _ := os.ReadFile(keyPath); !bytes.Equal(got, before) {
		t.Errorf("the refused key file was replaced")
	}
	if proxySecrets(nil) != nil {
		t.Errorf("proxySecrets(nil) is not nil")
	}
}
