package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// SECURITY.md RL-09, item "sweep orphans": a daemon killed and its data dir
// deleted leaves its sandboxes running with no one to re-adopt them; `sbx
// gc` lists them (--dry-run changes nothing) and removes them, and leaves a
// live daemon's sandboxes alone (control).
func TestGCRemovesOrphans(t *testing.T) {
	live := sharedDaemon(t)
	keep := live.create(nil)
	defer live.api("DELETE", "/v1/sandboxes/"+keep, nil)

	d, id, agent := orphanable(t)
	// The operator deletes the data dir, its disk pool detached first (a
	// mounted directory cannot go); the sandboxes keep their files open.
	pool := poolDir(d.dataDir)
	if err := syscall.Unmount(pool, syscall.MNT_DETACH); err != nil {
		t.Fatalf("detaching %s: %v", pool, err)
	}
	if err := os.RemoveAll(d.dataDir); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(agent, 0); err != nil {
		t.Fatalf("the orphan's agent did not outlive its daemon: %v", err)
	}
	// A new daemon made on the same path is another instance: the orphan is
	// still an orphan, the new one's sandbox is not (control).
	d2 := startDaemon(t, d.dataDir, "SBX_POOL_SIZE=0")
	defer d2.cleanup()
	if d2.instance == d.instance {
		t.Fatalf("the new daemon on the emptied data dir took the old instance %s", d.instance)
	}
	fresh := d2.create(nil)
	defer d2.api("DELETE", "/v1/sandboxes/"+fresh, nil)

	gc := func(args ...string) (orphans []struct{ Instance, ID string }) {
		t.Helper()
		out, err := exec.Command(sbxBin, append([]string{"gc", "--json"}, args...)...).Output()
		if err != nil {
			t.Fatalf("sbx gc %v: %v %s", args, err, out)
		}
		var res struct {
			Orphans []struct{ Instance, ID string } `json:"orphans"`
		}
		if err := json.Unmarshal(out, &res); err != nil {
			t.Fatalf("sbx gc printed %q", out)
		}
		return res.Orphans
	}
	found := func(list []struct{ Instance, ID string }, inst, id string) bool {
		for _, o := range list {
			if o.Instance == inst && o.ID == id {
				return true
			}
		}
		return false
	}
	dry := gc("--dry-run")
	if !found(dry, d.instance, id) {
		t.Fatalf("sbx gc --dry-run = %+v, want sandbox %s of instance %s", dry, id, d.instance)
	}
	if found(dry, live.instance, keep) || found(dry, d2.instance, fresh) {
		t.Fatalf("sbx gc --dry-run lists a live daemon's sandbox: %+v", dry)
	}
	if err := syscall.Kill(agent, 0); err != nil {
		t.Fatalf("--dry-run killed the agent: %v", err)
	}
	if _, err := os.Stat("/sys/fs/cgroup/memory/cgroup.procs"); err == nil && len(spareGroups(d.instance)) == 0 {
		t.Errorf("the orphan daemon left no spare group on a v1 host: gc's removal of them is not tried")
	}
	if got := gc(); !found(got, d.instance, id) {
		t.Fatalf("sbx gc = %+v", got)
	}
	if left := spareGroups(d.instance); len(left) > 0 {
		t.Errorf("spare groups of the orphan instance left by sbx gc: %v", left)
	}
	if !waitUntil(5*time.Second, func() bool { return syscall.Kill(agent, 0) != nil }) {
		t.Errorf("the orphan's agent (pid %d) survived sbx gc", agent)
	}
	groups, _ := filepath.Glob("/sys/fs/cgroup/*/sbx/" + d.instance)
	unified, _ := filepath.Glob("/sys/fs/cgroup/sbx/" + d.instance)
	if len(groups)+len(unified) > 0 {
		t.Errorf("the orphan instance's groups are left: %v %v", groups, unified)
	}
	// Control: the live daemons' sandboxes still serve.
	if r := live.sh(keep, "echo alive"); strings.TrimSpace(r.Stdout) != "alive" {
		t.Errorf("the live daemon's sandbox after sbx gc: %+v", r)
	}
	if r := d2.sh(fresh, "echo alive"); strings.TrimSpace(r.Stdout) != "alive" {
		t.Errorf("the new daemon's sandbox on the reused data dir after sbx gc: %+v", r)
	}
}

// A data dir removed around its mounted disk pool (rm -rf removes all but
// the mount point) leaves the pool mounted; `sbx gc` detaches it with the
// orphan, and leaves a live daemon's pool mounted (control).
func TestGCDetachesGonePool(t *testing.T) {
	live := sharedDaemon(t)
	d, _, agent := orphanable(t)
	pool := poolDir(d.dataDir)
	t.Cleanup(func() { // whatever the outcome, nothing of it stays mounted
		if isMounted(t, pool) {
			syscall.Unmount(pool, syscall.MNT_DETACH)
		}
		os.RemoveAll(d.dataDir)
	})
	os.RemoveAll(d.dataDir) // fails at the mount point, removes the rest
	if !isMounted(t, pool) {
		t.Fatalf("%s is not mounted after the data dir's removal: nothing to test", pool)
	}
	livePool := poolDir(live.dataDir)
	if !isMounted(t, livePool) {
		t.Fatalf("the live daemon's pool %s is not mounted", livePool)
	}
	if out, err := exec.Command(sbxBin, "gc").CombinedOutput(); err != nil {
		t.Fatalf("sbx gc: %v %s", err, out)
	}
	if !waitUntil(5*time.Second, func() bool { return syscall.Kill(agent, 0) != nil }) {
		t.Errorf("the orphan's agent (pid %d) survived sbx gc", agent)
	}
	if isMounted(t, pool) {
		t.Errorf("the gone instance's pool %s is still mounted after sbx gc", pool)
	}
	if !isMounted(t, livePool) {
		t.Errorf("sbx gc detached the live daemon's pool %s", livePool)
	}
}

// orphanable starts a daemon with one sandbox running a background process
// and kills the daemon: the sandbox runs on, its agent's pid returned.
func orphanable(t *testing.T) (*daemon, string, int) {
	t.Helper()
	d := startDaemon(t, "", "SBX_POOL_SIZE=0")
	// Sandboxes made and deleted: on a v1 host their memory and cpu groups
	// stay as the daemon's spares, which gc must remove with the rest. (Not
	// the first's: it charged the page cache of the agent's binary, more
	// than a spare may carry.)
	for _, gone := range []string{d.create(nil), d.create(nil)} {
		if st, b := d.api("DELETE", "/v1/sandboxes/"+gone, nil); st != 204 {
			t.Fatalf("DELETE = %d %s", st, b)
		}
	}
	id := d.create(nil)
	d.exec(id, map[string]any{"command": "sleep 1000", "background": true})
	agent := agentPID(t, d.instance, id)
	d.kill()
	return d, id, agent
}

// isMounted reports whether path is a mount point, by this process's
// mountinfo.
func isMounted(t *testing.T, path string) bool {
	t.Helper()
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(mi), "\n") {
		if f := strings.Fields(line); len(f) > 4 && f[4] == path {
			return true
		}
	}
	return false
}
