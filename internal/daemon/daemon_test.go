package daemon

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"sbx.dev/sbx/internal/backend"
	"sbx.dev/sbx/internal/backend/fake"
	"sbx.dev/sbx/internal/config"
	"sbx.dev/sbx/internal/sandbox"
	"sbx.dev/sbx/internal/store"
	"sbx.dev/sbx/internal/testutil"
)

const testBackend = "fake-daemontest"

var registerOnce sync.Once

// setup registers the fake driver under a test-only name.
func setup(t *testing.T) {
	registerOnce.Do(func() { backend.Register(testBackend, fake.Open) })
}

type daemon struct {
	cancel context.CancelFunc
	done   chan int
	stdout *testutil.SyncBuffer
	stderr *testutil.SyncBuffer
	url    string
}

func envFor(extra map[string]string) func(string) string {
	env := map[string]string{"SANDBOX_BACKEND": testBackend}
	for k, v := range extra {
		env[k] = v
	}
	return func(k string) string { return env[k] }
}

func args(dir string) []string {
	return []string{"--data-dir", dir, "--listen", "127.0.0.1:0", "--socket", filepath.Join(dir, "sbx.sock")}
}

var listening = regexp.MustCompile(`^sbx listening on (http://127\.0\.0\.1:[0-9]+) and unix:(.+)$`)

