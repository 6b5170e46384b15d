package e2e

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestTimerSlack checks sbx's own processes run with a coarse timer slack
// (the daemon, its spawner, a sandbox's agent but for the thread that forks
// its processes) while the processes a sandbox runs have the kernel's
// default, as on any host.
func TestTimerSlack(t *testing.T) {
	d := sharedDaemon(t)
	id := d.create(nil)
	defer d.api("DELETE", "/v1/sandboxes/"+id, nil)
	if res := d.exec(id, map[string]any{"argv": []string{"cat", "/proc/self/timerslack_ns"}}); res.ExitCode != 0 || strings.TrimSpace(res.Stdout) != "50000" {
		t.Errorf("a sandbox's process: %+v, want slack 50000 (the kernel's default)", res)
	}
	slack := func(pid string) string {
		b, err := os.ReadFile("/proc/" + pid + "/timerslack_ns")
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	daemonPid := d.cmd.Process.Pid
	spawners := childrenWith(daemonPid, "__sbx_spawner")
	if len(spawners) != 1 {
		t.Fatalf("the daemon has %d spawners, want 1", len(spawners))
	}
	agents := childrenWith(spawners[0], id)
	if len(agents) != 1 {
		t.Fatalf("found %d agents of %s under the spawner, want 1", len(agents), id)
	}
	for _, pid := range []int{daemonPid, spawners[0], agents[0]} {
		tasks, err := filepath.Glob(filepath.Join("/proc", strconv.Itoa(pid), "task", "*"))
		if err != nil || len(tasks) == 0 {
			t.Fatalf("threads of %d: %v", pid, err)
		}
		var fine []string // the threads with the kernel's default
		for _, task := range tasks {
			switch got := slack(filepath.Base(task)); got {
			case "1000000":
			case "50000":
				fine = append(fine, filepath.Base(task))
			default:
				t.Errorf("process %d thread %s: slack %s, want 1000000", pid, filepath.Base(task), got)
			}
		}
		// The agent's one exception may be the thread that forks its
		// processes (set back to the default for them, and locked).
		allowed := 0
		if pid == agents[0] {
			allowed = 1
		}
		if len(fine) > allowed {
			t.Errorf("process %d (of %d threads): threads %v have the kernel's default slack, want 1000000", pid, len(tasks), fine)
		}
	}
}
