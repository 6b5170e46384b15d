package cgroup

import (
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"sbx.dev/sbx/internal/testutil"
)

func TestParseMountinfo(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		want Layout
		mode string
	}{
		{"hybrid", `30 22 0:27 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
31 30 0:28 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
32 30 0:29 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
34 30 0:31 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
36 30 0:33 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer
38 30 0:35 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
39 30 0:36 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
40 30 0:37 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
`, Layout{V1: map[string]string{"cpu": "/sys/fs/cgroup/cpu", "cpuacct": "/sys/fs/cgroup/cpuacct",
			"memory": "/sys/fs/cgroup/memory", "freezer": "/sys/fs/cgroup/freezer", "pids": "/sys/fs/cgroup/pids"},
			V2: "/sys/fs/cgroup/unified"}, "hybrid"},
		{"pure v2", `29 23 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot
`, Layout{V1: map[string]string{}, V2: "/sys/fs/cgroup"}, "v2"},
		{"v1 co-mounted, subtree bind ignored", `31 30 0:28 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct
34 30 0:31 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory
35 30 0:31 /docker/x /mnt/mem rw - cgroup cgroup rw,memory
36 30 0:32 / /sys/fs/cgroup/with\040space rw - cgroup cgroup rw,pids
`, Layout{V1: map[string]string{"cpu": "/sys/fs/cgroup/cpu,cpuacct", "cpuacct": "/sys/fs/cgroup/cpu,cpuacct",
			"memory": "/sys/fs/cgroup/memory", "pids": "/sys/fs/cgroup/with space"}}, "v1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseMountinfo(strings.NewReader(tc.in))
			if err != nil {
				t.Fatal(err)
			}
			if !maps.Equal(got.V1, tc.want.V1) || got.V2 != tc.want.V2 {
				t.Errorf("ParseMountinfo = %+v, want %+v", got, tc.want)
			}
			if got.Mode() != tc.mode {
				t.Errorf("Mode() = %q, want %q", got.Mode(), tc.mode)
			}
		})
	}
}

// TestFakeV2 drives the pure v2 code path over a plain directory.
func TestFakeV2(t *testing.T) {
	root := t.TempDir()
	l, err := NewFakeV2(root)
	if err != nil {
		t.Fatal(err)
	}
	g, err := l.Create("sbx/inst/box")
	if err != nil {
		t.Fatalf("Create = %v", err)
	}
	for _, dir := range []string{"", "sbx", "sbx/inst"} {
		got := readFake(filepath.Join(root, dir, "cgroup.subtree_control"))
		if got != "+memory +pids +cpu" {
			t.Errorf("%s/cgroup.subtree_control = %q, want the controllers enabled", dir, got)
		}
	}
	if got := readFake(filepath.Join(root, "sbx/inst/box/cgroup.subtree_control")); got != "" {
		t.Errorf("leaf subtree_control = %q, want untouched", got)
	}
	if _, err := l.Create("sbx/inst/box"); err == nil {
		t.Errorf("Create of an existing group succeeded: it must never adopt a group")
	}
	if err := g.SetLimits(Limits{MemoryBytes: 64 << 20, Pids: 32, MilliCPUs: 1500}); err != nil {
		t.Fatalf("SetLimits = %v", err)
	}
	for file, want := range map[string]string{
		"memory.max": "67108864", "memory.swap.max": "0", "pids.max": "32", "cpu.max": "150000 100000",
	} {
		if got := readFake(filepath.Join(g.V2Dir(), file)); got != want {
			t.Errorf("%s = %q, want %q", file, got, want)
		}
	}
	if p, f := g.OOMFile(); p != filepath.Join(g.V2Dir(), "memory.events") || f != "v2" {
		t.Errorf("OOMFile() = %q, %q", p, f)
	}
	if err := g.AddPid(1234); err != nil || readFake(filepath.Join(g.V2Dir(), "cgroup.procs")) != "1234" {
		t.Errorf("AddPid = %v, cgroup.procs = %q", err, readFake(filepath.Join(g.V2Dir(), "cgroup.procs")))
	}
	os.WriteFile(filepath.Join(g.V2Dir(), "cgroup.procs"), nil, 0o644)
	if err := g.Kill(); err != nil || readFake(filepath.Join(g.V2Dir(), "cgroup.kill")) != "1" {
		t.Errorf("Kill = %v; cgroup.kill = %q, want 1", err, readFake(filepath.Join(g.V2Dir(), "cgroup.kill")))
	}
	os.WriteFile(filepath.Join(g.V2Dir(), "memory.events"), []byte("oom 1\noom_kill 2\n"), 0o644)
	os.WriteFile(filepath.Join(g.V2Dir(), "cpu.stat"), []byte("usage_usec 1500\n"), 0o644)
	os.WriteFile(filepath.Join(g.V2Dir(), "memory.current"), []byte("4096\n"), 0o644)
	st, err := g.Stats()
	if want := (Stats{MemoryBytes: 4096, OOMKills: 2, CPUUsage: 1500 * time.Microsecond}); err != nil || st != want {
		t.Errorf("Stats() = %+v, %v; want %+v", st, err, want)
	}
	if err := g.Remove(t.Context()); err != nil {
		t.Fatalf("Remove = %v", err)
	}
	if _, err := os.Stat(g.V2Dir()); !os.IsNotExist(err) {
		t.Errorf("after Remove the group is still there: %v", err)
	}
	if err := g.Remove(t.Context()); err != nil {
		t.Errorf("second Remove = %v, want nil", err)
	}
}

func TestGroupPath(t *testing.T) {
	l := &Layout{V1: map[string]string{}, V2: "/x"}
	for _, bad := range []string{"", "/abs/x", "../x/y", "a/../../b", "single", "a//b"} {
		if _, err := l.Group(bad); err == nil {
			t.Errorf("Group(%q) succeeded, want an error", bad)
		}
	}
}

