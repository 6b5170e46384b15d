package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sbx.dev/sbx/internal/testutil/fakenet"
)

// sdkPerKey is the max_sandboxes_per_key of TestSDKPython's daemon, which
// the Python suite's limit test fills.
const sdkPerKey = 8

// TestSDKPython runs the Python SDK's own tests (sdk/python/tests, unittest)
// against a real daemon: `python3 -m unittest discover -v` in sdk/python,
// with SBX_URL and SBX_API_KEY naming the daemon and PYTHONPATH its src
// layout. The daemon and the Python process run in the host namespace of a
// fake internet, so the suite's network tests reach only servers this test
// made. The settings the suite needs for its network, socket and limit tests
// are all given, so nothing may skip: a skip fails the test.
func TestSDKPython(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Fatalf("python3 is not installed (Debian: apt-get install python3): %v", err)
	}
	dir, err := filepath.Abs("../../sdk/python")
	if err != nil {
		t.Fatal(err)
	}
	inet := fakenet.New(t)
	hosts := filepath.Join(t.TempDir(), "hosts")
	if err := os.WriteFile(hosts, []byte("127.0.0.1 localhost\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d := startDaemonNetns(t, sbxBin, "", inet.HostNS,
		"SBX_NETWORKS=none,allowlist,full",
		"SBX_NETWORK_NAMESERVERS="+fakenet.Nameserver,
		"SBX_NETWORK_HOSTS_FILE="+hosts,
		"SBX_NETWORK_UPSTREAM_CA="+inet.CACertFile,
		fmt.Sprintf("SBX_MAX_SANDBOXES_PER_KEY=%d", sdkPerKey))
	t.Cleanup(d.cleanup)
	// The daemon's TCP listener is in the fake internet's host namespace,
	// where the Python process runs too (d.url names the unix socket). The
	// line that names it reaches d.log just after the harness saw it.
	deadline := time.Now().Add(30 * time.Second)
	m := listenLine.FindStringSubmatch(d.log.String())
	for m == nil {
		if time.Now().After(deadline) {
			t.Fatalf("no listening line in the daemon's log:\n%s", d.log.String())
		}
		time.Sleep(10 * time.Millisecond)
		m = listenLine.FindStringSubmatch(d.log.String())
	}
	sock := filepath.Join(d.dataDir, "sbx.sock")

	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "nsenter", "--net="+inet.HostNS, py, "-m", "unittest", "discover", "-v")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"SBX_URL="+m[1],
		"SBX_API_KEY="+d.key,
		"PYTHONPATH="+filepath.Join(dir, "src"),
		"PYTHONDONTWRITEBYTECODE=1",
		"PYTHONUNBUFFERED=1",
		"SBX_TEST_SOCKET="+sock,
		"SBX_TEST_NET_ALLOWED="+fakenet.AllowedName,
		"SBX_TEST_NET_BLOCKED="+fakenet.BlockedName,
		fmt.Sprintf("SBX_TEST_MAX_SANDBOXES_PER_KEY=%d", sdkPerKey),
	)
	var out bytes.Buffer
	w := io.MultiWriter(t.Output(), &out)
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Run(); err != nil {
		t.Fatalf("python3 -m unittest discover -v in %s: %v", dir, err)
	}
	if strings.Contains(out.String(), "skipped=") {
		t.Errorf("the Python suite skipped tests although every setting they need was given")
	}
	if !strings.Contains(out.String(), "\nOK") {
		t.Errorf("the Python suite did not end with OK")
	}
}
