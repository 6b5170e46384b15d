package e2e

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestSDKGo builds the Go SDK's quick start as another program would, a
// module of its own that imports sbx.dev/sbx/client (sdk/go/quickstart),
// and runs it against a real daemon: create, exec, a streamed exec, a
// streamed upload and download, a tool, an error's class, delete.
func TestSDKGo(t *testing.T) {
	d := startDaemon(t, "", "SBX_POOL_SIZE=0")
	defer d.cleanup()
	cmd := exec.Command("go", "run", ".")
	cmd.Dir = "../../sdk/go/quickstart"
	cmd.Env = append(os.Environ(), "SBX_URL="+d.url, "SBX_API_KEY="+d.key, "GOFLAGS=")
	began := time.Now()
	out, err := cmd.CombinedOutput()
	t.Logf("go run (%s):\n%s", time.Since(began).Round(time.Millisecond), out)
	if err != nil {
		t.Fatalf("the quick start failed: %v", err)
	}
	for _, want := range []string{"exec: exit 0, hello from Linux", "stream: line 3", "files: round trip of 8388608 bytes ok",
		"tool glob: [/workspace/big.bin]", "errors: unknown sandbox is not_found", "deleted "} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the output lacks %q", want)
		}
	}
	if ids := idsOn(d); len(ids) != 0 {
		t.Errorf("sandboxes left: %v", ids)
	}
}
