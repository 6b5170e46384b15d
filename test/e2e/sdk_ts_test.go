package e2e

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"
)

// TestSDKTypeScript runs the TypeScript SDK's own tests (sdk/typescript/test,
// node's test runner) against a daemon of their own that offers every
// network tier: `npm run build` compiles the SDK, then `node --test` drives
// the daemon through it (sandboxes, exec, files, tools, keys, secrets,
// network, preview URLs, and the deepagents backend under deepagents' own
// filesystem tools). Their output streams to the test log; the daemon is
// audited for leaks after.
func TestSDKTypeScript(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed: the TypeScript SDK's tests need node >= 20 and npm (make deps installs npm and node)")
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		t.Skip("npm is not installed: the TypeScript SDK's tests need node >= 20 and npm (make deps installs them)")
	}
	requireNode20(t, node)
	dir, err := filepath.Abs("../../sdk/typescript")
	if err != nil {
		t.Fatal(err)
	}
	for _, pkg := range []string{"typescript", "deepagents"} {
		if _, err := os.Stat(filepath.Join(dir, "node_modules", pkg, "package.json")); err != nil {
			t.Fatalf("the SDK's npm packages are not installed: make deps (or npm ci in sdk/typescript) installs them: %v", err)
		}
	}
	tests, err := filepath.Glob(filepath.Join(dir, "test", "*.test.mjs"))
	if err != nil || len(tests) == 0 {
		t.Fatalf("no test files in %s/test (%v)", dir, err)
	}
	for i, f := range tests {
		tests[i], _ = filepath.Rel(dir, f)
	}

	d := startDaemon(t, "", "SBX_NETWORKS=none,allowlist,full", "SBX_POOL_SIZE=0")
	t.Cleanup(d.cleanup)

	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Minute)
	defer cancel()
	run := func(name string, args ...string) {
		t.Helper()
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "SBX_URL="+d.url, "SBX_API_KEY="+d.key, "SBX_TEST_NETWORK=1", "NO_COLOR=1", "FORCE_COLOR=0")
		out := &lineLog{t: t, prefix: filepath.Base(name) + ": "}
		cmd.Stdout, cmd.Stderr = out, out
		cmd.WaitDelay = 10 * time.Second
		err := cmd.Run()
		out.flush()
		if err != nil {
			t.Fatalf("%s %v in %s: %v", name, args, dir, err)
		}
	}
	run(npm, "run", "build")
	run(node, append([]string{"--test", "--test-concurrency=1", "--test-reporter=spec"}, tests...)...)
}

var nodeVersion = regexp.MustCompile(`^v(\d+)\.`)

// requireNode20 fails t, saying why, when node is older than the SDK supports.
func requireNode20(t *testing.T, node string) {
	t.Helper()
	out, err := exec.Command(node, "--version").Output()
	if err != nil {
		t.Fatalf("node --version: %v", err)
	}
	m := nodeVersion.FindSubmatch(bytes.TrimSpace(out))
	if m == nil {
		t.Fatalf("node --version printed %q", out)
	}
	if major, _ := strconv.Atoi(string(m[1])); major < 20 {
		t.Fatalf("node %s is too old: the TypeScript SDK needs node >= 20", bytes.TrimSpace(out))
	}
}

// lineLog writes what a command prints to the test log a line at a time, as
// it comes.
type lineLog struct {
	t      *testing.T
	prefix string
	mu     sync.Mutex
	buf    []byte // guarded by mu: a line not yet ended
}

func (l *lineLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, p...)
	for {
		i := bytes.IndexByte(l.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		l.t.Log(l.prefix + string(l.buf[:i]))
		l.buf = l.buf[i+1:]
	}
}

// flush logs a last line that did not end.
func (l *lineLog) flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.buf) > 0 {
		l.t.Log(l.prefix + string(l.buf))
		l.buf = nil
	}
}
