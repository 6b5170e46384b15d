package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Seccomp profiles are data: an operator's profile in seccomp_profiles_dir,
// named by the policy, is what the sandbox's processes run under; a policy
// naming an unknown profile stops the daemon, naming it.
func TestOperatorSeccompProfile(t *testing.T) {
	profiles := t.TempDir()
	prof := `{"name": "no-chmod", "extends": "default", "rules": [{"names": ["chmod", "fchmod", "fchmodat", "fchmodat2"]}]}`
	if err := os.WriteFile(filepath.Join(profiles, "no-chmod.json"), []byte(prof), 0o644); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, "", "SBX_POOL_SIZE=0", "SBX_SECCOMP_PROFILES_DIR="+profiles, "SBX_SECCOMP_PROFILE=no-chmod")
	defer d.cleanup()
	id := d.create(nil)
	st, b := d.api("GET", "/v1/sandboxes/"+id, nil)
	if st != 200 || !strings.Contains(string(b), `"seccomp_profile":"no-chmod@`) {
		t.Errorf("the sandbox's isolation = %d %s, want seccomp_profile no-chmod@…", st, b)
	}
	if r := d.sh(id, "touch /workspace/f && echo made"); r.Stdout != "made\n" {
		t.Fatalf("control: %+v", r)
	}
	if r := d.sh(id, "chmod 600 /workspace/f 2>&1; echo rc=$?"); !strings.Contains(r.Stdout, "Operation not permitted") {
		t.Errorf("chmod under the no-chmod profile: %q, want EPERM", r.Stdout)
	}

	dir := t.TempDir()
	cmd := exec.Command(sbxBin, "serve", "--data-dir", dir, "--listen", "127.0.0.1:0", "--socket", filepath.Join(dir, "sbx.sock"))
	cmd.Env = append(os.Environ(), "SBX_SECCOMP_PROFILE=nope")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), `unknown seccomp profile "nope"`) {
		t.Errorf("a daemon whose policy names profile nope: %v %s, want it refused, naming it", err, out)
	}
}
