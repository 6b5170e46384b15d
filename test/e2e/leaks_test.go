package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"sbx.dev/sbx/internal/isolation/cgroup"
)

var idShape = regexp.MustCompile(`^[a-z2-7]{26}$`)

// auditLeaks checks the host, not the daemon, for anything a sandbox of this
// instance left behind: cgroups, mounts, processes, sandbox directories. It polls
// for a few seconds, because some teardown (network namespaces) is asynchronous.
func auditLeaks(t *testing.T, dataDir, instance string) {
	t.Helper()
	for _, f := range leaksBeyond(dataDir, instance, nil, 5*time.Second) {
		t.Errorf("leak: %s", f)
	}
}

// leaksBeyond polls for up to settle until the host holds nothing of this
// instance beyond baseline (what leaks found when a suite began), and returns
// what is left over.
func leaksBeyond(dataDir, instance string, baseline map[string]bool, settle time.Duration) []string {
	deadline := time.Now().Add(settle)
	for {
		var found []string
		for _, l := range leaks(dataDir, instance) {
			if !baseline[l] {
				found = append(found, l)
			}
		}
		if len(found) == 0 || time.Now().After(deadline) {
			return found
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func leaks(dataDir, instance string) []string {
	var out []string
	if instance != "" {
		hier, _ := filepath.Glob("/sys/fs/cgroup/*/sbx/" + instance)
		if fi, err := os.Stat("/sys/fs/cgroup/sbx/" + instance); err == nil && fi.IsDir() {
			hier = append(hier, "/sys/fs/cgroup/sbx/"+instance)
		}
		for _, h := range hier {
			ents, _ := os.ReadDir(h)
			for _, e := range ents {
				// A running daemon keeps spare groups, reset, for its next
				// creates; a process in one shows below, and after a clean
				// stop none may be left (spareGroups).
				if e.IsDir() && !cgroup.IsSpare(e.Name()) {
					out = append(out, "cgroup "+filepath.Join(h, e.Name()))
				}
			}
		}
		procs, _ := filepath.Glob("/proc/[0-9]*/cgroup")
		for _, p := range procs {
			b, err := os.ReadFile(p)
			cmd, _ := os.ReadFile(filepath.Join(filepath.Dir(p), "cmdline"))
			// A sandbox's process, or the instance's spawner (whose argv
			// names the instance) outliving its daemon.
			if err == nil && strings.Contains(string(b), "/sbx/"+instance+"/") ||
				strings.HasSuffix(string(cmd), "\x00__sbx_spawner\x00"+instance+"\x00") && !daemonParent(filepath.Dir(p)) {
				out = append(out, "process "+filepath.Dir(p)+" "+strings.ReplaceAll(string(cmd), "\x00", " "))
			}
		}
	}
	if mi, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		for _, l := range strings.Split(string(mi), "\n") {
			// The disk pool is the daemon's, not a sandbox's: a sandbox left
			// in it shows as a directory below; poolMounted checks the pool
			// itself once the daemon has stopped.
			if f := strings.Fields(l); len(f) > 4 && (f[4] == poolDir(dataDir) || f[4] == dataDir) {
				continue // the data dir itself may be a test's own mount (RL-10)
			}
			if strings.Contains(l, dataDir) {
				out = append(out, "mount "+l)
			}
		}
	}
	filepath.WalkDir(dataDir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		rel, _ := filepath.Rel(dataDir, path)
		if strings.Count(rel, string(filepath.Separator)) > 3 {
			return filepath.SkipDir
		}
		if d.IsDir() && idShape.MatchString(d.Name()) {
			out = append(out, "directory "+path)
			return filepath.SkipDir
		}
		return nil
	})
	return out
}

// spareGroups lists the spare groups of instance on the host: a daemon that
// stopped cleanly removed its own.
func spareGroups(instance string) []string {
	if instance == "" {
		return nil
	}
	found, _ := filepath.Glob("/sys/fs/cgroup/*/sbx/" + instance + "/" + cgroup.SparePrefix + "*")
	more, _ := filepath.Glob("/sys/fs/cgroup/sbx/" + instance + "/" + cgroup.SparePrefix + "*")
	return append(found, more...)
}

// daemonParent reports whether the parent of the process at procDir is an
// `sbx serve`.
func daemonParent(procDir string) bool {
	cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", ppidOf(procDir)))
	return strings.Contains(string(cmd), "\x00serve\x00")
}

// ppidOf is the parent pid of the process at procDir (/proc/<pid>), 0 if it
// cannot be read. The command name may hold spaces: the fields are read after
// its closing parenthesis.
func ppidOf(procDir string) int {
	b, err := os.ReadFile(filepath.Join(procDir, "stat"))
	i := strings.LastIndexByte(string(b), ')')
	if err != nil || i < 0 {
		return 0
	}
	var state string
	var ppid int
	fmt.Sscan(string(b[i+1:]), &state, &ppid)
	return ppid
}

// removeInstanceGroups removes the (empty, once audited) per-instance parent
// groups a daemon leaves under sbx/, so test runs do not accumulate them.
func removeInstanceGroups(instance string) {
	if instance == "" {
		return
	}
	dirs, _ := filepath.Glob("/sys/fs/cgroup/*/sbx/" + instance)
	dirs = append(dirs, "/sys/fs/cgroup/sbx/"+instance)
	for _, d := range dirs {
		os.Remove(d) // rmdir: only an empty group goes
	}
}

// poolDir is the mount point of the native backend's disk pool of dataDir.
func poolDir(dataDir string) string { return filepath.Join(dataDir, "backends", "native", "disk") }

// poolMounted reports whether dataDir's disk pool is mounted: after a clean
// stop with no sandbox left it must not be.
func poolMounted(dataDir string) bool {
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	for _, l := range strings.Split(string(mi), "\n") {
		if f := strings.Fields(l); len(f) > 4 && f[4] == poolDir(dataDir) {
			return true
		}
	}
	return false
}
