package agent_test

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"sbx.dev/sbx/api/agent/boot"
	"sbx.dev/sbx/internal/sandbox"
	"sbx.dev/sbx/internal/testutil"
)

// testCgroup makes a cgroup of its own under the v2 hierarchy (the hybrid
// mount at /sys/fs/cgroup/unified, else the pure v2 root) and returns its
// directory fd; it is removed at cleanup.
func testCgroup(t *testing.T, base string) int {
	t.Helper()
	testutil.RequireRoot(t)
	switch {
	case base != "":
		if !exists(filepath.Join(base, "freezer.state")) && !exists(filepath.Join(base, "cgroup.procs")) {
			t.Skipf("requires the cgroup v1 hierarchy %s", base)
		}
	case exists("/sys/fs/cgroup/unified/cgroup.procs"):
		base = "/sys/fs/cgroup/unified"
	case exists("/sys/fs/cgroup/cgroup.controllers"):
		base = "/sys/fs/cgroup"
	default:
		t.Skip("requires a cgroup v2 hierarchy (neither /sys/fs/cgroup/unified nor /sys/fs/cgroup/cgroup.controllers exists)")
	}
	var b [6]byte
	rand.Read(b[:])
	dir := filepath.Join(base, "sbx-test-"+hex.EncodeToString(b[:]))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatalf("making test cgroup: %v", err)
	}
	f, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		f.Close()
		// The agent removes each process's group; the test removes its own.
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			if e.IsDir() {
				t.Errorf("cgroup %s left behind", e.Name())
				waitFor(func() bool { return os.Remove(filepath.Join(dir, e.Name())) == nil })
			}
		}
		if err := os.Remove(dir); err != nil {
			t.Errorf("removing test cgroup: %v", err)
		}
	})
	return int(f.Fd())
}

func exists(p string) bool { _, err := os.Stat(p); return err == nil }

// waitFor polls cond for up to 10 s: the kernel delivers kills and the reaper
// reaps asynchronously.
func waitFor(cond func() bool) bool {
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return cond()
}

// gone reports whether pid no longer exists (or is a zombie nobody reaped yet).
func gone(pid int) bool {
	return syscall.Kill(pid, 0) == syscall.ESRCH
}

func TestTreeKillCgroupV2(t *testing.T) {
	fd := testCgroup(t, "")
	testTreeKill(t, boot.AgentConfig{CgroupFD: fd}, fd)
}

func TestTreeKillFreezerV1(t *testing.T) {
	fd := testCgroup(t, "/sys/fs/cgroup/freezer")
	testTreeKill(t, boot.AgentConfig{FreezerFD: fd}, fd)
}

