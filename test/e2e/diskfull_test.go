package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// RL-10: the data dir's filesystem full. A create answers 507
// insufficient_storage naming the data dir, with Retry-After; a running
// sandbox goes on serving; once space is freed creates work again, and the
// store is whole after a restart. The data dir is a small loop-mounted
// filesystem: the host's real disk is never filled.
func TestDataDirFull(t *testing.T) {
	img := filepath.Join(t.TempDir(), "datadir.img")
	dir := filepath.Join(t.TempDir(), "data")
	os.Mkdir(dir, 0o700)
	if out, err := exec.Command("truncate", "-s", "600M", img).CombinedOutput(); err != nil {
		t.Fatalf("truncate: %v %s", err, out)
	}
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", img).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4: %v %s", err, out)
	}
	if out, err := exec.Command("mount", "-o", "loop", img, dir).CombinedOutput(); err != nil {
		t.Fatalf("mount: %v %s", err, out)
	}
	t.Cleanup(func() {
		if poolMounted(dir) {
			syscall.Unmount(poolDir(dir), syscall.MNT_DETACH)
		}
		syscall.Unmount(dir, syscall.MNT_DETACH)
	})
	d := startDaemon(t, dir, "SBX_POOL_SIZE=0")
	a := d.create(map[string]any{"disk_mb": 64})

	filler := filepath.Join(dir, "filler")
	out, _ := exec.Command("dd", "if=/dev/zero", "of="+filler, "bs=1M").CombinedOutput()
	if !strings.Contains(string(out), "No space left") {
		t.Fatalf("filling the data dir: %s", out)
	}
	st, hdr, b := d.apiHeaders("POST", "/v1/sandboxes", map[string]any{})
	if st != 507 || !strings.Contains(string(b), "insufficient_storage") || !strings.Contains(string(b), dir) || hdr.Get("Retry-After") == "" {
		t.Errorf("a create on a full data dir = %d %s (Retry-After %q), want 507 insufficient_storage naming the data dir", st, b, hdr.Get("Retry-After"))
	}
	if r := d.sh(a, "echo alive"); r.Stdout != "alive\n" {
		t.Errorf("the running sandbox on a full data dir: %+v", r)
	}
	os.Remove(filler)
	if st, b := d.api("POST", "/v1/sandboxes", map[string]any{}); st != 201 {
		t.Errorf("a create once space is freed = %d %s", st, b)
	}
	d.stop()
	d = startDaemon(t, dir, "SBX_POOL_SIZE=0")
	defer d.cleanup()
	if st, b := d.api("GET", "/v1/sandboxes/"+a, nil); st != 200 || !strings.Contains(string(b), `"state":"running"`) {
		t.Errorf("the sandbox after a restart = %d %s", st, b)
	}
}