// start runs the daemon on dir in-process and waits for its two stdout lines.
func start(t *testing.T, dir string) *daemon {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	d := &daemon{cancel: cancel, done: make(chan int, 1), stdout: &testutil.SyncBuffer{}, stderr: &testutil.SyncBuffer{}}
	go func() { d.done <- run(ctx, args(dir), envFor(nil), d.stdout, d.stderr) }()
	t.Cleanup(func() { d.stop(t) })
	for range 60_000 { // bounded so a hang fails; nothing is asserted about speed
		select {
		case code := <-d.done:
			d.done <- code
			t.Fatalf("sbx serve exited early with %d:\n%s", code, d.stderr)
		default:
		}
		lines := strings.Split(strings.TrimSpace(d.stdout.String()), "\n")
		if len(lines) == 2 {
			m := listening.FindStringSubmatch(lines[0])
			if m == nil || m[2] != filepath.Join(dir, "sbx.sock") {
				t.Fatalf("first line = %q, want sbx listening on http://127.0.0.1:PORT and unix:%s", lines[0], filepath.Join(dir, "sbx.sock"))
			}
			if want := "admin API key: " + filepath.Join(dir, "admin.key"); lines[1] != want {
				t.Fatalf("second line = %q, want %q", lines[1], want)
			}
			d.url = m[1]
			return d
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("sbx serve printed %q", d.stdout)
	return nil
}

// stop cancels the daemon's ctx and returns its exit code.
func (d *daemon) stop(t *testing.T) int {
	d.cancel()
	code := <-d.done
	d.done <- code
	return code
}

func TestServe(t *testing.T) {
	setup(t)
	prev := runtime.GOMAXPROCS(0)
	t.Cleanup(func() { runtime.GOMAXPROCS(prev) })
	dir := filepath.Join(t.TempDir(), "data") // created by serve
	d := start(t, dir)

	// The daemon narrows its own GOMAXPROCS, unless the operator set one.
	if got, want := runtime.GOMAXPROCS(0), daemonProcs(config.Cores); os.Getenv("GOMAXPROCS") == "" && got != want {
		t.Errorf("GOMAXPROCS while serving = %d, want %d of %d cores", got, want, config.Cores)
	}

	fi, err := os.Stat(dir)
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("data dir mode = %v, %v; want 0700", fi.Mode(), err)
	}
	keyPath := filepath.Join(dir, "admin.key")
	fi, err = os.Stat(keyPath)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("admin.key mode = %v, %v; want 0600", fi, err)
	}
	key, _ := os.ReadFile(keyPath)
	if !strings.HasPrefix(string(key), store.KeyPrefix) {
		t.Errorf("admin.key does not hold an sbx_ key")
	}
	fi, err = os.Stat(filepath.Join(dir, "sbx.sock"))
	if err != nil || fi.Mode().Type() != os.ModeSocket || fi.Mode().Perm() != 0o600 {
		t.Errorf("socket = %v, %v; want a socket, mode 0600", fi, err)
	}
	resp, err := http.Get(d.url + "/v1/health")
	if err != nil {
		t.Errorf("GET %s/v1/health: %v", d.url, err)
	} else {
		resp.Body.Close()
	}

	// A second daemon on the same data directory fails, naming the directory.
	var stderr testutil.SyncBuffer
	if code := run(t.Context(), args(dir), envFor(nil), io.Discard, &stderr); code != 1 || !strings.Contains(stderr.String(), dir) {
		t.Errorf("second sbx serve = exit %d, stderr %q; want exit 1 naming %s", code, stderr.String(), dir)
	}

	t.Logf("daemon log:\n%s", d.stderr)
	if code := d.stop(t); code != 0 {
		t.Fatalf("sbx serve after cancel = exit %d, want 0:\n%s", code, d.stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "sbx.sock")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket left after shutdown: %v", err)
	}

	// A restart keeps the key and the instance name.
	inst, _ := os.ReadFile(filepath.Join(dir, "instance"))
	d = start(t, dir)
	d.stop(t)
	if again, _ := os.ReadFile(keyPath); !bytes.Equal(again, key) {
		t.Errorf("admin.key changed across a restart")
	}
	if again, _ := os.ReadFile(filepath.Join(dir, "instance")); len(inst) == 0 || !bytes.Equal(again, inst) {
		t.Errorf("instance name changed across a restart: %q → %q", inst, again)
	}

	// A lost admin.key is recreated and the old key revoked.
	os.Remove(keyPath)
	d = start(t, dir)
	d.stop(t)
	fresh, err := os.ReadFile(keyPath)
	if err != nil || bytes.Equal(fresh, key) {
		t.Fatalf("admin.key after loss = %q, %v; want a new key", fresh, err)
	}
	st, err := store.Open(t.Context(), filepath.Join(dir, "sbx.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.LookupKey(t.Context(), strings.TrimSpace(string(key))); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("the lost admin key still authenticates: %v", err)
	}
	if _, err := st.LookupKey(t.Context(), strings.TrimSpace(string(fresh))); err != nil {
		t.Errorf("the new admin key does not authenticate: %v", err)
	}
}

func TestDaemonProcs(t *testing.T) {
	for cores, want := range map[int]int{1: 1, 2: 1, 4: 1, 5: 2, 8: 2, 16: 4, 64: 16} {
		if got := daemonProcs(cores); got != want {
			t.Errorf("daemonProcs(%d) = %d, want %d", cores, got, want)
		}
	}
}

func TestCommandLine(t *testing.T) {
	setup(t)
	dir, root := t.TempDir(), t.TempDir()
	for _, tc := range []struct {
		name   string
		args   []string
		env    map[string]string
		code   int
		stdout string
		stderr string
	}{
		{"print config", append(args(dir), "--print-config"), nil, 0, `data_dir = "` + dir + `"`, ""},
		{"unknown flag", []string{"--bogus"}, nil, 2, "", "bogus"},
		{"invalid config", append(args(dir), "--listen", "nope"), map[string]string{"SBX_LOG_LEVEL": "loud"}, 2, "", "log_level"},
		{"template root missing", args(dir), map[string]string{"SBX_TEMPLATES": "py=/nonexistent/sbx-root"}, 2, "",
			"sbx serve: config: templates.py.rootfs: /nonexistent/sbx-root does not exist"},
		{"template shown", append(args(dir), "--print-config"), map[string]string{"SBX_TEMPLATES": "py=" + root}, 0,
			"templates = [\"host\", \"py\"]", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb testutil.SyncBuffer
			code := run(t.Context(), tc.args, envFor(tc.env), &out, &errb)
			if code != tc.code || !strings.Contains(out.String(), tc.stdout) || !strings.Contains(errb.String(), tc.stderr) {
				t.Errorf("sbx serve %q = exit %d, stdout %q, stderr %q; want %d, %q, %q",
					tc.args, code, out.String(), errb.String(), tc.code, tc.stdout, tc.stderr)
			}
		})
	}
}