func testTreeKill(t *testing.T, cfg boot.AgentConfig, fd int) {
	a := startAgent(t, cfg)
	h, err := a.cl.HealthInfo(t.Context())
	if err != nil || !h.TreeKill {
		t.Fatalf("Health = %+v, %v; want tree_kill", h, err)
	}
	pidfile := filepath.Join(a.root, "pidfile")
	shell := fmt.Sprintf(`setsid sh -c 'sleep 1000 & echo $! > %s; wait' & wait`, pidfile)
	res, err := a.cl.Exec(t.Context(), sandbox.ExecRequest{Shell: shell, Timeout: time.Second}, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Reason != "timeout" || res.ExitCode != 124 {
		t.Errorf("result = %s %d, want timeout 124", res.Reason, res.ExitCode)
	}
	b, err := os.ReadFile(pidfile)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	if !waitFor(func() bool { return gone(pid) }) {
		t.Errorf("grandchild %d survived the tree kill", pid)
	}
	// The killed tree's group is left empty (and removed, or kept for the
	// next process).
	groups := func() (names []string, empty bool) {
		empty = true
		ents, _ := os.ReadDir(fmt.Sprintf("/proc/self/fd/%d", fd))
		for _, e := range ents {
			if e.IsDir() {
				names = append(names, e.Name())
				procs, err := os.ReadFile(fmt.Sprintf("/proc/self/fd/%d/%s/cgroup.procs", fd, e.Name()))
				empty = empty && err == nil && len(strings.TrimSpace(string(procs))) == 0
			}
		}
		return names, empty
	}
	var names []string
	if !waitFor(func() bool {
		var empty bool
		names, empty = groups()
		return empty && len(names) <= 1
	}) {
		t.Fatalf("groups after the tree kill: %v, want at most one, empty", names)
	}
	// A process that ends leaves its group to the next: each runs in a group
	// of its own (it says so in /proc/self/cgroup), and five one after the
	// other use at most two groups (the killed tree's, once free, and one
	// more), not five.
	used := map[string]bool{}
	for range 5 {
		// The previous process's group is empty once the kernel is done
		// with it (on v1, the thread that forked into it leaves a moment
		// after the fork, later on a loaded machine): then it is lent on.
		if !waitFor(func() bool { _, empty := groups(); return empty }) {
			t.Fatalf("a group is not empty after its process ended: %v", names)
		}
		res, err := a.cl.Exec(t.Context(), sandbox.ExecRequest{Argv: []string{"cat", "/proc/self/cgroup"}, Timeout: 10 * time.Second}, false, nil)
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("Exec = %+v, %v", res, err)
		}
		in := ""
		for _, line := range strings.Split(string(res.Stdout), "\n") {
			if _, path, ok := strings.Cut(line, "/sbx-test-"); ok {
				if _, g, ok := strings.Cut(path, "/"); ok && g != "" {
					in = g
				}
			}
		}
		if in == "" {
			t.Fatalf("a process outside the agent's groups:\n%s", res.Stdout)
		}
		used[in] = true
	}
	if len(used) > 2 {
		t.Errorf("five processes one after the other ran in groups %v: a finished one's group was not lent to the next", slices.Sorted(maps.Keys(used)))
	}
	if names, _ := groups(); len(names) > 2 {
		t.Errorf("groups after five processes: %v, want at most two", names)
	}
}

// TestTreeKillPgrp shows the fallback: without a cgroup the process group is
// killed, and the agent says it cannot reach setsid'd descendants.
func TestTreeKillPgrp(t *testing.T) {
	a := startAgent(t, boot.AgentConfig{})
	h, err := a.cl.HealthInfo(t.Context())
	if err != nil || h.TreeKill {
		t.Fatalf("Health = %+v, %v; want no tree_kill", h, err)
	}
	pidfile := filepath.Join(a.root, "pidfile")
	res, err := a.cl.Exec(t.Context(), sandbox.ExecRequest{Shell: "sleep 1000 & echo $! > " + pidfile + "; wait", Timeout: 100 * time.Millisecond}, false, nil)
	if err != nil || res.Reason != "timeout" {
		t.Fatalf("Exec = %+v, %v", res, err)
	}
	b, _ := os.ReadFile(pidfile)
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	if pid == 0 || !waitFor(func() bool { return gone(pid) }) {
		t.Errorf("child %d in the process group survived", pid)
	}
}

// A process group name already taken under the sandbox's group (not by this
// agent) is skipped, not an error of the exec.
func TestTreeKillGroupNameTaken(t *testing.T) {
	fd := testCgroup(t, "")
	taken := fmt.Sprintf("/proc/self/fd/%d/p1", fd)
	if err := os.Mkdir(taken, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(taken) })
	a := startAgent(t, boot.AgentConfig{CgroupFD: fd})
	res, err := a.cl.Exec(t.Context(), sandbox.ExecRequest{Argv: []string{"cat", "/proc/self/cgroup"}, Timeout: 10 * time.Second}, false, nil)
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("Exec = %+v, %v", res, err)
	}
	if strings.Contains(string(res.Stdout), "/p1\n") || !strings.Contains(string(res.Stdout), "/p2\n") {
		t.Errorf("the process's cgroups:\n%s\nwant p2, past the taken p1", res.Stdout)
	}
}
