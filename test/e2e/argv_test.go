package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A sandbox's environment reaches its commands but no host process's argv,
// which every host user can read (SECURITY.md AP-05): the agent's
// configuration travels in the init stage's plan (native) or a pipe (local).
func TestEnvNotInHostArgv(t *testing.T) {
	for _, backend := range []string{"native", "local"} {
		t.Run(backend, func(t *testing.T) {
			d := startDaemon(t, "", "SANDBOX_BACKEND="+backend, "SBX_POOL_SIZE=0")
			defer d.cleanup()
			secret := "argv-secret-" + randHex(12)
			id := d.create(map[string]any{"env": map[string]string{"SBX_TEST_SECRET": secret}})
			if r := d.sh(id, `echo "$SBX_TEST_SECRET"`); strings.TrimSpace(r.Stdout) != secret {
				t.Fatalf("control: the sandbox's command sees %q, want the value given at create", r.Stdout)
			}
			agentSeen := false
			procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
			for _, p := range procs {
				b, err := os.ReadFile(p)
				if err != nil {
					continue
				}
				if strings.Contains(string(b), secret) {
					t.Errorf("%s holds the sandbox's env value: %q", p, strings.ReplaceAll(string(b), "\x00", " "))
				}
				if strings.Contains(string(b), id) {
					agentSeen = true // the scan reached the sandbox's own processes
				}
			}
			if !agentSeen {
				t.Errorf("no host process names sandbox %s: the scan proves nothing", id)
			}
		})
	}
}
