package cgroup

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"sbx.dev/sbx/internal/testutil"
)

// TestSpares drives KeepSpares on this host's v1 memory and cpu
// hierarchies: a used group is kept and taken again with its counters and
// limits reset, an OOM-killed one, a busy one and one beyond the cap are
// not, and spares are removed by DropSpares and RemoveSpares.
func TestSpares(t *testing.T) {
	testutil.RequireRoot(t)
	l, err := Detect()
	if err != nil {
		t.Fatal(err)
	}
	if l.V1["memory"] == "" || l.V1["cpu"] == "" {
		t.Skip("no v1 memory and cpu hierarchies: spares are kept there only")
	}
	if err := l.SkipV1WhereV2Serves("sbx"); err != nil {
		t.Fatal(err)
	}
	l.KeepSpares(1)
	parent := fmt.Sprintf("sbx/sparetest%d", time.Now().UnixNano()%1e9)
	t.Cleanup(func() {
		l.DropSpares()
		for _, root := range l.Roots() {
			os.Remove(filepath.Join(root, parent))
		}
	})
	memDir := func(name string) string { return filepath.Join(l.V1["memory"], parent, name) }
	cpuDir := func(name string) string { return filepath.Join(l.V1["cpu"], parent, name) }
	spares := func(root string) []string {
		ents, _ := os.ReadDir(filepath.Join(root, parent))
		var out []string
		for _, e := range ents {
			if e.IsDir() && IsSpare(e.Name()) {
				out = append(out, e.Name())
			}
		}
		return out
	}
	ino := func(dir string) uint64 {
		var st syscall.Stat_t
		if err := syscall.Stat(dir, &st); err != nil {
			t.Fatal(err)
		}
		return st.Ino
	}
	read := func(path string) string {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	create := func(name string) *Group {
		g, err := l.Create(parent + "/" + name)
		if err != nil {
			t.Fatalf("Create(%s) = %v", name, err)
		}
		return g
	}
	remove := func(g *Group) {
		if err := g.WaitEmpty(t.Context()); err != nil {
			t.Fatal(err)
		}
		if err := g.Remove(t.Context()); err != nil {
			t.Fatalf("Remove = %v", err)
		}
	}
	const fill = "x=$(head -c %d /dev/zero | tr '\\0' a); echo ${#x} >/dev/null"

	// A used group is kept, and taken by the next Create.
	a := create("a")
	if err := a.SetLimits(Limits{MemoryBytes: 64 << 20, MilliCPUs: 200}); err != nil {
		t.Fatal(err)
	}
	if err := runIn(t, a, fmt.Sprintf(fill, 20<<20)); err != nil {
		t.Fatalf("filling group a: %v", err)
	}
	st, err := a.Stats()
	if err != nil || st.MemoryPeakBytes < 16<<20 {
		t.Fatalf("group a's peak = %d, %v: want the 20 MiB the shell held", st.MemoryPeakBytes, err)
	}
	aMem, aCPU := ino(memDir("a")), ino(cpuDir("a"))
	remove(a)
	if got := spares(l.V1["memory"]); len(got) != 1 {
		t.Fatalf("memory spares after Remove = %v, want one", got)
	}
	if got := spares(l.V1["cpu"]); len(got) != 1 {
		t.Fatalf("cpu spares after Remove = %v, want one", got)
	}
	for _, d := range a.dirs() {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("%s remains after Remove", d)
		}
	}
	for _, root := range l.Roots() {
		if root != l.V1["memory"] && root != l.V1["cpu"] && root != l.V1["cpuacct"] && len(spares(root)) > 0 {
			t.Errorf("a spare kept in %s, whose groups are delegated", root)
		}
	}

	b := create("b")
	if ino(memDir("b")) != aMem || ino(cpuDir("b")) != aCPU {
		t.Fatalf("group b has new directories: want a's spares taken")
	}
	if got := spares(l.V1["memory"]); len(got) != 0 {
		t.Errorf("memory spares after Create = %v, want none", got)
	}
	st, err = b.Stats()
	if err != nil || st.MemoryPeakBytes >= 16<<20 || st.OOMKills != 0 {
		t.Errorf("reused group's stats = %+v, %v: want its peak reset", st, err)
	}
	// The limits stay until SetLimits writes them, the unlimited ones too.
	if got := read(filepath.Join(memDir("b"), "memory.limit_in_bytes")); got != strconv.Itoa(64<<20) {
		t.Fatalf("taken spare's memory limit = %s, want a's 64 MiB (the control)", got)
	}
	if err := b.SetLimits(Limits{}); err != nil {
		t.Fatalf("SetLimits(none) = %v", err)
	}
	if got, _ := strconv.ParseInt(read(filepath.Join(memDir("b"), "memory.limit_in_bytes")), 10, 64); got < 1<<50 {
		t.Errorf("memory limit after SetLimits(none) = %d, want unlimited", got)
	}
	if got := read(filepath.Join(cpuDir("b"), "cpu.cfs_quota_us")); got != "-1" {
		t.Errorf("cpu quota after SetLimits(none) = %s, want -1", got)
	}

	// An OOM kill is counted for good: that group is removed, not kept.
	if err := b.SetLimits(Limits{MemoryBytes: 32 << 20}); err != nil {
		t.Fatal(err)
	}
	if err := runIn(t, b, fmt.Sprintf(fill, 100<<20)); err == nil {
		t.Fatal("100 MiB in a 32 MiB group: want the shell OOM-killed")
	}
	if st, _ := b.Stats(); st.OOMKills == 0 {
		t.Fatalf("group b counts no OOM kill: %+v", st)
	}
	remove(b)
	if got := spares(l.V1["memory"]); len(got) != 0 {
		t.Errorf("memory spares after removing an OOM-killed group = %v, want none", got)
	}
	c := create("c")
	if slices.Contains(c.reused, memDir("c")) {
		t.Errorf("group c reused %v, want a new memory group (its CPU group may be b's)", c.reused)
	}
	if st, _ := c.Stats(); st.OOMKills != 0 {
		t.Errorf("group c after an OOM-killed b: %d OOM kills, want 0", st.OOMKills)
	}

	// A group with a member is not kept.
	cmd := exec.Command("/bin/sh", "-c", "read x")
	in, _ := cmd.StdinPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if err := c.AddPid(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	if c.keep(memDir("c")) {
		t.Errorf("keep of a group with a member succeeded")
	}
	if _, err := os.Stat(memDir("c")); err != nil {
		t.Errorf("the busy group's directory: %v", err)
	}
	in.Close()
	cmd.Wait()

	// Beyond the cap, groups are removed.
	d := create("d")
	remove(c)
	remove(d)
	if got := spares(l.V1["memory"]); len(got) != 1 {
		t.Errorf("memory spares = %v, want the cap of one", got)
	}
	if _, err := os.Stat(memDir("d")); !os.IsNotExist(err) {
		t.Errorf("group d beyond the cap: %v, want it removed", err)
	}

	// DropSpares removes the layout's own; RemoveSpares those on disk.
	l.DropSpares()
	if got := spares(l.V1["memory"]); len(got) != 0 {
		t.Errorf("memory spares after DropSpares = %v", got)
	}
	e := create("e")
	remove(e)
	if len(spares(l.V1["cpu"])) != 1 {
		t.Fatal("no spare kept for RemoveSpares")
	}
	other, err := Detect()
	if err != nil {
		t.Fatal(err)
	}
	if err := other.RemoveSpares(parent); err != nil {
		t.Errorf("RemoveSpares = %v", err)
	}
	for _, root := range []string{l.V1["memory"], l.V1["cpu"]} {
		if got := spares(root); len(got) != 0 {
			t.Errorf("spares in %s after RemoveSpares = %v", root, got)
		}
	}
}

// runIn runs the shell script in g (the shell joins before it reads its
// go-ahead) and waits for it.
func runIn(t *testing.T, g *Group, script string) error {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", "read x; "+script)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if err := g.AddPid(cmd.Process.Pid); err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("AddPid = %v", err)
	}
	in.Write([]byte("go\n"))
	return cmd.Wait()
}
