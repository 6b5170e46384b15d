// This file implements leak checks: on the host (cgroups, mounts, processes,
// network namespaces, directories) and in the test process (goroutines, fds).

package testutil

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

// settle is how long counts may take to return to their baseline: network
// namespace teardown is asynchronous.
const settle = 5 * time.Second

// LeakAudit is a snapshot of sbx's host resources, taken from the host, never by
// asking sbx.
type LeakAudit struct {
	// CgroupPrefix is the relative cgroup path every sbx group of the instance is
	// under ("sbx/<instance>"): groups below it are counted in every hierarchy,
	// and processes whose /proc/<pid>/cgroup names it.
	CgroupPrefix string
	// DataDir is the driver's data directory: mountinfo lines mentioning it, and
	// its entries other than Keep, are counted.
	DataDir string
	// Keep are entries of DataDir that are not per-sandbox ("bin", "layers").
	Keep []string
	base []string
}

// Snapshot records the baseline. Call it before the code under test runs.
func (a *LeakAudit) Snapshot(t testing.TB) {
	t.Helper()
	a.base = a.resources(t)
}

// Check fails t with every resource present now and not at Snapshot, after
// waiting up to 5 s for them to go.
func (a *LeakAudit) Check(t testing.TB) {
	t.Helper()
	var extra []string
	deadline := time.Now().Add(settle)
	for {
		extra = extra[:0]
		for _, r := range a.resources(t) {
			if !slices.Contains(a.base, r) {
				extra = append(extra, r)
			}
		}
		if len(extra) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, r := range extra {
		t.Errorf("leaked on the host: %s", r)
	}
}

func (a *LeakAudit) resources(t testing.TB) []string {
	t.Helper()
	var out []string
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatalf("leak audit: %v", err)
	}
	for _, line := range strings.Split(string(mi), "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		if !ok {
			continue
		}
		f, q := strings.Fields(pre), strings.Fields(post)
		if len(f) < 5 || len(q) < 1 {
			continue
		}
		if a.DataDir != "" && strings.Contains(line, a.DataDir) {
			out = append(out, "mount: "+line)
		}
		if a.CgroupPrefix != "" && (q[0] == "cgroup" || q[0] == "cgroup2") && f[3] == "/" {
			top := filepath.Join(f[4], a.CgroupPrefix)
			filepath.WalkDir(top, func(p string, d os.DirEntry, err error) error {
				// A driver that runs keeps spare groups for its next
				// sandboxes (cgroup.Layout.KeepSpares, cgroup.SparePrefix:
				// this package cannot import it, cgroup's tests import
				// this one); a process in one is counted below.
				if err == nil && d.IsDir() && p != top && !strings.HasPrefix(d.Name(), "spare-") {
					out = append(out, "cgroup: "+p)
				}
				return nil
			})
		}
	}
	if a.CgroupPrefix != "" {
		procs, _ := filepath.Glob("/proc/[0-9]*/cgroup")
		for _, p := range procs {
			b, err := os.ReadFile(p)
			if err == nil && strings.Contains(string(b), "/"+a.CgroupPrefix+"/") {
				comm, _ := os.ReadFile(filepath.Join(filepath.Dir(p), "comm"))
				out = append(out, fmt.Sprintf("process: %s (%s)", filepath.Dir(p), strings.TrimSpace(string(comm))))
			}
		}
	}
	if ents, err := os.ReadDir("/run/netns"); err == nil {
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), "sbx") {
				out = append(out, "netns: "+e.Name())
			}
		}
	}
	if a.DataDir != "" {
		ents, _ := os.ReadDir(a.DataDir)
		for _, e := range ents {
			if !slices.Contains(a.Keep, e.Name()) {
				out = append(out, "data dir entry: "+filepath.Join(a.DataDir, e.Name()))
			}
		}
	}
	return out
}

// CheckLeaks records the test process's goroutines and open fds now, and at
// cleanup fails t if more remain after up to 5 s (a slack of 2 goroutines).
func CheckLeaks(t testing.TB) {
	t.Helper()
	g0, f0 := runtime.NumGoroutine(), countFDs()
	t.Cleanup(func() {
		deadline := time.Now().Add(settle)
		for {
			g, f := runtime.NumGoroutine(), countFDs()
			if g <= g0+2 && f <= f0 {
				return
			}
			if time.Now().After(deadline) {
				buf := make([]byte, 1<<20)
				buf = buf[:runtime.Stack(buf, true)]
				t.Errorf("leak: %d goroutines (was %d), %d fds (was %d)\n%s", g, g0, f, f0, buf)
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
}

func countFDs() int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return 0
	}
	return len(ents) - 1 // the directory's own fd
}
