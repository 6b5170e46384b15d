package agent

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"sbx.dev/sbx/api/agent/boot"
)

// TestWorkPidsV2: on a pure v2 host the workload's pids limit is the work
// leaf's, the directory the agent makes each process's group in
// (CgroupFD): its pids.events tells a fork the limit refused. Where that
// directory has none (a hybrid host's v2 group, whose pids are v1's), there
// is no events file, and no error.
func TestWorkPidsV2(t *testing.T) {
	for _, tc := range []struct {
		name       string
		events     bool
		wantEvents bool
	}{
		{"work leaf with pids.events", true, true},
		{"no pids controller", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if tc.events {
				if err := os.WriteFile(filepath.Join(dir, "pids.events"), []byte("max 3\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Close(fd)
			join, events, err := workPids(boot.AgentConfig{CgroupFD: fd})
			if events >= 0 {
				defer unix.Close(events)
			}
			if err != nil || join != -1 || (events >= 0) != tc.wantEvents {
				t.Fatalf("workPids = %d, %d, %v; want no group to join and an events fd: %v", join, events, err, tc.wantEvents)
			}
			if tc.wantEvents {
				buf := make([]byte, 16)
				n, _ := unix.Pread(events, buf, 0)
				if string(buf[:n]) != "max 3\n" {
					t.Errorf("events fd reads %q, want the work leaf's pids.events", buf[:n])
				}
			}
		})
	}
}