// TestHostGroup creates, fills, kills and removes a real group on this host,
// with a child group under the v2 directory as the agent makes them, through
// cgroup.kill and, with v2 hidden, through the v1 freezer.
func TestHostGroup(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireCgroup(t, "pids")
	host, err := Detect()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		layout *Layout
	}{
		{"host " + host.Mode(), host},
		{"v1 freezer only", &Layout{V1: host.V1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.layout.V2 == "" && tc.layout.V1["freezer"] == "" {
				t.Skip("no freezer hierarchy")
			}
			rel := fmt.Sprintf("sbx/cgtest%d/g", time.Now().UnixNano()%1e9)
			g, err := tc.layout.Create(rel)
			if err != nil {
				t.Fatalf("Create = %v", err)
			}
			defer func() {
				for _, d := range g.dirs() {
					os.Remove(filepath.Dir(d))
				}
			}()
			if err := g.SetLimits(Limits{MemoryBytes: 64 << 20, Pids: 16, MilliCPUs: 100}); err != nil {
				t.Errorf("SetLimits = %v", err)
			}
			// The shell forks only once it is in the group: it reads a line first.
			cmd := exec.Command("/bin/sh", "-c", "read x; sleep 100 & setsid sleep 100 & wait")
			start, err := cmd.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			go cmd.Wait()
			if err := g.AddPid(cmd.Process.Pid); err != nil {
				t.Fatalf("AddPid = %v", err)
			}
			start.Write([]byte("go\n"))
			var sub string
			if g.V2Dir() != "" { // a child group, as the agent makes one per process
				sub = filepath.Join(g.V2Dir(), "proc1")
				if err := os.Mkdir(sub, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(sub, "cgroup.procs"), []byte(fmt.Sprint(cmd.Process.Pid)), 0); err != nil {
					t.Fatal(err)
				}
			}
			var pids []int
			for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
				if pids, err = g.Procs(); err != nil || len(pids) == 3 { // the shell and its two children
					break
				}
			}
			if err != nil || len(pids) != 3 {
				t.Errorf("Procs() = %v, %v; want 3 pids", pids, err)
			}
			if err := g.Kill(); err != nil {
				t.Errorf("Kill = %v", err)
			}
			if err := g.WaitEmpty(t.Context()); err != nil {
				t.Errorf("WaitEmpty = %v", err)
			}
			if err := g.Remove(t.Context()); err != nil {
				t.Errorf("Remove = %v", err)
			}
			for _, d := range append(g.dirs(), sub) {
				if _, err := os.Stat(d); d != "" && !os.IsNotExist(err) {
					t.Errorf("%s remains after Remove", d)
				}
			}
		})
	}
}

// Where the unified hierarchy's groups kill and freeze, groups are no
// longer made in the v1 freezer hierarchy, nor, where they count CPU time,
// in a v1 cpuacct hierarchy of its own; one already there (an older sbx's)
// is still part of its group, so it is killed and removed with it.
func TestSkipV1WhereV2Serves(t *testing.T) {
	testutil.RequireRoot(t)
	l, err := Detect()
	if err != nil {
		t.Fatal(err)
	}
	if l.V2 == "" || l.V1["freezer"] == "" {
		t.Skip("requires a unified hierarchy beside a v1 freezer")
	}
	parent := fmt.Sprintf("sbx-test-%d", os.Getpid())
	t.Cleanup(func() {
		for _, root := range append(slices.Collect(maps.Values(l.V1)), l.V2) {
			os.Remove(filepath.Join(root, parent))
		}
	})
	if err := l.SkipV1WhereV2Serves(parent); err != nil {
		t.Fatal(err)
	}
	if !l.NoFreezer {
		t.Skip("this kernel's unified groups lack cgroup.kill or cgroup.freeze")
	}
	g, err := l.Create(parent + "/new")
	if err != nil {
		t.Fatal(err)
	}
	if d := g.Dir("freezer"); d != "" || exists(filepath.Join(l.V1["freezer"], parent, "new")) {
		t.Errorf("a new group has a v1 freezer directory (%q)", d)
	}
	if acct := l.V1["cpuacct"]; acct != "" && acct != l.V1["cpu"] {
		if !l.NoCPUAcct {
			t.Errorf("NoCPUAcct is not set beside a unified hierarchy whose groups have cpu.stat")
		}
		if exists(filepath.Join(acct, parent, "new")) {
			t.Errorf("a new group has a v1 cpuacct directory")
		}
		// Its CPU time is still counted, by the unified group: a shell
		// that spins once it is in the group.
		if err := runIn(t, g, "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done"); err != nil {
			t.Fatal(err)
		}
		st, err := g.Stats()
		if err != nil {
			t.Fatal(err)
		}
		if st.CPUUsage <= 0 {
			t.Errorf("Stats().CPUUsage = %v for a group whose shell ran a loop", st.CPUUsage)
		}
	}
	if err := g.Remove(t.Context()); err != nil {
		t.Fatal(err)
	}
	old := filepath.Join(l.V1["freezer"], parent, "old")
	if err := os.MkdirAll(old, 0o755); err != nil {
		t.Fatal(err)
	}
	g, err = l.Group(parent + "/old")
	if err != nil {
		t.Fatal(err)
	}
	if g.Dir("freezer") != old {
		t.Errorf("an existing freezer group is not part of its group: %q, want %q", g.Dir("freezer"), old)
	}
	if err := g.Remove(t.Context()); err != nil {
		t.Fatal(err)
	}
	if exists(old) {
		t.Errorf("%s left after Remove", old)
	}
}
