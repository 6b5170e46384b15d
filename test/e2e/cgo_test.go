package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// A daemon built with cgo cannot confine every thread of a sandbox's init: it
// reports the native backend unavailable, saying why and how to fix it, and a
// create fails as isolation_unavailable, not as an internal error.
func TestCgoBuildIsRefused(t *testing.T) {
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("no C compiler: a cgo build cannot be made here")
	}
	bin := filepath.Join(t.TempDir(), "sbx-cgo")
	// sbx_self_agent: the sandboxes run this cgo binary itself, not the
	// static sbx-agent it would embed.
	build := exec.Command("go", "build", "-tags", "sbx_self_agent", "-o", bin, "sbx.dev/sbx/cmd/sbx")
	build.Env = append(os.Environ(), "CGO_ENABLED=1")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building with cgo: %v\n%s", err, out)
	}
	d := startDaemonBin(t, bin, "", "SBX_POOL_SIZE=0")
	defer d.cleanup()
	st, b := d.api("GET", "/v1/health", nil)
	if st != 200 || !strings.Contains(string(b), "CGO_ENABLED=0") || !strings.Contains(string(b), `"available":false`) {
		t.Errorf("health of a cgo build = %d %s, want native unavailable, naming CGO_ENABLED=0", st, b)
	}
	st, b = d.api("POST", "/v1/sandboxes", map[string]any{})
	if st != 503 || !strings.Contains(string(b), "isolation_unavailable") {
		t.Errorf("create on a cgo build = %d %s, want 503 isolation_unavailable", st, b)
	}
}
