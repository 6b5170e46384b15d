package e2e

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
)

// RL-01: sandboxes and their processes outlive a kill -9 of the daemon and are
// re-adopted on restart.
func TestRestartReadopts(t *testing.T) {
	dir := t.TempDir()
	d := startDaemon(t, dir)
	id := d.create(nil)
	d.sh(id, "echo kept > /workspace/state")
	bg := d.exec(id, map[string]any{"command": "sleep 1000", "background": true})
	if bg.ProcessID == "" {
		t.Fatalf("background exec returned no process id")
	}
	d.kill()

	d = startDaemon(t, dir)
	defer d.cleanup()
	if r := d.sh(id, "cat /workspace/state"); r.Stdout != "kept\n" {
		t.Fatalf("after restart: %+v", r)
	}
	st, b := d.api("GET", "/v1/sandboxes/"+id+"/processes/"+bg.ProcessID, nil)
	var p struct {
		PID   int    `json:"pid"`
		State string `json:"state"`
	}
	json.Unmarshal(b, &p)
	if st != 200 || p.PID != bg.PID || p.State != "running" {
		t.Errorf("background process after restart = %d %s, want pid %d running", st, b, bg.PID)
	}
}

func TestSecondDaemonOnSameDataDirFails(t *testing.T) {
	dir := t.TempDir()
	d := startDaemon(t, dir)
	defer d.cleanup()
	out, err := exec.Command(sbxBin, "serve", "--data-dir", dir, "--listen", "127.0.0.1:0").CombinedOutput()
	if err == nil {
		t.Fatalf("a second sbx serve on %s started", dir)
	}
	if !strings.Contains(string(out), dir) {
		t.Errorf("the error does not name the data dir: %s", out)
	}
}

// The local backend runs on the host and says so everywhere it shows.
func TestLocalBackendIsMarked(t *testing.T) {
	d := startDaemon(t, "", "SANDBOX_BACKEND=local")
	defer d.cleanup()
	id := d.create(nil)
	_, b := d.api("GET", "/v1/sandboxes/"+id, nil)
	var s struct {
		Isolation struct {
			Sandbox bool
			Level   string
			Warning string
		}
	}
	json.Unmarshal(b, &s)
	if s.Isolation.Sandbox || s.Isolation.Level != "none" || !strings.Contains(s.Isolation.Warning, "not a sandbox") {
		t.Errorf("local isolation = %+v", s.Isolation)
	}
	out, _, _ := d.cli("ls")
	if !strings.Contains(out, "NOT A SANDBOX") {
		t.Errorf("sbx ls does not mark the local sandbox:\n%s", out)
	}
	if r := d.sh(id, "echo hi > f && cat f"); r.Stdout != "hi\n" {
		t.Errorf("local exec: %+v", r)
	}
}
